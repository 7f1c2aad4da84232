"""The window policy every window forest shares (models/windows/window_forest.py): warm-up windows,
the DP drift signal and the retirement of the old concept's windows."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from river.datasets import synth

from dpstream.models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
)
from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA as AGRAWAL

MODELS = [MedianForestClassifier, RandomDecisionForestClassifier, RDTClassifier,
          GreedyForestClassifier]


def _drifting(n: int, at: int, seed: int = 1) -> list:
    stream = synth.ConceptDriftStream(
        stream=synth.Agrawal(classification_function=4, seed=seed),
        drift_stream=synth.Agrawal(classification_function=0, seed=seed + 1),
        position=at, width=50, seed=seed + 2)
    return list(stream.take(n))


@pytest.mark.parametrize("cls", MODELS)
def test_warm_up_windows_double_up_to_the_window_size(cls):
    rows = list(synth.Agrawal(classification_function=1, seed=1).take(8000))
    m = cls(schema=AGRAWAL, window_size=3000, max_windows=None, drift=False, seed=0,
            **({"n_trees": 5} if cls is GreedyForestClassifier else {}))
    sizes = []
    for x, y in rows:
        m.predict_one(x)
        before = m.windows_closed
        m.learn_one(x, y)
        if m.windows_closed > before:
            sizes.append(m._windows[-1].records)
    # the default warm-up (125; the random decision forest and RDT 250, issue 64) doubles,
    # then the windows are capped at window_size
    w = m.warmup
    assert w == (250 if cls in (RandomDecisionForestClassifier, RDTClassifier) else 125)
    expect = [w * 2 ** k for k in range(6) if w * 2 ** k < 3000]
    expect += [3000] * ((8000 - sum(expect)) // 3000)
    assert sizes == expect
    assert m.records_seen - sum(sizes) == len(m._buffer_y) == 8000 - sum(expect)
    rep = m.privacy_report()
    assert rep["epsilon"] == pytest.approx(m.epsilon) and rep["epsilon_drift"] == 0
    assert f"warm-up windows of {w}" in rep["window_policy"]


def test_without_warm_up_the_first_window_is_full_and_bad_warm_up_is_refused():
    m = MedianForestClassifier(schema=AGRAWAL, window_size=1500, warmup=None, drift=False)
    for x, y in synth.Agrawal(seed=2).take(1499):
        m.learn_one(x, y)
    assert m.windows_closed == 0 and m.current_window_size == 1500
    with pytest.raises(ValueError, match="warmup"):
        MedianForestClassifier(schema=AGRAWAL, n_trees=10, warmup=5)
    with pytest.raises(ValueError, match="drift_share"):
        MedianForestClassifier(schema=AGRAWAL, drift_share=1.5)


def test_a_detected_change_retires_the_old_concept_and_the_budget_adds_up():
    rows = _drifting(12000, at=6000)
    m = MedianForestClassifier(schema=AGRAWAL, epsilon=2.0, window_size=4000, max_windows=5,
                               seed=0)
    for x, y in rows:
        m.predict_one(x)
        m.learn_one(x, y)
    rep = m.privacy_report()
    assert rep["drift"]["generation"] >= 1 and rep["drift"]["windows_retired"] >= 1
    first_change = rep["drift"]["change_at_release"][0] * rep["drift"]["window"]
    assert 6000 <= first_change < 9000
    assert all(w.generation == m.generation for w in m._windows)   # old concept gone
    assert rep["epsilon_trees"] + rep["epsilon_drift"] == pytest.approx(2.0)
    assert rep["epsilon"] == pytest.approx(2.0) and rep["epsilon"] <= rep["epsilon_budget"]
    # the new concept is learned: on the last 2,000 rows the model beats the majority rate
    # clearly, where the same forest without the drift signal is still fitting the old one
    tail = rows[-2000:]
    majority = max(np.mean([y for _, y in tail]), 1 - np.mean([y for _, y in tail]))
    acc = np.mean([m.predict_one(x) == y for x, y in tail])
    stale = MedianForestClassifier(schema=AGRAWAL, epsilon=2.0, window_size=4000,
                                   max_windows=5, drift=False, warmup=None, seed=0)
    for x, y in rows[:-2000]:
        stale.learn_one(x, y)
    assert acc > majority + 0.03
    assert acc > np.mean([stale.predict_one(x) == y for x, y in tail]) + 0.03
    # every record went to exactly one window (or the open buffer): none trained twice
    assert m.records_trained + len(m._buffer_y) == m.records_seen == 12000


def test_batch_windows_spend_the_whole_budget_on_trees():
    rows = list(synth.Agrawal(classification_function=1, seed=3).take(3000))
    m = MedianForestClassifier(schema=AGRAWAL, epsilon=1.0, seed=0)
    m.learn_many([x for x, _ in rows], [y for _, y in rows])
    assert m._ledger.spent == pytest.approx(1.0)        # no record fed the drift signal
    assert m.privacy_report()["epsilon"] == pytest.approx(1.0)
    for x, y in rows[:1000]:                            # stream records do feed it
        m.predict_one(x)
        m.learn_one(x, y)
    assert m.epsilon_trees == pytest.approx(0.95)
    assert m._ledger.spent == pytest.approx(1.0)
    assert m.privacy_report()["epsilon"] <= 1.0 + 1e-12


def test_the_policy_survives_a_checkpoint_exactly_once():
    rows = _drifting(9000, at=4000, seed=5)
    a = MedianForestClassifier(schema=AGRAWAL, epsilon=2.0, window_size=3000, seed=4)
    for x, y in rows[:5500]:
        a.predict_one(x)
        a.learn_one(x, y)
    b = pickle.loads(pickle.dumps(a))
    for m in (a, b):
        for x, y in rows[5500:]:
            m.predict_one(x)
            m.learn_one(x, y)
    assert (a.generation, a.windows_closed, a.records_trained) == \
        (b.generation, b.windows_closed, b.records_trained)
    assert [p for p in map(a.predict_one, (x for x, _ in rows[:300]))] == \
        [p for p in map(b.predict_one, (x for x, _ in rows[:300]))]


def test_checkpoints_from_before_the_policy_keep_fixed_windows():
    m = MedianForestClassifier(schema=AGRAWAL, window_size=500, seed=0)
    state = m.__dict__.copy()
    for name in ("warmup", "drift", "drift_share", "drift_window", "_drift", "generation",
                 "generation_windows", "windows_retired_by_drift", "_buffer_fed",
                 "_training_epsilon"):
        state.pop(name)
    old = MedianForestClassifier.__new__(MedianForestClassifier)
    old.__setstate__(state)
    assert old.warmup is None and old._drift is None and old.current_window_size == 500
    for x, y in synth.Agrawal(seed=1).take(600):
        old.predict_one(x)
        old.learn_one(x, y)
    assert old.windows_closed == 1 and old._ledger.spent == pytest.approx(old.epsilon)


def test_a_detected_change_closes_a_window_holding_every_record_it_read():
    """A release that detects a change closes the open window with the detecting record in
    it: every record whose loss a published detection read is inside a published window
    (what lets a window-forest member hand off exactly the records of closed windows)."""
    rows = _drifting(9000, at=3000)
    m = MedianForestClassifier(schema=AGRAWAL, epsilon=2.0, window_size=4000, seed=0)
    detections = 0
    for x, y in rows:
        m.predict_one(x)
        generation = m.generation
        m.learn_one(x, y)
        if m.generation != generation:
            detections += 1
            assert m._buffer_y == [] and not m._buffer_fed   # the detecting record closed
            assert m.records_trained == m.records_seen       # ... with the window
    assert detections >= 1


def test_discarded_records_leave_no_trace_in_the_drift_signal():
    """A member restarting after a crash discards its open window; whatever that window's
    records told the drift signal is forgotten, so what the member releases later is the same
    whichever records the window held (their next owner's drift read is their only one)."""
    from dpstream.models.windows.window_exchange import discard_open_window

    rows = list(synth.Agrawal(classification_function=1, seed=4).take(3000))
    base = MedianForestClassifier(schema=AGRAWAL, epsilon=10.0, window_size=20000,
                                  warmup=1000, drift_window=100, seed=3)
    for x, y in rows[:1500]:                # one window of 1,000 closed, 500 records open
        base.predict_one(x)
        base.learn_one(x, y)
    assert base.windows_closed == 1 and base._buffer_fed
    runs, seen = [], []
    for flip in (0, 4):                     # the open window's labels: as drawn; 1 in 4 wrong
        m = pickle.loads(pickle.dumps(base))
        for i, (x, y) in enumerate(rows[1500:1950]):
            m.learn_one(x, 1 - y if flip and i % flip == 0 else y)
        assert m.windows_closed == 1         # no detection: the releases stayed inside
        seen.append((m._drift.history[-4:], m._drift.detector.__dict__.copy()))
        assert discard_open_window(m) == 950
        before = m._drift.releases
        for x, y in rows[1950:]:
            m.predict_one(x)
            m.learn_one(x, y)
        runs.append((m._drift.history[before:], m._drift.changes, m.windows_closed))
    assert seen[0][0] != seen[1][0]          # the signal had read the two windows' records
    assert runs[0] == runs[1]
    assert m.privacy_report()["epsilon"] <= 10.0 + 1e-9
