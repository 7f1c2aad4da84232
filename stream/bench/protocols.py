"""``dpstream bench``: a model's accuracy at given epsilons, under the protocol of its paper.

:func:`run_bench` runs a model of :data:`BENCH_MODELS` on a dataset of :data:`BENCH_DATASETS`
under its paper's protocol (:func:`protocol_of`; splits from :func:`protocol_splits`): repeated
K-fold CV for S-GBDT (Kirschte et al.) and its late-arrival scenarios, the random 90/10 holdout
for the median forest and RDT, 10 x 10-fold CV for the random and greedy forests, and the
accuracy after the drift, prequentially, on ``agrawal-drift`` (:func:`run_drift`). A result
carries the :data:`RESULT_FIELDS`.

The protocols, their datasets and the late-arrival scenarios:
docs/bench_internals.md#paper-protocols-of-dpstream-bench.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from ...accounting import run_seed
from ...models import (
    DPBoostClassifier,
    DPBoostRegressor,
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
    SGBDTClassifier,
    SGBDTRegressor,
)
from ...models.windows.window_forest import WindowForestBase
from ..datasets import load_abalone, load_adult
from .configs import sgbdt_config
from .scenarios import (
    SYNTH_TABLE,
    load_agrawal_drift,
    load_iris,
    load_synth,
    load_synthetic,
    load_wine,
)

__all__ = ["BENCH_DATASETS", "BENCH_MODELS", "RESULT_FIELDS", "best_threshold_error",
           "fold_indices", "late_batches", "score_model",
           "run_bench", "run_drift", "protocol_of", "protocol_splits",
           "load_protocol_data", "Split"]

RESULT_FIELDS = ("model", "dataset", "epsilon", "delta", "metric", "mean", "std", "repeats",
                 "folds", "seconds", "rows_per_s", "params", "protocol", "labeled_fraction")


def _abalone():
    X, y, schema = load_abalone()
    return X, y, schema, "r2"


def _adult():
    X, y, schema = load_adult("all")
    return X, y, schema, "error"


BENCH_DATASETS: dict[str, Callable[[], tuple]] = {
    "abalone": _abalone, "adult": _adult, "abalone-late": _abalone, "adult-late": _adult}

# Huang et al.'s datasets (accuracy, 90/10 holdout); Adult is adult.data as in its Table 1
HOLDOUT_DATASETS: dict[str, Callable[[], tuple]] = {
    "adult": lambda: load_adult("train"), "iris": load_iris, "wine": load_wine,
    "syn5d": lambda: load_synthetic(5), "syn10d": lambda: load_synthetic(10),
    "syn15d": lambda: load_synthetic(15)}

# Fletcher & Islam's datasets (accuracy, 10 x 10-fold CV): Huang et al.'s plus SynthA .. SynthG
KFOLD_DATASETS: dict[str, Callable[[], tuple]] = {
    **HOLDOUT_DATASETS,
    **{f"synth-{k}": (lambda k=k: load_synth(k)) for k in SYNTH_TABLE}}

STREAM_DATASETS = ("agrawal-drift",)

# the first population of each late scenario (Kirschte et al. 2023, §VIII-E, as in the authors'
# code: Abalone's scaled label <= -0.36 is rings <= 9 on the 1..29 range; Adult's label != 1)
_EARLY: dict[str, Callable[[Any], bool]] = {
    "abalone-late": lambda label: label <= 9, "adult-late": lambda label: not label}

BENCH_MODELS: dict[str, dict[str, type]] = {
    # (accuracy: the multi-class tables, Iris and Wine, beside the median forest's)
    "sgbdt": {"r2": SGBDTRegressor, "error": SGBDTClassifier, "accuracy": SGBDTClassifier},
    "dpboost": {"r2": DPBoostRegressor, "error": DPBoostClassifier},
    "median-forest": {"accuracy": MedianForestClassifier},
    "random-forest": {"accuracy": RandomDecisionForestClassifier},
    "rdt": {"accuracy": RDTClassifier},
    "rdt-sharp": {"accuracy": RDTClassifier},
    "greedy-forest": {"accuracy": GreedyForestClassifier},
}
#: how each model is evaluated (its paper's protocol)
PROTOCOL = {"sgbdt": "cv", "dpboost": "cv", "median-forest": "holdout", "random-forest": "kfold",
            "rdt": "holdout", "rdt-sharp": "holdout", "greedy-forest": "kfold"}
#: the multi-class datasets S-GBDT runs on the holdout protocol (issue 52)
SGBDT_HOLDOUT = ("iris", "wine")
#: models whose unlabeled training rows are handed over as public (Jagannathan et al.'s D_npriv)
PUBLIC_UNLABELED = {"rdt-sharp"}
DEFAULT_REPEATS = {"cv": 5, "holdout": 50, "prequential": 3, "kfold": 10}
DEFAULT_FOLDS = {"cv": 5, "kfold": 10}

#: window-forest settings of the drift scenario (overridable with params)
DRIFT_PARAMS = {"window_size": 5_000, "max_windows": 2}
# the papers' batch protocols train with learn_many and stay the paper's algorithm: no drift
# signal (stream-only: it would reserve budget batch training never uses), the paper's random
# splits, and the classifier's batch-tuned learning rate (its default, 0.3, is tuned for
# stream rounds; docs/sgbdt.md). Keyed by model name, then by estimator class.
#: the late phase of the no-filter arm: the authors' ``add_trees`` in every released
#: no-filter Abalone row (docs/sgbdt.md, "Differences from the authors' code", row 10)
NO_FILTER_LATE_ROUNDS = 25
BATCH_DEFAULTS = {"sgbdt": {"drift": False, "split_levels": 0},
                  "SGBDTClassifier": {"learning_rate": 0.5},
                  # the regressor's batch-tuned values (its defaults are tuned for streams)
                  "SGBDTRegressor": {"n_trees": 150, "init_share": 0.1},
                  # Kirschte et al. tuned DPBoost per epsilon: lambda grows as 1/epsilon
                  # (Laplace leaf scale g*/((1 + lambda) eps_leaf) held about fixed), big
                  # steps, no GLC, 30% on splits (docs/dpboost.md, "Paper rows")
                  "dpboost": {"learning_rate": 0.9, "l2_per_epsilon": 60.0,
                              "leaf_clipping": False, "split_share": 0.3},
                  # Jagannathan et al.'s height rule; RDT with Fan et al.'s 10 trees (the
                  # 2013 paper's p = 5 is [13]'s choice for its smallest data set only)
                  # (no feature grid in any paper's batch setting: it is a stream feature)
                  "rdt": {"drift": False, "height_rule": "paper", "n_trees": 10,
                          "attributes": "uniform", "grid_share": 0.0},
                  "rdt-sharp": {"drift": False, "height_rule": "paper", "attributes": "uniform",
                                "grid_share": 0.0},
                  # Huang et al.'s Alg. 2 as published: uniform split attributes, the even
                  # split of epsilon, n_trees trees however small the training set
                  "median-forest": {"attributes": "uniform", "split_share": 0.5,
                                    "min_tree_records": None, "n_trees": 10,
                                    "grid_share": 0.0},
                  # Xin et al.'s tau trees on every training set
                  "greedy-forest": {"drift": False, "min_tree_records": None,
                                    # the batch-tuned forest (docs/greedy_forest.md); the
                                    # defaults are the stream's
                                    "n_trees": 25, "max_depth": 5, "n_bins": 4},
                  # Fletcher & Islam's uniformly drawn attributes
                  "random-forest": {"drift": False, "attributes": "uniform",
                                    "min_tree_records": None, "grid_share": 0.0,
                                    "range_share": 0.05}}


def fold_indices(n: int, folds: int, *, seed: int) -> list[np.ndarray]:
    """A seeded random partition of ``range(n)`` into ``folds`` parts."""
    if folds < 2 or folds > n:
        raise ValueError(f"folds must lie in [2, {n}], got {folds}")
    return np.array_split(np.random.default_rng(seed).permutation(n), folds)


def _metric(name: str, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    if name == "r2":
        y_true, y_pred = y_true.astype(float), y_pred.astype(float)
        return float(1.0 - ((y_true - y_pred) ** 2).sum() / ((y_true - y_true.mean()) ** 2).sum())
    if name == "accuracy":
        return float(np.mean(y_true == y_pred))
    return float(np.mean(y_true != y_pred))


def late_batches(dataset: str, y: Sequence, train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(early, late)``: the rows of ``train`` that arrive first and those of the late batch
    in the §VIII-E scenario ``dataset`` (see the module)."""
    early = np.array([_EARLY[dataset](y[i]) for i in train], dtype=bool)
    return train[early], train[~early]


