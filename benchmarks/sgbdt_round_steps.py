"""An S-GBDT round's pool-wide steps: the numpy forms against the compiled ones in use.

Usage: python benchmarks/sgbdt_round_steps.py [--records N] [--repeats R] [--json]

Trains S-GBDT on ``--records`` Adult records until the pool is full and every round retires a
tree, begins one round and times its steps ``leaf``, ``add``, ``retire`` and ``cost`` both
ways, alternating (best of ``--repeats`` calls). Each pair is checked to give the same bits.
Prints the pool size, the sampled records and per step ``numpy_ms`` and ``compiled_ms``. The
setup and each step: docs/benchmark_notes.md#s-gbdt-round-steps-script.
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import best_of, emit  # a sibling: benchmarks/ is on sys.path

from dpstream.models import SGBDTClassifier
from dpstream.models.boosting.round_kernels import leaf_counts_sums
from dpstream.stream import load_adult


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=110_000, help="Adult records (cycled)")
    p.add_argument("--repeats", type=int, default=30, help="calls per timing (best of)")
    p.add_argument("--json", action="store_true", help="one JSON line")
    args = p.parse_args()
    n, repeats = args.records, args.repeats
    X, y, schema = load_adult("all")
    reps = -(-n // len(X))
    model = SGBDTClassifier(schema=schema, epsilon=1.0, seed=0, n_trees=100, extra_trees=50,
                            max_trees=150)
    model.learn_many((X * reps)[:n], (y * reps)[:n])
    e, f = model.engine, model.engine.forest
    prep = e.begin_round()
    tree = e.draw_tree(prep)
    nodes, leaves = e.pool_nodes(tree, prep), e.leaves_of(tree)
    first, n_leaves = int(leaves[0]), leaves.size
    sampled, g = prep["sampled"], prep["g"]
    oldest = f.value[:f.max_nodes]

    def numpy_leaf():
        leaf = nodes[sampled] - first
        return (np.bincount(leaf, minlength=n_leaves).astype(np.float64),
                np.bincount(leaf, weights=g[sampled], minlength=n_leaves))

    def compiled_leaf():
        return leaf_counts_sums(nodes, first, sampled, g, n_leaves)

    def numpy_add():
        s = e.score.copy()
        s += oldest[nodes]
        return s

    def compiled_add():
        s = e.score.copy()
        f.add_tree_values(s, 0, nodes)
        return s

    def numpy_retire():
        s = e.score.copy()
        s -= f.predict_tree(0, e.X)
        return s

    def compiled_retire():
        s = e.score.copy()
        f.add_tree_values(s, 0, f.apply(0, e.X), -1.0)
        return s

    pairs = {"leaf": (numpy_leaf, compiled_leaf), "add": (numpy_add, compiled_add),
             "retire": (numpy_retire, compiled_retire),
             "cost": (lambda: e.costs.cost(np.abs(g)), lambda: e.costs.cost(g))}
    out: dict = {"pool": len(e), "sampled": int(sampled.sum()), "trees": len(f)}
    for name, (a, b) in pairs.items():
        ra, rb = a(), b()
        ra, rb = (r if isinstance(r, tuple) else (r,) for r in (ra, rb))
        if not all(np.array_equal(u, v) for u, v in zip(ra, rb, strict=True)):
            raise AssertionError(f"{name}: the compiled step differs from the numpy form")
        ta, tb = [], []
        for _ in range(3):
            ta.append(best_of(a, repeats))
            tb.append(best_of(b, repeats))
        out[f"{name}_numpy_ms"] = round(min(ta) * 1e3, 3)
        out[f"{name}_compiled_ms"] = round(min(tb) * 1e3, 3)
    emit(out, args.json)


if __name__ == "__main__":
    main()
