"""Temporary shim: the heuristic moved to :mod:`dtriton.schedule.heuristics` (the lead removes
this module once every import names the new path)."""

from .schedule.heuristics import complete_schedule, contractions, next_pow2, sm_count

__all__ = ["complete_schedule", "contractions", "next_pow2", "sm_count"]
