"""Replay benchmarks: compare a DP model with the baselines on your machine, then the suite.

Run: ``python examples/replay_benchmark.py`` (needs the bench extra:
``pip install 'dpstream[bench]'``; without it the script says so and exits 2)

1. One paper row by hand — the median forest on Iris at ε = 1 under Huang et al.'s protocol —
   next to DP Mean and scikit-learn's non-private random forest on the very same splits.
2. A CI-sized run of the benchmark suite (``smoke`` profile) into a temporary folder: the
   results file (one JSON line per cell, resumable) and the rendered page with its plots.
   ``make bench-quick`` runs the quick profile into reports/suite-quick/; ``make bench`` the
   full one into the project's docs/benchmarks.md (``dpstream suite --render-docs``).
"""
# needs: dpstream[bench]

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

if importlib.util.find_spec("sklearn") is None:   # an optional dependency
    print("replay_benchmark.py needs the bench extra: "
          "pip install 'dpstream[bench]'", file=sys.stderr)
    raise SystemExit(2)

from dpstream.stream.bench import run_bench
from dpstream.stream.bench.baselines import run_baseline
from dpstream.stream.bench.report import write_report
from dpstream.stream.bench.suite import run_suite


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    # 1. one row by hand: same protocol, same splits (seeded), three kinds of model
    ours = run_bench("median-forest", "iris", 1.0, repeats=5, seed=0)
    floor = run_baseline("dp-mean", "iris", "holdout", epsilon=1.0, repeats=5, seed=0)
    ceiling = run_baseline("sklearn-random-forest", "iris", "holdout", repeats=5, seed=0)
    for r in (ours, floor, ceiling):
        eps = "non-private" if r["epsilon"] is None else f"epsilon={r['epsilon']:g}"
        print(f"{r['model']:>22} on iris ({eps}): accuracy {r['mean']:.3f} +- {r['std']:.3f}")

    # 2. the suite, tiny: every kind of cell, resumable results, a rendered page
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "smoke.jsonl"
        rows, skipped = run_suite("smoke", results)
        again, _ = run_suite("smoke", results)             # resumes: nothing left to run
        page = write_report(again, Path(tmp) / "benchmarks.md", profile="smoke",
                            skipped=skipped)
        print(f"suite: {len(rows)} result lines, {len(skipped)} cells skipped "
              f"({', '.join(sorted({why for _, why in skipped})) or 'none'})")
        print(f"page: {len(page.read_text().splitlines())} lines, plots: "
              f"{sorted(p.name for p in (page.parent / 'img').glob('*.png'))}")


if __name__ == "__main__":
    main()