def best_threshold_error(positive: np.ndarray, p: np.ndarray, step: float = 0.01) -> float:
    """The error at the best decision threshold on these rows, as Kirschte et al.'s code scores.

    Thresholds run from ``min(p)`` to ``max(p)`` in steps of ``step``; a row is predicted
    positive when ``p >= threshold``; the lowest error is returned. Optimistic: the threshold
    is tuned on the very labels it is scored on.

    >>> best_threshold_error(np.array([0, 0, 1, 1], bool), np.array([0.6, 0.7, 0.8, 0.9]))
    0.0
    """
    positive, p = np.asarray(positive, dtype=bool), np.asarray(p, dtype=float)
    thresholds = np.arange(p.min(), p.max() + step / 2, step)
    errors = [(np.mean((p >= t) != positive)) for t in thresholds]
    return float(min(errors))


def score_model(model, X: Sequence, y: Sequence, train: np.ndarray, test: np.ndarray,
                metric: str, *, late: Callable[[Any], bool] | None = None,
                labeled: np.ndarray | None = None, public_unlabeled: bool = False) -> float:
    """Train on ``train`` rows (batch; or early-then-late), return the metric on ``test``.

    ``labeled`` (a mask over ``train``) hands the other training rows over unlabeled — as
    public (non-private) records with ``public_unlabeled``.
    """
    if late is None:
        labels = [y[i] for i in train] if labeled is None else \
            [y[i] if keep else None for i, keep in zip(train, labeled, strict=True)]
        if public_unlabeled and labeled is not None:
            model.learn_many([X[i] for i in train], labels, public=~labeled)
        else:
            model.learn_many([X[i] for i in train], labels)
    else:
        early = np.array([late(y[i]) for i in train], dtype=bool)
        first, second = train[early], train[~early]     # see late_batches
        # S-GBDT trains n_trees rounds per batch; DPBoost trains one window per batch
        kw = {"rounds": model.n_trees} if hasattr(model, "n_trees") else {}
        model.learn_many([X[i] for i in first], [y[i] for i in first], **kw)
        if getattr(model, "individual_filter", True) is False:
            # without the filter the early records have spent their worst case: as in the
            # authors' no-filter arm, the late batch trains a new phase of fewer rounds at
            # a sigma re-calibrated for them (parallel composition)
            kw = {"rounds": NO_FILTER_LATE_ROUNDS, "new_phase": True}
        model.learn_many([X[i] for i in second], [y[i] for i in second], **kw)
    pred = np.asarray(model.predict_many([X[i] for i in test]), dtype=object)
    truth = np.array([y[i] for i in test], dtype=object)
    return _metric(metric, truth, pred)


