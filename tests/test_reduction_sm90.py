"""The statistics loops as Triton compiles them for the H200 (sm_90), here without a GPU
(``bench/sm90_compile.py``: Triton's own ptxas). A loop step that converts a tensor between
layouts goes through shared memory with barriers; the s3 batch/group/layer-norm statistics did
that at every step (a loop-carried count, fed by no loaded value, kept Triton's default layout).
"""
from __future__ import annotations

import re

import pytest

from conftest import run_bench

triton = pytest.importorskip("triton")


CASES = ("in", "bn", "ln", "gn")


@pytest.fixture(scope="module")
def sm90_fp16(tmp_path_factory) -> dict:
    """``case -> (its lines of the output, the PTX files of its kernels)`` from one run of
    ``bench/sm90_compile.py --cases in,bn,ln,gn --dtypes float16`` (both tests read the same compiles)."""
    tmp = tmp_path_factory.mktemp("sm90")
    out = run_bench(["bench/sm90_compile.py", "--cases", ",".join(CASES), "--dtypes", "float16"], tmp)
    blocks = re.split(r"^(?=(?:%s) fp16: )" % "|".join(CASES), out, flags=re.M)[1:]
    by_case = {b.split(" ", 1)[0]: b for b in blocks}
    assert sorted(by_case) == sorted(CASES), out
    return {c: (b, [tmp / "out" / f"{k}_fp16.ptx" for k in re.findall(r"^  (\w+): regs", b, re.M)])
            for c, b in by_case.items()}


def loop_bodies(ptx: str) -> list[str]:
    """The innermost loops of a PTX listing: from LLVM's loop-header comment to the branch back."""
    return re.findall(r"Inner Loop Header.*?\bbra\b", ptx, re.S)


@pytest.mark.parametrize("case", ["bn", "ln"])
def test_fp16_statistics_loops_step_without_shared_memory(case, sm90_fp16):
    out, ptx = sm90_fp16[case]
    # (not batch norm's finishing kernel, which folds the split partials: no loop over the input)
    stats = [p for p in ptx if p.name.endswith("mean0_mean1_fp16.ptx") and "_finish_" not in p.name]
    assert len(stats) == 1, out
    bodies = loop_bodies(stats[0].read_text())
    assert bodies and all("ld.global" in b for b in bodies), bodies
    assert not [b for b in bodies if "st.shared" in b or "bar.sync" in b], bodies
    regs = int(re.search(r"(?<!finish_)mean0_mean1: regs (\d+)", out).group(1))
    assert regs <= 64, out   # four 8-warp programs per SM


@pytest.mark.parametrize("case", CASES)
def test_fp16_statistics_loops_load_four_steps_at_once(case, sm90_fp16):
    """The plan unrolls a statistics loop (``unroll`` 0: about 16 KB a program per iteration): its
    2048-value fp16 steps' loads issue together (s5 call 1, ncu: the layer-norm statistics kernel
    was latency-bound at 1.69 TB/s with one 4 KB step in flight per program), at most 64 registers
    (``maxnreg``: ptxas gave group norm's unrolled loop 73 without it)."""
    out, ptx = sm90_fp16[case]
    # (not batch norm's finishing kernel, which folds the split partials: no loop over the input)
    stats = [p for p in ptx if p.name.endswith("mean0_mean1_fp16.ptx") and "_finish_" not in p.name]
    assert len(stats) == 1, out
    bodies = loop_bodies(stats[0].read_text())
    assert max(b.count("ld.global.v4") for b in bodies) == 4, bodies
    regs = int(re.search(r"(?<!finish_)mean0_mean1: regs (\d+)", out).group(1))
    assert regs <= 64, out   # still four 8-warp programs per SM
    # one shift per program: the lanes fold by plain sums, no 32 KB shared-memory fold of 4-tuples
    assert int(re.search(r"(?<!finish_)mean0_mean1: .*?smem (\d+) B", out).group(1)) <= 1024, out
