"""S-GBDT throughput on Adult: streaming learn_one + predict_one, and batch predict_many.

Usage: python benchmarks/sgbdt_speed.py [--json]

* ``calibration_s``: the one-off start-up (Alg. 7 calibration and the round-cost table) paid
  when a model first learns; it is timed on its own and left out of the streaming rate.
* ``stream_learn_predict_rows_per_s``: progressive validation over all 48,842 Adult records
  (``predict_one`` then ``learn_one`` per record, one training round per 256 records).
* ``predict_many_*``: 150 trees of depth 6, all 48,842 records, best of 3 calls, from a pandas
  DataFrame (river's ``predict_many`` input) and from a list of dicts; ``scoring_encoded``
  is the forest alone on already-encoded rows.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
from _timing import best_of, emit  # a sibling: benchmarks/ is on sys.path

from dpstream.models import SGBDTClassifier
from dpstream.stream import load_adult


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="one JSON line")
    args = p.parse_args()
    X, y, schema = load_adult("all")
    model = SGBDTClassifier(schema=schema, epsilon=0.5, round_size=256, seed=0)
    t0 = time.perf_counter()
    _ = model.engine      # calibrate now (one-off), not inside the streaming loop
    calibration_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for xi, yi in zip(X, y, strict=True):
        model.predict_one(xi)
        model.learn_one(xi, yi)
    stream_s = time.perf_counter() - t0

    big = SGBDTClassifier(schema=schema, epsilon=0.5, n_trees=150, extra_trees=0, depth=6,
                          seed=0)
    big.learn_many(X[:30000], y[:30000])
    frame = pd.DataFrame(X)
    rows = big._encoder.encode_many(X)
    out = {"records": len(X),
           "calibration_s": round(calibration_s, 2),
           "stream_learn_predict_rows_per_s": round(len(X) / stream_s),
           "stream_rounds": model.engine.rounds,
           "predict_many_dataframe_rows_per_s": round(len(X) / best_of(
               lambda: big.predict_many(frame))),
           "predict_many_dicts_rows_per_s": round(len(X) / best_of(lambda: big.predict_many(X))),
           "scoring_encoded_rows_per_s": round(len(X) / best_of(
               lambda: big.engine.raw_scores(rows))),
           "trees": len(big.engine.forest), "depth": 6}
    emit(out, args.json)


if __name__ == "__main__":
    main()
