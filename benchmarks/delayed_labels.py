"""Delayed labels: prequential accuracy when each label comes ``d`` records after its record.

Every model beside river's Hoeffding tree with the same delay (Elec2, Adult; epsilon 1), and
with ``--service`` / ``--kafka`` / ``--soak`` the service's message rate and memory with labels
as messages of their own against labels inside the records. What each mode measures:
docs/benchmark_notes.md#delayed-labels-script; results:
docs/benchmark_notes.md#delayed-labels-issue-66.

Usage::

    python benchmarks/delayed_labels.py --seeds 0 1 2 [--plot docs/img/delayed_labels.png]
    python benchmarks/delayed_labels.py --service [--records 30000]
    python benchmarks/delayed_labels.py --kafka [--records 30000] [--models rdt,sgbdt]
    python benchmarks/delayed_labels.py --soak [--messages 1000000] [--held 100000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from collections import deque
from pathlib import Path

from dpstream.connectors import CheckpointStore
from dpstream.stream import load_adult
from dpstream.stream.bench.delayed import (
    DELAYED_MODELS,
    DELAYED_SCENARIOS,
    plot_delayed,
    run_delayed,
)


def accuracy(seeds: list[int]) -> list[dict]:
    """Every model at every delay of every stream (the suite's cells), printed as they end."""
    out = []
    for stream, delays in DELAYED_SCENARIOS.items():
        for name in DELAYED_MODELS:
            for d in delays:
                t = time.perf_counter()
                r = run_delayed(name, stream, d, seeds=seeds)
                out.append({"stream": stream, "model": name, "delay": d,
                            "accuracy": round(r["mean"], 4), "sd": round(r["std"], 4),
                            "runs": r["repeats"], "seconds": round(time.perf_counter() - t, 1),
                            **{k: r[k] for k in ("dataset", "params", "mean", "std", "repeats",
                                                 "epsilon")}})
                print(json.dumps({k: out[-1][k] for k in ("stream", "model", "delay",
                                                          "accuracy", "sd", "runs",
                                                          "seconds")}), flush=True)
    return out


def service(records: int, models: list[str], delay: int = 1000) -> list[dict]:
    from dpstream.stream.service import replay

    X, y, schema = load_adult("train")
    n = min(records, len(X))
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        now, late = Path(tmp) / "now.jsonl", Path(tmp) / "late.jsonl"
        with open(now, "w") as a, open(late, "w") as b:
            pending = deque()
            for i in range(n):
                a.write(json.dumps({"id": i, "x": X[i], "y": y[i]}) + "\n")
                b.write(json.dumps({"id": i, "x": X[i]}) + "\n")
                pending.append(i)
                if len(pending) > delay // 2:   # a label message every record: delay messages
                    j = pending.popleft()
                    b.write(json.dumps({"id": j, "y": y[j]}) + "\n")
            for j in pending:
                b.write(json.dumps({"id": j, "y": y[j]}) + "\n")
        schema_path = Path(tmp) / "schema.json"
        schema.dump(schema_path)
        for model in models:
            for name, path in (("labels inside", now), ("labels late", late)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = replay(str(path), schema=str(schema_path), model=model, epsilon=1.0,
                                 seed=0, hold_unlabeled=True)
                out.append({"model": model, "stream": name, "messages": res["records_this_run"],
                            "learned": res["learned_this_run"],
                            "msgs_per_s": res["rows_per_s_streaming"]})
                print(json.dumps(out[-1]), flush=True)
    return out


def _seen(port: int) -> int:
    """The service's public count of messages seen, from its /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('dpstream_records_total{outcome="seen"}'):
                return int(float(line.split()[-1]))
    return 0


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def _serve_rate(broker, schema_path: Path, topic: str, label_topic: str | None, total: int,
                model: str, work: Path) -> dict:
    """Start ``dpstream serve`` on a filled topic; its messages a second until ``total``."""
    import re
    import signal
    import subprocess
    import sys

    log = work / f"{topic}-{model}.log"
    cmd = [sys.executable, "-m", "dpstream.stream.cli", "serve", "--bootstrap", broker.bootstrap,
           "--topic", topic, "--group", f"g-{topic}-{model}", "--schema", str(schema_path),
           "--model", model, "--epsilon", "1.0", "--checkpoint-dir",
           str(work / f"ck-{topic}-{model}"), "--metrics-port", "0", "--hold-unlabeled",
           *(["--label-topic", label_topic] if label_topic else [])]
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        port = None
        deadline = time.monotonic() + 120
        while port is None:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"serve did not start:\n{log.read_text()[-2000:]}")
            found = re.search(r"metrics on http://[\d.]+:(\d+)/metrics", log.read_text())
            port = int(found.group(1)) if found else None
            time.sleep(0.1)
        first = quarter = None
        while True:
            seen = _seen(port)
            now = time.perf_counter()
            if first is None and seen > 0:
                first = (seen, now)
            if quarter is None and seen >= total // 4:
                quarter = (seen, now)
            if seen >= total:
                break
            if time.monotonic() > deadline + 600:
                raise SystemExit(f"serve stalled at {seen} of {total}:\n"
                                 f"{log.read_text()[-2000:]}")
            time.sleep(0.05)
        rss = _peak_rss_mib(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        state = CheckpointStore.read(work / f"ck-{topic}-{model}")
        counters = state["counters"]
        return {"msgs_per_s": round((total - first[0]) / (now - first[1])),
                "steady_msgs_per_s": round((total - quarter[0]) / (now - quarter[1])),
                "peak_rss_mib": rss, "learned": counters["learned"],
                "labels_joined": counters.get("labels_joined", 0),
                "labels_unknown": counters.get("labels_unknown", 0),
                "labels_expired": counters.get("labels_expired", 0),
                "held_expired": counters.get("held_expired", 0)}
    finally:
        if proc.poll() is None:
            proc.kill()


def kafka(records: int, models: list[str], delay: int = 1000, partitions: int = 2) -> list[dict]:
    """The service through the broker: labels inside the records against labels on a second
    topic (module docstring)."""
    from kafka import KafkaProducer

    from dpstream.connectors._partitioning import key_partition
    from dpstream.connectors.local_broker import LocalBroker

    X, y, schema = load_adult("train")
    out = []
    with tempfile.TemporaryDirectory() as tmp, LocalBroker() as broker:
        work = Path(tmp)
        schema_path = work / "schema.json"
        schema.dump(schema_path)
        for t in ("now", "late", "labels"):
            broker.create_topic(t, partitions=partitions)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20,
                                 batch_size=256 * 1024)

        def send(topic: str, value: dict) -> None:
            key = str(value["id"]).encode()
            producer.send(topic, json.dumps(value).encode(), key=key,
                          partition=key_partition(key, partitions))

        for i in range(records):
            j = i % len(X)
            send("now", {"id": i, "x": X[j], "y": y[j]})
            send("late", {"id": i, "x": X[j]})
            if i >= delay:   # the label of the record `delay` records back
                k = i - delay
                send("labels", {"id": k, "y": y[k % len(X)]})
        for k in range(max(0, records - delay), records):
            send("labels", {"id": k, "y": y[k % len(X)]})
        producer.flush()
        producer.close()
        for model in models:
            for arm, topic, labels, total in (("labels inside", "now", None, records),
                                              ("label topic", "late", "labels", 2 * records)):
                res = _serve_rate(broker, schema_path, topic, labels, total, model, work)
                out.append({"model": model, "arm": arm, "messages": total, **res,
                            "records_per_s": round(res["msgs_per_s"] * records / total)})
                print(json.dumps(out[-1]), flush=True)
    return out


def soak(messages: int, held: int, model: str = "rdt") -> list[dict]:
    """RSS of a runner whose held store sits at its cap (module docstring)."""
    from dpstream.connectors import SourceRecord
    from dpstream.stream.bench.speed import status_mib
    from dpstream.stream.runner import Runner, streaming_gc

    X, y, schema = load_adult("train")
    encoded = [json.dumps({"x": X[j]})[1:-1].encode() for j in range(len(X))]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        store = CheckpointStore(Path(tmp) / "ck")
        runner = Runner.create(model, schema, store=store, epsilon=1.0, seed=0,
                               hold_unlabeled=True, max_held=held, held_messages=None)
        offset, rec, batch, sample = 0, 0, [], 100_000
        t0 = time.perf_counter()
        with streaming_gc(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            while offset < messages:
                j = rec % len(X)
                batch.append(SourceRecord(b'{"id": %d, ' % rec + encoded[j] + b"}", "soak:0",
                                          offset))
                offset += 1
                if rec >= held:   # the label of the oldest held record
                    k = rec - held
                    batch.append(SourceRecord(
                        json.dumps({"id": k, "y": y[k % len(X)]}).encode(), "soak:0", offset))
                    offset += 1
                rec += 1
                if len(batch) >= 2000:
                    runner.process_many(batch)
                    batch = []
                    if offset >= sample or offset >= messages:
                        sample += 100_000
                        t = time.perf_counter()
                        runner.checkpoint()
                        out.append({"messages": offset, "rss_mib": status_mib("VmRSS"),
                                    "held": len(runner.held),
                                    "checkpoint_s": round(time.perf_counter() - t, 2),
                                    "msgs_per_s": round(offset / (t - t0))})
                        print(json.dumps(out[-1]), flush=True)
            if batch:
                runner.process_many(batch)
        store.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--plot", default=None, metavar="PNG")
    ap.add_argument("--service", action="store_true")
    ap.add_argument("--records", type=int, default=30_000)
    ap.add_argument("--models", default="sgbdt,median-forest,rdt")
    ap.add_argument("--kafka", action="store_true")
    ap.add_argument("--delay", type=int, default=1000)
    ap.add_argument("--soak", action="store_true")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--held", type=int, default=100_000)
    args = ap.parse_args(argv)
    if args.service:
        service(args.records, args.models.split(","))
        return
    if args.kafka:
        kafka(args.records, args.models.split(","), delay=args.delay)
        return
    if args.soak:
        soak(args.messages, args.held)
        return
    rows = accuracy(args.seeds)
    if args.plot:
        plot_delayed(rows, Path(args.plot))
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
