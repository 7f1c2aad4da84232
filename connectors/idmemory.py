"""A runner's memory of recent record ids: redelivered duplicates are caught, and a checkpoint
of the memory is cheap.

:class:`IdMemory` keeps the newest ``size`` keys ``(type name, id)`` in arrival order and saves
them as a few arrays instead of a list of tuples. Design and cost:
docs/connectors.md#the-record-id-memory.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["IdMemory", "saved_keys"]

_INT, _STR, _BIG = 0, 1, 2   # (an int id beyond 64 bits is kept as its decimal string)
_INT64 = 2 ** 63
_DECIMAL = re.compile(r"-?[0-9]+")


class IdMemory:
    """The newest ``size`` record keys, oldest first (docs/connectors.md#the-record-id-memory).

    A key is ``(type name, id)``: ``("int", 7)`` and ``("str", "7")`` differ.

    Examples
    --------
    >>> ids = IdMemory(3)
    >>> for key in [("int", 1), ("str", "a"), ("int", 2), ("int", 3)]:
    ...     ids.add(key)
    >>> list(ids), ("int", 1) in ids, len(ids)
    ([('str', 'a'), ('int', 2), ('int', 3)], False, 3)
    >>> ids.drop_newest(1)
    >>> back = IdMemory.from_state(ids.state(), 3)
    >>> list(back), back.state()["strs"]
    ([('str', 'a'), ('int', 2)], ['a'])
    >>> list(IdMemory.from_state([("int", 5), ("str", "b")], 10))   # an older checkpoint's list
    [('int', 5), ('str', 'b')]
    >>> big = IdMemory(2); big.add(("int", 10 ** 30)); big.state()["strs"]
    ['1000000000000000000000000000000']
    >>> list(IdMemory.from_state(big.state(), 2)) == [("int", 10 ** 30)]
    True
    """

    def __init__(self, size: int):
        if type(size) is not int or size < 1:
            raise ValueError(f"size must be an int >= 1, got {size!r}")
        self.size = size
        self._seen: OrderedDict = OrderedDict()
        self._kind: list[int] = [_INT] * size   # the ring: a kind and a value per slot
        self._val: list[int | str | None] = [None] * size
        self._head = 0      # slot of the oldest key
        self._count = 0
        self._others = 0    # keys kept that are not 64-bit int ids

    def __contains__(self, key: tuple) -> bool:
        return key in self._seen

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._seen)

    def add(self, key: tuple) -> None:
        """Remember ``key`` (``("int", n)`` or ``("str", s)``) as the newest; the oldest
        goes when more than ``size`` are kept."""
        seen = self._seen
        if key in seen:
            return
        kind, value = key
        if kind == "int" and type(value) is int:
            code = _INT
            if not -_INT64 <= value < _INT64:
                code, value = _BIG, str(value)
        elif kind == "str" and type(value) is str:
            code = _STR
        else:
            raise ValueError(f"a record key is ('int', int) or ('str', str), got {key!r}")
        if self._count == self.size:   # the newest takes the oldest's slot
            seen.popitem(last=False)
            slot = self._head
            self._head = slot + 1 if slot + 1 < self.size else 0
            self._others -= self._kind[slot] != _INT
        else:
            slot = self._head + self._count
            if slot >= self.size:
                slot -= self.size
            self._count += 1
        self._kind[slot] = code
        self._val[slot] = value
        self._others += code != _INT
        seen[key] = None

    def drop_newest(self, n: int) -> None:
        """Forget the ``n`` newest keys (records a member discarded after a crash)."""
        for _ in range(min(n, self._count)):
            self._seen.popitem(last=True)
            self._count -= 1
            slot = (self._head + self._count) % self.size
            self._others -= self._kind[slot] != _INT
            self._kind[slot], self._val[slot] = _INT, None

    def _ordered(self, ring: list) -> list:
        h, c = self._head, self._count
        return ring[h:h + c] if h + c <= self.size else ring[h:] + ring[:h + c - self.size]

    def state(self) -> dict[str, Any]:
        """The keys, oldest first, as a checkpoint stores them: ``kinds`` (0 an int id, 1 a
        string id, 2 an int id beyond 64 bits), ``ints`` (the int ids, in order) and
        ``strs`` (the other ids as strings, in order)."""
        values = self._ordered(self._val)
        if not self._others:   # only int ids (the common case): one conversion
            return {"kinds": np.zeros(self._count, dtype=np.int8),
                    "ints": np.fromiter(values, dtype=np.int64, count=self._count),
                    "strs": []}
        kinds = self._ordered(self._kind)
        return {"kinds": np.array(kinds, dtype=np.int8),
                "ints": np.array([v for k, v in zip(kinds, values, strict=True) if k == _INT],
                                 dtype=np.int64),
                "strs": [v for k, v in zip(kinds, values, strict=True) if k != _INT]}

    @classmethod
    def from_state(cls, state: Any, size: int) -> IdMemory:
        """The memory :meth:`state` saved (or an older checkpoint's list of keys), keeping its
        newest ``size`` keys."""
        out = cls(size)
        for key in saved_keys(state):
            out.add(key)
        return out


def saved_keys(state: Any) -> Iterator[tuple]:
    """The keys of a saved memory (:meth:`IdMemory.state`, as a checkpoint's ``"ids"``
    holds it), oldest first; a list of keys (checkpoints before :class:`IdMemory`) as it is.
    A malformed one raises ``ValueError``."""
    if not isinstance(state, dict):
        for key in state:
            yield tuple(key)
        return
    kinds = np.asarray(state["kinds"])
    ints, strs = np.asarray(state["ints"]), state["strs"]
    if kinds.ndim != 1 or ints.ndim != 1 or ints.dtype != np.int64 or type(strs) is not list \
            or set(map(type, strs)) - {str} or not np.isin(kinds, (_INT, _STR, _BIG)).all() \
            or int((kinds == _INT).sum()) != ints.size or len(strs) != kinds.size - ints.size:
        raise ValueError("a saved id memory: one kind per key, an int per int key and a "
                         "string per other key")
    it, st = iter(ints.tolist()), iter(strs)
    for k in kinds.tolist():
        if k == _INT:
            yield ("int", next(it))
        elif k == _STR:
            yield ("str", next(st))
        else:
            digits = next(st)
            if not _DECIMAL.fullmatch(digits):
                raise ValueError(f"a saved id memory: {digits[:40]!r} is not an integer")
            yield ("int", int(digits))
