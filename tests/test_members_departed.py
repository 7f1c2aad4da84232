"""A member that leaves the group for good (issue 23), against a real broker (tansu): once
the member that took its partition has pushed its windows out of the vote, it retires them
with tombstones on the model topic, says so in its log and in ``dpstream status``."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.connectors.local_broker import LocalBroker
from dpstream.connectors.model_topic import ModelTopic
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.members import WindowMember
from dpstream.stream.runner import Runner

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def broker():
    b = LocalBroker().start()
    yield b
    b.stop()


def _member(broker, tmp_path, name, stop, partitions):
    runner = Runner.create("median-forest", ADULT_SCHEMA, store=CheckpointStore(tmp_path / name),
                           epsilon=1.0, params={"window_size": 300, "warmup": None,
                                                "max_windows": 2, "n_trees": 3,
                                                "drift": False})
    topic = ModelTopic(broker.bootstrap, f"models-{tmp_path.name}", stop=stop)
    assert topic.connect()
    member = WindowMember(runner, topic, name, hold=False)
    member.start()
    for p in partitions:
        member.position_of(f"t:{p}")
    member.on_assigned(list(partitions), 2)
    return member


def test_the_windows_of_a_member_that_left_are_retired_on_the_topic(broker, tmp_path, caplog,
                                                                    capsys):
    from dpstream.stream.service import status_command

    X, y, _ = load_adult("train")
    records = {p: [SourceRecord(value=json.dumps({"id": i, "x": X[i], "y": y[i]}).encode(),
                                partition=f"t:{p}", offset=i // 2,
                                meta={"timestamp": float(i)})
                   for i in range(p, 1800, 2)] for p in (0, 1)}
    stop = threading.Event()
    a, b = _member(broker, tmp_path, "a", stop, [0]), _member(broker, tmp_path, "b", stop, [1])
    for lo in (0, 150):   # two windows each (150 records at a share of 1/2)
        assert a.process_many(records[0][lo:lo + 150]) == 150
        assert b.process_many(records[1][lo:lo + 150]) == 150
    a.merge()
    assert sorted(k.partition("/")[0] for k in a.ensemble.windows) == ["a", "a", "b", "b"]
    # b leaves the group for good: the rebalance hands its partition to a
    b.on_revoke()
    b.runner.checkpoint()
    b.runner.store.close()
    b.topic.close()
    a.on_revoke()
    a.on_assigned([0, 1], 2)
    for p in ("t:0", "t:1"):
        a.position_of(p)
    caplog.set_level(logging.INFO, logger="dpstream.members")
    # one whole window (300 records of both partitions) still leaves b's windows voting
    assert a.process_many(records[0][300:450] + records[1][300:450]) == 300
    assert any(k.startswith("b/") for k in a.ensemble.windows)
    assert "b" in {s["member"] for s in a.ensemble.kept()}
    # a second pushes them out of the vote (max_windows = 2 whole windows): retired
    assert a.process_many(records[0][450:600] + records[1][450:600]) == 300
    assert not any(k.startswith("b/") for k in a.ensemble.windows)
    assert "retiring 2 windows of b, which left the group" in caplog.text
    reader = ModelTopic(broker.bootstrap, f"models-{tmp_path.name}", stop=stop)
    assert reader.connect()
    seen = reader.catch_up()   # the latest message per key: b's are tombstones
    reader.close()
    assert {k for k, v in seen.items() if k.startswith("b/window")} == {
        "b/window-000000000000", "b/window-000000000001"}
    assert all(v is None for k, v in seen.items() if k.startswith("b/window"))
    assert a.runner.model.privacy_report()["epsilon"] <= 1.0
    a.runner.checkpoint()
    capsys.readouterr()
    status_command(str(tmp_path / "a"))
    assert "members that left the group, their windows retired: b" in capsys.readouterr().out
    a.runner.store.close()
    a.topic.close()
