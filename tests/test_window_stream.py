"""Stream batches (models/windows/window_stream.py, Runner.process_many): many records learned with
exactly the result of one record at a time, for every window forest and through the runner."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sinks import RecordingSink
from test_window_policy import MODELS
from test_window_policy import _drifting as _drifting_rows

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.connectors.safe_state import decode, encode
from dpstream.models import GreedyForestClassifier, MedianForestClassifier, SGBDTClassifier
from dpstream.models.drift import DPDriftSignal
from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA as AGRAWAL
from dpstream.stream.runner import Runner


def _drifting(n: int, at: int, seed: int = 1) -> tuple[list, list]:
    rows = _drifting_rows(n, at, seed)   # Agrawal 4 -> 0 at record ``at``
    return [x for x, _ in rows], [y for _, y in rows]


def _same(a, b, probe: list) -> None:
    assert a.privacy_report() == b.privacy_report()
    assert a._drift.history == b._drift.history
    rows = [np.array(m._buffer_X, dtype=float).reshape(len(m._buffer_y), m._encoder.n_columns)
            for m in (a, b)]
    assert np.array_equal(*rows, equal_nan=True)
    assert a._buffer_y == b._buffer_y and a._buffer_public == b._buffer_public
    assert list(a.predict_many(probe)) == list(b.predict_many(probe))


@pytest.mark.parametrize("cls", MODELS)
def test_learn_stream_is_learn_one_record_by_record(cls):
    """Same windows, drift releases, generations, ledger and predictions, bit for bit, on a
    drifting stream with unlabeled and public records, in batches of random sizes; then a
    checkpoint of the open window (rows buffered as array views) and both go on."""
    X, y = _drifting(14_000, 6000)
    y = [None if i % 7 == 3 else v for i, v in enumerate(y)]
    public = [i % 11 == 5 for i in range(len(y))]
    kw = {"n_trees": 5} if cls is GreedyForestClassifier else {}
    a = cls(schema=AGRAWAL, epsilon=1.0, window_size=3000, seed=4, drift_window=200, **kw)
    b = cls(schema=AGRAWAL, epsilon=1.0, window_size=3000, seed=4, drift_window=200, **kw)
    for xi, yi, pi in zip(X, y, public, strict=True):
        a.learn_one(xi, yi, public=pi)
    rng = np.random.default_rng(0)
    i = 0
    while i < len(X):
        k = int(rng.integers(1, 1500))
        b.learn_stream(X[i:i + k], y[i:i + k], public=public[i:i + k])
        i += k
    assert a.privacy_report()["drift"]["changes"] >= 1     # the test covers a detection
    assert a.windows_closed >= 5 and len(a._buffer_y) > 0
    _same(a, b, X[:500])
    # a checkpoint of the open window: its rows one array (raw bytes, not per-row lists)
    assert b.__getstate__()["_buffer_X"].shape == (len(b._buffer_y), b._encoder.n_columns)
    tree, arrays = encode(b)
    c = decode(json.loads(json.dumps(tree)), arrays)
    assert len(c._buffer_X) == len(b._buffer_X) and all(
        np.array_equal(r, s, equal_nan=True) for r, s in zip(c._buffer_X, b._buffer_X,
                                                              strict=True))
    more_X, more_y = _drifting(4000, 2000, seed=9)
    for xi, yi in zip(more_X, more_y, strict=True):
        a.learn_one(xi, yi)
    c.learn_stream(more_X, more_y)
    _same(a, c, X[:500])


@pytest.mark.parametrize("cls", [MedianForestClassifier, SGBDTClassifier])
def test_a_bad_record_in_a_stream_batch_changes_nothing(cls):
    """Window forests and S-GBDT alike: the batch is encoded before anything is learned."""
    X, y = _drifting(600, 300)
    m = cls(schema=AGRAWAL, epsilon=1.0, seed=0, on_out_of_domain="error")
    bad = dict(X[3], salary=-5.0)             # outside the public domain
    with pytest.raises(Exception, match="salary"):
        m.learn_stream(X[:3] + [bad] + X[4:], y)
    assert m.records_seen == 0 and m._buffer_y == [] and m._drift.pending == 0
    with pytest.raises(ValueError, match="labels"):
        m.learn_stream(X[:5], y[:4])


def test_drift_update_many_stops_at_the_detecting_loss():
    losses = np.r_[np.zeros(3000), np.ones(2000), np.full(500, 0.5)]
    a, b = DPDriftSignal(0.5, window=200, seed=1), DPDriftSignal(0.5, window=200, seed=1)
    hits, i = [], 0
    while i < len(losses):
        k = a.update_many(losses[i:i + 777])
        if k is None:
            i += 777
        else:
            hits.append(i + k)
            i += k + 1
    assert hits == [j for j, v in enumerate(losses) if b.update(v)] and hits
    assert a.history == b.history and a.pending == b.pending


def _records(n: int) -> list[SourceRecord]:
    X, y = _drifting(n, n // 2)
    out = []
    for i in range(n):
        if i % 97 == 5:
            raw = b'{"id": 1, "x": {"salary": "lots"}}'             # a dead letter
        elif i % 89 == 7:
            raw = json.dumps({"id": i - 1, "x": X[i], "y": y[i]}).encode()   # a duplicate id
        else:
            raw = json.dumps({"id": i, "x": X[i], "y": None if i % 13 == 0 else y[i]}).encode()
        out.append(SourceRecord(raw, "t:0", i, raw=raw))
    return out


@pytest.mark.parametrize("name", ["rdt", "sgbdt"])
def test_process_many_gives_the_state_of_process_one_by_one(tmp_path, name):
    recs = _records(9000)
    one = Runner.create(name, AGRAWAL, store=CheckpointStore(tmp_path / "a"), epsilon=1.0,
                        seed=2)
    many = Runner.create(name, AGRAWAL, store=CheckpointStore(tmp_path / "b"), epsilon=1.0,
                         seed=2)
    for rec in recs:
        one.process(rec)
    for start in range(0, len(recs), 500):
        many.process_many(recs[start:start + 500])
    many.process_many(recs[4000:4600])                     # a re-fetch after a seek: skipped
    assert one.counters == many.counters and one.positions == many.positions
    assert one.counters["dead_letters"] > 50 and one.counters["duplicates"] > 50
    assert list(one.ids) == list(many.ids)
    assert one.model.privacy_report() == many.model.privacy_report()
    for r in (one, many):
        r.store.close()


@pytest.mark.parametrize("name", ["rdt", "sgbdt"])
def test_process_many_sends_the_predictions_of_process_one_by_one(tmp_path, name):
    """With a predictions sink the batch goes in segments that end where a round can happen:
    every prediction is the one record-by-record processing sends (made after every window
    closed before its record), including across a drift detection, and a checkpoint follows
    each round."""
    recs = _records(9000)
    sent, reports, saves = [], [], []
    for batched in (False, True):
        sink = RecordingSink()
        runner = Runner.create(name, AGRAWAL, store=CheckpointStore(tmp_path / str(batched)),
                               epsilon=1.0, seed=0, predictions=sink,
                               params={"drift_window": 300} if name == "sgbdt" else None)
        if batched:
            for start in range(0, len(recs), 700):
                runner.process_many(recs[start:start + 700])
        else:
            for rec in recs:
                runner.process(rec)
        # a checkpoint after each round, and S-GBDT's after each drift release (one when
        # both come with one record: tests/test_generation_checkpoint.py)
        epoch = getattr(runner.model, "release_epoch", runner.model.training_rounds)
        assert runner.model.training_rounds <= runner.counters["checkpoints"] <= epoch
        assert runner.model.training_rounds >= 3
        saves.append(runner.counters["checkpoints"])
        sent.append(sink.sent)
        reports.append(runner.model.privacy_report())
        runner.store.close()
    assert reports[0]["drift"]["changes"] >= 1              # a detection inside a batch
    assert sent[0] == sent[1] and len(sent[0]) > 8000 and saves[0] == saves[1]
    assert reports[0] == reports[1]
