"""Gradient boosting: S-GBDT (Kirschte et al., 2023) and the enhanced DPBoost (Li et al., 2020).

The estimators are :class:`SGBDTRegressor`, :class:`SGBDTClassifier`,
:class:`DPBoostRegressor` and :class:`DPBoostClassifier`. The other modules hold S-GBDT's
engine, its stream batches, feature grid, multi-class and distributed parts, split selection,
compiled kernels, scores, and the boosted models' public model file.

What each module holds: docs/sgbdt_internals.md#the-modules.
"""

from __future__ import annotations

from . import public_model as _public_model  # noqa: F401 - registers the public readers
from .dpboost import DPBoostClassifier, DPBoostRegressor
from .sgbdt import SGBDTClassifier, SGBDTRegressor

__all__ = ["DPBoostClassifier", "DPBoostRegressor", "SGBDTClassifier", "SGBDTRegressor"]
