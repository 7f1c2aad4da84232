"""Delayed labels end to end (issue 66): ``dpstream serve`` through a real Kafka-protocol broker
(tansu) and ``dpstream replay`` over a file, each killed -9 three times mid-stream, end with the
counters of an independent oracle of the join (tests/delayed_stream.py): every labeled record
learned exactly once, every expired one counted, nothing learned twice."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
from delayed_stream import delayed_stream, oracle

from dpstream.connectors import CheckpointStore
from dpstream.connectors.local_broker import LocalBroker
from dpstream.stream import ADULT_SCHEMA
from dpstream.stream.labels import held_count

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]
KEYS = ("seen", "learned", "dead_letters", "held", "labels_joined", "held_expired",
        "labels_unknown", "labels_expired", "labels_repeated")
HELD_MESSAGES = "400"


def _state(ck: Path) -> dict | None:
    return CheckpointStore.read(ck)


def _seen(ck: Path) -> int:
    state = _state(ck)
    return 0 if state is None else state["counters"]["seen"]


def _final(ck: Path, want: dict) -> None:
    state = _state(ck)
    got = {k: state["counters"][k] for k in KEYS}
    assert got == {k: want.get(k, 0) for k in KEYS}
    assert held_count(state["labels"]["held"]) == want["records_held"]
    with warnings.catch_warnings():   # (a small stream's warning: not what is tested)
        warnings.simplefilter("ignore")
        report = state["model"].privacy_report()
    assert report["records_seen"] == want["learned"]     # the model got each record once


def _wait(pred, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{log.read_text(errors='replace')[-3000:]}")


@pytest.mark.kafka
def test_serve_killed_three_times_learns_every_labeled_record_once(tmp_path):
    messages = delayed_stream(3000, seed=3)
    want = oracle(messages, max_messages=int(HELD_MESSAGES))
    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    ck, log = tmp_path / "ck", tmp_path / "serve.log"
    broker = LocalBroker().start()
    try:
        broker.create_topic("records")

        def produce():   # never far ahead of the checkpoint: every kill lands mid-stream
            from kafka import KafkaProducer
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                                     linger_ms=5)
            sent = 0
            while sent < len(messages):
                if sent - _seen(ck) >= 500:
                    time.sleep(0.05)
                    continue
                for m in messages[sent:sent + 50]:
                    producer.send("records", m, partition=0)
                producer.flush()
                sent += 50
            producer.close()

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        cmd = [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", "records",
               "--group", "dp", "--schema", str(schema), "--epsilon", "1.0",
               "--checkpoint-dir", str(ck), "--metrics-port", "0", "--seed", "0",
               "--checkpoint-interval", "0.5", "--set", "round_size=200",
               "--held-messages", HELD_MESSAGES]
        for pause in (0.3, 0.1, 0.45):
            base = _seen(ck)
            with open(log, "ab") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=out)
            _wait(lambda b=base: _seen(ck) >= b + 150, 120, "progress", log)
            time.sleep(pause)
            proc.kill()
            proc.wait()
            assert _seen(ck) < len(messages), "the kill must land mid-stream"
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=out)
        _wait(lambda: _seen(ck) >= len(messages), 180, "every message", log)
        thread.join(10)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        _final(ck, want)
        assert want["labels_joined"] > 1000 and want["held_expired"] > 100
    finally:
        broker.stop()


def test_replay_killed_three_times_learns_every_labeled_record_once(tmp_path):
    messages = delayed_stream(30_000, seed=4)
    want = oracle(messages, max_messages=int(HELD_MESSAGES))
    source = tmp_path / "delayed.jsonl"
    source.write_bytes(b"\n".join(messages) + b"\n")
    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    ck, log = tmp_path / "ck", tmp_path / "replay.log"
    cmd = [*DPSTREAM, "replay", "--source", str(source), "--schema", str(schema),
           "--epsilon", "1", "--checkpoint-dir", str(ck), "--seed", "0",
           "--set", "round_size=200", "--held-messages", HELD_MESSAGES,
           "--checkpoint-interval", "0.3"]
    kills = 0
    for pause in (0.5, 1.0, 1.5):
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=out)
        _wait(lambda p=proc: _seen(ck) > 0 or p.poll() is not None, 120,
              "a first checkpoint", log)
        time.sleep(pause)
        if proc.poll() is None:
            proc.kill()
            kills += 1
        proc.wait()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert kills >= 2   # (the replay is quick; the kills must land mid-stream)
    _final(ck, want)
    assert want["labels_joined"] > 10_000


def _split(messages: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """The records (messages with ``x``, and malformed ones) and the label messages."""
    records = [m for m in messages if b'"x"' in m or not m.startswith(b'{"id"')]
    labels = [m for m in messages if b'"x"' not in m and m.startswith(b'{"id"')]
    return records, labels


def test_replay_reads_labels_from_their_own_file_in_turn_with_the_records(tmp_path):
    """``replay --labels``: a batch of records, then a batch of labels, in turn; the counters
    are the oracle's over that order."""
    records, labels = _split(delayed_stream(5000, seed=5, max_delay=3000))
    order = []
    for k in range(0, max(len(records), len(labels)), 2000):
        order += records[k:k + 2000] + labels[k:k + 2000]
    want = oracle(order, max_messages=int(HELD_MESSAGES) * 10)
    (tmp_path / "records.jsonl").write_bytes(b"\n".join(records) + b"\n")
    (tmp_path / "labels.jsonl").write_bytes(b"\n".join(labels) + b"\n")
    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    out = subprocess.run([*DPSTREAM, "replay", "--source", str(tmp_path / "records.jsonl"),
                          "--labels", str(tmp_path / "labels.jsonl"), "--schema", str(schema),
                          "--epsilon", "1", "--checkpoint-dir", str(tmp_path / "ck"),
                          "--seed", "0", "--held-messages", str(int(HELD_MESSAGES) * 10),
                          "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    _final(tmp_path / "ck", want)
    assert want["labels_joined"] > 1500 and want["labels_unknown"] > 5   # some came too early
    # each file resumes from its own position: a second run reads nothing more
    again = subprocess.run([*DPSTREAM, "replay", "--source", str(tmp_path / "records.jsonl"),
                            "--labels", str(tmp_path / "labels.jsonl"), "--schema",
                            str(schema), "--epsilon", "1", "--checkpoint-dir",
                            str(tmp_path / "ck"), "--seed", "0", "--json"],
                           capture_output=True, text=True, timeout=300)
    assert json.loads(again.stdout)["records_this_run"] == 0


@pytest.mark.kafka
def test_serve_with_a_label_topic_killed_three_times_learns_every_labeled_record_once(tmp_path):
    """Records on one topic, labels on another (co-partitioned: two partitions each, keyed by
    record id), each label sent once its record is in a checkpoint; serve killed -9 three
    times: every label joins its record once."""
    from dpstream.connectors._partitioning import key_partition

    records, labels = _split(delayed_stream(3000, seed=6))
    records = [m for m in records if m.startswith(b'{"id"')]     # (no malformed here)
    rid = [json.loads(m)["id"] for m in records]
    want = oracle(records + labels, max_messages=10**9)   # records first, then every label
    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    ck, log = tmp_path / "ck", tmp_path / "serve.log"
    broker = LocalBroker().start()
    try:
        broker.create_topic("records", partitions=2)
        broker.create_topic("labels", partitions=2)

        def saved_upto() -> dict:
            state = _state(ck)
            return {} if state is None else state["positions"]

        def produce():
            from kafka import KafkaProducer
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                                     linger_ms=5)
            offsets = [0, 0]
            where = {}
            for n, (m, i) in enumerate(zip(records, rid, strict=True)):   # keyed by the id
                while n - _seen(ck) >= 500:   # never far ahead: every kill lands mid-stream
                    time.sleep(0.05)
                p = key_partition(str(i).encode(), 2)
                where[i] = (p, offsets[p])
                offsets[p] += 1
                producer.send("records", m, key=str(i).encode(), partition=p)
                if n % 50 == 49:
                    producer.flush()
            producer.flush()
            for m in labels:                                # once the record is saved
                i = json.loads(m)["id"]
                p, off = where.get(i, (key_partition(str(i).encode(), 2), -1))
                while saved_upto().get(f"records:{p}", 0) <= off:
                    time.sleep(0.05)
                producer.send("labels", m, key=str(i).encode(), partition=p)
            producer.close()

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        cmd = [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", "records",
               "--label-topic", "labels", "--group", "dp", "--schema", str(schema),
               "--epsilon", "1.0", "--checkpoint-dir", str(ck), "--metrics-port", "0",
               "--seed", "0", "--checkpoint-interval", "0.3", "--set", "round_size=200"]
        total = len(records) + len(labels)
        for pause in (0.5, 0.2, 0.6):
            base = _seen(ck)
            with open(log, "ab") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=out)
            _wait(lambda b=base: _seen(ck) >= b + 200, 120, "progress", log)
            time.sleep(pause)
            proc.kill()
            proc.wait()
            assert _seen(ck) < total, "the kill must land mid-stream"
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=out)
        _wait(lambda: _seen(ck) >= total, 180, "every message", log)
        thread.join(10)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        _final(ck, want)
        assert want["labels_joined"] > 1500
    finally:
        broker.stop()


