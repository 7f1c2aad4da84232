"""dpstream.models — DP tree ensembles on a shared array-based tree structure.

Each estimator is a river estimator (``learn_one`` / ``predict_one`` / ``learn_many`` /
``predict_many`` / ``privacy_report``). Models import from :mod:`dpstream.accounting` only,
never from the stream or connector layers.

A core shared by every family (``schema``, ``encoding``, ``forest``, ``forest_kernels``,
``drift``, ``public``, ``onnx_export``, ``params``) and one sub-package per algorithm family:
:mod:`~dpstream.models.boosting` (S-GBDT, DPBoost) and :mod:`~dpstream.models.windows` (the
window forests: median, random, RDT, greedy).

What each module holds: ``docs/architecture.md#the-modules-of-the-models-core``.
"""

from __future__ import annotations

from .boosting import DPBoostClassifier, DPBoostRegressor, SGBDTClassifier, SGBDTRegressor
from .encoding import InvalidRecordError, RecordEncoder
from .forest import Forest
from .params import (
    ClippedInputWarning,
    PrivateStateError,
    SmallStreamWarning,
    private_state_access,
)
from .schema import Schema
from .windows import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
)

__all__ = ["ClippedInputWarning", "DPBoostClassifier", "DPBoostRegressor", "Forest",
           "GreedyForestClassifier", "InvalidRecordError", "MedianForestClassifier",
           "PrivateStateError", "RDTClassifier", "RandomDecisionForestClassifier",
           "RecordEncoder", "SGBDTClassifier", "SGBDTRegressor", "Schema", "SmallStreamWarning",
           "private_state_access"]
