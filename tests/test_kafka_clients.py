"""The Kafka client choice (``--kafka-client``): which client ``auto`` takes, the errors for an
unknown or absent one, and, against a real broker (tansu), that confluent-kafka's source commits
the checkpointed offsets as kafka-python's does and that a replay of one topic through either
client learns exactly the same model. The service tests that run against both clients are in
tests/test_service.py and tests/test_broker_faults.py."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from dpstream.connectors import CheckpointStore
from dpstream.connectors.kafka_clients import CHOICES, CLIENTS, resolve_kafka_client
from dpstream.connectors.local_broker import LocalBroker as Broker


# ------------------------------------------------------------------ the choice
def test_auto_takes_confluent_when_it_imports_else_kafka_python(monkeypatch):
    pytest.importorskip("confluent_kafka")
    assert resolve_kafka_client("auto") == resolve_kafka_client(None) == "confluent"
    assert resolve_kafka_client("kafka-python") == "kafka-python"
    assert resolve_kafka_client("confluent") == "confluent"
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)   # import now raises ImportError
    assert resolve_kafka_client("auto") == "kafka-python"
    assert resolve_kafka_client("kafka-python") == "kafka-python"


def test_an_absent_or_unknown_client_is_a_clear_error(monkeypatch):
    with pytest.raises(ValueError, match=r"unknown Kafka client 'rdkafka': choose auto, "
                                         r"kafka-python or confluent .*dpstream\[fast\]"):
        resolve_kafka_client("rdkafka")
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)
    with pytest.raises(ValueError, match=r"confluent-kafka package, which is not installed: "
                                         r"pip install 'dpstream\[fast\]'"):
        resolve_kafka_client("confluent")


def test_the_cli_and_the_settings_offer_the_same_choices(monkeypatch, tmp_path):
    from pydantic import ValidationError

    from dpstream.stream.cli import KAFKA, build_parser
    from dpstream.stream.service import ServeSettings, replay

    assert KAFKA["choices"] == CHOICES and CLIENTS == ("kafka-python", "confluent")
    args = build_parser().parse_args(["replay", "--source", "adult", "--epsilon", "1"])
    assert args.kafka_client == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--kafka-client", "rdkafka"])
    base = {"bootstrap": "h:1", "topic": "t", "schema_path": "s.json", "epsilon": 1,
            "checkpoint_dir": str(tmp_path)}
    assert ServeSettings(**base).kafka_client == "auto"
    monkeypatch.setenv("DPSTREAM_KAFKA_CLIENT", "kafka-python")
    assert ServeSettings(**base).kafka_client == "kafka-python"
    with pytest.raises(ValidationError):
        ServeSettings(**base, kafka_client="rdkafka")
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)   # asked for, not installed:
    with pytest.raises(ValueError, match=r"dpstream\[fast\]"):     # refused before any work
        replay("kafka://127.0.0.1:1/t", schema={"features": {}}, epsilon=1,
               kafka_client="confluent")


# ------------------------------------------------------------------ against a broker
@pytest.fixture
def broker():
    b = Broker().start()
    yield b
    b.stop()


@pytest.mark.kafka
@pytest.mark.parametrize("client", CLIENTS)
def test_a_source_commits_only_the_checkpointed_offsets_of_its_partitions(broker, client):
    from kafka import KafkaConsumer, TopicPartition

    from dpstream.connectors.kafka_clients import kafka_source

    broker.create_topic("records", partitions=2)
    broker.produce("records", [b"%d" % i for i in range(20)], partitions=2)
    source = kafka_source(client, broker.bootstrap, "records", "g", position_of=lambda k: None,
                          on_revoke=lambda: None, exclusive=True)
    assert source.connect(threading.Event())
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        got += source.poll(200)
    assert len(got) == 20 and source.assigned == {"records:0", "records:1"}
    assert {r.partition for r in got} == {"records:0", "records:1"}
    first = got[0]
    assert first.raw == first.value and set(first.meta) == {"topic", "kafka_partition",
                                                             "timestamp"}
    assert abs(first.meta["timestamp"] - time.time()) < 120   # the broker's, in seconds
    assert source.lag({"records:0": 10, "records:1": 4}) == 6
    # checkpointed positions: a partition of another topic is not this member's to commit
    source.commit({"records:0": 7, "records:1": 3, "other:0": 5})
    for _ in range(5):
        source.poll(100)   # (confluent-kafka's commit callbacks run in poll)
    source.close()
    check = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="g",
                          enable_auto_commit=False)
    try:
        assert check.committed(TopicPartition("records", 0)) == 7
        assert check.committed(TopicPartition("records", 1)) == 3
    finally:
        check.close()


@pytest.mark.kafka
def test_replay_of_a_topic_learns_the_same_model_through_either_client(broker, tmp_path):
    """One partition (one order of the records), seed 0: kafka-python and confluent-kafka
    deliver the same records at the same positions, and the runner learns the same model."""
    from dpstream.stream import ADULT_SCHEMA, load_adult
    from dpstream.stream.service import replay

    X, y, _ = load_adult("train")
    values = [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(1200)]
    values[100] = b'{"id": "broken", "x": {"age": 4'
    broker.create_topic("records", partitions=1)
    broker.produce("records", values, partitions=1)
    out, models = {}, {}
    for client in CLIENTS:
        ck = tmp_path / client
        out[client] = replay(f"kafka://{broker.bootstrap}/records?group=g-{client}",
                             schema=ADULT_SCHEMA, epsilon=1.0, seed=0, checkpoint_dir=str(ck),
                             params={"round_size": 200}, kafka_client=client)
        state = CheckpointStore.read(ck)
        out[client]["positions"] = state["positions"]
        models[client] = state["model"]
    a, b = out["kafka-python"], out["confluent"]
    assert a["error"] is None and b["error"] is None
    assert a["positions"] == b["positions"] == {"records:0": 1200}
    for key in ("records_seen", "records_learned", "dead_letters", "duplicates"):
        assert a[key] == b[key], key
    assert (a["records_learned"], a["dead_letters"]) == (1199, 1)
    assert a["privacy"] == b["privacy"]
    rows = [X[i] for i in range(1200, 1400)]
    first, second = models["kafka-python"], models["confluent"]
    assert [first.predict_one(x) for x in rows] == [second.predict_one(x) for x in rows]
    if hasattr(first, "predict_proba_one"):
        assert ([first.predict_proba_one(x) for x in rows]
                == [second.predict_proba_one(x) for x in rows])


def test_a_poll_across_a_rebalance_keeps_each_held_partitions_messages_once_in_order():
    """confluent-kafka may return, in the poll during which the assignment changed, messages
    fetched before it along with those fetched after: the source keeps only the partitions it
    still holds, from each one's assigned position on, each offset once."""
    pytest.importorskip("confluent_kafka")
    from dpstream.connectors.kafka_confluent import ConfluentSource

    class Msg:
        def __init__(self, partition, offset):
            self.p, self.o = partition, offset

        def error(self):
            return None

        def partition(self):
            return self.p

        def offset(self):
            return self.o

    source = ConfluentSource("h:1", "records", "g", position_of=lambda k: None,
                             on_revoke=lambda: None)
    source.assigned = {"records:0", "records:2"}      # records:1 went to another member
    source._starts = {0: 5, 2: -1}                    # records:2 from its beginning
    before = [Msg(0, 5), Msg(0, 6), Msg(1, 9), Msg(2, 0)]   # fetched before the change
    after = [Msg(0, 5), Msg(0, 6), Msg(0, 7), Msg(2, 0), Msg(2, 1), Msg(0, 3)]
    kept = [(m.partition(), m.offset()) for m in source._current(before + after)]
    assert kept == [(0, 5), (0, 6), (2, 0), (0, 7), (2, 1)]
