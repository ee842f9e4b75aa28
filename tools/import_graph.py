"""dtriton's import graph, checked against its layers (ARCHITECTURE.md).

    python3 tools/import_graph.py [--modules] [--dot FILE]

Prints, per layer, each package or module and the dtriton packages it imports, then every violation:
- an import cycle between modules;
- an import of a later layer (at module top or inside a function);
- a private name (``_name``) imported from another module;
- a dtriton import inside a function (a sign of a dodged cycle) below the facade layer.
Exits 1 when there is a violation. ``--modules`` prints the module-level graph as well; ``--dot`` writes
a Graphviz file of the package-level graph.
"""
from __future__ import annotations

import argparse
import ast
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "dtriton")

#: Layers, first to last: a module may import modules of its own layer and of earlier ones only.
LAYERS = [
    ("errors", ["errors", "version"]),
    ("ir", ["ir"]),
    ("grad", ["grad"]),
    ("schedule", ["schedule"]),
    ("plan", ["plan"]),
    ("backends", ["backends"]),
    ("runtime", ["runtime"]),
    ("integrations", ["integrations"]),
    ("tune", ["tune"]),
    ("facade", ["api", "dsl", "library", "cli", "__init__", "examples", "__main__"]),
]


def layer_of(mod: str) -> int:
    """Index of the layer of module ``mod`` (dotted, without the ``dtriton.`` prefix)."""
    head = mod.split(".")[0] if mod else "__init__"
    for k, (_, heads) in enumerate(LAYERS):
        if head in heads:
            return k
    raise SystemExit(f"module dtriton.{mod} belongs to no layer: add its package to LAYERS in {__file__}")


def modules() -> dict[str, str]:
    """Dotted module name (without ``dtriton.``; ``""`` for the package) -> file path."""
    out = {}
    for d, _, fs in os.walk(ROOT):
        for f in fs:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                rel = os.path.relpath(p, ROOT)[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__").removesuffix("__init__")] = p
    return out


def _target(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str | None:
    """The dtriton module an ``from ... import`` names, or None when it is not dtriton's."""
    if node.level:
        base = mod.split(".") if mod else []
        base = base if is_pkg else base[:-1]
        base = base[: len(base) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))
    if node.module and (node.module == "dtriton" or node.module.startswith("dtriton.")):
        return node.module[len("dtriton."):] if node.module != "dtriton" else ""
    return None


def scan(mods: dict[str, str]):
    """Edges (importer, imported, line, in_function) and private-name imports."""
    edges, private = [], []
    for mod, path in mods.items():
        tree = ast.parse(open(path).read())
        is_pkg = path.endswith("__init__.py")
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        inner = {id(x) for f in funcs for x in ast.walk(f) if x is not f}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                tgt = _target(mod, is_pkg, node)
                if tgt is None:
                    continue
                for a in node.names:
                    sub = f"{tgt}.{a.name}" if tgt else a.name
                    dep = sub if sub in mods else tgt
                    if dep == mod or (mod and mod.startswith(dep + ".") and dep != ""):
                        continue
                    edges.append((mod, dep, node.lineno, id(node) in inner))
                    if a.name.startswith("_") and not a.name.startswith("__") and dep != mod:
                        private.append((mod, dep, a.name, node.lineno))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("dtriton."):
                        edges.append((mod, a.name[len("dtriton."):], node.lineno, id(node) in inner))
    return edges, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop(); on.discard(x); comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modules", action="store_true", help="print the module-level graph too")
    ap.add_argument("--dot", default="", help="write the package-level graph as Graphviz")
    a = ap.parse_args(argv)
    mods = modules()
    edges, private = scan(mods)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for src, dst, _, _ in edges:
        if dst in mods:
            graph[src].add(dst)
    problems = []
    for comp in cycles(graph):
        problems.append("import cycle: " + " <-> ".join(f"dtriton.{m}" for m in comp))
    for src, dst, line, inner in sorted(set(edges)):
        if dst not in mods:
            continue
        if layer_of(dst) > layer_of(src):
            problems.append(f"dtriton.{src} (layer {LAYERS[layer_of(src)][0]}) imports later layer "
                            f"dtriton.{dst} ({LAYERS[layer_of(dst)][0]}), line {line}")
        if inner and layer_of(src) < len(LAYERS) - 1:   # the facade may import lazily (optional packages)
            problems.append(f"dtriton.{src} imports dtriton.{dst} inside a function, line {line}")
    for src, dst, name, line in sorted(set(private)):
        problems.append(f"dtriton.{src} imports private name {name} from dtriton.{dst}, line {line}")
    pkg = lambda m: m.split(".")[0] or "__init__"  # noqa: E731
    pgraph: dict[str, set[str]] = {}
    for src, dsts in graph.items():
        pgraph.setdefault(pkg(src), set()).update(pkg(d) for d in dsts if pkg(d) != pkg(src))
    print("dtriton import graph, by layer (package -> packages it imports):")
    for k, (name, heads) in enumerate(LAYERS):
        for h in heads:
            if h in pgraph:
                print(f"  [{k} {name}] {h} -> {', '.join(sorted(pgraph[h])) or '-'}")
    if a.modules:
        print("\nmodules:")
        for m in sorted(graph):
            print(f"  dtriton.{m or '__init__'} -> {', '.join(sorted(graph[m])) or '-'}")
    if a.dot:
        with open(a.dot, "w") as f:
            f.write("digraph dtriton {\n  rankdir=TB;\n")
            for s, ds in sorted(pgraph.items()):
                for d in sorted(ds):
                    f.write(f'  "{s}" -> "{d}";\n')
            f.write("}\n")
    print(f"\n{len(mods)} modules, {len(edges)} imports; {len(problems)} violations")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
