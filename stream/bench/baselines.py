"""Baselines the benchmark suite measures next to dpstream, on the very same splits.

:data:`BASELINES` names them: scikit-learn's non-private ``hist-gradient-boosting`` and
``sklearn-random-forest`` (the ceiling), diffprivlib's ``diffprivlib-random-forest`` (the DP
anchor), InterpretML's ``dp-ebm`` and Kirschte et al.'s ``dp-mean`` (:class:`DPMean`, the
floor). The DP baselines get the public schema's bounds, never bounds read from the data.
:func:`run_baseline` runs one on the splits :func:`~dpstream.stream.bench.protocol_splits`
gives the dpstream model of the same table.

What each baseline is and how it is configured: docs/bench_internals.md#baselines.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import MissingExtraError
from ...accounting import BudgetLedger, LaplaceMechanism, run_seed
from ...models import SGBDTClassifier
from ...models.encoding import RecordEncoder
from .protocols import _metric, load_protocol_data, protocol_splits

__all__ = ["BASELINES", "BENCH_EXTRA", "DP_PEER_DATASETS", "DPMean", "OPTIONAL_MODULES",
           "baseline_available", "design_matrix", "dp_ebm_frame", "missing_optional",
           "run_baseline"]

#: the pip line that installs every optional package the suite uses
BENCH_EXTRA = "pip install 'dpstream[bench]'"

#: the optional packages of the suite (the bench extra), by the name they import as
OPTIONAL_MODULES = {"sklearn": "scikit-learn", "diffprivlib": "diffprivlib",
                    "interpret": "interpret", "pandas": "pandas"}

#: the tables DP-EBM runs on (S-GBDT's datasets)
DP_PEER_DATASETS = ("adult", "abalone")

#: S-GBDT's default δ: DP-EBM runs at the same (ε, δ) as the S-GBDT rows it stands beside
_SGBDT_DELTA = float(inspect.signature(SGBDTClassifier).parameters["delta"].default)

#: name -> (kind, what it is)
BASELINES: dict[str, tuple[str, str]] = {
    "hist-gradient-boosting": ("non-private", "scikit-learn HistGradientBoosting"),
    "sklearn-random-forest": ("non-private", "scikit-learn RandomForest (100 trees)"),
    "diffprivlib-random-forest": ("dp-anchor", "diffprivlib RandomForestClassifier (10 trees)"),
    "dp-ebm": ("dp-anchor", "InterpretML DP-EBM (DPExplainableBoosting*, its defaults)"),
    "dp-mean": ("dp-baseline", "DP Mean (Kirschte et al., 2023): the DP mean of the labels"),
}


class DPMean:
    """Kirschte et al.'s "DP Mean": predict one constant, a differentially private mean of the
    labels.

    Classification: a Laplace histogram of the class counts (adding or removing one record
    changes one count by one: L1 sensitivity 1, the whole ``epsilon``), the noisy majority
    class is the prediction — the mean of 0/1 labels, thresholded. Regression: labels scaled
    to [-1, 1] by the public target range; a Laplace sum (sensitivity 1, ``epsilon / 2``) over
    a Laplace count (sensitivity 1, ``epsilon / 2``), clipped to the range. Both charges go to
    ``ledger``.

    Parameters
    ----------
    schema
        The public schema (its target's classes or range).
    epsilon
        The privacy budget of the one release.
    seed
        ``None`` (OS entropy) or an int (tests and benchmarks).

    Examples
    --------
    >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
    ...           "target": {"type": "numeric", "min": 0, "max": 10}}
    >>> m = DPMean(schema, epsilon=10.0, seed=0).fit([2.0] * 500 + [4.0] * 500)
    >>> round(m.value_, 1), m.ledger.spent
    (3.0, 10.0)
    >>> m.predict(2) == [m.value_, m.value_]
    True
    """

    def __init__(self, schema: Any, epsilon: float, *, seed: int | None = None):
        self.encoder = RecordEncoder(schema)
        self.ledger = BudgetLedger(total_epsilon=epsilon)
        self.epsilon = float(epsilon)
        self.seed = seed
        self.value_: Any = None

    def fit(self, y: list) -> DPMean:
        """Release the DP mean of ``y`` (charging the ledger)."""
        rng = np.random.default_rng(self.seed)
        t = self.encoder.encode_targets(y)
        classes = self.encoder.classes
        if classes is not None:
            counts = np.bincount(t.astype(np.intp), minlength=len(classes)).astype(float)
            noisy = LaplaceMechanism(epsilon=self.epsilon, sensitivity=1.0, rng=rng,
                                     integers=True).release(counts)
            self.ledger.charge(self.epsilon, label="DP mean: Laplace class histogram")
            self.value_ = classes[int(np.argmax(noisy))]
            return self
        half = self.epsilon / 2
        total = LaplaceMechanism(epsilon=half, sensitivity=1.0, rng=rng).release(float(t.sum()))
        self.ledger.charge(half, label="DP mean: Laplace sum of scaled labels")
        count = LaplaceMechanism(epsilon=half, sensitivity=1.0, rng=rng).release(float(t.size))
        self.ledger.charge(half, label="DP mean: Laplace count")
        self.value_ = self.encoder.decode_target(float(np.clip(total / max(count, 1.0), -1, 1)))
        return self

    def predict(self, n: int) -> list:
        """``n`` copies of the released constant."""
        return [self.value_] * n


def design_matrix(schema: Any, X: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows as a float matrix for scikit-learn / diffprivlib, with public column bounds.

    One-hot categories (bounds [0, 1]) and numeric features (bounds from the schema); a missing
    value becomes its column's lower bound (diffprivlib takes no NaN).
    """
    enc = RecordEncoder(schema)
    M = enc.encode_many(X)[:, 1:]                    # column 0 is the constant leaf column
    lo, hi = np.zeros(M.shape[1]), np.ones(M.shape[1])
    for col, a, b in enc.numeric_columns():
        lo[col - 1], hi[col - 1] = a, b
    return np.where(np.isnan(M), lo, M), lo, hi


