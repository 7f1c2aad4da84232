"""Gradient boosting: S-GBDT (Kirschte et al., 2023) and the enhanced DPBoost (Li et al., 2020).

=====================  ==============================================================
``sgbdt``              the S-GBDT estimators and their parameters
``sgbdt_engine``       the training engine: pool, rounds, DP leaves, individual filter
``sgbdt_stream``       ``learn_stream``: a batch learned exactly as one record at a time
``sgbdt_party``        one party of distributed S-GBDT (secure aggregation of leaf sums)
``hist_splits``        DP split selection from noisy gradient histograms
``random_splits``      the paper's data-independent random trees
``draw_kernels``       compiled drawing of random splits (numba)
``round_kernels``      a round's compiled pool-wide steps (numba)
``block_sums``         per-record sums of tree blocks (retiring a block without routing)
``scores``             the DP initial score and raw score -> prediction
``dpboost``            the enhanced DPBoost estimators
``public_model``       the boosted models' public model file and predict-only readers
=====================  ==============================================================
"""

from __future__ import annotations

from . import public_model as _public_model  # noqa: F401 - registers the public readers
from .dpboost import DPBoostClassifier, DPBoostRegressor
from .sgbdt import SGBDTClassifier, SGBDTRegressor

__all__ = ["DPBoostClassifier", "DPBoostRegressor", "SGBDTClassifier", "SGBDTRegressor"]
