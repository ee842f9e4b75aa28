"""The table of hand-written Gluon kernels the plan may choose: a decision class of
:mod:`dtriton.plan` (``KernelPlan.gluon``) -> the :class:`~.gluon_kind.GluonKind` printing and
launching it. The renderer, the backend's launch and its fast launcher dispatch through
:func:`gluon_kind`; a new Gluon kernel is one entry here.
"""

from __future__ import annotations

from typing import Any

from ...plan.gluon_attention import GluonAttention
from ...plan.gluon_attention_bwd import GluonAttentionBwd
from ...plan.gluon_conv import GluonConv
from ...plan.gluon_depthwise import GluonDepthwise
from . import gluon, gluon_bwd, gluon_conv, gluon_depthwise
from .gluon_kind import GluonKind

__all__ = ["KINDS", "gluon_kind"]

#: decision class -> how its kernel is printed and launched
KINDS: dict[type, GluonKind] = {
    GluonAttention: gluon.KIND,
    GluonAttentionBwd: gluon_bwd.KIND,
    GluonConv: gluon_conv.KIND,
    GluonDepthwise: gluon_depthwise.KIND,
}


def gluon_kind(decision: Any) -> GluonKind | None:
    """The :class:`~.gluon_kind.GluonKind` of a kernel plan's Gluon ``decision``; None for None (a
    Triton kernel).

    Raises:
        TypeError: ``decision`` is of a class with no entry (a plan module added without its backend)."""
    if decision is None:
        return None
    try:
        return KINDS[type(decision)]
    except KeyError:
        raise TypeError(f"no Gluon kernel prints {type(decision).__name__}: add it to "
                        "dtriton.backends.triton.gluon_table.KINDS") from None
