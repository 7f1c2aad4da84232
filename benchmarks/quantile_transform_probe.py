"""Probe (issue 51): how much would a DP quantile transform of the features help on Elec2?

Not a product feature: it measures the room for one (docs/drift.md, "A real drifting stream").
A Laplace histogram (``--cells`` cells of [0, 1], scale ``F / --epsilon-grid``) of each feature
over the first ``--first`` records is released; every record's features are then replaced by the
noisy histogram's CDF at their value (a monotone map), and each model learns Elec2 in time
order at epsilon 1, prequential. The release is **not** charged to the models here (they
still spend the full epsilon on the first records): a built version must take
``--epsilon-grid`` out of those records' budgets, so the figures are an upper bound.

Usage::

    python benchmarks/quantile_transform_probe.py sgbdt median-forest --seed 0
"""

from __future__ import annotations

import argparse

import numpy as np

from dpstream.stream import load_elec2
from dpstream.stream.bench.protocols import BENCH_MODELS

#: the streaming classifiers, by the benchmark's names
MODELS = {name: kinds.get("accuracy", kinds.get("error")) for name, kinds in BENCH_MODELS.items()
          if name in ("sgbdt", "median-forest", "random-forest", "rdt", "greedy-forest")}


def noisy_cdf_transform(A: np.ndarray, first: int, cells: int, epsilon: float,
                        rng: np.random.Generator) -> np.ndarray:
    """Each column of ``A`` (values in [0, 1]) mapped through the CDF of a Laplace histogram
    of its first ``first`` values (each record in one cell per column: L1 sensitivity = the
    number of columns)."""
    out = np.empty_like(A)
    scale = A.shape[1] / epsilon
    for j in range(A.shape[1]):
        h, edges = np.histogram(A[:first, j], bins=cells, range=(0.0, 1.0))
        h = np.maximum(h + rng.laplace(0.0, scale, cells), 0.0)
        cdf = np.concatenate([[0.0], np.cumsum(h)])
        cdf += np.linspace(0.0, 1e-6 * cdf[-1] + 1e-9, cells + 1)   # strictly increasing
        out[:, j] = np.interp(A[:, j], edges, cdf / cdf[-1])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", choices=sorted(MODELS))
    ap.add_argument("--first", type=int, default=2000)
    ap.add_argument("--cells", type=int, default=256)
    ap.add_argument("--epsilon-grid", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    X, y, schema = load_elec2()
    keys = list(X[0])
    A = np.array([[x[k] for k in keys] for x in X])
    T = noisy_cdf_transform(A, args.first, args.cells, args.epsilon_grid,
                            np.random.default_rng(args.seed))
    for name in args.models:
        out = []
        for label, data in (("raw", A), ("transformed", T)):
            model = MODELS[name](schema=schema, epsilon=1.0, seed=args.seed)
            right = 0
            for row, label_y in zip(data.tolist(), y, strict=True):
                x = dict(zip(keys, row, strict=True))
                right += model.predict_one(x) == label_y
                model.learn_one(x, label_y)
            out.append(f"{label} {right / len(y):.3f}")
        print(f"{name}: " + ", ".join(out), flush=True)


if __name__ == "__main__":
    main()