@pytest.mark.kafka
def test_serve_draining_a_backlog_of_two_topics_meets_every_label_with_its_record(tmp_path):
    """Records and labels produced in time order to their two topics before serve starts: the
    service reads a backlog, where the label topic's consumer could run ahead of the records'
    one; every label still comes after its record (stream.labels.LabelPacer), so the counters
    are those of the interleaved stream's oracle: no label lost as unknown."""
    from dpstream.connectors._partitioning import key_partition

    messages = [m for m in delayed_stream(4000, seed=7, full_labels=0, bad=0)
                if m.startswith(b'{"id"')]
    want = oracle(messages, max_messages=10**9)
    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    ck, log = tmp_path / "ck", tmp_path / "serve.log"
    broker = LocalBroker().start()
    try:
        broker.create_topic("records", partitions=2)
        broker.create_topic("labels", partitions=2)
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
        for m in messages:   # one producer, in order: a label's timestamp follows its record's
            i = str(json.loads(m)["id"]).encode()
            producer.send("records" if b'"x"' in m else "labels", m, key=i,
                          partition=key_partition(i, 2))
            time.sleep(0.0002)
        producer.flush()
        producer.close()
        cmd = [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", "records",
               "--label-topic", "labels", "--group", "dp", "--schema", str(schema),
               "--epsilon", "1.0", "--checkpoint-dir", str(ck), "--metrics-port", "0",
               "--seed", "0", "--checkpoint-interval", "0.5", "--set", "round_size=200"]
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=out)
        _wait(lambda: _seen(ck) >= len(messages), 180, "every message", log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        _final(ck, want)
        assert want["labels_unknown"] == 5 and want["labels_joined"] > 2000
    finally:
        broker.stop()


def test_serve_refuses_labels_that_cannot_meet_their_records(tmp_path):
    from dpstream.stream.service import ServeSettings, check_copartitioned

    base = dict(bootstrap="127.0.0.1:1", topic="records", schema_path="s.json",
                epsilon=1.0, checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="not for distributed S-GBDT"):
        ServeSettings(**base, label_topic="labels", board_topic="board")
    members = ServeSettings(**base, label_topic="labels", model_topic="models", model="rdt")
    assert members.held_topic == "models-held"   # (the default hand-over topic)
    with pytest.raises(ValueError, match="names the records topic"):
        ServeSettings(**base, label_topic="records")
    broker = LocalBroker().start()
    try:
        broker.create_topic("records", partitions=3)
        broker.create_topic("labels", partitions=2)
        with pytest.raises(ValueError, match="has 2 partitions and --topic 'records' 3"):
            check_copartitioned(broker.bootstrap, "records", "labels", timeout=5)
    finally:
        broker.stop()
