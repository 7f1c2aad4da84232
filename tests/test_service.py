"""The stream service against a real Kafka-protocol broker (tansu): exactly-once training
across kill -9, a frozen broker, a broker absent at start, graceful SIGTERM, metrics. The
tests marked with ``client`` run against both Kafka clients (kafka-python and confluent-kafka);
the others against the default choice (``auto``: confluent-kafka where installed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from schedule import sgbdt_rounds

from dpstream.connectors import CheckpointStore
from dpstream.connectors._partitioning import key_partition
from dpstream.connectors.local_broker import LocalBroker as Broker
from dpstream.connectors.local_broker import free_port
from dpstream.stream import ADULT_SCHEMA, load_adult

pytestmark = pytest.mark.kafka

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]


@pytest.fixture
def broker():
    b = Broker().start()
    yield b
    b.stop()


def _messages(n: int, bad_every: int, seed: int = 0) -> tuple[list[bytes], int]:
    """``n`` Adult records as messages; every ``bad_every``-th is malformed in a rotating way."""
    X, y, _ = load_adult("train")
    bad = [b'{"id": "broken", "x": {"age": 4',                 # truncated JSON
           b"\xff\xfe not utf-8",                              # not text
           json.dumps({"id": "u", "x": {"colour": "red"}, "y": True}).encode(),   # unknown
           json.dumps({"id": "w", "x": {"age": "old"}, "y": False}).encode(),     # wrong type
           json.dumps({"id": "l", "x": {"age": 30}, "y": "rich"}).encode(),       # bad label
           json.dumps({"id": "c", "x": {"sex": "Robot"}, "y": True}).encode()]    # category
    out, m = [], 0
    for i in range(n):
        if bad_every and i % bad_every == bad_every - 1:
            out.append(bad[m % len(bad)])
            m += 1
        else:
            out.append(json.dumps({"id": i, "x": X[i], "y": y[i]}).encode())
    return out, m


def _schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(path)
    return path


#: the Kafka clients a test runs against (``--kafka-client``; the default, auto, takes
#: confluent-kafka, which the test extra installs)
CLIENTS = ("kafka-python", "confluent")


def _serve(broker: Broker, tmp_path: Path, *extra: str, metrics_port: int = 0,
           bootstrap: str | None = None, client: str | None = None) -> subprocess.Popen:
    if client is not None:
        extra = (*extra, "--kafka-client", client)
    log = open(tmp_path / "serve.log", "ab")
    cmd = [*DPSTREAM, "serve", "--bootstrap", bootstrap or broker.bootstrap, "--topic", "records",
           "--group", "dp", "--schema", str(_schema_file(tmp_path)), "--epsilon", "1.0",
           "--checkpoint-dir", str(tmp_path / "ck"), "--metrics-port", str(metrics_port),
           "--checkpoint-interval", "0.5", "--seed", "0", "--set", "round_size=200", *extra]
    return subprocess.Popen(cmd, stdout=log, stderr=log)


def _status(tmp_path: Path) -> dict | None:
    state = CheckpointStore.read(tmp_path / "ck")
    if state is None:
        return None
    c = state["counters"]
    return {"seen": c["seen"], "learned": c["learned"], "dead": c["dead_letters"],
            "dup": c["duplicates"], "model": state["model"], "positions": state["positions"]}


def _wait_for(pred, timeout: float, what: str, proc: subprocess.Popen | None = None,
              tmp_path: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.2)
    log = (tmp_path / "serve.log").read_text(errors="replace")[-3000:] if tmp_path else ""
    raise AssertionError(f"timed out waiting for {what}\n{log}")


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(60)


def _trickle(broker: Broker, topic: str, values: list[bytes], tmp_path: Path, *,
             ahead: int = 300, partitions: int = 1) -> threading.Thread:
    """Produce ``values`` from a background thread, never more than ``ahead`` messages past
    what the service has checkpointed: the stream outlasts any number of restarts, so a kill
    always lands mid-stream."""
    def run():
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
        sent = 0
        while sent < len(values):
            if sent - (_status(tmp_path) or {"seen": 0})["seen"] >= ahead:
                time.sleep(0.05)
                continue
            for j in range(sent, min(sent + 50, len(values))):
                producer.send(topic, values[j], partition=j % partitions)
            producer.flush()
            sent = min(sent + 50, len(values))
        producer.close()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("client", CLIENTS)
def test_kill_9_mid_stream_learns_each_record_exactly_once(broker, tmp_path, client):
    n = 3000
    values, m = _messages(n, bad_every=37)
    broker.create_topic("records", partitions=2)
    producer = _trickle(broker, "records", values, tmp_path, ahead=400, partitions=2)
    unsaved = []
    for pause in (0.3, 0.1, 0.45):       # kill -9 at several points, restart each time
        base = (_status(tmp_path) or {"seen": 0})["seen"]
        port = free_port()
        proc = _serve(broker, tmp_path, "--checkpoint-interval", "2", metrics_port=port,
                      client=client)
        _wait_for(lambda b=base: (s := _status(tmp_path)) and s["seen"] >= b + 100, 90,
                  "progress", proc, tmp_path)
        time.sleep(pause)
        in_memory = _metric(port, 'dpstream_records_total{outcome="seen"}')
        proc.kill()
        proc.wait()
        saved = _status(tmp_path)["seen"]
        assert saved < n, "the kill must land mid-stream"
        unsaved.append(in_memory - saved)
    # at least one kill lost processed-but-unsaved records, which the restart had to redo
    assert max(unsaved) > 0, unsaved
    proc = _serve(broker, tmp_path, client=client)
    _wait_for(lambda: (s := _status(tmp_path)) and s["seen"] >= n and s, 120,
              "all records", proc, tmp_path)
    producer.join(10)
    assert _stop(proc) == 0
    final = _status(tmp_path)
    assert final["seen"] == n
    assert final["learned"] == n - m
    assert final["dead"] == m
    assert final["dup"] == 0
    report = final["model"].privacy_report()
    assert report["records_learned"] + report["records_pending"] == n - m
    assert report["records_seen"] == n - m
    assert sum(final["positions"].values()) == n
    # every malformed record reached the dead-letter file with its reason and position
    lines = [json.loads(x) for x in (tmp_path / "ck" / "dead-letters.jsonl").read_text()
             .splitlines()]
    positions = {(d["position"]["partition"], d["position"]["offset"]) for d in lines}
    assert len(positions) == m
    assert all(d["reason"] for d in lines)


def test_duplicates_redelivered_are_counted_not_learned(broker, tmp_path):
    values, _ = _messages(300, bad_every=0)
    broker.create_topic("records")
    broker.produce("records", values + values[:50])       # the producer retried 50 messages
    proc = _serve(broker, tmp_path)
    _wait_for(lambda: (s := _status(tmp_path)) and s["seen"] >= 350, 90, "350 records",
              proc, tmp_path)
    assert _stop(proc) == 0
    s = _status(tmp_path)
    assert (s["learned"], s["dup"]) == (300, 50)


def test_frozen_broker_is_survived(broker, tmp_path):
    values, _ = _messages(2000, bad_every=0)
    broker.create_topic("records")
    broker.produce("records", values[:1000])
    proc = _serve(broker, tmp_path)
    _wait_for(lambda: (s := _status(tmp_path)) and s["seen"] >= 1000, 90, "first half",
              proc, tmp_path)
    broker.freeze()
    time.sleep(9)                      # longer than the 6 s session timeout
    broker.thaw()
    broker.produce("records", values[1000:])
    _wait_for(lambda: (s := _status(tmp_path)) and s["seen"] >= 2000, 120, "second half",
              proc, tmp_path)
    assert proc.poll() is None, "the service died during the outage"
    assert _stop(proc) == 0
    s = _status(tmp_path)
    assert (s["seen"], s["learned"], s["dup"]) == (2000, 2000, 0)


@pytest.mark.parametrize("client", CLIENTS)
def test_absent_broker_is_retried_then_used(tmp_path, client):
    port = free_port()
    broker = Broker(port)
    proc = _serve(broker, tmp_path, bootstrap=f"127.0.0.1:{port}", client=client)
    try:
        _wait_for(lambda: "retrying in" in (tmp_path / "serve.log").read_text(), 60,
                  "a retry log line", proc, tmp_path)
        assert proc.poll() is None
        broker.start()
        # serve's consumer is subscribed already: its metadata request may have made the
        # broker create the topic first
        broker.create_topic("records", exist_ok=True)
        values, _ = _messages(500, bad_every=0)
        broker.produce("records", values)
        _wait_for(lambda: (s := _status(tmp_path)) and s["seen"] >= 500, 120, "records",
                  proc, tmp_path)
        assert _stop(proc) == 0
        assert _status(tmp_path)["learned"] == 500
        log = (tmp_path / "serve.log").read_text()
        assert f"Kafka broker 127.0.0.1:{port} unreachable" in log
        assert f"Kafka client: {client}" in log
    finally:
        if proc.poll() is None:
            proc.kill()
        broker.stop()


@pytest.mark.parametrize("client", CLIENTS)
def test_metrics_health_predictions_and_dead_letter_topic(broker, tmp_path, client):
    values, m = _messages(600, bad_every=50)
    broker.create_topic("records")
    broker.create_topic("predictions", partitions=3)
    broker.create_topic("dlq")
    broker.produce("records", values)
    port = free_port()
    proc = _serve(broker, tmp_path, "--predictions-topic", "predictions",
                  "--dead-letter-topic", "dlq", "--curator-metrics", metrics_port=port,
                  client=client)
    try:
        _wait_for(lambda: (s := _status(tmp_path)) and s["seen"] >= 600, 90, "records",
                  proc, tmp_path)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        text = body.decode()
        assert 'dpstream_records_total{outcome="learned"} 588.0' in text
        assert 'dpstream_records_total{outcome="dead_letters"} 12.0' in text
        assert "dpstream_epsilon 1.0" in text or "dpstream_epsilon 0.99" in text
        assert "dpstream_consumer_lag" in text and "dpstream_last_checkpoint_age_seconds" in text
        assert "dpstream_group_shared 0.0" in text     # the group's only member: training
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())
        assert health["ok"] is True
    finally:
        assert _stop(proc) == 0
    dlq = broker.consume_all("dlq", m)
    assert len(dlq) == m
    assert values[49] == dlq[0].value                     # the original bytes, untouched
    headers = dict(dlq[0].headers)
    assert b"unparsable JSON" in headers["dpstream-reason"]
    preds = broker.consume_all("predictions", 600 - m)
    assert len(preds) == 600 - m
    assert {"id", "prediction"} <= set(json.loads(preds[0].value))
    # keyed: each on the partition Kafka's default (murmur2) partitioner gives its key
    assert {p.partition for p in preds} == {0, 1, 2}
    assert all(p.partition == key_partition(p.key, 3) for p in preds)
    out = subprocess.run([*DPSTREAM, "status", "--checkpoint-dir", str(tmp_path / "ck"),
                          "--json", "--curator"], capture_output=True, text=True, check=True)
    status = json.loads(out.stdout)
    assert status["records_learned"] == 600 - m and status["dead_letters"] == m
    assert status["privacy"]["epsilon"] <= 1.0


def test_held_predictions_through_a_real_broker_one_per_record(broker, tmp_path):
    """--hold-predictions: no checkpoint per round, and still every record's prediction
    reaches the topic (the held ones with the checkpoint after their round), each once."""
    values, m = _messages(1000, bad_every=100)
    broker.create_topic("records")
    broker.create_topic("predictions")
    broker.produce("records", values)
    proc = _serve(broker, tmp_path, "--predictions-topic", "predictions", "--hold-predictions")
    try:
        _wait_for(lambda: (s := _status(tmp_path)) and s["seen"] >= 1000, 90, "records",
                  proc, tmp_path)
    finally:
        assert _stop(proc) == 0
    state = CheckpointStore.read(tmp_path / "ck")
    # rounds count messages, dead letters included, and every message gets a prediction
    assert state["model"].training_rounds == sgbdt_rounds(1000, round_size=200)
    assert state["outbox"] == []
    preds = broker.consume_all("predictions", 1000)
    keys = [p.key for p in preds]
    assert len(keys) == len(set(keys)) == 1000 and m > 0


def test_second_writer_is_refused(broker, tmp_path):
    broker.create_topic("records")
    first = _serve(broker, tmp_path)
    try:
        _wait_for(lambda: (tmp_path / "ck" / "lock").exists() and "subscribed" in
                  (tmp_path / "serve.log").read_text(), 60, "first service", first, tmp_path)
        second = subprocess.run(
            [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", "records",
             "--schema", str(_schema_file(tmp_path)), "--epsilon", "1.0",
             "--checkpoint-dir", str(tmp_path / "ck"), "--metrics-port", "0"],
            capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert "in use by another dpstream process" in second.stderr
    finally:
        assert _stop(first) == 0


def test_settings_come_from_the_environment(broker, tmp_path):
    broker.create_topic("records")
    values, _ = _messages(100, bad_every=0)
    broker.produce("records", values)
    env = {**os.environ, "DPSTREAM_BOOTSTRAP": broker.bootstrap, "DPSTREAM_TOPIC": "records",
           "DPSTREAM_SCHEMA": str(_schema_file(tmp_path)), "DPSTREAM_EPSILON": "0.5",
           "DPSTREAM_CHECKPOINT_DIR": str(tmp_path / "ck"), "DPSTREAM_METRICS_PORT": "0",
           "DPSTREAM_CHECKPOINT_INTERVAL": "0.5"}
    log = open(tmp_path / "serve.log", "ab")
    proc = subprocess.Popen([*DPSTREAM, "serve"], env=env, stdout=log, stderr=log)
    _wait_for(lambda: (s := _status(tmp_path)) and s["seen"] >= 100, 90, "records", proc,
              tmp_path)
    assert _stop(proc) == 0
    assert _status(tmp_path)["model"].epsilon == 0.5


def test_replay_of_a_topic_runs_to_its_end_and_resumes(broker, tmp_path):
    """(With the default client; tests/test_kafka_clients.py replays one topic through both.)"""
    values, m = _messages(800, bad_every=100)
    broker.create_topic("records", partitions=2)
    broker.produce("records", values[:500], partitions=2)
    schema = _schema_file(tmp_path)
    url = f"kafka://{broker.bootstrap}/records?group=replayer"
    cmd = [*DPSTREAM, "replay", "--source", url, "--schema", str(schema), "--epsilon", "1",
           "--checkpoint-dir", str(tmp_path / "ck"), "--json"]
    first = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                      timeout=180).stdout)
    assert first["records_seen"] == 500 and first["dead_letters"] == 5
    broker.produce("records", values[500:], partitions=2)
    second = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                       timeout=180).stdout)
    assert second["records_this_run"] == 300
    assert (second["records_seen"], second["records_learned"], second["dead_letters"]) == (
        800, 800 - m, m)


def test_median_forest_over_a_topic_keeps_its_open_window_across_runs(broker, tmp_path):
    """The window forest behind the real broker: unlabeled messages join the windows, the
    open window survives between runs in the checkpoint, nothing is trained twice."""
    X, y, _ = load_adult("train")
    values = [json.dumps({"id": i, "x": X[i], "y": y[i] if i % 4 == 0 else None}).encode()
              for i in range(900)]
    broker.create_topic("semi", partitions=1)       # one partition: a deterministic order
    broker.produce("semi", values[:500], partitions=1)
    schema = _schema_file(tmp_path)
    url = f"kafka://{broker.bootstrap}/semi?group=windows"
    cmd = [*DPSTREAM, "replay", "--source", url, "--schema", str(schema), "--epsilon", "2",
           "--model", "median-forest", "--set", "window_size=200", "--set", "n_trees=10",
           "--set", "warmup=null", "--set",
           "privacy=labels_only", "--set", "min_tree_records=null", "--checkpoint-dir",
           str(tmp_path / "ck"), "--json"]
    first = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                      timeout=180).stdout)
    p = first["privacy"]
    assert (p["windows_closed"], p["records_pending"], p["trees"]) == (2, 100, 20)
    assert first["unlabeled"] == 375 and first["records_learned"] == 500
    broker.produce("semi", values[500:], partitions=1)
    second = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                       timeout=180).stdout)
    p = second["privacy"]
    assert second["records_this_run"] == 400
    assert (p["windows_closed"], p["records_pending"], p["records_learned"]) == (4, 100, 800)
    assert p["epsilon"] == 2.0 and p["protects"] == "labels"
    assert [w["algorithm"] for w in p["windows"]] == ["SSPE-2"] * 4


def test_time_windows_follow_the_broker_timestamps(broker, tmp_path):
    """With window_seconds the service passes each record's broker timestamp as its time."""
    X, y, _ = load_adult("train")
    broker.create_topic("timed", partitions=1)
    broker.produce("timed", [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode()
                             for i in range(300)], partitions=1)
    time.sleep(2.5)
    broker.produce("timed", [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode()
                             for i in range(300, 400)], partitions=1)
    url = f"kafka://{broker.bootstrap}/timed?group=clock"
    cmd = [*DPSTREAM, "replay", "--source", url, "--schema", str(_schema_file(tmp_path)),
           "--epsilon", "2", "--model", "median-forest", "--set", "window_size=100000",
           "--set", "window_seconds=2.0", "--set", "n_trees=3", "--set", "warmup=null",
           "--checkpoint-dir", str(tmp_path / "ck"), "--json"]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                    timeout=180).stdout)
    # the first 300 were produced together; the 301st arrived 2.5 s later and closed them
    assert [w["records"] for w in out["privacy"]["windows"]] == [300]
    assert out["privacy"]["records_pending"] == 100
