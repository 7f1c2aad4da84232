"""The batched record path gives exactly what the record-by-record path gives.

* :meth:`RecordValidator.validate_many` against :meth:`RecordValidator.validate` on generated
  messages (good ones and every kind of bad one): the same record or the same reason, and the
  batch's feature columns equal to the encoding of the validated record;
* :meth:`Runner.process_many` on raw messages (bad ones, duplicates, unlabeled records and a
  re-fetch among them) against :meth:`Runner.process` one at a time: the same model
  (predictions and privacy report), counters, positions, dead letters and predictions.
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.models.encoding import EncodedRows, RecordEncoder
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.messages import RecordValidator, RejectedRecord
from dpstream.stream.runner import Runner

MIXED = {"features": {"age": {"type": "numeric", "min": 17, "max": 90},
                      "w": {"type": "numeric", "min": -1.5, "max": 1.5, "required": True},
                      "sex": {"type": "categorical", "values": ["F", "M"]},
                      "n": {"type": "categorical", "values": [1, 2, True]},
                      "3": {"type": "categorical", "values": ["a", "b"]}},
         "target": {"type": "categorical", "values": ["lo", 1, 2.0, False]}}
NUMERIC_TARGET = {"features": {"age": {"type": "numeric", "min": 17, "max": 90}},
                  "target": {"type": "numeric", "min": 0, "max": 10}}
BINARY = {"features": {"age": {"type": "numeric", "min": 17, "max": 90}},
          "target": {"type": "binary", "values": [False, True]}}

_odd = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
                 st.floats(allow_nan=False, allow_infinity=False),
                 st.sampled_from([1e400, -0.0, 2 ** 63, 2 ** 64, 9.3e18, "F", "M", "a", "lo",
                                  "x" * 300, "é", 1, 2, 2.0, 0, 1.0, True, False, 95, 10.5]),
                 st.text(max_size=4), st.lists(st.integers(), max_size=2))
_keys = st.sampled_from(["age", "w", "sex", "n", "3", "zip", 3])


@st.composite
def messages(draw):
    """A message as bytes: mostly well formed, with every field liable to be odd."""
    msg: dict = {}
    if draw(st.integers(0, 9)):
        msg["id"] = draw(st.one_of(st.integers(-(2 ** 66), 2 ** 66), st.text(max_size=6),
                                   st.sampled_from(["r" * 300, 10 ** 30, 1.5, True, None])))
    x = {}
    for key in draw(st.lists(_keys, max_size=7)):
        x[key] = draw(_odd)
    if draw(st.integers(0, 3)):
        x.setdefault("w", draw(st.floats(-3, 3)))
    msg["x"] = x if draw(st.integers(0, 15)) else draw(_odd)
    if draw(st.booleans()):
        msg["y"] = draw(_odd)
    if not draw(st.integers(0, 7)):
        msg["public"] = draw(_odd)
    if not draw(st.integers(0, 15)):
        msg["extra"] = 1
    text = json.dumps(msg, allow_nan=True)
    cut = draw(st.integers(0, 30))
    if cut == 0:
        text = text[:len(text) // 2]
    elif cut == 1:
        text = text.replace("0", "NaN", 1)
    raw = text.encode("utf-8", "surrogatepass")
    return raw if draw(st.integers(0, 20)) else raw.decode("utf-8", "replace")


def _agree(schema, values, **policy) -> None:
    validator = RecordValidator(schema, max_id_bytes=20, **policy)
    batch = validator.validate_many(values)
    enc = RecordEncoder(validator.schema)
    assert len(batch.records) == len(values)
    for i, raw in enumerate(values):
        try:
            want = validator.validate(raw)
        except RejectedRecord as exc:
            got = batch.records[i]
            assert isinstance(got, RejectedRecord), (raw, got)
            assert (got.reason, got.id) == (exc.reason, exc.id)
            continue
        got = batch.records[i]
        assert not isinstance(got, RejectedRecord), (raw, got.reason)
        assert (got.id, got.public, got.clipped) == (want.id, want.public, want.clipped)
        assert (got.missing, got.coerced) == (want.missing, want.coerced), raw
        assert type(got.y) is type(want.y) and got.y == want.y, (raw, got.y, want.y)
        assert type(got.id) is type(want.id)
        compact = enc.compact(enc.encode_many([want.x]))
        np.testing.assert_array_equal(batch.numeric[i], compact["numeric"][0])
        np.testing.assert_array_equal(batch.codes[i], compact["codes"][0])


@settings(max_examples=150, deadline=None)
@given(st.lists(messages(), max_size=25), st.sampled_from(["clip", "error"]),
       st.sampled_from(["error", "ignore"]))
def test_a_batch_gets_each_message_s_own_outcome(values, out, unknown):
    _agree(MIXED, values, on_out_of_domain=out, on_unknown=unknown)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({"id": st.integers(0, 99), "x": st.fixed_dictionaries(
    {"age": st.one_of(st.integers(0, 120), st.floats(-1e3, 1e3))}),
    "y": st.one_of(st.none(), st.integers(-5, 15), st.floats(-20, 20), st.booleans(),
                   st.sampled_from([0, 1, 1.0, 0.0, 2, "1"]))}), max_size=30),
       st.sampled_from(["clip", "error"]))
def test_labels_numeric_and_binary_targets_agree(msgs, out):
    values = [json.dumps(m).encode() for m in msgs]
    _agree(NUMERIC_TARGET, values, on_out_of_domain=out)
    _agree(BINARY, values, on_out_of_domain=out)


def test_adult_messages_take_the_column_path():
    """Well-formed Adult messages are all decided by the columns (their records carry no
    ``x``), and agree with the record path."""
    X, y, _ = load_adult("train")
    values = [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(500)]
    validator = RecordValidator(ADULT_SCHEMA)
    batch = validator.validate_many(values)
    assert all(r.x is None for r in batch.records)
    _agree(ADULT_SCHEMA, values)


def test_the_column_path_keeps_missing_values_and_clips_out_of_domain_ones():
    validator = RecordValidator(MIXED)
    batch = validator.validate_many([
        b'{"id": 1, "x": {"age": 95, "w": -9, "sex": null}, "y": "lo"}',
        b'{"id": "b", "x": {"w": 0.5, "n": 2}, "y": 2, "public": true}'])
    first, second = batch.records
    assert (first.clipped, first.y, first.x) == (2, "lo", None)
    assert (second.id, second.y, second.public, second.x) == ("b", 2.0, True, {"w": 0.5, "n": 2})
    assert batch.numeric.tolist()[0] == [90.0, -1.5]
    assert math.isnan(batch.numeric[1, 0]) and batch.codes.tolist() == [[-1, -1, -1], [-1, 1, -1]]


def _stream(n: int, seed: int) -> list[SourceRecord]:
    """Adult messages with bad ones, duplicate ids, unlabeled records, missing features,
    0 / 1 labels and a re-fetch."""
    X, y, _ = load_adult("train")
    rng = random.Random(seed)
    out, offset = [], 0
    for i in range(n):
        msg = {"id": i, "x": dict(X[i]), "y": y[i]}
        roll = rng.random()
        if roll < 0.02:
            msg["x"]["age"] = "old"
        elif roll < 0.04:
            msg["id"] = max(0, i - rng.randint(1, 50))   # a duplicate id
        elif roll < 0.08:
            del msg["y"]
        elif roll < 0.10:
            msg["x"]["age"] = 150
        elif roll < 0.12:
            msg["x"].pop("education", None)
            msg["x"]["sex"] = None
        elif roll < 0.14:
            msg["y"] = int(msg["y"])   # 0 / 1 for false / true: coerced
        raw = json.dumps(msg).encode() if roll > 0.01 else b'{"id": 3, "x": {'
        out.append(SourceRecord(raw, "t:0", offset, raw=raw))
        offset += 1
    return out[:n // 2] + out[n // 2 - 40:]   # the last 40 records again: a re-fetch


class _Sink:
    def __init__(self):
        self.sent = []

    def send_json(self, value, key=None):
        self.sent.append((value, key))

    def send(self, raw, reason, position, key=None):
        self.sent.append((raw, reason, position, key))

    def flush(self):
        pass


@pytest.mark.parametrize("model", ["median-forest", "sgbdt", "greedy-forest"])
def test_process_many_is_process_one_at_a_time(tmp_path, model):
    recs = _stream(3000, seed=1)
    runs = []
    for batched in (False, True):
        store = CheckpointStore(tmp_path / f"{model}-{batched}")
        preds, dead = _Sink(), _Sink()
        runner = Runner.create(model, ADULT_SCHEMA, store=store, epsilon=1.0, seed=0,
                               predictions=preds, dead_letters=dead, checkpoint_interval=3600)
        if batched:
            for a in range(0, len(recs), 700):
                runner.process_many(recs[a:a + 700])
        else:
            for rec in recs:
                runner.process(rec)
        X, _, _ = load_adult("test")
        runs.append((list(runner.model.predict_many(X[:400])), runner.model.privacy_report(),
                     dict(runner.counters), dict(runner.positions), preds.sent, dead.sent))
        store.close()
    one, many = runs
    assert one[0] == many[0] and one[1] == many[1]
    assert one[2] == many[2] and one[3] == many[3]
    assert one[4] == many[4] and one[5] == many[5]
    assert one[2]["dead_letters"] > 50 and one[2]["duplicates"] > 10
    assert one[2]["missing_features"] > 50 and one[2]["coerced_labels"] > 25


def test_encoded_rows_must_match_the_encoder_s_columns():
    enc = RecordEncoder(BINARY)
    other = RecordEncoder(MIXED)
    rows = EncodedRows(other.encode_many([{"w": 0.0}]), other.columns)
    with pytest.raises(ValueError, match="other columns"):
        enc.encode_many(rows)
    with pytest.raises(ValueError, match="2-D array of 2 columns"):
        EncodedRows(np.zeros((3, 4)), enc.columns)


def test_stage_seconds_account_for_the_batched_path(tmp_path):
    """``Runner.stage_seconds`` (the service benchmark's CPU by stage) collects every stage
    of the batched path, and nothing when it is not set."""
    from dpstream.stream.runner import PrequentialScore

    recs = _stream(1200, seed=2)
    store = CheckpointStore(tmp_path)
    runner = Runner.create("median-forest", ADULT_SCHEMA, store=store, epsilon=1.0, seed=0,
                           scorer=PrequentialScore(True), checkpoint_interval=0.0)
    runner.process_many(recs[:100])
    assert runner.stage_seconds is None
    runner.stage_seconds = {}
    for a in range(100, len(recs), 500):
        runner.process_many(recs[a:a + 500])
        runner.maybe_checkpoint()
    store.close()
    stages = runner.stage_seconds
    assert {"validate", "bookkeeping", "encode", "predict", "publish", "learn",
            "checkpoint"} <= set(stages)
    assert all(v >= 0.0 for v in stages.values()) and stages["learn"] > 0.0


def test_a_category_declared_as_both_1_and_true_encodes_each_to_its_own_column():
    """``True == 1``: the encoder told them apart only by one shared dictionary key, and
    refused ``1`` when the schema declared both (found by the batch test above)."""
    enc = RecordEncoder(MIXED)
    start = enc.columns.index("n=1")
    assert enc.columns[start:start + 3] == ["n=1", "n=2", "n=True"]
    assert enc.encode_one({"w": 0.0, "n": 1})[start:start + 3].tolist() == [0.0, 1.0, 1.0]
    assert enc.encode_one({"w": 0.0, "n": True})[start:start + 3].tolist() == [1.0, 1.0, 0.0]
