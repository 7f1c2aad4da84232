"""``dpstream bench`` and ``dpstream suite``: what the two commands do once their flags are parsed.

:mod:`dpstream.stream.cli` parses and dispatches; the work and the terminal output live here,
beside the suite they drive. A run of the suite writes its results, page and plots under
``reports/suite-PROFILE/`` (or ``--docs PATH``); only ``--render-docs`` (``make bench``)
renders the project's own ``docs/benchmarks.md`` and ``docs/img/`` from the committed
``benchmarks/results/PROFILE.jsonl``.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["REPORTS", "bench_command", "project_root", "suite_command", "suite_paths"]


def bench_command(model: str, dataset: str, epsilons: Sequence[float], *,
                  repeats: int | None = None, folds: int | None = None, seed: int = 0,
                  labeled_fraction: float = 1.0, params: dict[str, Any] | None = None,
                  as_json: bool = False) -> int:
    """Run :func:`~dpstream.stream.bench.protocols.run_bench` at each epsilon and print it."""
    from .protocols import run_bench

    live = not as_json and sys.stderr.isatty()   # a progress line only where it redraws
    for eps in epsilons:
        def progress(done: int, total: int, eps: float = eps) -> None:
            if live:
                print(f"  epsilon {eps:g}: fit {done}/{total}", end="\r", file=sys.stderr,
                      flush=True)
        res = run_bench(model, dataset, eps, repeats=repeats, folds=folds, seed=seed,
                        params=dict(params or {}), labeled_fraction=labeled_fraction,
                        progress=progress)
        if as_json:
            print(json.dumps(res), flush=True)
            continue
        if live:
            print(" " * 40, end="\r", file=sys.stderr, flush=True)   # clear the progress line
        labels = (f", {res['labeled_fraction']:g} of the labels"
                  if res["labeled_fraction"] < 1 else "")
        print(f"{res['model']} on {res['dataset']} at epsilon {eps:g} (delta "
              f"{res['delta']:g}): {res['metric']} {res['mean']:.4f} +- {res['std']:.4f} "
              f"over {res['repeats']} x {res['protocol']}{labels}, {res['seconds']:.1f} s")
        if res.get("config"):
            print(f"  configuration: {res['config']} (stream/bench/configs.py)")
        if "error_best_threshold" in res:
            print(f"  error at the best threshold on each test fold (the authors' scoring): "
                  f"{res['error_best_threshold']:.4f} +- {res['error_best_threshold_std']:.4f}")
        if "curve" in res:
            print(f"  accuracy before the drift {res['accuracy_before_drift']:.4f}; per "
                  f"{res['block']} records: {' '.join(f'{v:.2f}' for v in res['curve'])}")
    return 0


#: where a run of the suite writes unless told otherwise: ``reports/suite-PROFILE/`` (gitignored)
REPORTS = Path("reports")


def project_root() -> Path:
    """The source checkout this dpstream runs from (the repository root is the package)."""
    return Path(__file__).resolve().parents[2]


def suite_paths(profile: str, *, results: str | Path | None = None,
                docs: str | Path | None = None, render_docs: bool = False,
                root: str | Path | None = None) -> tuple[Path, Path]:
    """The results file and the page of a suite run; the plots go to the page's ``img/``.

    Parameters
    ----------
    profile
        The suite profile (``quick``, ``full``, ``smoke``).
    results
        The results file; default: beside the page, ``PROFILE.jsonl``, or with
        ``render_docs`` the committed ``benchmarks/results/PROFILE.jsonl``.
    docs
        The page (a ``.md`` file, or a folder to hold ``benchmarks.md``); default
        ``reports/suite-PROFILE/benchmarks.md`` under the working directory.
    render_docs
        Render the project's own ``docs/benchmarks.md`` (``make bench``): only then does the
        suite write into tracked files.
    root
        The project checkout for ``render_docs`` (default: :func:`project_root`).

    Returns
    -------
    tuple of Path
        ``(results, page)``.

    Examples
    --------
    >>> [p.as_posix() for p in suite_paths("quick")]
    ['reports/suite-quick/quick.jsonl', 'reports/suite-quick/benchmarks.md']
    >>> [p.as_posix() for p in suite_paths("smoke", docs="out")]
    ['out/smoke.jsonl', 'out/benchmarks.md']
    """
    if render_docs:
        if docs is not None:
            raise ValueError("--render-docs renders the project's docs/benchmarks.md; "
                             "give it or --docs PATH, not both")
        root = project_root() if root is None else Path(root)
        if not (root / "docs").is_dir() or not (root / "benchmarks").is_dir():
            raise ValueError(f"--render-docs renders the project's docs/benchmarks.md, but "
                             f"{root} is not a source checkout (no docs/ or benchmarks/): "
                             "clone the repository and pip install -e . there")
        page = root / "docs" / "benchmarks.md"
        default = root / "benchmarks" / "results" / f"{profile}.jsonl"
    else:
        page = REPORTS / f"suite-{profile}" if docs is None else Path(docs)
        if page.is_dir() or not page.suffix:
            page = page / "benchmarks.md"
        default = page.parent / f"{profile}.jsonl"
    return (default if results is None else Path(results)), page


def suite_command(profile: str, *, results: str | Path | None = None,
                  docs: str | Path | None = None, only: str | None = None,
                  render_only: bool = False, list_only: bool = False,
                  render_docs: bool = False) -> int:
    """List, run (resumably) and render the benchmark matrix of ``profile``.

    The page, its plots and the results go to ``reports/suite-PROFILE/`` unless ``docs`` /
    ``results`` say otherwise; only ``render_docs`` writes the project's docs
    (:func:`suite_paths`). Cells that cannot run here (an optional package missing) are
    named, with their pip line, on the terminal and on the page.
    """
    from .report import write_report
    from .suite import build_matrix, load_results, skipped_cells

    results, page = suite_paths(profile, results=results, docs=docs, render_docs=render_docs)
    if list_only:
        done = {r["cell"] for r in load_results(results)}
        for cell in build_matrix(profile):
            if only is None or only in cell.describe():
                print(("done  " if cell.key() in done else "todo  ") + cell.describe())
        return 0
    ran = [] if render_only else _run_with_progress(profile, results, only)
    rows = load_results(results)
    if not rows:
        raise ValueError(f"no results in {results}: run without --render-only first")
    from .scale_report import load_scale_runs

    root = project_root()
    skipped = skipped_cells(profile, rows, ran)
    docs_dir = root / "docs"
    links = None
    if docs_dir.is_dir():
        links = os.path.relpath(docs_dir, page.resolve().parent).replace(os.sep, "/") + "/"
        links = "" if links == "./" else links
    page = write_report(rows, page, profile=profile, skipped=skipped,
                        scale_rows=load_scale_runs(results.parent / "scale_out.jsonl"),
                        command=f"dpstream suite --profile {profile}"
                                + (" --render-docs" if render_docs else ""),
                        results=_shown(results, root if render_docs else Path.cwd()),
                        links=links)
    here = Path.cwd()
    print(f"{len(rows)} result lines in {_shown(results, here)}")
    counts = Counter(why for _, why in skipped)
    for why, n in counts.items():
        names = sorted({c.name for c, w in skipped if w == why})
        print(f"skipped: {', '.join(names)} ({n} cell{'s' * (n != 1)}): {why}")
    print(f"page written to {_shown(page, here)} (plots in {_shown(page.parent / 'img', here)})")
    return 0


def _shown(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` when it lies under it, else as it is."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(base)).as_posix()
    except ValueError:
        return str(path)


def _run_with_progress(profile: str, results: Path, only: str | None) -> list[tuple]:
    """Run the suite under a rich progress display (plain lines when not on a terminal)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from ...models import SmallStreamWarning
    from .suite import run_suite

    console = Console(stderr=True)
    live = console.is_terminal
    skipped: list[tuple] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=not live) as bar:
        total = bar.add_task("cells", total=None)
        inner = bar.add_task("", total=None)

        def on_start(cell, i: int, n: int) -> None:
            bar.update(total, total=n, completed=i - 1, description="suite")
            bar.update(inner, description=cell.describe(), completed=0, total=None)

        def on_progress(done: int, n: int) -> None:
            bar.update(inner, completed=done, total=n)

        def on_done(cell, row, reason) -> None:
            if reason is not None:
                skipped.append((cell, reason))
                msg = f"skipped  {cell.describe()}: {reason}"
            else:
                msg = (f"done     {cell.describe()}: {row['metric']} {row['mean']:.4f} "
                       f"({row['wall_s']:.1f} s)")
            if live:
                bar.console.print(msg)
            else:
                print(msg, file=sys.stderr, flush=True)

        with warnings.catch_warnings():
            # the suite measures small epsilons and streams on purpose: a warning per model
            # would bury the progress and the "skipped" lines
            warnings.simplefilter("ignore", SmallStreamWarning)
            run_suite(profile, results, only=only, on_start=on_start, on_progress=on_progress,
                      on_done=on_done)
    return skipped
