"""``dpstream bench``: accuracy at given epsilons by repeated K-fold cross-validation.

Datasets (DESIGN.md §6): ``abalone`` (R², 5-fold CV), ``adult`` (error, 5-fold CV of adult.data
+ adult.test), and the seed 003 §VIII-E scenarios ``abalone-late`` / ``adult-late``: inside each
training fold a subpopulation (Abalone: rings <= 9; Adult: income <= 50K) arrives first and
trains ``n_trees`` rounds; then the rest of the fold arrives and ``n_trees`` more rounds run.
With the individual filter the early records keep training while their budget lasts; without
it they have spent their worst-case budget and only the late batch trains the new trees.

Examples
--------
>>> result = run_bench("sgbdt", "abalone", 0.5, repeats=1, folds=2, seed=0,
...                    params={"n_trees": 20})
>>> result["metric"], result["folds"], result["repeats"]
('r2', 2, 1)
>>> sorted(result) == sorted(RESULT_FIELDS)
True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..models import SGBDTClassifier, SGBDTRegressor
from .datasets import load_abalone, load_adult

__all__ = ["BENCH_DATASETS", "BENCH_MODELS", "RESULT_FIELDS", "fold_indices", "score_model",
           "run_bench"]

RESULT_FIELDS = ("model", "dataset", "epsilon", "delta", "metric", "mean", "std", "repeats",
                 "folds", "seconds", "rows_per_s", "params")


def _abalone():
    X, y, schema = load_abalone()
    return X, y, schema, "r2"


def _adult():
    X, y, schema = load_adult("all")
    return X, y, schema, "error"


BENCH_DATASETS: dict[str, Callable[[], tuple]] = {
    "abalone": _abalone, "adult": _adult, "abalone-late": _abalone, "adult-late": _adult}

# the first population of each late scenario (seed 003 §VIII-E, as in the authors' code)
_EARLY: dict[str, Callable[[Any], bool]] = {
    "abalone-late": lambda label: label <= 9, "adult-late": lambda label: not label}

BENCH_MODELS = {"sgbdt": {"r2": SGBDTRegressor, "error": SGBDTClassifier}}


def fold_indices(n: int, folds: int, *, seed: int) -> list[np.ndarray]:
    """A seeded random partition of ``range(n)`` into ``folds`` parts."""
    if folds < 2 or folds > n:
        raise ValueError(f"folds must lie in [2, {n}], got {folds}")
    return np.array_split(np.random.default_rng(seed).permutation(n), folds)


def _metric(name: str, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    if name == "r2":
        y_true, y_pred = y_true.astype(float), y_pred.astype(float)
        return float(1.0 - ((y_true - y_pred) ** 2).sum() / ((y_true - y_true.mean()) ** 2).sum())
    return float(np.mean(y_true != y_pred))


def score_model(model, X: Sequence, y: Sequence, train: np.ndarray, test: np.ndarray,
                metric: str, *, late: Callable[[Any], bool] | None = None) -> float:
    """Train on ``train`` rows (batch; or early-then-late), return the metric on ``test``."""
    if late is None:
        model.learn_many([X[i] for i in train], [y[i] for i in train])
    else:
        early = np.array([late(y[i]) for i in train], dtype=bool)
        first, second = train[early], train[~early]
        model.learn_many([X[i] for i in first], [y[i] for i in first], rounds=model.n_trees)
        model.learn_many([X[i] for i in second], [y[i] for i in second], rounds=model.n_trees)
    pred = np.asarray(model.predict_many([X[i] for i in test]))
    truth = np.array([y[i] for i in test])
    return _metric(metric, truth, pred)


def run_bench(model: str, dataset: str, epsilon: float, *, repeats: int = 5, folds: int = 5,
              seed: int = 0, params: dict | None = None,
              progress: Callable[[int, int], None] | None = None) -> dict:
    """Mean and std of the metric over ``repeats`` x ``folds`` fits (one JSON result)."""
    if model not in BENCH_MODELS:
        raise ValueError(f"unknown model {model!r}; choose from {sorted(BENCH_MODELS)}")
    if dataset not in BENCH_DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {sorted(BENCH_DATASETS)}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    X, y, schema, metric = BENCH_DATASETS[dataset]()
    cls = BENCH_MODELS[model][metric]
    params = dict(params or {})
    scores, rows, done = [], 0, 0
    t0 = time.perf_counter()
    delta = None
    for r in range(repeats):
        parts = fold_indices(len(y), folds, seed=seed + r)
        for k in range(folds):
            test = parts[k]
            train = np.concatenate([parts[j] for j in range(folds) if j != k])
            est = cls(schema=schema, epsilon=epsilon, seed=seed * 7919 + r * folds + k,
                      **params)
            scores.append(score_model(est, X, y, train, test, metric,
                                      late=_EARLY.get(dataset)))
            delta = est.privacy_report()["delta"]
            rows += len(y)
            done += 1
            if progress is not None:
                progress(done, repeats * folds)
    seconds = time.perf_counter() - t0
    return {"model": model, "dataset": dataset, "epsilon": float(epsilon), "delta": delta,
            "metric": metric, "mean": float(np.mean(scores)), "std": float(np.std(scores)),
            "repeats": repeats, "folds": folds, "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds, 1), "params": params}
