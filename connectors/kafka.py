"""Kafka source and sinks on kafka-python (consumer groups, manual commits).

:class:`KafkaSource` is a consumer-group member with manual commits: its rebalance listener
checkpoints before partitions go, seeks each assigned partition to the checkpoint's position,
and only checkpointed offsets are ever committed; a checkpoint behind the group's commits is
refused (:class:`CheckpointBehindError`). A broker down at start is retried with backoff until
:func:`connect_deadline` (:class:`BrokerUnreachable`). Design:
docs/connectors.md#kafka-on-kafka-python and docs/reliability.md#ownership-and-rollbacks.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ._partitioning import key_partition
from .records import SinkError, SourceError, SourceRecord

__all__ = ["KafkaSource", "KafkaSink", "KafkaDeadLetterSink", "GroupSource", "DeadLetterSend",
           "FollowerSource",
           "connect_with_backoff", "connect_deadline", "BrokerUnreachable", "partition_key",
           "CheckpointBehindError", "commit_metadata"]

log = logging.getLogger("dpstream.kafka")

#: tansu holds a join for about half the session timeout; these keep rebalances short. A
#: partition's fetch is at most 64 KB (a few hundred records): a consumer then reads its
#: partitions interleaved instead of one partition for tens of thousands of records first,
#: which kept a group member's windows tens of thousands of records of the stream apart
#: across its own partitions (docs/benchmark_notes.md); one process's rate is the same as
#: with 8 MB (22.1k against 22.0k msgs/s, median forest, 300,000 messages)
#: A fetch waits at most 50 ms for new records (both clients default to 500): tansu holds
#: a fetch for its whole wait when it finds nothing new, so at 10,000 msgs/s with 500 ms a
#: record waited 140 ms (p50) from the broker to its prediction, with 20 ms 14 ms
#: (docs/benchmark_notes.md, "One process at 100k messages a second"); an idle consumer
#: asks 20 times a second.
DEFAULT_CONSUMER = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000,
                    "max_poll_interval_ms": 300000, "auto_offset_reset": "earliest",
                    "bootstrap_timeout_ms": 5000, "max_poll_records": 2000,
                    "max_partition_fetch_bytes": 64 * 2**10, "fetch_max_wait_ms": 50}


#: The longest a :meth:`KafkaSource.poll` waits while its member (re)joins the group.
#: kafka-python 3.0.12 drops a JoinGroup/SyncGroup round trip that completes after the poll
#: awaiting it has returned and sends a fresh JoinGroup (``join_group_async`` restarts a
#: finished join task instead of taking its result); each fresh join restarts the group's
#: rebalance, so short polls on a broker that holds a join for a second or more (tansu does)
#: rebalanced two members without end. A poll that waits for the join to finish takes its
#: result; the wait is bounded so that a stop is still noticed.
JOIN_WAIT_MS = 5000


def partition_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


class BrokerUnreachable(SourceError):
    """No attempt to reach a Kafka broker succeeded before the connect deadline."""


class CheckpointBehindError(SourceError):
    """An exclusive member's checkpoint is behind the offsets its consumer group committed:
    another checkpoint trained those records, or this one was rolled back to an older copy;
    resuming would train them a second time (``dpstream serve`` exits with status 2)."""


def commit_metadata(checkpoint_id: str | None, position: int) -> str:
    """The metadata committed with an offset: the checkpoint that saved it and its position
    (a broker may drop it, as tansu does: the committed offset alone decides).

    Examples
    --------
    >>> commit_metadata("3f9c0e21aa5b7d10", 400)
    '{"checkpoint":"3f9c0e21aa5b7d10","position":400}'
    """
    return json.dumps({"checkpoint": checkpoint_id, "position": position},
                      separators=(",", ":"))


def _committed_by(metadata: str | None, checkpoint_id: str | None) -> str:
    """Who committed an offset, as far as its ``metadata`` tells."""
    try:
        meta = json.loads(metadata or "")
        other = meta["checkpoint"]
    except (ValueError, TypeError, KeyError):
        return "the broker kept no checkpoint id with it"
    if other == checkpoint_id:
        return (f"by this same checkpoint {other} at position {meta.get('position')}: it "
                f"was rolled back to an older copy")
    return f"by checkpoint {other} at position {meta.get('position')}"


_connecting = threading.local()   # this thread's connect_deadline: .budget s, .end monotonic
_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_level = logging.NOTSET


@contextmanager
def connect_deadline(seconds: float | None) -> Iterator[None]:
    """Within the block, :func:`connect_with_backoff` (every Kafka client's first connection)
    in this thread gives up ``seconds`` after the first attempt made in the block, raising
    :class:`BrokerUnreachable` (``None``: retry until stopped, as outside any block)."""
    saved = getattr(_connecting, "budget", None), getattr(_connecting, "end", None)
    _connecting.budget, _connecting.end = seconds, None
    try:
        yield
    finally:
        _connecting.budget, _connecting.end = saved


def _active_deadline() -> float | None:
    """The end of this thread's :func:`connect_deadline` (set at its first attempt), if any."""
    if getattr(_connecting, "budget", None) is not None and _connecting.end is None:
        _connecting.end = time.monotonic() + _connecting.budget
    return getattr(_connecting, "end", None)


def _within(config: dict, deadline: float | None) -> dict:
    """``config`` with its bootstrap wait cut to what is left before ``deadline``."""
    if deadline is None:
        return config
    left_ms = int((deadline - time.monotonic()) * 1000)
    return {**config, "bootstrap_timeout_ms": max(500, min(
        config.get("bootstrap_timeout_ms", 5000), left_ms))}


@contextmanager
def _quiet_kafka() -> Iterator[None]:
    """kafka-python's own loggers at CRITICAL while connection attempts run: a refused
    bootstrap logs several ERROR lines a second; the attempt's own line says it once."""
    global _quiet_depth, _quiet_level
    logger = logging.getLogger("kafka")
    with _quiet_lock:
        if _quiet_depth == 0:
            _quiet_level = logger.level
            logger.setLevel(logging.CRITICAL)
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                logger.setLevel(_quiet_level)


def connect_with_backoff(factory: Callable[[], Any], *, what: str, stop: threading.Event,
                         first_delay: float = 0.5, max_delay: float = 15.0,
                         deadline: float | None = None) -> Any:
    """Call ``factory`` until it stops raising Kafka connection errors (or ``stop`` is set,
    then return ``None``), sleeping ``first_delay * 2**k`` (capped) between attempts; one
    warning per failed attempt, kafka-python's own loggers silenced meanwhile.

    ``deadline`` (``time.monotonic()`` seconds; default: the active
    :func:`connect_deadline`'s, else none): the attempt that fails past it raises
    :class:`BrokerUnreachable` (whose message names ``what``) instead of its warning.
    """
    from kafka.errors import KafkaError

    deadline = _active_deadline() if deadline is None else deadline
    delay = first_delay
    attempt = 1
    start = time.monotonic()
    with _quiet_kafka():
        while not stop.is_set():
            try:
                return factory()
            except KafkaError as exc:
                if stop.is_set():
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left < 0.1:
                    raise BrokerUnreachable(
                        f"{what} unreachable: gave up after {attempt} attempt"
                        f"{'s' if attempt > 1 else ''} in {time.monotonic() - start:.1f} s "
                        f"(last: {exc}); check the address, or allow longer with "
                        f"--connect-timeout") from None
                wait = delay if left is None else min(delay, left)
                log.warning("%s unreachable (attempt %d: %s); retrying in %.1f s",
                            what, attempt, exc, wait)
                if stop.wait(wait):
                    break
                delay = min(2 * delay, max_delay)
                attempt += 1
    return None


class GroupSource:
    """What every Kafka client's group source keeps: its settings, callbacks and counters
    (:class:`KafkaSource` on kafka-python, :class:`~dpstream.connectors.kafka_confluent.
    ConfluentSource` on confluent-kafka), and the error an exclusive member logs while it
    shares its group."""

    #: called instead of ``on_revoke`` when partitions are *lost* (the member's session
    #: expired: another member may own them already); ``None``: ``on_revoke``
    on_lost: Callable[[], None] | None = None

    def _lost(self) -> None:
        (self.on_lost or self.on_revoke)()

    def __init__(self, bootstrap: str, topic: str, group: str, *,
                 position_of: Callable[[str], int | None], on_revoke: Callable[[], None],
                 consumer_config: dict | None = None, exclusive: bool = False,
                 on_assigned: Callable[[list[int], int], None] | None = None,
                 checkpoint_id: str | None = None,
                 accept_behind: Callable[[str, int], None] | None = None):
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.position_of = position_of
        self.checkpoint_id = checkpoint_id
        self.accept_behind = accept_behind
        self.on_revoke = on_revoke
        self.on_assigned = on_assigned
        self.config = {**DEFAULT_CONSUMER, **(consumer_config or {})}
        self.exclusive = exclusive
        self.consumer: Any = None
        self.assigned: set[str] = set()
        self.rebalances = 0
        self.poll_errors = 0
        #: wall time the broker last answered this consumer (records fetched, a heartbeat or
        #: librdkafka's responses); ``None`` before the first answer (``dpstream serve``:
        #: ``dpstream_broker_last_contact_age_seconds``)
        self.last_contact: float | None = None
        self.shared = False          # exclusive, and another member holds some partitions
        self._total_unknown = False  # exclusive, and the topic's partition count not known yet
        self.shared_assignments = 0
        #: exclusive: assigned partitions, paused, whose committed offsets are not compared yet
        self._unchecked: set[str] = set()
        #: exclusive: assigned partitions whose start was decided: only their records count,
        #: and only their offsets are committed, never below what the group had committed
        self._checked: set[str] = set()
        self._floor: dict[str, int] = {}
        self._last_poll_warning = -float("inf")
        self._last_shared_error = -float("inf")

    def _shared_error(self) -> None:
        now = time.monotonic()
        if now - self._last_shared_error > 30:
            log.error("another member of consumer group %r holds partitions of %r: this "
                      "service trains one model from its own checkpoint and must be the "
                      "group's only member (use --model-topic for window forests across "
                      "members); paused, training nothing, until it has every partition",
                      self.group, self.topic)
            self._last_shared_error = now

    def _check_behind(self) -> None:
        """Before an exclusive member reads the partitions it was assigned (paused until
        then), compare each one's checkpoint position with its group's committed offset (at
        the first poll that finds the member holding every partition). A position below it
        (``None``: 0) is behind: raise :class:`CheckpointBehindError`, the partitions still
        paused, or with ``accept_behind`` call ``accept_behind(partition, committed)`` and
        start there. Without a commit there is nothing to be behind (a new group); a
        position ahead of it is this checkpoint's own progress, not committed yet."""
        keys = sorted(self._unchecked)
        committed = self._committed(keys)
        if committed is None:   # not answered: still paused, asked again at the next poll
            return
        behind = []
        for key in keys:
            offset, metadata = committed.get(key, (None, None))
            own = self.position_of(key)
            if offset is not None and offset > (own or 0):
                behind.append((key, own, offset, metadata))
        if behind and self.accept_behind is None:
            raise CheckpointBehindError(
                f"checkpoint {self.checkpoint_id} is behind consumer group {self.group!r}: "
                + "; ".join(f"{key} committed at offset {offset} "
                            f"({_committed_by(meta, self.checkpoint_id)}), the checkpoint's "
                            f"position {own or 0}" for key, own, offset, meta in behind)
                + ". Another checkpoint trained those records, or this one was restored from "
                "an older copy: resuming would train them a second time. Ways out: a new "
                "model (a new --checkpoint-dir and a new --group: its own budget, from the "
                "topic's start), or --accept-behind (DPSTREAM_ACCEPT_BEHIND=true), which "
                "starts these partitions at the committed offsets and never trains the "
                "records in between (docs/reliability.md, \"Ownership and rollbacks\")")
        starts: dict[str, int | None] = dict.fromkeys(keys)
        self._floor.update({key: offset for key, (offset, _) in committed.items()
                            if offset is not None})
        for key, own, offset, meta in behind:
            log.warning("--accept-behind: %s starts at the committed offset %d (%s), not at "
                        "the checkpoint's %d: the %d records in between are not trained by "
                        "this model", key, offset, _committed_by(meta, self.checkpoint_id),
                        own or 0, offset - (own or 0))
            self.accept_behind(key, offset)
            starts[key] = offset
        self._checked |= self._start(starts)
        self._unchecked -= set(keys)

    def _forget(self, keys: set[str]) -> set[str]:
        """``keys``, the partitions revoked or lost, dropped from what this member holds."""
        self.assigned -= keys
        self._unchecked -= keys
        self._checked -= keys
        return keys

    def _committable(self, positions: dict[str, int]) -> list[tuple[int, int]]:
        """``(partition, offset)`` of the ``positions`` this member may commit: of the
        partitions of its topic it holds, and if exclusive of those whose start was decided,
        never below the offset the group had committed then (a skip accepted with
        ``accept_behind`` is not saved before the next checkpoint)."""
        out = []
        for key, off in positions.items():
            topic, _, part = key.rpartition(":")
            if topic == self.topic and key in self.assigned and not (self.exclusive and (
                    key not in self._checked or off < self._floor.get(key, 0))):
                out.append((int(part), off))
        return out

    def _offsets_error(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last_poll_warning > 10:
            log.warning("committed offsets of %s not read (%s: %s); partitions paused, "
                        "retrying", self.topic, type(exc).__name__, exc)
            self._last_poll_warning = now


class KafkaSource(GroupSource):
    """A consumer-group member reading one topic (docs/connectors.md#kafka-on-kafka-python).

    Parameters
    ----------
    bootstrap
        ``HOST:PORT`` of a broker.
    topic, group
        The topic and the consumer group.
    position_of
        ``partition key -> next offset`` from the checkpoint (``None``: start at the beginning).
    on_revoke
        Called (on kafka-python's IO thread) before partitions are revoked or lost.
    consumer_config
        Extra ``KafkaConsumer`` settings (override :data:`DEFAULT_CONSUMER`).
    on_assigned
        Called after each assignment with ``(partitions, total)``: the ids of the topic's
        partitions this member now holds (sorted), and how many the topic has (a member of
        a multi-process ensemble sizes its windows by that share and releases the
        attribute relevance of the attributes its partitions own).
    exclusive
        This member must be the group's only one (a service that trains one model from its
        own checkpoint: a partition moving to another member would be read from that
        member's older position and its records trained into a second model). While an
        assignment leaves some of the topic's partitions to another member, every assigned
        partition is paused, :meth:`poll` returns nothing and ``shared`` is true; a full
        assignment resumes, once each partition's checkpoint position is found not behind
        the group's committed offset (see ``accept_behind``).
    checkpoint_id
        The checkpoint's id, committed with its offsets (:func:`commit_metadata`).
    accept_behind
        Called as ``accept_behind(partition, committed)`` for an exclusive member's
        partition whose checkpoint position is below the group's committed offset; the
        partition then starts at that offset (the records in between are never trained by
        this model). ``None``: :meth:`poll` raises :class:`CheckpointBehindError` instead.
    """


    def connect(self, stop: threading.Event) -> bool:
        """Create the consumer and subscribe (retrying while the broker is away, up to the
        active :func:`connect_deadline`); ``False`` if ``stop`` was set first."""
        from kafka import KafkaConsumer

        deadline = _active_deadline()
        self.consumer = connect_with_backoff(
            lambda: KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                  enable_auto_commit=False, **_within(self.config, deadline)),
            what=f"Kafka broker {self.bootstrap}", stop=stop, deadline=deadline)
        if self.consumer is None:
            return False
        self.consumer.subscribe([self.topic], listener=self._listener())
        log.info("subscribed to %s as group %s at %s", self.topic, self.group, self.bootstrap)
        return True

    def _listener(self) -> Any:
        from kafka import ConsumerRebalanceListener

        source = self

        class _Listener(ConsumerRebalanceListener):
            def on_partitions_lost(self, lost):   # (kafka-python 3; else revoked is called)
                if lost:
                    source._lost()
                    log.warning("partitions lost: %s", sorted(source._forget(
                        {partition_key(tp.topic, tp.partition) for tp in lost})))

            def on_partitions_revoked(self, revoked):
                if revoked:
                    source.on_revoke()
                    log.info("partitions revoked: %s (checkpoint written)", sorted(
                        source._forget({partition_key(tp.topic, tp.partition)
                                        for tp in revoked})))

            def on_partitions_assigned(self, assigned):
                source.rebalances += 1
                # kafka-python may already have fetched them from the group's committed
                # offsets: no record counts until the check has decided where they start
                source._checked -= {partition_key(tp.topic, tp.partition) for tp in assigned}
                source._seek_own(assigned)
                source.assigned.update(partition_key(tp.topic, tp.partition) for tp in assigned)
                log.info("partitions assigned: %s", sorted(source.assigned))
                if source.on_assigned is not None and assigned:
                    total = source.consumer.partitions_for_topic(source.topic) or ()
                    mine = sorted(int(key.rpartition(":")[2]) for key in source.assigned
                                  if key.rpartition(":")[0] == source.topic)
                    if total:
                        source.on_assigned(mine, len(total))
                if source.exclusive:   # paused until their committed offsets are compared
                    source.consumer.pause(*assigned)
                    source._check_exclusive(assigned)
                    source._unchecked.update(partition_key(tp.topic, tp.partition)
                                             for tp in assigned)

        return _Listener()

    def _check_exclusive(self, assigned: Any) -> None:
        """Pause everything while another member of the group holds some partitions. While
        the topic's partition count is not known (its metadata not fetched yet), this
        member cannot tell whether it holds every partition: it pauses too and checks again
        at each poll, rather than train what may be only part of the topic. Holding every
        partition resumes nothing here: :meth:`poll` does, after
        :meth:`~GroupSource._check_behind`."""
        total = self.consumer.partitions_for_topic(self.topic) or set()
        mine = {int(key.rpartition(":")[2]) for key in self.assigned
                if key.rpartition(":")[0] == self.topic}
        was_unknown, self._total_unknown = self._total_unknown, not total
        if self._total_unknown:
            self.shared = False
            self.consumer.pause(*self.consumer.assignment())
            if not was_unknown:
                log.warning("partition count of %r not known yet: paused until it is",
                            self.topic)
            return
        self.shared = mine != set(total)
        if self.shared:
            self.shared_assignments += 1
            self.consumer.pause(*assigned)
            self._last_shared_error = -float("inf")
            self._shared_error()

    def _committed(self, keys: list[str]) -> dict[str, tuple[int | None, str | None]] | None:
        """Each partition's committed offset and metadata (``None, None``: no commit), or
        ``None`` if the broker did not answer (a blocking call: :meth:`poll`'s thread)."""
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        out = {}
        try:
            for key in keys:
                topic, _, part = key.rpartition(":")
                got = self.consumer.committed(TopicPartition(topic, int(part)), metadata=True,
                                              timeout_ms=5000)
                out[key] = ((None, None) if got is None or got.offset < 0
                            else (got.offset, got.metadata))
        except KafkaError as exc:
            self._offsets_error(exc)
            return None
        return out

    def _start(self, starts: dict[str, int | None]) -> set[str]:
        """Seek each held partition of ``starts`` to its offset (``None``: its own
        position) and resume it; the keys of those started."""
        from kafka import TopicPartition

        held = self.consumer.assignment()
        tps = []
        for key, offset in starts.items():
            topic, _, part = key.rpartition(":")
            tp = TopicPartition(topic, int(part))
            if tp in held:
                if offset is None:
                    self._seek_own([tp])
                else:
                    self.consumer.seek(tp, offset)
                tps.append(tp)
        self.consumer.resume(*tps)
        return {partition_key(tp.topic, tp.partition) for tp in tps}

    def _seek_own(self, tps: Any) -> None:
        """Put each partition at this service's own position (its start if it has none)."""
        for tp in tps:
            pos = self.position_of(partition_key(tp.topic, tp.partition))
            if pos is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, pos)

    def poll(self, timeout_ms: int = 200) -> list[SourceRecord]:
        """The next records (``[]`` while the broker is unreachable: kafka-python 3 raises a
        retriable error such as a refused connection out of ``poll`` when a restarting broker
        refuses its coordinator lookup; the consumer recovers on a later poll; ``[]`` while an
        exclusive member shares its group)."""
        from kafka.errors import RetriableError

        try:
            if self._total_unknown:
                self._check_exclusive(self.consumer.assignment())
            if self._unchecked and not (self.shared or self._total_unknown):
                self._check_behind()
            wait_ms = max(timeout_ms, JOIN_WAIT_MS) if self._joining() else timeout_ms
            batches = self.consumer.poll(timeout_ms=wait_ms)
            self._note_contact(bool(batches))
            if self.shared:
                self._shared_error()
                return []   # fetched before the pause: dropped untrained, positions unmoved
            if self._total_unknown:
                return []
        except RetriableError as exc:
            self.poll_errors += 1
            now = time.monotonic()
            if now - self._last_poll_warning > 10:
                log.warning("broker unreachable while polling (%s: %s); retrying",
                            type(exc).__name__, exc)
                self._last_poll_warning = now
            time.sleep(timeout_ms / 1000)
            return []
        out = []
        for tp, messages in batches.items():
            key = partition_key(tp.topic, tp.partition)
            if self.exclusive and key not in self._checked:   # fetched before its check
                continue
            for m in messages:
                value = m.value if m.value is not None else b""
                meta = {"topic": tp.topic, "kafka_partition": tp.partition}
                if m.timestamp is not None and m.timestamp >= 0:
                    meta["timestamp"] = m.timestamp / 1000.0   # the broker's, in seconds
                out.append(SourceRecord(value=value, partition=key, offset=m.offset, raw=value,
                                        meta=meta))
        return out

    def _note_contact(self, fetched: bool) -> None:
        """Move :attr:`last_contact` to now if the poll fetched records, else to the group
        coordinator's last heartbeat answer (kafka-python has no public read-out of it: its
        coordinator's ``heartbeat.last_receive``, monotonic; absent: records only)."""
        now = time.time()
        if fetched:
            self.last_contact = now
            return
        heartbeat = getattr(getattr(self.consumer, "_coordinator", None), "heartbeat", None)
        beat = getattr(heartbeat, "last_receive", None)
        if isinstance(beat, float) and beat != -float("inf"):
            wall = now - (time.monotonic() - beat)
            if self.last_contact is None or wall > self.last_contact:
                self.last_contact = wall

    def _joining(self) -> bool:
        """Whether the consumer is (re)joining its group: a join round trip is in flight, or
        the coordinator wants one (see :data:`JOIN_WAIT_MS`; kafka-python has no public way
        to ask, so this reads its coordinator and answers no where that is not there)."""
        coordinator = getattr(self.consumer, "_coordinator", None)
        if coordinator is None:
            return False
        if getattr(coordinator, "_join_task", None) is not None:
            return True
        need = getattr(coordinator, "need_rejoin", None)
        return bool(need()) if callable(need) else False

    def commit(self, positions: dict[str, int]) -> None:
        """Commit checkpointed next offsets of the partitions this member holds (async),
        each with :func:`commit_metadata`."""
        from kafka import OffsetAndMetadata, TopicPartition

        offsets = {TopicPartition(self.topic, part): OffsetAndMetadata(
            off, commit_metadata(self.checkpoint_id, off), -1)
            for part, off in self._committable(positions)}
        if offsets:
            try:
                self.consumer.commit_async(offsets, callback=_log_commit)
            except Exception as exc:   # monitoring only: the checkpoint already holds them
                log.warning("offset commit failed: %s", exc)

    def lag(self, positions: dict[str, int]) -> int | None:
        """Messages behind the high watermark, from cached fetch metadata (no network call)."""
        from kafka import TopicPartition

        total, known = 0, False
        for key in list(self.assigned):
            topic, _, part = key.rpartition(":")
            high = self.consumer.highwater(TopicPartition(topic, int(part)))
            if high is not None:
                known = True
                total += max(0, high - positions.get(key, 0))
        return total if known else None

    def end_offsets(self) -> dict[str, int]:
        """Current end offsets of every partition of the topic (a network call)."""
        from kafka import TopicPartition

        parts = self.consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in parts]
        ends = self.consumer.end_offsets(tps)
        return {partition_key(tp.topic, tp.partition): off for tp, off in ends.items()}

    def close(self) -> None:
        if self.consumer is not None:
            try:
                self.consumer.close(autocommit=False)
            except Exception as exc:  # closing a consumer whose broker is gone
                log.warning("consumer close: %s", exc)
            self.consumer = None


