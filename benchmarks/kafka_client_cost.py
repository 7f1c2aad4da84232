"""What a member's Kafka clients cost it: a record read, and a poll of the model topic.

Usage: python benchmarks/kafka_client_cost.py [--records N] [--partitions 12,3] [--polls N]
[--repeat R] [--clients kafka-python,confluent] [--fetch-kb 64,1024]

Starts a local tansu broker and prints one JSON line per measurement:

* ``source``: a pre-produced topic of ``P`` partitions drained by one
  :class:`~dpstream.connectors.kafka.KafkaSource`: CPU and wall time per record, the polls;
* ``model_topic_poll``: ``--polls`` calls of ``ModelTopic.poll`` with ``timeout_ms=0`` on a
  topic read to its end: CPU and wall time per call.

``--repeat`` alternates the partition counts; ``--clients`` and ``--fetch-kb`` measure each
Kafka client and fetch size. Details: docs/benchmark_notes.md#kafka-client-cost-script.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from dpstream.connectors.kafka_clients import kafka_source
from dpstream.connectors.local_broker import LocalBroker
from dpstream.connectors.model_topic import ModelTopic


def messages(n: int) -> list[bytes]:
    from river.datasets import synth

    return [json.dumps({"id": i, "x": x, "y": int(y)}).encode()
            for i, (x, y) in enumerate(synth.Agrawal(seed=0).take(n))]


def source_cost(broker: LocalBroker, values: list[bytes], partitions: int,
                client: str = "kafka-python", fetch_kb: int | None = None) -> dict:
    topic = f"records-{partitions}-{time.monotonic_ns()}"
    broker.create_topic(topic, partitions=partitions)
    broker.produce(topic, values, partitions=partitions)
    source = kafka_source(client, broker.bootstrap, topic, f"g-{topic}",
                          position_of=lambda key: None, on_revoke=lambda: None,
                          consumer_config=None if fetch_kb is None
                          else {"max_partition_fetch_bytes": fetch_kb << 10})
    if not source.connect(threading.Event()):
        raise SystemExit(f"no broker at {broker.bootstrap}")
    try:
        deadline = time.monotonic() + 60
        first = 0
        while not first:   # the group join, then the first records
            if time.monotonic() > deadline:
                raise SystemExit("no records within 60 s")
            first = len(source.poll(200))
        got, polls = 0, 0
        cpu, wall = time.process_time(), time.perf_counter()
        while first + got < len(values):
            recs = source.poll(200)
            got += len(recs)
            polls += 1
            if time.monotonic() > deadline + 120:
                raise SystemExit(f"only {first + got} of {len(values)} records read")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        source.close()
    return {"measure": "source", "client": client, "partitions": partitions,
            "fetch_kb": fetch_kb or 64, "records": got,
            "read": first + got, "cpu_us_per_record": round(cpu / got * 1e6, 1),
            "wall_us_per_record": round(wall / got * 1e6, 1),
            "msgs_per_s": round(got / wall),
            "polls": polls, "mean_poll_records": round(got / polls)}


def model_topic_cost(broker: LocalBroker, polls: int) -> dict:
    topic = ModelTopic(broker.bootstrap, f"models-{time.monotonic_ns()}",
                       stop=threading.Event())
    if not topic.connect():
        raise SystemExit(f"no broker at {broker.bootstrap}")
    try:
        topic.catch_up()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(polls):
            topic.poll(timeout_ms=0)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        topic.close()
    return {"measure": "model_topic_poll", "polls": polls,
            "cpu_us_per_poll": round(cpu / polls * 1e6, 1),
            "wall_us_per_poll": round(wall / polls * 1e6, 1)}


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=24_000, help="records on each topic")
    p.add_argument("--partitions", type=_ints, default=[12, 3],
                   help="comma-separated partition counts (default 12,3)")
    p.add_argument("--polls", type=int, default=2000, help="model-topic polls timed")
    p.add_argument("--repeat", type=int, default=2, help="rounds over the partition counts")
    p.add_argument("--clients", type=lambda t: t.split(","), default=["kafka-python"],
                   help="comma-separated Kafka clients (default kafka-python)")
    p.add_argument("--fetch-kb", type=_ints, default=[64],
                   help="comma-separated max_partition_fetch_bytes in KiB (default 64)")
    return p.parse_args(argv)


def main() -> int:
    args = parse_args()
    n, parts, polls, repeat = args.records, args.partitions, args.polls, args.repeat
    clients, fetches = args.clients, args.fetch_kb
    values = messages(n)
    with LocalBroker() as broker:
        print(json.dumps(model_topic_cost(broker, polls)), flush=True)
        for _ in range(repeat):
            for p in parts:
                for client in clients:
                    for kb in fetches:
                        print(json.dumps(source_cost(broker, values, p, client, kb)),
                              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
