"""File replay, the record validator, checkpoints and the runner — real files, no broker."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from dpstream.connectors import (
    CheckpointError,
    CheckpointLocked,
    CheckpointStore,
    FileSource,
    SourceError,
    SourceRecord,
)
from dpstream.stream import ABALONE_SCHEMA, ADULT_SCHEMA, load_abalone, load_adult
from dpstream.stream.messages import RecordValidator, RejectedRecord
from dpstream.stream.runner import Runner, build_model
from dpstream.stream.service import replay

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]


# ------------------------------------------------------------------ validator
@pytest.mark.parametrize("raw, reason", [
    (b'{"id": 1, "x": {"age": 4', "unparsable JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[1, 2]", "a message is a JSON object"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"x": {"age": 40}}', "id: Field required"),
    (b'{"id": 1}', "x: Field required"),
    (b'{"id": 1.5, "x": {}}', "id"),
    (b'{"id": 1, "x": {}, "extra": 1}', "message: unknown key 'extra'"),
    (b'{"id": 1, "x": {"colour": "red"}}', "x.colour: unknown feature"),
    (b'{"id": 1, "x": {"age": "old"}}', "x.age: expected a number, got str"),
    (b'{"id": 1, "x": {"age": true}}', "x.age: expected a number, got bool"),
    (b'{"id": 1, "x": {"age": NaN}}', "unparsable JSON: NaN is not a JSON value"),
    (b'{"id": 1, "x": {"age": 1e999}}', "x.age: inf is not a finite number"),
    (b'{"id": 1, "x": {"age": 1' + b"0" * 400 + b'}}', "is not a finite number"),
    (b'{"id": 1, "x": {"sex": "Robot"}}', "x.sex: 'Robot' is not one of the declared categories"),
    (b'{"id": 1, "x": {"sex": 1}}', "x.sex: 1 is not one of the declared categories"),
    (b'{"id": 1, "x": {}, "y": "rich"}', "y: 'rich' is not one of the declared classes"),
    (b'{"id": 1, "x": {}, "y": 2}', "y: 2 is not one of the declared classes"),
    (b'{"id": 1, "x": {}, "public": 1}', "public: Input should be a valid boolean"),
    (b'{"id": 1, "x": []}', "x: Input should be a valid dictionary"),
])
def test_validator_rejects_with_a_reason(raw, reason):
    with pytest.raises(RejectedRecord) as info:
        RecordValidator(ADULT_SCHEMA).validate(raw)
    assert reason in info.value.reason


def test_validator_clips_numbers_and_keeps_missing_and_unlabeled():
    v = RecordValidator(ADULT_SCHEMA)
    r = v.validate({"id": "a", "x": {"age": 120, "fnlwgt": -5, "sex": "Male", "race": None}})
    assert r.x == {"age": 90.0, "fnlwgt": 0.0, "sex": "Male"} and r.clipped == 2
    assert r.y is None and not r.labeled and r.public is False
    big = v.validate(b'{"id": 2, "x": {"age": 9007199254740993, "capital-gain": 7}}')
    assert big.x == {"age": 90.0, "capital-gain": 7.0} and big.clipped == 1
    reg = RecordValidator(ABALONE_SCHEMA).validate({"id": 1, "x": {"sex": "M"}, "y": 40})
    assert reg.y == 29.0 and reg.clipped == 1             # a numeric label is clipped too


def test_required_features_are_enforced():
    schema = ADULT_SCHEMA.model_dump()
    schema["features"]["age"]["required"] = True
    v = RecordValidator(schema)
    with pytest.raises(RejectedRecord, match="x.age: required feature is missing"):
        v.validate({"id": 1, "x": {"sex": "Male"}, "y": True})
    with pytest.raises(RejectedRecord, match="x.age: required"):
        v.validate({"id": 1, "x": {"age": None}, "y": True})
    assert v.validate({"id": 1, "x": {"age": 30}, "y": True}).x == {"age": 30.0}


def test_every_valid_record_is_accepted_by_the_model():
    """What the validator lets through (after clipping), the model's encoder accepts."""
    v = RecordValidator(ADULT_SCHEMA)
    model = build_model("sgbdt", ADULT_SCHEMA, epsilon=1.0, seed=0)
    X, y, _ = load_adult("test")
    rng = np.random.default_rng(0)
    for i in rng.integers(0, len(X), 300):
        x = dict(X[i])
        x["age"] = float(x["age"]) * rng.choice([0.1, 1.0, 3.0])   # some out of the domain
        r = v.validate({"id": int(i), "x": x, "y": y[i]})
        model.learn_one(r.x, r.y)
    assert model.records_seen == 300


