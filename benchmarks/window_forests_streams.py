"""Window forests on river's synthetic streams: the issue-21 figures and the ablations behind
the stream defaults (docs/median_forest.md).

For one model and one or more parameter sets ("arms", JSON), prints per arm the mean over
model seeds of: prequential accuracy on rows 2k-5k and 15k-30k of stationary Agrawal
functions 1-4 (river seed 1, 30,000 rows), the last-5k accuracy on Agrawal 4 -> 0 (river
seeds 21/22/23, drift at 15,000, width 1,000), and with ``--others`` the same early / second
half on SEA (variant 0, noise 0.1) and a 10-feature Hyperplane (seed 5). epsilon = 1 unless
an arm says otherwise; ``predict_one`` before ``learn_one`` on every row.

Usage::

    python benchmarks/window_forests_streams.py median-forest \
        '{"attributes": "uniform", "min_tree_records": null, "split_share": 0.5}' '{}' \
        --seeds 0 1 --others
"""

from __future__ import annotations

import argparse
import json

from river.datasets import synth

from dpstream.models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
)

MODELS = {"median-forest": MedianForestClassifier, "random-forest": RandomDecisionForestClassifier,
          "rdt": RDTClassifier, "greedy-forest": GreedyForestClassifier}


def _num(lo: float, hi: float) -> dict:
    return {"type": "numeric", "min": lo, "max": hi}


# the issue check's schema: every Agrawal attribute numeric over the generator's ranges
AGRAWAL = {"features": {
    "salary": _num(20_000, 150_000), "commission": _num(0, 85_000), "age": _num(20, 80),
    "elevel": _num(0, 4), "car": _num(1, 20), "zipcode": _num(0, 8),
    "hvalue": _num(0, 1_200_000), "hyears": _num(1, 30), "loan": _num(0, 500_000)},
    "target": {"type": "binary", "values": [0, 1]}}


def prequential(model, rows) -> tuple[float, float, float]:
    """Accuracy on rows 2k-5k, on rows 15k.., on the last 5k."""
    hits = [0, 0, 0]
    n = len(rows)
    for i, (x, y) in enumerate(rows):
        ok = model.predict_one(x) == y
        hits[0] += ok and 2000 <= i < 5000
        hits[1] += ok and i >= 15000
        hits[2] += ok and i >= n - 5000
        model.learn_one(x, y)
    return hits[0] / 3000, hits[1] / (n - 15000), hits[2] / 5000


def run_arm(cls, params: dict, seeds: list[int], others: bool) -> dict:
    eps = params.pop("epsilon", 1.0)
    stat = [list(synth.Agrawal(classification_function=f, seed=1).take(30000))
            for f in (1, 2, 3, 4)]
    drift = list(synth.ConceptDriftStream(
        stream=synth.Agrawal(classification_function=4, seed=21),
        drift_stream=synth.Agrawal(classification_function=0, seed=22),
        position=15000, width=1000, seed=23).take(30000))
    out = {"early": 0.0, "second": 0.0, "drift": 0.0}
    for s in seeds:
        res = [prequential(cls(schema=AGRAWAL, epsilon=eps, seed=s, **params), r) for r in stat]
        out["early"] += sum(r[0] for r in res) / 4 / len(seeds)
        out["second"] += sum(r[1] for r in res) / 4 / len(seeds)
        out["drift"] += prequential(cls(schema=AGRAWAL, epsilon=eps, seed=s, **params),
                                    drift)[2] / len(seeds)
    if others:
        for name, gen, hi in (
                ("sea", synth.SEA(variant=0, seed=5, noise=0.1), 10.0),
                ("hyperplane", synth.Hyperplane(seed=5, n_features=10, n_drift_features=0,
                                                noise_percentage=0.05), 1.0)):
            rows = [(x, int(y)) for x, y in gen.take(30000)]
            schema = {"features": {k: _num(0.0, hi) for k in rows[0][0]},
                      "target": {"type": "binary", "values": [0, 1]}}
            for s in seeds:
                e, sec, _ = prequential(cls(schema=schema, epsilon=eps, seed=s, **params), rows)
                out[f"{name}_early"] = out.get(f"{name}_early", 0.0) + e / len(seeds)
                out[f"{name}_second"] = out.get(f"{name}_second", 0.0) + sec / len(seeds)
    return {k: round(v, 3) for k, v in out.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("arms", nargs="*", default=["{}"], help="parameter sets as JSON")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--others", action="store_true", help="also SEA and Hyperplane")
    a = p.parse_args()
    for arm in a.arms:
        params = json.loads(arm)
        res = run_arm(MODELS[a.model], dict(params), a.seeds, a.others)
        print(json.dumps({"model": a.model, "params": params, "seeds": a.seeds, **res}),
              flush=True)


if __name__ == "__main__":
    main()
