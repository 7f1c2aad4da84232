"""CPU a prediction costs to publish: :class:`~dpstream.connectors.kafka.KafkaSink` against the
same sink with kafka-python choosing each keyed message's partition (its pure-Python murmur2).

Usage: python benchmarks/kafka_sink_cost.py [--messages N] [--rounds R]

Starts ``tansu``, and per round sends N prediction messages (the runner's format and keys) to a
3-partition topic through each sink, flushing every 2,000 as the runner does before a
checkpoint. Prints the process's CPU (all threads: the producer's IO thread too) and the wall
time per message.
"""

from __future__ import annotations

import argparse
import threading
import time

from dpstream.connectors.kafka import KafkaSink
from dpstream.connectors.local_broker import LocalBroker
from dpstream.connectors.records import sink_key


class HashedByKafka(KafkaSink):
    """The sink before 2026-11-26: kafka-python hashes the key and picks the partition."""

    def _send(self, value: bytes, key: bytes | None, headers: list | None = None) -> None:
        future = self.producer.send(self.topic, value, key=key, headers=headers)
        self.sent += 1
        future.add_callback(self._delivered).add_errback(self._failure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with LocalBroker() as broker:
        for r in range(args.rounds):
            for name, cls in (("kafka-python's partitioner", HashedByKafka),
                              ("KafkaSink", KafkaSink)):
                topic = f"predictions-{r}-{cls.__name__}"
                broker.create_topic(topic, partitions=3)
                sink = cls(broker.bootstrap, topic, stop=threading.Event())
                sink.send_json({"id": -1}, key=b"warm-up")
                sink.flush()
                cpu, wall = time.process_time(), time.perf_counter()
                for i in range(args.messages):
                    sink.send_json({"id": i, "prediction": 1, "partition": "records:0",
                                    "offset": i}, key=sink_key("records:0", i, i))
                    if i % 2000 == 1999:
                        sink.flush()
                sink.flush()
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                sink.close()
                print(f"round {r + 1}, {name}: {cpu / args.messages * 1e6:.1f} µs CPU, "
                      f"{wall / args.messages * 1e6:.1f} µs wall a message", flush=True)


if __name__ == "__main__":
    main()
