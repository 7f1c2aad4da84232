"""Does a reader of a one-partition topic skip messages while several producers write to it?

Usage: python benchmarks/kafka_broker_read_skip.py [--producers 4] [--messages 50000]

Starts the test broker (tansu, :class:`~dpstream.connectors.local_broker.LocalBroker`),
lets ``--producers`` processes each send ``--messages`` small messages (``acks=all``, 5 ms
linger, as the service's sinks send) to one partition while one consumer reads it, then
reads the topic again from its start. Prints how many each read saw and the gaps in the
offsets of each: a gap in the first read but not in the second is a skipped read (the
``reread`` of ``examples/scale_out.py``), not a lost message.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp


def _produce(bootstrap: str, writer: int, n: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for i in range(n):
        producer.send("p", json.dumps({"w": writer, "i": i}).encode())
    producer.flush()
    producer.close()


def _offsets(bootstrap: str) -> list[int]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer("p", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        return [m.offset for m in consumer]
    finally:
        consumer.close()


def main() -> None:
    from dpstream.connectors.local_broker import LocalBroker

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--messages", type=int, default=50_000, help="per producer")
    args = parser.parse_args()
    with LocalBroker() as broker:
        broker.create_topic("p")
        procs = [mp.Process(target=_produce, args=(broker.bootstrap, w, args.messages))
                 for w in range(args.producers)]
        for p in procs:
            p.start()
        first = _offsets(broker.bootstrap)   # while they write
        for p in procs:
            p.join()
        second = _offsets(broker.bootstrap)

    def gaps(offs: list[int]) -> int:
        return sum(1 for a, b in zip(offs, offs[1:], strict=False) if b != a + 1)

    print(json.dumps({"expected": args.producers * args.messages, "read_while_written":
                      len(first), "gaps_while_written": gaps(first), "read_afterwards":
                      len(second), "gaps_afterwards": gaps(second)}))


if __name__ == "__main__":
    main()
