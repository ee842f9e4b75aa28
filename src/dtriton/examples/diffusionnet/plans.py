"""The kernels dtriton plans for the diffusion layer's calls on a GPU, computed on any machine.

A call's plan depends on its shapes, dtypes, strides and device only, never on the values, so the
plan of a GPU call can be computed on a CPU-only machine by telling the binding it is on CUDA (the
heuristic's GPU rules and the plan's GPU decisions then apply; nothing is compiled or run). Used
by ``bench/diffusion.py --plans`` and by the tests that pin the layer's plans (kernel count, split,
split mode, dot precision)::

    from dtriton.examples.diffusionnet.plans import layer_plans, format_plans
    print(format_plans(layer_plans(100_000, 128, 128)))
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

import dtriton as dt
from dtriton.grad import augmented_forward
from dtriton.library import spatial_diffusion
from dtriton.plan import Program, call_spec, plan_program
from dtriton.schedule import complete_schedule

from .layer import spatial_diffusion_backward, spectral_stage

__all__ = ["gpu_program", "describe_program", "layer_plans", "format_plans", "empty_args"]


def empty_args(alg: dt.Algorithm, sizes: dict[str, int], dtype: torch.dtype = torch.float32) -> tuple:
    """Uninitialised contiguous CPU tensors for every tensor parameter of ``alg``, shaped by its
    dims' names in ``sizes`` (``{"V": 100000, "K": 128, "C": 128}``). Raises KeyError naming a
    dim missing from ``sizes``."""
    out = []
    for p in alg.params:
        dims = getattr(p, "dims", None)
        if dims is None:
            raise TypeError(f"{alg.name}: parameter {p.name!r} is not a tensor; pass the arguments yourself")
        missing = [d for d in dims if d not in sizes]
        if missing:
            raise KeyError(f"{alg.name}: parameter {p.name!r} has dims {dims}; sizes lacks {missing}")
        out.append(torch.empty(*(sizes[d] for d in dims), dtype=dtype))
    return tuple(out)


def gpu_program(alg: dt.Algorithm, args: Sequence[Any], schedule: dt.Schedule | None = None) -> tuple[dt.Schedule, Program]:
    """The complete schedule and the :class:`~dtriton.plan.Program` a call ``alg(*args)`` runs on a
    CUDA device (pointer access; the heuristic when ``schedule`` is None, else it completed).
    ``args`` may live on the CPU: the binding is told it is on CUDA. Raises what binding and
    planning raise (:class:`~dtriton.ShapeError`, :class:`~dtriton.ScheduleError`)."""
    b = alg.bind(tuple(args))
    b.device = torch.device("cuda")
    sched = complete_schedule(alg, schedule, b)
    if sched.access == "tma" and (schedule is None or schedule.access is None):
        sched = sched.replace(access="pointer")   # TMA facts need the device's pointers
    spec = call_spec(alg, b, tuple(args), False)
    return sched, plan_program(alg, sched, b, spec)


def describe_program(prog: Program) -> list[dict]:
    """One dict per kernel of ``prog``, in launch order: ``name``, ``grid`` (axis: block),
    ``split`` ((axis, factor) or None), ``writes`` (buffer/output: "store", "atomic" or
    "partials"), ``dots`` (list of (m, n, precision)), ``num_warps``, ``num_stages``."""
    out = []
    for k in prog.kernels:
        writes = {}
        for st in k.stores:
            b = prog.buffers.get(st.target)
            writes[st.target] = ("atomic" if st.atomic else "partials" if st.partial_axis or (b and b.partials)
                                 else "store")
        out.append(dict(name=k.name, grid={a: k.axes[a].block for a in k.grid}, split=k.split, writes=writes,
                        dots=[(d.m, d.n, d.precision) for d in k.dots.values()],
                        num_warps=k.num_warps, num_stages=k.num_stages))
    return out


def layer_plans(V: int, K: int = 128, C: int = 128) -> dict[str, tuple[dt.Schedule, list[dict]]]:
    """The GPU plans of the layer at (V, K, C), fp32: ``forward`` (:data:`spatial_diffusion`),
    ``derived backward`` (the algorithm ``dt.grad`` derives for x and times, with the spectral output
    saved by the forward, as the layer's "auto" backend runs it) and ``manual backward``
    (:data:`spatial_diffusion_backward`), and ``saving forward`` (the forward that also returns a
    float32 copy of the spectral output, which the "auto" backend runs when gradients are needed on
    16-bit inputs; on float32 ones it runs ``forward`` and saves the spectral output itself). Values: (complete schedule, :func:`describe_program`)."""
    sizes = {"V": V, "K": K, "C": C}
    # the spectral output receives no gradient in the layer: its term is not derived (outputs=[0])
    derived = dt.grad(spatial_diffusion, ["x", "times"], save=[spectral_stage()], outputs=[0]).algorithms
    algs = {"forward": spatial_diffusion, "saving forward": augmented_forward(spatial_diffusion, [spectral_stage()])[0],
            "manual backward": spatial_diffusion_backward}
    algs.update({"derived backward" + (f" {i}" if i else ""): a for i, a in enumerate(derived)})
    res = {}
    for name, alg in algs.items():
        sched, prog = gpu_program(alg, empty_args(alg, sizes))
        res[name] = (sched, describe_program(prog))
    return res


def format_plans(plans: dict[str, tuple[dt.Schedule, list[dict]]]) -> str:
    """Text of :func:`layer_plans`: per algorithm its schedule and one line per kernel."""
    lines = []
    for name, (sched, kernels) in plans.items():
        lines.append(f"{name}: {len(kernels)} kernel(s); schedule {sched.to_json()}")
        for k in kernels:
            split = f" split {k['split'][0]}x{k['split'][1]}" if k["split"] else ""
            dots = ", ".join(f"dot {m}x{n} {p}" for m, n, p in k["dots"])
            lines.append(f"  {k['name']}: grid {k['grid']}{split}; writes {k['writes']}; {dots or 'no dot'}; "
                         f"warps {k['num_warps']} stages {k['num_stages']}")
    return "\n".join(lines)
