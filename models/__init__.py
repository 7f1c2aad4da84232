"""dpstream.models — DP tree ensembles on a shared array-based tree structure.

Each estimator is a river estimator (``learn_one`` / ``predict_one`` / ``learn_many`` /
``predict_many`` / ``privacy_report``). Models import from :mod:`dpstream.accounting` only,
never from the stream or connector layers.

The core, shared by every family:

=====================  ==============================================================
``schema``             the public schema: feature domains and the label's classes or range
``encoding``           records -> float rows, validated against the schema
``forest``             the shared array forest (feature, threshold, left, value)
``forest_kernels``     its compiled routing and score updates (numba)
``drift``              the DP drift signal
``public``             the public model file: digest, checks, each family's registry
``onnx_export``        the public model file as an ONNX TreeEnsemble graph (the onnx extra)
``params``             hyper-parameter checks, the short repr, the small-stream and
                       clipped-input warnings
=====================  ==============================================================

and one sub-package per algorithm family: :mod:`~dpstream.models.boosting` (S-GBDT, DPBoost)
and :mod:`~dpstream.models.windows` (the window forests: median, random, RDT, greedy).
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
