"""Progressive validation on the stream variants: accuracy (or R²) and speed, record by record.

:func:`run_stream` predicts each record (``predict_one``), then learns it (``learn_one``) —
river's progressive validation — with a dpstream model or one of river's non-private streaming
learners, over ``adult``, ``abalone``, ``agrawal-drift`` or ``elec2``; it reports the
prequential metric, the rows/s of ``predict_one`` + ``learn_one`` and of ``predict_many``, and
on a classification stream the accuracy curve (:func:`prequential_curve`).

The streams, the learners' settings and what is reported:
docs/bench_internals.md#progressive-validation-on-the-stream-variants.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...models.windows.window_forest import WindowForestBase
from ..datasets import load_abalone, load_adult, load_elec2
from .protocols import BENCH_MODELS, PUBLIC_UNLABELED
from .scenarios import MULTICLASS_STREAMS, load_agrawal_drift, load_multiclass

__all__ = ["CURVE_EVERY", "CURVE_WINDOW", "RIVER_LEARNERS", "RIVER_MODELS", "STREAMS",
           "STREAM_MODELS", "TIME_ORDERED", "prequential_curve", "run_stream", "time_batch"]


def _shuffled(loader: Callable[[], tuple], seed: int) -> tuple[list, list, Any]:
    X, y, schema = loader()
    order = np.random.default_rng(seed).permutation(len(y))
    return [X[i] for i in order], [y[i] for i in order], schema


#: stream name -> loader(seed) -> (X, y, schema)
STREAMS: dict[str, Callable[[int], tuple]] = {
    "adult": lambda seed: _shuffled(lambda: load_adult("all"), seed),
    "abalone": lambda seed: _shuffled(load_abalone, seed),
    "agrawal-drift": lambda seed: load_agrawal_drift(60_000, drift_at=30_000, seed=seed),
    "elec2": lambda seed: load_elec2(),     # a real stream: its time order, whatever the seed
    # river's multi-class generators (issue 52), 20,000 records each
    **{name: (lambda seed, name=name: load_multiclass(name, seed=seed))
       for name in MULTICLASS_STREAMS},
}
#: the streams whose order is their time order (never shuffled)
TIME_ORDERED = ("elec2",)

#: river's streaming learners (non-private) every stream runs beside the dpstream models
RIVER_MODELS = ("hoeffding-tree", "arf")
#: every river learner :func:`run_stream` knows (HoeffdingAdaptiveTree: the Elec2 stream's)
RIVER_LEARNERS = (*RIVER_MODELS, "hoeffding-adaptive-tree")

#: the accuracy curve: a point every CURVE_EVERY records, over the last CURVE_WINDOW records
CURVE_EVERY, CURVE_WINDOW = 500, 1000

#: every dpstream model; ``rdt-sharp`` sees one record in ``PUBLIC_EVERY`` labeled and private,
#: the others public and unlabeled (Jagannathan et al.'s setting), the rest every record labeled
STREAM_MODELS = tuple(BENCH_MODELS)
PUBLIC_EVERY = 5


def _river(name: str, regression: bool, seed: int):
    from river import forest, tree
    if name == "hoeffding-tree":
        return tree.HoeffdingTreeRegressor() if regression else tree.HoeffdingTreeClassifier()
    if name == "hoeffding-adaptive-tree":
        return (tree.HoeffdingAdaptiveTreeRegressor(seed=seed) if regression
                else tree.HoeffdingAdaptiveTreeClassifier(seed=seed))
    return (forest.ARFRegressor(n_models=10, seed=seed) if regression
            else forest.ARFClassifier(n_models=10, seed=seed))


def prequential_curve(correct: Any, every: int = CURVE_EVERY,
                      window: int = CURVE_WINDOW) -> list[list[float]]:
    """The prequential accuracy over a sliding window, sampled along the stream.

    Parameters
    ----------
    correct
        One 0/1 (or bool) a record, in stream order: was its prediction right.
    every
        A point after every ``every`` records, and one at the end.
    window
        The accuracy of a point is over the last ``window`` records (fewer at the start).

    Returns
    -------
    list of [int, float]
        ``[records seen, accuracy]`` pairs (accuracy rounded to 4 decimals; lists, as JSON
        gives them back).

    Examples
    --------
    >>> prequential_curve([1, 0, 1, 1, 1], every=2, window=2)
    [[2, 0.5], [4, 1.0], [5, 1.0]]
    """
    hits = np.concatenate([[0.0], np.cumsum(np.asarray(correct, dtype=float))])
    n = len(hits) - 1
    ends = list(range(every, n + 1, every))
    if n and (not ends or ends[-1] != n):
        ends.append(n)
    return [[k, round(float(hits[k] - hits[max(0, k - window)]) / (k - max(0, k - window)), 4)]
            for k in ends]


def _one_hot(X: list, schema: Any) -> list:
    """Categorical values as 0/1 features: river's regression trees fit linear leaf models,
    which take numbers only (its classifiers split on categories natively)."""
    cats = {k for k, f in schema.features.items() if getattr(f, "values", None) is not None}
    return [{(f"{k}={v}" if k in cats else k): (1.0 if k in cats else v)
             for k, v in x.items() if v is not None} for x in X]


def time_batch(est: Any, X: list, kind: str) -> tuple[float, str]:
    """Seconds to score all of ``X`` at once, and how: ``predict_many`` for dpstream's models,
    a loop of ``predict_one`` for river's learners (they have no batch predict)."""
    t1 = time.perf_counter()
    if kind == "dp":
        est.predict_many(X)
        return time.perf_counter() - t1, "predict_many"
    for xi in X:
        est.predict_one(xi)
    return (time.perf_counter() - t1,
            "loop of predict_one (river has no batch predict for this learner)")


