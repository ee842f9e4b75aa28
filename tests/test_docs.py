"""The docs site (docs/, mkdocs.yml): every Python block of a page is a file under docs/snippets/
included into the page, and every snippet runs here (CPU interpreter, the snippets' own small
shapes); the knob table is checked by tests/test_knobs.py; the site builds with warnings as errors."""

from __future__ import annotations

import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SNIPPETS = sorted((DOCS / "snippets").glob("*.py"))
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$')

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def python_blocks(text: str) -> list[list[str]]:
    """The lines of every ```python fenced block of a markdown page."""
    blocks, cur = [], None
    for line in text.splitlines():
        if cur is None and line.strip() == "```python":
            cur = []
        elif cur is not None and line.strip() == "```":
            blocks.append(cur)
            cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


def test_every_python_block_is_an_included_snippet():
    included = set()
    for page in DOCS.glob("*.md"):
        for block in python_blocks(page.read_text(encoding="utf-8")):
            lines = [ln for ln in block if ln.strip()]
            assert lines and all(INCLUDE.match(ln) for ln in lines), (
                f"{page.name}: a python block that is not an include of docs/snippets/*.py (so no test runs it): "
                f"{block[:3]}")
            for ln in lines:
                path = INCLUDE.match(ln).group(1)
                assert (ROOT / path).is_file(), f"{page.name} includes {path}, which does not exist"
                included.add((ROOT / path).resolve())
    assert set(p.resolve() for p in SNIPPETS) <= included, "a snippet that no page includes"
    assert len(SNIPPETS) >= 7


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[p.stem for p in SNIPPETS])
def test_snippet_runs(snippet, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)           # snippets that save plots write them here
    runpy.run_path(str(snippet), run_name="__main__")
    out = capsys.readouterr().out
    if snippet.stem == "quickstart":
        assert "@_jit" in out and "tl.store" in out
    if snippet.stem == "explore":
        assert "dtriton explore: softmax" in out and (tmp_path / "explore.png").is_file()
    if snippet.stem == "benchmark":
        assert "baseline (torch_softmax)" in out and "alg.reference (eager)" in out and (tmp_path / "bench.png").is_file()


def test_quickstart_is_ten_lines():
    code = [ln for ln in (DOCS / "snippets" / "quickstart.py").read_text().splitlines() if ln.strip()]
    assert len(code) <= 11, len(code)


@pytest.mark.skipif(shutil.which("mkdocs") is None and not any(
    (Path(p) / "mkdocs").exists() for p in sys.path), reason="needs the docs extra (pip install -e '.[docs]')")
def test_site_builds_strict(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    html = (tmp_path / "site" / "tutorial" / "index.html").read_text(encoding="utf-8")
    assert "rms_norm" in html and "--8&lt;--" not in html      # snippets were included, not shown raw


def test_readme_matches_ci_and_the_quickstart():
    """The README's test command is the one .ci/run calls; its quickstart is the tested snippet."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_cmd = next(ln for ln in ci.splitlines() if "pytest" in ln and not ln.startswith("#"))
    assert f"&& {test_cmd}" in readme, test_cmd
    install = next(ln for ln in ci.splitlines() if "pip install" in ln)
    assert install.replace(" -q", "") + " && " + test_cmd in readme
    quick = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert quick == (DOCS / "snippets" / "quickstart.py").read_text(encoding="utf-8")
    assert "mkdocs build --strict" in ci


def test_bench_command_of_the_guide_runs():
    """docs/explore.md's `dtriton bench` commands of row_rms, on the guide's kernels.py and my_torch.py (tiny
    shapes; the baseline's torch.compile row left out, seconds on a CPU)."""
    from click.testing import CliRunner

    from dtriton.cli import main
    guide = (DOCS / "explore.md").read_text(encoding="utf-8")
    cmds = [ln for ln in guide.splitlines() if ln.startswith("dtriton bench kernels.py:row_rms")]
    assert len(cmds) == 2 and "--baseline my_torch.py:row_rms_torch" in cmds[1], cmds
    for cmd in cmds:
        argv = [a.replace("kernels.py", str(DOCS / "snippets" / "kernels.py")).replace(
            "my_torch.py", str(DOCS / "snippets" / "my_torch.py")) for a in cmd.split("#")[0].split()[1:]]
        extra = [] if "--no-compile" in argv else ["--no-compile"]
        res = CliRunner().invoke(main, argv + extra + ["--seconds", "0.05"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        assert "row_rms" in res.output and "alg.reference (eager)" in res.output
    row = next(ln for ln in res.output.splitlines() if "baseline (row_rms_torch)" in ln)   # checked vs float64
    assert "│ ok" in row, res.output


def test_user_questions_are_answered():
    """Questions a first user asked, each answered on its page (and run by a snippet)."""
    flat = {p.name: " ".join(p.read_text(encoding="utf-8").split()) for p in DOCS.glob("*.md")}
    assert "`dt.cast(x, torch.float16)` takes a torch dtype" in flat["tutorial.md"]
    explore = flat["explore.md"]
    for fact in ("`space=dt.Space(...)`", "`place={\"sum0\": [\"fuse\", \"materialize\"]}`", "`\"auto\"`, the default",
                 "`max_trials` counts the candidates of the search only", "baseline=fn", "`--dtype NAME=DTYPE`"):
        assert fact in explore, fact
    assert "`backward_schedules` is one `dt.Schedule`" in flat["tutorial.md"]
    snippet = (DOCS / "snippets" / "explore.py").read_text(encoding="utf-8")
    assert "space=space" in snippet and "dt.cast(" in snippet


def test_the_library_page_is_the_generated_one():
    """docs/library.md lists every algorithm of dtriton.library as tools/library_page.py prints it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("library_page", ROOT / "tools" / "library_page.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (ROOT / "docs" / "library.md").read_text() == mod.page(), \
        "docs/library.md is stale: run python3 tools/library_page.py --write docs/library.md"
