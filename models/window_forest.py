"""Window forests: tumbling disjoint windows under parallel composition (shared base).

A stream is cut into tumbling windows of ``window_size`` records (arrival counts are public,
as everywhere in dpstream). When a window closes, its records are dealt at random into
``n_trees`` disjoint parts — the dealing looks at nothing but the arrival order — and each part
trains one tree whose mechanisms together spend the full ``epsilon``. Every record sits in
exactly one window and one tree, so by parallel composition the whole stream is
``epsilon``-DP however many windows close. The ledger records one partition per (window, tree);
its parallel maximum is the guarantee. The ensemble keeps the trees of the newest
``max_windows`` windows; retiring older trees is post-processing.

A window that has not closed yet is held in memory (and in a checkpoint, with the model) and is
never trained twice or dropped. Subclasses implement :meth:`WindowForestBase._build_tree`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from river import base

from ..accounting import BudgetLedger
from .encoding import RecordEncoder
from .forest import Forest

__all__ = ["WindowForestBase"]


class WindowForestBase(base.Classifier):
    """Classifier over tumbling windows; subclasses build one tree from one part of a window.

    A built tree is ``(feature, threshold, left, value, depth)`` in the
    :class:`~dpstream.models.forest.Forest` layout (local indices; go left iff
    ``x[feature] <= threshold``, right child ``left + 1``, leaves self-looping through column 0
    with threshold ``+inf``), a leaf's value being its class index. Each closed window's trees
    form one ``Forest``.
    """

    def __init__(self, schema: Any, epsilon: float, n_trees: int, window_size: int,
                 max_windows: int | None, seed: int | None):
        self.schema = schema
        self.epsilon = epsilon
        self.n_trees = n_trees
        self.window_size = window_size
        self.max_windows = max_windows
        self.seed = seed
        self._encoder = RecordEncoder(schema)
        if self._encoder.classes is None:
            raise ValueError("a window forest classifies: the schema needs target classes")
        self._check_params()
        self._rng = np.random.default_rng(seed)
        self._ledger = BudgetLedger(total_epsilon=float(epsilon))
        self._buffer_X: list[list[float]] = []
        self._buffer_y: list[int] = []
        self._windows: list[Forest] = []          # per closed window: its trees
        self.windows_closed = 0
        self.last_depth: int | None = None
        self.records_seen = 0
        self.records_trained = 0

    # --------------------------------------------------------------- params
    def _check_params(self) -> None:
        def integer(name: str, lo: int) -> int:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
            return int(v)

        e = self.epsilon
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e < float("inf"):
            raise ValueError(f"epsilon must be a positive finite number, got {e!r}")
        integer("n_trees", 1)
        integer("window_size", 1)
        if self.window_size < self.n_trees:
            raise ValueError(f"window_size ({self.window_size}) must be >= n_trees "
                             f"({self.n_trees}): each tree needs its own records")
        if self.max_windows is not None:
            integer("max_windows", 1)
        if self.seed is not None:
            integer("seed", 0)

    # --------------------------------------------------------------- learning
    def learn_one(self, x: Mapping, y: Any, **kwargs) -> None:
        """Buffer one record; a full window trains ``n_trees`` trees on disjoint parts.

        A bad record raises :class:`~dpstream.models.encoding.InvalidRecordError` and changes
        nothing; an unlabeled record (``y is None``) is not used by this supervised forest.
        """
        if y is None:
            return
        row = self._encoder._row(x)
        label = int(self._encoder.encode_target_one(y))
        self._buffer_X.append(row)
        self._buffer_y.append(label)
        self.records_seen += 1
        if len(self._buffer_y) >= self.window_size:
            self._close_window()

    def learn_many(self, X: Any, y: Any) -> None:
        """Batch mode: the batch (with anything buffered) is one window, trained now."""
        Xe = self._encoder.encode_many(X)
        ye = [int(v) for v in self._encoder.encode_targets(list(y))]
        if Xe.shape[0] != len(ye):
            raise ValueError(f"X has {Xe.shape[0]} rows but y has {len(ye)} labels")
        self._buffer_X.extend(Xe.tolist())
        self._buffer_y.extend(ye)
        self.records_seen += len(ye)
        if len(self._buffer_y) >= self.n_trees:
            self._close_window()

    def _close_window(self) -> None:
        X = np.array(self._buffer_X, dtype=np.float64)
        y = np.array(self._buffer_y, dtype=np.int64)
        self._buffer_X, self._buffer_y = [], []
        w = self.windows_closed
        # deal the records into n_trees disjoint parts (a random permutation: data-independent)
        order = self._rng.permutation(y.size)
        parts = np.array_split(order, self.n_trees)
        forest = None
        for t, idx in enumerate(parts):
            self._ledger.charge(float(self.epsilon), partition=f"window-{w}/tree-{t}",
                                label=type(self).__name__)
            feature, threshold, left, value, depth = self._build_tree(X[idx], y[idx],
                                                                      window_size=y.size)
            if forest is None:
                forest = Forest(max_nodes=feature.size, max_depth=depth)
            forest.add_tree(feature=feature, threshold=threshold, left=left, value=value)
            self.last_depth = depth
        self._windows.append(forest)
        if self.max_windows is not None and len(self._windows) > self.max_windows:
            del self._windows[0]          # retiring trees is post-processing
        self.windows_closed += 1
        self.records_trained += int(y.size)

    def _build_tree(self, X: np.ndarray, y: np.ndarray, *, window_size: int) -> tuple:
        raise NotImplementedError

    # ------------------------------------------------------------- predicting
    def _votes(self, X: np.ndarray) -> np.ndarray:
        k = len(self._encoder.classes)
        votes = np.zeros((X.shape[0], k))
        for forest in self._windows:
            leaf_class = forest.leaf_values(X).astype(np.int64)
            for c in range(k):
                votes[:, c] += (leaf_class == c).sum(axis=1)
        return votes

    def predict_proba_one(self, x: Mapping, **kwargs) -> dict:
        votes = self._votes(self._encoder.encode_one(x)[None, :])[0]
        classes = self._encoder.classes
        total = votes.sum()
        if total == 0:   # before the first window closes: the public uniform prior
            return {c: 1.0 / len(classes) for c in classes}
        return {c: float(v / total) for c, v in zip(classes, votes, strict=True)}

    def predict_one(self, x: Mapping, **kwargs) -> Any:
        votes = self._votes(self._encoder.encode_one(x)[None, :])[0]
        return self._encoder.classes[int(np.argmax(votes))]

    def predict_many(self, X: Any) -> Any:
        votes = self._votes(self._encoder.encode_many(X))
        out = np.array(self._encoder.classes, dtype=object).take(np.argmax(votes, axis=1))
        if hasattr(X, "index") and hasattr(X, "columns"):
            import pandas as pd
            return pd.Series(out, index=X.index)
        return out

    # ----------------------------------------------------------------- report
    @property
    def n_trees_kept(self) -> int:
        return sum(len(f) for f in self._windows)

    def _report_base(self) -> dict:
        return {
            "epsilon": self._ledger.spent if self.windows_closed else 0.0,
            "epsilon_budget": float(self.epsilon),
            "delta": 0.0,
            "guarantee": ("pure epsilon-DP per record for the whole stream: each record lies in "
                          "exactly one window and one tree's disjoint part, each tree's "
                          "mechanisms spend epsilon, so windows and trees compose in parallel; "
                          "retired trees are post-processing"),
            "windows_closed": self.windows_closed,
            "windows_kept": len(self._windows),
            "trees": self.n_trees_kept,
            "records_seen": self.records_seen,
            "records_learned": self.records_trained,
            "records_pending": len(self._buffer_y),
            "ledger_partitions": self.windows_closed * self.n_trees,
        }
