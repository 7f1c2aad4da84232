"""S-GBDT throughput on Adult: streaming learn_one + predict_one, and batch predict_many.

Usage: python benchmarks/speed_sgbdt.py [--json]
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from dpstream.models import SGBDTClassifier
from dpstream.stream import load_adult


def main() -> None:
    X, y, schema = load_adult("all")
    model = SGBDTClassifier(schema=schema, epsilon=0.5, round_size=256, seed=0)
    t0 = time.perf_counter()
    for xi, yi in zip(X, y, strict=True):
        model.predict_one(xi)
        model.learn_one(xi, yi)
    stream_s = time.perf_counter() - t0

    big = SGBDTClassifier(schema=schema, epsilon=0.5, n_trees=150, extra_trees=0, depth=6,
                          seed=0)
    big.learn_many(X[:30000], y[:30000])
    rows = big._encoder.encode_many(X)          # encoding measured separately below
    t0 = time.perf_counter()
    big.engine.raw_scores(rows)
    score_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    big.predict_many(X)
    many_s = time.perf_counter() - t0
    out = {"records": len(X),
           "stream_learn_predict_rows_per_s": round(len(X) / stream_s),
           "predict_many_rows_per_s": round(len(X) / many_s),
           "scoring_encoded_rows_per_s": round(len(X) / score_s),
           "trees": len(big.engine.forest), "depth": 6}
    if "--json" in sys.argv:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v:,}" if isinstance(v, (int, np.integer)) else f"{k}: {v}")


if __name__ == "__main__":
    main()
