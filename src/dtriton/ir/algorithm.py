"""A traced algorithm: tracing a Python function into the IR, CSE, axis sizes, stage names.

An *algorithm* says what each output element is, nothing about how it is computed. Its function
is run once on symbolic inputs (:class:`~dtriton.ir.expr.InputTensor`, :class:`ScalarParam`) to
build the expression graph; every reduction and every output is a *stage* a schedule can address
by name. :meth:`Algorithm.reference` evaluates it eagerly in torch (the oracle of every test).
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import pickle
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

import torch

from ..errors import AlgorithmError, ShapeError
from .expr import Axis, Cast, Expr, InputTensor, Load, Output, Reduce, ScalarParam, fmt
from .intervals import integer_valued
from .reference import Binding, evaluate, numpy_item
from .walk import topo_order

__all__ = ["Algorithm", "Stage", "TensorAnnotation", "algorithm_named", "cse", "merge_named"]


class TensorAnnotation:
    """``dt.Tensor["M", "K"]``: a tensor argument whose dims carry symbolic size names."""

    def __init__(self, dims: tuple[str, ...]):
        for d in dims:
            if not (isinstance(d, str) and d.isidentifier()):
                raise AlgorithmError(f"dt.Tensor dims are size names such as 'M', got {d!r}")
        self.dims = tuple(dims)

    def __repr__(self):
        return f"dt.Tensor[{', '.join(map(repr, self.dims))}]"


@dataclass
class Stage:
    """A named stage: a reduction or an output. ``node`` is the Reduce node, or the Output."""
    name: str
    node: Any
    is_output: bool

    @property
    def expr(self) -> Expr:
        """The stage's expression (an output's indexed expression, or the Reduce node)."""
        return self.node.expr if self.is_output else self.node

    @property
    def free_axes(self) -> tuple[str, ...]:
        """The stage's axes: an output's layout, or the reduction's remaining axes."""
        return self.node.layout if self.is_output else self.node.axes


def cse(roots: Sequence[Expr]) -> dict[int, Expr]:
    """Merge structurally identical nodes (``X[i, j]`` written twice is one load).

    Returns the replacement of every node that changed (by id): a node equal to an earlier one
    maps to that one; a node over merged children maps to a rebuilt copy. Untouched nodes keep
    their identity."""
    canon: dict[tuple, Expr] = {}
    remap: dict[int, Expr] = {}
    for n in topo_order(roots):
        kids = n.children()
        new_kids = tuple(remap.get(c.uid, c) for c in kids)
        m = n if all(a is b for a, b in zip(new_kids, kids)) else n.rebuild(new_kids)
        key = (n.kind, m.signature(), tuple(c.uid for c in new_kids))
        if key in canon:
            remap[n.uid] = canon[key]
        else:
            canon[key] = m
            if m is not n:
                remap[n.uid] = m
    return remap


#: node attributes that enter the fingerprint, per kind (the text stays as it has always been)
_FINGERPRINT_ATTRS = {"Const": ("value",), "Axis": ("name",), "ScalarParam": ("name",), "Unary": ("op",),
                      "Binary": ("op",), "Cast": ("dtype",), "Reduce": ("name", "over")}


def _node_fields(n: Expr) -> list[str]:
    """The attributes of ``n`` its fingerprint hashes. A reduction is hashed by its combiner's base
    kind and whether it finishes with a division by the count, in the order fingerprints always
    used (``op=``, ``name=``, ``over=``, ``mean=``), so tuning records stay keyed as before."""
    d = [f"{attr}={getattr(n, attr)}" for attr in _FINGERPRINT_ATTRS.get(n.kind, ())]
    if isinstance(n, Reduce):
        d = [f"op={n.combiner.base}", *d, f"mean={n.combiner.finalize == 'count'}"]
    if isinstance(n, Cast) and n.saturate:   # only then, so the fingerprints of plain casts stay as they were
        d.append("saturate=True")
    return d


