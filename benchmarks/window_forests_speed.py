"""Throughput of the random, RDT and greedy window forests on Adult: streaming learn_one +
predict_one, batch predict_many, and what one window costs to train.

Usage: python benchmarks/window_forests_speed.py [--model NAME ...] [--json]

Models: ``random-forest`` (100 trees per window), ``rdt`` (5 trees), ``rdt-sharp`` (5 primary +
200 secondary trees; every fifth record labeled and private, the rest public and unlabeled),
``greedy-forest`` (25 trees); all with their defaults (windows of 20,000, the newest 2 kept).

* ``stream_learn_predict_rows_per_s``: progressive validation (``predict_one`` then
  ``learn_one`` per record) over Adult (48,842 records); window training is inside the timing.
* ``predict_one_rows_per_s``: ``predict_one`` alone, one window's trees voting.
* ``predict_many_rows_per_s``: the same forest on all 48,842 records, from dicts.
* ``window_train_s``: training one closed window of 20,000 records.
"""

from __future__ import annotations

import argparse
import time

from _timing import best_of, emit  # a sibling: benchmarks/ is on sys.path

from dpstream.models import GreedyForestClassifier, RandomDecisionForestClassifier, RDTClassifier
from dpstream.stream import load_adult

MODELS = {"random-forest": RandomDecisionForestClassifier, "rdt": RDTClassifier,
          "rdt-sharp": RDTClassifier, "greedy-forest": GreedyForestClassifier}


def _stream(name: str, X, y):
    """(label, public) per record: rdt-sharp sees 20% private labels, the rest public."""
    if name != "rdt-sharp":
        return [(yi, False) for yi in y]
    return [(yi, False) if i % 5 == 0 else (None, True) for i, yi in enumerate(y)]


def measure(name: str, X, y, schema) -> dict:
    cls, stream = MODELS[name], _stream(name, X, y)
    n = len(X)
    model = cls(schema=schema, epsilon=1.0, seed=0)
    t0 = time.perf_counter()
    for xi, (yi, pub) in zip(X, stream, strict=True):
        model.predict_one(xi)
        model.learn_one(xi, yi, public=pub)
    stream_s = time.perf_counter() - t0

    one = cls(schema=schema, epsilon=1.0, seed=1)
    for xi, (yi, pub) in zip(X[:19_999], stream[:19_999], strict=True):
        one.learn_one(xi, yi, public=pub)        # buffered: the next record closes the window
    yi, pub = stream[19_999]
    train_s = best_of(lambda: one.learn_one(X[19_999], yi, public=pub), repeats=1)
    sample = X[20_000:21_000]
    return {"records": n, "stream_learn_predict_rows_per_s": round(n / stream_s),
            "trees_voting_at_the_end": model.n_trees_kept,
            "predict_one_rows_per_s": round(len(sample) / best_of(
                lambda: [one.predict_one(x) for x in sample])),
            "predict_many_rows_per_s": round(n / best_of(lambda: one.predict_many(X))),
            "window_train_s": round(train_s, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="*", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--json", action="store_true", help="(the output is JSON either way)")
    args = parser.parse_args()
    X, y, schema = load_adult("all")
    emit({name: measure(name, X, y, schema) for name in args.model}, args.json)


if __name__ == "__main__":
    main()
