"""Tune S-GBDT defaults honestly: inner K-fold CV on the TRAINING part of outer fold 0 only.

The outer 5-fold split is the one ``dpstream bench`` uses (same seed), so outer fold 0's test
rows are never seen here. Usage::

    python benchmarks/sgbdt_tune.py adult 0.54 --grid depth=2,4,6 learning_rate=0.1,0.3
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np

from dpstream.models import SGBDTClassifier, SGBDTRegressor
from dpstream.stream.bench import BENCH_DATASETS, fold_indices, score_model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dataset", choices=["adult", "abalone"])
    p.add_argument("epsilon", type=float)
    p.add_argument("--grid", nargs="+", default=[], help="name=v1,v2,...")
    p.add_argument("--inner", type=int, default=3)
    p.add_argument("--repeats", type=int, default=1)
    a = p.parse_args()
    X, y, schema, metric = BENCH_DATASETS[a.dataset]()
    outer = fold_indices(len(y), 5, seed=0)
    train = np.concatenate(outer[1:])          # outer fold 0 is the held-out test fold
    grid = {}
    for item in a.grid:
        name, vals = item.split("=")
        grid[name] = [json.loads(v) for v in vals.split(",")]
    cls = SGBDTClassifier if metric == "error" else SGBDTRegressor
    results = []
    for combo in itertools.product(*grid.values()):
        params = dict(zip(grid, combo, strict=True))
        t0 = time.perf_counter()
        scores = []
        for r in range(a.repeats):
            inner = fold_indices(train.size, a.inner, seed=100 + r)
            for k in range(a.inner):
                te = train[inner[k]]
                tr = train[np.concatenate([inner[j] for j in range(a.inner) if j != k])]
                model = cls(schema=schema, epsilon=a.epsilon, seed=1000 * r + k, **params)
                scores.append(score_model(model, X, y, tr, te, metric))
        results.append((float(np.mean(scores)), params))
        print(json.dumps({"mean": round(float(np.mean(scores)), 4),
                          "std": round(float(np.std(scores)), 4), **params,
                          "s": round(time.perf_counter() - t0, 1)}), flush=True)
    best = (min if metric == "error" else max)(results, key=lambda t: t[0])
    print("BEST", json.dumps({"score": best[0], **best[1]}))


if __name__ == "__main__":
    main()
