"""Kafka source and sinks on confluent-kafka (librdkafka), the optional fast client.

:class:`ConfluentSource`, :class:`ConfluentSink` and :class:`ConfluentDeadLetterSink` have the
API and the semantics of :class:`~dpstream.connectors.kafka.KafkaSource`,
:class:`~dpstream.connectors.kafka.KafkaSink` and
:class:`~dpstream.connectors.kafka.KafkaDeadLetterSink`, on librdkafka (``pip install
'dpstream[fast]'``; :func:`~dpstream.connectors.kafka_clients.resolve_kafka_client` chooses it
when it imports). Semantics and what differs from kafka-python:
docs/connectors.md#kafka-on-confluent-kafka.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .kafka import (
    DeadLetterSend,
    GroupSource,
    _active_deadline,
    _within,
    commit_metadata,
    connect_with_backoff,
    partition_key,
    undelivered,
)
from .records import SourceRecord

__all__ = ["ConfluentSource", "ConfluentSink", "ConfluentDeadLetterSink", "rdkafka_config"]

log = logging.getLogger("dpstream.kafka")
#: librdkafka's log lines (under ``kafka``: the service shows its errors only)
RDKAFKA_LOG = logging.getLogger("kafka.rdkafka")

#: kafka-python setting names whose librdkafka name is not the same words with dots
_NAMES = {"max_request_size": "message.max.bytes", "fetch_max_wait_ms": "fetch.wait.max.ms",
          "api_version_request_timeout_ms": "api.version.request.timeout.ms"}
#: ours, or kafka-python's with no librdkafka counterpart: not passed on
_DROPPED = {"bootstrap_timeout_ms", "max_poll_records", "max_block_ms", "api_version",
            "enable_auto_commit", "bootstrap_servers", "group_id", "key_serializer",
            "value_serializer", "key_deserializer", "value_deserializer"}
#: the most messages one :meth:`ConfluentSource.poll` returns (``max_poll_records``)
BATCH = 2000
#: how often librdkafka reports its statistics to a source (``statistics.interval.ms``): the
#: responses its brokers sent, which move :attr:`ConfluentSource.last_contact` while idle
STATS_MS = 5000


def rdkafka_config(config: dict) -> dict:
    """kafka-python style settings (``session_timeout_ms``) as librdkafka's
    (``session.timeout.ms``); names with a dot pass as they are.

    Examples
    --------
    >>> rdkafka_config({"session_timeout_ms": 6000, "max_request_size": 2 << 20,
    ...                 "bootstrap_timeout_ms": 5000, "fetch.min.bytes": 1})
    {'session.timeout.ms': 6000, 'message.max.bytes': 2097152, 'fetch.min.bytes': 1}
    """
    out = {}
    for key, value in config.items():
        if key in _DROPPED:
            continue
        out[key if "." in key else _NAMES.get(key, key.replace("_", "."))] = value
    return out


class _ConnectErrors:
    """A client's ``error_cb``: while its first connection is attempted, the errors are kept
    (the attempt's failure names the last); from then on each goes to ``after``."""

    def __init__(self, after: Callable[[Any], None]):
        self.during: list[str] = []
        self.connected = False
        self.after = after

    def __call__(self, err: Any) -> None:
        if self.connected:
            self.after(err)
        else:
            self.during.append(err.str() if hasattr(err, "str") else str(err))


def _reachable(client: Any, timeout: float, errors: _ConnectErrors) -> Any:
    """``client`` once a metadata request answers within ``timeout`` seconds; else (or at
    once when librdkafka reports a broker it cannot reach: a refused connection) the client
    is closed and a kafka-python connection error raised, which
    :func:`~dpstream.connectors.kafka.connect_with_backoff` retries."""
    from confluent_kafka import KafkaException
    from kafka.errors import KafkaConnectionError

    end = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            client.list_topics(timeout=max(0.05, min(0.25, end - time.monotonic())))
            errors.connected = True
            return client
        except KafkaException as exc:
            last = _reason(exc)
        client.poll(0)   # serves error_cb
        if errors.during or time.monotonic() >= end:
            break
    close = getattr(client, "close", None)
    if close is not None:
        try:
            close()
        except Exception:   # noqa: BLE001 - a client that never connected
            pass
    raise KafkaConnectionError(errors.during[-1] if errors.during else last)


def _reason(exc: Exception) -> str:
    """The text of a confluent-kafka exception's ``KafkaError``."""
    err = exc.args[0] if exc.args else None
    return err.str() if hasattr(err, "str") else str(exc)


class ConfluentSource(GroupSource):
    """A consumer-group member reading one topic: :class:`~dpstream.connectors.kafka.
    KafkaSource`'s parameters, attributes and methods, on confluent-kafka
    (docs/connectors.md#kafka-on-confluent-kafka).

    Parameters
    ----------
    bootstrap, topic, group, position_of, on_revoke, consumer_config, exclusive, on_assigned, \
checkpoint_id, accept_behind
        As for :class:`~dpstream.connectors.kafka.KafkaSource`; ``consumer_config`` takes
        kafka-python names (translated by :func:`rdkafka_config`) or librdkafka's dotted ones.
        ``on_revoke`` runs on the thread that calls :meth:`poll`.
    """

    def __init__(self, bootstrap: str, topic: str, group: str, *,
                 position_of: Callable[[str], int | None], on_revoke: Callable[[], None],
                 consumer_config: dict | None = None, exclusive: bool = False,
                 on_assigned: Callable[[list[int], int], None] | None = None,
                 checkpoint_id: str | None = None,
                 accept_behind: Callable[[str, int], None] | None = None):
        super().__init__(bootstrap, topic, group, position_of=position_of, on_revoke=on_revoke,
                         consumer_config=consumer_config, exclusive=exclusive,
                         on_assigned=on_assigned, checkpoint_id=checkpoint_id,
                         accept_behind=accept_behind)
        self._batch = int(self.config.get("max_poll_records", BATCH))
        self._changes = 0            # assignments and revocations so far
        self._starts: dict[int, int] = {}   # partition -> the position it was assigned at
        self._keys: dict[int, str] = {}     # partition -> its key, "topic:partition"
        self._closing = False
        self._cooperative = "cooperative" in str(
            self.config.get("partition.assignment.strategy", ""))
        self._highs: dict[str, int] = {}   # partition key -> high watermark (last fetches)
        self._highs_at = -float("inf")
        self._responses = 0   # responses from brokers, at librdkafka's last statistics

    def connect(self, stop: threading.Event) -> bool:
        """Create the consumer and subscribe (retrying while the broker is away, up to the
        active :func:`~dpstream.connectors.kafka.connect_deadline`); ``False`` if ``stop``
        was set first."""
        from confluent_kafka import Consumer

        deadline = _active_deadline()
        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group,
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "enable.partition.eof": False, "topic.metadata.refresh.interval.ms": 10000,
                "statistics.interval.ms": STATS_MS, **rdkafka_config(self.config),
                "on_commit": _log_commit, "logger": RDKAFKA_LOG, "stats_cb": self._stats}

        def factory() -> Any:
            wait = _within(self.config, deadline).get("bootstrap_timeout_ms", 5000) / 1000
            errors = _ConnectErrors(self._error)
            return _reachable(Consumer({**conf, "error_cb": errors}), wait, errors)

        self.consumer = connect_with_backoff(factory, what=f"Kafka broker {self.bootstrap}",
                                             stop=stop, deadline=deadline)
        if self.consumer is None:
            return False
        self.consumer.subscribe([self.topic], on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)
        log.info("subscribed to %s as group %s at %s", self.topic, self.group, self.bootstrap)
        return True

    # ------------------------------------------------------------ rebalance callbacks
    def _key(self, partition: int) -> str:
        key = self._keys.get(partition)
        if key is None:
            key = self._keys[partition] = partition_key(self.topic, partition)
        return key

    def _on_assign(self, consumer: Any, partitions: list) -> None:
        from confluent_kafka import OFFSET_BEGINNING

        self.rebalances += 1
        self._changes += 1
        try:
            for tp in partitions:
                pos = self.position_of(self._key(tp.partition))
                tp.offset = OFFSET_BEGINNING if pos is None else pos
                self._starts[tp.partition] = -1 if pos is None else pos
            if self._cooperative:
                consumer.incremental_assign(partitions)
            else:
                consumer.assign(partitions)
            if self.exclusive and partitions:   # until their committed offsets are compared
                consumer.pause(partitions)
                self._checked -= {self._key(tp.partition) for tp in partitions}
            self.assigned.update(self._key(tp.partition) for tp in partitions)
            log.info("partitions assigned: %s", sorted(self.assigned))
            if self.on_assigned is not None and partitions:
                total = self._partition_ids()
                if total:
                    self.on_assigned(sorted(self._mine()), len(total))
            if self.exclusive:
                self._check_exclusive(partitions)
                self._unchecked.update(self._key(tp.partition) for tp in partitions)
        except Exception:   # as kafka-python does with a listener's error: logged
            log.exception("partition assignment callback failed")

    def _on_revoke(self, consumer: Any, partitions: list, what: str = "revoked") -> None:
        self._changes += 1
        try:
            if partitions and not self._closing:   # a close checkpoints nothing (as kafka's)
                (self.on_revoke if what == "revoked" else self._lost)()
            keys = {self._key(tp.partition) for tp in partitions}
            self._forget(keys)
            for tp in partitions:
                self._starts.pop(tp.partition, None)
            if keys and not self._closing:
                log.info("partitions %s: %s (checkpoint written)", what, sorted(keys))
        except Exception:
            log.exception("partition revocation callback failed")
        finally:
            if self._cooperative:
                consumer.incremental_unassign(partitions)
            else:
                consumer.unassign()

    def _on_lost(self, consumer: Any, partitions: list) -> None:
        self._on_revoke(consumer, partitions, "lost")

    def _mine(self) -> set[int]:
        return {int(key.rpartition(":")[2]) for key in self.assigned
                if key.rpartition(":")[0] == self.topic}

    def _partition_ids(self, timeout: float = 5.0) -> set[int]:
        """The topic's partitions (a metadata request; empty when not known)."""
        from confluent_kafka import KafkaException

        try:
            meta = self.consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        except KafkaException:
            return set()
        if meta is None or meta.error is not None:
            return set()
        return set(meta.partitions)

    def _check_exclusive(self, assigned: list, again: bool = False) -> None:
        """:meth:`~dpstream.connectors.kafka.KafkaSource._check_exclusive`: pause everything
        while another member holds partitions, or while the partition count is unknown
        (``again``: asked again at a poll, waiting at most a second)."""
        total = self._partition_ids(5.0 if not again else 1.0)
        mine = self._mine()
        was_unknown, self._total_unknown = self._total_unknown, not total
        if self._total_unknown:
            self.shared = False
            held = self.consumer.assignment()
            if held:
                self.consumer.pause(held)
            if not was_unknown:
                log.warning("partition count of %r not known yet: paused until it is",
                            self.topic)
            return
        self.shared = mine != total
        if self.shared:
            self.shared_assignments += 1
            if assigned:
                self.consumer.pause(assigned)
            self._last_shared_error = -float("inf")
            self._shared_error()

    def _committed(self, keys: list[str]) -> dict[str, tuple[int | None, str | None]] | None:
        """:meth:`~dpstream.connectors.kafka.KafkaSource._committed` (a blocking call)."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            got = self.consumer.committed(
                [TopicPartition(self.topic, int(k.rpartition(":")[2])) for k in keys], timeout=5)
            for tp in got:
                if tp.error is not None:
                    raise KafkaException(tp.error)
        except KafkaException as exc:
            self._offsets_error(exc)
            return None
        return {self._key(tp.partition): (None, None) if tp.offset < 0
                else (tp.offset, tp.metadata) for tp in got}

    def _start(self, starts: dict[str, int | None]) -> set[str]:
        """:meth:`~dpstream.connectors.kafka.KafkaSource._start`."""
        from confluent_kafka import TopicPartition

        mine = self._mine()
        tps = [TopicPartition(self.topic, int(k.rpartition(":")[2])) for k in starts]
        tps = [tp for tp in tps if tp.partition in mine]
        self._seek_own([tp for tp in tps if starts[self._key(tp.partition)] is None])
        for tp in tps:
            offset = starts[self._key(tp.partition)]
            if offset is not None:
                self._starts[tp.partition] = offset
                self.consumer.seek(TopicPartition(self.topic, tp.partition, offset))
        if tps:
            self.consumer.resume(tps)
        return {self._key(tp.partition) for tp in tps}

    def _seek_own(self, tps: list) -> None:
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        for tp in tps:
            pos = self.position_of(self._key(tp.partition))
            try:
                self.consumer.seek(TopicPartition(self.topic, tp.partition,
                                                  OFFSET_BEGINNING if pos is None else pos))
            except KafkaException as exc:   # not fetching yet: still at its assigned position
                log.debug("seek of %s: %s", tp, exc)

    # ------------------------------------------------------------ errors
    def _error(self, err: Any) -> None:   # librdkafka's client errors (error_cb), in poll
        self.poll_errors += 1
        now = time.monotonic()
        if now - self._last_poll_warning > 10:
            log.warning("broker unreachable while polling (%s); retrying",
                        err.str() if hasattr(err, "str") else _reason(err))
            self._last_poll_warning = now

    def _stats(self, text: str) -> None:   # librdkafka's statistics (stats_cb), in poll
        """Note contact with the broker when the responses received from brokers (``rx``,
        summed over the brokers librdkafka knows, its internal one aside) grew."""
        try:
            brokers = json.loads(text).get("brokers", {}).values()
            responses = sum(int(b.get("rx", 0)) for b in brokers if b.get("source") != "internal")
        except (ValueError, TypeError, AttributeError):   # not the statistics we know
            return
        if responses != self._responses and responses > 0:   # (less: a new consumer)
            self.last_contact = time.time()
        self._responses = responses

    # ------------------------------------------------------------ reading
    def poll(self, timeout_ms: int = 200) -> list[SourceRecord]:
        """The next records, up to ``max_poll_records``: what is already fetched, else the
        first message within ``timeout_ms`` and what arrived with it (``[]`` while an
        exclusive member shares its group; a message error is counted and logged, never
        raised)."""
        from confluent_kafka import KafkaException

        consumer = self.consumer
        changes = self._changes
        try:
            if self._total_unknown:
                self._check_exclusive(consumer.assignment(), again=True)
            if self._unchecked and not (self.shared or self._total_unknown):
                self._check_behind()
            msgs = consumer.consume(self._batch, 0)
            if not msgs:
                first = consumer.poll(timeout_ms / 1000)
                msgs = [] if first is None else [first, *consumer.consume(self._batch - 1, 0)]
            now = time.monotonic()
            if now - self._highs_at > 1.0 or len(self._highs) < len(self.assigned):
                self._highs_at = now   # (an idle poll too: a caught-up reader's lag is 0)
                self._refresh_highs()
            if not msgs:
                return []
        except KafkaException as exc:
            self._error(exc)
            time.sleep(timeout_ms / 1000)
            return []
        if self.shared:
            self._shared_error()
            return []   # fetched before the pause: dropped untrained, positions unmoved
        if self._total_unknown:
            return []
        if self._changes != changes or self._unchecked:
            msgs = self._current(msgs)
        topic, keys, out = self.topic, self._keys, []
        append = out.append
        for m in msgs:
            if m.error() is not None:
                self._message_error(m)
                continue
            p = m.partition()
            key = keys.get(p) or self._key(p)
            value = m.value()
            if value is None:
                value = b""
            kind, ts = m.timestamp()
            meta = {"topic": topic, "kafka_partition": p}
            if kind and ts >= 0:
                meta["timestamp"] = ts / 1000.0   # the broker's, in seconds
            append(SourceRecord(value, key, m.offset(), value, meta))
        if out:   # records fetched: the broker answered
            self.last_contact = time.time()
        return out

    def _current(self, msgs: list) -> list:
        """``msgs`` of a poll during which the assignment changed: without the messages of
        partitions no longer held, and each partition's from its assigned position on, each
        offset once (librdkafka may return messages fetched before the change along with
        those fetched after it)."""
        held = {int(k.rpartition(":")[2]) for k in self.assigned - self._unchecked}
        nxt = dict(self._starts)
        out = []
        for m in msgs:
            if m.error() is not None:
                out.append(m)
                continue
            p = m.partition()
            if p not in held:
                continue
            off = m.offset()
            if off >= nxt.get(p, -1):
                nxt[p] = off + 1
                out.append(m)
        return out

    def _message_error(self, m: Any) -> None:
        from confluent_kafka import KafkaError

        err = m.error()
        if err.code() == KafkaError._PARTITION_EOF:
            return
        self.poll_errors += 1
        now = time.monotonic()
        if now - self._last_poll_warning > 10:
            log.warning("consumer error on %s (%s); retrying", self.topic, err.str())
            self._last_poll_warning = now

    # ------------------------------------------------------------ offsets
    def commit(self, positions: dict[str, int]) -> None:
        """Commit checkpointed next offsets of the partitions this member holds (async),
        each with :func:`~dpstream.connectors.kafka.commit_metadata`."""
        from confluent_kafka import TopicPartition

        offsets = [TopicPartition(self.topic, part, off, commit_metadata(self.checkpoint_id, off))
                   for part, off in self._committable(positions)]
        if offsets:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=True)
            except Exception as exc:   # monitoring only: the checkpoint already holds them
                log.warning("offset commit failed: %s", exc)

    def _refresh_highs(self) -> None:
        """Read the high watermarks of the last fetches (on the polling thread: a call into
        the consumer from another thread, the metrics server's, waits for the poll)."""
        from confluent_kafka import TopicPartition

        highs = {}
        for key in list(self.assigned):
            topic, _, part = key.rpartition(":")
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, int(part)),
                                                              cached=True)
            except Exception:   # noqa: BLE001 - not fetched yet
                continue
            if high is not None and high >= 0:
                highs[key] = high
        self._highs = highs

    def lag(self, positions: dict[str, int]) -> int | None:
        """Messages behind the high watermark, from the last fetches (read by :meth:`poll`
        at most every second; no call into the consumer, so any thread may ask)."""
        highs = self._highs
        total, known = 0, False
        for key in list(self.assigned):
            high = highs.get(key)
            if high is not None:
                known = True
                total += max(0, high - positions.get(key, 0))
        return total if known else None

    def end_offsets(self) -> dict[str, int]:
        """Current end offsets of every partition of the topic (network calls)."""
        from confluent_kafka import TopicPartition

        out = {}
        for p in sorted(self._partition_ids(10.0)):
            _, high = self.consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                          timeout=10)
            out[partition_key(self.topic, p)] = high
        return out

    def close(self) -> None:
        if self.consumer is not None:
            self._closing = True
            try:
                self.consumer.close()
            except Exception as exc:  # closing a consumer whose broker is gone
                log.warning("consumer close: %s", exc)
            self.consumer = None


