"""Worked examples that ship with dtriton (the DiffusionNet showcase)."""
