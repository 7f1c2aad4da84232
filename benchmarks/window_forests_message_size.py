"""Size of one window on the model topic, per window forest (docs/benchmark_notes.md, "Buckets").

Trains each window forest on one 20,000-record Adult window (epsilon = 1, defaults, seed 0),
exports it as a group member publishes it
(:func:`~dpstream.models.windows.window_exchange.export_window`, the model topic's codec) and
prints one JSON line per model: its size and encoding time.

Usage::

    python benchmarks/window_forests_message_size.py
"""

from __future__ import annotations

import argparse
import json
import time

from dpstream.connectors.model_topic import encode_message
from dpstream.models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
)
from dpstream.models.windows.window_exchange import export_window
from dpstream.stream import load_adult


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    X, y, schema = load_adult("train")
    for cls in (MedianForestClassifier, RandomDecisionForestClassifier, RDTClassifier,
                GreedyForestClassifier):
        model = cls(schema=schema, epsilon=1.0, window_size=20_000, warmup=None, drift=False,
                    seed=0)
        model.learn_many(X[:20_000], y[:20_000])
        start = time.perf_counter()
        value = encode_message(export_window(model, 0, member="m"))
        print(json.dumps({"model": cls.__name__, "mib": round(len(value) / 2**20, 2),
                          "encode_ms": round(1000 * (time.perf_counter() - start), 1)}))


if __name__ == "__main__":
    main()