def _log_commit(err: Any, partitions: Any) -> None:
    if err is not None:
        log.warning("offset commit failed: %s", err)


class ConfluentSink:
    """Messages to one topic: :class:`~dpstream.connectors.kafka.KafkaSink` on confluent-kafka.

    Sends are asynchronous; librdkafka reports only the failed ones (after its retries and
    ``delivery_timeout_ms``), and the next :meth:`flush` raises
    :class:`~dpstream.connectors.records.SinkError` — as does a message librdkafka refuses at
    once (one over ``max_request_size``). ``producer_config`` takes kafka-python names or
    librdkafka's. A keyed message goes to the Java client's murmur2 partition of the topic's
    partition count as librdkafka last read it (its metadata, refreshed every 10 s; the
    kafka-python sink looks it up after every flush). Idempotent unless ``retries`` is 0 or
    ``acks`` is not ``all`` (kafka-python 3's default).
    """

    def __init__(self, bootstrap: str, topic: str, *, stop: threading.Event,
                 producer_config: dict | None = None):
        from confluent_kafka import Producer

        self.topic = topic
        config = {"bootstrap_timeout_ms": 5000, "acks": "all", "linger_ms": 5,
                  "delivery_timeout_ms": 120000, "max_block_ms": 60000,
                  **(producer_config or {})}
        self._block_s = config["max_block_ms"] / 1000
        self._last_error = -float("inf")
        deadline = _active_deadline()
        conf = {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                "delivery.report.only.error": True, "topic.metadata.refresh.interval.ms": 10000,
                **rdkafka_config(config), "on_delivery": self._delivered, "logger": RDKAFKA_LOG}
        if (config.get("retries", 1) != 0 and str(conf.get("acks")) in ("all", "-1")
                and "enable.idempotence" not in conf):   # as kafka-python 3 does by default
            conf["enable.idempotence"] = True

        def factory() -> Any:
            wait = _within(config, deadline).get("bootstrap_timeout_ms", 5000) / 1000
            errors = _ConnectErrors(self._error)
            return _reachable(Producer({**conf, "error_cb": errors}), wait, errors)

        self.producer = connect_with_backoff(
            factory, what=f"Kafka broker {bootstrap} (producer for {topic})", stop=stop,
            deadline=deadline)
        self.sent = 0
        self.failed = 0
        self._first_error: BaseException | None = None
        self._lock = threading.Lock()

    def _error(self, err: Any) -> None:   # librdkafka's client errors; it retries by itself
        now = time.monotonic()
        if now - self._last_error > 30:
            log.warning("producer for %s: %s; retrying", self.topic,
                        err.str() if hasattr(err, "str") else err)
            self._last_error = now

    def _delivered(self, err: Any, _msg: Any) -> None:   # failures only, served in poll/flush
        if err is not None:
            self._failure(RuntimeError(err.str() if hasattr(err, "str") else str(err)))

    def _failure(self, exc: BaseException) -> None:
        with self._lock:
            self.failed += 1
            if self._first_error is None:
                self._first_error = exc

    def _send(self, value: bytes, key: bytes | None, headers: list | None = None) -> None:
        from confluent_kafka import KafkaException

        producer = self.producer
        self.sent += 1
        deadline = None
        while True:
            try:
                if headers is None:
                    producer.produce(self.topic, value, key)
                else:
                    producer.produce(self.topic, value, key, headers=headers)
                break
            except BufferError:   # librdkafka's queue is full: serve it, then again
                deadline = deadline or time.monotonic() + self._block_s
                if time.monotonic() > deadline:
                    self._failure(BufferError(f"local queue full for {self._block_s:g} s"))
                    return
                producer.poll(0.1)
            except KafkaException as exc:   # refused at once (too large, unknown topic...)
                self._failure(RuntimeError(_reason(exc)))
                return
        if not self.sent & 1023:
            producer.poll(0)   # serves the failure reports of earlier sends

    def send_json(self, value: dict, key: bytes | None = None) -> None:
        self._send(json.dumps(value).encode("utf-8"), key)

    def flush(self, timeout: float | None = None) -> None:
        """Wait for every send; raise :class:`SinkError` if any was not delivered."""
        unsettled = 0
        if self.producer is not None:
            unsettled = (self.producer.flush() if timeout is None
                         else self.producer.flush(timeout))
        with self._lock:
            failed, first = self.failed, self._first_error
            self.failed, self._first_error = 0, None
        undelivered(self.topic, failed, first, unsettled)

    def close(self) -> None:
        if self.producer is not None:
            try:
                self.flush()
            finally:
                self.producer = None   # librdkafka's handle goes with its last reference


class ConfluentDeadLetterSink(DeadLetterSend, ConfluentSink):
    """Dead letters to a topic: :class:`~dpstream.connectors.kafka.KafkaDeadLetterSink` on
    confluent-kafka (the original bytes; key and headers ``dpstream-reason`` and
    ``dpstream-position`` alike)."""
