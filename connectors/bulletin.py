"""A bulletin board on a one-partition Kafka topic (Kirschte et al., 2023, Algorithm 9's
BulletinBoard).

Every party appends JSON messages and reads the whole log in the same total order (one
partition: Kafka orders it, every reader sees the same sequence). The distributed protocol
(:mod:`dpstream.stream.distributed`) is a deterministic function of that log, so parties agree
on round members and outcomes without a coordinator of their own. The reader has no consumer
group (it reads from the beginning on every start), so a restarted party replays the log and
catches up. Keep the topic's retention unlimited while the job runs.

The transport carries JSON objects and nothing more: the distributed protocol signs what it
posts and verifies what it reads (:mod:`dpstream.stream.distributed.signed_board`), so a message
a non-party managed to append is dropped and counted by every reader.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from .kafka import connect_with_backoff

__all__ = ["KafkaBoard"]

log = logging.getLogger("dpstream.board")


class KafkaBoard:
    """Post and read JSON messages on ``topic`` (created with one partition if absent).

    Parameters
    ----------
    bootstrap
        ``HOST:PORT`` of a broker.
    topic
        The board topic; it must have exactly one partition.
    stop
        Set to give up connecting.
    """

    def __init__(self, bootstrap: str, topic: str, *, stop: threading.Event | None = None):
        self.bootstrap, self.topic = bootstrap, topic
        self.stop = stop or threading.Event()
        self.producer: Any = None
        self.consumer: Any = None
        self.posted = 0

    def connect(self) -> bool:
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        self._ensure_topic()
        self.producer = connect_with_backoff(
            lambda: KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=0,
                                  bootstrap_timeout_ms=5000, max_block_ms=60000),
            what=f"Kafka broker {self.bootstrap} (board producer)", stop=self.stop)
        self.consumer = connect_with_backoff(
            lambda: KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                  auto_offset_reset="earliest", fetch_max_wait_ms=20,
                                  bootstrap_timeout_ms=5000),
            what=f"Kafka broker {self.bootstrap} (board reader)", stop=self.stop)
        if self.producer is None or self.consumer is None:
            return False
        parts = self.consumer.partitions_for_topic(self.topic)
        if parts is not None and len(parts) != 1:
            raise ValueError(f"the board topic {self.topic!r} has {len(parts)} partitions; it "
                             f"needs exactly one (a single total order)")
        tp = TopicPartition(self.topic, 0)
        self.consumer.assign([tp])
        self.consumer.seek_to_beginning(tp)
        return True

    def _ensure_topic(self) -> None:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        from kafka.errors import KafkaError, TopicAlreadyExistsError

        def create():
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
            try:
                admin.create_topics([NewTopic(self.topic, 1, 1)])
            except TopicAlreadyExistsError:
                pass
            finally:
                admin.close()
            return True

        try:
            connect_with_backoff(create, what=f"Kafka broker {self.bootstrap} (board admin)",
                                 stop=self.stop)
        except KafkaError as exc:   # e.g. not allowed to create topics: it may exist already
            log.warning("could not create board topic %s: %s", self.topic, exc)

    def post(self, message: dict) -> None:
        """Append one message and wait for the broker's acknowledgement."""
        value = json.dumps(message, separators=(",", ":")).encode("utf-8")
        self.producer.send(self.topic, value, partition=0).get(timeout=30)
        self.posted += 1

    def read(self, timeout_ms: int = 50) -> list[Any]:
        """The messages appended since the last read, in log order: each JSON value decoded,
        or the raw bytes of one that is not JSON (the protocol layer counts those)."""
        out: list[Any] = []
        for _tp, records in self.consumer.poll(timeout_ms=timeout_ms).items():
            for r in records:
                try:
                    out.append(json.loads(r.value))
                except (TypeError, ValueError):
                    out.append(bytes(r.value or b""))
        return out

    def caught_up(self) -> bool:
        """Whether this reader has read every message appended so far."""
        from kafka import TopicPartition

        tp = TopicPartition(self.topic, 0)
        end = self.consumer.end_offsets([tp]).get(tp, 0)
        return self.consumer.position(tp) >= end

    def close(self) -> None:
        for client in (self.consumer, self.producer):
            if client is not None:
                try:
                    client.close()
                except Exception as exc:  # a broker that is gone
                    log.warning("board close: %s", exc)
        self.consumer = self.producer = None
