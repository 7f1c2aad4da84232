"""Real drifting streams (issue 51): Elec2 in its time order at epsilon 1, library defaults.

Floors sit below the figures measured with seed 0 (docs/median_forest.md, "Windows for
drifting streams"; docs/greedy_forest.md) and above what the defaults reached before the
window policy changed (median forest 0.672, greedy forest 0.599) and the feature grid
(docs/drift.md, "The DP feature grid"; the median forest's refreshes it every 5 windows:
0.746 -> 0.758)."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
    SGBDTClassifier,
)
from dpstream.stream import load_elec2


@pytest.fixture(scope="module")
def elec2():
    X, y, schema = load_elec2()
    return X, y, schema


def _prequential(model, X, y) -> float:
    right = 0
    for x, label in zip(X, y, strict=True):
        right += model.predict_one(x) == label
        model.learn_one(x, label)
    return right / len(y)


# the median forest at seed 0: 0.758 with a warm-up from 1,000 records, 0.736 from 125 (issue
# 64); over seeds 0-5 0.746 and 0.740 (the seeds' spread is 2.4 pp either way): its floor is
# the warm-up's seed 0 less a point
# S-GBDT, RDT and the random decision forest with exact noise (issue 65), seeds 0-5: 0.730
# (sd 0.005), 0.716 (sd 0.014), 0.713 (sd 0.015); with floating-point noise 0.737, 0.720 and
# 0.718 (sd 0.013, 0.010, 0.020; docs/benchmark_notes.md, "Exact noise"): their floors are
# the mean less about two standard deviations. Majority voting scores 0.58.
@pytest.mark.parametrize("cls, floor", [(MedianForestClassifier, 0.725),
                                        # with its feature grid (docs/sgbdt.md): 0.698
                                        # before it
                                        (SGBDTClassifier, 0.72),
                                        (GreedyForestClassifier, 0.71),
                                        # with the feature grid (docs/drift.md): 0.645 and
                                        # 0.635 before it
                                        (RDTClassifier, 0.69),
                                        (RandomDecisionForestClassifier, 0.685)])
def test_models_follow_elec2(elec2, cls, floor):
    X, y, schema = elec2
    acc = _prequential(cls(schema=schema, epsilon=1.0, seed=0), X, y)
    assert acc >= floor, acc


def test_window_decay_weights_recent_windows_and_is_validated():
    schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
              "target": {"type": "binary", "values": [0, 1]}}
    model = MedianForestClassifier(schema=schema, window_size=100, warmup=None, drift=False,
                                   n_trees=1, window_decay=0.5, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = float(rng.random())
        model.learn_one({"a": a}, int(a > 0.5))
    assert model.window_weights() == [0.25, 0.5, 1.0]
    model.window_decay = 1.0
    assert model.window_weights() == [1.0, 1.0, 1.0]
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="window_decay"):
            MedianForestClassifier(schema=schema, window_decay=bad)
