"""Members that hold their closed windows (issue 23: relevance before trees), against a real
broker (tansu): the release goes out first, the trees grow once the other member's release
for the stretch arrived, and a member killed while holding a window never lets the relevance
of its records be released twice; draining a backlog, a member can wait after each close for
the other member's window of the stretch (``await_windows``). Also: the
windows of a member that left the group for good are retired on the topic."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.connectors.local_broker import LocalBroker
from dpstream.connectors.model_topic import ModelTopic
from dpstream.models.windows.window_exchange import relevance_key
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream import members as members_mod
from dpstream.stream.members import WindowMember
from dpstream.stream.runner import Runner

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def broker():
    b = LocalBroker().start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def records():
    """Stream record ``i`` on partition ``t:{i % 2}`` at offset ``i // 2``, its Kafka
    timestamp ``i`` seconds."""
    X, y, _ = load_adult("train")
    return {p: [SourceRecord(value=json.dumps({"id": i, "x": X[i], "y": y[i]}).encode(),
                             partition=f"t:{p}", offset=i // 2, meta={"timestamp": float(i)})
                for i in range(p, 1200, 2)] for p in (0, 1)}


def _member(broker, tmp_path, name, stop, partitions=None):
    runner = Runner.create("median-forest", ADULT_SCHEMA, store=CheckpointStore(tmp_path / name),
                           epsilon=1.0, params={"window_size": 300, "warmup": None,
                                                "max_windows": 1000, "n_trees": 3,
                                                "drift": False})
    topic = ModelTopic(broker.bootstrap, f"models-{tmp_path.name}", stop=stop)   # per test
    assert topic.connect()
    member = WindowMember(runner, topic, name)
    member.start()
    for p in partitions or ():
        member.position_of(f"t:{p}")
    if partitions is not None:
        member.on_assigned(list(partitions), 2)
    return member


def _until(pred, timeout=15.0):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def _close(*members):
    for m in members:
        m.runner.store.close()
        m.topic.close()


def test_the_release_goes_first_and_the_trees_wait_for_the_others(broker, tmp_path, records,
                                                                  capsys):
    from dpstream.stream.service import status_command

    stop = threading.Event()
    a, b = (_member(broker, tmp_path, n, stop, [p]) for n, p in (("a", 0), ("b", 1)))
    assert a.runner.model.hold and a.runner.model.current_window_size == 150
    assert a.process_many(records[0][:150]) == 150          # a's first window closes: held
    ma = a.runner.model
    assert ma.held["index"] == 0 and ma.windows_closed == 0
    assert a.committable() == {"t:0": 0}                    # its records: in no window yet
    capsys.readouterr()
    status_command(str(tmp_path / "a"))                      # its checkpoint says so
    assert "held window: 150 records" in capsys.readouterr().out
    _until(lambda: (b.poll(100), relevance_key("a", 1) in
                    b.runner.model.__dict__.get("_foreign_relevance", {}))[1])
    assert b.ensemble.windows == {}                         # the release, not trees
    a.poll()
    assert ma.held is not None                               # b has released nothing yet
    assert b.process_many(records[1][:150]) == 150          # b closes: a is ahead, b grows
    assert b.runner.model.windows_closed == 1 and b.runner.model.held is None
    _until(lambda: (a.poll(100), ma.held is None)[1])       # b's window reached a: a grows
    assert ma.windows_closed == 1 and a.committable() == {"t:0": 150}
    assert sorted(ma._foreign_relevance) == ["b/window-000000000000"]
    _until(lambda: (b.poll(100), len(b.ensemble.windows) == 2)[1])
    assert sorted(b.runner.model._foreign_relevance) == ["a/window-000000000000"]
    _close(a, b)


@pytest.mark.parametrize("published", [True, False])
def test_a_member_killed_while_holding_never_releases_relevance_twice(broker, tmp_path,
                                                                      records, published,
                                                                      monkeypatch):
    """a holds its second window when it is killed -9 (its checkpoint holds the window; the
    release reached the topic, or the kill came between the checkpoint and the publish). At
    restart a drops the held window and rewinds; b takes a's partition and trains the
    records. Published: the release stays in a's evidence and b's window holding those
    records releases no relevance. Not published: a takes the release back, and b releases
    the records' relevance as it would any record's."""
    stop = threading.Event()
    a, b = (_member(broker, tmp_path, n, stop, [p]) for n, p in (("a", 0), ("b", 1)))
    a.process_many(records[0][:150])
    b.process_many(records[1][:150])
    _until(lambda: (a.poll(100), a.runner.model.held is None)[1])
    if not published:
        def killed(updates):
            raise KeyboardInterrupt("killed between the checkpoint and the publish")
        monkeypatch.setattr(a.topic, "publish", killed)
        with pytest.raises(KeyboardInterrupt):
            a.process_many(records[0][150:300])
        monkeypatch.undo()
    else:
        a.process_many(records[0][150:300])
    assert a.runner.model.held["index"] == 1 and a.runner.model._relevance.releases == 2
    _close(a)                                                # killed -9
    a = _member(broker, tmp_path, "a", stop)
    ma = a.runner.model
    assert a.discarded == 150 and ma.held is None and a.runner.positions == {"t:0": 150}
    assert ma._relevance.releases == (2 if published else 1)
    assert a.spent == ({"t:0": 300} if published else {})
    b.on_revoke()                                            # the group rebalances: b takes t:0
    b.on_assigned([0, 1], 2)
    assert not b.runner.model.hold                           # no other member trains
    for p in ("t:0", "t:1"):  # (t:0 from a's handoff: the topic is read before a record)
        b.position_of(p)
    mb = b.runner.model
    releases = mb._relevance.releases
    b.process_many(records[0][:300] + records[1][150:300])
    assert b.runner.positions == {"t:0": 300, "t:1": 300} and mb.records_seen == 450
    assert b.spent == {"t:0": 300 if published else 150}   # (150: a's first, grown window)
    assert mb.windows_closed == 2 and mb._relevance.releases == releases + (not published)
    assert (mb._windows[-1].relevance is None) == published
    b.process_many(records[0][300:450] + records[1][300:450])   # the next window: as usual
    assert mb._relevance.releases == releases + 1 + (not published)
    _close(a, b)


def test_after_its_close_a_draining_member_waits_for_the_others_windows(broker, tmp_path,
                                                                        records, monkeypatch):
    monkeypatch.setattr(members_mod, "WINDOWS_MAX_S", 30.0)
    stop = threading.Event()
    a, b = (_member(broker, tmp_path, n, stop, [p]) for n, p in (("a", 0), ("b", 1)))
    a.backlog = b.backlog = lambda: 5000   # both drain a backlog
    a.await_closes = b.await_closes = True
    done = []
    worker = threading.Thread(target=lambda: done.append(a.process_adopting(records[0][:300])))
    worker.start()                          # a closes its first window at record 150, then waits
    _until(lambda: a.runner.model.held is not None or a.runner.model.windows_closed > 0)
    worker.join(0.5)
    assert worker.is_alive() and a.runner.counters["learned"] == 256   # one piece, then waits
    assert b.process_many(records[1][:150]) == 150   # b closes; a's release is in: b grows
    _until(lambda: (b.poll(100), b.runner.model.held is None)[1])
    worker.join(30)
    assert done == [300] and not worker.is_alive()
    assert a.await_stats["waits"] == 1 and a.await_stats["timeouts"] == 0
    assert "b/window-000000000000" in a.ensemble.windows   # in the union before record 257
    _close(a, b)


def test_a_member_waits_only_while_it_drains_and_at_most_the_limit(broker, tmp_path, records,
                                                                   monkeypatch):
    monkeypatch.setattr(members_mod, "WINDOWS_MAX_S", 0.3)
    stop = threading.Event()
    a, b = (_member(broker, tmp_path, n, stop, [p]) for n, p in (("a", 0), ("b", 1)))
    a.backlog = lambda: 5000
    assert a.process_adopting(records[0][:300]) == 300   # the default: never waits
    assert a.await_stats["waits"] == 0
    a.await_closes = True
    a.backlog = lambda: 10                   # keeping up: never waits
    assert a.process_adopting(records[0][300:450]) == 150
    assert a.await_stats == {"waits": 0, "waited_s": 0.0, "timeouts": 0}
    a.backlog = lambda: 5000                 # draining; b never trains: the wait is bounded
    assert a.process_adopting(records[0][450:600]) == 150
    assert a.await_stats["timeouts"] >= 1 and 0.3 <= a.await_stats["waited_s"] < 5
    assert a.runner.model.__dict__["member_union"]["awaits"]["timeouts"] >= 1
    _close(a, b)


def _plain_member(broker, tmp_path, name, stop, partitions):
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


def test_the_windows_of_a_member_that_left_are_retired_on_the_topic(broker, tmp_path, records,
                                                                    caplog, capsys):
    """b leaves the group for good and a takes its partition: once a's windows push b's out
    of the vote, a retires them with tombstones on the model topic, says so in its log and in
    ``dpstream status``."""
    from dpstream.stream.service import status_command

    stop = threading.Event()
    a, b = (_plain_member(broker, tmp_path, n, stop, [p]) for n, p in (("a", 0), ("b", 1)))
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
