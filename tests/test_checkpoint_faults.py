"""Checkpoint faults (docs/reliability.md#checkpoints): a full or read-only checkpoint
directory gives a clear error and nothing is committed past the last checkpoint; a writer killed
(SIGKILL / SIGTERM) at random moments always leaves the old or the new checkpoint."""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from checkpoint_cli import (  # noqa: F401 - fixtures are found by name
    DPSTREAM,
    _cli,
    _env,
    _no_key_from_the_environment,
    adult,
)

from dpstream.connectors import CheckpointError, CheckpointStore, SourceRecord
from dpstream.connectors.checkpoint import FILENAME
from dpstream.stream import ADULT_SCHEMA
from dpstream.stream.runner import Runner


def _lock_dir(path: Path) -> None:
    """Make ``path`` read-only for this process (root ignores modes: the immutable flag)."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(
                ["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("root without chattr +i: cannot make a directory read-only")
    else:
        path.chmod(0o555)


def _unlock_dir(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o755)


def _jsonl(path: Path, X, y, lo: int, hi: int) -> None:
    with open(path, "a") as fh:
        for i in range(lo, hi):
            fh.write(json.dumps({"id": i, "x": X[i], "y": y[i]}) + "\n")


def test_a_read_only_directory_fails_at_start_and_keeps_the_checkpoint(tmp_path, adult):
    X, y = adult
    src, ck, schema = tmp_path / "records.jsonl", tmp_path / "ck", tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    _jsonl(src, X, y, 0, 200)
    run = ("replay", "--source", str(src), "--schema", str(schema), "--epsilon", "1",
           "--checkpoint-dir", str(ck), "--model", "median-forest", "--seed", "0", "--json")
    assert _cli(*run).returncode == 0
    _jsonl(src, X, y, 200, 400)
    _lock_dir(ck)
    try:
        out = _cli(*run)
        assert out.returncode == 2
        assert f"checkpoint directory {ck} is not writable" in out.stderr, out.stderr
        status = json.loads(_cli("status", "--checkpoint-dir", str(ck), "--json").stdout)
        assert status["records_seen"] == 200        # status reads a read-only directory
    finally:
        _unlock_dir(ck)
    out = _cli(*run)
    assert out.returncode == 0 and json.loads(out.stdout)["records_this_run"] == 200
    status = json.loads(_cli("status", "--checkpoint-dir", str(ck), "--json",
                             "--curator").stdout)
    assert status["records_seen"] == status["records_learned"] == 400


@pytest.mark.parametrize("fault", ["read-only", "file-size-limit"])
def test_a_failed_write_commits_nothing_past_the_last_checkpoint(fault, tmp_path, adult):
    X, y = adult
    store = CheckpointStore(tmp_path)
    runner = Runner.create("sgbdt", ADULT_SCHEMA, store=store, epsilon=1.0, seed=0,
                           params={"round_size": 100})
    for i in range(300):
        runner.process(SourceRecord({"id": i, "x": X[i], "y": y[i]}, "t:0", i))
    runner.checkpoint()
    size = (tmp_path / FILENAME).stat().st_size
    for i in range(300, 600):
        runner.process(SourceRecord({"id": i, "x": X[i], "y": y[i]}, "t:0", i))
    if fault == "read-only":
        _lock_dir(tmp_path)
        undo = lambda: _unlock_dir(tmp_path)
        expected = "Operation not permitted" if os.geteuid() == 0 else "Permission denied"
    else:   # the kernel refuses to grow a file past RLIMIT_FSIZE (EFBIG), like a full disk
        old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
        old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, old_limit[1]))

        def undo():
            resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
            signal.signal(signal.SIGXFSZ, old_handler)
        expected = "File too large"
    try:
        with pytest.raises(CheckpointError) as err:
            runner.checkpoint()
    finally:
        undo()
    assert f"cannot write the checkpoint {tmp_path / FILENAME}: {expected}" in str(err.value)
    assert "previous checkpoint (if any) is kept" in str(err.value)
    # what a Kafka commit or a restart would use: the last checkpoint's positions, not 600
    assert runner.saved_positions == {"t:0": 300} and runner.position_of("t:0") == 300
    assert runner.positions == {"t:0": 600} and runner.counters["checkpoints"] == 1
    assert not (tmp_path / "checkpoint.tmp").exists()
    assert CheckpointStore.read(tmp_path)["positions"] == {"t:0": 300}
    runner.checkpoint()   # the fault is gone: the next checkpoint goes through
    assert CheckpointStore.read(tmp_path)["positions"] == {"t:0": 600}
    store.close()


DISK_FULL = r"""
import json, os, subprocess, sys
ck, src, more, schema, *dpstream = sys.argv[1:]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", ck], check=True)
run = [*dpstream, "replay", "--source", src, "--schema", schema, "--epsilon", "1",
       "--checkpoint-dir", ck, "--seed", "0", "--json"]
