"""Side-by-side kernel times of two or more bench/run.py results (e.g. before and after a refactoring,
run in one device call), with the ratio of each dtriton row to the first result's.

    python3 bench/compare_runs.py before/h200.json after/h200.json [after2/h200.json ...] [--out table.md]

Rows are matched by (group, case, impl). The torch rows of the same runs show the machine's own
run-to-run drift, so a dtriton ratio can be read against them. Prints a markdown table and, per
result, the geometric mean of the dtriton ratios and the largest deviation.
"""
from __future__ import annotations

import argparse
import json
import math


def load(path: str) -> dict[tuple, dict]:
    with open(path) as f:
        rows = json.load(f)["rows"]
    return {(r["group"], r["case"], r["impl"]): r for r in rows if r.get("kernel_us")}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--labels", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    labels = a.labels.split(",") if a.labels else [f"run{k}" for k in range(len(a.runs))]
    data = [load(p) for p in a.runs]
    keys = [k for k in data[0] if all(k in d for d in data[1:])]
    head = "| group | case | impl | " + " | ".join(f"{lb} µs" for lb in labels) + " | " + \
        " | ".join(f"{lb}/{labels[0]}" for lb in labels[1:]) + " |"
    lines = [head, "|" + "---|" * (3 + 2 * len(labels) - 1)]
    ratios: dict[str, list[tuple[float, tuple]]] = {lb: [] for lb in labels[1:]}
    for k in keys:
        ts = [d[k]["kernel_us"] for d in data]
        rs = [t / ts[0] for t in ts[1:]]
        if k[2].startswith("dtriton"):
            for lb, r in zip(labels[1:], rs):
                ratios[lb].append((r, k))
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(f"{t:.1f}" for t in ts) + " | " +
                     " | ".join(f"{r:.3f}" for r in rs) + " |")
    lines.append("")
    for lb, rs in ratios.items():
        if not rs:
            continue
        gm = math.exp(sum(math.log(r) for r, _ in rs) / len(rs))
        worst = max(rs, key=lambda x: abs(math.log(x[0])))
        lines.append(f"- {lb}/{labels[0]}: {len(rs)} dtriton rows, geomean {gm:.3f}, largest deviation "
                     f"{worst[0]:.3f} ({' '.join(worst[1])})")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
