"""Checkpoints know where they stand (issue 62): a ``serve`` or a topic ``replay`` whose
checkpoint is behind the offsets its consumer group committed refuses to resume (exit status
2) instead of training those records a second time, unless ``--accept-behind``, which starts
at the committed offsets. The two cases, against a real broker (tansu, which keeps committed
offsets but drops their metadata, so the offset alone decides):

* the exclusive-member handoff: a second ``serve`` in the group waits paused while the first
  one trains; when the first stops, the second holds every partition, and its fresh
  checkpoint (position 0) is behind what the first committed;
* a single process restored from an older copy of its checkpoint (a rollback).

Each asserts that no record id is learned by two models (or twice along one model's line)
and that every model's reported epsilon is within its budget."""

from __future__ import annotations

import shutil
import subprocess
import time
import warnings
from pathlib import Path

import pytest
from test_service import CLIENTS, _messages, _serve, _status, _stop, _wait_for

from dpstream.connectors import CheckpointStore
from dpstream.connectors.idmemory import saved_keys
from dpstream.connectors.local_broker import LocalBroker as Broker
from dpstream.models import SmallStreamWarning

pytestmark = pytest.mark.kafka
EPSILON = 1.0   # what test_service._serve asks for


@pytest.fixture
def broker():
    b = Broker().start()
    yield b
    b.stop()


def _committed(broker: Broker, group: str = "dp", partitions: int = 2) -> int:
    """The offsets ``group`` committed on ``records``, summed over its partitions."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        return sum(consumer.committed(TopicPartition("records", p)) or 0
                   for p in range(partitions))
    finally:
        consumer.close()


def _learned_ids(root: Path) -> set[int]:
    """The ids of the records the checkpoint in ``root/ck`` has learned (its id memory)."""
    state = CheckpointStore.read(root / "ck")
    return set() if state is None else {key[1] for key in saved_keys(state["ids"])}


def _within_budget(root: Path) -> None:
    status = _status(root)
    with warnings.catch_warnings():   # a few hundred records: the warning is expected
        warnings.simplefilter("ignore", SmallStreamWarning)
        report = status["model"].privacy_report()
    assert report["epsilon"] <= EPSILON + 1e-9
    assert report["records_learned"] + report["records_pending"] == status["learned"]


def _refused(proc: subprocess.Popen, root: Path, timeout: float = 60) -> None:
    """``proc`` exits with status 2, naming the committed offsets and the ways out, before
    it trains anything (on the code before the check it trained them instead)."""
    def seen() -> int:
        return (_status(root) or {"seen": 0})["seen"]

    before = seen()
    _wait_for(lambda: proc.poll() is not None or seen() > before, timeout,
              "an exit or a trained record", proc, root)
    trained = seen() - before
    if proc.poll() is None:
        _stop(proc)
    log = (root / "serve.log").read_text(errors="replace")
    assert trained == 0, f"resumed behind its group: trained {trained} records again"
    assert proc.returncode == 2, log[-3000:]
    assert "is behind consumer group 'dp'" in log and "committed at offset" in log
    assert "--accept-behind" in log and "--group" in log


def _serve_until(broker: Broker, root: Path, *extra: str, seen: int, committed: int,
                 client: str | None = None) -> subprocess.Popen:
    proc = _serve(broker, root, *extra, client=client)
    _wait_for(lambda: (s := _status(root)) and s["seen"] >= seen
              and _committed(broker) >= committed, 60, f"{seen} records", proc, root)
    return proc


@pytest.mark.parametrize("client", CLIENTS)
def test_an_exclusive_member_refuses_the_partitions_another_checkpoint_trained(broker,
                                                                                tmp_path,
                                                                                client):
    """Finding 3: member B (a fresh checkpoint) waits paused while A holds partitions; when
    A stops, B gets every partition at its own position 0, below A's commits: B exits 2
    having trained nothing (before: all 400 ids trained into both models). With
    ``--accept-behind`` B starts at A's committed offsets and trains only new records."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    broker.create_topic("records", partitions=2)
    values, _ = _messages(500, bad_every=0)
    broker.produce("records", values[:400], partitions=2)
    first = _serve_until(broker, a, seen=400, committed=400, client=client)
    second = _serve(broker, b, client=client)
    _wait_for(lambda: "another member of consumer group" in (b / "serve.log").read_text(
        errors="replace"), 60, "the second member to share the group", second, b)
    assert _stop(first) == 0
    _refused(second, b)
    assert _committed(broker) == 400
    second = _serve(broker, b, "--accept-behind", client=client)
    _wait_for(lambda: "starts at the committed offset" in (b / "serve.log").read_text(
        errors="replace"), 60, "the accepted start", second, b)
    broker.produce("records", values[400:], partitions=2)
    _wait_for(lambda: (s := _status(b)) and s["seen"] >= 100, 60, "the new records", second, b)
    assert _stop(second) == 0
    in_a, in_b = _learned_ids(a), _learned_ids(b)
    assert in_a == set(range(400)) and in_b == set(range(400, 500))   # each once, in one model
    assert sum(_status(b)["positions"].values()) == 500
    for root in (a, b):
        _within_budget(root)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_service_restored_from_an_older_checkpoint_refuses_to_resume(broker, tmp_path,
                                                                       client):
    """A rollback: the checkpoint as of 200 records is copied aside, the service goes on to
    400 and commits, then is restarted on the copy: exit 2 (before: records 200..399 trained
    again, their first releases already out). With ``--accept-behind`` the copy goes on from
    the committed offsets: its line of the model learns each record at most once."""
    run, old = tmp_path / "run", tmp_path / "old"
    run.mkdir()
    (old / "ck").mkdir(parents=True)
    broker.create_topic("records", partitions=2)
    values, _ = _messages(500, bad_every=0)
    broker.produce("records", values[:200], partitions=2)
    proc = _serve_until(broker, run, seen=200, committed=200, client=client)
    shutil.copy2(run / "ck" / "checkpoint.dpck", old / "ck" / "checkpoint.dpck")
    assert _status(old)["seen"] == 200
    broker.produce("records", values[200:400], partitions=2)
    _wait_for(lambda: _status(run)["seen"] >= 400 and _committed(broker) >= 400, 60,
              "400 records committed", proc, run)
    assert _stop(proc) == 0
    proc = _serve(broker, old, client=client)
    _refused(proc, old)
    assert _status(old)["seen"] == 200 and _committed(broker) == 400
    proc = _serve(broker, old, "--accept-behind", client=client)
    broker.produce("records", values[400:], partitions=2)
    _wait_for(lambda: (s := _status(old)) and s["seen"] >= 300, 60, "the new records", proc,
              old)
    assert _stop(proc) == 0
    assert _learned_ids(old) == set(range(200)) | set(range(400, 500))
    assert sum(_status(old)["positions"].values()) == 500
    assert "records in between are not trained by this model" in (old / "serve.log").read_text()
    _within_budget(old)


