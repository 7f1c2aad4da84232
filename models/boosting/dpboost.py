"""The enhanced DPBoost (Li et al. 2020, improved in Kirschte et al. 2023 §V) as river estimators,
the baseline S-GBDT is measured against: :class:`DPBoostRegressor`, :class:`DPBoostClassifier`
and the sensitivities their mechanisms use (:func:`split_gain`, :func:`gain_sensitivity`,
:func:`leaf_sensitivity`).

A window of records trains ensembles of complete trees on disjoint parts, splits by the
grid-less exponential mechanism over the public schema ranges, Laplace leaves with geometric
leaf clipping, and a DP initial score, every release charged to a
:class:`~dpstream.accounting.BudgetLedger` first: docs/dpboost.md#how-a-window-trains (the
departures from Li et al.: docs/dpboost.md#departures-from-li-et-al-all-sound).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from river import base

from ...accounting import (
    BudgetLedger,
    GridlessExponentialMechanism,
    LaplaceMechanism,
    as_generator,
    noise,
)
from ..encoding import RecordEncoder
from ..forest import Forest, complete_tree_layout
from ..param_table import (
    INPUT_POLICY,
    SCHEMA_DOC,
    Param,
    ParamTable,
    documented,
    own_args,
    seed_param,
)
from ..params import PrivateState, ShortRepr, warn_small_stream
from ..schema import require_schema, river_check_schema
from .scores import RawScoreBinaryClassifier, RawScoreRegressor, dp_init_score, sigmoid

__all__ = ["DPBoostRegressor", "DPBoostClassifier", "split_gain", "gain_sensitivity",
           "leaf_sensitivity"]


def split_gain(sum_left, n_left, sum_right, n_right, l2: float):
    """Li et al.'s gain ``G(I_L, I_R)`` (vectorised over candidate splits)."""
    return (np.square(sum_left) / (np.asarray(n_left) + l2)
            + np.square(sum_right) / (np.asarray(n_right) + l2))


def gain_sensitivity(grad_clip: float) -> float:
    """``Delta_u = 3 g*^2``: adding or removing one record with ``|g| <= g*`` moves the gain of
    any split by at most this much (Li et al. Lemma 1; ``lambda >= 0``)."""
    return 3.0 * grad_clip ** 2


def leaf_sensitivity(grad_clip: float, l2: float, clip_bound: float) -> float:
    """Sensitivity of a leaf value ``-sum g / (n + lambda)`` clipped to ``[-C, C]``: at most
    ``g* / (1 + lambda)`` (Li et al. Lemma 2) and at most the width ``2 C`` of the range."""
    return min(grad_clip / (1.0 + l2), 2.0 * clip_bound)


