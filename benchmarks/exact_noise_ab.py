"""Exact noise's cost figures: learn + predict rows/s and prequential accuracy of each model with
floating-point noise (a checkout of an older dpstream) against exact noise (this tree), A/B in
one run, alternating, each run in a fresh process.

Usage: python benchmarks/exact_noise_ab.py --old PATH [--models M,M] [--n N] [--repeat R]
[--seeds S,S] [--json]

``--old``: the repository root of the version to compare with (``git worktree add /tmp/old
<commit>``). The arms (``float``, ``exact``, ``exact+aes``) and the report:
docs/benchmark_notes.md#exact-noise-ab-script; results:
docs/benchmark_notes.md#exact-noise-issue-65-what-it-costs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CHILD = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
arm, model, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if arm == "exact+aes":
    import dpstream.accounting._validate as v
    from dpstream.accounting.noise import secure_generator
    old = v.as_generator
    v.as_generator = lambda rng: secure_generator(rng) if isinstance(rng, int) else old(rng)
    import dpstream.accounting as acc
    acc.as_generator = v.as_generator
    for mod in ("dpstream.models.boosting.sgbdt", "dpstream.models.windows.window_forest",
                "dpstream.models.drift", "dpstream.models.boosting.dpboost"):
        m = __import__(mod, fromlist=["as_generator"])
        m.as_generator = v.as_generator
from dpstream.stream.bench.throughput import run_stream
res = run_stream(model, "adult", epsilon=1.0, n=n, seed=seed)
print(json.dumps({"rows_per_s": res["rows_per_s"], "mean": res["mean"]}))
"""


def _link(root: Path, tmp: Path, name: str) -> Path:
    d = tmp / name
    d.mkdir()
    (d / "dpstream").symlink_to(root)
    return d


def _run(pkg: Path, arm: str, model: str, n: int, seed: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(pkg)}
    out = subprocess.run([sys.executable, "-c", CHILD, arm, model, str(n), str(seed)],
                         env=env, capture_output=True, text=True, check=True,
                         cwd=tempfile.gettempdir())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, type=Path, help="root of the float-noise version")
    ap.add_argument("--models", default="sgbdt,median-forest,random-forest,greedy-forest,rdt")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pkgs = {"float": _link(args.old.resolve(), Path(tmp), "old"),
                "exact": _link(HERE, Path(tmp), "new")}
        pkgs["exact+aes"] = pkgs["exact"]
        for model in args.models.split(","):
            got: dict[str, list[dict]] = {arm: [] for arm in pkgs}
            for _ in range(args.repeat):
                for seed in seeds:
                    for arm, pkg in pkgs.items():       # alternating: A, B, C, A, B, C, ...
                        got[arm].append(_run(pkg, arm, model, args.n, seed))
                        print(f"{model:14s} {arm:10s} seed {seed}: "
                              f"{got[arm][-1]['rows_per_s']:8.0f} rows/s, "
                              f"accuracy {got[arm][-1]['mean']:.4f}", file=sys.stderr)
            base = statistics.median(r["rows_per_s"] for r in got["float"])
            for arm, runs in got.items():
                rate = statistics.median(r["rows_per_s"] for r in runs)
                rows.append({"model": model, "arm": arm, "rows_per_s": round(rate),
                             "vs_float": round(rate / base, 3),
                             "accuracy": round(statistics.fmean(r["mean"] for r in runs), 4),
                             "runs": len(runs)})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'model':14s} {'arm':10s} {'rows/s':>8s} {'vs float':>8s} {'accuracy':>8s}")
        for r in rows:
            print(f"{r['model']:14s} {r['arm']:10s} {r['rows_per_s']:8d} {r['vs_float']:8.3f} "
                  f"{r['accuracy']:8.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
