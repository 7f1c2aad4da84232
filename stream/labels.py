"""Delayed labels: records held for the labels that come after them (how to use them:
docs/service.md#delayed-labels).

A record without ``y`` waits in :class:`HeldRecords` until a label message with its id comes,
and the pair is learned once, at the label's position; a record that expires (by count,
messages or seconds) is dropped, never learned. :class:`LabelJoin` (the runner's base) does the
joining and counting; :func:`pack_held` / :func:`unpack_held` put held records in checkpoints.
Held records are curator state: nothing about them is published but public message counts.

Bounds, counters and why an expired record is never learned:
docs/stream_internals.md#delayed-labels.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..connectors import SourceRecord
from ..connectors.idmemory import IdMemory
from .messages import LabelMessage, compact_features, row_features

__all__ = ["HeldRecords", "Held", "Joined", "LabelJoin", "LabelPacer", "LABEL_COUNTERS",
           "DEFAULT_MAX_HELD", "DEFAULT_MAX_HELD_MESSAGES", "HELD_FORMAT", "held_count",
           "pack_held", "unpack_held"]

#: records held at most (``serve --max-held``)
DEFAULT_MAX_HELD = 10_000
#: messages after which a held record expires (``serve --held-messages``)
DEFAULT_MAX_HELD_MESSAGES = 1_000_000
#: the runner's counters of the join (curator-only: they depend on the records' content)
LABEL_COUNTERS = ("held", "labels_joined", "held_expired", "labels_unknown", "labels_expired",
                  "labels_repeated", "held_handed_over", "held_adopted", "held_dropped")
#: the held-topic message of one partition's held records, handed over at a rebalance
#: (stream/members.py: :meth:`HeldRecords.hand_over`, :meth:`HeldRecords.adopt`)
HELD_FORMAT = "dpstream-held/1"


class Held(NamedTuple):
    """One held record: its validated features (the ``(numeric, codes)`` row of a validated
    batch, :func:`~dpstream.stream.messages.compact_features`; a dict is accepted too), public
    flag, where it arrived (partition, offset), the message count and wall time at its
    arrival, and the prediction made then (scored against the label when it comes; ``None``
    when nothing predicted)."""

    x: Any
    public: bool = False
    partition: str = ""
    offset: int = -1
    seen: int = 0
    wall: float = 0.0
    prediction: Any = None


class HeldRecords:
    """Records waiting for their labels, oldest first, bounded by count and age
    (docs/stream_internals.md#delayed-labels).

    Parameters
    ----------
    max_records
        Records held at most (>= 1); the oldest expires when a new one would exceed it.
    max_messages
        A record expires once this many messages arrived after it (``None``: never).
    max_seconds
        A record expires once it waited this long (``None``: never).

    Examples
    --------
    >>> held = HeldRecords(max_records=2, max_messages=100)
    >>> held.hold(("int", 1), {"age": 39.0}, seen=1)
    []
    >>> held.hold(("int", 2), {"age": 50.0}, seen=2)
    []
    >>> [key for key, _ in held.hold(("int", 3), {"age": 21.0}, seen=3)]   # over the cap
    [('int', 1)]
    >>> held.take(("int", 2)).x, len(held)
    ({'age': 50.0}, 1)
    >>> [key for key, _ in held.expire(seen=104)]     # 101 messages after it arrived
    [('int', 3)]
    >>> back = HeldRecords.from_state(held.state(), max_records=2)
    >>> len(back), back.max_messages
    (0, 100)
    """

    def __init__(self, max_records: int = DEFAULT_MAX_HELD,
                 max_messages: int | None = DEFAULT_MAX_HELD_MESSAGES,
                 max_seconds: float | None = None):
        if type(max_records) is not int or max_records < 1:
            raise ValueError(f"max_records must be an int >= 1, got {max_records!r}")
        if max_messages is not None and (type(max_messages) is not int or max_messages < 1):
            raise ValueError(f"max_messages must be an int >= 1 or None, got {max_messages!r}")
        if max_seconds is not None and not float(max_seconds) > 0:
            raise ValueError(f"max_seconds must be > 0 or None, got {max_seconds!r}")
        self.max_records = max_records
        self.max_messages = max_messages
        self.max_seconds = None if max_seconds is None else float(max_seconds)
        self._held: OrderedDict[tuple, Held] = OrderedDict()
        #: the oldest held record's message count, or a lower bound of it (records only
        #: leave the front or join at the back; an adoption resets it); None: not known
        self._front_seen: int | None = None

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: tuple) -> bool:
        return key in self._held

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._held)

    def hold(self, key: tuple, x: dict, *, seen: int, public: bool = False,
             partition: str = "", offset: int = -1, prediction: Any = None,
             wall: float | None = None) -> list[tuple[tuple, Held]]:
        """Hold a record (``seen``: the runner's message count at its arrival); returns the
        records that expired to make room, oldest first."""
        self._held[key] = Held(x, bool(public), partition, int(offset), int(seen),
                               time.time() if wall is None else float(wall), prediction)
        out = []
        while len(self._held) > self.max_records:
            out.append(self._held.popitem(last=False))
        return out

    def set_prediction(self, key: tuple, prediction: Any) -> None:
        """Note the prediction made for the held record ``key`` (if it is still held)."""
        entry = self._held.get(key)
        if entry is not None:
            self._held[key] = entry._replace(prediction=prediction)

    def take(self, key: tuple) -> Held | None:
        """The held record with ``key``, removed; ``None`` when none is held."""
        return self._held.pop(key, None)

    def expire(self, *, seen: int, now: float | None = None) -> list[tuple[tuple, Held]]:
        """Remove and return the records past their age at message count ``seen`` (and wall
        time ``now``), oldest first."""
        out = []
        if not self._held:
            return out
        limit_seen = None if self.max_messages is None else seen - self.max_messages
        if self.max_seconds is None:   # (the runner asks at every message: a fast no)
            if limit_seen is None:
                return out
            if self._front_seen is None:
                self._front_seen = next(iter(self._held.values())).seen
            if self._front_seen >= limit_seen:   # (a lower bound of the oldest's count)
                return out
        limit_wall = None
        if self.max_seconds is not None:
            limit_wall = (time.time() if now is None else now) - self.max_seconds
        while self._held:
            key, entry = next(iter(self._held.items()))
            if ((limit_seen is not None and entry.seen < limit_seen)
                    or (limit_wall is not None and entry.wall < limit_wall)):
                out.append(self._held.popitem(last=False))
            else:
                break
        self._front_seen = None
        return out

    def drop_partitions(self, partitions: set[str]) -> list[tuple[tuple, Held]]:
        """Remove and return the records that arrived on ``partitions`` (a member that lost
        them: their labels go to the new owner, which reads the records again)."""
        gone = [k for k, e in self._held.items() if e.partition in partitions]
        return [(k, self._held.pop(k)) for k in gone]

    # ------------------------------------------------------------ rebalances
    def hand_over(self, partitions: set[str], *, seen: int) -> dict[str, dict]:
        """Remove the records that arrived on ``partitions`` and return them packed per
        partition (:meth:`adopt` takes a pack; :func:`pack_held` says what is in it, plus
        ``age``: each record's age in messages at count ``seen``). A consumer-group member
        hands them to the partitions' next owner. A record kept as a dict (a checkpoint of
        an early version) stays."""
        by: dict[str, list[tuple[tuple, Held]]] = {}
        for key in [k for k, e in self._held.items()
                    if e.partition in partitions and not isinstance(e.x, dict)]:
            entry = self._held.pop(key)
            by.setdefault(entry.partition, []).append((key, entry))
        out = {}
        for partition, entries in by.items():
            pack = pack_held(entries)
            pack["age"] = int(seen) - pack["seen"]
            out[partition] = pack
        return out

    def adopt(self, pack: dict, partition: str, *, seen: int) -> list[tuple[tuple, Held]]:
        """Hold the records of a :meth:`hand_over` pack of ``partition`` (their ages kept:
        arrival counts ``seen`` less their age); returns the records that expired to make
        room, oldest first."""
        arrived = int(seen) - np.asarray(pack["age"], dtype=np.int64)
        for key, entry in unpack_held(dict(pack, seen=arrived)):
            self._held[key] = entry._replace(partition=partition)
        # oldest first again (expiry reads the front), then the cap
        self._held = OrderedDict(sorted(self._held.items(), key=lambda kv: kv[1].seen))
        self._front_seen = None
        out = []
        while len(self._held) > self.max_records:
            out.append(self._held.popitem(last=False))
        return out

    # ------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """Data-only state for the checkpoint: the bounds, the count and the held records
        as a :func:`pack_held` pack (arrays: 100,000 records save in a fraction of a
        second); a record kept as a dict (an early version's) as a row of ``held``."""
        rows = [(k, e) for k, e in self._held.items() if not isinstance(e.x, dict)]
        return {"max_records": self.max_records, "max_messages": self.max_messages,
                "max_seconds": self.max_seconds, "count": len(self._held),
                "pack": pack_held(rows),
                "held": [[k[0], k[1], e.x, e.public, e.partition, e.offset, e.seen, e.wall,
                          e.prediction] for k, e in self._held.items()
                         if isinstance(e.x, dict)]}

    @classmethod
    def from_state(cls, state: dict | None, **bounds: Any) -> HeldRecords:
        """The store saved in ``state`` (``None``: an empty one), with ``bounds`` (the
        constructor's keywords) overriding the saved ones: a restart may change them."""
        state = state or {}
        kwargs = {k: state[k] for k in ("max_records", "max_messages", "max_seconds")
                  if k in state}
        kwargs.update(bounds)
        out = cls(**kwargs)
        entries = [] if state.get("pack") is None else unpack_held(state["pack"])
        for kind, value, x, public, partition, offset, seen, wall, pred in state.get("held", []):
            x = dict(x) if isinstance(x, dict) else (np.asarray(x[0], dtype=np.float64),
                                                     np.asarray(x[1], dtype=np.int32))
            entries.append(((kind, value), Held(x, bool(public), partition, int(offset),
                                                int(seen), float(wall), pred)))
        for key, entry in sorted(entries, key=lambda kv: kv[1].seen):
            out._held[key] = entry
        return out


def held_count(state: dict | None) -> int:
    """How many records a :meth:`HeldRecords.state` holds."""
    state = state or {}
    return int(state.get("count", len(state.get("held", []))))


def pack_held(entries: list[tuple[tuple, Held]]) -> dict:
    """Held records (their features as ``(numeric, codes)`` rows) as arrays and lists: ids
    (``kinds``, ``ids``), ``numeric`` and ``codes`` matrices, ``public``, ``partition`` (an
    index into ``partitions``), ``offsets``, ``seen``, ``wall`` and ``prediction``.

    >>> rows = [(("int", 7), Held((np.ones(2), np.zeros(1, np.int32)), False, "r:0", 3, 5))]
    >>> [(k, e.partition, e.seen) for k, e in unpack_held(pack_held(rows))]
    [(('int', 7), 'r:0', 5)]
    """
    names = sorted({e.partition for _, e in entries})
    index = {name: i for i, name in enumerate(names)}
    xs = [e.x for _, e in entries]
    n = len(xs)
    return {
        "kinds": [k[0] for k, _ in entries], "ids": [k[1] for k, _ in entries],
        # (one concatenation: a third of np.stack's time on 100,000 rows)
        "numeric": (np.concatenate([x[0] for x in xs]).astype(np.float64, copy=False)
                    .reshape(n, len(xs[0][0])) if n else np.zeros((0, 0))),
        "codes": (np.concatenate([x[1] for x in xs]).astype(np.int32, copy=False)
                  .reshape(n, len(xs[0][1])) if n else np.zeros((0, 0), dtype=np.int32)),
        "public": np.array([e.public for _, e in entries], dtype=bool),
        "partitions": names,
        "partition": np.array([index[e.partition] for _, e in entries], dtype=np.int32),
        "offsets": np.array([e.offset for _, e in entries], dtype=np.int64),
        "seen": np.array([e.seen for _, e in entries], dtype=np.int64),
        "wall": np.array([e.wall for _, e in entries], dtype=np.float64),
        "prediction": [e.prediction for _, e in entries]}


def unpack_held(pack: dict) -> list[tuple[tuple, Held]]:
    """The ``(key, Held)`` entries of a :func:`pack_held` pack."""
    numeric, codes = np.asarray(pack["numeric"]), np.asarray(pack["codes"])
    names = list(pack["partitions"])
    part = np.asarray(pack["partition"]).tolist()
    public = np.asarray(pack["public"]).tolist()
    offsets = np.asarray(pack["offsets"]).tolist()
    seen = np.asarray(pack["seen"]).tolist()
    wall = np.asarray(pack["wall"]).tolist()
    return [((kind, value), Held((numeric[i], codes[i]), bool(public[i]), names[part[i]],
                                 int(offsets[i]), int(seen[i]), float(wall[i]),
                                 pack["prediction"][i]))
            for i, (kind, value) in enumerate(zip(pack["kinds"], pack["ids"], strict=True))]


class Joined(NamedTuple):
    """A label message joined with its held record (:mod:`~dpstream.stream.labels`): learned
    at the label's position with the record's features and public flag."""

    id: Any
    y: Any
    public: bool
    held: Any


class LabelJoin:
    """The runner's half of the join (:class:`~dpstream.stream.runner.Runner` inherits it):
    holding records, taking labels, expiring, and their checkpoint state. It uses the
    runner's ``counters``, ``positions``, ``model``, ``validator``, ``scorer`` and its
    ``_learned`` / ``_advance``."""

    def _init_labels(self, holding: bool, max_held: int, held_messages: int | None,
                     held_seconds: float | None) -> None:
        #: records waiting for their labels (``None``: unlabeled records are not held)
        self.held: HeldRecords | None = (HeldRecords(max_held, held_messages, held_seconds)
                                         if holding else None)
        #: ids whose label joined, and ids of held records that expired: what a later label
        #: for them is counted as (``labels_repeated``, ``labels_expired``)
        self.joined_ids = IdMemory(self.id_memory)
        self.expired_ids = IdMemory(self.id_memory)

    def _restore_labels(self, labels: dict) -> None:
        if self.held is not None:
            h = self.held
            self.held = HeldRecords.from_state(
                labels.get("held"), max_records=h.max_records, max_messages=h.max_messages,
                max_seconds=h.max_seconds)
        elif held_count(labels.get("held")):
            raise ValueError(f"the checkpoint holds {held_count(labels['held'])} records "
                             f"waiting for their labels; resume with hold_unlabeled (serve "
                             f"--hold-unlabeled) so that none is lost")
        self.joined_ids = IdMemory.from_state(labels.get("joined", []), self.ids.size)
        self.expired_ids = IdMemory.from_state(labels.get("expired", []), self.ids.size)

    def _learn_pairs(self, recs: list, admitted: list, valid: list, rows: Any,
                     row_of: dict) -> tuple[list, list]:
        """A batch segment where delayed labels interleave held records (advanced over) and
        joined pairs (learned) one by one: the pairs learned in one call, then the rest
        advanced over. Nothing can close or release inside a segment (``stream_room``), and
        a window drops its blank places before training, so the state is the one the
        records' order gives (tests/test_delayed_labels.py compares the two models)."""
        model = self.model
        learn = [entry for entry in admitted if entry[2]]
        pick = [row_of[id(entry)] for entry in learn]
        model.learn_stream(rows if len(pick) == len(valid) else rows.take(pick),
                           [r.y for _, r, _ in learn], public=[r.public for _, r, _ in learn])
        rest = len(admitted) - len(learn)
        advance = getattr(model, "advance", None)
        if rest and advance is not None:
            advance(rest)
        return ([recs[k] for k, _, ok in admitted if ok],
                [recs[k] for k, _, ok in admitted if not ok])

    def _joined_rows(self, valid: list, numeric: np.ndarray, codes: np.ndarray) -> list[int]:
        """Write each joined pair's held row into the segment's columns; their positions."""
        joined = [j for j, entry in enumerate(valid) if type(entry[1]) is Joined]
        for j in joined:
            x = valid[j][1].held.x
            numeric[j], codes[j] = (x if not isinstance(x, dict)
                                    else compact_features(self.validator, x))
        return joined

    def _score_joined(self, pair: Joined, made: dict) -> None:
        """Score a joined pair's label against the prediction its record got on arrival
        (``made``: this segment's predictions of held records, by key)."""
        key = (type(pair.id).__name__, pair.id)
        pred = pair.held.prediction if key not in made else made[key]
        if self.scorer is not None and pred is not None:
            self.scorer(pair.y, pred)

    def _labels_state(self) -> dict:
        return {"held": None if self.held is None else self.held.state(),
                "joined": self.joined_ids.state(), "expired": self.expired_ids.state()}

    def _as_label(self, record: Any) -> LabelMessage | None:
        """A label message (its clipped and coerced counts added), or a full record with
        the label of a record held, joined or expired (a label too); else ``None``."""
        if type(record) is LabelMessage:
            self.counters["clipped"] += record.clipped
            self.counters["coerced_labels"] += record.coerced
            return record
        key = (type(record.id).__name__, record.id)
        if record.labeled and key in self.ids and (
                (self.held is not None and key in self.held)
                or key in self.joined_ids or key in self.expired_ids):
            return LabelMessage(record.id, record.y, record.clipped, record.coerced)
        return None

    def _hold(self, rec: SourceRecord, record: Any, pred: Any) -> None:
        """Hold an unlabeled record for its label (its id and position taken, counted
        unlabeled)."""
        self._accept(rec, record)
        self.counters["held"] += 1
        key = (type(record.id).__name__, record.id)
        row = compact_features(self.validator, record.x)   # (its batch row: ~100 bytes)
        for old, _ in self.held.hold(key, row, seen=self.counters["seen"],
                                     public=record.public, partition=rec.partition,
                                     offset=rec.offset, prediction=jsonable(pred)):
            self._expired(old)

    def _hold_row(self, rec: SourceRecord, record: Any, key: tuple, row: tuple) -> None:
        """:meth:`_hold` for a record of a validated batch: its ``(numeric, codes)`` row."""
        self.counters["held"] += 1
        for old, _ in self.held.hold(key, row, seen=self.counters["seen"],
                                     public=record.public, partition=rec.partition,
                                     offset=rec.offset):
            self._expired(old)

    def _take_label(self, rec: SourceRecord, label: LabelMessage) -> Any:
        """A label message of a batch: the :class:`Joined` pair to learn at its position, or
        the label itself, counted (unknown, expired, repeated) and passed over."""
        key = (type(label.id).__name__, label.id)
        entry = None if self.held is None else self.held.take(key)
        self.positions[rec.partition] = rec.offset + 1
        if entry is None:
            self.counters["labels_repeated" if key in self.joined_ids else
                          "labels_expired" if key in self.expired_ids else
                          "labels_unknown"] += 1
            return label
        self.counters["labels_joined"] += 1
        self.joined_ids.add(key)
        return Joined(label.id, label.y, entry.public, entry)

    def _expire(self) -> None:
        for key, _ in self.held.expire(seen=self.counters["seen"]):
            self._expired(key)

    def _expired(self, key: tuple) -> None:
        self.counters["held_expired"] += 1
        self.expired_ids.add(key)

    def _join(self, rec: SourceRecord, label: LabelMessage) -> None:
        """A label message: the held record with its id learned with its label, at this
        message's position; else counted (unknown, expired, repeated) and passed over."""
        model = self.model
        key = (type(label.id).__name__, label.id)
        entry = None if self.held is None else self.held.take(key)
        self.positions[rec.partition] = rec.offset + 1
        rounds, epoch = model.training_rounds, release_epoch(model)
        if entry is None:
            outcome = ("labels_repeated" if key in self.joined_ids else
                       "labels_expired" if key in self.expired_ids else "labels_unknown")
            self.counters[outcome] += 1
            self._advance([rec], rounds, epoch)
            return
        self.counters["labels_joined"] += 1
        self.joined_ids.add(key)
        if self.scorer is not None and entry.prediction is not None:
            self.scorer(label.y, entry.prediction)
        kwargs: dict[str, Any] = {"public": True} if entry.public else {}
        if getattr(model, "window_seconds", None) is not None and "timestamp" in rec.meta:
            kwargs["t"] = rec.meta["timestamp"]
        x = entry.x if isinstance(entry.x, dict) else row_features(self.validator, *entry.x)
        model.learn_one(x, label.y, **kwargs)
        self._learned([rec], model.training_rounds != rounds, release_epoch(model) != epoch)


def release_epoch(model: Any) -> int:
    """The model's count of noise-drawing releases: its ``release_epoch`` (S-GBDT: rounds
    plus drift-signal windows), else its ``training_rounds``."""
    epoch = getattr(model, "release_epoch", None)
    return model.training_rounds if epoch is None else epoch


def jsonable(value: Any) -> Any:
    """A numpy scalar as its Python value (a prediction kept in JSON or a checkpoint)."""
    if hasattr(value, "item"):
        return value.item()
    return value


class LabelPacer:
    """Label messages of a second topic, let through in step with the records.

    Two topics have no order between them: a service draining a backlog (after a restart,
    say) may read a label before the record it labels, which then counts as
    ``labels_unknown`` and is lost. The pacer keeps each label read from the label topic until
    a record strictly newer than it (by the messages' Kafka timestamps) has been read from the
    same partition of the records topic (the topics are co-partitioned), or the records topic
    is read to its end (``caught_up``, for :attr:`SETTLE_S`), or the label has waited
    ``max_wait_s`` seconds (default: no limit; a label released before its record is lost): a
    label is then processed after every record produced before it. Each partition's labels
    wait in their own queue, in the topic's order. It keeps at most ``max_waiting`` labels
    (:meth:`wants_more` tells the service to stop reading labels meanwhile). The waiting labels
    are not processed, so their offsets are not committed: a crash re-reads them.

    The other way round, :meth:`labels_first` tells the service to read the label topic
    before more records while a partition's labels are older than its records and more of
    them are there: draining a backlog, the records would otherwise run ahead of their labels
    and expire from the held store's cap before the labels are read.

    >>> from dpstream.connectors import SourceRecord
    >>> def msg(topic, i, ts, p=0):
    ...     return SourceRecord(b"", partition=f"{topic}:{p}", offset=i, meta={"timestamp": ts})
    >>> pacer = LabelPacer()
    >>> pacer.add([msg("labels", 0, 5.0), msg("labels", 1, 9.0), msg("labels", 0, 1.0, p=1)])
    >>> pacer.saw([msg("records", 7, 6.0)], {"records:0": 8})   # partition 0 up to t = 6
    >>> [(m.partition, m.offset) for m in pacer.ready(caught_up=False)]
    [('labels:0', 0)]
    >>> pacer.SETTLE_S = 0.0      # (read to their end: after 2 s by default)
    >>> [(m.partition, m.offset) for m in pacer.ready(caught_up=True)], len(pacer)
    ([('labels:0', 1), ('labels:1', 0)], 0)
    """

    #: a label waits at least this long when the records are read to their end: the records
    #: source's end offsets come from its last fetches, a little behind the label topic's
    SETTLE_S = 2.0
    #: at most this many polls of the label topic in a row before the records' next one
    MAX_LABELS_FIRST = 25
    #: seconds the records wait, at the start, for the label source's partitions
    JOIN_WAIT_S = 30.0

    def __init__(self, max_waiting: int = 50_000, max_wait_s: float | None = None):
        self.max_waiting = int(max_waiting)
        self.max_wait_s = None if max_wait_s is None else float(max_wait_s)
        #: partition number -> the newest record timestamp read from it
        self.newest: dict[str, float] = {}
        #: partition number -> the newest label timestamp read from it
        self.labels_newest: dict[str, float] = {}
        self.read_upto: dict[str, int] = {}   # label partition -> offset after the last read
        #: partition number -> its waiting labels (label message, monotonic time read)
        self._waiting: dict[str, deque] = {}
        self._count = 0
        self._first = 0
        self._started = time.monotonic()

    def __len__(self) -> int:
        return self._count

    def clear(self) -> None:
        """Forget the waiting labels and the records' times (their partitions were revoked:
        re-read from their positions by whoever owns them next)."""
        self._waiting.clear()
        self.newest.clear()
        self._count = 0

    def wants_more(self) -> bool:
        """Whether the service should read more labels now."""
        return self._count < self.max_waiting

    @staticmethod
    def _newest(into: dict[str, float], messages: Sequence[SourceRecord]) -> None:
        for m in messages:
            ts = m.meta.get("timestamp") if m.meta else None
            if ts is not None:
                p = m.partition.rpartition(":")[2]
                if ts > into.get(p, -1.0):
                    into[p] = ts

    def saw(self, records: Sequence[SourceRecord], positions: dict[str, int]) -> None:
        """Records read from the records topic and processed: those below ``positions`` (the
        runner's, after the batch; a group member drops the records of a partition it does
        not own yet, which it reads again later). Only their partitions and timestamps are
        looked at."""
        self._newest(self.newest, [r for r in records
                                   if r.offset < positions.get(r.partition, 0)])

    def add(self, labels: Sequence[SourceRecord]) -> None:
        """Label messages read from the label topic, in its order."""
        now = time.monotonic()
        for m in labels:
            self._waiting.setdefault(m.partition.rpartition(":")[2], deque()).append((m, now))
            self.read_upto[m.partition] = m.offset + 1
        self._count += len(labels)
        self._newest(self.labels_newest, labels)

    def labels_first(self, source: Any) -> bool:
        """Whether the service should read the label topic before more records: while a
        label source with a group of its own has no partitions yet (at the start, up to
        :attr:`JOIN_WAIT_S`; a group member's label partitions follow its records'), and
        while some partition's labels read are older than its records read and the label
        topic holds more (a backlog), at most :attr:`MAX_LABELS_FIRST` polls in a row."""
        if getattr(source, "joins_group", True) and not getattr(source, "assigned", True):
            return time.monotonic() - self._started < self.JOIN_WAIT_S
        behind = any(self.labels_newest.get(p, -1.0) < ts for p, ts in self.newest.items())
        if (behind and self.wants_more() and self._first < self.MAX_LABELS_FIRST
                and source.lag(self.read_upto) != 0):   # (None: no fetch answered yet)
            self._first += 1
            return True
        self._first = 0
        return False

    def ready(self, caught_up: bool) -> list[SourceRecord]:
        """The labels to process now, each partition's in the order read: the first ones
        older than the newest record read from their partition, the ones read
        :attr:`SETTLE_S` ago or more once the records are ``caught_up``, and any that waited
        ``max_wait_s``."""
        out = []
        now = time.monotonic()
        stale = -1.0 if self.max_wait_s is None else now - self.max_wait_s
        settled = now - self.SETTLE_S if caught_up else -1.0
        for p, waiting in self._waiting.items():
            newest = self.newest.get(p, -1.0)
            while waiting:
                m, since = waiting[0]
                ts = m.meta.get("timestamp") if m.meta else None
                if not (ts is None or ts < newest or since <= settled or since <= stale):
                    break
                out.append(waiting.popleft()[0])
        self._count -= len(out)
        return out
