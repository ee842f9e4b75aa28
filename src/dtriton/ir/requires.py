"""Argument constraints of an algorithm (``@dt.requires("stride >= 1", ...)``), checked at call time.

A constraint is a Python comparison over the algorithm's scalar arguments and the size symbols of
its tensor dims, e.g. ``"Ho == (H + 2 * padding - dilation * (R - 1) - 1) // stride + 1"``. The
constraints of an algorithm are printed once into one Python function of the call's arguments
(a few integer comparisons: about half a microsecond a call); a call whose
arguments break one raises a :class:`~dtriton.errors.ShapeError` naming the argument, its value,
what was expected and the values it was computed from. Constraints are checked in order, so a later
one may divide by an argument an earlier one proved positive.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import AlgorithmError, ShapeError
from .expr import InputTensor, ScalarParam
from .layouts import layout_hint

__all__ = ["Requirement", "attach_requires", "check_requires", "requires_message"]

#: the functions a constraint may call besides its names
_BUILTINS = {"max": max, "min": min, "abs": abs}
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


@dataclass(frozen=True)
class Requirement:
    """One constraint: its source text ``cond`` and an optional ``hint`` (how to fix, or why)."""
    cond: str
    hint: str = ""


def _sources(alg) -> dict[str, str]:
    """name -> the Python expression of its value on a call's ``args``: scalar arguments and the
    size symbols of tensor dims (the first dim that names each)."""
    src: dict[str, str] = {}
    for k, p in enumerate(alg.params):
        if isinstance(p, ScalarParam):
            src[p.name] = f"args[{k}]"
    for k, p in enumerate(alg.params):
        if isinstance(p, InputTensor):
            for d, sym in enumerate(p.dims):
                src.setdefault(sym, f"args[{k}].shape[{d}]")
    return src


def _names(tree: ast.AST) -> list[str]:
    """The names ``tree`` reads, in the order they appear in its source."""
    found = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Name)), key=lambda n: (n.lineno, n.col_offset))
    return list(dict.fromkeys(n.id for n in found))


def attach_requires(alg, conds: Sequence["str | tuple[str, str]"]) -> None:
    """Add the constraints ``conds`` (source strings, or ``(source, hint)`` pairs) to ``alg`` and
    print its checker (``alg.requires_check(args) -> int``: the index of the first constraint the
    positional ``args`` break, -1 when none); ``alg.requires_pos`` are the positions of the scalar
    arguments they name, whose values the keys of cached launchers hold (a signature key holds only
    an int's 1 and multiple-of-16 facts), so a cached launcher never runs arguments unchecked. Raises :class:`AlgorithmError` for a constraint that
    is not a comparison or names something other than a scalar argument, a size symbol, ``max``,
    ``min`` or ``abs``."""
    src = _sources(alg)
    reqs = list(getattr(alg, "requires", ()))
    for c in conds:
        cond, hint = (c, "") if isinstance(c, str) else c
        try:
            tree = ast.parse(cond, mode="eval").body
        except SyntaxError as e:
            raise AlgorithmError(f"dt.requires on {alg.name}: {cond!r} is not a Python expression ({e.msg})") from None
        if not isinstance(tree, ast.Compare):
            raise AlgorithmError(f"dt.requires on {alg.name}: {cond!r} is not a comparison; write e.g. "
                                 f"'stride >= 1' or 'Ho == (H - R) // stride + 1'")
        unknown = [n for n in _names(tree) if n not in src and n not in _BUILTINS]
        if unknown:
            raise AlgorithmError(f"dt.requires on {alg.name}: {cond!r} names {unknown[0]!r}, which is neither a scalar "
                                 f"argument nor a dim size of {alg.name} (those are {sorted(src)})")
        reqs.append(Requirement(cond, hint))
    alg.requires = tuple(reqs)
    alg.requires_check = _print_check(alg, src)
    used = {n for r in reqs for n in _names(ast.parse(r.cond, mode="eval"))}
    alg.requires_pos = tuple(k for k, p in enumerate(alg.params) if isinstance(p, ScalarParam) and p.name in used)


def _print_check(alg, src: dict[str, str]) -> Callable:
    """``check(args) -> int`` for the constraints of ``alg``: the scalars and the tensor shapes
    unpacked once, then one comparison chain (about 0.5 us for a conv2d's seven on a CPU core);
    only a call that breaks one looks for which."""
    reqs = alg.requires
    used = set(n for r in reqs for n in _names(ast.parse(r.cond, mode="eval")) if n in src)
    lines = ["def check(args):"]
    for k, p in enumerate(alg.params):
        if isinstance(p, ScalarParam) and p.name in used:
            lines.append(f"    {p.name} = args[{k}]")
        elif isinstance(p, InputTensor):
            names = [d if d in used and src[d] == f"args[{k}].shape[{j}]" else "_" for j, d in enumerate(p.dims)]
            if any(n != "_" for n in names):
                lines.append(f"    {', '.join(names)}, = args[{k}].shape")
    lines.append(f"    if {' and '.join(f'({r.cond})' for r in reqs)}:\n        return -1")
    lines += [f"    if not ({r.cond}):\n        return {k}" for k, r in enumerate(reqs)]
    lines.append("    return -1")
    env: dict[str, Any] = dict(_BUILTINS)
    exec(compile("\n".join(lines) + "\n", f"<dtriton requires of {alg.name}>", "exec"), env)   # noqa: S102
    return env["check"]


def _value(node: ast.AST, env: dict[str, Any]) -> Any:
    return eval(compile(ast.Expression(node), "<requires>", "eval"), dict(_BUILTINS), env)   # noqa: S307


#: a comparison read from its other side (``1 <= k`` as ``k >= 1``)
_FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_HOLDS = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
          "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def requires_message(alg, k: int, args: Sequence[Any]) -> str:
    """The message of the :class:`ShapeError` for constraint ``k`` of ``alg`` broken by ``args``:
    ``"conv2d: argument 'stride' must be >= 1, got -1"``, with the computed value of a bound that is
    an expression and the values it was computed from. Of a chain (``1 <= k <= N``), the first link
    that fails is reported so, read from the side of its name (``1 <= k`` as ``k >= 1``), the chain
    named after it; a link with no name on either side gives both sides' values."""
    return _message(alg, k, args)[0]


def _message(alg, k: int, args: Sequence[Any]) -> tuple[str, list[str]]:
    """:func:`requires_message` and the names whose values it shows."""
    req: Requirement = alg.requires[k]
    src = _sources(alg)
    env = {n: eval(src[n], {"args": args}) for n in src}   # noqa: S307 - our own printed sources
    tree = ast.parse(req.cond, mode="eval").body
    assert isinstance(tree, ast.Compare)
    hint = f"; {req.hint}" if req.hint else ""
    sides = [tree.left, *tree.comparators]
    links = [(sides[j], _OPS[type(o)], sides[j + 1]) for j, o in enumerate(tree.ops)]
    left, op, rhs = next((ln for ln in links if not _HOLDS[ln[1]](_value(ln[0], env), _value(ln[2], env))), links[0])
    chain = f" (in {req.cond})" if len(links) > 1 else ""
    if chain and not isinstance(left, ast.Name) and isinstance(rhs, ast.Name):
        left, op, rhs = rhs, _FLIPPED[op], left
    if not isinstance(left, ast.Name):
        shown = ", ".join(f"{n}={env[n]}" for n in _names(tree) if n in env)
        at = (f" at {ast.unparse(left)} {op} {ast.unparse(rhs)} ({ast.unparse(left)} = {_value(left, env)}, "
              f"{ast.unparse(rhs)} = {_value(rhs, env)})") if chain else ""
        return f"{alg.name}: requires {req.cond}, which fails{at} for {shown}{hint}", _names(tree)
    what = "argument" if any(p.name == left.id and isinstance(p, ScalarParam) for p in alg.params) else "size"
    bound = ast.unparse(rhs)
    if not isinstance(rhs, ast.Constant):
        inputs = ", ".join(f"{n}={env[n]}" for n in _names(rhs) if n in env)
        bound = f"{bound} = {_value(rhs, env)}" + (f" ({inputs})" if inputs != f"{bound}={_value(rhs, env)}" else "")
    expected = bound if op == "==" else f"{op} {bound}"
    return (f"{alg.name}: {what} {left.id!r} must be {expected}{chain}, got {env[left.id]}{hint}",
            [left.id, *_names(rhs)])


def check_requires(alg, args: Sequence[Any]) -> None:
    """Raise :class:`ShapeError` when the positional ``args`` of a call of ``alg`` break one of its
    constraints (nothing for an algorithm without any): :func:`requires_message`, then the layouts of
    the tensors whose dim sizes it shows and the shapes given, and where permuting a tensor
    argument's dims would meet every constraint (a conv weight given in another layout, whose kernel
    size was read off a channel dim), the permute (:func:`~dtriton.ir.layouts.layout_hint`)."""
    check: Callable | None = getattr(alg, "requires_check", None)
    if check is not None:
        k = check(args)
        if k >= 0:
            message, shown = _message(alg, k, args)
            scalars = {p.name for p in alg.params if not isinstance(p, InputTensor)}
            raise ShapeError(message + layout_hint(alg, args, _tensors_of(alg, shown),
                                                   shown[0] if shown and shown[0] in scalars else None))


def _tensors_of(alg, names: Sequence[str]) -> list[str]:
    """The tensor parameters the size symbols among ``names`` are read from (the first dim that names
    each)."""
    src = _sources(alg)
    at = {src[n].split("]")[0] + "]" for n in names if n in src and ".shape[" in src[n]}
    return [p.name for j, p in enumerate(alg.params) if f"args[{j}]" in at]