def test_a_topic_replay_behind_its_group_is_refused(broker, tmp_path):
    """``replay`` of a topic checks the same: a second replay with a fresh checkpoint in the
    group of a finished one raises :class:`CheckpointBehindError` (the CLI: exit status 2);
    with ``accept_behind`` it starts at the end and learns nothing."""
    from dpstream.connectors.kafka import CheckpointBehindError
    from dpstream.stream import ADULT_SCHEMA
    from dpstream.stream.service import replay

    broker.create_topic("records", partitions=2)
    values, _ = _messages(300, bad_every=0)
    broker.produce("records", values, partitions=2)
    url = f"kafka://{broker.bootstrap}/records?group=dp"
    kwargs = {"schema": ADULT_SCHEMA, "epsilon": EPSILON, "seed": 0,
              "params": {"round_size": 200}}
    done = replay(url, checkpoint_dir=str(tmp_path / "first"), **kwargs)
    assert done["records_learned"] == 300
    deadline = time.monotonic() + 30
    while _committed(broker) < 300 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _committed(broker) == 300
    with pytest.raises(CheckpointBehindError, match="committed at offset 150"):
        replay(url, checkpoint_dir=str(tmp_path / "second"), **kwargs)
    out = replay(url, checkpoint_dir=str(tmp_path / "second"), accept_behind=True, **kwargs)
    assert out["records_learned"] == 0 and out["error"] is None
    assert sum(CheckpointStore.read(tmp_path / "second")["positions"].values()) == 300
