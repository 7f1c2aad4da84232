"""Ablations behind the median forest's two post-paper defaults (docs/median_forest.md).

Usage: python benchmarks/median_forest_ablation.py [--repeats R] [--json]

* ``leaf_size`` in {5, 10 (the paper's stopping rule), 20} on every Huang et al. (2023) dataset;
* voting: the mean of the leaves' class distributions (default) against the paper's sum of raw
  noisy counts and one majority vote per tree, on Adult;
* the non-private reference of the paper's Table 1: scikit-learn's random forest (100 trees) on
  the same splits.

Huang et al.'s protocol (random 90/10 split, accuracy, epsilon = 2), R repeats (default 20).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from dpstream.models import MedianForestClassifier
from dpstream.models.windows.window_forest import leaf_proba
from dpstream.stream.bench import HOLDOUT_DATASETS, run_bench, score_model


class _Voting(MedianForestClassifier):
    """The same forest with another (post-processing) vote."""

    vote = "proba"

    def _serve(self):
        forest, table = super()._serve()
        trees = [tr for win in self._windows for tr in win.trees]
        stride = forest.max_nodes
        table = np.zeros_like(table)
        for i, tr in enumerate(trees):
            counts = tr.counts
            if self.vote == "majority":
                counts = np.eye(counts.shape[1])[counts.argmax(axis=1)] * \
                    (leaf_proba(counts).sum(axis=1, keepdims=True) > 0)
            table[i * stride:i * stride + counts.shape[0]] = counts
        return forest, table


def _voting(vote: str, repeats: int) -> float:
    X, y, schema = HOLDOUT_DATASETS["adult"]()
    scores = []
    for r in range(repeats):
        rng = np.random.default_rng(r)
        order = rng.permutation(len(y))
        cut = int(round(0.9 * len(y)))
        model = _Voting(schema=schema, epsilon=2.0, seed=r)
        model.vote = vote
        scores.append(score_model(model, X, y, order[:cut], order[cut:], "accuracy"))
    return float(np.mean(scores))


def _random_forest(name: str, repeats: int) -> float:
    from sklearn.ensemble import RandomForestClassifier

    from dpstream.models.encoding import RecordEncoder

    X, y, schema = HOLDOUT_DATASETS[name]()
    Xe = RecordEncoder(schema).encode_many(X)
    ya = np.array(y, dtype=object).astype(str)
    scores = []
    for r in range(repeats):
        order = np.random.default_rng(r).permutation(len(y))
        cut = int(round(0.9 * len(y)))
        rf = RandomForestClassifier(n_estimators=100, random_state=r, n_jobs=-1)
        rf.fit(Xe[order[:cut]], ya[order[:cut]])
        scores.append(float(np.mean(rf.predict(Xe[order[cut:]]) == ya[order[cut:]])))
    return float(np.mean(scores))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    out: dict = {"repeats": a.repeats, "leaf_size": {}, "voting_adult": {}}
    for name in HOLDOUT_DATASETS:
        out["leaf_size"][name] = {
            size: round(run_bench("median-forest", name, 2.0, repeats=a.repeats, seed=0,
                                  params={"leaf_size": size})["mean"], 4)
            for size in (5, 10, 20)}
    out["random_forest_reference"] = {name: round(_random_forest(name, a.repeats), 4)
                                      for name in HOLDOUT_DATASETS}
    out["voting_adult"]["distributions (default)"] = round(
        run_bench("median-forest", "adult", 2.0, repeats=a.repeats, seed=0)["mean"], 4)
    for vote in ("counts", "majority"):
        out["voting_adult"][vote] = round(_voting(vote, a.repeats), 4)
    if a.json:
        print(json.dumps(out))
    else:
        print(f"accuracy at epsilon 2, {a.repeats} repeats of a 90/10 split")
        for name, row in out["leaf_size"].items():
            print(f"  {name:>7}  " + "  ".join(f"leaf_size {k}: {v:.4f}" for k, v in row.items()))
        print("  non-private random forest (100 trees): " + "  ".join(
            f"{k} {v:.4f}" for k, v in out["random_forest_reference"].items()))
        for vote, acc in out["voting_adult"].items():
            print(f"  adult, vote by {vote}: {acc:.4f}")


if __name__ == "__main__":
    main()