def baseline_available(name: str) -> str | None:
    """``None`` when ``name`` can run here, else the reason it cannot (with the pip line)."""
    if name not in BASELINES:
        return f"unknown baseline {name!r}; choose from {sorted(BASELINES)}"
    if name == "dp-mean":
        return None
    if name == "dp-ebm":
        try:
            from interpret.privacy import DPExplainableBoostingClassifier  # noqa: F401
        except ImportError:
            return f"interpret is not installed: {BENCH_EXTRA}"
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return f"scikit-learn is not installed: {BENCH_EXTRA}"
    if name == "diffprivlib-random-forest":
        try:
            import diffprivlib  # noqa: F401
        except ImportError:
            return f"diffprivlib is not installed: {BENCH_EXTRA}"
    return None


def missing_optional(exc: BaseException) -> str | None:
    """The reason to skip a cell that raised ``exc``, when an optional package is missing.

    ``None`` when ``exc`` (or an exception it was raised from) is not an import of one of
    :data:`OPTIONAL_MODULES`: a broken core install or a bug must fail loudly.

    Examples
    --------
    >>> missing_optional(ModuleNotFoundError("No module named 'sklearn'", name="sklearn"))
    "scikit-learn is not installed: pip install 'dpstream[bench]'"
    >>> missing_optional(ModuleNotFoundError("No module named 'numba'", name="numba")) is None
    True
    """
    seen: BaseException | None = exc
    while seen is not None:
        name = getattr(seen, "name", None) if isinstance(seen, ImportError) else None
        top = (name or "").split(".")[0]
        if top in OPTIONAL_MODULES:
            return f"{OPTIONAL_MODULES[top]} is not installed: {BENCH_EXTRA}"
        if isinstance(seen, MissingExtraError):   # its message names the extra
            return str(seen)
        seen = seen.__cause__
    return None


