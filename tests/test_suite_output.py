"""Where ``dpstream suite`` writes (issue 49): a user's run goes to ``reports/`` and leaves every
tracked file alone, only ``--render-docs`` (``make bench``) renders the project's docs; a
baseline whose optional package is missing shows as *skipped* with its pip line, on the page
and on the terminal; ``dpstream bench --help`` names every model."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dpstream
from dpstream.stream.bench import BENCH_MODELS, suite
from dpstream.stream.bench import report as bench_report
from dpstream.stream.bench.baselines import BENCH_EXTRA, missing_optional
from dpstream.stream.bench.commands import project_root, suite_command, suite_paths
from dpstream.stream.cli import main

ROOT = Path(dpstream.__file__).resolve().parent      # the repository root is the package


# ----------------------------------------------------------------------------- paths
def test_a_run_writes_under_reports_or_docs_path_and_only_render_docs_targets_docs(tmp_path):
    assert suite_paths("quick") == (Path("reports/suite-quick/quick.jsonl"),
                                    Path("reports/suite-quick/benchmarks.md"))
    page = tmp_path / "mine" / "bench.md"
    assert suite_paths("smoke", docs=page) == (page.parent / "smoke.jsonl", page)
    assert suite_paths("smoke", docs=tmp_path) == (tmp_path / "smoke.jsonl",
                                                   tmp_path / "benchmarks.md")
    assert suite_paths("smoke", docs=page, results=tmp_path / "r.jsonl")[0] == tmp_path / "r.jsonl"
    # --render-docs: the project's own page, from the committed results
    assert project_root() == ROOT
    assert suite_paths("full", render_docs=True) == (
        ROOT / "benchmarks" / "results" / "full.jsonl", ROOT / "docs" / "benchmarks.md")
    with pytest.raises(ValueError, match="not both"):
        suite_paths("full", render_docs=True, docs=page)
    with pytest.raises(ValueError, match="not a source checkout"):   # e.g. a wheel install
        suite_paths("full", render_docs=True, root=tmp_path)


def test_make_bench_renders_the_docs_and_make_bench_quick_does_not():
    recipes = dict(re.findall(r"^([\w-]+):[^\n]*\n\t([^\n]*)", (ROOT / "Makefile").read_text(),
                              re.M))
    assert recipes["bench"].endswith("dpstream suite --profile full --render-docs")
    assert recipes["bench-quick"].endswith("dpstream suite --profile quick")


def test_the_quick_profile_leaves_out_what_cost_it_its_five_minutes():
    cells = suite.build_matrix("quick")
    assert not [c for c in cells if c.kind == "speed"]                  # in full only
    assert {c.name for c in cells if c.kind == "drift"} >= {"sgbdt", "hoeffding-tree"}
    assert "arf" not in {c.name for c in cells if c.kind == "drift"}    # 30,000 records each
    assert "arf" in {c.name for c in cells if c.kind == "stream"}
    assert {c.folds for c in cells if c.protocol == "kfold"} == {5}
    kfold = {c.name for c in cells if c.protocol == "kfold" and c.kind == "baseline"}
    assert kfold == {"diffprivlib-random-forest", "dp-mean"}   # Adult's ceiling: the holdout's


# ----------------------------------------------------------------------------- skipped rows
def _row(model, eps, mean, kind="dp"):
    return {"cell": f"[{model!r}]", "model": model, "dataset": "iris", "epsilon": eps,
            "metric": "accuracy", "mean": mean, "std": 0.01, "repeats": 2, "folds": 1, "params": {},
            "labeled_fraction": 1.0, "kind": kind, "table": "holdout",
            "protocol": "holdout 90/10", "wall_s": 0.1, "date": "2026-01-01", "machine": "m"}


def test_a_missing_baseline_renders_a_skipped_row_with_its_pip_line(tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.setitem(sys.modules, "diffprivlib", None)      # import diffprivlib fails
    rows = [_row("median-forest", 1.0, 0.8), _row("dp-mean", 1.0, 0.3, "dp-baseline")]
    skipped = suite.skipped_cells("smoke", rows)
    assert [(c.name, c.dataset, c.epsilon) for c, _ in skipped] == [
        ("diffprivlib-random-forest", "iris", 1.0)]
    assert skipped[0][1] == f"diffprivlib is not installed: {BENCH_EXTRA}"
    md = bench_report.render_markdown(rows, skipped=skipped)
    fix = "skipped: diffprivlib is not installed: `pip install 'dpstream[bench]'`"
    assert f"| diffprivlib-random-forest | 1 | Iris (holdout) | {fix} |" in md   # the summary
    assert "| ε | median-forest | dp-mean | diffprivlib-random-forest |" in md    # its column
    assert "| 1 | 80.00% ± 1.00 | 30.00% ± 1.00 | skipped |" in md
    assert ("**skipped: diffprivlib-random-forest** at ε = 1 — diffprivlib is not installed: "
            "`pip install 'dpstream[bench]'`.") in md
    # the command: the same on the terminal, and the page where it says
    results = tmp_path / "smoke.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert suite_command("smoke", results=results, docs=tmp_path / "page.md",
                         render_only=True) == 0
    out = capsys.readouterr().out
    assert (f"skipped: diffprivlib-random-forest (1 cell): diffprivlib is not installed: "
            f"{BENCH_EXTRA}") in out
    assert out.rstrip().endswith(f"page written to {tmp_path / 'page.md'} "
                                 f"(plots in {tmp_path / 'img'})")
    assert "| skipped |" in (tmp_path / "page.md").read_text()


def test_a_cell_whose_optional_package_is_missing_is_skipped_not_crashed(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)           # iris is scikit-learn's copy
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    cell = suite.Cell("model", "median-forest", "iris", "holdout", 1.0, repeats=1)
    monkeypatch.setattr(suite, "build_matrix", lambda profile: [cell])
    rows, skipped = suite.run_suite("smoke", tmp_path / "r.jsonl")
    assert rows == [] and skipped == [(cell, f"scikit-learn is not installed: {BENCH_EXTRA}")]
    # an import error of a core package or of dpstream itself is a bug: it is raised
    assert missing_optional(ModuleNotFoundError("no numba", name="numba")) is None

    def broken(self, progress=None):
        raise ModuleNotFoundError("No module named 'numba'", name="numba")
    monkeypatch.setattr(suite.Cell, "run", broken)
    with pytest.raises(ModuleNotFoundError):
        suite.run_suite("smoke", tmp_path / "r.jsonl")


# ----------------------------------------------------------------------------- bench --help
def test_bench_help_names_every_model_it_accepts(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")                     # argparse wraps at hyphens
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    listed = re.search(r"--model MODEL\s+model name: ([^\n]*?) --dataset", text).group(1)
    assert {m.strip() for m in listed.split("|")} == set(BENCH_MODELS)
    assert "dpboost" in BENCH_MODELS


# ----------------------------------------------------------------------------- a clean clone
def _clone(tmp_path: Path) -> Path:
    """The working tree's tracked files, committed in a fresh repository (``tmp/dpstream``)."""
    dest = tmp_path / "dpstream"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():                  # deleted in the working tree: not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], cwd=dest, check=True)
    return dest