def run_stream(model: str, dataset: str, *, epsilon: float | None = None,
               n: int | None = None, seed: int = 0, params: dict | None = None,
               progress: Callable[[int, int], None] | None = None) -> dict:
    """Progressive validation of ``model`` over the stream ``dataset`` (see the module).

    Window forests run with windows of ``min(5000, n // 5)`` records, the newest 2 kept.

    Examples
    --------
    >>> res = run_stream("hoeffding-tree", "abalone", n=300, seed=0)
    >>> res["metric"], res["kind"], res["n"]
    ('r2', 'non-private', 300)
    >>> res = run_stream("rdt", "adult", epsilon=1.0, n=400, seed=0)
    >>> res["metric"], res["params"]["window_size"], 0 <= res["mean"] <= 1
    ('accuracy', 80, True)
    >>> res["accuracy_curve"][-1][0], res["curve_window"]
    (400, 1000)
    """
    if dataset not in STREAMS:
        raise ValueError(f"unknown stream {dataset!r}; choose from {sorted(STREAMS)}")
    X, y, schema = STREAMS[dataset](seed)
    if n is not None:
        if n < 10:
            raise ValueError(f"n must be >= 10, got {n}")
        X, y = X[:n], y[:n]
    n = len(y)
    regression = schema.target.values is None
    metric = "r2" if regression else "accuracy"
    params = dict(params or {})
    if model in RIVER_LEARNERS:
        if epsilon is not None:
            raise ValueError(f"{model} is river's non-private learner: epsilon must be None")
        est, kind, delta = _river(model, regression, seed), "non-private", None
    elif model in STREAM_MODELS:
        if epsilon is None:
            raise ValueError(f"{model} is differentially private: give epsilon")
        classes = BENCH_MODELS[model]
        cls = classes.get("r2") if regression else (classes.get("accuracy")
                                                    or classes.get("error"))
        if cls is None:
            raise ValueError(f"{model} cannot learn {dataset} ({metric})")
        if issubclass(cls, WindowForestBase):
            params = {"window_size": min(5000, max(20, n // 5)), "max_windows": 2, **params}
        est, kind = cls(schema=schema, epsilon=epsilon, seed=seed, **params), "dp"
    else:
        raise ValueError(f"unknown stream model {model!r}; choose from "
                         f"{sorted(STREAM_MODELS + RIVER_LEARNERS)}")
    if kind == "non-private" and regression:
        X = _one_hot(X, schema)
    pred = np.empty(n, dtype=object)
    step = max(1, n // 100)
    t0 = time.perf_counter()
    semi = model in PUBLIC_UNLABELED
    for i, (xi, yi) in enumerate(zip(X, y, strict=True)):
        pred[i] = est.predict_one(xi)
        if semi and i % PUBLIC_EVERY:
            est.learn_one(xi, None, public=True)
        else:
            est.learn_one(xi, yi)
        if progress is not None and (i + 1) % step == 0:
            progress(i + 1, n)
    stream_s = time.perf_counter() - t0
    batch_s, batch = time_batch(est, X, kind)
    truth = np.array(y, dtype=object)
    if regression:
        p = np.array([0.0 if v is None else float(v) for v in pred])
        t = truth.astype(float)
        score = float(1.0 - ((t - p) ** 2).sum() / ((t - t.mean()) ** 2).sum())
    else:
        hits = pred == truth
        score = float(np.mean(hits))
    if kind == "dp":
        delta = est.privacy_report().get("delta")
    order = ", in time order" if dataset in TIME_ORDERED else ""
    curve = {} if regression else {"accuracy_curve": prequential_curve(hits),
                                   "curve_window": CURVE_WINDOW, "curve_every": CURVE_EVERY}
    return {"model": model, "dataset": dataset, "epsilon": epsilon, "delta": delta,
            "metric": metric, "mean": score, "std": 0.0, "repeats": 1, "folds": 1,
            "seconds": round(stream_s + batch_s, 3), "rows_per_s": round(n / stream_s, 1),
            "predict_many_rows_per_s": round(n / batch_s, 1), "batch_predict": batch,
            "params": params, "protocol": f"progressive validation, {n} records{order}",
            "n": n, "labeled_fraction": 1 / PUBLIC_EVERY if semi else 1.0, "kind": kind,
            **curve}
