"""The docs page of ``dtriton.library``: every algorithm with its arguments (tensors with their dims,
scalars with their types), output layout, reduced axes, stages, argument constraints and docstring.

    python3 tools/library_page.py [--write docs/library.md]

Prints the page, or writes it (tests/test_docs.py checks that docs/library.md is this output).
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
from dtriton import library  # noqa: E402

HEAD = """# Library algorithms

`dtriton.library` holds ready algorithms; each is a `dt.algorithm` like your own: compile it with
`dt.compile(library.NAME)`, give it a schedule, explore it, differentiate it. The layouts below are
the order of each tensor's dims as the algorithm reads them, by size symbol (a view with other strides
is fine: pass `x.permute(...)`); outputs and reduced axes are given by axis name, the names a schedule
uses (tiles, grid, split, strategy); the constraints are checked at the call, with an error naming the
argument. A tensor given in another layout (a torch conv weight (O, C, R, Q) for `conv2d_nhwc`'s (O, R,
Q, C), an NCHW input for NHWC) is refused where its sizes disagree with the other arguments' or break a
constraint, with an error naming the layouts read, the shapes given and, where one fits every size and
constraint of the call, the permute (`Wt.permute(0, 2, 3, 1)`); sizes that agree in the wrong layout (C
= R = Q = 3) cannot be told apart.

This page is generated from the code (`python3 tools/library_page.py --write docs/library.md`).
"""


def arguments(alg) -> list[str]:
    out = []
    for p in alg.params:
        dims = getattr(p, "dims", None)
        if dims is not None:
            out.append(f"`{p.name}` ({', '.join(dims)})")
        else:
            out.append(f"`{p.name}`: {getattr(p.pytype, '__name__', 'scalar')}")
    return out


def section(name: str) -> str:
    alg = getattr(library, name)
    doc = inspect.cleandoc(alg.__doc__ or "")
    lines = [f"## `{name}`", "", doc, "",
             "| | |", "|---|---|",
             f"| arguments | {', '.join(arguments(alg))} |",
             "| outputs | " + ", ".join(f"`{o.name}` [{', '.join(o.layout)}]" for o in alg.outputs) + " |",
             f"| reduced axes | {', '.join(alg.reduction_axes) or 'none'} |",
             f"| stages | {', '.join(alg.stages)} |"]
    if alg.requires:
        lines.append("| constraints | " + "; ".join(f"`{r.cond}`" for r in alg.requires) + " |")
    return "\n".join(lines) + "\n"


def page() -> str:
    return HEAD + "\n" + "\n".join(section(n) for n in library.__all__)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", default=None, help="write the page to this file")
    a = ap.parse_args(argv)
    text = page()
    if a.write:
        with open(a.write, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