#: the regressor's parameters (the classifier's: :data:`_CLASSIFIER_PARAMS`), declared once
_PARAMS = ParamTable([
    Param("epsilon", 1.0, "Total budget per record (pure epsilon-DP).", "real", lo=0,
          lo_open=True),
    Param("n_ensembles", 2, "Ensembles trained one after another on each window (sequential "
          "composition: each gets ``(1 - init_share) * epsilon / n_ensembles``).", "integer",
          lo=1),
    Param("trees_per_ensemble", 10, "Trees per ensemble, each on its own disjoint random part "
          "of the window.", "integer", lo=1),
    Param("depth", 4, "Depth of each (complete) tree.", "integer", lo=1, hi=12),
    Param("learning_rate", 0.1, "eta: shrinkage of every leaf value, and the rate of geometric "
          "leaf clipping.", "real", lo=0, hi=1, lo_open=True, hi_open=True),
    Param("grad_clip", 0.3, "g*: gradients are clipped to (or, with ``data_filter``, filtered "
          "at) this bound. Regression labels are scaled to [-1, 1] with the schema's target "
          "range.", "real", lo=0, lo_open=True),
    Param("l2", 10.0, "lambda, the leaf and gain regulariser; with ``l2_per_epsilon`` a floor.",
          "real", lo=0, lo_open=True),
    Param("l2_per_epsilon", None, "``None``: lambda is ``l2``. A number c: lambda is "
          "``max(l2, c / epsilon)``, so the Laplace leaf scale ``g* / ((1 + lambda) "
          "epsilon_leaf)`` stays about the same at every epsilon while a leaf of n >> lambda "
          "records keeps ``n / (n + lambda)`` of its value. Public (epsilon is public), so no "
          "privacy cost. The benchmark's paper rows use 60 (docs/dpboost.md).", "real", lo=0,
          none_ok=True),
    Param("split_share", 0.5, "Share of a tree's epsilon spent on its splits (spread evenly "
          "over its levels); the rest goes to the leaves.", "real", lo=0, hi=1, lo_open=True,
          hi_open=True),
    Param("init_share", 0.1, "Share of epsilon for the DP initial score (0: the public default "
          "0).", "real", lo=0, hi=1, hi_open=True),
    Param("label_clip", None, "m*, the clipping bound of the initial score (``None``: 1.0 "
          "regression, 3.0 log-odds).", "real", lo=0, lo_open=True, none_ok=True),
    Param("data_filter", False, "Gradient-based data filtering (GDF): records whose gradient "
          "exceeds g* sit a tree out instead of being clipped (Li et al.; Kirschte et al. "
          "(2023) section VIII-F finds it hurts, so off by default).", "bool"),
    Param("leaf_clipping", True, "Geometric leaf clipping (GLC): clip leaf values to "
          "``g* (1 - eta)^(t-1)``.", "bool"),
    Param("numeric_weight", 1.0, "r: the split mechanism's total mass on each numeric feature "
          "(1 per categorical value).", "real", lo=0, lo_open=True),
    Param("window_size", 4096, "Streaming: ``learn_one`` trains a window of this many records "
          "when it fills.", "integer", lo=1),
    Param("max_trees", 1000, "The most trees kept; older ones are retired (post-processing). "
          "``None``: unbounded.", "integer", lo=1, none_ok=True),
    seed_param()]) + INPUT_POLICY
_PARAMS.schema_doc = SCHEMA_DOC
#: the classifier's defaults where they differ (a search on Adult inside the training folds)
_CLASSIFIER_PARAMS = _PARAMS.with_defaults(
    trees_per_ensemble=20, learning_rate=0.3, grad_clip=1.0, split_share=0.3,
    leaf_clipping=False, numeric_weight=50.0)


