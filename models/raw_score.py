"""Prediction from a raw boosting score, shared by the gradient-boosting estimators.

A subclass provides ``_raw_one(x) -> float`` and ``_raw_many(X) -> ndarray`` (the ensemble's raw
score) and an ``_encoder``. Regression scores live on the labels scaled to [-1, 1] with the
public target range; binary scores are log-odds of the schema's second class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["RawScoreRegressor", "RawScoreBinaryClassifier", "own_args", "like"]


def own_args(scope: dict) -> dict:
    """A constructor's ``locals()`` without ``self`` (the parameters to pass on)."""
    return {k: v for k, v in scope.items() if k not in ("self", "__class__")}


def like(X: Any, values: np.ndarray) -> Any:
    """A pandas Series indexed like ``X`` when X is a DataFrame, else the numpy array."""
    if hasattr(X, "index") and hasattr(X, "columns"):
        import pandas as pd
        return pd.Series(values, index=X.index)
    return values


class RawScoreRegressor:
    """``predict_one`` / ``predict_many`` for a squared-loss booster."""

    def predict_one(self, x: Mapping, **kwargs) -> float:
        return float(self._encoder.decode_target(self._raw_one(x)))

    def predict_many(self, X: Any) -> Any:
        lo, hi = self._encoder.schema.target.min, self._encoder.schema.target.max
        return like(X, lo + (self._raw_many(X) + 1.0) * (hi - lo) / 2.0)


class RawScoreBinaryClassifier:
    """``predict_(proba_)one`` / ``predict_(proba_)many`` for a logistic-loss booster."""

    @property
    def _multiclass(self) -> bool:
        return False

    def predict_proba_one(self, x: Mapping, **kwargs) -> dict:
        p = 0.5 * (1.0 + math.tanh(0.5 * self._raw_one(x)))
        neg, pos = self._encoder.classes
        return {neg: 1.0 - p, pos: p}

    def predict_one(self, x: Mapping, **kwargs) -> Any:
        neg, pos = self._encoder.classes
        return pos if self._raw_one(x) > 0.0 else neg

    def predict_proba_many(self, X: Any) -> Any:
        p = 0.5 * (1.0 + np.tanh(0.5 * self._raw_many(X)))
        neg, pos = self._encoder.classes
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover - pandas is optional
            return {neg: 1.0 - p, pos: p}
        index = X.index if hasattr(X, "columns") else None
        return pd.DataFrame({neg: 1.0 - p, pos: p}, index=index)

    def predict_many(self, X: Any) -> Any:
        neg, pos = self._encoder.classes
        raw = self._raw_many(X)
        return like(X, np.array([neg, pos], dtype=object).take((raw > 0.0).astype(np.intp)))