def _axis_sizes(nodes: Sequence[Expr]) -> dict[str, str]:
    """Axis -> size symbol, from every plain access ``A[.., i, ..]``; an axis indexing two dims
    with different size names is an :class:`AlgorithmError`."""
    axis_size: dict[str, str] = {}
    origin: dict[str, str] = {}
    for n in nodes:
        if isinstance(n, Axis) and n.size is not None:
            if axis_size.get(n.name, n.size) != n.size:
                raise AlgorithmError(f"axis {n.name!r} is declared with sizes {axis_size[n.name]!r} and {n.size!r}; "
                                     "give it one size")
            axis_size[n.name] = n.size
            origin[n.name] = f"its declaration {n.name}:{n.size}"
    for n in nodes:
        if isinstance(n, Load):
            for d, e in zip(n.tensor.dims, n.index):
                if isinstance(e, Axis):
                    if e.name in axis_size and axis_size[e.name] != d:
                        raise AlgorithmError(
                            f"axis {e.name!r} indexes dim {d!r} of {n.tensor.name} but dim "
                            f"{axis_size[e.name]!r} of {origin[e.name]}; use two axes, or give both dims one size name")
                    axis_size.setdefault(e.name, d)
                    origin.setdefault(e.name, n.tensor.name)
    return axis_size


def _check_integer_indices(nodes: Sequence[Expr]) -> None:
    """An index that cannot be an integer whatever the dtypes of the tensors it reads (a float
    literal or ``float`` argument, a ``/``, a float function or cast in it: ``X[i * 0.5]``) is an
    :class:`AlgorithmError` naming the tensor, the dim and the index; one that depends on a tensor's
    dtype is checked when a call binds it."""
    for n in nodes:
        if not isinstance(n, Load):
            continue
        for d, e in enumerate(n.index):
            if not isinstance(e, Axis) and not integer_valued(e, lambda _name: True):
                raise AlgorithmError(
                    f"index {d} of {fmt(n)} is not an integer: an index is an integer expression of "
                    f"axes, integer literals, int arguments, integer tensors and arg-reductions combined by + - * // % "
                    f"(a float literal or argument, a / or a float function makes it a float). Write the index in "
                    f"integers (i // 2 for half of i), or round a computed one with dt.cast(..., torch.int64)")


def _check_sized(axis_names: Sequence[str], axis_size: dict[str, str], nodes: Sequence[Expr]) -> None:
    for a in axis_names:
        if a not in axis_size:
            inside = [n for n in nodes if isinstance(n, Load) and any(not isinstance(e, Axis) and a in e.axes
                                                                       for e in n.index)]
            if inside:
                raise AlgorithmError(
                    f"axis {a!r} appears only inside an index expression ({fmt(inside[0])}), so its size is "
                    f"unknown; give it a size name, dt.axes('{a}:N') (N a dim of an input), or index a dim "
                    f"with the bare axis somewhere")
            raise AlgorithmError(
                f"axis {a!r} never indexes an input dim, so its size is unknown; use it to index a tensor, or "
                f"give it a size name, dt.axes('{a}:N') (N a dim of an input)")


def _name_stages(nodes: Sequence[Expr], outputs: Sequence[Output]) -> dict[str, Stage]:
    """Stages in order: reductions (named, or auto-named ``<kind><k>`` per kind), then outputs."""
    stages: dict[str, Stage] = {}
    counts: dict[str, int] = {}
    for n in nodes:
        if isinstance(n, Reduce):
            nm = n.name
            if nm is None:
                base = n.combiner.name
                k = counts.get(base, 0)
                counts[base] = k + 1
                nm = f"{base}{k}"
                while nm in stages:
                    k += 1
                    counts[base] = k + 1
                    nm = f"{base}{k}"
                n.name = nm
            if nm in stages:
                raise AlgorithmError(f"two stages are named {nm!r}; stage names must be unique")
            stages[nm] = Stage(nm, n, False)
    for o in outputs:
        if o.name in stages:
            raise AlgorithmError(f"stage name {o.name!r} is used by both a reduction and an output")
        stages[o.name] = Stage(o.name, o, True)
    return stages