class _DPBoostBase(PrivateState, ShortRepr, base.Estimator):
    _loss = "squared"
    PARAMETERS = _PARAMS
    _batch_trained = False


    def export(self, path: Any) -> dict:
        """Write this model's public model file to ``path`` (an ONNX graph for a ``.onnx``
        path: the onnx extra): its DP release only, which
        ``dpstream.load_model(path)`` reads into a predict-only estimator with this model's
        predictions (:mod:`dpstream.models.boosting.public_model`, docs/model_format.md).
        Returns the file's JSON object."""
        from ..onnx_export import export_file

        return export_file(self, path)
    def __init__(self, schema: Any, **params: Any):
        self.schema = require_schema(schema, type(self).__name__)
        for name in self.PARAMETERS.names:
            setattr(self, name, params.pop(name))
        self._validate()
        self._l2 = self.l2_effective
        self._encoder = RecordEncoder(schema, on_out_of_domain=self.on_out_of_domain,
                                      on_unknown=self.on_unknown)
        self._check_target(self._encoder)
        n_nodes, self._internal, self._leaves = complete_tree_layout(self.depth)
        self._forest = Forest(max_nodes=n_nodes, max_depth=self.depth)
        self._ledger = BudgetLedger(total_epsilon=float(self.epsilon))
        self._rng = as_generator(self.seed)
        self._numeric = self._encoder.numeric_columns()
        self._categorical = self._encoder.categorical_columns()
        self._buffer_X: list[list[float]] = []
        self._buffer_y: list[float] = []
        self.init_score: float | None = None
        self.records_seen = 0
        self.records_learned = 0
        self.records_filtered = 0
        self.windows = 0
        self.trees_retired = 0

    # ------------------------------------------------------------ validation
    def _check_target(self, encoder: RecordEncoder) -> None:
        raise NotImplementedError

    def _validate(self) -> None:
        self.PARAMETERS.check(self)

    def __setstate__(self, state: dict) -> None:
        # a model pickled before a parameter existed takes the table's value for it
        self.__dict__.update(self.PARAMETERS.fill(state))

    @property
    def _label_clip(self) -> float:
        if self.label_clip is not None:
            return float(self.label_clip)
        return 1.0 if self._loss == "squared" else 3.0

    @property
    def l2_effective(self) -> float:
        """The lambda in use: ``max(l2, l2_per_epsilon / epsilon)`` (``l2`` alone when
        ``l2_per_epsilon`` is ``None``). A function of public parameters only.

        Examples
        --------
        >>> from dpstream.models import DPBoostClassifier
        >>> from dpstream.stream import load_adult
        >>> _, _, schema = load_adult("train")
        >>> [DPBoostClassifier(schema=schema, epsilon=e, l2_per_epsilon=60.0).l2_effective
        ...  for e in (0.12, 1.0, 10.0)]
        [500.0, 60.0, 10.0]
        """
        if self.l2_per_epsilon is None:
            return float(self.l2)
        return max(float(self.l2), float(self.l2_per_epsilon) / float(self.epsilon))

    @property
    def epsilon_init(self) -> float:
        return self.epsilon * self.init_share

    @property
    def epsilon_ensemble(self) -> float:
        """Budget of one ensemble (= of each of its trees: they read disjoint parts)."""
        return (self.epsilon - self.epsilon_init) / self.n_ensembles

    @property
    def training_rounds(self) -> int:
        """Windows trained so far (the runner checkpoints after each when it publishes)."""
        return self.windows

    # ------------------------------------------------------------ learning
    def learn_one(self, x: Mapping, y: Any, **kwargs) -> None:
        """Buffer one record; a full window of ``window_size`` records trains the ensembles.
        A bad record raises :class:`~dpstream.models.encoding.InvalidRecordError` and changes
        nothing."""
        row = self._encoder._row(x)
        target = self._encoder.encode_target_one(y)
        self._buffer_X.append(row)
        self._buffer_y.append(target)
        self.records_seen += 1
        if len(self._buffer_y) >= self.window_size:
            self._train_buffer()

    def learn_many(self, X: Any, y: Any) -> None:
        """Train one window on the batch (plus any records ``learn_one`` buffered). All records
        are validated before any is used."""
        Xe = self._encoder.encode_many(X)
        ye = self._encoder.encode_targets(list(y))
        if Xe.shape[0] != ye.size:
            raise ValueError(f"X has {Xe.shape[0]} rows but y has {ye.size} labels")
        self.records_seen += int(ye.size)
        if self._buffer_y:
            Xe = np.vstack([np.array(self._buffer_X, dtype=np.float64), Xe])
            ye = np.concatenate([np.array(self._buffer_y, dtype=np.float64), ye])
            self._buffer_X, self._buffer_y = [], []
        self._batch_trained = True   # the papers' batch setting: no small-stream warning
        self._train_window(Xe, ye)

    def _train_buffer(self) -> None:
        X = np.array(self._buffer_X, dtype=np.float64)
        y = np.array(self._buffer_y, dtype=np.float64)
        self._buffer_X, self._buffer_y = [], []
        self._train_window(X, y)

    def _gradients(self, score: np.ndarray, y: np.ndarray) -> np.ndarray:
        return score - y if self._loss == "squared" else sigmoid(score) - y

    def _train_window(self, X: np.ndarray, y: np.ndarray) -> None:
        if y.size == 0:
            return
        w = self.windows
        partition = f"window-{w}"
        if self.init_score is None:
            if self.epsilon_init > 0:
                self._ledger.charge(self.epsilon_init, partition=partition, label="init score")
                self.init_score = dp_init_score(y, loss=self._loss, epsilon=self.epsilon_init,
                                                label_clip=self._label_clip, rng=self._rng)
            else:
                self.init_score = 0.0
        score = self.init_score + self._forest.predict_sum(X)
        T = self.trees_per_ensemble
        for e in range(self.n_ensembles):
            # the last share may come out a rounding error short of epsilon / n: a release at
            # the (never larger) amount the ledger still holds is sound
            eps = min(self.epsilon_ensemble, self._ledger.remaining(partition=partition))
            while not self._ledger.can_charge(eps, partition=partition):
                eps = math.nextafter(eps, 0.0)   # the float just below the exact remainder
            self._ledger.charge(eps, partition=partition,
                                label=f"ensemble {e}: {T} trees on disjoint parts")
            eps_split = eps * self.split_share / self.depth
            eps_leaf = eps * (1.0 - self.split_share)
            parts = np.array_split(noise.permutation(self._rng, y.size), T)
            for t, idx in enumerate(parts):
                g = self._gradients(score[idx], y[idx])
                if self.data_filter:
                    keep = np.abs(g) <= self.grad_clip
                    self.records_filtered += int(idx.size - keep.sum())
                    idx, g = idx[keep], g[keep]
                else:
                    g = np.clip(g, -self.grad_clip, self.grad_clip)
                tree = self._grow(X[idx], g, t, eps_split, eps_leaf)
                if self.max_trees is not None and len(self._forest) >= self.max_trees:
                    score -= self._forest.predict_tree(0, X)
                    self._forest.drop_oldest(1)
                    self.trees_retired += 1
                k = self._forest.add_tree(**tree)
                score += self._forest.predict_tree(k, X)
        self.windows += 1
        self.records_learned += int(y.size)

    # ------------------------------------------------------------ one tree
    def _grow(self, X: np.ndarray, g: np.ndarray, t: int, eps_split: float,
              eps_leaf: float) -> dict:
        """One complete tree on the records ``X`` with clipped gradients ``g``."""
        n_nodes = 2 * self._internal.size + 1
        feature = np.zeros(n_nodes, dtype=np.int32)
        threshold = np.full(n_nodes, np.inf)
        left = np.arange(n_nodes, dtype=np.int32)
        left[self._internal] = 2 * self._internal + 1
        node = np.zeros(X.shape[0], dtype=np.int64)
        mech = GridlessExponentialMechanism(
            epsilon=eps_split, sensitivity=gain_sensitivity(self.grad_clip),
            bounds=[(lo, hi) for _, lo, hi in self._numeric],
            categories=[np.asarray(cols, dtype=float) for cols in self._categorical],
            numeric_weight=self.numeric_weight, rng=self._rng)
        for i in self._internal:
            rows = np.flatnonzero(node == i)
            col, thr = self._split(mech, X[rows], g[rows])
            feature[i], threshold[i] = col, thr
            go_left = X[rows, col] <= thr
            node[rows] = np.where(go_left, 2 * i + 1, 2 * i + 2)
        leaf = node - int(self._leaves[0])
        n_leaves = self._leaves.size
        counts = np.bincount(leaf, minlength=n_leaves).astype(np.float64)
        sums = np.bincount(leaf, weights=g, minlength=n_leaves)
        value = -sums / (counts + self._l2)
        bound = self.grad_clip * (1.0 - self.learning_rate) ** t if self.leaf_clipping \
            else self.grad_clip
        value = np.clip(value, -bound, bound)
        lap = LaplaceMechanism(epsilon=eps_leaf, rng=self._rng, touched=1,   # one leaf
                               sensitivity=leaf_sensitivity(self.grad_clip, self._l2, bound))
        noisy = np.clip(lap.release(value), -bound, bound)   # clamping: post-processing
        values = np.zeros(n_nodes)
        values[self._leaves] = self.learning_rate * noisy
        return {"feature": feature, "threshold": threshold, "left": left, "value": values}

    def _split(self, mech: GridlessExponentialMechanism, X: np.ndarray,
               g: np.ndarray) -> tuple[int, float]:
        """The grid-less exponential mechanism over this node's records (Alg. 3)."""
        total_g, total_n, l2 = float(g.sum()), g.size, self._l2
        columns, prefix = [], []
        for col, _, _ in self._numeric:
            x = X[:, col]
            present = ~np.isnan(x)   # missing values always go right
            order = np.argsort(x[present], kind="stable")
            xs = x[present][order]
            columns.append(xs)
            prefix.append((xs, np.concatenate(([0.0], np.cumsum(g[present][order])))))

        def utility(i: int, candidates: np.ndarray) -> np.ndarray:
            if i < len(self._numeric):
                xs, cum = prefix[i]
                n_left = np.searchsorted(xs, candidates, side="right")
                s_left = cum[n_left]
            else:
                cols = candidates.astype(np.int64)
                is_left = X[:, cols] == 0.0
                n_left = is_left.sum(axis=0)
                s_left = g @ is_left
            return split_gain(s_left, n_left, total_g - s_left, total_n - n_left, l2)

        choice = mech.select(columns, utility)
        if choice.categorical:
            return int(choice.value), 0.5
        return int(self._numeric[choice.feature][0]), float(choice.value)

    # ------------------------------------------------------------ predicting
    def _raw_many(self, X: Any) -> np.ndarray:
        Xe = self._encoder.encode_many(X)
        base_score = self.init_score or 0.0
        return base_score + self._forest.predict_sum(Xe)

    def _raw_one(self, x: Mapping) -> float:
        row = np.array(self._encoder._row(x))
        return (self.init_score or 0.0) + self._forest.predict_sum_one(row)

    # --------------------------------------------------------------- report
    def privacy_report(self) -> dict:
        """The guarantee (pure epsilon-DP per record) and how it was spent (``epsilon``: 0.0
        until the first window trains). A stream-trained model that has released from fewer
        records than its epsilon wants warns here
        (:class:`~dpstream.models.params.SmallStreamWarning`)."""
        if self.windows and not self._batch_trained:
            warn_small_stream(self, self.records_seen, self.epsilon)
        return {
            "mechanism": "enhanced DPBoost (Kirschte et al. 2023, §V): grid-less exponential "
                         "mechanism splits, Laplace leaves with geometric leaf clipping, Laplace "
                         "initial score",
            "guarantee": "epsilon-DP per record: init score + n_ensembles ensembles "
                         "(sequential); trees of an ensemble read disjoint parts (parallel); "
                         "windows hold disjoint records (parallel)",
            "epsilon": self._ledger.spent,
            "epsilon_budget": float(self.epsilon),
            "delta": 0.0,
            "epsilon_init": self.epsilon_init,
            "epsilon_per_ensemble": self.epsilon_ensemble,
            "epsilon_split_per_level": self.epsilon_ensemble * self.split_share / self.depth,
            "epsilon_leaf": self.epsilon_ensemble * (1.0 - self.split_share),
            "l2": self._l2,
            "n_ensembles": self.n_ensembles,
            "trees_per_ensemble": self.trees_per_ensemble,
            "windows": self.windows,
            "trees": len(self._forest),
            "trees_retired": self.trees_retired,
            "records_seen": self.records_seen,
            "records_learned": self.records_learned,
            "records_pending": len(self._buffer_y),
            "records_filtered": self.records_filtered,
            "data_filter": bool(self.data_filter),
            "leaf_clipping": bool(self.leaf_clipping),
        }


