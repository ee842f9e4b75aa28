"""A materialised GEMM stores its epilogue: the elementwise expression every reader applies to it.

A GEMM (a contraction) materialised for later kernels is read back through the same elementwise
expression by each of them: ``relu(X @ W.T + b)`` feeding a second GEMM, ``gelu(X @ W.T + b)`` in a
transformer MLP, ``X @ W.T + b`` under a softmax. Stored as the bare sum, that expression is
recomputed wherever the buffer is read, and a second GEMM reads every element once per tile of its
own output (32 times for 4096 outputs in tiles of 128): the GELU's tanh over the whole buffer 32
times (gelu_mlp_residual at 0.26x torch.compile on the H200, bench/results/issue14/
chains_fp16_h200.md). :func:`move_epilogues` stores the expression instead, once, in the GEMM's
kernel (as torch stores the activation), and the readers read it where they read the sum.

The expression moved is the largest ``E`` such that every path from the readers to the GEMM passes
through ``E``, built of elementwise nodes over exactly the GEMM's axes whose other operands read no
reduction (inputs and constants only: a bias ``b[j]``, a scale). Statistics computed after the GEMM
(a softmax's max) stop it. Only plain buffers (not split, not a mean divided on read) whose readers
fuse every other reduction they rebuild (no materialised stage is rebuilt) are changed.

Where statistics stop it (``softmax(X @ W.T + b) @ W2.T``: every later reader applies
``exp(y - max)``, the max a row kernel computes after the GEMM), :func:`store_operands` has the
first row kernel that reads the whole row of the buffer (and has the statistics) write the
expression back over the buffer, in place, after its own reductions: the second GEMM then reads
its operand as stored instead of evaluating an exponential per element in each of its output
tiles (softmax_linear at 0.68x torch.compile on the H200, bench/results/issue14/s3_floors/).
"""

from __future__ import annotations

from ..ir import Algorithm, Expr, Load, Reduce, contractions, fmt, walk
from .kernel import KernelPlan, Program, StoreSpec

__all__ = ["move_epilogues", "store_operands"]


def _only_reduce(n: Expr, r: Reduce, siblings: frozenset = frozenset()) -> bool:
    """The only reductions ``n`` reads are ``r`` and the ``siblings`` (ids; inputs, constants, axes and
    elementwise nodes besides)."""
    def ok(x: Expr) -> bool:
        return x is r or x.uid in siblings
    return not any(isinstance(x, Reduce) and not ok(x) for x in walk([n], stop=ok))


def _reaches(roots: list[Expr], target: Expr, avoid: Expr, stop: set[int]) -> bool:
    """``target`` is reachable from ``roots`` on a path that does not pass through ``avoid``."""
    return any(x is target for x in walk(roots, stop=lambda x: x is avoid or (x.uid in stop and x is not target)))


def _substitute(n: Expr, old: Expr, new: Expr, memo: dict[int, Expr], stop: set[int]) -> Expr:
    """``n`` with the node ``old`` replaced by ``new`` (shared subtrees rebuilt once; materialised
    reductions, ``stop``, are read from their buffers: kept as they are)."""
    if n is old:
        return new
    if n.uid in stop:
        return n
    if n.uid in memo:
        return memo[n.uid]
    kids = n.children()
    got = [_substitute(c, old, new, memo, stop) for c in kids]
    out = n if all(a is b for a, b in zip(got, kids)) else n.rebuild(got)
    memo[n.uid] = out
    return out


def _epilogue(r: Reduce, readers: list[KernelPlan], stop: set[int], siblings: frozenset = frozenset()) -> Expr | None:
    """The largest expression every reader applies to ``r`` (see the module docstring), or None:
    among the elementwise nodes over exactly r's axes that read no other reduction but the
    ``siblings`` (ids of contractions the same kernel stores), those every path from the readers to
    ``r`` passes through (its dominators); the one highest up."""
    roots = [st.expr for k in readers for st in k.stores]
    seen = list(walk(roots, stop=lambda x: x.uid in stop and x is not r))
    cands = [n for n in seen if n is not r and not isinstance(n, (Reduce, Load)) and set(n.axes) == set(r.axes)
             and any(x is r for x in walk([n], stop=lambda x: x.uid in stop)) and _only_reduce(n, r, siblings)]
    doms = [c for c in cands if not _reaches(roots, r, c, stop)]
    if not doms:
        return None
    return max(doms, key=lambda c: sum(1 for _ in walk([c])))


