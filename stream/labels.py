"""Delayed labels: records held for the labels that come after them (docs/service.md,
"Delayed labels").

A record without ``y`` is predicted when it arrives and then waits in :class:`HeldRecords`
until a *label message* with its id comes (``{"id": ..., "y": ...}``, no ``x``; a later full
record with the same id and a label counts as one too). The pair is learned at the label's
position in the stream, once. The store is bounded three ways, each settable:

* ``max_records`` (default 10,000): a record held beyond the cap expires, oldest first;
* ``max_messages`` (default 1,000,000): a record expires once that many messages arrived after
  it (every message counts, whatever its content: a public count);
* ``max_seconds`` (default none): a record expires once it waited that long (wall clock).

An expired record is dropped, never learned (a model's schedules advance on message counts, and
learning it at its expiry would add a step that depends on which labels came). Every outcome has
a curator-only counter in the runner: ``held`` (records put on hold), ``labels_joined``,
``held_expired``, and for a label without a held record ``labels_unknown`` (no record with the
id was held, or it was evicted from the runner's id memory), ``labels_expired`` (its record
expired) and ``labels_repeated`` (its record was already learned with an earlier label).

The held records are curator state: the runner checkpoints them with the model (the data-only
format), and nothing about them is published but the public message counts.

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

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

__all__ = ["HeldRecords", "Held", "LABEL_COUNTERS", "DEFAULT_MAX_HELD",
           "DEFAULT_MAX_HELD_MESSAGES"]

#: records held at most (``serve --max-held``)
DEFAULT_MAX_HELD = 10_000
#: messages after which a held record expires (``serve --held-messages``)
DEFAULT_MAX_HELD_MESSAGES = 1_000_000
#: the runner's counters of the join (curator-only: they depend on the records' content)
LABEL_COUNTERS = ("held", "labels_joined", "held_expired", "labels_unknown", "labels_expired",
                  "labels_repeated")


class Held(NamedTuple):
    """One held record: its validated features (a dict, or the ``(numeric, codes)`` row of a
    validated batch: :func:`~dpstream.stream.messages.compact_features`), public flag, where it arrived (partition,
    offset), the message count and wall time at its arrival, and the prediction made then
    (scored against the label when it comes; ``None`` when nothing predicted)."""

    x: Any
    public: bool = False
    partition: str = ""
    offset: int = -1
    seen: int = 0
    wall: float = 0.0
    prediction: Any = None


class HeldRecords:
    """Records waiting for their labels, oldest first, bounded by count and age (module
    docstring).

    Parameters
    ----------
    max_records
        Records held at most (>= 1); the oldest expires when a new one would exceed it.
    max_messages
        A record expires once this many messages arrived after it (``None``: never).
    max_seconds
        A record expires once it waited this long (``None``: never).
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
        return out

    def drop_partitions(self, partitions: set[str]) -> list[tuple[tuple, Held]]:
        """Remove and return the records that arrived on ``partitions`` (a member that lost
        them: their labels go to the new owner, which reads the records again)."""
        gone = [k for k, e in self._held.items() if e.partition in partitions]
        return [(k, self._held.pop(k)) for k in gone]

    # ------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """Data-only state for the checkpoint: the bounds and one row per held record."""
        return {"max_records": self.max_records, "max_messages": self.max_messages,
                "max_seconds": self.max_seconds,
                "held": [[k[0], k[1], e.x if isinstance(e.x, dict) else list(e.x), e.public, e.partition, e.offset, e.seen, e.wall,
                          e.prediction] for k, e in self._held.items()]}

    @classmethod
    def from_state(cls, state: dict | None, **bounds: Any) -> HeldRecords:
        """The store saved in ``state`` (``None``: an empty one), with ``bounds`` (the
        constructor's keywords) overriding the saved ones: a restart may change them."""
        state = state or {}
        kwargs = {k: state[k] for k in ("max_records", "max_messages", "max_seconds")
                  if k in state}
        kwargs.update(bounds)
        out = cls(**kwargs)
        for kind, value, x, public, partition, offset, seen, wall, pred in state.get("held", []):
            x = dict(x) if isinstance(x, dict) else (np.asarray(x[0], dtype=np.float64),
                                                     np.asarray(x[1], dtype=np.int32))
            out._held[(kind, value)] = Held(x, bool(public), partition, int(offset),
                                            int(seen), float(wall), pred)
        return out