def dp_ebm_frame(schema: Any, X: list) -> tuple[Any, dict]:
    """The rows as a DataFrame for DP-EBM, and its public arguments from the schema.

    Columns in schema order, named ``str(key)``; categories as strings (a missing one becomes
    ``"None"``, a category of its own), numbers as floats (missing: NaN). The arguments:
    ``feature_names``, ``feature_types`` (``"nominal"`` / ``"continuous"``) and
    ``privacy_bounds`` (each numeric feature's declared ``(min, max)``).
    """
    import pandas as pd

    names, types, bounds, cols = [], [], {}, {}
    for key, feat in schema.features.items():
        name = str(key)
        names.append(name)
        values = [x.get(key) for x in X]
        if getattr(feat, "values", None) is not None:
            types.append("nominal")
            cols[name] = [str(v) for v in values]
        else:
            types.append("continuous")
            bounds[name] = (float(feat.min), float(feat.max))
            cols[name] = np.array([np.nan if v is None else float(v) for v in values])
    return pd.DataFrame(cols, columns=names), {"feature_names": names, "feature_types": types,
                                               "privacy_bounds": bounds}


def _dp_ebm(regression: bool, epsilon: float, delta: float, seed: int, public: dict,
            schema: Any):
    import warnings

    from interpret.privacy import DPExplainableBoostingClassifier, DPExplainableBoostingRegressor
    # a fixed random_state makes the noise reproducible, which a benchmark wants
    warnings.filterwarnings("ignore", message=".*fixed random_state.*")
    if regression:
        return DPExplainableBoostingRegressor(
            epsilon=epsilon, delta=delta, random_state=seed, n_jobs=1,
            privacy_target_min=float(schema.target.min),
            privacy_target_max=float(schema.target.max), **public)
    return DPExplainableBoostingClassifier(epsilon=epsilon, delta=delta, random_state=seed,
                                           n_jobs=1, **public)


def _estimator(name: str, regression: bool, epsilon: float | None, seed: int, lo, hi,
               n_classes: int):
    if name == "hist-gradient-boosting":
        from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
        cls = HistGradientBoostingRegressor if regression else HistGradientBoostingClassifier
        return cls(random_state=seed)
    if name == "sklearn-random-forest":
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
        cls = RandomForestRegressor if regression else RandomForestClassifier
        return cls(n_estimators=100, n_jobs=-1, random_state=seed)
    import warnings

    from diffprivlib.models import RandomForestClassifier as DPRandomForest
    warnings.filterwarnings("ignore", module="diffprivlib")
    return DPRandomForest(epsilon=epsilon, bounds=(lo, hi), classes=list(range(n_classes)),
                          random_state=seed)


def _one_openmp_thread() -> Any:
    """A context in which scikit-learn's OpenMP code (HistGradientBoosting) runs on one thread.

    Its threads spin while they wait for each other: on a loaded machine (the suite beside
    other work on 2 cores) one HistGradientBoosting fit on Abalone took 44-77 s on two threads
    against 0.7-1.4 s on one, and the quick profile ran past its 5 minutes on it alone.
    """
    from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

    return threadpool_limits(limits=1, user_api="openmp")


