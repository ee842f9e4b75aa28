"""An evaluator of fuzz cases written independently of dtriton (``alg.reference`` is not used).

It interprets the fuzzer's own AST (``fuzz_grammar``) eagerly in torch on named-axis values, in a
chosen compute dtype: float64 gives the oracle, float32 the same program rounded as a float32
kernel would round it (with torch's summation order, or ``sequential`` left to right); the
differences estimate how ill-conditioned each output element is (the comparison in ``fuzz_run``
widens its tolerance by them).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from fuzz_grammar import Case, param_names

_UNARY = {"neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
          "tanh": torch.tanh, "sigmoid": torch.sigmoid, "abs": torch.abs}
_ARITH = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "maximum": torch.maximum, "minimum": torch.minimum}
_COMPARE = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}


class Named:
    """A value: tensor ``t`` whose dims are the axes ``axes``, in that order, at full size."""
    __slots__ = ("t", "axes")

    def __init__(self, t: torch.Tensor, axes: tuple[str, ...]):
        self.t, self.axes = t, tuple(axes)


class Evaluator:
    """Evaluates the outputs of ``case`` on ``args`` (the call's arguments, any layout) in ``cdt``.

    Raises ``KeyError``/``ValueError`` only for a malformed case (a bug of the fuzzer itself)."""

    def __init__(self, case: Case, args: Sequence[Any], cdt: torch.dtype = torch.float64, sequential: bool = False):
        self.case = case
        self.cdt = cdt
        self.sequential = sequential   # sums and products accumulated left to right (another rounding order)
        self.env = dict(zip(param_names(case), args))
        self.size = {a: case.sizes[s] for a, s in case.axis_sym.items()}
        self.memo: dict[int, Named] = {}

    # -- helpers ---------------------------------------------------------------------------------
    def num(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` as a number in the compute dtype (bool and integer values included)."""
        return t.to(self.cdt)

    def spread(self, v: Named, axes: tuple[str, ...]) -> torch.Tensor:
        """``v``'s tensor with dims ordered as ``axes``, broadcast to their full sizes."""
        have = [a for a in axes if a in v.axes]
        t = v.t.permute([v.axes.index(a) for a in have]) if have else v.t.reshape(())
        shape = [self.size[a] if a in v.axes else 1 for a in axes]
        return t.reshape(shape).expand([self.size[a] for a in axes])

    def joint(self, *vals: Named) -> tuple[tuple[str, ...], list[torch.Tensor]]:
        axes = tuple(dict.fromkeys(a for v in vals for a in v.axes))
        return axes, [self.spread(v, axes) for v in vals]

    # -- nodes -----------------------------------------------------------------------------------
    def __call__(self, node) -> Named:
        key = id(node)
        if key not in self.memo:
            self.memo[key] = getattr(self, "n_" + node[0])(node)
        return self.memo[key]

    def n_load(self, node) -> Named:
        t = self.env[node[1]]
        return Named(t if self.case.tensors[node[1]]["kind"] == "index" else self.num(t), tuple(node[2]))

    def n_gather(self, node) -> Named:
        parts = [Named(torch.arange(self.size[ix]), (ix,)) if isinstance(ix, str) else self(ix) for ix in node[2]]
        axes, idx = self.joint(*parts)
        t = self.env[node[1]]
        return Named(self.num(t[tuple(i.long() for i in idx)]), axes)

    def n_const(self, node) -> Named:
        return Named(torch.tensor(node[1], dtype=self.cdt), ())

    def n_param(self, node) -> Named:
        return Named(torch.tensor(float(self.env[node[1]]), dtype=self.cdt), ())

    def n_axis(self, node) -> Named:
        return Named(torch.arange(self.size[node[1]], dtype=self.cdt), (node[1],))

    def n_un(self, node) -> Named:
        v = self(node[2])
        if node[1] == "not":
            return Named(~v.t.bool(), v.axes)
        return Named(_UNARY[node[1]](self.num(v.t)), v.axes)

    def n_bin(self, node) -> Named:
        axes, (a, b) = self.joint(self(node[2]), self(node[3]))
        if node[1] in ("and", "or"):
            f = torch.logical_and if node[1] == "and" else torch.logical_or
            return Named(f(a.bool(), b.bool()), axes)
        return Named(_ARITH[node[1]](self.num(a), self.num(b)), axes)

    def n_cmp(self, node) -> Named:
        axes, (a, b) = self.joint(self(node[2]), self(node[3]))
        return Named(_COMPARE[node[1]](self.num(a), self.num(b)), axes)

    def n_where(self, node) -> Named:
        axes, (c, a, b) = self.joint(self(node[1]), self(node[2]), self(node[3]))
        return Named(torch.where(c.bool(), self.num(a), self.num(b)), axes)

    def n_cast(self, node) -> Named:
        v = self(node[2])
        return Named(self.num(self.num(v.t).to(getattr(torch, node[1]))), v.axes)

    def n_red(self, node) -> Named:
        kind, over = node[1], tuple(node[2])
        v = self(node[3])
        rest = tuple(a for a in v.axes if a not in over)
        t = self.spread(v, rest + over)
        t = self.num(t.reshape([self.size[a] for a in rest] + [-1]))
        if kind in ("sum", "mean"):
            r = t.cumsum(-1)[..., -1] if self.sequential and t.shape[-1] else t.sum(-1)
            if kind == "mean":   # sequential: times the reciprocal, as a kernel may
                r = r * (1.0 / t.shape[-1]) if self.sequential else r / t.shape[-1]
        elif kind == "max":
            r = t.amax(-1)
        elif kind == "min":
            r = t.amin(-1)
        elif kind == "prod":
            r = t.cumprod(-1)[..., -1] if self.sequential and t.shape[-1] else t.prod(-1)
        elif kind in ("argmax", "argmin"):
            r = self.num(torch.argmax(t, -1) if kind == "argmax" else torch.argmin(t, -1))
        else:
            raise ValueError(f"unknown reduction {kind!r}")
        return Named(r, rest)

    # -- outputs ---------------------------------------------------------------------------------
    def outputs(self) -> list[torch.Tensor]:
        """Every output of the case, laid out as its layout says, in the compute dtype."""
        return [self.spread(self(node), tuple(layout)).contiguous() for node, layout in self.case.outputs]

    def arg_values(self, n: int) -> torch.Tensor | None:
        """For an output that is an arg-reduction, the values it compares, laid out as the output's
        layout followed by the reduced axis; None for other outputs."""
        node, layout = self.case.outputs[n]
        if node[0] != "red" or not node[1].startswith("arg"):
            return None
        return self.num(self.spread(self(node[3]), tuple(layout) + tuple(node[2])))
