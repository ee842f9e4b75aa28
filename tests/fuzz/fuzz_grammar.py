"""The fuzzer's grammar: random algorithms as small ASTs, independent of dtriton's IR.

A *case* (:class:`Case`) is everything one fuzz run needs, as plain JSON-able data: the size
symbols and their sizes, the axes and the size symbol each ranges over, the input tensors (dims,
dtype, value kind, memory layout), the scalar parameters, and the outputs as ASTs with layouts.
The same case is built into a dtriton algorithm (:func:`build_algorithm`) and evaluated by the
independent evaluator (``fuzz_eval``), so the two never share code.

AST nodes are lists (JSON round-trips them unchanged)::

    ["load", tensor, [axis, ...]]           plain read X[i, j]
    ["gather", tensor, [ix0, ix1, ...]]     each ix an axis name (str) or an index node
    ["const", value]                        a Python float
    ["param", name]                         a float scalar argument
    ["axis", name]                          the index value of an axis
    ["un", op, x]                           neg exp log sqrt rsqrt tanh sigmoid abs not
    ["bin", op, a, b]                       add sub mul div maximum minimum and or
    ["cmp", op, a, b]                       lt le gt ge eq ne (a bool value)
    ["where", c, a, b]
    ["cast", dtype_name, x]                 float16 bfloat16 float32 int32
    ["red", kind, [axis, ...], x]           sum mean max min prod argmax argmin

Randomness comes through a :class:`Draw` (hypothesis data in tests, ``random.Random`` for long
seeded runs), so every case is reproducible from its seed or its JSON.
"""

from __future__ import annotations

import inspect
import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

import dtriton as dt
from dtriton.ir import as_expr

