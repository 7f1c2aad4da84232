"""Delayed labels (issue 66): records held for label messages that come later, joined by id and
learned once at the label's position, bounded, checkpointed, against an independent oracle
(tests/delayed_stream.py)."""

from __future__ import annotations

import json
import random

import pytest
from delayed_stream import delayed_stream, oracle

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.stream import ADULT_SCHEMA
from dpstream.stream.labels import LABEL_COUNTERS, HeldRecords
from dpstream.stream.messages import LabelMessage, RecordValidator, RejectedRecord
from dpstream.stream.runner import Runner, describe

JOIN_KEYS = ("seen", "learned", "dead_letters", "unlabeled", *LABEL_COUNTERS)


def _counts(runner: Runner) -> dict:
    out = {k: runner.counters[k] for k in JOIN_KEYS}
    out["records_held"] = len(runner.held)
    return out


def _expected(messages: list[bytes], **bounds) -> dict:
    want = oracle(messages, **bounds)
    return {k: want.get(k, 0) for k in (*JOIN_KEYS, "records_held")}


def _records(messages: list[bytes], start: int = 0) -> list[SourceRecord]:
    return [SourceRecord(m, "t:0", i) for i, m in enumerate(messages) if i >= start]


def test_the_validator_reads_label_messages_and_words_each_malformed_one():
    v = RecordValidator(ADULT_SCHEMA)
    assert v.validate(b'{"id": "late-1", "y": true}') == LabelMessage("late-1", True)
    assert v.validate(b'{"id": 7, "y": 1}') == LabelMessage(7, True, 0, 1)   # coerced 0/1
    reasons = {}
    for raw in (b'{"y": true}', b'{"id": 3, "y": "maybe"}', b'{"id": 4, "y": true, "z": 1}',
                b'{"id": 5}', b'{"id": 6, "y": null}'):
        with pytest.raises(RejectedRecord) as exc:
            v.validate(raw)
        reasons[raw] = exc.value.reason
    assert reasons[b'{"y": true}'].startswith("label message: id is required")
    assert reasons[b'{"id": 3, "y": "maybe"}'] == "y: 'maybe' is not one of the declared classes"
    assert reasons[b'{"id": 4, "y": true, "z": 1}'].startswith("label message: unknown key 'z'")
    assert reasons[b'{"id": 5}'].startswith("x: Field required (a record holds x; a label")
    assert reasons[b'{"id": 6, "y": null}'] == reasons[b'{"id": 5}']
    # the batch validator gives every message the outcome validate gives it alone
    raws = [b'{"id": 1, "x": {"age": 30}}', b'{"id": 1, "y": false}', b'{"id": 5}']
    batch = v.validate_many(raws)
    assert batch.records[1] == LabelMessage(1, False)
    assert isinstance(batch.records[2], RejectedRecord)


@pytest.mark.parametrize("model, hold", [("sgbdt", None), ("rdt", None),
                                         ("median-forest", True)])
def test_every_label_joins_its_record_once_as_the_oracle_says(tmp_path, model, hold):
    """A stream with labels delayed up to 300 messages and out of order, records never
    labeled, unknown, repeated, full-record and malformed labels: the runner's counters are
    the oracle's, through the batched path and one record at a time."""
    messages = delayed_stream(2500, seed=1)
    want = _expected(messages, max_messages=400)
    got, models = [], []
    for batched in (True, False):
        runner = Runner.create(model, ADULT_SCHEMA, store=CheckpointStore(tmp_path / str(batched)),
                               epsilon=1.0, seed=0, hold_unlabeled=hold, held_messages=400)
        recs = _records(messages)
        if batched:
            for k in range(0, len(recs), 500):
                runner.process_many(recs[k:k + 500])
        else:
            for rec in recs:
                runner.process(rec)
        got.append(_counts(runner))
        models.append(runner.model)
        report = runner.model.privacy_report()
        learned_by_model = report.get("records_seen", report.get("records_learned"))
        if model == "sgbdt":   # the model's own count of the records it was given
            assert learned_by_model == want["learned"]
    assert got[0] == want, (got[0], want)
    assert got[1] == want
    # the batched path (rows of the batch held and joined) learns what one at a time learns
    probe = [json.loads(m)["x"] for m in messages[:300] if b'"x"' in m]
    assert ([models[0].predict_proba_one(x) for x in probe]
            == [models[1].predict_proba_one(x) for x in probe])
    assert want["labels_joined"] > 1000 and want["held_expired"] > 100
    assert min(want[k] for k in ("labels_unknown", "labels_repeated", "labels_expired")) > 0