@documented
class DPBoostRegressor(RawScoreRegressor, _DPBoostBase, base.Regressor):
    """Enhanced DPBoost regression trees (squared loss; labels scaled to [-1, 1] with
    the public target range). Defaults from a search on Abalone inside the training folds
    (``docs/dpboost.md``).

    {parameters}

    Examples
    --------
    >>> from dpstream.models import DPBoostRegressor
    >>> from dpstream.stream import load_abalone
    >>> X, y, schema = load_abalone()
    >>> model = DPBoostRegressor(schema=schema, epsilon=5.0, seed=1)
    >>> model.learn_many(X[:3000], y[:3000])
    >>> from river import metrics
    >>> r2 = metrics.R2()
    >>> for xi, yi in zip(X[3000:], y[3000:]):
    ...     r2.update(yi, model.predict_one(xi))
    >>> r2.get() > 0.2
    True
    >>> report = model.privacy_report()
    >>> report["epsilon"] <= 5.0, report["trees"]
    (True, 20)
    """

    _loss = "squared"

    def __init__(self, schema: Any = None, epsilon: float = 1.0, n_ensembles: int = 2,
                 trees_per_ensemble: int = 10, depth: int = 4, learning_rate: float = 0.1,
                 grad_clip: float = 0.3, l2: float = 10.0,
                 l2_per_epsilon: float | None = None, split_share: float = 0.5,
                 init_share: float = 0.1, label_clip: float | None = None,
                 data_filter: bool = False, leaf_clipping: bool = True,
                 numeric_weight: float = 1.0, window_size: int = 4096,
                 max_trees: int | None = 1000, seed: int | None = None,
                 on_out_of_domain: str = "clip", on_unknown: str = "ignore"):
        super().__init__(**own_args(locals()))

    def _check_target(self, encoder: RecordEncoder) -> None:
        if encoder.schema.target.type != "numeric":
            raise ValueError("DPBoostRegressor needs a numeric target (min/max) in the schema, "
                             f"got {encoder.schema.target.type!r}")

    @classmethod
    def _unit_test_params(cls):
        yield {"schema": river_check_schema("regression"), "window_size": 50, "depth": 2,
               "trees_per_ensemble": 3}


