"""S-GBDT on one of river's drifting streams: the model notices the change under DP and adapts.

River's Agrawal generator switches from classification function 4 to function 0 after 10,000
records. The model's prequential errors are released with DP over windows; a Page-Hinkley test
on the noisy rates starts a new generation of trees (docs/drift.md). Integer or string feature
keys both work; the schema declares the public domains.

Run: python examples/drift_stream.py
"""

from __future__ import annotations

import argparse

from river import metrics
from river.datasets import synth

from dpstream.models import SGBDTClassifier

SCHEMA = {"features": {
    "salary": {"type": "numeric", "min": 20_000, "max": 150_000},
    "commission": {"type": "numeric", "min": 0, "max": 85_000},
    "age": {"type": "numeric", "min": 20, "max": 80},
    "elevel": {"type": "numeric", "min": 0, "max": 4},
    "car": {"type": "numeric", "min": 1, "max": 20},
    "zipcode": {"type": "numeric", "min": 0, "max": 8},
    "hvalue": {"type": "numeric", "min": 0, "max": 1_200_000},
    "hyears": {"type": "numeric", "min": 1, "max": 30},
    "loan": {"type": "numeric", "min": 0, "max": 500_000}},
    "target": {"type": "binary", "values": [0, 1]}}


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    stream = synth.ConceptDriftStream(stream=synth.Agrawal(classification_function=4, seed=5),
                                      drift_stream=synth.Agrawal(classification_function=0, seed=6),
                                      position=10_000, width=500, seed=7)
    model = SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=3)   # drift=True is the default
    block = metrics.Accuracy()
    for i, (x, y) in enumerate(stream.take(20_000), start=1):
        block.update(y, model.predict_one(x))
        model.learn_one(x, y)
        if i % 2_000 == 0:
            print(f"records {i - 1_999:>6,}-{i:>6,}: accuracy {block.get():.3f}  "
                  f"(generation {model.privacy_report()['drift']['generation']})")
            block = metrics.Accuracy()

    report = model.privacy_report()
    drift = report["drift"]
    changes = [r * drift["window"] for r in drift["change_at_release"]]
    print(f"changes detected at records {changes}; "
          f"{drift['records_dropped']:,} old-concept records left the pool")
    print(f"epsilon {report['epsilon']:.3f} = init {report['epsilon_init']:.3f} + drift signal "
          f"{report['epsilon_drift']:.3f} + trees {report['epsilon_trees']:.3f} "
          f"(budget {report['epsilon_budget']}) at delta {report['delta']:g}")


if __name__ == "__main__":
    main()
