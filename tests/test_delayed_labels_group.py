"""Delayed labels in a consumer group (issue 66): records held for their labels move with their
partitions at a rebalance. Two ``dpstream serve`` members of one group through a real
Kafka-protocol broker (tansu); a second member joins while the first holds records whose
labels come after the rebalance, on partitions the second takes over: the first hands them over
on the held topic, the second adopts them, and the group ends with the counters of an
independent oracle of the join (tests/delayed_stream.py): every label joins its record once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from delayed_stream import delayed_stream, oracle

from dpstream.connectors import CheckpointStore
from dpstream.connectors._partitioning import key_partition
from dpstream.connectors.local_broker import LocalBroker
from dpstream.stream import ADULT_SCHEMA
from dpstream.stream.labels import held_count

PARTITIONS = 4
SUMMED = ("learned", "labels_joined", "labels_unknown", "labels_expired", "labels_repeated",
          "held_expired")


def _counters(ck: Path) -> dict:
    state = CheckpointStore.read(ck)
    return {} if state is None else dict(state["counters"])


def _held(ck: Path) -> int:
    state = CheckpointStore.read(ck)
    return 0 if state is None else held_count(state["labels"]["held"])


def _wait(pred, timeout: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    tails = "\n".join(log.read_text(errors="replace")[-3000:] for log in logs if log.exists())
    raise AssertionError(f"timed out waiting for {what}\n{tails}")


def _assignments(log: Path) -> int:
    return log.read_text(errors="replace").count("partitions assigned") if log.exists() else 0


@pytest.mark.kafka
@pytest.mark.parametrize("label_topic", [False, True], ids=["labels-in-records", "label-topic"])
def test_a_rebalance_hands_held_records_to_the_partitions_next_owner(tmp_path, label_topic):
    """Labels on the records topic, or on a label topic co-partitioned with it (each member
    follows the label partitions of its record partitions)."""
    messages = [m for m in delayed_stream(2400, seed=11, max_delay=600.0, repeated=0,
                                                full_labels=0, bad=0)
                if m.startswith(b'{"id"')]
    half = len(messages) // 2
    first, second = messages[:half], messages[half:]
    firsts = {json.loads(m)["id"] for m in first if b'"x"' in m}
    later = {json.loads(m)["id"] for m in second if b'"x"' not in m}
    assert len(firsts & later) > 150     # records whose labels come after the rebalance
    want = oracle(messages, max_messages=10**9)
    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    broker = LocalBroker().start()
    procs: list[subprocess.Popen] = []
    cks = [tmp_path / "m0", tmp_path / "m1"]
    logs = [tmp_path / "m0.log", tmp_path / "m1.log"]
    try:
        broker.create_topic("records", partitions=PARTITIONS)
        if label_topic:
            broker.create_topic("labels", partitions=PARTITIONS)
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)

        def produce(batch: list[bytes]) -> None:
            for m in batch:   # records and labels keyed by record id: one partition per id
                key = str(json.loads(m)["id"]).encode()
                topic = "labels" if label_topic and b'"x"' not in m else "records"
                producer.send(topic, m, key=key, partition=key_partition(key, PARTITIONS))
            producer.flush()

        def start(k: int) -> None:
            cmd = [sys.executable, "-m", "dpstream.stream.cli", "serve", "--bootstrap",
                   broker.bootstrap, "--topic", "records", "--group", "g", "--schema",
                   str(schema), "--model", "rdt", "--epsilon", "1.0", "--checkpoint-dir",
                   str(cks[k]), "--metrics-port", "0", "--model-topic", "models",
                   "--max-held", "1000000", "--held-messages", "1000000000",
                   "--checkpoint-interval", "0.5", "--seed", str(k),
                   *(["--label-topic", "labels"] if label_topic else [])]
            procs.append(subprocess.Popen(
                cmd, stdout=open(logs[k], "wb"), stderr=subprocess.STDOUT,
                env={**os.environ, "DPSTREAM_MEMBER_ID": f"m{k}", "DPSTREAM_WARM_UP": "false"}))

        start(0)
        _wait(lambda: _assignments(logs[0]) >= 1, 120, "m0's assignment", logs)
        produce(first)
        _wait(lambda: _counters(cks[0]).get("seen", 0) >= len(first), 120,
              "m0 to read the first half", logs)
        assert _held(cks[0]) > 150, "records must be held when the second member joins"
        start(1)
        _wait(lambda: _assignments(logs[1]) >= 1 and _assignments(logs[0]) >= 2, 120,
              "the rebalance", logs)
        produce(second)
        _wait(lambda: sum(_counters(ck).get("seen", 0) for ck in cks) >= len(messages), 180,
              "every message", logs)
        time.sleep(1.0)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        assert [p.wait(60) for p in procs] == [0, 0]
        got = [_counters(ck) for ck in cks]
        total = {k: sum(c.get(k, 0) for c in got) for k in SUMMED}
        assert total == {k: want.get(k, 0) for k in SUMMED}
        assert got[0]["held_handed_over"] > 0 and got[1]["held_adopted"] > 0
        assert got[0]["labels_joined"] > 0 and got[1]["labels_joined"] > 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        broker.stop()