out = {"first": subprocess.run(run, capture_output=True, text=True).returncode}
with open(src, "ab") as fh, open(more, "rb") as extra:   # the stream goes on
    fh.write(extra.read())
filler = os.path.join(ck, "filler")
with open(filler, "wb", buffering=0) as fh:               # the disk fills up ...
    try:
        while True:
            fh.write(b"\0" * 4096)
    except OSError:
        pass
os.truncate(filler, os.path.getsize(filler) - 64 * 1024)   # ... to 64 KiB from full
full = subprocess.run(run, capture_output=True, text=True)
out["full"] = [full.returncode, full.stderr[-800:]]
out["tmp_left"] = os.path.exists(os.path.join(ck, "checkpoint.tmp"))
st = subprocess.run([*dpstream, "status", "--checkpoint-dir", ck, "--json"],
                    capture_output=True, text=True)
out["status_full"] = json.loads(st.stdout) if st.returncode == 0 else st.stderr
os.unlink(filler)                                         # space again: the rerun resumes
again = subprocess.run(run, capture_output=True, text=True)
out["again"] = json.loads(again.stdout) if again.returncode == 0 else again.stderr
print(json.dumps(out))
"""


def test_a_full_disk_fails_clearly_and_the_rerun_resumes_from_the_last_checkpoint(tmp_path,
                                                                                   adult):
    """A real ENOSPC: the checkpoint directory is an 8 MiB tmpfs in a private mount namespace."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("needs `unshare -m` (root / CAP_SYS_ADMIN) to mount a small tmpfs")
    X, y = adult
    src, more = tmp_path / "records.jsonl", tmp_path / "more.jsonl"
    ck, schema = tmp_path / "ck", tmp_path / "schema.json"
    ck.mkdir()
    ADULT_SCHEMA.dump(schema)
    _jsonl(src, X, y, 0, 1000)
    _jsonl(more, X, y, 1000, 2000)
    res = subprocess.run(["unshare", "-m", sys.executable, "-c", DISK_FULL, str(ck), str(src),
                          str(more), str(schema), *DPSTREAM], capture_output=True, text=True,
                         timeout=600, env=_env())
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["first"] == 0
    code, err = out["full"]
    assert code == 2, err
    assert (f"cannot write the checkpoint {ck / FILENAME}: No space left on device; the "
            f"previous checkpoint (if any) is kept") in err, err
    assert out["tmp_left"] is False
    assert out["status_full"]["records_seen"] == 1000        # the old checkpoint, intact
    assert out["again"]["records_this_run"] == 1000           # resumed at 1000, not 0 or 2000
    assert out["again"]["records_learned"] == 2000


