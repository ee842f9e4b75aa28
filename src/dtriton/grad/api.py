"""The user-facing gradient functions: :func:`grad`, :func:`augmented_forward`, :func:`staged`,
the result type :class:`GradientAlgorithms` and the listing :func:`describe`."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from ..errors import AlgorithmError
from ..ir import Algorithm, Axis, Expr, InputTensor, Load, Output, Reduce, fmt, reduction_stages, topo_order, walk
from .derive import Deriver
from .finalize import Finalizer, copy_nodes, group_gradients, make_params, param_spec
from .logsumexp import at_lse, lse_statistics, lse_value, rescalable, stage_shifts
from .naming import unique_param_name
from .reuse import read_saved_values

__all__ = ["grad", "GradProvenance", "GradientAlgorithms", "describe", "augmented_forward", "check_save", "check_group",
           "saved_outputs",
           "saved_statistics", "staged"]


# ----------------------------------------------------------------------------------------------
# the result
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GradProvenance:
    """How :func:`grad` derived one backward algorithm (its ``provenance``): plain facts, for a later
    stage (the plan) to recognise a backward whose forward it knows.

    Attributes:
        forward: the forward algorithm differentiated.
        wrt: per output of the backward algorithm, the forward input it is the gradient of.
        grad_params: the upstream-gradient parameters, one per forward output.
        seeded: indices of the forward outputs whose upstream gradients are read.
        saved: the forward stages (reductions, log-sum-exp statistics or outputs) taken as inputs.
        saved_params: their parameter names, in ``saved`` order.
    """
    forward: Algorithm
    wrt: tuple[str, ...]
    grad_params: tuple[str, ...]
    seeded: tuple[int, ...]
    saved: tuple[str, ...]
    saved_params: tuple[str, ...]

    def __reduce__(self):
        """Pickled with the forward's IR, not its Python function (a traced function is pickled by
        reference, which the module's algorithm object, not the function, answers): a backward algorithm
        stays sendable by value to a spawned worker."""
        fwd = copy.copy(self.forward)
        fwd.fn = None
        return (GradProvenance, (fwd, self.wrt, self.grad_params, self.seeded, self.saved, self.saved_params))


@dataclass
class GradientAlgorithms:
    """The backward algorithms of a forward algorithm (what :func:`grad` returns).

    Attributes:
        forward: the forward :class:`~dtriton.ir.Algorithm`.
        wrt: names of the inputs whose gradients are computed (forward parameter order).
        algorithms: the backward algorithms. Each takes the *same* arguments, in this order: the
            forward arguments, one upstream gradient per forward output (``grad_out`` /
            ``grad_out0``, ``grad_out1``, ...; dims named after the output's axis sizes, same dtype
            as the output), then the saved forward stages (``saved_<stage>``, dims named after the
            stage's axis sizes, in :attr:`saved` order). Their outputs are the gradients (same shape
            as the input, dtype by the usual promotion of the floating inputs).
        locate: input name -> (index into ``algorithms``, output index of that algorithm).
        zero: requested inputs whose gradient is structurally zero (only used as gather indices or
            conditions); no algorithm computes them.
        grad_names: names of the upstream-gradient parameters, one per forward output.
        saved: forward stage names (reductions, log-sum-exp statistics, outputs) that are inputs
            instead of being recomputed.
        outputs: indices of the forward outputs whose upstream gradients the algorithms read (all
            by default); the others are taken as zero (their parameters stay, unread).
    """
    forward: Algorithm
    wrt: tuple[str, ...]
    algorithms: tuple[Algorithm, ...]
    locate: dict[str, tuple[int, int]]
    zero: tuple[str, ...]
    grad_names: tuple[str, ...]
    saved: tuple[str, ...]
    stats: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[int, ...] = ()

    def __getitem__(self, name: str) -> Algorithm:
        """The backward algorithm that computes the gradient of input ``name``."""
        if name not in self.locate:
            raise KeyError(f"no backward algorithm computes d{name}; gradients are computed for "
                           f"{list(self.locate)} (structurally zero: {list(self.zero)})")
        return self.algorithms[self.locate[name][0]]

    def __iter__(self):
        return iter(self.algorithms)

    def __len__(self):
        return len(self.algorithms)

    @property
    def num_stages(self) -> int:
        """Total number of stages (reductions and outputs) over all backward algorithms."""
        return sum(len(a.stages) for a in self.algorithms)

    def reference(self, *args) -> tuple[torch.Tensor | None, ...]:
        """Evaluate the gradients in eager torch (the reference evaluator of each algorithm).

        ``args``: the backward arguments (forward args, upstream grads, saved stages). Returns one
        tensor per name in :attr:`wrt` (``None`` for structurally zero gradients)."""
        res: dict[str, torch.Tensor] = {}
        for k, a in enumerate(self.algorithms):
            outs = a.reference(*args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            for name, (ai, oi) in self.locate.items():
                if ai == k:
                    res[name] = outs[oi]
        return tuple(res.get(n) for n in self.wrt)

    def __str__(self):
        head = (f"gradients of {self.forward.name} wrt {list(self.wrt)}: {len(self.algorithms)} algorithm(s), "
                f"{self.num_stages} stages" + (f"; zero: {list(self.zero)}" if self.zero else "") +
                (f"; saved: {list(self.saved)}" if self.saved else ""))
        parts = [head]
        for a in self.algorithms:
            outs = {o.name: n for n, (ai, oi) in self.locate.items() if self.algorithms[ai] is a
                    for o in [a.outputs[oi]]}
            parts.append(describe(a, {k: f"d{v}" for k, v in outs.items()}))
        return "\n".join(parts)

    __repr__ = __str__


def describe(alg: Algorithm, labels: dict[str, str] | None = None) -> str:
    """Readable listing of an algorithm, one line per stage (``name[axes] = expression``, nested
    stages printed by name). ``labels`` adds a note to output stages (e.g. ``{"out0": "dX"}``)."""
    names = {s.node.uid: s.name for s in reduction_stages(alg)}
    lines = [repr(alg)]
    for s in alg.stages.values():
        if s.is_output:
            o = s.node
            e = o.expr
            body = names[e.uid] if e.uid in names else fmt(e, 0, names)
            note = f"  # {labels[s.name]}" if labels and s.name in labels else ""
            lines.append(f"    {s.name}[{', '.join(o.layout)}] = {body}{note}")
        else:
            lines.append(f"    {s.name}[{', '.join(s.node.axes)}] = {fmt(s.node, 0, names)}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# the derivation
# ----------------------------------------------------------------------------------------------
def _wrt_names(alg: Algorithm, wrt: str | Sequence[str] | None) -> list[str]:
    """The tensor inputs to differentiate, in parameter order (all of them for ``None``)."""
    tnames = [p.name for p in alg.params if isinstance(p, InputTensor)]
    if isinstance(wrt, str):
        wrt = (wrt,)
    if wrt is None:
        return list(tnames)
    bad = [w for w in wrt if w not in tnames]
    if bad:
        raise AlgorithmError(f"dt.grad: {bad} are not tensor inputs of {alg.name}; its tensor inputs are {tnames}")
    return [n for n in tnames if n in set(wrt)]


def _saved_stages(alg: Algorithm, d: Deriver, grads: dict[str, tuple[Expr, tuple[str, ...]]],
                  save: Sequence[str] | str | None) -> list[str]:
    """The forward stages the backward takes as inputs (``save=`` of :func:`grad`)."""
    fwd_stage_names = [s.name for s in reduction_stages(alg)]
    if save is None:
        return []
    if save == "all":
        used = set()
        for e, _ in grads.values():
            for x in topo_order([e]):
                if isinstance(x, Reduce) and x.uid in d.g.fwd and x.name:
                    used.add(x.name)
        return [s for s in fwd_stage_names if s in used]
    return [save] if isinstance(save, str) else list(save)   # (checked by grad: check_save)


def grad(alg: Algorithm, wrt: str | Sequence[str] | None = None, *, save: Sequence[str] | str | None = None,
         group: str = "auto", outputs: Sequence[int] | None = None) -> GradientAlgorithms:
    """Derive the backward algorithms of ``alg`` by reverse-mode differentiation.

    Args:
        alg: a forward ``@dt.algorithm``.
        wrt: input name(s) to differentiate with respect to; ``None`` for every tensor input that
            reaches an output arithmetically (inputs used only as gather indices or conditions,
            such as integer labels, are left out).
        save: forward reduction stages to take as inputs (``saved_<stage>``, laid out along the
            stage's free axes in order) instead of recomputing them (a list, tuple or set of names).
            An output stage (``"out1"``) may be named too: the backward then takes it
            (``saved_out1``, along the output's layout, from :func:`augmented_forward`) and reads it
            wherever it recomputes the output's value, as a node or as all the factors of a product
            (:mod:`~dtriton.grad.reuse`: the diffusion layer's ``spectral * evals`` instead of
            ``exp(-evals t) * proj * evals``);
            ``"all"`` for every forward reduction the backward uses; ``"auto"`` for the statistics
            worth saving (:func:`saved_statistics`). Compute them with :func:`augmented_forward`.
        group: ``"auto"`` puts gradients that share a reduction stage into one algorithm (so the
            shared stage runs once), and gradients that are each one reduction over the same axes
            with the same layout (layer norm's dw and db, computed by one kernel in one pass);
            ``"none"`` gives one algorithm per input, ``"all"`` one in total.
        outputs: indices of the forward outputs that receive an upstream gradient (default: all). The
            others are taken as zero: the algorithms still take their gradient parameters (every
            variant has the same arguments) but never read them, so an output nobody differentiates
            (the diffusion layer's spectral coefficients) costs the backward no loads.

    Returns a :class:`GradientAlgorithms`. Its algorithms take ``(*forward_args, *upstream_grads,
    *saved)``; upstream gradient ``k`` has the shape of forward output ``k``. Computation dtype is
    the promotion of the floating inputs (fp32 for fp16/bf16 inputs, fp64 for fp64), as forward.

    Raises :class:`~dtriton.errors.AlgorithmError` for unknown input names, a ``group=`` other than
    ``"auto"``, ``"none"`` or ``"all"`` (:func:`check_group`), a ``save=`` that is
    neither ``"auto"``, ``"all"``, ``None`` nor names of stages or statistics (:func:`check_save`), an output
    index out of range, or a node kind the differentiator does not know.

    Sources: Griewank & Walther, "Evaluating Derivatives" (SIAM 2008), reverse mode (ch. 3) and
    its adjoint rules for elementals (ch. 4); torch's derivatives.yaml conventions for ties
    (``amax``/``maximum``) and for ``abs`` at 0.
    """
    if not isinstance(alg, Algorithm):
        raise TypeError(f"dt.grad expects an @dt.algorithm, got {type(alg).__name__}")
    check_group(group, f"dt.grad({alg.name})")
    save = _saving(alg, save, f"dt.grad({alg.name})", ("auto", "all", None))
    wrt_l = _wrt_names(alg, wrt)
    n_out = len(alg.outputs)
    seeded = tuple(range(n_out)) if outputs is None else tuple(sorted(set(outputs)))
    bad = [k for k in seeded if not isinstance(k, int) or not 0 <= k < n_out]
    if bad:
        raise AlgorithmError(f"dt.grad(outputs={list(outputs)}): {alg.name} has {n_out} output(s), indices 0 to "
                             f"{n_out - 1}; {bad} is out of range")
    d = Deriver(alg)
    grads = d.run(wrt_l, seeded)
    if wrt is None:
        wrt_l = [n for n in wrt_l if n in grads]
    zero = tuple(n for n in wrt_l if n not in grads)
    save_l = _saved_stages(alg, d, grads, save)
    taken = {p.name for p in alg.params} | set(d.gnames)
    saved_map: dict[int, tuple[str, tuple[str, ...]]] = {}
    saved_params = []
    lses = {s: lse_statistics(alg)[s] for s in save_l if s not in alg.stages}
    outs_saved = []   # (forward value, load of its parameter) per saved output
    outs_names = {s for s in save_l if s in alg.stages and alg.stages[s].is_output}
    for s in save_l:
        if s in outs_names:   # a saved output: read where recomputed (read_saved_values)
            o = alg.stages[s].node
            pn = unique_param_name(f"saved_{s}", taken)
            dims = tuple(alg.axis_size[a] for a in o.layout)
            saved_map[-1 - len(saved_map)] = (pn, tuple(o.layout))   # (no node: a weak parameter)
            saved_params.append(("tensor", pn, dims))
            if set(o.layout) == set(o.expr.axes):   # (a broadcast output is no value of the expression)
                outs_saved.append((d.clone[o.expr.uid], d.g.load(d.g.tensor(pn, dims), [d.g.axis(a) for a in o.layout])))
            continue
        node = d.clone[alg.stages[lses[s][0] if s in lses else s].node.uid]
        pn = unique_param_name(f"saved_{s}", taken)
        saved_map[node.uid if s not in lses else -1 - len(saved_map)] = (pn, tuple(node.axes))
        saved_params.append(("tensor", pn, tuple(alg.axis_size[a] for a in node.axes)))
    spec = param_spec(alg)
    spec += [("tensor", gn, tuple(alg.axis_size[a] for a in o.layout)) for gn, o in zip(d.gnames, alg.outputs)]
    spec += saved_params
    if lses:
        # every saved value becomes a load here; saved_map still names them (weak parameters), and
        # a statistic by a key no node has
        grads = _read_lse(alg, d, grads, [s for s in save_l if s not in outs_names],
                          lses, [p[1] for s, p in zip(save_l, saved_params) if s not in outs_names])
    if outs_saved:   # after the statistics: a value over a max or sum they replace matches no more
        grads = read_saved_values(d.g, grads, outs_saved)
    fin = Finalizer(d, spec, saved_map)
    algs = []
    locate: dict[str, tuple[int, int]] = {}
    for grp in group_gradients(grads, wrt_l, group):
        name = f"{alg.name}_grad_{'_'.join(grp)}"
        outs = [grads[n] for n in grp]
        doc = (f"Backward of {alg.name}: gradient(s) wrt {', '.join(grp)} (derived by dt.grad). "
               f"Arguments: {', '.join(s[1] for s in spec)}.")
        algs.append(fin.build(name, outs, doc, list(grp)).take_index_hints(alg))
        algs[-1].provenance = GradProvenance(alg, tuple(grp), tuple(d.gnames), seeded, tuple(save_l),
                                             tuple(p[1] for p in saved_params))
        for k, n in enumerate(grp):
            locate[n] = (len(algs) - 1, k)
    return GradientAlgorithms(alg, tuple(wrt_l), tuple(algs), locate, zero, tuple(d.gnames), tuple(save_l),
                              {"blocked_extrema": [x.name for x in d.order if x.uid in d.blocked]}, seeded)


def _read_lse(alg: Algorithm, d: Deriver, grads: dict[str, tuple[Expr, tuple[str, ...]]], save_l: list[str],
              lses: dict[str, tuple[str, str]], pnames: list[str]) -> dict[str, tuple[Expr, tuple[str, ...]]]:
    """``grads`` reading the saved values: each log-sum-exp statistic in place of its max, the constant 1 in
    place of its sum, and the saved stages (taken at the statistic's shift, :mod:`.logsumexp`) as loads of
    their parameters ``pnames`` (in ``save_l`` order). Raises :class:`AlgorithmError` when a max or sum of
    a statistic is saved besides it, or a saved stage depends on the max in a way the rule cannot follow."""
    g = d.g
    pairs = {x for mn_ln in lses.values() for x in mn_ln}
    clash = sorted(pairs & set(save_l))
    if clash:
        raise AlgorithmError(f"dt.grad: save= names the stages {clash} of {alg.name} and a log-sum-exp statistic "
                             f"made of them ({[k for k, v in lses.items() if set(v) & set(clash)]}); save one or the other")
    repl: dict[int, Expr] = {}
    for s, pn in zip(save_l, pnames):
        stage = lses[s][0] if s in lses else s
        node = d.clone[alg.stages[stage].node.uid]
        t = g.tensor(pn, tuple(alg.axis_size[a] for a in node.axes))
        repl[node.uid] = g.load(t, [g.axis(a) for a in node.axes])
        if s in lses:
            repl[d.clone[alg.stages[lses[s][1]].node.uid].uid] = g.const(1.0)
    for mn, ln in lses.values():
        shifts = stage_shifts(alg, mn)
        for s in save_l:
            if s in shifts and s not in (mn, ln):   # checks that the change under the shift is known
                at_lse(g, s, d.clone[alg.stages[s].node.uid], shifts[s], d.clone[alg.stages[ln].node.uid])
    new = g.substitute([e for e, _ in grads.values()], repl)
    return {n: (new[e.uid], lay) for n, (e, lay) in grads.items()}


def saved_statistics(alg: Algorithm) -> tuple[str, ...]:
    """The forward reduction stages the backward of every input reads that are worth saving: the
    *statistics*, whose free axes are a strict subset of the axes of one input tensor they
    summarise (layer norm's mean and variance per row of X, softmax's row max and sum,
    attention's per-query max and sum), and the *pre-outputs*, which an output reads directly
    (outside any other reduction) and which have that output's axes (attention's unnormalised
    ``sum over j of p V``, the pre-activation of a linear layer, the diffusion layer's spectral
    coefficients): saving them writes no more elements than the outputs, where recomputing them
    repeats a contraction. Stage names in algorithm order, except that a stabilising max and its sum
    of exponentials, both saved, become one log-sum-exp statistic (``lse_<max>_<sum>`` at the max's
    place, :mod:`~dtriton.grad.logsumexp`) when every other saved stage is independent of the max or a
    sum scaled by ``exp(-max)``: softmax's, cross-entropy's and attention's row max and sum; attention's ``sum1`` is
    then saved divided by the sum (the normalised output)."""
    used = grad(alg, save="all").saved
    direct: dict[int, set[frozenset]] = {}
    for o in alg.outputs:
        for n in walk([o.expr], stop=lambda n: isinstance(n, Reduce)):
            if isinstance(n, Reduce):
                direct.setdefault(n.uid, set()).add(frozenset(o.layout))
    out = []
    for s in used:
        node = alg.stages[s].node
        spans = [{e.name for e in n.index if isinstance(e, Axis)} for n in topo_order([node]) if isinstance(n, Load)]
        if any(set(node.axes) < sp for sp in spans) or frozenset(node.axes) in direct.get(node.uid, ()):
            out.append(s)
    for name, (mn, ln) in lse_statistics(alg).items():
        if mn in out and ln in out:
            shifts = stage_shifts(alg, mn)
            if all(rescalable(alg.stages[s].node, shifts.get(s, ("a", 0))) for s in out if s not in (mn, ln)):
                out = [name if s == mn else s for s in out if s != ln]
    return tuple(out)


#: what each keyword of a ``save=`` option means, for the messages of :func:`check_save`
_SAVE_KEYWORDS = {"auto": '"auto" (the statistics the backward reads)', "all": '"all" (every reduction stage the '
                  'backward uses)', None: "None (recompute them in the backward)"}


def check_save(alg: Algorithm, save, where: str, keywords: tuple = ("auto", "all", None)) -> None:
    """Check a user's ``save=`` option (``where``: the call it was given to, for the message): one of
    ``keywords`` (a subset of ``"auto"``, ``"all"`` and ``None``: what the call accepts), or a stage
    name or list (tuple) of names among ``alg``'s reduction stages and log-sum-exp statistics. The one
    validation of ``save=`` for :func:`grad`, :func:`augmented_forward` and ``dt.differentiable``.
    Raises :class:`AlgorithmError` naming the call, the argument, the allowed keywords and names and
    the values that are none of them."""
    names = [s.name for s in reduction_stages(alg)]
    lses = list(lse_statistics(alg))
    outs = [s.name for s in alg.stages.values() if s.is_output]
    if any(save is k or (isinstance(save, str) and save == k) for k in keywords):
        return
    listed = [save] if isinstance(save, str) else list(save) if isinstance(save, (list, tuple)) else None
    bad = ([s for s in listed if not isinstance(s, str) or (s not in names and s not in lses and s not in outs)]
           if listed is not None else [save])
    if bad:
        allowed = ", ".join(_SAVE_KEYWORDS[k] for k in keywords)
        raise AlgorithmError(f"{where}: save={save!r} is not a valid choice: save is {allowed} or a list of names among "
                             f"{alg.name}'s reduction stages {names}, log-sum-exp statistics {lses} and output "
                             f"stages {outs}; {bad} {'is' if len(bad) == 1 else 'are'} none of them")


#: The values of ``group=`` (:func:`grad`, ``dt.differentiable``, ``dt.compile_autograd``, ``dt.as_torch_op``)
GROUPS = ("auto", "none", "all")


def check_group(group, where: str) -> None:
    """Check a user's ``group=`` option (``where``: the call it was given to, for the message): one of
    :data:`GROUPS`. The one validation of ``group=``, made where it is given (so a bad value is refused
    at ``dt.compile_autograd(...)``, not at the first backward). Raises :class:`AlgorithmError` naming
    the call, the argument, its values and what each does."""
    if isinstance(group, str) and group in GROUPS:
        return
    near = ["none"] if group is None else [g for g in GROUPS if isinstance(group, str) and group.strip().lower() == g]
    raise AlgorithmError(f"{where}: group={group!r} is not a valid choice: group is 'auto' (gradients that share a "
                         f"reduction stage in one algorithm; the default), 'none' (one algorithm per input) or 'all' "
                         f"(one algorithm in total)" + (f"; did you mean group={near[0]!r}?" if near else ""))


def _saving(alg: Algorithm, save, where: str, keywords: tuple):
    """``save`` checked (:func:`check_save`) and normalised: a set of names as a sorted list,
    ``"auto"`` as the statistics worth saving (:func:`saved_statistics`; ``None`` or ``[]`` when there
    are none)."""
    if isinstance(save, (set, frozenset)):
        save = sorted(save, key=str)
    check_save(alg, save, where, keywords)
    if isinstance(save, str) and save == "auto":
        return list(saved_statistics(alg)) or (None if None in keywords else [])
    return save


def augmented_forward(alg: Algorithm, save: Sequence[str] | str) -> tuple[Algorithm, tuple[str, ...]]:
    """The forward algorithm with the reduction stages ``save`` as extra outputs (after the
    original ones, each laid out along the stage's free axes), for ``dt.grad(alg, save=...)``.
    ``"all"`` saves every reduction stage. An output stage named in ``save`` (``"out1"``) is output
    again, stored in at least float32 (float64 for float64 inputs, as computed): the backward
    multiplies it in the precision it computes in, so a 16-bit output is not what it reads. A log-sum-exp statistic (``lse_<max>_<sum>``,
    :mod:`~dtriton.grad.logsumexp`) is output as ``max + log(sum)`` along the max's axes, and the
    saved stages that depend on its max are output at its shift (attention's ``sum1`` divided by the
    row sum). Returns ``(algorithm, saved names)``. Raises :class:`AlgorithmError` for a ``save`` that
    is neither ``"all"`` nor names of reduction stages, log-sum-exp statistics or output stages of
    ``alg`` (:func:`check_save`)."""
    save = _saving(alg, save, f"augmented_forward({alg.name})", ("auto", "all"))
    names = [s.name for s in reduction_stages(alg)]
    lses = lse_statistics(alg)
    save_l = names if save == "all" else ([save] if isinstance(save, str) else list(save))
    d = Deriver(alg)
    outs = d.clone_forward()
    g = d.g

    def node_of(stage: str) -> Expr:
        return d.clone[alg.stages[stage].node.uid]
    extra = []
    floors: list = []
    # the layouts of the outputs as large as the largest input (attention's O, a linear layer's
    # activation): a saved stage laid out as one of them is a pre-output (below)
    top = max((len(p.dims) for p in alg.tensor_params), default=0)
    big_out_axes = {frozenset(o.layout) for o in alg.outputs if len(o.layout) >= top}
    for s in save_l:
        if s in alg.stages and alg.stages[s].is_output:   # a copy of the output, in at least float32
            extra.append(next(oe for oe, o in zip(outs, alg.outputs) if o is alg.stages[s].node))
            floors.append(torch.float32)
            continue
        # a saved statistic is stored in at least float32 (a 16-bit row sum over more than 65504
        # columns would overflow, a 16-bit mean or log-sum-exp of rows at an offset of 1000 is off
        # by up to 0.25; torch keeps its saved statistics in float32 too); a pre-output (a stage
        # laid out as an output as large as the largest input, such as attention's unnormalised
        # sum over keys or a linear layer's activation before its ReLU) keeps the output's dtype, as
        # torch saves its output: in float32 it would double the bytes written. A log-sum-exp, or
        # a row statistic laid out as a row output (cross-entropy's loss, a returned mean), is a
        # statistic: float32
        pre_output = s not in lses and frozenset(node_of(s).axes) in big_out_axes
        floors.append(None if pre_output else torch.float32)
        if s in lses:
            m = node_of(lses[s][0])
            extra.append((lse_value(g, m, node_of(lses[s][1])), tuple(m.axes)))
            continue
        node = node_of(s)
        e = node
        for mn, ln in (lses[x] for x in save_l if x in lses):   # taken at the statistic's shift
            shift = stage_shifts(alg, mn)
            if s in shift and s not in (mn, ln):
                e = at_lse(g, s, e, shift[s], node_of(ln))
        extra.append((e, tuple(node.axes)))
    fin = Finalizer(d, param_spec(alg), {})
    a = fin.build(f"{alg.name}_fwd_saving", list(outs) + extra,
                  f"{alg.name} with stages {save_l} as extra outputs (for dt.grad(save=...)).",
                  [None] * (len(outs) + len(extra)), [None] * len(outs) + floors)
    return a.take_index_hints(alg), tuple(save_l)


def saved_outputs(alg: Algorithm, names: Sequence[str]) -> dict[int, int]:
    """The output stages among the saved stage ``names`` (as :func:`augmented_forward` returns them):
    position in ``names`` -> index of that output of ``alg``. :func:`augmented_forward` outputs each
    of them again, in at least float32; a call whose output already has the copy's dtype (float32 or
    float64 inputs) can save the output itself instead of a copy (``dt.differentiable`` does: the
    forward then writes it once). Raises :class:`AlgorithmError` for names :func:`check_save` refuses."""
    check_save(alg, list(names), f"saved_outputs({alg.name})", ())
    out = {}
    for k, s in enumerate(names):
        st = alg.stages.get(s)
        if st is not None and st.is_output:
            out[k] = next(j for j, o in enumerate(alg.outputs) if o is st.node)
    return out


# ----------------------------------------------------------------------------------------------
# staging: one reduction level per algorithm
# ----------------------------------------------------------------------------------------------
def staged(alg: Algorithm) -> list[tuple[Algorithm, tuple[str, ...]]]:
    """Split ``alg`` into a chain of algorithms in which no reduction contains another.

    Level ``k`` computes, as outputs laid out along their free axes, the reduction stages whose
    nesting depth is ``k``, reading deeper-nested results as inputs; the last algorithm computes
    ``alg``'s outputs from them. Every algorithm of the chain takes ``alg``'s arguments followed by
    the results of all earlier levels, in order (parameters ``stage_<name>``). Returns
    ``[(algorithm, names of the stages it outputs), ...]``; the last entry's names are ``()`` and
    its outputs are ``alg``'s. Runs an algorithm as a chain of one-level algorithms (each stage then
    costs a kernel and a write), e.g. to check a fused lowering against it."""
    depth: dict[int, int] = {}
    for n in alg.nodes:
        d = max((depth[c.uid] for c in n.children()), default=0)
        depth[n.uid] = d + 1 if isinstance(n, Reduce) else d
    reds = [n for n in alg.nodes if isinstance(n, Reduce)]
    taken = {p.name for p in alg.params}
    pname = {r.uid: unique_param_name(f"stage_{r.name}", taken) for r in reds}
    chain: list[tuple[Algorithm, tuple[str, ...]]] = []
    done: list[Reduce] = []

    def level(name: str, roots: Sequence[Expr], layouts: Sequence[tuple[str, ...]], doc: str) -> Algorithm:
        """An algorithm computing ``roots`` from ``alg``'s arguments and the stages ``done``."""
        spec = param_spec(alg) + [("tensor", pname[r.uid], tuple(alg.axis_size[a] for a in r.axes)) for r in done]
        params = make_params(spec)
        repl = {r.uid: (pname[r.uid], tuple(r.axes)) for r in done}
        new = copy_nodes(topo_order(list(roots)), {p.name: p for p in params}, repl)
        outs = [Output(new[e.uid], tuple(lay)) for e, lay in zip(roots, layouts)]
        return Algorithm.build(name, params, outs, doc=doc)

    for lv in sorted({depth[r.uid] for r in reds}):
        todo = [r for r in reds if depth[r.uid] == lv]
        chain.append((level(f"{alg.name}_level{lv}", todo, [r.axes for r in todo],
                            f"Stages {[r.name for r in todo]} of {alg.name}"),
                      tuple(r.name for r in todo)))
        done.extend(todo)
    final = level(f"{alg.name}_final", [o.expr for o in alg.outputs], [o.layout for o in alg.outputs],
                  f"Outputs of {alg.name}")
    chain.append((final, ()))
    return chain
