"""S-GBDT learn + predict throughput on the Adult stream: one record at a time and in batches.

Usage: python benchmarks/sgbdt_learn_predict_speed.py [--repeats N] [--json]

* ``stream_rows_per_s``: ``SGBDTClassifier(schema, epsilon=0.5, seed=0)`` over the 32,561
  Adult training records, ``predict_one`` then ``learn_one`` per record, a fresh model per pass;
* ``batch_rows_per_s``: the stream service's path on the same records: chunks of 2,000,
  each ``predict_many`` before ``learn_stream``.

Each figure is the median of ``--repeats`` passes (default 3), the two kinds interleaved.
What each pass pays, and the figures measured:
docs/benchmark_notes.md#s-gbdt-learn-and-predict-speed-script.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _timing import emit  # a sibling: benchmarks/ is on sys.path

from dpstream.accounting import accountant
from dpstream.models import SGBDTClassifier
from dpstream.stream import load_adult

CHUNK = 2000


def _fresh_calibration() -> None:
    """Forget the calibrations computed so far (each pass pays its own, as the check's)."""
    accountant._calibrate_sgbdt.cache_clear()
    accountant._round_costs.cache_clear()


def stream_pass(X: list, y: list, schema) -> float:
    _fresh_calibration()
    model = SGBDTClassifier(schema=schema, epsilon=0.5, seed=0)
    t0 = time.perf_counter()
    for xi, yi in zip(X, y, strict=True):
        model.predict_one(xi)
        model.learn_one(xi, yi)
    return len(X) / (time.perf_counter() - t0)


def batch_pass(X: list, y: list, schema) -> float:
    _fresh_calibration()
    model = SGBDTClassifier(schema=schema, epsilon=0.5, seed=0)
    t0 = time.perf_counter()
    for s in range(0, len(X), CHUNK):
        model.predict_many(X[s:s + CHUNK])
        model.learn_stream(X[s:s + CHUNK], y[s:s + CHUNK])
    return len(X) / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="passes of each kind (median shown)")
    p.add_argument("--json", action="store_true", help="one JSON line")
    args = p.parse_args()
    repeats = args.repeats
    X, y, schema = load_adult("train")
    warm = SGBDTClassifier(schema=schema, epsilon=1.0, seed=1)   # numba's one-off start-up
    for xi, yi in zip(X[:3000], y[:3000], strict=True):
        warm.predict_one(xi)
        warm.learn_one(xi, yi)
    warm.predict_many(X[:500])
    warm.learn_stream(X[3000:3500], y[3000:3500])
    stream, batch = [], []
    for _ in range(repeats):
        stream.append(stream_pass(X, y, schema))
        batch.append(batch_pass(X, y, schema))
    emit({"records": len(X), "repeats": repeats,
          "stream_rows_per_s": round(statistics.median(stream)),
          "batch_rows_per_s": round(statistics.median(batch)),
          "stream_all": [round(r) for r in stream], "batch_all": [round(r) for r in batch]},
         args.json)


if __name__ == "__main__":
    main()