class FollowerSource:
    """A topic read without a consumer group, the partitions another source's group assigned:
    a label topic co-partitioned with the records topic, read by the group member that holds
    the records (``serve --label-topic`` with ``--model-topic``). Partition ``p`` of this topic
    is followed from the position the caller gives (its checkpoint or the group's handoff)
    while partition ``p`` of the records topic is this member's (:meth:`follow`,
    :meth:`unfollow_all`, called from the records source's rebalance callbacks: no network
    call). Nothing is committed to Kafka: the positions live in the member's checkpoint and
    windows.
    """

    def __init__(self, bootstrap: str, topic: str, *, consumer_config: dict | None = None):
        self.bootstrap, self.topic = bootstrap, topic
        self.config = dict(consumer_config or {})
        self.consumer: Any = None
        self.followed: dict[int, int | None] = {}   # partition -> start (None: the beginning)
        self._assigned: dict[int, int | None] | None = None

    def connect(self, stop: threading.Event) -> bool:
        from kafka import KafkaConsumer

        self.consumer = connect_with_backoff(
            lambda: KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                  enable_auto_commit=False, auto_offset_reset="earliest",
                                  bootstrap_timeout_ms=5000, **self.config),
            what=f"Kafka broker {self.bootstrap} (label topic {self.topic})", stop=stop)
        return self.consumer is not None

    def follow(self, partition: int, position: int | None) -> None:
        """Read ``partition`` from ``position`` (``None``: its beginning) from the next poll."""
        self.followed[int(partition)] = position

    def unfollow_all(self) -> None:
        self.followed.clear()

    @property
    def assigned(self) -> set[str]:
        """The followed partitions' keys (``topic:partition``)."""
        return {partition_key(self.topic, p) for p in self.followed}

    def lag(self, positions: dict[str, int]) -> int | None:
        """Messages behind the high watermark, from cached fetch metadata (no network call)."""
        from kafka import TopicPartition

        if self.consumer is None:
            return None
        if not self.followed:
            return 0   # (nothing to read)
        total, known = 0, False
        for p in list(self.followed):
            high = self.consumer.highwater(TopicPartition(self.topic, p))
            if high is not None:
                known = True
                total += max(0, high - positions.get(partition_key(self.topic, p), 0))
        return total if known else None

    def _sync(self) -> None:
        from kafka import TopicPartition

        if self._assigned == self.followed:
            return
        tps = {p: TopicPartition(self.topic, p) for p in self.followed}
        self.consumer.assign(list(tps.values()))
        for p, tp in tps.items():
            if self.followed[p] is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, self.followed[p])
        self._assigned = dict(self.followed)

    def poll(self, timeout_ms: int = 0) -> list[SourceRecord]:
        """The next messages of the followed partitions (``[]`` while none is followed)."""
        from kafka.errors import RetriableError

        if self.consumer is None:
            return []
        self._sync()
        if not self.followed:
            return []
        try:
            batches = self.consumer.poll(timeout_ms=timeout_ms)
        except RetriableError as exc:
            log.warning("label topic %s: %s; retrying", self.topic, exc)
            return []
        out = []
        for tp, messages in batches.items():
            if tp.partition not in self.followed:   # (fetched before an unfollow)
                continue
            key = partition_key(tp.topic, tp.partition)
            for m in messages:
                value = m.value if m.value is not None else b""
                meta = {"topic": tp.topic, "kafka_partition": tp.partition}
                if m.timestamp is not None and m.timestamp >= 0:
                    meta["timestamp"] = m.timestamp / 1000.0
                out.append(SourceRecord(value=value, partition=key, offset=m.offset, raw=value,
                                        meta=meta))
        return out

    def close(self) -> None:
        if self.consumer is not None:
            try:
                self.consumer.close(autocommit=False)
            finally:
                self.consumer = None