AXES = ("i", "j", "k", "l")
SYMBOLS = ("A", "B", "C")
#: sizes worth hitting: 1, primes, powers of two and their neighbours (non-multiples of tiles)
SIZES = (1, 1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 33)
#: most cases stay below this many points in their largest iteration space (the interpreter is slow)
MAX_POINTS = 2048
FLOAT_DTYPES = ("float32", "float32", "float32", "float32", "float16", "bfloat16", "float64")
LAYOUTS = ("contiguous", "contiguous", "transposed", "offset", "expanded")
INF = float("inf")
CONSTS = (0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -2.5, 1e-3, 100.0)
REDUCTIONS = ("sum", "sum", "mean", "max", "min", "prod", "argmax", "argmin")
UNARY = ("neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
CASTS = ("float16", "bfloat16", "float32", "int32")


class Reject(Exception):
    """The drawn case is not a legal algorithm (e.g. an axis that no input sizes); draw again."""


# ----------------------------------------------------------------------------------------------
# randomness
# ----------------------------------------------------------------------------------------------
class Draw:
    """Random choices from a seed (``random.Random``); :class:`HypothesisDraw` has the same API."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def choice(self, seq):
        """One element of the non-empty sequence ``seq``."""
        return seq[self.rng.randrange(len(seq))]

    def integer(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]."""
        return self.rng.randint(lo, hi)

    def chance(self, p: float) -> bool:
        """True with probability ``p``."""
        return self.rng.random() < p


class HypothesisDraw(Draw):
    """:class:`Draw` over a hypothesis ``data`` object (``st.data()``), so hypothesis shrinks cases."""

    def __init__(self, data):
        self.data = data

    def choice(self, seq):
        from hypothesis import strategies as st
        return seq[self.data.draw(st.integers(0, len(seq) - 1))]

    def integer(self, lo, hi):
        from hypothesis import strategies as st
        return self.data.draw(st.integers(lo, hi))

    def chance(self, p):
        from hypothesis import strategies as st
        return self.data.draw(st.integers(0, 999)) >= 1000 * (1 - p)


# ----------------------------------------------------------------------------------------------
# the case
# ----------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One fuzz case as plain data (see the module docstring for the AST)."""
    sizes: dict[str, int]
    axis_sym: dict[str, str]
    tensors: dict[str, dict]            # name -> {"dims", "dtype", "kind": float|int|index, "hi", "layout"}
    params: dict[str, float]            # scalar name -> value
    outputs: list[list]                 # [[ast, [axis, ...]], ...]
    schedules: list[dict] = field(default_factory=list)  # filled by the runner: {"how", "json"}
    data_seed: int = 0

    def to_dict(self) -> dict:
        """The case as JSON-able data (:meth:`from_dict` inverts it)."""
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "Case":
        """A case from :meth:`to_dict`'s data."""
        return Case(**d)


def free_axes(node) -> tuple[str, ...]:
    """The free axes of an AST node, in first-appearance order."""
    op = node[0]
    if op == "load":
        return tuple(node[2])
    if op == "gather":
        out: list[str] = []
        for ix in node[2]:
            out.extend([ix] if isinstance(ix, str) else free_axes(ix))
        return tuple(dict.fromkeys(out))
    if op in ("const", "param"):
        return ()
    if op == "axis":
        return (node[1],)
    if op == "red":
        return tuple(a for a in free_axes(node[3]) if a not in node[2])
    kids = [c for c in node[1:] if isinstance(c, list)]
    return tuple(dict.fromkeys(a for c in kids for a in free_axes(c)))


def walk(node):
    """Every AST node under ``node`` (pre-order, with repeats for shared subtrees)."""
    yield node
    if node[0] == "gather":
        for ix in node[2]:
            if not isinstance(ix, str):
                yield from walk(ix)
        return
    for c in node[1:]:
        if isinstance(c, list) and c and isinstance(c[0], str) and c[0] in _OPS:
            yield from walk(c)


_OPS = ("load", "gather", "const", "param", "axis", "un", "bin", "cmp", "where", "cast", "red")


# ----------------------------------------------------------------------------------------------
# generation
# ----------------------------------------------------------------------------------------------
class _Gen:
    """Draws one case: the shared state (tensors, params, reusable subtrees) of a generation."""

    def __init__(self, d: Draw):
        self.d = d
        nsym = d.integer(1, len(SYMBOLS))
        syms = SYMBOLS[:nsym]
        self.axis_sym = {a: d.choice(syms) for a in AXES}
        self.sizes = {s: d.choice(SIZES) for s in syms}
        self.fdtype = d.choice(FLOAT_DTYPES)
        self.tensors: dict[str, dict] = {}
        self.params: dict[str, float] = {}
        self.pool: list[list] = []

    # -- leaves ----------------------------------------------------------------------------------
    def tensor(self, dims: tuple[str, ...], kind: str = "float", hi: str | None = None) -> str:
        """An input with ``dims`` (reused when one with those dims and kind exists, mostly)."""
        same = [n for n, t in self.tensors.items() if tuple(t["dims"]) == dims and t["kind"] == kind
                and t.get("hi") == hi]
        if same and self.d.chance(0.6):
            return self.d.choice(same)
        name = f"{'XIG'[('float', 'int', 'index').index(kind)]}{len(self.tensors)}"
        if kind == "float":
            dtype = self.fdtype if self.d.chance(0.85) else self.d.choice(FLOAT_DTYPES)
        elif kind == "int":
            dtype = self.d.choice(("int32", "int64"))
        else:
            dtype = self.d.choice(("int64", "int32"))
        layout = self.d.choice(LAYOUTS)
        self.tensors[name] = {"dims": list(dims), "dtype": dtype, "kind": kind, "hi": hi, "layout": layout}
        return name

    def load(self, allowed: tuple[str, ...], must: tuple[str, ...] = ()) -> list:
        """A plain read of an input over ``must`` plus some of ``allowed`` (rank 1..3)."""
        rest = [a for a in allowed if a not in must]
        r = self.d.integer(max(1, len(must)), max(1, min(3, len(must) + len(rest))))
        axes = list(must)
        while len(axes) < r and rest:
            axes.append(rest.pop(self.d.integer(0, len(rest) - 1)))
        if not axes:
            return self.scalar()
        order = list(axes)
        for n in range(len(order) - 1, 0, -1):  # a random order of the dims
            m = self.d.integer(0, n)
            order[n], order[m] = order[m], order[n]
        kind = "int" if self.d.chance(0.08) else "float"
        name = self.tensor(tuple(self.axis_sym[a] for a in order), kind)
        return ["load", name, order]

    def scalar(self) -> list:
        if self.d.chance(0.3):
            name = f"s{len(self.params)}"
            self.params[name] = self.d.choice((0.5, -1.25, 2.0, 3.0, 0.1, -1 / 3))
            return ["param", name]
        if self.d.chance(0.04):
            return ["const", self.d.choice((INF, -INF))]
        return ["const", self.d.choice(CONSTS)]

    # -- expressions -----------------------------------------------------------------------------
    def expr(self, allowed: tuple[str, ...], depth: int) -> list:
        """An expression whose free axes are among ``allowed``."""
        d = self.d
        if depth <= 0:
            k = d.integer(0, 19)
            if k < 15 and allowed:
                return self.load(allowed)
            if k < 17 and allowed:
                return ["axis", d.choice(allowed)]
            return self.scalar() if not allowed or k < 19 else self.load(allowed)
        k = d.integer(0, 99)
        if k < 14:
            node = self.load(allowed) if allowed else self.scalar()
        elif k < 30:
            node = self.unary(allowed, depth)
        elif k < 52:
            node = self.binary(allowed, depth)
        elif k < 60:
            node = self.select(allowed, depth)
        elif k < 64:
            node = self.cast(allowed, depth)
        elif k < 80:
            node = self.reduction(allowed, depth)
        elif k < 88:
            node = self.contraction(allowed, depth)
        elif k < 93:
            node = self.gather(allowed, depth)
        else:
            fits = [n for n in self.pool if set(free_axes(n)) <= set(allowed)]
            node = d.choice(fits) if fits else self.expr(allowed, depth - 1)
        if node[0] not in ("const", "param", "axis"):
            self.pool.append(node)
        return node

    def unary(self, allowed, depth) -> list:
        op = self.d.choice(UNARY)
        x = self.expr(allowed, depth - 1)
        if op == "log" or op == "rsqrt":   # of positive values
            x = ["bin", "add", ["un", "abs", x], ["const", self.d.choice((0.5, 1.0, 1e-3))]]
        elif op == "sqrt":                  # of abs
            x = ["un", "abs", x]
        elif op == "exp" and self.d.chance(0.7):   # keep exponents bounded, mostly
            x = ["un", "tanh", x] if self.d.chance(0.5) else ["bin", "minimum", x, ["const", 20.0]]
        return ["un", op, x]

    def binary(self, allowed, depth) -> list:
        op = self.d.choice(BINARY)
        a = self.expr(allowed, depth - 1)
        b = self.scalar() if self.d.chance(0.25) else self.expr(allowed, depth - 1)
        if self.d.chance(0.3):
            a, b = b, a
        if op == "div" and self.d.chance(0.8):   # a denominator kept away from 0, mostly
            b = ["bin", "add", ["un", "abs", b], ["const", 0.5]]
        if a[0] in ("const", "param") and b[0] in ("const", "param"):
            a = self.load(allowed) if allowed else a
        return ["bin", op, a, b]

    def compare(self, allowed, depth) -> list:
        c = ["cmp", self.d.choice(COMPARE), self.expr(allowed, depth - 1),
             self.scalar() if self.d.chance(0.5) else self.expr(allowed, depth - 1)]
        if self.d.chance(0.15):
            c = ["bin", self.d.choice(("and", "or")), c, ["cmp", "gt", self.expr(allowed, 0), ["const", 0.0]]]
        if self.d.chance(0.1):
            c = ["un", "not", c]
        return c

    def select(self, allowed, depth) -> list:
        c = self.compare(allowed, depth)
        if self.d.chance(0.25):   # a comparison used as a number
            return ["bin", "mul", c, self.expr(allowed, depth - 1)]
        a = self.expr(allowed, depth - 1)
        b = self.scalar() if self.d.chance(0.4) else self.expr(allowed, depth - 1)
        return ["where", c, a, b]

    def cast(self, allowed, depth) -> list:
        to = self.d.choice(CASTS)
        x = self.expr(allowed, depth - 1)
        if to == "int32":   # truncation of bounded values away from integers (casting inf/NaN is undefined)
            x = ["bin", "mul", ["un", "tanh", x], ["const", 3.5]]
        return ["cast", to, x]

    def fresh(self, allowed, n: int) -> list[str]:
        free = [a for a in AXES if a not in allowed]
        out = []
        while free and len(out) < n:
            out.append(free.pop(self.d.integer(0, len(free) - 1)))
        return out

    def reduction(self, allowed, depth) -> list:
        """A reduction over fresh axes, or over axes the consumer has too (then broadcast back)."""
        kind = self.d.choice(REDUCTIONS)
        n = 1 if kind.startswith("arg") or self.d.chance(0.7) else 2
        if allowed and self.d.chance(0.5):
            over = [self.d.choice(allowed)]
            if n == 2:
                over += [a for a in self.fresh(allowed + tuple(over), 1)]
        else:
            over = self.fresh(allowed, n)
        if not over:
            return self.unary(allowed, depth)
        if allowed and over[0] in allowed and self.d.chance(0.5):
            return self.normalise(allowed, over[0], kind, depth)
        inner = tuple(dict.fromkeys(tuple(allowed) + tuple(over)))
        x = self.expr(inner, depth - 1)
        missing = tuple(a for a in over if a not in free_axes(x))
        if missing:
            x = ["bin", self.d.choice(("add", "mul", "sub")), x, self.load(inner, must=missing)]
        return ["red", kind, over, x]

    def normalise(self, allowed, o: str, kind: str, depth) -> list:
        """``x (op) red(x, over=o)`` with ``x`` shared: softmax-, layer-norm-like patterns."""
        x = self.expr(allowed, depth - 1)
        if o not in free_axes(x):
            x = ["bin", "add", x, self.load(allowed, must=(o,))]
        r = ["red", kind, [o], x]
        if kind == "max" and self.d.chance(0.6):   # a stable softmax / log-sum-exp
            e = ["un", "exp", ["bin", "sub", x, r]]
            s = ["red", "sum", [o], e]
            return ["bin", "div", e, s] if self.d.chance(0.5) else ["bin", "add", r, ["un", "log", s]]
        return ["bin", self.d.choice(("sub", "div", "mul", "add")), x,
                r if kind != "prod" else ["bin", "add", ["un", "abs", r], ["const", 1.0]]]

    def contraction(self, allowed, depth) -> list:
        over = self.fresh(allowed, 1 if self.d.chance(0.8) else 2)
        if not over:
            return self.binary(allowed, depth)
        inner = tuple(allowed) + tuple(over)
        factors = [self.load(inner, must=tuple(over)) for _ in range(self.d.integer(2, 3))]
        if self.d.chance(0.3):
            factors[0] = ["un", self.d.choice(("exp", "tanh", "abs")), factors[0]]
        prod = factors[0]
        for f in factors[1:]:
            prod = ["bin", "mul", prod, f]
        return ["red", self.d.choice(("sum", "sum", "sum", "mean")), over, prod]

    def gather(self, allowed, depth) -> list:
        """X[a, idx] or X[idx, a]: idx an integer tensor over an allowed axis, or an arg-reduction."""
        if not allowed:
            return self.scalar()
        a = self.d.choice(allowed)
        over = self.fresh(allowed, 1)
        if over and self.d.chance(0.4):
            o = over[0]
            inner = tuple(allowed) + (o,)
            x = self.expr(inner, max(0, depth - 2))
            if o not in free_axes(x):
                x = ["bin", "add", x, self.load(inner, must=(o,))]
            ix = ["red", self.d.choice(("argmax", "argmin")), [o], x]
            gsym = self.axis_sym[o]
        else:
            b = self.d.choice(allowed)
            gsym = self.d.choice(tuple(self.sizes))
            ix = ["load", self.tensor((self.axis_sym[b],), "index", hi=gsym), [b]]
        dims = [self.axis_sym[a], gsym]
        index = [a, ix]
        if self.d.chance(0.5):
            dims.reverse()
            index.reverse()
        return ["gather", self.tensor(tuple(dims), "float"), index]

    # -- the case --------------------------------------------------------------------------------
    def case(self) -> Case:
        outputs = []
        for _ in range(self.d.integer(1, 3) if self.d.chance(0.4) else 1):
            n = self.d.integer(0, 3)
            axes = self.fresh((), n)
            node = self.expr(tuple(axes), self.d.integer(1, 4))
            layout = list(free_axes(node))
            if self.d.chance(0.05):   # an output broadcast along an axis its value does not have
                layout += self.fresh(tuple(layout), 1)
            for m in range(len(layout) - 1, 0, -1):
                r = self.d.integer(0, m)
                layout[m], layout[r] = layout[r], layout[m]
            outputs.append([node, layout])
        case = Case(dict(self.sizes), dict(self.axis_sym), self.tensors, self.params, outputs,
                    data_seed=self.d.integer(0, 2**31 - 1))
        check_case(case)
        shrink_sizes(case)
        return case


def draw_case(d: Draw) -> Case:
    """A random legal case from ``d``; raises :class:`Reject` when the draw is not legal."""
    return _Gen(d).case()


def check_case(case: Case) -> None:
    """Raise :class:`Reject` when an axis of ``case`` is never a plain index of some input (its
    size would be unknown: dtriton refuses such a program by design)."""
    sized, used = set(), set()
    for node, layout in case.outputs:
        used.update(layout)
        for n in walk(node):
            if n[0] == "load":
                sized.update(n[2])
            elif n[0] == "gather":
                sized.update(ix for ix in n[2] if isinstance(ix, str))
            elif n[0] == "red":
                used.update(n[2])
            used.update(free_axes(n))
    if not used <= sized:
        raise Reject(f"axes {sorted(used - sized)} index no input")


def used_axes(case: Case) -> list[str]:
    """Every axis the case's outputs range over, reduced or not."""
    out: set[str] = set()
    for node, layout in case.outputs:
        out.update(layout)
        for n in walk(node):
            out.update(free_axes(n))
            if n[0] == "red":
                out.update(n[2])
    return sorted(out)


def shrink_sizes(case: Case) -> None:
    """Halve the largest sizes until the product over the used axes is at most :data:`MAX_POINTS`."""
    axes = used_axes(case)
    while math.prod(case.sizes[case.axis_sym[a]] for a in axes) > MAX_POINTS:
        s = max(case.sizes, key=case.sizes.get)
        case.sizes[s] = max(1, case.sizes[s] // 2 + (case.sizes[s] % 2))


# ----------------------------------------------------------------------------------------------
# building the dtriton algorithm
# ----------------------------------------------------------------------------------------------
def _dt_node(node, env: dict, memo: dict):
    key = id(node)
    if key in memo:
        return memo[key]
    op = node[0]
    if op == "load":
        v = env[node[1]][tuple(env["axes"][a] for a in node[2])]
    elif op == "gather":
        idx = tuple(env["axes"][ix] if isinstance(ix, str) else _dt_node(ix, env, memo) for ix in node[2])
        v = env[node[1]][idx]
    elif op == "const":
        v = node[1]
    elif op == "param":
        v = env[node[1]]
    elif op == "axis":
        v = env["axes"][node[1]]
    elif op == "un":
        x = _dt_node(node[2], env, memo)
        v = {"neg": lambda e: -e, "not": lambda e: ~e}.get(node[1], getattr(dt, node[1], None))(x)
    elif op in ("bin", "cmp"):
        a, b = _dt_node(node[2], env, memo), _dt_node(node[3], env, memo)
        if not isinstance(a, dt.Expr) and not isinstance(b, dt.Expr):
            a = as_expr(a)   # two Python numbers would not build a node
        v = _BIN[node[1]](a, b)
    elif op == "where":
        v = dt.where(*(_dt_node(c, env, memo) for c in node[1:]))
    elif op == "cast":
        v = dt.cast(_dt_node(node[2], env, memo), getattr(torch, node[1]))
    elif op == "red":
        over = tuple(env["axes"][a] for a in node[2])
        v = getattr(dt, node[1])(_dt_node(node[3], env, memo), over=over if len(over) > 1 else over[0])
    else:
        raise ValueError(f"unknown AST node {op!r}")
    memo[key] = v
    return v


_BIN = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b, "maximum": dt.maximum, "minimum": dt.minimum,
        "and": lambda a, b: a & b, "or": lambda a, b: a | b,
        "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def param_names(case: Case) -> list[str]:
    """The algorithm's arguments in order: tensors, then scalars."""
    return list(case.tensors) + list(case.params)


def build_algorithm(case: Case, name: str = "fuzz") -> dt.Algorithm:
    """The dtriton algorithm of ``case``, traced through ``dt.algorithm`` from a function whose
    signature is built here (``dt.Tensor[...]`` annotations, ``float`` scalars)."""
    names = param_names(case)

    def fn(*args):
        env = dict(zip(names, args))
        env["axes"] = dict(zip(AXES, dt.axes(" ".join(AXES))))
        memo: dict = {}
        outs = []
        for node, layout in case.outputs:
            v = _dt_node(node, env, memo)
            if not isinstance(v, dt.Expr):
                v = as_expr(v)
            outs.append(v[tuple(env["axes"][a] for a in layout)] if layout else v)
        return tuple(outs) if len(outs) > 1 else outs[0]

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=dt.Tensor[tuple(case.tensors[n]["dims"])]) for n in case.tensors]
    params += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=float) for n in case.params]
    fn.__signature__ = inspect.Signature(params)
    fn.__name__ = name
    return dt.algorithm(fn)


