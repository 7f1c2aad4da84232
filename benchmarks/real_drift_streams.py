"""Classifiers on a real drifting stream and on a drifting hyperplane.

For one model and one or more parameter sets ("arms", JSON), prints per arm the prequential
accuracy (epsilon = 1 unless an arm says otherwise), the mean over model seeds, on Elec2 and
on river's ``Hyperplane`` with and without drift. The streams:
docs/benchmark_notes.md#real-drifting-streams-script.

Usage::

    python benchmarks/real_drift_streams.py greedy-forest '{"n_bins": 4}' '{}' --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from river.datasets import synth

from dpstream.stream import load_elec2
from dpstream.stream.bench.protocols import BENCH_MODELS

#: the streaming classifiers, by the benchmark's names
MODELS = {name: kinds.get("accuracy", kinds.get("error")) for name, kinds in BENCH_MODELS.items()
          if name in ("sgbdt", "median-forest", "random-forest", "rdt", "greedy-forest")}
HYPERPLANE_SCHEMA = {"features": {i: {"type": "numeric", "min": 0.0, "max": 1.0}
                                  for i in range(10)},
                     "target": {"type": "binary", "values": [0, 1]}}


def hyperplane(mag_change: float, n: int = 40_000) -> list:
    stream = synth.Hyperplane(seed=1, n_features=10, n_drift_features=2, mag_change=mag_change)
    return [({k: float(v) for k, v in x.items()}, int(y)) for x, y in stream.take(n)]


def prequential(model, rows: list) -> float:
    right = 0
    for x, y in rows:
        right += model.predict_one(x) == y
        model.learn_one(x, y)
    return right / len(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("arms", nargs="+", help="JSON parameter sets ('{}': the defaults)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = ap.parse_args(argv)
    X, y, elec_schema = load_elec2()
    streams = {"elec2": (list(zip(X, y, strict=True)), elec_schema),
               "hyperplane drift": (hyperplane(0.001), HYPERPLANE_SCHEMA),
               "hyperplane still": (hyperplane(0.0), HYPERPLANE_SCHEMA)}
    cls = MODELS[args.model]
    for arm in args.arms:
        params = json.loads(arm)
        eps = params.pop("epsilon", 1.0)
        t = time.perf_counter()
        cells = []
        for name, (rows, schema) in streams.items():
            accs = [prequential(cls(schema=schema, epsilon=eps, seed=s, **params), rows)
                    for s in args.seeds]
            cells.append(f"{name} {np.mean(accs):.3f}")
        print(f"{args.model} {arm}: " + ", ".join(cells)
              + f"  (seeds {args.seeds}, {time.perf_counter() - t:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