def _resolve(module: str | None, qualname: str):
    """The object ``module.qualname`` names among the loaded modules, or None."""
    obj = sys.modules.get(module or "")
    if obj is None or not qualname or "<locals>" in qualname:
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def algorithm_named(module: str, qualname: str) -> "Algorithm":
    """The algorithm defined as ``qualname`` in ``module`` (imported when not loaded yet): how a
    pickled algorithm is loaded. Raises ``pickle.UnpicklingError`` when that name is no algorithm (for
    ``__main__``, a script's or notebook's algorithm loaded elsewhere: saying to define it in a module)."""
    if module not in sys.modules:
        __import__(module)
    alg = _resolve(module, qualname)
    if not isinstance(alg, Algorithm) and module == "__main__":   # pickled by a script or notebook, loaded elsewhere
        raise pickle.UnpicklingError(
            f"cannot load the algorithm {qualname}: it was defined in __main__ (a script or notebook), and this "
            f"program's __main__ has no algorithm of that name ({type(alg).__name__}). Define it in an importable "
            f"module, import it from there where you pickle and load, and pickle again (or, to load this pickle, "
            f"define {qualname} in the __main__ of the loading program before loading)")
    if not isinstance(alg, Algorithm):
        raise pickle.UnpicklingError(f"{module}.{qualname} is no dtriton algorithm now ({type(alg).__name__}); "
                                     f"the pickle named the algorithm defined there")
    return alg


def _check_scalar_names(name: str, params: Sequence["InputTensor | ScalarParam"]) -> None:
    """Refuse a scalar parameter named like a size symbol of a tensor argument: ``N: int`` beside
    ``X: dt.Tensor["M", "N"]`` would leave ``dt.axes("j:N")`` taking the tensor's dim and ``X[i, j] * N``
    the argument, silently two different values."""
    dims = {d: p.name for p in params if isinstance(p, InputTensor) for d in p.dims}
    for p in params:
        if isinstance(p, ScalarParam) and p.name in dims:
            raise AlgorithmError(
                f"parameter {p.name!r} ({p.pytype.__name__}) of {name} has the name of a dim of its tensor argument "
                f"{dims[p.name]!r} (size symbol {p.name!r}): an axis of size {p.name!r} would take the tensor's dim "
                f"and the expression {p.name} the argument. Rename one (e.g. the parameter to `{p.name}_out: {p.pytype.__name__}`"
                f" or the dim), or, for a size the tensor already has, drop the parameter")


