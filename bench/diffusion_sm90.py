"""Compile the diffusion layer's GPU kernels for sm_90 (H100/H200) on a machine without a GPU, and
report what each kernel became: registers, spill stack, shared memory, wgmma and mma.sync
instructions, FMA instructions, 16-byte and 4-byte async copies.

    PYTHONPATH=src python3 bench/diffusion_sm90.py [--V 2000 100000] [--probe] [--backward] [--dump DIR]

The plan is the one a CUDA call with these shapes runs (:func:`dtriton.examples.diffusionnet.plans.
gpu_program`); the launch's specialisation is reproduced: unit strides (the last dim of each
tensor, a 1 at run time) are constants, pointers and the other strides and sizes divisible by 16
are marked so. ``--probe`` adds bench/diffusion.py's probe schedules; ``--backward`` adds the
backward algorithms as the layer runs them (:func:`backward_algorithms`: the derived one for x and
times with the projection saved, and the hand-written one), each under the heuristic, with each
kernel's buffers (name and axes: the orientation a dot reads them in) and SASS instruction count;
``--dump DIR`` writes each kernel's TTGIR and PTX. Needs Triton's CUDA backend (ptxas and cuobjdump
ship with it).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtriton as dt  # noqa: E402
from dtriton.examples.diffusionnet.layer import spatial_diffusion_backward, spectral_stage  # noqa: E402
from dtriton.examples.diffusionnet.plans import empty_args, gpu_program  # noqa: E402
from dtriton.library import spatial_diffusion  # noqa: E402
from sm90 import compile_sm90, dump_asm, load_kernels, render, resources, sass_count, signature  # noqa: E402


def backward_algorithms() -> dict[str, dt.Algorithm]:
    """The layer's backward algorithms by row name: ``derived backward`` (``dt.grad`` for x and times,
    the spectral output saved and receiving no gradient: the "auto" backend's) and
    ``manual backward`` (:data:`spatial_diffusion_backward`)."""
    derived = dt.grad(spatial_diffusion, ["x", "times"], save=[spectral_stage()], outputs=[0]).algorithms
    return {**{"derived backward" + (f" {i}" if i else ""): a for i, a in enumerate(derived)},
            "manual backward": spatial_diffusion_backward}


def report(sched, sizes: dict[str, int], dump: str | None = None, alg: dt.Algorithm = spatial_diffusion) -> list[str]:
    """One line per kernel of ``alg`` (default: the forward) under ``sched`` (None: the heuristic)
    at ``sizes``; a backward's lines also name the buffers each kernel reads or writes, with their axes."""
    _, prog = gpu_program(alg, empty_args(alg, sizes), sched)
    src, metas = render(prog)
    mod = load_kernels(src, tempfile.mkdtemp(prefix="dt_sm90_"), "kernels")
    lines = []
    for m, kp in zip(metas, prog.kernels):
        fn = getattr(mod, m.name)
        # every pointer fp32; sizes marked multiples of 16 only where they are
        k = compile_sm90(fn, m, *signature(alg, fn, m, lambda t: "fp32",
                                           values={f"size_{s.lower()}": n for s, n in sizes.items()}))
        ptx = k.asm["ptx"]
        if dump:
            dump_asm(k, dump, m.name)
        bufs = "" if alg is spatial_diffusion else " buffers " + ", ".join(
            f"{n}{tuple(prog.buffers[n].axes)}" for n in prog.buffers if n in src_of(src, m.name))
        lines.append(f"  {m.name}: {resources(k.asm['cubin'])} sass {sass_count(k.asm['cubin'])} "
                     f"smem {k.metadata.shared} wgmma {ptx.count('wgmma.mma_async')} mma.sync {ptx.count('mma.sync')} "
                     f"fma {ptx.count('fma.rn.f32')} cp.async16 {len(re.findall(r'cp.async.c[ag].shared.global.*0x10', ptx))} "
                     f"cp.async4 {len(re.findall(r'cp.async.c[ag].shared.global.*0x4,', ptx))} "
                     f"maxnreg {m.ir.max_registers}{bufs}")
    return lines


def src_of(src: str, kernel: str) -> str:
    """The printed text of ``kernel`` in the module ``src`` (from its ``def`` to the next one)."""
    start = src.index(f"def {kernel}(")
    end = src.find("\ndef ", start + 1)
    return src[start:end if end > 0 else len(src)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, nargs="+", default=[2000, 100000])
    ap.add_argument("--K", type=int, default=128)
    ap.add_argument("--C", type=int, default=128)
    ap.add_argument("--probe", action="store_true", help="also bench/diffusion.py's probe schedules")
    ap.add_argument("--backward", action="store_true", help="also the derived and the hand-written backward")
    ap.add_argument("--dump", default=None, help="write each kernel's TTGIR and PTX under this folder")
    ap.add_argument("--out", default=None, help="also write the report to <out>/diffusion_sm90.txt")
    a = ap.parse_args(argv)
    text: list[str] = []
    import diffusion   # noqa: PLC0415 - bench/diffusion.py (its probes)
    for V in a.V:
        sizes = {"V": V, "K": a.K, "C": a.C}
        base = gpu_program(spatial_diffusion, empty_args(spatial_diffusion, sizes))[0]
        cands = {"heuristic": None, **(diffusion.probes(base) if a.probe else {})}
        for name, sched in cands.items():
            text.append(f"V={V} {name}: {(sched or base).to_json()}")
            try:
                text += report(sched, sizes, a.dump and os.path.join(a.dump, f"V{V}_{name.replace(' ', '_')}"))
            except Exception as e:  # noqa: BLE001 - report and go on with the next schedule
                text.append(f"  failed: {type(e).__name__}: {str(e)[:300]}")
            print("\n".join(text[-4:]) if not text[-1].startswith("  failed") else text[-1], flush=True)
        for name, alg in (backward_algorithms() if a.backward else {}).items():
            text.append(f"V={V} {name} ({alg.name}): heuristic")
            try:
                text += report(None, sizes, a.dump and os.path.join(a.dump, f"V{V}_{name.replace(' ', '_')}"), alg)
            except Exception as e:  # noqa: BLE001 - report and go on
                text.append(f"  failed: {type(e).__name__}: {str(e)[:300]}")
            print("\n".join(text[-4:]), flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "diffusion_sm90.txt"), "w") as f:
            f.write("\n".join(text) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
