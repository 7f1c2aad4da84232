"""The audit section of the suite (docs/privacy.md#auditing): ``dpstream audit`` of every
model at epsilon 1 and 8, on the synthetic schema and on Adult, with each run's time.

Results go to a JSON-lines file (a rerun skips cells already there) and a markdown table;
how it runs: docs/benchmark_notes.md#audit-suite-script.

Usage::

    python benchmarks/audit_suite.py                          # the whole matrix
    python benchmarks/audit_suite.py --models sgbdt,rdt --epsilons 1
    python benchmarks/audit_suite.py --render-only            # the table from the results
    python benchmarks/audit_suite.py --datasets synthetic --epsilons 1 --train-epsilon 1000 \
        --results reports/audit-controls.jsonl --out reports/audit-controls.md

The last one is the negative control: each model at epsilon 1000, held to a promise of 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MODELS = ("sgbdt", "dpboost", "median-forest", "random-forest", "rdt", "greedy-forest")
DATASETS = ("synthetic", "adult")


def _cells(models: list[str], datasets: list[str], epsilons: list[float]) -> list[dict]:
    return [{"model": m, "dataset": d, "epsilon": e}
            for d in datasets for m in models for e in epsilons]


def _key(cell: dict) -> tuple:
    return (cell["model"], cell["dataset"], float(cell["epsilon"]),
            float(cell.get("trained_epsilon", cell["epsilon"])))


def run_cell(cell: dict, records: int, canaries: int, seed: int,
             train_epsilon: float | None = None) -> dict:
    from dpstream.stream.audit.audit_run import run_audit, stderr_progress

    adult = cell["dataset"] == "adult"
    res = run_audit(schema="adult" if adult else "synthetic", source="adult" if adult else None,
                    model=cell["model"], epsilon=train_epsilon or cell["epsilon"],
                    promised_epsilon=cell["epsilon"], records=records, canaries=canaries,
                    seed=seed, progress=stderr_progress)
    return {**cell, **res.summary(), "records": res.records}


def render(rows: list[dict]) -> str:
    """The markdown table of the results."""
    lines = ["| dataset | model | promised ε | trained ε | lower bound (95%) | ceiling | r / v | "
             "attack | run time (s) |", "|---|---|---|---|---|---|---|---|---|"]
    order = {m: i for i, m in enumerate(MODELS)}
    for row in sorted(rows, key=lambda r: (r["dataset"], order.get(r["model"], 99),
                                           r["epsilon"])):
        flag = "" if row["passed"] else " **FAILED**"
        lines.append(f"| {row['dataset']} | {row['model']} | {row['epsilon']:g} | "
                     f"{row.get('trained_epsilon', row['epsilon']):g} | "
                     f"{row['epsilon_lower']:.3f}{flag} | {row['ceiling']:.2f} | "
                     f"{row['r']} / {row['v']} | "
                     f"{row['attack']} | {row['seconds']['total']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated model names")
    p.add_argument("--datasets", default=",".join(DATASETS), help="synthetic, adult")
    p.add_argument("--epsilons", default="1,8", help="comma-separated (default 1,8)")
    p.add_argument("--records", type=int, default=20_000, help="background records")
    p.add_argument("--canaries", type=int, default=1000, help="canaries (default 1,000)")
    p.add_argument("--seed", type=int, default=0, help="seed of every cell (default 0)")
    p.add_argument("--train-epsilon", type=float, help="negative controls: train every cell "
                   "at this epsilon, hold the bound against --epsilons")
    p.add_argument("--results", default="reports/audit-suite.jsonl",
                   help="JSON lines, appended and resumed")
    p.add_argument("--out", default="reports/audit-suite.md", help="the markdown table")
    p.add_argument("--render-only", action="store_true", help="render, run nothing")
    args = p.parse_args(argv)
    results = Path(args.results)
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()] \
        if results.exists() else []
    done = {_key(r) for r in rows}
    if not args.render_only:
        results.parent.mkdir(parents=True, exist_ok=True)
        cells = _cells(args.models.split(","), args.datasets.split(","),
                       [float(e) for e in args.epsilons.split(",")])
        if args.train_epsilon is not None:
            cells = [{**c, "trained_epsilon": args.train_epsilon} for c in cells]
        for cell in cells:
            if _key(cell) in done:
                continue
            print(f"audit_suite: {cell}", file=sys.stderr, flush=True)
            row = run_cell(cell, args.records, args.canaries, args.seed, args.train_epsilon)
            with results.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            rows.append(row)
            print(f"audit_suite: lower bound {row['epsilon_lower']:.3f} in "
                  f"{row['seconds']['total']:.0f} s", file=sys.stderr, flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(render(rows), encoding="utf-8")
    print(render(rows))
    controls = args.train_epsilon is not None
    return 0 if controls or all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
