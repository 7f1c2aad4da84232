"""Window forests across consumer-group members (issue 23) against a real broker (tansu): the
model topic round trip, and members that join, are killed -9, restart and leave without losing
or training twice a single record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from dpstream.connectors import CheckpointStore
from dpstream.connectors.idmemory import saved_keys
from dpstream.connectors.local_broker import LocalBroker
from dpstream.connectors.model_topic import (
    FETCH_WAIT_MS,
    ModelTopic,
    ModelTopicError,
    decode_message,
)
from dpstream.models import MedianForestClassifier
from dpstream.models.windows.window_exchange import WindowEnsemble, window_key
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.service import status_command

pytestmark = pytest.mark.kafka

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]
PARAMS = ["--set", "window_size=300", "--set", "warmup=null", "--set", "max_windows=1000",
          "--set", "n_trees=3"]


@pytest.fixture
def broker():
    b = LocalBroker().start()
    yield b
    b.stop()


def _model(seed):
    return MedianForestClassifier(schema=ADULT_SCHEMA, epsilon=1.0, n_trees=3, window_size=300,
                                  warmup=None, max_windows=1000, seed=seed)


def test_model_topic_round_trip_tombstones_and_forgeries(broker):
    X, y, _ = load_adult("train")
    stop = threading.Event()
    a = ModelTopic(broker.bootstrap, "models", stop=stop, key=b"k")
    b = ModelTopic(broker.bootstrap, "models", stop=stop, key=b"k")
    assert a.connect() and b.connect() and a.compacted is True
    # the reader's fetch waits 10 ms at the broker, not kafka-python's 500: a member sees the
    # others' windows within milliseconds (benchmarks/members_model_topic_latency.py)
    assert b.consumer.config["fetch_max_wait_ms"] == FETCH_WAIT_MS <= 20
    model = _model(1)
    for x, label in zip(X[:900], y[:900], strict=True):
        model.learn_one(x, label)
    mine, theirs = WindowEnsemble(model, "a"), WindowEnsemble(_model(2), "b")
    a.publish(mine.local_updates())
    got = b.catch_up()
    assert sorted(got) == sorted(mine.windows) and len(got) == 3
    for key, state in got.items():
        assert theirs.adopt(key, state)
    probe = X[1000:1200]
    assert list(theirs.predict_many(probe)) == list(mine.predict_many(probe))
    a.publish({next(iter(got)): None})                  # a tombstone
    assert b.catch_up() == {next(iter(got)): None}
    # a forged (unsigned) and an altered message are refused, never decoded
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    value = next(iter(a.consumer.poll(timeout_ms=2000).values()))[0].value
    with pytest.raises(ModelTopicError, match="HMAC"):
        decode_message(value, key=b"other")
    bad = bytearray(value)
    bad[-1] ^= 1
    producer.send("models", bytes(bad), key=b"x/window-000000000001")
    producer.send("models", value.replace(b',"hmac_sha256":', b',"x":'),
                  key=b"x/window-000000000002")
    producer.flush()
    producer.close()
    assert b.catch_up() == {} and b.rejected == 2
    a.close()
    b.close()


def _values(n):
    X, y, _ = load_adult("train")
    return [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(n)]


def _member(broker, tmp_path, name, *extra):
    schema = tmp_path / "schema.json"
    if not schema.exists():
        ADULT_SCHEMA.dump(schema)
    log = open(tmp_path / f"{name}.log", "ab")
    return subprocess.Popen(
        [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", "records", "--group",
         "dp", "--schema", str(schema), "--epsilon", "1.0", "--model", "median-forest",
         "--checkpoint-dir", str(tmp_path / name), "--metrics-port", "0",
         "--checkpoint-interval", "0.3", "--model-topic", "models", *PARAMS, *extra],
        stdout=log, stderr=log, env={**os.environ, "DPSTREAM_MEMBER_ID": name})


def _state(tmp_path, name):
    try:
        return CheckpointStore.read(tmp_path / name)
    except Exception:   # mid-write from another process: read again
        return None


def _positions(tmp_path, names):
    out = {}
    for name in names:
        st = _state(tmp_path, name)
        for p, off in (st or {}).get("positions", {}).items():
            out[p] = max(out.get(p, 0), off)
    return out


def _wait(pred, timeout, what, tmp_path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    logs = "".join((tmp_path / f).read_text(errors="replace")[-1500:]
                   for f in ("a.log", "b.log") if (tmp_path / f).exists())
    raise AssertionError(f"timed out waiting for {what}\n{logs}")


def test_members_join_killed_restart_leave_exactly_once(broker, tmp_path):
    n, parts = 6000, 4
    values = _values(n)
    broker.create_topic("records", partitions=parts)
    broker.produce("records", values[:3000], partitions=parts)
    a = _member(broker, tmp_path, "a")
    _wait(lambda: sum(_positions(tmp_path, "a").values()) >= 600, 60, "a's progress", tmp_path)
    b = _member(broker, tmp_path, "b")          # joins: a rebalance mid-stream
    _wait(lambda: sum(_positions(tmp_path, "b").values()) > 0, 60, "b's progress", tmp_path)
    _wait(lambda: sum(_positions(tmp_path, "ab").values()) == 3000, 60, "3000 read", tmp_path)
    broker.produce("records", values[3000:3100], partitions=parts)   # less than a window
    _wait(lambda: (st := _state(tmp_path, "a")) is not None and st["model"]._buffer_y
          and sum(_positions(tmp_path, "ab").values()) == 3100, 60, "a's open window saved",
          tmp_path)
    a.send_signal(signal.SIGKILL)   # kill -9 mid-stream: its checkpoint holds an open window
    a.wait(10)
    assigned = (tmp_path / "a.log").read_text(errors="replace").count("partitions assigned")
    a = _member(broker, tmp_path, "a")          # restarts from its checkpoint
    # the rest once a is back in the group (it warms up before it joins): else b alone could
    # drain the topic first, and the members would not end with two partitions each
    _wait(lambda: (tmp_path / "a.log").read_text(errors="replace").count(
        "partitions assigned") > assigned, 60, "a's rejoin", tmp_path)
    broker.produce("records", values[3100:], partitions=parts)
    ends = {f"records:{p}": sum(1 for i in range(n) if i % parts == p) for p in range(parts)}
    _wait(lambda: _positions(tmp_path, "ab") == ends, 90, "the topic drained", tmp_path)
    for proc in (a, b):                          # leave: each closes and publishes its window
        proc.send_signal(signal.SIGTERM)
    assert [a.wait(60), b.wait(60)] == [0, 0]
    # every record is in exactly one member's id memory and in exactly one published window
    ids = Counter()
    learned = 0
    for name in "ab":
        st = CheckpointStore.read(tmp_path / name)
        ids.update(i for _, i in saved_keys(st["ids"]))
        learned += st["counters"]["learned"]
        assert st["model"]._buffer_y == []      # nothing left unpublished
    assert sorted(ids) == list(range(n)) and set(ids.values()) == {1}
    assert learned == n
    reader = ModelTopic(broker.bootstrap, "models", stop=threading.Event())
    assert reader.connect()
    live = {k: v for k, v in reader.catch_up().items() if v is not None}
    reader.close()
    # a held window's release stays live only if its member was killed holding it: then
    # the window was dropped at the restart, and its records are in someone's later window
    windows = {k: v for k, v in live.items() if "/window-" in k}
    claims = {k: v for k, v in live.items() if "/claim-" in k}
    assert {v["member"] for v in claims.values()} == {"a", "b"}   # each claimed what it read
    assert {v["member"] for k, v in live.items() if k not in windows and k not in claims} \
        <= {"a"}
    assert sum(w["records"] for w in windows.values()) == n
    assert {w["member"] for w in windows.values()} == {"a", "b"}
    # a alone read all four partitions (whole windows); two members hold two each and size
    # windows and trees by that share: 150 records, 3 * 0.5 -> 2 trees
    shares = Counter(w["extra"].get("share", 1.0) for w in windows.values())
    assert set(shares) == {1.0, 0.5}, shares
    assert all(w["records"] <= 150 and len(w["trees"]) <= 2 for w in windows.values()
               if w["extra"].get("share") == 0.5)
    models = [CheckpointStore.read(tmp_path / m)["model"] for m in "ab"]
    assert [m.share for m in models] == [0.5, 0.5]
    # each releases the relevance of the attributes its two partitions own: together, all
    held = [m.partitions for m in models]
    assert sorted(p for ps, _ in held for p in ps) == [0, 1, 2, 3] and {t for _, t in held} == {4}
    owned = [m._relevance.owned for m in models]
    assert sorted(owned[0] + owned[1]) == list(range(models[0]._relevance.n_attributes))
    discarded = "discarded" in (tmp_path / "a.log").read_text()
    assert discarded          # the restart dropped its unpublished window, re-read by others
    # the same ensemble on every member: rebuilt here from the topic, as each member does
    ens = [WindowEnsemble(_model(s), name) for s, name in ((3, "x"), (4, "y"))]
    for e in ens:
        for key, state in windows.items():
            e.adopt(key, state)
    X, _, _ = load_adult("test")
    assert list(ens[0].predict_many(X[:300])) == list(ens[1].predict_many(X[:300]))
    print(json.dumps({"windows": len(windows), "discarded_after_kill": discarded}))


def _runner_member(broker, tmp_path, name, stop):
    from dpstream.connectors import CheckpointStore as Store
    from dpstream.stream.members import WindowMember
    from dpstream.stream.runner import Runner

    runner = Runner.create("median-forest", ADULT_SCHEMA, store=Store(tmp_path / name),
                           epsilon=1.0, params={"window_size": 300, "warmup": None,
                                                "max_windows": 1000, "n_trees": 3})
    topic = ModelTopic(broker.bootstrap, "models", stop=stop)
    assert topic.connect()
    member = WindowMember(runner, topic, name)
    member.start()
    return member


@pytest.mark.parametrize("batched", [False, True])
def test_handoff_revoke_and_crash_in_process(broker, tmp_path, batched, capsys):
    """The handoff, step by step, on one partition: a revoke closes and publishes the open
    window; the next owner starts after it; a crash's open window is discarded on restart and
    its records are trained once, by whoever reads them next. ``batched``: records arrive as
    the serve loop hands them over, in batches (``process_many``)."""
    from dpstream.connectors import SourceRecord

    def feed(member, records) -> int:
        if batched:
            return sum(member.process_many(records[i:i + 128])
                       for i in range(0, len(records), 128))
        return sum(member.process(r) for r in records)

    X, y, _ = load_adult("train")
    recs = [SourceRecord(value=json.dumps({"id": i, "x": X[i], "y": y[i]}).encode(),
                         partition="t:0", offset=i) for i in range(1000)]
    stop = threading.Event()
    a = _runner_member(broker, tmp_path, "a", stop)
    assert a.position_of("t:0") is None            # never seen: from the beginning
    assert feed(a, recs[:350]) == 350
    assert a.runner.model.windows_closed == 1 and a.pending == [("t:0", o) for o in
                                                              range(300, 350)]
    assert a.committable() == {"t:0": 300}         # only records inside published windows
    b = _runner_member(broker, tmp_path, "b", stop)   # reads a's first window at its start
    a.on_revoke()                                  # a rebalance: close, checkpoint, publish
    assert a.runner.model.windows_closed == 2 and a.committable() == {"t:0": 350}
    assert not feed(a, recs[350:351])              # fetched before the revoke: dropped
    assert b.position_of("t:0") == 300             # b has not read a's last window yet ...
    feed(b, recs[:600])                            # ... but does before its first record
    assert b.runner.counters["learned"] == 250 and b.runner.positions == {"t:0": 600}
    assert b.ensemble.members() == ["a"]           # b's open window (250 < 300) is unpublished
    # b is killed -9: its checkpoint holds the open window
    b.runner.checkpoint()
    status_command(str(tmp_path / "b"), as_json=True)    # status shows the union b used
    union = json.loads(capsys.readouterr().out)["union"]
    assert union["members"] == ["a"] and union["member"] == "b"
    assert union["windows_known"] == 2 and union["records_in_windows"] == 350
    assert len(b.runner.model._buffer_y) == 250
    b.runner.store.close()
    b.topic.close()
    b2 = _runner_member(broker, tmp_path, "b", stop)   # restart: discard, rewind to 350
    assert b2.discarded == 250 and b2.runner.positions == {"t:0": 350}
    assert b2.runner.counters["learned"] == 0 and not b2.runner.model._buffer_y
    assert a.position_of("t:0") == 350              # a takes t:0 back: a's own position
    feed(a, recs)
    assert a.runner.counters["learned"] == 1000       # 350 before, 650 now: each once
    a.on_revoke()
    assert a.merge() >= 0 and sum(s["records"] for s in a.ensemble.windows.values()) == 1000
    for m in (a, b2):
        m.runner.store.close()
        m.topic.close()


def test_serve_settings_for_members(tmp_path):
    from dpstream.stream.service import ServeSettings

    base = {"bootstrap": "h:1", "topic": "t", "schema_path": "s.json", "epsilon": 1.0,
            "checkpoint_dir": str(tmp_path / "ck")}
    with pytest.raises(ValueError, match="--board-topic"):   # S-GBDT: not by window merging
        ServeSettings(**base, model_topic="m")
    a = ServeSettings(**base, model="rdt", model_topic="m")
    again = ServeSettings(**base, model="rdt", model_topic="m")
    other = ServeSettings(**{**base, "checkpoint_dir": str(tmp_path / "ck2")}, model="rdt",
                          model_topic="m")
    assert a.member_id == again.member_id != other.member_id   # one id per checkpoint dir
    assert ServeSettings(**base, model="rdt", model_topic="m", member_id="x").member_id == "x"
    seeded = [ServeSettings(**base, model="rdt", model_topic="m", member_id=m, seed=1).seed
              for m in ("x", "y", "x")]
    assert seeded[0] == seeded[2] != seeded[1]     # members never draw the same noise
    with pytest.raises(ValueError, match="no '/'"):
        ServeSettings(**base, model="rdt", model_topic="m", member_id="x/y")
    assert not a.whole_windows     # members size windows by their share unless told not to
    assert ServeSettings(**base, model="rdt", model_topic="m", whole_windows=True).whole_windows
    with pytest.raises(ValueError, match="--whole-windows needs --model-topic"):
        ServeSettings(**base, model="rdt", whole_windows=True)


def test_a_member_reads_the_model_topic_right_before_its_window_closes(broker, tmp_path,
                                                                     monkeypatch):
    """``process_adopting`` (the serve loop's path) polls the model topic right before the
    record that closes the member's window, so another member's window published while this
    member's batch was under way is in its evidence when its trees draw split attributes."""
    from dpstream.connectors import SourceRecord

    X, y, _ = load_adult("train")

    def recs(partition: str, start: int) -> list:
        return [SourceRecord(value=json.dumps({"id": i, "x": X[i], "y": y[i]}).encode(),
                             partition=partition, offset=i - start)
                for i in range(start, start + 600)]

    stop = threading.Event()
    a, b = (_runner_member(broker, tmp_path, name, stop) for name in ("a", "b"))
    for m, p in ((a, 0), (b, 1)):                    # each owns one of two partitions
        m.position_of(f"t:{p}")
        m.runner.model.set_share(0.5, [p], 2)        # windows of 150 records
    ra, rb = recs("t:0", 0), recs("t:1", 1000)
    foreign_at_release = []
    release = MedianForestClassifier._release_relevance

    def spy(model, *args):
        if model is b.runner.model:
            foreign_at_release.append(sorted(model.__dict__.get("_foreign_relevance", {})))
        return release(model, *args)

    monkeypatch.setattr(MedianForestClassifier, "_release_relevance", spy)
    assert b.process_adopting(rb[:149]) == 149       # b's open window: one record short
    assert a.process_adopting(ra[:150]) == 150       # a closes and publishes its window
    time.sleep(0.3)                                  # (published a moment before)
    assert b.process_adopting(rb[149:600]) == 451    # b closes its window, then two more
    assert foreign_at_release[0] == [window_key("a", 0)], foreign_at_release
    assert b.ensemble.members() == ["a", "b"]
    for m in (a, b):
        m.runner.store.close()
        m.topic.close()


@pytest.mark.parametrize("batched", [False, True])
def test_every_checkpoint_of_a_member_with_predictions_restarts_consistently(
        broker, tmp_path, batched):
    """With a predictions sink the runner saves after every round; a member's checkpoint must
    then already list the round's records among the open and held windows' records
    (``pending``): a restart from it rewinds the partitions to the first of them. Saved
    before the member had noted them, a kill -9 right after would have left the restart
    with fewer listed records than the model buffers, taken as a single-process checkpoint
    whose window it trains (a second time, if the partition's next owner already did). One
    checkpoint per round, not the runner's and then the member's publish."""
    from dpstream.connectors import CheckpointStore as Store
    from dpstream.connectors import SourceRecord
    from dpstream.stream.members import WindowMember
    from dpstream.stream.runner import Runner

    class Sink:
        sent = 0

        def send_json(self, msg, key=None):
            Sink.sent += 1

        def flush(self, timeout=None):
            pass

    stop = threading.Event()
    runner = Runner.create("median-forest", ADULT_SCHEMA, store=Store(tmp_path / "a"),
                           epsilon=1.0, predictions=Sink(),
                           params={"window_size": 300, "warmup": None, "max_windows": 1000,
                                   "n_trees": 3})
    assert runner.checkpoint_every_round
    saved: list = []
    real_save = runner.store.save

    def save(state):
        model = state["model"]
        saved.append((len(model.member_pending), len(model._buffer_y) + model.held_records))
        return real_save(state)

    runner.store.save = save
    topic = ModelTopic(broker.bootstrap, "models", stop=stop)
    assert topic.connect()
    member = WindowMember(runner, topic, "a")
    member.start()
    X, y, _ = load_adult("train")
    recs = [SourceRecord(value=json.dumps({"id": i, "x": X[i], "y": y[i]}).encode(),
                         partition="t:0", offset=i, meta={"timestamp": 1e9 + i / 100})
            for i in range(1000)]   # stream time: a held window waits for t:1's owner
    assert member.position_of("t:0") is None
    member.on_assigned([0], 2)     # another member reads t:1: closed windows are held
    assert runner.model.hold
    if batched:
        n = sum(member.process_many(recs[i:i + 128]) for i in range(0, 1000, 128))
    else:
        n = sum(member.process(r) for r in recs)
    assert n == 1000 and Sink.sent == 1000
    closed = runner.model.windows_closed
    assert closed >= 3 and len(saved) >= closed
    assert any(held for _, held in saved), saved   # windows held while saved
    assert all(listed == buffered for listed, buffered in saved), saved
    assert runner.counters["checkpoints"] <= runner.model.training_rounds + 2
    runner.store.close()
    topic.close()


def _adult_records(n):
    from dpstream.connectors import SourceRecord

    X, y, _ = load_adult("train")
    return [SourceRecord(value=json.dumps({"id": i, "x": X[i], "y": y[i]}).encode(),
                         partition="t:0", offset=i) for i in range(n)]


def _read_union(broker):
    """What a reader that joins now builds from the whole model topic (in its order), the
    windows it accepts with their record ranges, and how many it refused."""
    reader = ModelTopic(broker.bootstrap, "models", stop=threading.Event())
    assert reader.connect()
    updates = reader.catch_up()
    reader.close()
    ens = WindowEnsemble(_model(9), "reader")
    for key, state in updates.items():
        ens.adopt(key, state)
    return ens.windows, ens.fenced


def _exactly_once(windows, n):
    """Every record of [0, n) in exactly one accepted window (their ranges tile it)."""
    spans = sorted(tuple(w["ranges"]["t:0"]) for w in windows.values() if "ranges" in w)
    assert sum(w["records"] for w in windows.values()) == n, spans
    edge = 0
    for first, end in spans:
        assert first >= edge, f"overlapping windows: {spans}"
        edge = end
    assert edge == n, spans


def test_an_evicted_member_publishes_nothing_its_partitions_next_owner_trains(broker,
                                                                                tmp_path):
    """Issue 62, finding 1: a member frozen past its session (evicted without a revoke)
    wakes and closes its open window, while the partition's new owner has claimed it and
    trained the same records. Every reader refuses the zombie's window (the claim precedes
    it on the model topic); the zombie, reading the claim, drops it from its own union and
    tombstones it. Before claims, both windows voted: 300 records in two windows."""
    recs = _adult_records(900)
    stop = threading.Event()
    a = _runner_member(broker, tmp_path, "a", stop)
    a.position_of("t:0")
    assert sum(a.process(r) for r in recs[:350]) == 350      # window [0, 300), 50 open
    b = _runner_member(broker, tmp_path, "b", stop)          # the group gave t:0 to b
    assert b.position_of("t:0") == 300
    assert sum(b.process(r) for r in recs[300:600]) == 300   # claim from 300, window [300, 600)
    assert sum(a.process(r) for r in recs[350:600]) == 250   # the zombie's window closes
    windows, fenced = _read_union(broker)
    assert fenced == 1 and {w["member"] for w in windows.values()} == {"a", "b"}
    _exactly_once(windows, 600)
    a.poll(timeout_ms=500)                                    # it reads b's claim: lost
    assert not a.owned and a.runner.model.windows_closed == 2
    assert a.runner.model._windows[1].trees == []              # voided: it votes no more
    # finding 6: what its drift signal read of them influences nothing it publishes later
    drift = a.runner.model._drift
    assert drift.releases > 0 and drift._since_restart == 0 and drift._count == 0
    assert not a.process(recs[600])                           # trains nothing more of t:0
    b.merge()
    assert sum(s["records"] for s in a.ensemble.windows.values()) == 600
    assert sum(s["records"] for s in b.ensemble.windows.values()) == 600
    a.publish()                                               # the tombstone
    windows, _ = _read_union(broker)
    _exactly_once(windows, 600)
    for m in (a, b):
        assert m.runner.model.privacy_report()["epsilon"] <= 1.0
        m.runner.store.close()
        m.topic.close()


def test_a_restart_never_publishes_a_checkpointed_window_whose_records_moved_on(
        broker, tmp_path, monkeypatch):
    """Issue 62, finding 2: a member checkpoints a finished window and dies before the broker
    has it; the partition's next owner starts at the last published handoff and trains the
    same records. At restart the member reads the claim and drops the window untrained
    instead of publishing it (before: 900 records in windows from 600)."""
    recs = _adult_records(900)
    stop = threading.Event()
    a = _runner_member(broker, tmp_path, "a", stop)
    a.position_of("t:0")
    assert sum(a.process(r) for r in recs[:350]) == 350      # window [0, 300) published
    monkeypatch.setattr(a.topic, "publish", lambda updates: (_ for _ in ()).throw(
        RuntimeError("the broker never acknowledged")))
    with pytest.raises(RuntimeError):
        for r in recs[350:600]:                               # window [300, 600): saved, lost
            a.process(r)
    assert a.runner.model.windows_closed == 2
    a.runner.store.close()                                     # kill -9
    a.topic.close()
    b = _runner_member(broker, tmp_path, "b", stop)
    assert b.position_of("t:0") == 300
    assert sum(b.process(r) for r in recs[300:600]) == 300
    monkeypatch.undo()
    a2 = _runner_member(broker, tmp_path, "a", stop)          # restart: the claim wins
    assert a2.runner.counters["learned"] == 300 and a2.runner.positions["t:0"] == 300
    windows, fenced = _read_union(broker)
    assert fenced == 0 and window_key("a", 1) not in windows
    _exactly_once(windows, 600)
    assert sum(s["records"] for s in a2.ensemble.windows.values()) == 600
    for m in (a2, b):
        m.runner.store.close()
        m.topic.close()


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_a_member_stopped_past_its_session_trains_nothing_twice(broker, tmp_path, client):
    """Issue 62, finding 1, through the real broker: SIGSTOP a member past its session
    timeout while records keep coming (the group gives its partitions to the other member),
    then SIGCONT it. Every record ends in exactly one window the union accepts; the woken
    member's partitions were lost (kafka's lost callback, or the other's claim)."""
    n, parts = 4000, 2
    values = _values(n)
    broker.create_topic("records", partitions=parts)
    broker.produce("records", values[:1000], partitions=parts)
    a, b = (_member(broker, tmp_path, m, "--kafka-client", client) for m in "ab")
    try:
        _wait(lambda: all(sum(_positions(tmp_path, m).values()) > 0 for m in "ab"), 60,
              "both members' progress", tmp_path)
        broker.produce("records", values[1000:1500], partitions=parts)
        time.sleep(0.5)
        a.send_signal(signal.SIGSTOP)   # frozen mid-window: past its 6 s session
        broker.produce("records", values[1500:3000], partitions=parts)
        time.sleep(12)
        a.send_signal(signal.SIGCONT)
        broker.produce("records", values[3000:], partitions=parts)
        ends = {f"records:{p}": sum(1 for i in range(n) if i % parts == p) for p in range(parts)}
        _wait(lambda: _positions(tmp_path, "ab") == ends, 90, "the topic drained", tmp_path)
        time.sleep(2)
    finally:
        for proc in (a, b):
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        codes = [a.wait(60), b.wait(60)]
    assert codes == [0, 0], codes
    assert "member a: lost partitions" in (tmp_path / "a.log").read_text(errors="replace")
    windows, _ = _read_union(broker)
    spans: dict[str, set] = {}
    for w in windows.values():
        for p, (first, end) in w["ranges"].items():
            spans.setdefault(p, set()).add((w["member"], first, end))
    for p, found in spans.items():
        edge = 0
        for _m, first, end in sorted(found, key=lambda s: s[1:]):
            assert first >= edge, f"{p}: records in two accepted windows: {sorted(found)}"
            edge = end
    assert sum(w["records"] for w in windows.values()) == n
    for name in "ab":
        assert CheckpointStore.read(tmp_path / name)["model"].privacy_report()["epsilon"] <= 1
