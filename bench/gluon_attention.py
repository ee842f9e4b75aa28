"""Hand-written Gluon (Triton 3.6) attention forward kernels for Hopper (sm_90), issue 18's probe.

bench/probe_gluon_attention.py checks and times them. The kernels themselves are dtriton's
(src/dtriton/backends/triton/gluon_kernels.py, the lowering ``warp_specialize=True`` runs on sm_90:
dtriton.plan.gluon_attention); this module keeps the probe's variants, launcher and sm_90 compile.
Attention forward of contiguous (B, H, S, D) fp16 Q and (B, G, S, D) K, V (G = H, or G dividing H:
grouped-query attention, query head h reading K/V head h // (H / G); S = T, D 64 or 128, scale
1/sqrt(D), S a multiple of the tiles): O fp16 (B, H, S, D) and the row log-sum-exp LSE fp32 (B, H, S)
(natural log, of the scaled scores), online softmax in base 2. Q and O are addressed as (B*H*S, D),
K and V as (B*G*S, D) by host TMA descriptors.

Kernels (``VARIANTS`` names configurations of them; :func:`gluon_attention` launches one,
:func:`compile_sm90` compiles one for sm_90 without a GPU):

- :func:`attn_fwd_pipe` (step 1, no warp specialisation): one program per BM query rows of one
  head, ``NW`` warps (4: one warpgroup, BM 64; 8: two warpgroups stacked along the rows, BM 128).
  K and V tiles in a ``STAGES`` ring, each with its own mbarrier, loaded by TMA from the same warps
  ahead of use; S = Q K^T by async wgmma from shared memory, P kept in registers as the A operand of
  O += P V (register-A wgmma). ``OVERLAP``: FA3's intra-warpgroup overlap (QK of tile j and PV of
  tile j-1 issued together; softmax of tile j runs while PV j-1 is on the tensor cores).
- :func:`attn_fwd_ws` (step 2, explicit warp specialisation by ``gl.warp_specialize``): a 1-warp
  load partition (Q once, then K/V into a ``STAGES`` ring with ready/empty mbarrier pairs) and
  ``NC`` consumer partitions (MMA + softmax), each owning BMC query rows of the program's
  NC * BMC rows and sharing every K/V tile (the empty barriers count NC arrivals). Consumer 0 is
  the default partition (``NW`` warps: 4 = one warpgroup, 8 = two stacked); further consumers are
  4-warp worker partitions. ``OVERLAP`` as above; ``PINGPONG``: FA3's inter-warpgroup schedule, two
  consumers taking turns (an mbarrier pair) to issue their GEMMs, so one's softmax runs while the
  other's GEMMs do. A 1-D grid over all query tiles, head by head; ``persist`` variants launch one
  program per SM that loops over them (the next tile's Q loads during the epilogue, O staged in its
  own buffer). FA3's D128 forward splits its 128-row tile over two 64-row consumer warpgroups, which
  is ``ws 2x(m64 w4)``; 128 rows per consumer warpgroup is ``ws 2x(m128 w4)``.

``CAUSAL`` (flag of both kernels): the program visits K/V tiles up to its diagonal, masks only the
tiles that cross it, and programs run heaviest first.
"""
from __future__ import annotations

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# the kernels are dtriton's (the lowering's copy, a superset: bf16, an optional LSE store, a negative scale);
# this probe keeps its own variant list, launcher and sm_90 compile
from dtriton.backends.triton.gluon_kernels import attn_fwd_pipe, attn_fwd_ws  # noqa: E402

LOG2E = 1.4426950408889634


# ----------------------------------------------------------------------------------------------------------------
# host side
# ----------------------------------------------------------------------------------------------------------------

def _pipe(bm, bn, stages, nw, overlap=True):
    return dict(kernel="pipe", BM=bm, BN=bn, STAGES=stages, NW=nw, OVERLAP=overlap)


