"""Window forests: tumbling disjoint windows under parallel composition.

=====================  ==============================================================
``window_forest``      the shared base: window policy, drift, a member's share, held windows
``window_stream``      ``learn_stream``: a batch learned exactly as one record at a time
``window_trees``       a window's trees as arrays, and leaf class distributions
``window_exchange``    export and merge of finished windows across processes
``relevance``          DP attribute-relevance evidence that split attributes are drawn from
``random_trees``       keyed random trees drawn without data; DP numeric ranges
``public_windows``     the window forests' public model file and predict-only reader
``buckets``            public buckets every keyed-tree level releases through
``median_forest``      median-split private ensembles (Huang, Lei & Kabán)
``random_forest``      random decision forests (Fletcher & Islam)
``rdt``                random decision trees and RDT# (Jagannathan et al.)
``greedy_forest``      DPGDF, greedy decision forests (Xin et al.)
``window_kernels``     compiled routing and releases of keyed trees (numba)
``trie_kernels``       compiled level-by-level scoring of keyed trees (numba)
=====================  ==============================================================
"""

from __future__ import annotations

from . import public_windows as _public_windows  # noqa: F401 - registers the public readers
from .greedy_forest import GreedyForestClassifier
from .median_forest import MedianForestClassifier
from .random_forest import RandomDecisionForestClassifier
from .rdt import RDTClassifier

__all__ = ["GreedyForestClassifier", "MedianForestClassifier", "RDTClassifier",
           "RandomDecisionForestClassifier"]