def _log_commit(offsets, response) -> None:
    if isinstance(response, Exception):
        log.warning("offset commit failed: %s", response)


class KafkaSink:
    """Messages to one topic (predictions: ``{"id", "prediction", "partition", "offset"}`` JSON
    values keyed by :func:`~dpstream.connectors.records.sink_key`).

    Sends are asynchronous; a send the producer finally gives up on (after its retries and
    ``delivery_timeout_ms``) is counted, and the next :meth:`flush` raises
    :class:`~dpstream.connectors.records.SinkError` — the runner flushes before every
    checkpoint, so no checkpoint moves past a message that was not delivered.

    A keyed message goes to the partition Kafka's default partitioner would choose, computed
    here with a compiled murmur2 (:mod:`~dpstream.connectors._partitioning`; kafka-python's
    pure-Python one cost about 8 µs a message); the topic's partitions are looked up again at
    every :meth:`flush`.
    """

    def __init__(self, bootstrap: str, topic: str, *, stop: threading.Event,
                 producer_config: dict | None = None):
        from kafka import KafkaProducer

        self.topic = topic
        config = {"bootstrap_timeout_ms": 5000, "max_block_ms": 60000, "acks": "all",
                  "linger_ms": 5, **(producer_config or {})}
        deadline = _active_deadline()
        self.producer = connect_with_backoff(
            lambda: KafkaProducer(bootstrap_servers=bootstrap, **_within(config, deadline)),
            what=f"Kafka broker {bootstrap} (producer for {topic})", stop=stop,
            deadline=deadline)
        self.sent = 0
        self.failed = 0
        self._settled = 0       # sends whose outcome (delivered or failed) is known
        self._first_error: BaseException | None = None
        self._lock = threading.Lock()
        self._partitions: list[int] | None = None   # the topic's, sorted (until a flush)

    def _send(self, value: bytes, key: bytes | None, headers: list | None = None) -> None:
        partition = None
        if key is not None:
            if not self._partitions:
                self._partitions = sorted(self.producer.partitions_for(self.topic) or ())
            if self._partitions:
                partition = self._partitions[key_partition(key, len(self._partitions))]
        future = self.producer.send(self.topic, value, key=key, headers=headers,
                                    partition=partition)
        self.sent += 1
        future.add_callback(self._delivered).add_errback(self._failure)

    def _delivered(self, _metadata: Any) -> None:   # on kafka-python's IO thread
        with self._lock:
            self._settled += 1

    def _failure(self, exc: BaseException) -> None:   # on kafka-python's IO thread
        with self._lock:
            self._settled += 1
            self.failed += 1
            if self._first_error is None:
                self._first_error = exc

    def send_json(self, value: dict, key: bytes | None = None) -> None:
        self._send(json.dumps(value).encode("utf-8"), key)

    def flush(self, timeout: float | None = None) -> None:
        """Wait for every send; raise :class:`SinkError` if any was not delivered."""
        self._partitions = None   # partitions added to the topic count from the next send
        if self.producer is not None:
            self.producer.flush(timeout=timeout)
            # a batch counts as done before its records' callbacks have run on the IO thread
            deadline = time.monotonic() + 10
            while self._settled < self.sent and time.monotonic() < deadline:
                time.sleep(0.001)
        with self._lock:
            failed, first, unsettled = self.failed, self._first_error, self.sent - self._settled
            self.failed, self._first_error = 0, None
        undelivered(self.topic, failed, first, unsettled)

    def close(self) -> None:
        if self.producer is not None:
            try:
                self.flush()
            finally:
                self.producer.close()
                self.producer = None