@documented
class DPBoostClassifier(RawScoreBinaryClassifier, _DPBoostBase, base.Classifier):
    """Enhanced DPBoost classification trees (binary, logistic loss). The schema's
    target is ``binary``; its second value is the positive class. Defaults from a search on
    Adult inside the training folds (``docs/dpboost.md``).

    {parameters}

    Examples
    --------
    >>> from dpstream.models import DPBoostClassifier
    >>> from dpstream.stream import load_adult
    >>> X, y, schema = load_adult("train")
    >>> model = DPBoostClassifier(schema=schema, epsilon=1.0, seed=1)
    >>> model.learn_many(X[:20000], y[:20000])
    >>> errors = sum(model.predict_one(xi) != yi for xi, yi in zip(X[20000:], y[20000:]))
    >>> errors / len(y[20000:]) < 0.24
    True
    """

    _loss = "logistic"
    PARAMETERS = _CLASSIFIER_PARAMS

    def __init__(self, schema: Any = None, epsilon: float = 1.0, n_ensembles: int = 2,
                 trees_per_ensemble: int = 20, depth: int = 4, learning_rate: float = 0.3,
                 grad_clip: float = 1.0, l2: float = 10.0,
                 l2_per_epsilon: float | None = None, split_share: float = 0.3,
                 init_share: float = 0.1, label_clip: float | None = None,
                 data_filter: bool = False, leaf_clipping: bool = False,
                 numeric_weight: float = 50.0, window_size: int = 4096,
                 max_trees: int | None = 1000, seed: int | None = None,
                 on_out_of_domain: str = "clip", on_unknown: str = "ignore"):
        super().__init__(**own_args(locals()))

    def _check_target(self, encoder: RecordEncoder) -> None:
        if encoder.schema.target.type != "binary":
            raise ValueError("DPBoostClassifier needs a binary target in the schema, "
                             f"got {encoder.schema.target.type!r}")

    @classmethod
    def _unit_test_params(cls):
        yield {"schema": river_check_schema("binary"), "window_size": 50, "depth": 2,
               "trees_per_ensemble": 3}
