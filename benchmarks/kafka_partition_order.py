"""How kafka-python reads a backlog of several partitions, and whether pause/resume works.

Usage: python benchmarks/kafka_partition_order.py [--records N] [--json]

Produces ``N`` records (default 30,000, 150 bytes each) round-robin to a 3-partition topic on
a local tansu broker (:class:`~dpstream.connectors.local_broker.LocalBroker`), then consumes the
backlog with the service's fetch settings (64 KB per partition, 2,000 records per poll) and
prints, every five polls, how many records of each partition were read, in three runs:
``plain`` (no pause), ``capped`` (a whole fetch capped at 256 KB) and ``pause`` (partition 0
paused, then resumed). What each shows: docs/benchmark_notes.md#kafka-partition-order-script.
"""

from __future__ import annotations

import argparse
import json

from dpstream.connectors.local_broker import LocalBroker


def consume(bootstrap: str, topic: str, mode: str, polls: int = 40) -> dict:
    from kafka import KafkaConsumer, TopicPartition

    pause = mode == "pause"
    cap = {"fetch_max_bytes": 256 * 1024} if mode == "capped" else {}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             max_partition_fetch_bytes=64 * 1024, max_poll_records=2000, **cap)
    tps = [TopicPartition(topic, p) for p in range(3)]
    consumer.assign(tps)
    got, trace = [0, 0, 0], []
    at_resume = None
    try:
        for i in range(polls):
            for tp, messages in consumer.poll(timeout_ms=200).items():
                got[tp.partition] += len(messages)
            if pause and i == 2:
                consumer.pause(tps[0])
            if pause and i == 6:
                consumer.resume(tps[0])
                at_resume = got[0]
            if i % 5 == 4:
                trace.append(list(got))
    finally:
        consumer.close()
    out = {"mode": mode, "read_per_5_polls": trace}
    if pause:
        out["partition_0_read_after_resume"] = got[0] - at_resume
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=30_000, help="records on each topic")
    p.add_argument("--json", action="store_true", help="one JSON line per mode")
    args = p.parse_args()
    n = args.records
    import kafka

    with LocalBroker() as broker:
        lines = []
        for mode in ("plain", "capped", "pause"):
            topic = f"order-{mode}"
            broker.create_topic(topic, partitions=3)
            broker.produce(topic, [b"x" * 150] * n, partitions=3)
            lines.append({"kafka_python": kafka.__version__, "records": n,
                          **consume(broker.bootstrap, topic, mode)})
    for line in lines:
        if args.json:
            print(json.dumps(line))
            continue
        print(f"{line['mode']}: records read of partitions 0, 1, 2 after every 5 polls: "
              + " ".join(str(tuple(t)) for t in line["read_per_5_polls"]))
        if "partition_0_read_after_resume" in line:
            print(f"  partition 0 read after its resume: {line['partition_0_read_after_resume']}"
                  f" records (of {n // 3}; kafka-python {line['kafka_python']})")


if __name__ == "__main__":
    main()