def _writer(directory: Path, ack: int) -> None:
    """Save a growing counter as fast as possible, acknowledging each completed save."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    store = CheckpointStore(directory)
    state = store.load() or {"n": 0}
    n = state["n"]
    payload = np.empty(150_000)
    while True:
        n += 1
        payload.fill(n)
        store.save({"n": n, "payload": payload, "tail": [n] * 2000,
                    "rng": np.random.default_rng(n)})
        os.write(ack, f"{n}\n".encode())


def test_a_writer_killed_at_random_moments_leaves_the_old_or_the_new_checkpoint(tmp_path):
    """200 writers, each killed (SIGKILL or SIGTERM, alternately) after a random delay while it
    saves back to back; after each kill the directory must load, hold one whole state, and that
    state is the last acknowledged save or the one in flight."""
    rnd = random.Random(0)
    mid_write = in_flight_landed = 0
    acked = 0
    for i in range(200):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:   # the writer
            os.close(r)
            try:
                _writer(tmp_path, w)
            finally:
                os._exit(1)
        os.close(w)
        time.sleep(rnd.uniform(0.0, 0.08))
        os.kill(pid, signal.SIGKILL if i % 2 else signal.SIGTERM)
        os.waitpid(pid, 0)
        with os.fdopen(r) as fh:
            lines = fh.read().split()
        acked = int(lines[-1]) if lines else acked
        mid_write += (tmp_path / "checkpoint.tmp").exists()
        state = CheckpointStore.read(tmp_path)
        n = state["n"] if state else 0
        assert n in (acked, acked + 1), (i, n, acked)
        if state:
            assert state["tail"] == [n] * 2000 and bool((state["payload"] == n).all())
            assert state["rng"].random() == np.random.default_rng(n).random()
        in_flight_landed += n == acked + 1
        acked = n
    # the kills really landed mid-write (a temporary file was left behind) many times
    assert mid_write >= 20, mid_write
    assert acked > 200
    print(f"\n200 kills: {mid_write} mid-write, {in_flight_landed} with the in-flight save "
          f"already renamed; every load gave the old or the new state")


@pytest.mark.kafka
def test_serve_stops_at_a_failed_checkpoint_and_kafka_holds_no_offset_past_it(tmp_path, adult):
    """The service against a real broker: its checkpoint directory turns read-only mid-stream.
    It exits with a clear error; the group's committed offset is not past the checkpoint; once
    the directory is writable again a restart learns every record exactly once."""
    from kafka import KafkaConsumer, TopicPartition

    from dpstream.connectors.local_broker import LocalBroker

    X, y = adult
    n, first = 1200, 500
    values = [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(n)]
    ck, schema, log = tmp_path / "ck", tmp_path / "schema.json", tmp_path / "serve.log"
    ADULT_SCHEMA.dump(schema)

    def serve(broker):
        return subprocess.Popen(
            [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", "records",
             "--group", "dp", "--schema", str(schema), "--epsilon", "1.0", "--checkpoint-dir",
             str(ck), "--metrics-port", "0", "--checkpoint-interval", "0.5", "--seed", "0",
             "--set", "round_size=200"], stdout=open(log, "ab"), stderr=subprocess.STDOUT,
            env=_env())

    def seen():
        try:
            state = CheckpointStore.read(ck)
        except CheckpointError:
            return 0
        return state["counters"]["seen"] if state else 0

    def wait(pred, what, proc=None, timeout=120):
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
                raise AssertionError(f"{what}\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def committed():
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="dp",
                                 enable_auto_commit=False)
        try:
            return consumer.committed(TopicPartition("records", 0))
        finally:
            consumer.close()

    with LocalBroker() as broker:
        broker.create_topic("records")
        broker.produce("records", values[:first])
        proc = serve(broker)
        locked = False
        try:
            wait(lambda: seen() >= first, "the first records checkpointed", proc)
            wait(lambda: committed() == first, "the checkpointed offset committed", proc)
            _lock_dir(ck)
            locked = True
            broker.produce("records", values[first:])
            assert proc.wait(120) == 2
        finally:
            if proc.poll() is None:
                proc.kill()
            if locked:
                _unlock_dir(ck)
        text = log.read_text()
        assert f"dpstream serve: error: cannot write the checkpoint {ck / FILENAME}" in text
        saved = CheckpointStore.read(ck)["positions"]
        assert saved == {"records:0": first}
        assert committed() == first   # never past the checkpoint
        proc = serve(broker)
        try:
            wait(lambda: seen() >= n, "all records after the restart", proc)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
    final = CheckpointStore.read(ck)
    assert final["counters"]["seen"] == final["counters"]["learned"] == n
    assert final["counters"]["duplicates"] == 0 and final["positions"] == {"records:0": n}
