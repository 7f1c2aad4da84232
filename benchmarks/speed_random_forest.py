"""Random-decision-forest throughput on Adult: streaming learn_one + predict_one, batch
predict_many, and what one window costs to train.

Usage: python benchmarks/speed_random_forest.py [--json]

* ``stream_learn_predict_rows_per_s``: progressive validation (``predict_one`` then
  ``learn_one`` per record) over Adult (48,842 records) with the defaults (windows of 20,000,
  100 trees each, the newest 2 windows kept); window training is inside the timing.
* ``predict_one_rows_per_s``: ``predict_one`` alone with 100 and with 200 trees voting.
* ``predict_many_rows_per_s``: the same two forests on all 48,842 records, from dicts.
* ``window_train_s``: training one closed window of 20,000 records (100 trees).
"""

from __future__ import annotations

import time

from _timing import best_of, emit  # a sibling: benchmarks/ is on sys.path

from dpstream.models import RandomDecisionForestClassifier
from dpstream.stream import load_adult


def main() -> None:
    X, y, schema = load_adult("all")
    n = len(X)
    model = RandomDecisionForestClassifier(schema=schema, epsilon=1.0, seed=0)
    t0 = time.perf_counter()
    for xi, yi in zip(X, y, strict=True):
        model.predict_one(xi)
        model.learn_one(xi, yi)
    stream_s = time.perf_counter() - t0

    one = RandomDecisionForestClassifier(schema=schema, epsilon=1.0, seed=1)
    for xi, yi in zip(X[:19_999], y[:19_999], strict=True):
        one.learn_one(xi, yi)                   # buffered: the next record closes the window
    train_s = best_of(lambda: one.learn_one(X[19_999], y[19_999]), repeats=1)
    sample = X[20_000:22_000]
    per_one = {}
    for label, forest in (("100_trees", one), ("200_trees", model)):
        per_one[label] = round(len(sample) / best_of(
            lambda f=forest: [f.predict_one(x) for x in sample]))
    out = {"records": n, "stream_learn_predict_rows_per_s": round(n / stream_s),
           "trees_voting_at_the_end": model.n_trees_kept,
           "predict_one_rows_per_s": per_one,
           "predict_many_rows_per_s": {
               "100_trees": round(n / best_of(lambda: one.predict_many(X))),
               "200_trees": round(n / best_of(lambda: model.predict_many(X)))},
           "window_train_s": round(train_s, 3)}
    emit(out)


if __name__ == "__main__":
    main()