def _plain_gemm_stores(w: KernelPlan, prog: Program, gemms) -> dict[int, tuple]:
    """The stores of kernel ``w`` that write a contraction to a plain buffer (not split, not zeroed,
    not a mean divided on read, fp32 as lowered): reduction id -> (store, buffer)."""
    out = {}
    for st in w.stores:
        b, r = prog.buffers.get(st.target), st.expr
        if (b is not None and isinstance(r, Reduce) and r.name in gemms and not b.partials and not b.zero
                and not b.scale_count and b.dtype == "float32"):
            out[r.uid] = (st, b)
    return out


def _drop_unread(w: KernelPlan, prog: Program, s: Reduce, st, b, stop: set[int]) -> None:
    """Drop the store and buffer of contraction ``s`` (kernel ``w``) when no kernel reads it any more
    (its value went into a sibling's stored epilogue)."""
    roots = [x.expr for k in prog.kernels if k is not w for x in k.stores]
    if any(x is s for x in walk(roots, stop=lambda x: x.uid in stop and x is not s)):
        return
    w.stores.remove(st)
    del prog.buffers[b.name]
    for k in prog.kernels:
        k.materialized.pop(s.uid, None)


def move_epilogues(prog: Program, alg: Algorithm) -> dict[str, str]:
    """Store each materialised contraction's common epilogue in its buffer (in place: the writing
    store's expression, the readers' expressions, ``BufferSpec.reason``). The epilogue may combine
    contractions the same kernel stores over the same axes (SwiGLU's ``silu(X @ W.T) * (X @ W3.T)``):
    it is stored once, in the first one's buffer, and a sibling's buffer no kernel reads any more is
    dropped. Returns buffer name -> the expression it now holds (as text)."""
    gemms = contractions(alg)
    tops = {st.expr.uid for k in prog.kernels for st in k.stores
            if st.target in prog.buffers and isinstance(st.expr, Reduce)}
    done: dict[str, str] = {}
    for w in prog.kernels:
        plain = _plain_gemm_stores(w, prog, gemms)
        for st, b in list(plain.values()):
            r = st.expr
            if st not in w.stores or not isinstance(r, Reduce):
                continue
            readers = [k for k in prog.kernels if r.uid in k.materialized]
            # a reader that writes another buffer would rebuild a materialised stage (others key it by id)
            if not readers or any(s.expr.uid in tops for k in readers for s in k.stores):
                continue
            # (a kernel's map may name a reduction that became a direct split-K output: not a buffer)
            stop = {u for k in prog.kernels for u, bs in k.materialized.items() if bs.name in prog.buffers}
            # siblings still store their bare sum: one whose buffer took its own epilogue is read back
            # as that (its readers name the sum for it), so the writer's value of the sum is no longer
            # the buffer's, and the sum's readers are no longer found by its store's expression
            sibs = frozenset(u for u, (sst, _) in plain.items() if u != r.uid and sst in w.stores
                             and sst.expr.uid == u and set(sst.expr.axes) == set(r.axes))
            e = _epilogue(r, readers, stop, sibs)
            if e is None:
                continue
            st.expr = e
            for k in readers:
                memo: dict[int, Expr] = {}
                for s in k.stores:
                    s.expr = _substitute(s.expr, e, r, memo, stop)
                for old, new in memo.items():
                    if isinstance(new, Reduce) and old in prog.stage_labels:
                        prog.stage_labels[new.uid] = prog.stage_labels[old]
            b.reason = f"holds {fmt(e, limit=None)}, the expression every reader applies to stage {r.name}"
            done[b.name] = fmt(e, limit=None)
            for u in sibs:
                if any(x.uid == u for x in walk([e], stop=lambda x: isinstance(x, Reduce))):
                    _drop_unread(w, prog, plain[u][0].expr, *plain[u], stop)
    return done


