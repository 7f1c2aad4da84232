"""dpstream.models — DP tree ensembles on a shared array-based tree structure.

Each estimator is a river estimator (``learn_one`` / ``predict_one`` / ``learn_many`` /
``predict_many`` / ``privacy_report``). Models import from :mod:`dpstream.accounting` only,
never from the stream or connector layers.
"""

from __future__ import annotations

from .dpboost import DPBoostClassifier, DPBoostRegressor
from .encoding import InvalidRecordError, RecordEncoder
from .forest import Forest
from .greedy_forest import GreedyForestClassifier
from .median_forest import MedianForestClassifier
from .random_forest import RandomDecisionForestClassifier
from .rdt import RDTClassifier
from .schema import Schema
from .sgbdt import SGBDTClassifier, SGBDTRegressor

__all__ = ["DPBoostClassifier", "DPBoostRegressor", "Forest", "GreedyForestClassifier",
           "InvalidRecordError", "MedianForestClassifier", "RDTClassifier",
           "RandomDecisionForestClassifier", "RecordEncoder", "SGBDTClassifier",
           "SGBDTRegressor", "Schema"]
