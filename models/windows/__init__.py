"""Window forests: tumbling disjoint windows under parallel composition.

The four estimators (median forest, random forest, RDT, greedy forest) on a shared base
(``window_forest``), with their stream batches, window exchange across processes, attribute
relevance, keyed random trees and buckets, public model file and compiled kernels.

What each module holds: ``docs/architecture.md#the-modules-of-the-window-forests``; the design
of keyed trees in ``docs/keyed_trees.md#keyed-random-trees``, of windows across processes in
``docs/window_exchange.md#windows-across-processes``.
"""

from __future__ import annotations

from . import public_windows as _public_windows  # noqa: F401 - registers the public readers
from .greedy_forest import GreedyForestClassifier
from .median_forest import MedianForestClassifier
from .random_forest import RandomDecisionForestClassifier
from .rdt import RDTClassifier

__all__ = ["GreedyForestClassifier", "MedianForestClassifier", "RDTClassifier",
           "RandomDecisionForestClassifier"]