def _plain_buffer(b) -> bool:
    return not b.partials and not b.zero and not b.scale_count and not b.state


def _row_kernels(prog: Program, r: Reduce, w: KernelPlan) -> list[KernelPlan]:
    """The kernels after ``r``'s writer ``w`` that read ``r``'s buffer with every axis of ``r`` at their
    program scope (grid or whole: each program holds whole rows of it, and would write only what it
    read), without a split, storing buffers only (statistics kernels)."""
    ks = prog.kernels
    return [k for k in ks[ks.index(w) + 1:] if r.uid in k.materialized and k.split is None
            and all(k.axes.get(a) is not None and k.axes[a].role in ("grid", "whole") for a in r.axes)
            and all(st.target in prog.buffers for st in k.stores)]


def _reduces_from(k: KernelPlan, r: Reduce, prog: Program, stop: set[int]) -> bool:
    """Kernel ``k`` writes a buffer of a reduction computed from ``r`` (its stored reductions are keyed by
    id in the other kernels: their bodies cannot be rewritten)."""
    roots = [st.expr.x for st in k.stores if st.target in prog.buffers and isinstance(st.expr, Reduce)]
    return any(x is r for x in walk(roots, stop=lambda x: x.uid in stop and x is not r))


def store_operands(prog: Program, alg: Algorithm) -> dict[str, str]:
    """Where every kernel after a contraction's first row kernel reads the contraction's buffer
    through one expression ``E`` over its axes that also reads that kernel's statistics (see the
    module docstring), that row kernel stores ``E`` over the buffer after its reductions (in place:
    each program rewrites the rows it read; its statistics reduce across the whole row first) and
    the later kernels read the buffer as stored. In place on ``prog``; returns buffer name -> ``E``
    as text."""
    gemms = contractions(alg)
    done: dict[str, str] = {}
    stop = {u for k in prog.kernels for u, bs in k.materialized.items() if bs.name in prog.buffers}
    for w in prog.kernels:
        for st in list(w.stores):
            b = prog.buffers.get(st.target)
            rid = next((u for k in prog.kernels for u, bs in k.materialized.items() if b is not None and bs is b), None)
            r = next((x for x in walk([st.expr]) if x.uid == rid), None)
            if b is None or not isinstance(r, Reduce) or r.name not in gemms or not _plain_buffer(b):
                continue
            ks = prog.kernels
            # the first row kernel after which every reader of the buffer can read it rewritten
            k_row = next((k for k in _row_kernels(prog, r, w)
                          if not any(_reduces_from(x, r, prog, stop) for x in ks[ks.index(k) + 1:])), None)
            if k_row is None:
                continue
            later = [k for k in ks[ks.index(k_row) + 1:] if r.uid in k.materialized]
            # the statistics the row kernel has: those earlier kernels wrote, and those it stores
            before = {x.target for k in ks[:ks.index(k_row)] for x in k.stores}
            have = frozenset(u for u, bs in k_row.materialized.items() if u != r.uid and bs.name in before) | frozenset(
                x.expr.uid for x in k_row.stores if isinstance(x.expr, Reduce))
            e = _epilogue(r, later, stop, have) if later else None
            if e is None:
                continue
            k_row.stores.append(StoreSpec(b.name, e, st.layout))
            for k in later:
                memo: dict[int, Expr] = {}
                for s in k.stores:
                    s.expr = _substitute(s.expr, e, r, memo, stop)
            text = fmt(e, limit=None)
            b.reason = (f"{b.reason}; " if b.reason else "") + f"rewritten in place by kernel {k_row.name} with {text}"
            done[b.name] = text
    return done