def describe(case: Case) -> str:
    """A readable one-line-per-output text of the case's algorithm (for failure reports)."""
    def txt(n) -> str:
        op = n[0]
        if op == "load":
            return f"{n[1]}[{', '.join(n[2])}]"
        if op == "gather":
            return f"{n[1]}[{', '.join(ix if isinstance(ix, str) else txt(ix) for ix in n[2])}]"
        if op in ("const", "param", "axis"):
            return repr(n[1]) if op == "const" else n[1]
        if op == "red":
            return f"{n[1]}({txt(n[3])}, over={','.join(n[2])})"
        if op == "cast":
            return f"cast({txt(n[2])}, {n[1]})"
        return f"{n[1] if op != 'where' else 'where'}({', '.join(txt(c) for c in n[1 + (op != 'where'):])})"
    ins = ", ".join(f"{k}{t['dims']}:{t['dtype']}:{t['layout']}" for k, t in case.tensors.items())
    outs = "; ".join(f"{txt(n)}[{', '.join(lay)}]" for n, lay in case.outputs)
    return f"sizes={case.sizes} axes={case.axis_sym} inputs({ins}) params={case.params} -> {outs}"


def make_args(case: Case) -> tuple[list[Any], list[Any]]:
    """Fresh random inputs for ``case`` (seeded by ``case.data_seed``), in the memory layout each
    input asks for; returns (arguments, float64 copies with contiguous storage)."""
    g = torch.Generator().manual_seed(case.data_seed)
    args, exact = [], []
    for name, t in case.tensors.items():
        shape = [case.sizes[s] for s in t["dims"]]
        dtype = getattr(torch, t["dtype"])
        if t["kind"] == "float":
            x = torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)
        elif t["kind"] == "int":
            x = torch.randint(-4, 5, shape, generator=g).to(dtype)
        else:
            hi = case.sizes[t["hi"]]
            x = torch.randint(0, hi, shape, generator=g).to(dtype)
        x = relayout(x, t["layout"])
        args.append(x)
        exact.append(x.clone())
    for name, v in case.params.items():
        args.append(v)
        exact.append(v)
    return args, exact


def relayout(t: torch.Tensor, kind: str) -> torch.Tensor:
    """``t``'s values (shape kept) in another memory layout: ``transposed`` (dims stored in reverse
    order), ``offset`` (a slice of a bigger, NaN- or 0-padded tensor), ``expanded`` (the first dim
    has stride 0: its values repeat)."""
    if kind == "contiguous" or t.dim() == 0:
        return t.contiguous()
    if kind == "transposed":
        rev = list(reversed(range(t.dim())))
        return t.permute(*rev).contiguous().permute(*rev)
    if kind == "offset":
        big = torch.full([s + 2 for s in t.shape], float("nan") if t.is_floating_point() else 0, dtype=t.dtype)
        sl = tuple(slice(1, 1 + s) for s in t.shape)
        big[sl] = t
        return big[sl]
    if kind == "expanded":
        return t[:1].expand(t.shape)
    raise ValueError(f"unknown layout {kind!r}")
