"""S-GBDT in a river pipeline: progressive validation on a stream of Adult records.

Run: python examples/sgbdt_stream.py
"""

from __future__ import annotations

import argparse
import itertools

from river import evaluate, metrics

from dpstream.models import SGBDTClassifier
from dpstream.stream import load_adult


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    X, y, schema = load_adult("train")
    model = SGBDTClassifier(schema=schema, epsilon=1.0, round_size=200, seed=42)

    # predict each record before learning it; one DP tree per 200 arrivals
    stream = itertools.islice(zip(X, y, strict=True), 20_000)
    evaluate.progressive_val_score(stream, model, metrics.Accuracy(), print_every=5_000)
    report = model.privacy_report()
    print(f"epsilon spent {report['epsilon']:.3f} (budget {report['epsilon_budget']}) at delta "
          f"{report['delta']:g}; {report['rounds']} trees; records active "
          f"{report['records_active']}, exhausted {report['records_exhausted']}")
    print("per-record spend (fraction of the filter's bound):", report["spend_fraction"])


if __name__ == "__main__":
    main()