def test_the_median_forest_learns_unlabeled_records_at_once_unless_told_to_hold(tmp_path):
    messages = [json.dumps({"id": i, "x": {"age": 20 + i}}).encode() for i in range(50)]
    runner = Runner.create("median-forest", ADULT_SCHEMA, store=CheckpointStore(tmp_path),
                           epsilon=1.0, seed=0)
    runner.process_many(_records(messages))
    assert runner.held is None and runner.counters["learned"] == 50
    runner.process(SourceRecord(b'{"id": 3, "y": true}', "t:0", 50))
    assert runner.counters["labels_unknown"] == 1 and runner.counters["learned"] == 50


def test_a_crash_anywhere_learns_each_record_once(tmp_path):
    """Checkpoints at random messages, a crash (the runner dropped) at random messages after
    them, the stream resumed from the checkpoint's positions: the same counters as the oracle,
    and the same model as a run without crashes (same seed, same draws)."""
    messages = delayed_stream(1500, seed=2)
    want = _expected(messages, max_messages=400)
    clean = Runner.create("sgbdt", ADULT_SCHEMA, store=CheckpointStore(tmp_path / "clean"),
                          epsilon=1.0, seed=0, held_messages=400)
    for rec in _records(messages):
        clean.process(rec)
    rng = random.Random(5)
    store_dir = tmp_path / "crashy"
    crashes = 0
    while True:
        store = CheckpointStore(store_dir)
        runner = Runner.create("sgbdt", ADULT_SCHEMA, store=store, epsilon=1.0, seed=0,
                               held_messages=400)
        start = runner.positions.get("t:0", 0)
        recs = _records(messages, start)
        save_at = rng.randrange(1, 300)
        crash_at = min(len(recs), save_at + rng.randrange(1, 300))
        for k, rec in enumerate(recs[:crash_at]):
            runner.process(rec)
            if k + 1 == save_at:
                runner.checkpoint()
        if crash_at == len(recs):
            break
        store.close()   # the crash: everything since the checkpoint is lost
        crashes += 1
    assert crashes >= 3
    assert _counts(runner) == want
    assert _counts(clean) == want
    X = [json.loads(m)["x"] for m in messages[:200] if b'"x"' in m]
    assert ([clean.model.predict_proba_one(x) for x in X]
            == [runner.model.predict_proba_one(x) for x in X])


def test_held_records_are_bounded_by_count_messages_and_seconds():
    held = HeldRecords(max_records=3, max_messages=None, max_seconds=10.0)
    for i in range(5):
        out = held.hold(("int", i), {"age": float(i)}, seen=i, wall=100.0 + i)
    assert [k for k, _ in out] == [("int", 1)] and list(held) == [("int", 2), ("int", 3),
                                                                 ("int", 4)]
    assert [k for k, _ in held.expire(seen=10**9, now=112.5)] == [("int", 2)]
    assert len(held.expire(seen=10**9, now=112.5)) == 0
    with pytest.raises(ValueError, match="max_records"):
        HeldRecords(max_records=0)
    with pytest.raises(ValueError, match="max_seconds"):
        HeldRecords(max_seconds=0)