def _ws(nc, bmc, bn, stages, nw=4, overlap=True, pingpong=False, persist=False, load_regs=24, mma_regs=240):
    return dict(kernel="ws", NC=nc, BMC=bmc, BN=bn, STAGES=stages, NW=nw, OVERLAP=overlap, PINGPONG=pingpong,
                PERSIST=persist, SEP_O=persist, LOAD_REGS=load_regs, MMA_REGS=mma_regs)


#: (name, head dims it applies to, configuration). ``pipe``: BM query rows, NW warps; ``ws``: NC consumers
#: of BMC rows each (consumer 0 the default partition of NW warps, consumer 1 a 4-warp worker), a 1-warp loader;
#: ``persist``: one program per SM looping over query tiles, the output staged in its own buffer.
VARIANTS = [
    ("pipe m128n128 s2 w8", (64, 128), _pipe(128, 128, 2, 8, overlap=False)),
    ("pipe m128n128 s2 w8 ovl", (64, 128), _pipe(128, 128, 2, 8)),
    ("pipe m128n64 s3 w8 ovl", (64, 128), _pipe(128, 64, 3, 8)),
    ("pipe m128n128 s3 w8 ovl", (64,), _pipe(128, 128, 3, 8)),
    ("pipe m64n128 s2 w4 ovl", (64, 128), _pipe(64, 128, 2, 4)),
    ("ws 1x(m128 w8) n128 s2 ovl", (64, 128), _ws(1, 128, 128, 2, nw=8)),
    ("ws 2x(m64 w4) n128 s2", (64, 128), _ws(2, 64, 128, 2, overlap=False)),
    ("ws 2x(m64 w4) n128 s2 ovl", (64, 128), _ws(2, 64, 128, 2)),
    ("ws 2x(m64 w4) n128 s2 ovl pp", (64, 128), _ws(2, 64, 128, 2, pingpong=True)),
    ("ws 2x(m64 w4) n128 s3 ovl pp", (64, 128), _ws(2, 64, 128, 3, pingpong=True)),
    ("ws 2x(m64 w4) n128 s2 ovl pp persist", (64, 128), _ws(2, 64, 128, 2, pingpong=True, persist=True)),
    ("ws 2x(m64 w4) n128 s3 ovl pp persist", (64,), _ws(2, 64, 128, 3, pingpong=True, persist=True)),
    ("ws 2x(m128 w4) n64 s3 ovl pp", (64,), _ws(2, 128, 64, 3, pingpong=True)),
    # (not listed: 128-row consumers at D128 (n64 s3) and at D64 n128 spill: 88 and 280 B of stack per thread)
]


def block_rows(cfg) -> int:
    """Query rows per program."""
    return cfg["BM"] if cfg["kernel"] == "pipe" else cfg["NC"] * cfg["BMC"]


def kernel_of(cfg):
    """The Gluon kernel a configuration runs."""
    return attn_fwd_pipe if cfg["kernel"] == "pipe" else attn_fwd_ws


def launch_meta(cfg, D: int, causal: bool) -> tuple[dict, int]:
    """(constexpr arguments by name, num_warps) of a configuration."""
    keys = (("BM", "BN", "STAGES", "NW", "OVERLAP") if cfg["kernel"] == "pipe" else
            ("BMC", "BN", "STAGES", "NC", "NW", "OVERLAP", "PINGPONG", "SEP_O", "LOAD_REGS", "MMA_REGS"))
    meta = {"D": D, **{k: cfg[k] for k in keys}, "CAUSAL": causal, "STORE_LSE": True, "NEG_SCALE": False}
    return meta, cfg["NW"]


def smem_layout(block):
    """The NVMMA shared layout a TMA tile ``block`` of fp16 uses (largest swizzle)."""
    return gl.NVMMASharedLayout.get_default_for(block, gl.float16)


