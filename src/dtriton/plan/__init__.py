"""The plan layer: lowering to a :class:`Program` of complete :class:`KernelPlan` s.

``lower`` places stages and partitions them into kernels; ``decide`` fills each kernel's
decisions (dots, passes, access, eviction, compute dtype, offsets, hints); ``plan_program`` does
both for one call signature (:class:`CallSpec`), and under ``split_mode="last"`` folds each
finishing kernel into the split kernel it finishes, and the output kernels that read only its final
values into the same last program (:mod:`dtriton.plan.last_finish`). A backend
prints a plan and decides nothing.
"""

from .callspec import CallSpec, call_spec, tma_addressable
from .decide import decide, plan_program, unused_knobs
from .gluon_attention import AttentionMatch, GluonAttention, match_attention, plan_gluon_attention
from .gluon_attention_bwd import GluonAttentionBwd, match_attention_bwd, plan_gluon_attention_bwd
from .gluon_conv import ConvMatch, GluonConv, match_conv2d, plan_gluon_conv
from .kernel import (AxisPlan, BlockReduce, BufferSpec, DotPlan, KernelPlan, PassPlan, Program, StoreSpec, TileAccess,
                     next_pow2)
from .lower import lower

__all__ = ["AttentionMatch", "AxisPlan", "BlockReduce", "BufferSpec", "CallSpec", "ConvMatch", "DotPlan", "GluonAttention",
           "GluonAttentionBwd", "GluonConv", "KernelPlan", "PassPlan", "Program",
           "StoreSpec", "TileAccess", "call_spec", "decide", "lower", "match_attention", "match_attention_bwd", "match_conv2d", "next_pow2", "plan_gluon_attention", "plan_gluon_attention_bwd", "plan_gluon_conv", "plan_program", "tma_addressable", "unused_knobs"]