def test_held_records_survive_a_checkpoint_and_a_smaller_cap(tmp_path):
    store = CheckpointStore(tmp_path / "ck")
    runner = Runner.create("sgbdt", ADULT_SCHEMA, store=store, epsilon=1.0, seed=0)
    for i in range(20):
        runner.process(SourceRecord(json.dumps({"id": i, "x": {"age": 30 + i}}).encode(),
                                    "t:0", i))
    runner.checkpoint()
    store.close()
    back = Runner.create("sgbdt", ADULT_SCHEMA, store=CheckpointStore(tmp_path / "ck"),
                         epsilon=1.0, seed=0, max_held=5)
    assert len(back.held) == 20 and back.held.max_records == 5
    assert describe(back.state())["records_held"] == 20
    back.process(SourceRecord(b'{"id": 19, "y": true}', "t:0", 20))
    assert back.counters["labels_joined"] == 1 and back.counters["learned"] == 1
    back.process(SourceRecord(b'{"id": 100, "x": {"age": 50}}', "t:0", 21))   # over the cap
    assert len(back.held) == 5 and back.counters["held_expired"] == 15
    back.checkpoint()
    back.store.close()
    with pytest.raises(ValueError, match="holds 5 records waiting for their labels"):
        Runner.create("sgbdt", ADULT_SCHEMA, store=CheckpointStore(tmp_path / "ck"),
                      epsilon=1.0, seed=0, hold_unlabeled=False)


def test_a_held_records_prediction_is_scored_when_its_label_comes(tmp_path):
    from dpstream.stream.runner import PrequentialScore

    score = PrequentialScore(True)
    runner = Runner.create("sgbdt", ADULT_SCHEMA, store=CheckpointStore(tmp_path), epsilon=1.0,
                           seed=0, scorer=score)
    runner.process(SourceRecord(b'{"id": "a", "x": {"age": 40}}', "t:0", 0))
    assert score.summary() is None
    runner.process(SourceRecord(b'{"id": "a", "y": true}', "t:0", 1))
    assert score.summary()["records"] == 1


def _rows(n: int, partitions: int = 2) -> HeldRecords:
    import numpy as np

    held = HeldRecords(max_records=max(100, 10 * n), max_messages=None)
    for i in range(n):
        held.hold(("int", i) if i % 3 else ("str", f"r{i}"),
                  (np.full(3, float(i)), np.array([i % 5, 1], dtype=np.int32)), seen=10 + 2 * i,
                  public=i % 4 == 0, partition=f"records:{i % partitions}", offset=i,
                  prediction=None if i % 2 else i % 7 == 0, wall=1000.0 + i)
    return held


def test_a_checkpoint_packs_held_records_as_arrays_and_restores_them_in_order():
    held = _rows(50)
    state = held.state()
    assert state["count"] == 50 and state["pack"]["numeric"].shape == (50, 3)
    back = HeldRecords.from_state(state)
    assert list(back) == list(held)
    for key in held:
        a, b = held._held[key], back._held[key]
        assert (a.public, a.partition, a.offset, a.seen, a.wall, a.prediction) == (
            b.public, b.partition, b.offset, b.seen, b.wall, b.prediction)
        assert (a.x[0] == b.x[0]).all() and (a.x[1] == b.x[1]).all()
    legacy = {"max_records": 9, "max_messages": 5, "max_seconds": None,   # (rows: older format)
              "held": [["int", 1, [[0.5, 1.0], [2]], False, "records:0", 4, 7, 1.5, None]]}
    old = HeldRecords.from_state(legacy)
    assert list(old) == [("int", 1)] and old.max_messages == 5


def test_a_hand_over_moves_a_partitions_records_with_their_ages():
    held = _rows(40)
    packs = held.hand_over({"records:1"}, seen=200)
    assert set(packs) == {"records:1"} and len(held) == 20
    assert all(e.partition == "records:0" for e in held._held.values())
    other = _rows(0)
    for i in range(5):   # the new owner holds records of its own, newer ones too
        other.hold(("int", 1000 + i), held._held[("int", 2)].x, seen=300 + 100 * i,
                   partition="records:0", offset=i)
    expired = other.adopt(packs["records:1"], "records:1", seen=500)
    assert expired == [] and len(other) == 25
    seen = [e.seen for e in other._held.values()]
    assert seen == sorted(seen)   # oldest first: expiry by messages reads the front
    moved = other._held[("int", 1)]
    assert moved.seen == 500 - (200 - 12) and moved.offset == 1 and moved.partition == "records:1"
    small = HeldRecords(max_records=3)
    gone = small.adopt(held.hand_over({"records:0"}, seen=200)["records:0"], "records:0",
                       seen=200)
    assert len(small) == 3 and [k for k, _ in gone][:2] == [("str", "r0"), ("int", 2)]
