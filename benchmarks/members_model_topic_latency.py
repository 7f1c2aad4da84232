"""How long a window published to the model topic takes to reach another member.

Usage: python benchmarks/members_model_topic_latency.py [--windows N] [--json]

Starts a local tansu broker (:class:`~dpstream.connectors.local_broker.LocalBroker`) and two
:class:`~dpstream.connectors.model_topic.ModelTopic` clients, as two members of a group have.
The publisher sends ``N`` windows (default 40) of 20 KB; the latency of each is the time from
the start of its publish to the reader's poll that returns it. One line per reader fetch wait
(kafka-python's default, 500 ms, and :data:`~dpstream.connectors.model_topic.FETCH_WAIT_MS`):
mean, median, 90th percentile and maximum in ms, and ``records_at_7k``. How it measures:
docs/benchmark_notes.md#model-topic-latency-script.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time

import numpy as np

from dpstream.connectors import model_topic
from dpstream.connectors.local_broker import LocalBroker
from dpstream.connectors.model_topic import ModelTopic


def measure(bootstrap: str, topic: str, fetch_wait_ms: int, windows: int, seed: int = 0) -> dict:
    saved = model_topic.FETCH_WAIT_MS
    model_topic.FETCH_WAIT_MS = fetch_wait_ms   # read by connect()
    try:
        stop = threading.Event()
        writer, reader = ModelTopic(bootstrap, topic, stop=stop), ModelTopic(bootstrap, topic,
                                                                             stop=stop)
        if not (writer.connect() and reader.connect()):
            raise SystemExit(f"no broker at {bootstrap}")
    finally:
        model_topic.FETCH_WAIT_MS = saved
    reader.catch_up()
    rng = random.Random(seed)
    window = {"trees": np.arange(2500.0)}   # 20 KB of arrays, like a small window
    latencies = []
    try:
        for i in range(windows):
            deadline = time.monotonic() + rng.uniform(0.05, 0.6)
            while time.monotonic() < deadline:   # the member's work between polls
                reader.poll(timeout_ms=0)
                time.sleep(0.001)
            t0 = time.monotonic()
            writer.publish({f"m0/window-{i}": window})
            while f"m0/window-{i}" not in reader.poll(timeout_ms=0):
                time.sleep(0.001)
            latencies.append(1e3 * (time.monotonic() - t0))
    finally:
        for client in (writer, reader):
            client.producer.close()
            client.consumer.close()
    latencies.sort()
    mean = statistics.fmean(latencies)
    return {"fetch_max_wait_ms": fetch_wait_ms, "windows": windows,
            "mean_ms": round(mean, 1), "median_ms": round(statistics.median(latencies), 1),
            "p90_ms": round(latencies[int(0.9 * (len(latencies) - 1))], 1),
            "max_ms": round(latencies[-1], 1), "records_at_7k": round(mean * 7.0)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--windows", type=int, default=40, help="windows published")
    p.add_argument("--json", action="store_true", help="one JSON line per fetch wait")
    args = p.parse_args()
    windows = args.windows
    with LocalBroker() as broker:
        for wait in (500, model_topic.FETCH_WAIT_MS):
            topic = f"models-{wait}"
            broker.create_topic(topic)
            line = measure(broker.bootstrap, topic, wait, windows)
            print(json.dumps(line) if args.json else
                  f"fetch_max_wait_ms={wait:>3}: mean {line['mean_ms']} ms, median "
                  f"{line['median_ms']}, p90 {line['p90_ms']}, max {line['max_ms']} "
                  f"({line['records_at_7k']} records at 7k msgs/s)", flush=True)


if __name__ == "__main__":
    main()