def protocol_of(model: str, dataset: str) -> str:
    """The evaluation protocol of ``model`` on ``dataset``: its paper's, or prequential."""
    if model not in PROTOCOL:
        raise ValueError(f"unknown model {model!r}; choose from {sorted(BENCH_MODELS)}")
    if model == "sgbdt" and dataset in SGBDT_HOLDOUT:   # multi-class: the median forest's
        return "holdout"                                # Table 1 protocol, beside it
    return "prequential" if dataset in STREAM_DATASETS else PROTOCOL[model]


def load_protocol_data(protocol: str, dataset: str) -> tuple[list, list, Any, str]:
    """``(X, y, schema, metric)`` of ``dataset`` as the ``protocol``'s benchmarks load it."""
    if protocol == "cv":
        return BENCH_DATASETS[dataset]()
    X, y, schema = (KFOLD_DATASETS if protocol == "kfold" else HOLDOUT_DATASETS)[dataset]()
    return X, y, schema, "accuracy"


class Split(NamedTuple):
    """One fit of a protocol: row indices, and the mask of ``train`` rows that keep labels."""

    index: int
    train: np.ndarray
    test: np.ndarray
    labeled: np.ndarray | None


def protocol_splits(protocol: str, n: int, *, repeats: int, folds: int, seed: int = 0,
                    labeled_fraction: float = 1.0) -> Iterator[Split]:
    """The train/test splits every benchmark of ``protocol`` uses (models and baselines alike).

    ``cv`` / ``kfold``: ``repeats`` seeded partitions into ``folds`` parts, each part the test
    set once. ``holdout``: ``repeats`` seeded random 90/10 splits; with ``labeled_fraction`` < 1
    a seeded random share of the training rows keeps its label.

    >>> [s.test.size for s in protocol_splits("kfold", 10, repeats=1, folds=5)]
    [2, 2, 2, 2, 2]
    >>> s = next(protocol_splits("holdout", 100, repeats=1, folds=1, labeled_fraction=0.2))
    >>> s.train.size, s.test.size, bool(5 < s.labeled.sum() < 35)
    (90, 10, True)
    """
    if protocol in ("cv", "kfold"):
        for r in range(repeats):
            parts = fold_indices(n, folds, seed=seed + r)
            for k in range(folds):
                train = np.concatenate([parts[j] for j in range(folds) if j != k])
                yield Split(r * folds + k, train, parts[k], None)
        return
    for r in range(repeats):
        rng = np.random.default_rng(seed + r)
        order = rng.permutation(n)
        cut = int(round(0.9 * n))
        train, test = order[:cut], order[cut:]
        labeled = rng.random(train.size) < labeled_fraction if labeled_fraction < 1 else None
        yield Split(r, train, test, labeled)