def q_block(cfg, D: int) -> list[int]:
    """The Q / O TMA box of a configuration (per consumer for ``ws``)."""
    return [cfg["BM"] if cfg["kernel"] == "pipe" else cfg["BMC"], D]


def gluon_attention(q, k, v, cfg, causal: bool):
    """A launcher of the Gluon kernel of ``cfg`` on ``q, k, v`` and its outputs: ``(launch, O, LSE)``;
    ``launch()`` (re)computes O (B, H, S, D) fp16 and LSE (B, H, S) fp32 (natural log) of
    ``softmax(q k^T / sqrt(D)) v``, descriptors and outputs made once. q: contiguous (B, H, S, D), k, v:
    contiguous (B, G, S, D) with G dividing H (grouped-query attention when G < H: query head h reads
    K/V head h // (H / G)), fp16 CUDA tensors, D 64 or 128, S a multiple of the configuration's tiles;
    other shapes raise ValueError."""
    B, H, S, D = q.shape
    G = k.shape[1]
    bm, bn = block_rows(cfg), cfg["BN"]
    if (q.dtype != torch.float16 or D not in (64, 128) or S % bm or S % bn or k.shape != (B, G, S, D) or H % G
            or v.shape != k.shape or not all(t.is_contiguous() for t in (q, k, v))):
        raise ValueError(f"gluon_attention: needs contiguous fp16 (B, H, S, D) q and (B, G, S, D) k/v, G dividing H, "
                         f"D 64 or 128, S a multiple of {bm} and {bn}; got {tuple(q.shape)} {tuple(k.shape)} {q.dtype}")
    heads = (H, G, H // G) if G != H else (1, 1, 1)   # the kernel's K/V head map (HQ, HKV, GROUP)
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    qb, kb = q_block(cfg, D), [bn, D]
    descs = [TensorDescriptor.from_tensor(t.view(t.numel() // D, D), box, smem_layout(box))
             for t, box in ((q, qb), (k, kb), (v, kb), (o, qb))]
    meta, nw = launch_meta(cfg, D, causal)
    kernel, scale = kernel_of(cfg), D ** -0.5 * LOG2E
    if cfg["kernel"] == "pipe":
        grid, extra = (S // bm, B * H), ()
    else:
        n_q = B * H * S // bm
        n_sm = torch.cuda.get_device_properties(q.device).multi_processor_count
        grid, extra = (min(n_q, n_sm) if cfg["PERSIST"] else n_q, ), (n_q, )

    def launch():
        kernel[grid](*descs, lse, scale, S, S, *extra, *heads, **meta, num_warps=nw)   # (S, T: here T = S)

    return launch, o, lse


def compile_sm90(cfg, D: int, causal: bool):
    """The Gluon kernel of ``cfg`` compiled for sm_90 by Triton's own toolchain, launching nothing."""
    fn = kernel_of(cfg)
    meta, nw = launch_meta(cfg, D, causal)
    qb, kb = q_block(cfg, D), [cfg["BN"], D]
    desc = lambda box: f"tensordesc<fp16[{box[0]},{box[1]}],{smem_layout(box)!r}>"  # noqa: E731
    sig = {"q_desc": desc(qb), "k_desc": desc(kb), "v_desc": desc(kb), "o_desc": desc(qb), "lse_ptr": "*fp32",
           "qk_scale": "fp32", "S": "i32", "T": "i32"} | ({"n_q_tiles": "i32"} if cfg["kernel"] == "ws" else {})
    sig |= {"HQ": "i32", "HKV": "i32", "GROUP": "i32"}   # (the K/V head map of grouped-query attention)
    sig |= {k: "constexpr" for k in meta}
    attrs = {(fn.arg_names.index("lse_ptr"),): [["tt.divisibility", 16]],
             (fn.arg_names.index("S"),): [["tt.divisibility", 16]],
             (fn.arg_names.index("T"),): [["tt.divisibility", 16]]}
    src = GluonASTSource(fn, sig, meta, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": nw})
