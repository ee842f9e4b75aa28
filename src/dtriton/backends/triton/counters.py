"""Arrival counters that stay zero between launches (``split_mode="last"``,
:mod:`dtriton.plan.last_finish`).

A split kernel absorbing its finishing pass counts the split programs of each tile that have
stored their partials in an int32 counter; the last to arrive resets it to 0. So the counters
need zeroing once, not per call (a fill kernel per call would cost what the finishing kernel's
launch did): each (device, stream) keeps one zero-filled int32 tensor, grown when a launch needs
more, that every such kernel on that stream uses from its start. Launches on one stream run in
order, so each finds the counters zero; launches on different streams use different counters.

A launch on Triton's interpreter that stops partway (an exception in the kernel, Ctrl-C on a slow run)
leaves the counters of the tiles it had started non-zero; the launcher then resets the device's counters
(:func:`reset_counters`), or every later ``"last"`` launch would take an early arrival for the last one
and fold partials not yet written (s16 trial). A GPU launch does not stop partway.
"""

from __future__ import annotations

import torch

__all__ = ["counter_memory", "counter_address", "reset_counters"]

#: (device, stream handle) -> the zero-filled int32 counters of launches on that stream
_POOL: dict[tuple, torch.Tensor] = {}


def counter_memory(device: torch.device, numel: int, stream: int | None = None) -> torch.Tensor:
    """At least ``numel`` int32 counters, all zero, for launches on ``stream`` of ``device`` (a CUDA
    stream handle; None: the device's current stream, 0 on the CPU). The same memory comes back
    for every call of that (device, stream), grown (a fresh zero-filled tensor, twice the size)
    when ``numel`` exceeds it; kernels using it must leave it zero."""
    if stream is None:
        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device.type, device.index, stream)
    t = _POOL.get(key)
    if t is None or t.numel() < numel:
        t = _POOL[key] = torch.zeros(max(numel, 2 * (t.numel() if t is not None else 0), 64), dtype=torch.int32,
                                     device=device)
    return t


def counter_address(device: torch.device, numel: int, stream: int) -> int:
    """The address of :func:`counter_memory` ``(device, numel, stream)`` (the fast launcher's per-call read)."""
    return counter_memory(device, numel, stream).data_ptr()


def reset_counters(device_type: str) -> None:
    """Zero every counter of the devices of type ``device_type`` ("cpu": the interpreter's), after a
    launch that stopped partway."""
    for key, t in _POOL.items():
        if key[0] == device_type:
            t.zero_()