def run_bench(model: str, dataset: str, epsilon: float, *, repeats: int | None = None,
              folds: int | None = None, seed: int = 0, params: dict | None = None,
              labeled_fraction: float = 1.0,
              progress: Callable[[int, int], None] | None = None) -> dict:
    """Mean and std of the metric over repeated fits under the model's protocol.

    An S-GBDT result also carries ``config``, the per-epsilon setting it ran
    (:func:`~dpstream.stream.bench.configs.sgbdt_config`).

    Examples
    --------
    >>> result = run_bench("sgbdt", "abalone", 0.5, repeats=1, folds=2, seed=0,
    ...                    params={"n_trees": 20})
    >>> result["metric"], result["folds"], result["repeats"]
    ('r2', 2, 1)
    >>> sorted(result) == sorted((*RESULT_FIELDS, "config")), result["config"]
    (True, 'defaults + --set')
    >>> iris = run_bench("median-forest", "iris", 2.0, repeats=3, seed=0)
    >>> iris["metric"], iris["protocol"], 0.0 <= iris["mean"] <= 1.0
    ('accuracy', 'holdout 90/10', True)
    """
    if model not in BENCH_MODELS:
        raise ValueError(f"unknown model {model!r}; choose from {sorted(BENCH_MODELS)}")
    protocol = protocol_of(model, dataset)
    names = {"cv": BENCH_DATASETS, "holdout": HOLDOUT_DATASETS,
             "kfold": KFOLD_DATASETS}.get(protocol)
    if names is not None and dataset not in names:
        known = sorted(set(names) | set(STREAM_DATASETS))
        raise ValueError(f"unknown dataset {dataset!r} for {model}; choose from {known}")
    repeats = DEFAULT_REPEATS[protocol] if repeats is None else repeats
    folds = DEFAULT_FOLDS.get(protocol, 1) if folds is None else folds
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not 0 < labeled_fraction <= 1:
        raise ValueError(f"labeled_fraction must lie in (0, 1], got {labeled_fraction}")
    if labeled_fraction < 1 and protocol != "holdout":
        raise ValueError("labeled_fraction applies to the holdout benchmarks (median forest, "
                         "rdt, rdt-sharp)")
    params = dict(params or {})
    if protocol == "prequential":
        return run_drift(model, epsilon, repeats=repeats, seed=seed, params=params,
                         progress=progress)
    t0 = time.perf_counter()
    X, y, schema, metric = load_protocol_data(protocol, dataset)
    folds = 1 if protocol == "holdout" else folds
    cls = BENCH_MODELS[model][metric]
    scores, rows, delta, tuned = [], 0, None, []
    splits = list(protocol_splits(protocol, len(y), repeats=repeats, folds=folds, seed=seed,
                                  labeled_fraction=labeled_fraction))
    config, tuned_params = (sgbdt_config(dataset, epsilon, params) if model == "sgbdt"
                            else ("", {}))
    for done, split in enumerate(splits, start=1):
        est = cls(schema=schema, epsilon=epsilon, seed=run_seed(seed, split.index),
                  **{**BATCH_DEFAULTS.get(model, {}),
                     **(BATCH_DEFAULTS.get(cls.__name__, {}) if model == "sgbdt" else {}),
                     **tuned_params, **params})
        scores.append(score_model(est, X, y, split.train, split.test, metric,
                                  late=_EARLY.get(dataset), labeled=split.labeled,
                                  public_unlabeled=model in PUBLIC_UNLABELED))
        if dataset in _EARLY and metric == "error" and hasattr(est, "predict_proba_many"):
            positive = schema.target.values[-1]
            proba = est.predict_proba_many([X[i] for i in split.test])
            tuned.append(best_threshold_error(
                np.array([y[i] == positive for i in split.test]),
                np.asarray(proba[positive], dtype=float)))
        delta = est.privacy_report()["delta"]
        rows += len(y)
        if progress is not None:
            progress(done, len(splits))
    seconds = time.perf_counter() - t0
    extra = {"error_best_threshold": float(np.mean(tuned)),
             "error_best_threshold_std": float(np.std(tuned))} if tuned else {}
    return {**extra, "model": model, "dataset": dataset, "epsilon": float(epsilon), "delta": delta,
            "metric": metric, "mean": float(np.mean(scores)), "std": float(np.std(scores)),
            "repeats": repeats, "folds": folds, "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds, 1), "params": params,
            **({"config": config + (" + --set" if params else "")} if config else {}),
            "protocol": "holdout 90/10" if protocol == "holdout" else f"{folds}-fold CV",
            "labeled_fraction": labeled_fraction}


