"""``dpstream serve`` with no broker: bounded retries, one log line per attempt (kafka-python's
own connection errors silenced meanwhile, librdkafka's too), then one error naming the address
and exit status 1, with either Kafka client. A broker lost mid-run is still retried without end
(tests/test_broker_faults.py)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dpstream.connectors.kafka import BrokerUnreachable, connect_deadline, connect_with_backoff
from dpstream.connectors.local_broker import free_port
from dpstream.stream import ADULT_SCHEMA

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]


def _serve_nowhere(tmp_path: Path, *extra: str, env: dict | None = None):
    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    port = free_port()   # nothing listens there
    t0 = time.monotonic()
    out = subprocess.run([*DPSTREAM, "serve", "--bootstrap", f"127.0.0.1:{port}", "--topic", "t",
                          "--schema", str(schema), "--epsilon", "1", "--checkpoint-dir",
                          str(tmp_path / "ck"), "--metrics-port", "0", *extra],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, **(env or {})})
    return out, port, time.monotonic() - t0


def _attempt_lines(stderr: str, port: int) -> tuple[list[str], list[str]]:
    retries = [line for line in stderr.splitlines()
               if f"Kafka broker 127.0.0.1:{port} unreachable (attempt" in line]
    errors = [line for line in stderr.splitlines() if " ERROR " in line]
    return retries, errors


@pytest.mark.parametrize("client", ("kafka-python", "confluent"))
def test_serve_against_a_closed_port_gives_up_after_the_connect_timeout(tmp_path, client):
    out, port, seconds = _serve_nowhere(tmp_path, "--connect-timeout", "3",
                                        "--kafka-client", client)
    assert out.returncode == 1, out.stderr[-2000:]
    retries, errors = _attempt_lines(out.stderr, port)
    assert len(errors) == 1, out.stderr                 # kafka-python's own: silenced
    assert f"Kafka broker 127.0.0.1:{port} unreachable: gave up after" in errors[0]
    attempts = int(re.search(r"gave up after (\d+) attempt", errors[0]).group(1))
    assert attempts == len(retries) + 1                 # one line per attempt
    assert "kafka." not in out.stderr and "ECONNREFUSED" not in out.stderr
    assert seconds < 3 + 30   # the interpreter's start, imports and warm-up, then 3 s of tries
    assert "Traceback" not in out.stderr
    assert f"Kafka client: {client}" in out.stderr


def test_the_connect_timeout_comes_from_the_environment_and_retries_meanwhile(tmp_path):
    out, port, _ = _serve_nowhere(tmp_path, env={"DPSTREAM_CONNECT_TIMEOUT": "7",
                                                 "DPSTREAM_WARM_UP": "false"})
    assert out.returncode == 1, out.stderr[-2000:]
    retries, errors = _attempt_lines(out.stderr, port)
    assert len(retries) >= 1 and len(errors) == 1, out.stderr
    assert f"gave up after {len(retries) + 1} attempts" in errors[0]
    assert "retrying in 0.5 s" in retries[0]
    assert "kafka." not in out.stderr


def _refusing(times: list[float]):
    from kafka.errors import KafkaTimeoutError

    def factory():
        times.append(time.monotonic())
        logging.getLogger("kafka.net.manager").error("Connection failed: 111 ECONNREFUSED")
        raise KafkaTimeoutError()
    return factory


def test_connect_with_backoff_logs_once_per_attempt_and_gives_up_at_the_deadline(caplog):
    caplog.set_level(logging.INFO)
    kafka_logger = logging.getLogger("kafka")
    kafka_logger.setLevel(logging.ERROR)
    times: list[float] = []
    with pytest.raises(BrokerUnreachable, match=r"Kafka broker h:1 unreachable: gave up after "
                                                r"\d+ attempts in 0\.\d s"):
        connect_with_backoff(_refusing(times), what="Kafka broker h:1", stop=threading.Event(),
                             first_delay=0.05, deadline=time.monotonic() + 0.5)
    warnings = [r for r in caplog.records if r.name == "dpstream.kafka"]
    assert len(warnings) == len(times) - 1 >= 2
    assert not [r for r in caplog.records if r.name.startswith("kafka")]
    assert kafka_logger.level == logging.ERROR      # restored after the attempts
    # without a deadline the attempts go on until the stop (a broker lost later is retried)
    stop, times = threading.Event(), []
    threading.Timer(0.5, stop.set).start()
    assert connect_with_backoff(_refusing(times), what="b", stop=stop, first_delay=0.05) is None
    assert len(times) >= 3


def test_a_connect_deadline_starts_at_the_first_attempt_and_ends_with_its_block():
    from kafka.errors import KafkaTimeoutError

    times: list[float] = []
    with connect_deadline(0.3):
        time.sleep(0.4)   # before any attempt: not counted
        with pytest.raises(BrokerUnreachable):
            connect_with_backoff(_refusing(times), what="b", stop=threading.Event(),
                                 first_delay=0.05)
    assert len(times) >= 2
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise KafkaTimeoutError()
        return "client"
    # outside the block: no deadline
    assert connect_with_backoff(flaky, what="b", stop=threading.Event(),
                                first_delay=0.01) == "client"