# ------------------------------------------------------------------ files
def _jsonl_lines(n: int) -> list[bytes]:
    X, y, _ = load_adult("train")
    return [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(n)]


def test_file_source_handles_bom_crlf_blank_lines_and_a_truncated_last_line(tmp_path):
    lines = _jsonl_lines(5)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(lines[:3]) + b"\r\n\r\n" + lines[3]
                     + b"\r\n" + lines[4][:25])
    recs = list(FileSource(path))
    assert [r.offset for r in recs] == [0, 1, 2, 4, 5]            # line 3 was blank
    v = RecordValidator(ADULT_SCHEMA)
    assert [v.validate(r.value).id for r in recs[:4]] == [0, 1, 2, 3]
    with pytest.raises(RejectedRecord, match="unparsable JSON"):
        v.validate(recs[4].value)
    assert recs[4].raw == lines[4][:25]


def test_csv_rows_with_the_wrong_field_count_carry_a_reason(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("sex,length,rings\nM,0.4,9\nF,0.5\nI,0.3,7,extra\n", encoding="utf-8")
    recs = list(FileSource(path))
    assert recs[0].value == {"sex": "M", "length": "0.4", "rings": "9"}
    assert recs[1].value is None and "2 fields" in recs[1].meta["error"]
    assert recs[2].value is None and "4 fields" in recs[2].meta["error"]


def test_a_gzip_file_cut_short_is_a_clear_error_after_its_complete_lines(tmp_path):
    lines = _jsonl_lines(2000)
    data = gzip.compress(b"\n".join(lines) + b"\n")
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    seen = []
    with pytest.raises(SourceError, match="cut.jsonl.gz: compressed data ends early"):
        for r in FileSource(path):
            seen.append(r)
    assert 0 < len(seen) < 2000
    v = RecordValidator(ADULT_SCHEMA)
    assert [v.validate(r.value).id for r in seen] == list(range(len(seen)))   # all complete


def test_replay_resumes_and_learns_nothing_twice(tmp_path):
    lines = _jsonl_lines(1500)
    lines[100] = b'{"id": "bad", "x": {"age": "x"}}'
    data = gzip.compress(b"\n".join(lines) + b"\n")
    cut = tmp_path / "part.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    ck = tmp_path / "ck"
    first = replay(str(cut), schema=ADULT_SCHEMA, epsilon=1.0, checkpoint_dir=str(ck), seed=0)
    assert first["error"] and "ends early" in first["error"]
    done = first["records_seen"]
    assert 100 < done < 1500 and first["dead_letters"] == 1
    whole = tmp_path / "part.jsonl.gz"          # the producer rewrites the complete file
    whole.write_bytes(data)
    second = replay(str(whole), schema=ADULT_SCHEMA, epsilon=1.0, checkpoint_dir=str(ck),
                    seed=0)
    assert second["error"] is None
    assert second["records_this_run"] == 1500 - done
    assert (second["records_seen"], second["records_learned"]) == (1500, 1499)
    assert second["privacy"]["records_seen"] == 1499
    third = replay(str(whole), schema=ADULT_SCHEMA, epsilon=1.0, checkpoint_dir=str(ck), seed=0)
    assert third["records_this_run"] == 0 and third["records_learned"] == 1499
    dead = [json.loads(x) for x in (ck / "dead-letters.jsonl").read_text().splitlines()]
    assert len(dead) == 1 and dead[0]["position"]["offset"] == 100
    assert "x.age: expected a number" in dead[0]["reason"]


def test_replay_of_a_csv_file_parses_by_the_schema(tmp_path):
    X, y, _ = load_abalone()
    path = tmp_path / "abalone.csv"
    header = list(X[0]) + ["rings"]
    rows = [",".join(str(r[k]) for k in X[0]) + f",{t}" for r, t in zip(X, y, strict=True)]
    rows[5] = "M,abc,0.3,0.1,0.5,0.2,0.1,0.1,9"           # not a number
    path.write_text("\r\n".join([",".join(header), *rows]) + "\r\n", encoding="utf-8-sig")
    res = replay(str(path), schema=ABALONE_SCHEMA, epsilon=1.0, label="rings", seed=0)
    assert (res["records_seen"], res["records_learned"], res["dead_letters"]) == (
        len(X), len(X) - 1, 1)


def test_replay_command_prints_json_and_exits_nonzero_on_a_broken_source(tmp_path):
    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    lines = _jsonl_lines(300)
    data = gzip.compress(b"\n".join(lines))
    (tmp_path / "cut.jsonl.gz").write_bytes(data[:-20])
    out = subprocess.run([*DPSTREAM, "replay", "--source", str(tmp_path / "cut.jsonl.gz"),
                          "--schema", str(schema), "--epsilon", "1", "--json"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1
    res = json.loads(out.stdout)
    assert res["error"] and res["records_learned"] == res["records_seen"] > 0
    missing = subprocess.run([*DPSTREAM, "replay", "--source", str(tmp_path / "none.jsonl"),
                              "--schema", str(schema), "--epsilon", "1"],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "no such file" in missing.stderr


# ------------------------------------------------------------------ checkpoints
def test_checkpoint_is_atomic_locked_and_checked(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save({"n": 1})
    with pytest.raises(CheckpointLocked, match="in use by another dpstream process"):
        CheckpointStore(tmp_path)
    store.save({"n": 2})
    assert store.load() == {"n": 2, "written": store.load()["written"]}
    assert not (tmp_path / "checkpoint.tmp").exists()
    store.close()
    CheckpointStore(tmp_path).close()                     # the lock was released
    data = (tmp_path / "checkpoint.dpck").read_bytes()
    (tmp_path / "checkpoint.dpck").write_bytes(data[:-3])  # truncated
    with pytest.raises(CheckpointError, match="truncated"):
        CheckpointStore.read(tmp_path)
    (tmp_path / "checkpoint.dpck").write_bytes(b"hello\n")
    with pytest.raises(CheckpointError, match="not a dpstream checkpoint"):
        CheckpointStore.read(tmp_path)


def test_a_killed_holder_releases_the_lock(tmp_path):
    code = (f"from dpstream.connectors import CheckpointStore; import os, time; "
            f"s = CheckpointStore({str(tmp_path)!r}); print('locked', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    with pytest.raises(CheckpointLocked):
        CheckpointStore(tmp_path)
    proc.kill()
    proc.wait()
    CheckpointStore(tmp_path).close()


def test_resuming_under_other_settings_is_refused(tmp_path):
    store = CheckpointStore(tmp_path)
    runner = Runner.create("sgbdt", ADULT_SCHEMA, store=store, epsilon=1.0, seed=0)
    runner.process(SourceRecord(b'{"id": 1, "x": {"age": 30}, "y": true}', "t:0", 0))
    runner.checkpoint()
    with pytest.raises(ValueError, match="epsilon 1.0 \\(asked: 0.5\\)"):
        Runner.create("sgbdt", ADULT_SCHEMA, store=store, epsilon=0.5)
    with pytest.raises(ValueError, match="a different schema"):
        Runner.create("sgbdt", ABALONE_SCHEMA, store=store, epsilon=1.0)
    again = Runner.create("sgbdt", ADULT_SCHEMA, store=store, epsilon=1.0)
    assert again.counters["learned"] == 1 and again.positions == {"t:0": 1}
    store.close()


# (S-GBDT without its young phase, whose first rounds come with each arrival: these tests
# count rounds of a fixed size)
@pytest.mark.parametrize("model, params", [("sgbdt", {"round_size": 50, "warmup_rounds": 0}),
                                           ("median-forest", {"window_size": 50, "n_trees": 2}),
                                           ("random-forest", {"window_size": 50, "n_trees": 2}),
                                           ("rdt", {"window_size": 50, "n_trees": 2}),
                                           ("greedy-forest", {"window_size": 50, "n_trees": 2})])
def test_runner_checkpoints_after_each_round_when_it_publishes_predictions(tmp_path, model,
                                                                           params):
    class Sink:
        def __init__(self):
            self.sent = []

        def send_json(self, value, key=None):
            self.sent.append(value)

        def flush(self):
            pass

    store = CheckpointStore(tmp_path)
    sink = Sink()
    runner = Runner.create(model, ADULT_SCHEMA, store=store, epsilon=1.0, seed=0,
                           params=params, predictions=sink, checkpoint_interval=3600)
    X, y, _ = load_adult("train")
    for i in range(120):
        label = y[i] if i % 4 else None     # the median forest learns unlabeled records too
        runner.process(SourceRecord({"id": i, "x": X[i], "y": label}, "f", i))
        state = store.load()
        if runner.model.training_rounds:
            # the checkpoint on disk already holds every tree a prediction could use
            assert state["model"].training_rounds == runner.model.training_rounds
            assert state["model"].predict_one(X[200]) == runner.model.predict_one(X[200])
    rounds = 120 // 50   # unlabeled messages count in S-GBDT's rounds too (issue 63)
    assert runner.model.training_rounds == rounds
    assert runner.counters["checkpoints"] == rounds and len(sink.sent) == 120
    assert runner.counters["unlabeled"] == 30
    store.close()


class _ListSink:
    def __init__(self, fail_after: int | None = None):
        self.sent: list = []
        self.fail_after = fail_after

    def send_json(self, value, key=None):
        if self.fail_after is not None and len(self.sent) >= self.fail_after:
            raise ConnectionError("the broker went away")
        self.sent.append((value, key))

    def flush(self):
        pass


@pytest.mark.parametrize("batched", [False, True])
def test_held_predictions_leave_only_after_the_checkpoint_of_their_trees(tmp_path, batched):
    """hold_predictions: no per-round checkpoint; a prediction made with trees newer than
    the checkpoint on disk waits in the outbox, which the next checkpoint saves and then
    sends; every record still gets exactly one prediction."""
    store = CheckpointStore(tmp_path)
    sink = _ListSink()
    runner = Runner.create("sgbdt", ADULT_SCHEMA, store=store, epsilon=1.0, seed=0,
                           params={"round_size": 50, "warmup_rounds": 0}, predictions=sink,
                           checkpoint_interval=3600, hold_predictions=True)
    X, y, _ = load_adult("train")
    recs = [SourceRecord({"id": i, "x": X[i], "y": y[i]}, "f", i) for i in range(230)]
    if batched:
        for a in range(0, 230, 70):
            runner.process_many(recs[a:a + 70])
    else:
        for rec in recs:
            runner.process(rec)
    assert runner.model.training_rounds == 4 and runner.counters["checkpoints"] == 0
    # predicted before the first round (no trees yet, nothing unsaved): sent at once
    assert len(sink.sent) == 50 and len(runner.outbox) == 180
    runner.checkpoint()
    assert len(sink.sent) == 230 and runner.outbox == []
    assert [m["offset"] for m, _ in sink.sent] == list(range(230))
    saved = store.load()
    assert saved["model"].training_rounds == 4 and len(saved["outbox"]) == 180
    runner.process(SourceRecord({"id": 230, "x": X[230], "y": y[230]}, "f", 230))
    assert len(sink.sent) == 231   # the trees it used are on disk: sent at once
    store.close()


def test_a_crash_between_the_save_and_the_sends_resends_the_outbox(tmp_path):
    store = CheckpointStore(tmp_path)
    runner = Runner.create("sgbdt", ADULT_SCHEMA, store=store, epsilon=1.0, seed=0,
                           params={"round_size": 20, "warmup_rounds": 0},
                           predictions=_ListSink(fail_after=30),
                           checkpoint_interval=3600, hold_predictions=True)
    X, y, _ = load_adult("train")
    for i in range(60):
        runner.process(SourceRecord({"id": i, "x": X[i], "y": y[i]}, "f", i))
    held = [key for _, key in runner.outbox]
    assert len(held) == 40
    with pytest.raises(ConnectionError):   # saved, then the sink fails 10 sends in
        runner.checkpoint()
    store.close()
    sink = _ListSink()
    resumed = Runner.resume(CheckpointStore(tmp_path), predictions=sink, hold_predictions=True,
                            checkpoint_interval=0)
    assert sink.sent == [] and len(resumed.outbox) == 40   # resuming sends nothing by itself
    assert resumed.positions == {"f": 60} and resumed.counters["predictions"] == 60
    assert resumed.maybe_checkpoint()   # no new record, but held predictions are waiting
    assert [key for _, key in sink.sent] == held and resumed.outbox == []
    resumed.store.close()
    with pytest.raises(ValueError, match="hold_predictions needs a predictions sink"):
        Runner.create("sgbdt", ADULT_SCHEMA, store=CheckpointStore(tmp_path / "x"),
                      epsilon=1.0, hold_predictions=True)


def test_status_command_reads_a_checkpoint(tmp_path):
    res = replay("abalone", epsilon=1.0, checkpoint_dir=str(tmp_path), seed=0)
    out = subprocess.run([*DPSTREAM, "status", "--checkpoint-dir", str(tmp_path), "--json",
                          "--curator"], capture_output=True, text=True, check=True, timeout=120)
    status = json.loads(out.stdout)
    assert status["records_learned"] == res["records_learned"] == 4177
    assert status["offsets"] == {"bundled:abalone": 4177}
    assert status["privacy"]["epsilon"] <= 1.0
    empty = subprocess.run([*DPSTREAM, "status", "--checkpoint-dir", str(tmp_path / "none")],
                           capture_output=True, text=True, timeout=120)
    assert empty.returncode == 2 and "no checkpoint" in empty.stderr



def test_status_and_metrics_of_a_window_forest(tmp_path):
    """The service's read-outs work for a window forest (no per-record Renyi budgets)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from dpstream.stream.metrics import ServiceCollector

    store = CheckpointStore(tmp_path)
    runner = Runner.create("median-forest", ADULT_SCHEMA, store=store, epsilon=2.0, seed=0,
                           params={"window_size": 100, "n_trees": 4,
                                   "min_tree_records": None})   # 4 trees per small window
    X, y, _ = load_adult("train")
    for i in range(250):
        runner.process(SourceRecord({"id": i, "x": X[i], "y": y[i] if i % 2 else None}, "f", i))
    runner.checkpoint()
    registry = CollectorRegistry()
    registry.register(ServiceCollector(runner, curator=True))   # curator: the pending records
    text = generate_latest(registry).decode()
    assert "dpstream_windows_closed_total 2.0" in text
    assert "dpstream_window_pending_records 50.0" in text
    assert "dpstream_trees 8.0" in text and "dpstream_epsilon 2.0" in text
    store.close()
    out = subprocess.run([*DPSTREAM, "status", "--checkpoint-dir", str(tmp_path), "--curator"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "2 windows closed, 50 records in the open window" in out.stdout
    assert "unlabeled 125" in out.stdout


def test_metrics_of_a_member_show_the_union_it_predicts_with(tmp_path):
    """A window-forest member's /metrics: its own model (dpstream_epsilon, trees, ...) and
    the union of every member's windows it predicts with (dpstream_union_*)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from dpstream.models import MedianForestClassifier
    from dpstream.models.windows.window_exchange import WindowEnsemble
    from dpstream.stream.metrics import ServiceCollector

    store = CheckpointStore(tmp_path)
    params = {"window_size": 100, "warmup": None, "n_trees": 4, "min_tree_records": None}
    runner = Runner.create("median-forest", ADULT_SCHEMA, store=store, epsilon=2.0, seed=0,
                           params=params)
    other = MedianForestClassifier(schema=ADULT_SCHEMA, epsilon=2.0, seed=1, **params)
    mine, theirs = WindowEnsemble(runner.model, "a"), WindowEnsemble(other, "b")
    X, y, _ = load_adult("train")
    for i in range(200):
        runner.process(SourceRecord({"id": i, "x": X[i], "y": y[i]}, "f", i))
    runner.checkpoint()          # /metrics shows the model as of the last checkpoint
    for i in range(200, 500):
        other.learn_one(X[i], y[i])
    for key, state in theirs.local_updates().items():
        mine.adopt(key, state)
    mine.local_updates()
    registry = CollectorRegistry()
    registry.register(ServiceCollector(runner, ensemble=mine.privacy_report))
    text = generate_latest(registry).decode()
    assert "dpstream_trees 8.0" in text                        # its own two windows
    assert "dpstream_union_members 2.0" in text and "dpstream_union_records 500.0" in text
    assert "dpstream_union_windows 5.0" in text and "dpstream_union_epsilon 2.0" in text
    assert "dpstream_member_share 1.0" in text
    runner.model.set_share(0.25)        # an assignment of 1 of 4 partitions
    assert "dpstream_member_share 0.25" in generate_latest(registry).decode()
    store.close()


def test_scrapes_during_training_read_a_consistent_model(tmp_path):
    """A scrape runs on the HTTP thread while the main loop trains: it reads the model under
    the runner's lock, so it never sees an S-GBDT pool mid-round (a scrape that raised used to
    drop the connection without a response)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from dpstream.stream.metrics import ServiceCollector

    runner = Runner.create("sgbdt", ADULT_SCHEMA, store=CheckpointStore(tmp_path), epsilon=1.0,
                           seed=0)
    registry = CollectorRegistry()
    registry.register(ServiceCollector(runner, curator=True))
    X, y, _ = load_adult("train")
    done, errors, scrapes = threading.Event(), [], []

    def scrape():
        while not done.is_set():
            try:
                scrapes.append(generate_latest(registry))
            except Exception as exc:   # noqa: BLE001 - the test reports any failure
                errors.append(repr(exc))
            done.wait(0.002)

    worker = threading.Thread(target=scrape)
    worker.start()
    try:
        for start in range(0, 12000, 500):
            runner.process_many([SourceRecord({"id": i, "x": X[i], "y": y[i]}, "f", i)
                                 for i in range(start, start + 500)])
    finally:
        done.set()
        worker.join()
    assert errors == [] and len(scrapes) > 10
    assert b'dpstream_records_total{outcome="learned"} 12000.0' in generate_latest(registry)


@pytest.mark.kafka
def test_a_local_broker_whose_free_port_was_taken_starts_on_another(monkeypatch):
    """A port that was free a moment ago can be taken before tansu binds it (parallel test
    workers start brokers at once): tansu exits and LocalBroker starts it on a new free port,
    never trusting a connection to the other listener; a port given by the caller is kept
    and the exit is an error."""
    import socket

    from dpstream.connectors import local_broker

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        ports = iter([taken])
        real = local_broker.free_port
        monkeypatch.setattr(local_broker, "free_port", lambda: next(ports, None) or real())
        with local_broker.LocalBroker() as broker:
            assert broker.port != taken and broker.proc.poll() is None
            broker.create_topic("t", partitions=1)
            broker.produce("t", [b"one"])
            assert [m.value for m in broker.consume_all("t", 1, timeout=20)] == [b"one"]
            port = broker.port
            broker.kill()
            broker.start()   # a restart keeps the address clients know
            assert broker.port == port
        with pytest.raises(RuntimeError, match="tansu exited"):
            local_broker.LocalBroker(taken).start()


def test_readers_get_the_lock_between_segments_of_a_batch(tmp_path):
    """A young S-GBDT publishing predictions trains a batch in one-record segments, each
    round followed by a checkpoint: /metrics and /healthz (which read under the runner's
    lock) get in between segments instead of waiting for the whole batch."""
    X, y, _ = load_adult("train")
    sink = _ListSink()
    runner = Runner.create("sgbdt", ADULT_SCHEMA, store=CheckpointStore(tmp_path), epsilon=1.0,
                           seed=0, predictions=sink)
    recs = [SourceRecord({"id": i, "x": X[i], "y": y[i]}, "f", i) for i in range(600)]
    seen: list[int] = []
    worker = threading.Thread(target=runner.process_many, args=(recs,))
    worker.start()
    while worker.is_alive():
        with runner.lock:
            seen.append(runner.model.training_rounds)
        time.sleep(0.005)
    worker.join()
    final = runner.model.training_rounds
    assert final > 400 and runner.counters["checkpoints"] >= final   # a save per round
    assert len({r for r in seen if 0 < r < final}) >= 3, sorted(set(seen))   # read mid-batch
    assert len(sink.sent) == 600
    runner.store.close()
