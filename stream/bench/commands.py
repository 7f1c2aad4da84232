"""``dpstream bench`` and ``dpstream suite``: what the two commands do once their flags are parsed.

:mod:`dpstream.stream.cli` parses and dispatches; the work and the terminal output live here,
beside the suite they drive.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["bench_command", "suite_command"]


def bench_command(model: str, dataset: str, epsilons: Sequence[float], *,
                  repeats: int | None = None, folds: int | None = None, seed: int = 0,
                  labeled_fraction: float = 1.0, params: dict[str, Any] | None = None,
                  as_json: bool = False) -> int:
    """Run :func:`~dpstream.stream.bench.protocols.run_bench` at each epsilon and print it."""
    from .protocols import run_bench

    for eps in epsilons:
        def progress(done: int, total: int, eps: float = eps) -> None:
            if not as_json:
                print(f"  epsilon {eps:g}: fit {done}/{total}", end="\r", file=sys.stderr,
                      flush=True)
        res = run_bench(model, dataset, eps, repeats=repeats, folds=folds, seed=seed,
                        params=dict(params or {}), labeled_fraction=labeled_fraction,
                        progress=progress)
        if as_json:
            print(json.dumps(res), flush=True)
            continue
        print(" " * 40, end="\r", file=sys.stderr, flush=True)   # clear the progress line
        labels = (f", {res['labeled_fraction']:g} of the labels"
                  if res["labeled_fraction"] < 1 else "")
        print(f"{res['model']} on {res['dataset']} at epsilon {eps:g} (delta "
              f"{res['delta']:g}): {res['metric']} {res['mean']:.4f} +- {res['std']:.4f} "
              f"over {res['repeats']} x {res['protocol']}{labels}, {res['seconds']:.1f} s")
        if "error_best_threshold" in res:
            print(f"  error at the best threshold on each test fold (the authors' scoring): "
                  f"{res['error_best_threshold']:.4f} +- {res['error_best_threshold_std']:.4f}")
        if "curve" in res:
            print(f"  accuracy before the drift {res['accuracy_before_drift']:.4f}; per "
                  f"{res['block']} records: {' '.join(f'{v:.2f}' for v in res['curve'])}")
    return 0


def suite_command(profile: str, *, results: str | Path | None = None,
                  docs: str | Path = "docs/benchmarks.md", only: str | None = None,
                  render_only: bool = False, list_only: bool = False) -> int:
    """List, run (resumably) and render the benchmark matrix of ``profile``."""
    from .report import write_report
    from .suite import build_matrix, load_results

    results = Path(results or f"benchmarks/results/{profile}.jsonl")
    if list_only:
        done = {r["cell"] for r in load_results(results)}
        for cell in build_matrix(profile):
            if only is None or only in cell.describe():
                print(("done  " if cell.key() in done else "todo  ") + cell.describe())
        return 0
    skipped = [] if render_only else _run_with_progress(profile, results, only)
    rows = load_results(results)
    if not rows:
        raise ValueError(f"no results in {results}: run without --render-only first")
    from .scale_report import load_scale_runs

    page = write_report(rows, docs, profile=profile, skipped=skipped,   # scale_out.py --save
                        scale_rows=load_scale_runs(results.parent / "scale_out.jsonl"))
    print(f"{len(rows)} result lines in {results}; page written to {page}")
    return 0


def _run_with_progress(profile: str, results: Path, only: str | None) -> list[str]:
    """Run the suite under a rich progress display (plain lines when not on a terminal)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from .suite import run_suite

    console = Console(stderr=True)
    live = console.is_terminal
    skipped: list[str] = []
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
                skipped.append(f"{cell.describe()} ({reason})")
                msg = f"skipped  {cell.describe()}: {reason}"
            else:
                msg = (f"done     {cell.describe()}: {row['metric']} {row['mean']:.4f} "
                       f"({row['wall_s']:.1f} s)")
            if live:
                bar.console.print(msg)
            else:
                print(msg, file=sys.stderr, flush=True)

        run_suite(profile, results, only=only, on_start=on_start, on_progress=on_progress,
                  on_done=on_done)
    return skipped