def _status(repo: Path) -> list[str]:
    return subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.splitlines()


def test_a_smoke_run_in_a_clean_clone_changes_no_tracked_file(tmp_path):
    repo = _clone(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}     # import dpstream from the copy
    cli = [sys.executable, "-m", "dpstream.stream.cli", "suite", "--profile", "smoke"]
    out = subprocess.run(cli, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "page written to reports/suite-smoke/benchmarks.md" in out.stdout
    assert _status(repo) == []                             # nothing tracked changed
    page = repo / "reports" / "suite-smoke" / "benchmarks.md"
    text = page.read_text()
    assert "`reports/suite-smoke/smoke.jsonl`" in text and "### Iris" in text
    assert "[benchmark notes](../../docs/benchmark_notes.md)" in text
    assert sorted(p.name for p in (page.parent / "img").glob("*.png"))
    assert (page.parent / "smoke.jsonl").exists()
    # --render-docs: the project's page and plots, from benchmarks/results/smoke.jsonl
    shutil.copy(page.parent / "smoke.jsonl", repo / "benchmarks" / "results" / "smoke.jsonl")
    out = subprocess.run([*cli, "--render-docs", "--render-only"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    changed = {line[3:] for line in _status(repo)}
    assert "docs/benchmarks.md" in changed and all(p.startswith("docs/") for p in changed)
    text = (repo / "docs" / "benchmarks.md").read_text()
    assert "`dpstream suite --profile smoke --render-docs`" in text
    assert "`benchmarks/results/smoke.jsonl`" in text and "](benchmark_notes.md)" in text
