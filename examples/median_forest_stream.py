"""Window forests on a stream where most records arrive without a label (Huang et al., 2023,
SSPE-2).

Adult records arrive one by one; only every fifth carries its label. The median forest cuts the
stream into tumbling windows of 5,000 records, grows each window's trees from every record's
features (public in the label-only setting) and fills the leaves with the labels under Laplace
noise. Each record is predicted before it is learned (progressive validation), and the newest
three windows vote.

Run: python examples/median_forest_stream.py
"""

from __future__ import annotations

import argparse

from dpstream.models import MedianForestClassifier
from dpstream.stream import load_adult


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    X, y, schema = load_adult("all")
    model = MedianForestClassifier(schema=schema, epsilon=1.0, privacy="labels_only",
                                   window_size=5_000, max_windows=3, seed=42)

    correct = scored = 0
    for i, (xi, yi) in enumerate(zip(X, y, strict=True)):
        if model.windows_closed:               # score once the first window has trained
            correct += model.predict_one(xi) == yi
            scored += 1
        model.learn_one(xi, yi if i % 5 == 0 else None)     # four in five records unlabeled
        if (i + 1) % 10_000 == 0:
            print(f"{i + 1:>6} records, {model.windows_closed} windows, "
                  f"progressive accuracy {correct / max(scored, 1):.4f}")

    report = model.privacy_report()
    print(f"{report['protects']} protected: epsilon {report['epsilon']} per record "
          f"(budget {report['epsilon_budget']}, delta {report['delta']})")
    print(f"{report['trees']} trees from the newest {report['windows_kept']} windows; "
          f"{report['records_pending']} records wait in the open window")
    for w in report["windows"]:
        print(f"  {w['algorithm']}: {w['records']} records, {w['labeled']} labeled, "
              f"depth {w['depth']}")


if __name__ == "__main__":
    main()