class Algorithm:
    """A traced algorithm: inputs, outputs, stages, axis-to-size map, and the reference evaluator.

    Build one with the ``dt.algorithm`` decorator. Calling it is the same as :meth:`reference`.
    ``provenance``: how a transformation derived it (``dt.grad`` records a
    :class:`~dtriton.grad.GradProvenance` on each backward algorithm), None for a traced one.
    """

    provenance: Any = None
    #: the argument constraints ``dt.requires`` added (:class:`~dtriton.ir.requires.Requirement`),
    #: checked at each call; ``requires_check(args)`` is their printed checker (None without any)
    requires: tuple = ()
    requires_check: Any = None
    #: the positions of the scalar arguments the constraints name (part of launcher cache keys)
    requires_pos: tuple = ()
    #: what an index out of range means for this algorithm, ``{tensor argument: hint}`` (set a dict on the
    #: algorithm): the :class:`~dtriton.errors.IndexRangeError` of a read whose index reads that argument (a
    #: gather through ``labels``) ends with the hint instead of the generic fixes (pad, guard, sizes); its
    #: ``str.format`` fields name the call's scalar arguments and size symbols (``"{ignore_index}"``)
    index_hints: Mapping[str, str] = MappingProxyType({})

    @classmethod
    def build(cls, name: str, params: Sequence["InputTensor | ScalarParam"], outputs: Sequence["Output"],
              doc: str | None = None) -> "Algorithm":
        """Make an algorithm from already-built IR (used by transformations such as ``dt.grad``).

        ``params`` are :class:`InputTensor` (``InputTensor(name, dims, position)``) and
        :class:`ScalarParam` objects; ``outputs`` are ``expr[i, j]`` layouts built over them."""
        self = cls.__new__(cls)
        self.fn = None
        self.name = name
        self.__doc__ = doc
        self.params = list(params)
        outs = list(outputs)
        for n, o in enumerate(outs):
            o.name = "out" if len(outs) == 1 else f"out{n}"
        self.outputs = outs
        self._analyse()
        return self

    def __init__(self, fn: Callable):
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        sig = inspect.signature(fn)
        self.params: list[InputTensor | ScalarParam] = []
        for pos, (pname, p) in enumerate(sig.parameters.items()):
            ann = p.annotation
            if isinstance(ann, str):  # `from __future__ import annotations`
                ann = eval(ann, fn.__globals__)  # noqa: S307 - the user's own annotation
            if isinstance(ann, TensorAnnotation):
                t = InputTensor(pname, ann.dims, pos)
            elif ann in (float, int):
                t = ScalarParam(pname, ann)
            else:
                got = ("none" if ann is inspect.Parameter.empty else
                       "torch.Tensor, which does not name its dims" if ann is torch.Tensor else
                       getattr(ann, "__name__", repr(ann)))
                raise AlgorithmError(
                    f"argument {pname!r} of {self.name} needs an annotation: dt.Tensor['M', 'N'] for a tensor "
                    f"(one size name per dim), or float / int for a scalar; it has {got}")
            self.params.append(t)
        _check_scalar_names(self.name, self.params)
        ret = fn(*self.params)
        rets = ret if isinstance(ret, tuple) else (ret,)
        outs: list[Output] = []
        for r in rets:
            if isinstance(r, Output):
                outs.append(r)
            elif isinstance(r, Expr) and not r.axes:
                outs.append(Output(r, ()))
            elif isinstance(r, Expr):
                lay = ", ".join(r.axes)
                fix = (f"`return {fmt(r, limit=None)}[{lay}]` (a copy of the input: the read, then the output's "
                       f"layout)" if isinstance(r, Load) else f"`return (...)[{lay}]` (the expression in parentheses, "
                                                              f"then the output's layout)")
                raise AlgorithmError(f"{self.name} must return outputs with a layout: the element expression, then the "
                                     f"output's axes in brackets; got {r!r}, an element expression without one. "
                                     f"Write {fix}")
            else:
                raise AlgorithmError(
                    f"{self.name} must return outputs with a layout, e.g. `return (A[i, k] * 2.0)[i, k]` (the element "
                    f"expression, then the output's axes in brackets); got {type(r).__name__} {r!r:.80}")
        for n, o in enumerate(outs):
            o.name = "out" if len(outs) == 1 else f"out{n}"
        self.outputs = outs
        self._analyse()

    def take_index_hints(self, source: "Algorithm") -> "Algorithm":
        """Give this algorithm, derived from ``source`` and taking its arguments (a backward, a forward
        saving statistics, a rewrite), the :attr:`index_hints` of ``source``; returns it."""
        if source.index_hints:
            self.index_hints = dict(source.index_hints)
        return self

    # -- pickling and copying ---------------------------------------------------------------------
    def __reduce_ex__(self, protocol):
        """Pickled by reference (module and qualified name, like a function) when that name imports
        this same algorithm; by value when it has no function (built by ``dt.grad``, or a traced
        function that itself pickles by reference). Raises ``pickle.PicklingError`` otherwise."""
        fn = self.fn
        if fn is None:
            return super().__reduce_ex__(protocol)
        mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
        if _resolve(mod, qual) is self:
            return algorithm_named, (mod, qual)
        if _resolve(mod, qual) is fn:   # dt.algorithm(f) kept beside f: f pickles by reference
            return super().__reduce_ex__(protocol)
        where = ("defined inside a function" if "<locals>" in qual else
                 f"not importable as {mod}.{qual} (defined in a notebook cell, or that name was rebound)")
        raise pickle.PicklingError(
            f"cannot pickle the algorithm {self.name}: it is {where}, and algorithms pickle by reference. Define it at "
            f"the top level of a module to pickle it, or save a model's weights (torch.save(model.state_dict(), ...)) "
            f"and build the model, with its kernels, again on load")

    def __copy__(self):
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            setattr(new, k, copy.deepcopy(v, memo))
        return new

    # ------------------------------------------------------------------------------------------
    def _analyse(self):
        remap = cse([o.expr for o in self.outputs])
        for o in self.outputs:
            o.expr = remap.get(o.expr.uid, o.expr)
        outs = {o.name for o in self.outputs}
        for n, o in enumerate(self.outputs):
            extra = [a for a in o.layout if a not in o.expr.axes]
            if extra:
                which = "its output" if len(self.outputs) == 1 else f"output number {n + 1} (of {len(self.outputs)})"
                axes = (f"axis {extra[0]!r}" if len(extra) == 1 else
                        "axes " + ", ".join(repr(a) for a in extra))
                kept = ", ".join(a for a in o.layout if a not in extra)
                raise AlgorithmError(
                    f"{self.name} returns {which} indexed [{', '.join(o.layout)}], but its value, "
                    f"`{fmt(o.expr)}`, does not depend on {axes}, and outputs are not broadcast. Index it "
                    f"[{kept}] instead, or expand the result in torch after the call")
        for p in self.params:
            if p.name in outs:
                raise AlgorithmError(f"parameter {p.name!r} of {self.name} has the name of its output {p.name!r} "
                                     f"(outputs are named {sorted(outs)}); rename the parameter")
        nodes = topo_order([o.expr for o in self.outputs])
        self.nodes = nodes
        axis_size = _axis_sizes(nodes)
        all_axes: list[str] = []
        for n in nodes:
            all_axes.extend(n.axes)
            if isinstance(n, Reduce):
                all_axes.extend(n.over)
        for o in self.outputs:
            all_axes.extend(o.layout)
        self.axis_names = tuple(dict.fromkeys(all_axes))
        _check_integer_indices(nodes)
        _check_sized(self.axis_names, axis_size, nodes)
        dims = {d for p in self.params if isinstance(p, InputTensor) for d in p.dims}
        ints = {p.name: k for k, p in enumerate(self.params) if isinstance(p, ScalarParam) and p.pytype is int}
        #: size symbols given by an ``int`` argument (``dt.axes("h:Ho")`` with ``Ho: int``) -> its position
        self.size_args = {}
        for a, sym in axis_size.items():
            if sym in ints and sym not in dims:
                self.size_args[sym] = ints[sym]
            elif sym not in dims:
                raise AlgorithmError(f"axis {a!r} is declared with size {sym!r}, which neither a tensor argument of "
                                     f"{self.name} has (their dims: {sorted(dims)}) nor an int argument names; use one "
                                     f"of those dims, or add an argument `{sym}: int` (an output size, e.g. of a strided "
                                     f"convolution)")
        self.axis_size = axis_size
        self.stages = _name_stages(nodes, self.outputs)
        self.reduction_axes = tuple(dict.fromkeys(a for n in nodes if isinstance(n, Reduce) for a in n.over))
        self.tensor_params = [p for p in self.params if isinstance(p, InputTensor)]
        # gathers whose index is an integer tensor read directly, e.g. X[i, labels[i]]:
        # (index tensor name, gathered tensor name, dim position, size symbol of that dim)
        self.gathers = []
        for n in nodes:
            if isinstance(n, Load):
                for d, e in enumerate(n.index):
                    if isinstance(e, Load) and e.is_plain():
                        self.gathers.append((e.tensor.name, n.tensor.name, d, n.tensor.dims[d]))
        self.fingerprint = self._fingerprint()

    def _fingerprint(self) -> str:
        """A stable hash of the expression graph (not of Python identities)."""
        ids = {n.uid: k for k, n in enumerate(self.nodes)}
        parts = [self.name]
        for p in self.params:
            parts.append(repr(p) if isinstance(p, InputTensor) else f"{p.name}:{p.pytype.__name__}")
        for n in self.nodes:
            d = [n.kind, ",".join(n.axes)]
            d.extend(_node_fields(n))
            if isinstance(n, Load):
                d.append(n.tensor.name)
                if n.pad is not None:   # (an int padding a float holds hashes as before ints were kept: 0 as 0.0)
                    p = n.pad
                    d.append(f"pad={float(p) if isinstance(p, int) and float(p) == p else p!r}")
            if isinstance(n, Axis) and n.size is not None:
                d.append(f"size={n.size}")
            d.append(",".join(str(ids[c.uid]) for c in n.children()))
            parts.append("|".join(d))
        for o in self.outputs:
            parts.append(f"{o.name}:{ids[o.expr.uid]}:{','.join(o.layout)}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    # ------------------------------------------------------------------------------------------
    def bind(self, args: Sequence[Any]) -> Binding:
        """Check call arguments against the signature; return sizes and dtypes.

        Raises :class:`ShapeError` naming the argument and size symbol on any mismatch."""
        return Binding.make(self, args)

    def reference(self, *args, **named):
        """Evaluate the algorithm eagerly in torch: the oracle for every test and explored schedule.
        Arguments by position or by parameter name, as a compiled kernel's (``alg.reference(X=x)``;
        :func:`merge_named`: a :class:`ShapeError` for an unknown, repeated or missing one).

        fp16/bf16 inputs are computed in fp32 and rounded to the output dtype at the end (as a
        fused kernel does); float64 inputs stay float64. Returns one tensor, or a tuple for several
        outputs, each laid out as the algorithm's ``expr[i, j]`` says."""
        if named:
            args = merge_named(self, args, named)
        args = tuple(numpy_item(a) for a in args)   # (np.True_, a 0-d array: the number, as a kernel's call takes it)
        b = self.bind(args)
        outs = evaluate(self, b, args)
        return outs[0] if len(outs) == 1 else tuple(outs)

    __call__ = reference

    def __repr__(self):
        ins = ", ".join(repr(p) if isinstance(p, InputTensor) else f"{p.name}: {p.pytype.__name__}"
                        for p in self.params)
        return f"<dt.algorithm {self.name}({ins}) stages={list(self.stages)}>"


def merge_named(alg: Algorithm, args: tuple, named: dict) -> tuple:
    """Positional arguments followed by named ones, in the algorithm's parameter order (the call of a
    kernel, of :meth:`Algorithm.reference`). Raises :class:`ShapeError` for an unknown name, an
    argument given both by position and by name, or a missing one."""
    names = [p.name for p in alg.params]
    unknown = [n for n in named if n not in names]
    if unknown:
        raise ShapeError(f"{alg.name} has no parameter {unknown[0]!r}; its parameters are {names}")
    twice = [n for n in names[:len(args)] if n in named]
    if twice:
        raise ShapeError(f"{alg.name}: {twice[0]!r} is given both by position and by name")
    merged = list(args)
    for n in names[len(args):]:
        if n not in named:
            raise ShapeError(f"{alg.name}: missing argument {n!r} (parameters: {names})")
        merged.append(named[n])
    return tuple(merged)