def run_baseline(name: str, dataset: str, protocol: str, *, epsilon: float | None = None,
                 repeats: int = 1, folds: int = 1, seed: int = 0,
                 labeled_fraction: float = 1.0,
                 progress: Callable[[int, int], None] | None = None) -> dict:
    """Mean and std of a baseline's metric on the splits of ``protocol`` (see the module).

    The baseline sees the same folds and holdout draws as the dpstream model of the table;
    with ``labeled_fraction`` < 1 it trains on the labeled rows only.

    Examples
    --------
    >>> res = run_baseline("dp-mean", "iris", "holdout", epsilon=1.0, repeats=2, seed=0)
    >>> res["model"], res["metric"], res["kind"], res["epsilon"]
    ('dp-mean', 'accuracy', 'dp-baseline', 1.0)
    >>> res = run_baseline("hist-gradient-boosting", "iris", "holdout", repeats=2, seed=0)
    >>> res["kind"], res["epsilon"], res["mean"] > 0.8
    ('non-private', None, True)
    """
    missing = baseline_available(name)
    if missing is not None:
        raise ValueError(missing)
    kind = BASELINES[name][0]
    if (epsilon is None) != (kind == "non-private"):
        raise ValueError(f"{name} is {kind}: epsilon must be "
                         f"{'None' if kind == 'non-private' else 'given'}")
    X, y, schema, metric = load_protocol_data(protocol, dataset)
    enc = RecordEncoder(schema)
    regression = enc.classes is None
    if regression and name == "diffprivlib-random-forest":
        raise ValueError("diffprivlib-random-forest is a classifier; "
                         f"{dataset} is a regression task")
    folds = 1 if protocol == "holdout" else folds
    truth = np.empty(len(y), dtype=object)
    truth[:] = list(y)
    delta = None if kind == "non-private" else 0.0
    if name == "dp-ebm":
        frame, public = dp_ebm_frame(schema, X)
        delta = _SGBDT_DELTA
        # regression in the label's own units, bounded by the schema's declared range
        target = (np.array([float(v) for v in y]) if regression
                  else enc.encode_targets(y).astype(np.intp))
    elif name != "dp-mean":
        M, lo, hi = design_matrix(schema, X)
        t = enc.encode_targets(y)
        target = t if regression else t.astype(np.intp)
    t0, scores = time.perf_counter(), []
    splits = list(protocol_splits(protocol, len(y), repeats=repeats, folds=folds, seed=seed,
                                  labeled_fraction=labeled_fraction))
    for done, split in enumerate(splits, start=1):
        train = split.train if split.labeled is None else split.train[split.labeled]
        fit_seed = run_seed(seed, split.index)
        if name == "dp-mean":
            pred = np.empty(split.test.size, dtype=object)
            pred[:] = DPMean(schema, epsilon, seed=fit_seed).fit(
                list(truth[train])).predict(split.test.size)
        elif name == "dp-ebm":
            est = _dp_ebm(regression, epsilon, delta, fit_seed, public, schema)
            est.fit(frame.iloc[train], target[train])
            out = np.asarray(est.predict(frame.iloc[split.test]))
            pred = np.empty(split.test.size, dtype=object)
            pred[:] = ([float(v) for v in out] if regression
                       else [enc.classes[int(v)] for v in out])
        else:
            est = _estimator(name, regression, epsilon, fit_seed, lo, hi,
                             0 if regression else len(enc.classes))
            with _one_openmp_thread():
                est.fit(M[train], target[train])
                out = np.asarray(est.predict(M[split.test]))
            pred = np.empty(split.test.size, dtype=object)
            pred[:] = ([enc.decode_target(v) for v in out] if regression
                       else [enc.classes[int(v)] for v in out])
        scores.append(_metric(metric, truth[split.test], pred))
        if progress is not None:
            progress(done, len(splits))
    seconds = time.perf_counter() - t0
    label = {"holdout": "holdout 90/10"}.get(protocol, f"{folds}-fold CV")
    return {"model": name, "dataset": dataset, "epsilon": epsilon,
            "delta": delta, "metric": metric,
            "mean": float(np.mean(scores)), "std": float(np.std(scores)), "repeats": repeats,
            "folds": folds, "seconds": round(seconds, 3),
            "rows_per_s": round(len(splits) * len(y) / seconds, 1), "params": {},
            "protocol": label, "labeled_fraction": labeled_fraction, "kind": kind}