def run_drift(model: str, epsilon: float, *, repeats: int = 3, seed: int = 0,
              params: dict | None = None, n: int = 60_000, drift_at: int = 30_000,
              width: int = 1_000, block: int = 2_500,
              progress: Callable[[int, int], None] | None = None) -> dict:
    """Prequential accuracy on ``agrawal-drift`` (see the module docstring)."""
    classes = BENCH_MODELS[model]
    cls = classes.get("accuracy") or classes.get("error")
    if cls is None:
        raise ValueError(f"{model} is not a classifier; agrawal-drift needs one")
    user = dict(params or {})
    merged = {**(DRIFT_PARAMS if issubclass(cls, WindowForestBase) else {}), **user}
    after, before, curves, t0 = [], [], [], time.perf_counter()
    delta = None
    for r in range(repeats):
        X, y, schema = load_agrawal_drift(n, drift_at=drift_at, width=width, seed=seed + r)
        est = cls(schema=schema, epsilon=epsilon, seed=run_seed(seed, r), **merged)
        hits = np.zeros(n, dtype=bool)
        for i, (xi, yi) in enumerate(zip(X, y, strict=True)):
            hits[i] = est.predict_one(xi) == yi
            est.learn_one(xi, yi)
        settled = drift_at + width
        before.append(float(hits[:drift_at].mean()))
        after.append(float(hits[settled:].mean()))
        curves.append(hits[: n - n % block].reshape(-1, block).mean(axis=1))
        delta = est.privacy_report()["delta"]
        if progress is not None:
            progress(r + 1, repeats)
    seconds = time.perf_counter() - t0
    return {"model": model, "dataset": "agrawal-drift", "epsilon": float(epsilon),
            "delta": delta, "metric": "accuracy", "mean": float(np.mean(after)),
            "std": float(np.std(after)), "repeats": repeats, "folds": 1,
            "seconds": round(seconds, 3), "rows_per_s": round(repeats * n / seconds, 1),
            "params": merged, "protocol": f"prequential, {n} records, drift at {drift_at} "
                                          f"(width {width}); mean = accuracy after the drift",
            "labeled_fraction": 1.0, "accuracy_before_drift": float(np.mean(before)),
            "block": block, "curve": np.mean(curves, axis=0).round(4).tolist()}
