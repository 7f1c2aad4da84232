"""Median-forest throughput on Adult: streaming learn_one + predict_one, batch predict_many,
and what one window costs to train.

Usage: python benchmarks/median_forest_speed.py [--json]

* ``stream_learn_predict_rows_per_s``: progressive validation (``predict_one`` then
  ``learn_one`` per record) over Adult replayed twice (97,684 records) with the defaults
  (windows of 10,000, 10 trees each, the newest 5 windows kept), so that most of the run
  predicts with the full 50 trees; window training is inside the timing.
* ``stream_steady_rows_per_s``: the same loop over the second pass only (50 trees throughout).
* ``predict_many_*``: the 50 trees on all 48,842 records, best of 3, from a list of dicts.
* ``window_train_s``: training one closed window of 10,000 records (SPE, 10 trees), and of a
  10,000-record window with 20% labels under PTE (20 trees, exact medians).
"""

from __future__ import annotations

import argparse
import time

from _timing import best_of, emit  # a sibling: benchmarks/ is on sys.path

from dpstream.models import MedianForestClassifier
from dpstream.stream import load_adult


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="one JSON line")
    args = p.parse_args()
    X, y, schema = load_adult("all")
    model = MedianForestClassifier(schema=schema, epsilon=2.0, seed=0)
    n = len(X)
    t0 = time.perf_counter()
    for xi, yi in zip(X, y, strict=True):
        model.predict_one(xi)
        model.learn_one(xi, yi)
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for xi, yi in zip(X, y, strict=True):
        model.predict_one(xi)
        model.learn_one(xi, yi)
    second_s = time.perf_counter() - t0
    trees = model.n_trees_kept

    spe = MedianForestClassifier(schema=schema, epsilon=2.0, seed=1)
    pte = MedianForestClassifier(schema=schema, epsilon=2.0, privacy="labels_only",
                                 transductive=True, seed=1)
    for xi, yi in zip(X[:9_999], y[:9_999], strict=True):
        spe.learn_one(xi, yi)                   # buffered: the next record closes the window
    spe_s = best_of(lambda: spe.learn_one(X[9_999], y[9_999]), repeats=1)
    assert spe.windows_closed == 1
    labels = [v if i % 5 == 0 else None for i, v in enumerate(y[:10_000])]
    pte_s = best_of(lambda: pte.learn_many(X[:10_000], labels), repeats=1)
    out = {"records": 2 * n,
           "stream_learn_predict_rows_per_s": round(2 * n / (first_s + second_s)),
           "stream_steady_rows_per_s": round(n / second_s),
           "trees_voting_at_the_end": trees,
           "predict_many_dicts_rows_per_s": round(n / best_of(lambda: model.predict_many(X))),
           "window_train_s": {"spe_10k": round(spe_s, 3), "pte_10k_20pct_labels": round(pte_s, 3)}}
    emit(out, args.json)


if __name__ == "__main__":
    main()
