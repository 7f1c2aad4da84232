"""S-GBDT on a stream: the round schedule (``round_size``, ``pool_rounds``) and stream batches
(models/boosting/sgbdt_stream.py) learned with exactly the result of one record at a time."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
from river.datasets import synth
from test_window_stream import _drifting

from dpstream.connectors.safe_state import decode, encode
from dpstream.models import SGBDTClassifier, SGBDTRegressor
from dpstream.stream import load_abalone
from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA as AGRAWAL


def _same(a, b) -> None:
    """The same pool, spend, forest, buffer and drift signal, bit for bit."""
    ea, eb = a.engine, b.engine
    assert a.privacy_report() == b.privacy_report()
    assert np.array_equal(ea.X, eb.X) and np.array_equal(ea.y, eb.y)
    assert np.array_equal(ea.score, eb.score) and np.array_equal(ea.ids, eb.ids)
    assert np.array_equal(ea.filter.spent, eb.filter.spent)
    n = ea.forest.n_trees * ea.forest.max_nodes
    for name in ("feature", "threshold", "left", "value"):
        assert np.array_equal(getattr(ea.forest, name)[:n], getattr(eb.forest, name)[:n])
    assert len(a._buffer_X) == len(b._buffer_X) and a._buffer_y == b._buffer_y
    assert all(np.array_equal(r, s) for r, s in zip(a._buffer_X, b._buffer_X, strict=True))
    assert a._buffer_raw == b._buffer_raw
    if a._drift is not None:
        assert a._drift.history == b._drift.history and a._drift.pending == b._drift.pending


def _in_batches(model, X, y, seed: int) -> None:
    rng = np.random.default_rng(seed)
    i = 0
    while i < len(y):
        k = int(rng.choice([1, 2, 31, 33, 250, 1500]))
        model.learn_stream(X[i:i + k], y[i:i + k])
        i += k


@pytest.mark.parametrize("params", [{}, {"pool_rounds": 8, "max_active": 4000},
                                    {"pool_rounds": None}])
def test_learn_stream_is_learn_one_record_by_record(params):
    """Same rounds, drift releases, generation, pool, spend and forest, bit for bit, on a
    drifting stream in batches of random sizes (one record, a round's worth and more); then
    a checkpoint with records buffered, and both go on."""
    X, y = _drifting(14_000, 5000)
    a = SGBDTClassifier(schema=AGRAWAL, seed=3, drift_window=300, **params)
    b = SGBDTClassifier(schema=AGRAWAL, seed=3, drift_window=300, **params)
    for xi, yi in zip(X, y, strict=True):
        a.learn_one(xi, yi)
    _in_batches(b, X, y, seed=0)
    assert a.engine.generation >= 1                          # a detection inside a batch
    assert len(a._buffer_y) > 0                              # and records still buffered
    _same(a, b)
    # buffered rows are arrays (scored, or learn_stream's views); a checkpoint keeps lists
    assert any(type(r) is np.ndarray for r in b._buffer_X)
    assert all(type(r) is list for r in b.__getstate__()["_buffer_X"])
    tree, arrays = encode(b)                                 # a checkpoint, then both go on
    c = decode(json.loads(json.dumps(tree)), arrays)
    more_X, more_y = _drifting(3000, 1500, seed=9)
    for xi, yi in zip(more_X, more_y, strict=True):
        a.learn_one(xi, yi)
    c.learn_stream(more_X, more_y)
    _same(a, c)
    probe = X[:300]
    assert [a.predict_proba_one(x) for x in probe] == [c.predict_proba_one(x) for x in probe]


def test_regressor_learn_stream_is_learn_one_record_by_record():
    X, y, schema = load_abalone()
    a = SGBDTRegressor(schema=schema, seed=1, pool_rounds=10, max_active=2000)
    b = SGBDTRegressor(schema=schema, seed=1, pool_rounds=10, max_active=2000)
    for xi, yi in zip(X, y, strict=True):
        a.learn_one(xi, yi)
    _in_batches(b, X, y, seed=1)
    assert a.training_rounds > 30
    _same(a, b)


def _intervals(n: int, round_size: int, pool_rounds: int | None, max_active: int) -> list:
    """The arrivals after which the documented schedule runs a round (one generation)."""
    due, since = [], 0
    for a in range(1, n + 1):
        since += 1
        every = round_size if pool_rounds is None else max(
            round_size, math.ceil(min(a, max_active) / pool_rounds))
        if since >= every:
            due.append(a)
            since = 0
    return due


@pytest.mark.parametrize("pool_rounds", [None, 25])
def test_rounds_space_out_as_the_pool_can_grow(pool_rounds):
    """A round every ``round_size`` arrivals while the stream is young, then every
    ``ceil(min(a, max_active) / pool_rounds)``: the work per arrival stops growing with the
    pool. Every round's arrival count is the documented one;
    stream_room names it."""
    rows = list(synth.Agrawal(classification_function=1, seed=1).take(9000))
    X, y = [x for x, _ in rows], [v for _, v in rows]
    m = SGBDTClassifier(schema=AGRAWAL, seed=0, round_size=32, pool_rounds=pool_rounds,
                        max_active=5000, drift=False, warmup_rounds=0)
    seen = []
    for i, (xi, yi) in enumerate(zip(X, y, strict=True)):
        room = m.stream_room()[0]
        before = m.training_rounds
        m.learn_one(xi, yi)
        if m.training_rounds != before:
            seen.append(i + 1)
            assert room == 1                     # stream_room named this record
        else:
            assert room > 1
    assert seen == _intervals(9000, 32, pool_rounds, 5000)
    gaps = np.diff(seen)
    if pool_rounds is None:
        assert set(gaps) == {32}
    else:
        assert gaps[0] == 32 and gaps[-1] == 200  # 5000 / 25 once the pool could be full
        assert m.privacy_report()["round_interval"] == 200


def test_a_new_generation_restarts_the_schedule():
    X, y = _drifting(16_000, 8000)
    m = SGBDTClassifier(schema=AGRAWAL, seed=3, drift_window=300, pool_rounds=20,
                        max_active=6000, warmup_rounds=0)
    intervals = []
    for xi, yi in zip(X, y, strict=True):
        m.learn_one(xi, yi)
        intervals.append(m._round_interval())
    assert m.engine.generation >= 1
    assert max(intervals) == 300 and min(intervals[8000:]) == 32


def test_models_pickled_before_the_schedule_keep_a_round_every_round_size():
    m = SGBDTClassifier(schema=AGRAWAL, seed=0, pool_rounds=5)
    state = m.__dict__.copy()
    for name in ("pool_rounds", "warmup_rounds", "warmup_records", "split_after"):
        del state[name]
    old = SGBDTClassifier.__new__(SGBDTClassifier)
    old.__setstate__(pickle.loads(pickle.dumps(state)))
    assert old.pool_rounds is None and old._round_interval() == old._round_size == 32
    with pytest.raises(ValueError, match="pool_rounds"):
        SGBDTClassifier(schema=AGRAWAL, pool_rounds=0)


@pytest.mark.parametrize("subset,cut", [(False, True), (True, True), (False, False)])
def test_learning_a_predicted_batch_reuses_its_scores_bit_for_bit(subset, cut, monkeypatch):
    """The service predicts a batch and then learns it: learn_stream takes predict_many's
    encoded rows and raw scores instead of computing them again — and ends exactly where
    learning the same records without predicting them ends (rounds, a drift detection, pool,
    spend, forest). ``cut``: batches end where a round can happen, as the runner cuts them;
    without, rounds run inside a batch and its later records must be scored afresh."""
    from dpstream.models.boosting import sgbdt_stream
    X, y = _drifting(9_000, 3000)
    a = SGBDTClassifier(schema=AGRAWAL, seed=5, drift_window=300, pool_rounds=20)
    b = SGBDTClassifier(schema=AGRAWAL, seed=5, drift_window=300, pool_rounds=20)
    used = []
    real = sgbdt_stream.reuse

    def spy(m, xs):
        got = real(m, xs)
        used.append(got is not None)
        return got
    monkeypatch.setattr(sgbdt_stream, "reuse", spy)
    rng = np.random.default_rng(0)
    kept_X, kept_y = [], []
    i = 0
    while i < len(y):
        room, labeled = a.stream_room()
        k = min(int(rng.choice([1, 7, 40, 300])), len(y) - i)
        if cut:
            k = min(k, room, labeled or room)
        batch = [dict(x) for x in X[i:i + k]]
        a.predict_many(batch)
        keep = [j for j in range(k) if not subset or rng.random() < 0.8]
        a.learn_stream([batch[j] for j in keep], [y[i + j] for j in keep])
        kept_X += [X[i + j] for j in keep]
        kept_y += [y[i + j] for j in keep]
        i += k
    b.learn_stream(kept_X, kept_y)
    assert a.engine.generation >= 1 and a.training_rounds > 20
    assert sum(used) > 0.9 * len(used)   # the scores were taken, not recomputed
    _same(a, b)


def test_a_record_changed_after_its_prediction_is_encoded_and_scored_again():
    X, y = _drifting(2_000, 1_000)
    a = SGBDTClassifier(schema=AGRAWAL, seed=2, pool_rounds=20)
    b = SGBDTClassifier(schema=AGRAWAL, seed=2, pool_rounds=20)
    a.learn_stream(X[:1500], y[:1500])
    b.learn_stream(X[:1500], y[:1500])
    batch = [dict(x) for x in X[1500:1510]]
    a.predict_many(batch)
    batch[3]["age"] = 20.0 if batch[3]["age"] != 20.0 else 21.0   # changed in place
    a.learn_stream(batch, y[1500:1510])
    b.learn_stream([dict(x) for x in batch], y[1500:1510])
    _same(a, b)
    # and a batch that is not the predicted one (other dicts, equal values) is not reused
    from dpstream.models.boosting.sgbdt_stream import reuse
    a.predict_many(batch)
    assert reuse(a, [dict(x) for x in batch]) is None
    a.predict_many(batch)
    assert reuse(a, batch[2:]) is not None and reuse(a, batch[2:]) is None   # used once
