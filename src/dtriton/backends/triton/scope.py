"""Scopes of a kernel being printed: nested blocks of lines, each binding some axes.

Every value is a Triton block whose dims follow a *layout*: an ordered tuple of the axes bound in
the current scope (size-1 dims for axes a value does not use), so broadcasting by axis name is
plain Triton broadcasting. Scopes nest: the program scope binds grid axes (offsets from the
program id) and "whole" axes (one block covers the axis); each loop over a reduction or output
axis opens a child scope that appends its axis to the layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Bind", "Scope", "pointer_loads"]


def pointer_loads(scope: "Scope") -> bool:
    """Whether ``scope`` or a scope inside it reads memory through pointers (``tl.load``)."""
    for it in scope.items:
        if isinstance(it, Scope):
            if pointer_loads(it):
                return True
        elif "tl.load(" in it:
            return True
    return False


@dataclass
class Bind:
    """How one axis is bound in a scope: its offsets, mask, block name and first index."""
    axis: str
    offs: str            # offsets block var (1-D) or scalar var
    mask: str | None     # 1-D mask var, None when divisible
    block: str           # constexpr name
    scalar: bool         # tile-1 grid axis: a scalar index, not a block dim
    start: str = "0"     # first index of the tile (the scalar index itself when ``scalar``)


class Scope:
    """A block of lines (a loop body or the program body) and the axes it binds."""

    def __init__(self, parent: "Scope | None", header: str | None = None, layout: tuple[str, ...] = ()):
        self.parent = parent
        self.depth = parent.depth + 1 if parent else 0
        self.items: list[Any] = []
        self.open_child: int | None = None
        self._open_stack: list = []
        self.header = header
        self.layout = layout
        self.bound: dict[str, Bind] = {}
        self.memo: dict[tuple, str] = {}
        self.reduced: dict[int, tuple[str, tuple[str, ...]]] = {}
        self.overrides: dict[int, tuple[str, tuple[str, ...]]] = {}
        self.assumed: set[int] = set()   # condition node ids that hold on every lane here (and inside)

    def emit(self, line: str):
        """Append a line (or a nested scope) at the insertion point."""
        if self.open_child is not None:
            self.items.insert(self.open_child, line)
            self.open_child += 1
        else:
            self.items.append(line)

    def open(self, header: str, new_axes: tuple[str, ...], keep: tuple[str, ...] | None = None) -> "Scope":
        """Open a child scope (a loop) at the current insertion point. Its layout is this scope's
        (or only the ``keep`` axes of it) followed by ``new_axes``. Until :meth:`close`, lines
        emitted into this scope go before the new child (hoisted code precedes its loop)."""
        base = self.layout if keep is None else tuple(a for a in self.layout if a in keep)
        child = Scope(self, header, base + new_axes)
        prev = self.items[self.open_child] if self.open_child is not None else None
        pos = self.open_child if self.open_child is not None else len(self.items)
        self.items.insert(pos, child)
        self._open_stack.append(prev)
        self.open_child = pos
        return child

    def close(self, child: "Scope"):
        """Close ``child``; the child that was open before it (if any) is the insertion point again."""
        assert self.items[self.open_child] is child, "scopes close in the reverse order they open"
        prev = self._open_stack.pop()
        self.open_child = None if prev is None else next(k for k, it in enumerate(self.items) if it is prev)

    def chain(self):
        """This scope and its ancestors, innermost first."""
        s = self
        while s is not None:
            yield s
            s = s.parent

    def find_bind(self, a: str) -> tuple[Bind, "Scope"] | None:
        """The binding of axis ``a`` visible here and the scope that made it (None: unbound)."""
        for s in self.chain():
            if a in s.bound:
                return s.bound[a], s
        return None

    def render(self, indent: int, out: list[str]):
        """Append the indented lines of this scope to ``out``."""
        pad = "    " * indent
        for it in self.items:
            if isinstance(it, Scope) and it.header is None:   # an inline block: its lines at this indentation
                it.render(indent, out)
            elif isinstance(it, Scope):
                out.append(pad + it.header)
                if not it.items:
                    out.append(pad + "    pass")
                it.render(indent + 1, out)
            else:
                out.append(pad + it)

