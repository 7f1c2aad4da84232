"""dpstream's random decision forest next to diffprivlib's DP random forest, same folds.

Usage: python benchmarks/random_forest_vs_diffprivlib.py [--datasets adult,synth-f]
       [--epsilons 0.1,0.5,1,2] [--repeats 1] [--json]

Needs the benchmark extra (``pip install -e '.[bench]'``: diffprivlib, scikit-learn < 1.7).
Both models see the same 10-fold splits of the same records; each gets the public schema's
bounds (diffprivlib: ``bounds`` from the numeric domains, [0, 1] for one-hot columns, and the
declared ``classes``), so neither reads a domain from the data. diffprivlib runs with its
defaults otherwise (10 trees). Accuracy, mean and std over all folds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _timing import emit  # a sibling: benchmarks/ is on sys.path

from dpstream.models import RandomDecisionForestClassifier
from dpstream.models.encoding import RecordEncoder
from dpstream.stream.bench import KFOLD_DATASETS, fold_indices
from dpstream.stream.bench.baselines import design_matrix


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="adult,synth-f")
    ap.add_argument("--epsilons", default="0.1,0.5,1,2")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from diffprivlib.models import RandomForestClassifier as DPRandomForest

    rows = []
    for name in args.datasets.split(","):
        X, y, schema = KFOLD_DATASETS[name]()
        enc = RecordEncoder(schema)
        M, lo, hi = design_matrix(schema, X)
        yt = np.array(y, dtype=object)
        classes = list(enc.classes)
        for eps in (float(e) for e in args.epsilons.split(",")):
            ours, theirs, t_ours, t_theirs = [], [], 0.0, 0.0
            for r in range(args.repeats):
                parts = fold_indices(len(y), args.folds, seed=r)
                for k in range(args.folds):
                    test = parts[k]
                    train = np.concatenate([parts[j] for j in range(args.folds) if j != k])
                    t0 = time.perf_counter()
                    model = RandomDecisionForestClassifier(schema=schema, epsilon=eps,
                                                           seed=r * args.folds + k)
                    model.learn_many([X[i] for i in train], [y[i] for i in train])
                    pred = np.asarray(model.predict_many([X[i] for i in test]), dtype=object)
                    ours.append(float(np.mean(pred == yt[test])))
                    t1 = time.perf_counter()
                    dp = DPRandomForest(epsilon=eps, bounds=(lo, hi),
                                        classes=list(range(len(classes))),
                                        random_state=r * args.folds + k)
                    dp.fit(M[train], np.array([classes.index(v) for v in yt[train]]))
                    idx = np.asarray(dp.predict(M[test])).astype(np.intp)
                    pred = np.array(classes, dtype=object)[idx]
                    theirs.append(float(np.mean(pred == yt[test])))
                    t_ours += t1 - t0
                    t_theirs += time.perf_counter() - t1
            rows.append({"dataset": name, "epsilon": eps, "folds": args.folds,
                         "repeats": args.repeats,
                         "dpstream_accuracy": round(float(np.mean(ours)), 4),
                         "dpstream_std": round(float(np.std(ours)), 4),
                         "diffprivlib_accuracy": round(float(np.mean(theirs)), 4),
                         "diffprivlib_std": round(float(np.std(theirs)), 4),
                         "dpstream_s": round(t_ours, 2), "diffprivlib_s": round(t_theirs, 2)})
            if not args.json:
                print(f"{name} eps={eps:g}: dpstream {np.mean(ours):.4f} +- {np.std(ours):.4f}"
                      f" ({t_ours:.1f} s)  diffprivlib {np.mean(theirs):.4f} +- "
                      f"{np.std(theirs):.4f} ({t_theirs:.1f} s)", flush=True)
    if args.json:
        emit({"rows": rows}, as_json=True)


if __name__ == "__main__":
    main()