def undelivered(topic: str, failed: int, first: BaseException | None, unsettled: int) -> None:
    """A Kafka sink's flush outcome: :class:`SinkError` if ``failed`` sends failed (``first``
    the first error) or ``unsettled`` were not confirmed; nothing if all were delivered."""
    if failed or unsettled:
        what = (f"first: {type(first).__name__}: {first}" if failed
                else f"{unsettled} unconfirmed")
        raise SinkError(f"{failed or unsettled} message(s) to topic {topic!r} were not "
                        f"delivered ({what}); no checkpoint moves past them, a restart "
                        f"sends them again")


class DeadLetterSend:
    """A dead letter as every Kafka client's dead-letter sink sends it (through the sink's
    ``_send``): the original bytes, the key, and the reason and position as headers."""

    def send(self, raw: bytes, reason: str, position: dict, key: bytes | None = None) -> None:
        headers = [("dpstream-reason", reason.encode("utf-8")),
                   ("dpstream-position", json.dumps(position).encode("utf-8"))]
        self._send(raw, key, headers)


class KafkaDeadLetterSink(DeadLetterSend, KafkaSink):
    """Dead letters to a topic: the value is the original bytes, untouched (only a message over
    the size limit is cut to its first bytes, as the reason says); the key is
    :func:`~dpstream.connectors.records.sink_key`; headers carry ``dpstream-reason`` and
    ``dpstream-position`` (JSON). Flushed before every checkpoint (at-least-once, like the file
    sink)."""
