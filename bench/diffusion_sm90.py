"""Compile the diffusion layer's GPU kernels for sm_90 (H100/H200) on a machine without a GPU, and
report what each kernel became: registers, spill stack, shared memory, wgmma and mma.sync
instructions, FMA instructions, 16-byte and 4-byte async copies.

    PYTHONPATH=src python3 bench/diffusion_sm90.py [--V 2000 100000] [--probe] [--dump DIR]

The plan is the one a CUDA call with these shapes runs (:func:`dtriton.examples.diffusionnet.plans.
gpu_program`); the launch's specialisation is reproduced: unit strides (the last dim of each
tensor, a 1 at run time) are constants, pointers and the other strides and sizes divisible by 16
are marked so. ``--probe`` adds bench/diffusion.py's probe schedules; ``--dump DIR`` writes each
kernel's TTGIR and PTX. Needs Triton's CUDA backend (ptxas and cuobjdump ship with it).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dtriton.examples.diffusionnet.plans import empty_args, gpu_program  # noqa: E402
from dtriton.library import spatial_diffusion  # noqa: E402
from sm90 import compile_sm90, dump_asm, load_kernels, render, resources, signature  # noqa: E402


def report(sched, sizes: dict[str, int], dump: str | None = None) -> list[str]:
    """One line per kernel of the forward under ``sched`` (None: the heuristic) at ``sizes``."""
    _, prog = gpu_program(spatial_diffusion, empty_args(spatial_diffusion, sizes), sched)
    src, metas = render(prog)
    mod = load_kernels(src, tempfile.mkdtemp(prefix="dt_sm90_"), "kernels")
    lines = []
    for m in metas:
        fn = getattr(mod, m.name)
        # every pointer fp32; sizes marked multiples of 16 only where they are
        k = compile_sm90(fn, m, *signature(spatial_diffusion, fn, m, lambda t: "fp32",
                                           values={f"size_{s.lower()}": n for s, n in sizes.items()}))
        ptx = k.asm["ptx"]
        if dump:
            dump_asm(k, dump, m.name)
        lines.append(f"  {m.name}: {resources(k.asm['cubin'])} "
                     f"smem {k.metadata.shared} wgmma {ptx.count('wgmma.mma_async')} mma.sync {ptx.count('mma.sync')} "
                     f"fma {ptx.count('fma.rn.f32')} cp.async16 {len(re.findall(r'cp.async.c[ag].shared.global.*0x10', ptx))} "
                     f"cp.async4 {len(re.findall(r'cp.async.c[ag].shared.global.*0x4,', ptx))}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, nargs="+", default=[2000, 100000])
    ap.add_argument("--K", type=int, default=128)
    ap.add_argument("--C", type=int, default=128)
    ap.add_argument("--probe", action="store_true", help="also bench/diffusion.py's probe schedules")
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
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "diffusion_sm90.txt"), "w") as f:
            f.write("\n".join(text) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
