"""A runner's memory of recent record ids: redelivered duplicates are caught, and a checkpoint
of the memory is cheap.

A record's key is ``(type name, id)`` (``("int", 7)`` and ``("str", "7")`` differ). The memory
keeps the newest ``size`` keys in arrival order: an :class:`~collections.OrderedDict` answers
"seen?", and ring arrays beside it hold the same keys in the form a checkpoint stores —
an int64 array of the int ids, the string ids as one list, and a kind per key — so that saving
100,000 ids writes three arrays instead of walking 100,000 tuples (about 80-130 ms on this
project's machine, spent before every window's publication when a member publishes
predictions; docs/benchmark_notes.md).

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
    """The newest ``size`` record keys, oldest first (module docstring)."""

    def __init__(self, size: int):
        if type(size) is not int or size < 1:
            raise ValueError(f"size must be an int >= 1, got {size!r}")
        self.size = size
        self._seen: OrderedDict = OrderedDict()
        self._kind = np.zeros(size, dtype=np.int8)
        self._int = np.zeros(size, dtype=np.int64)
        self._str: list[str | None] = [None] * size
        self._head = 0      # ring slot of the oldest key
        self._count = 0

    def __contains__(self, key: tuple) -> bool:
        return key in self._seen

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._seen)

    def add(self, key: tuple) -> None:
        """Remember ``key`` (``("int", n)`` with a 64-bit ``n``, or ``("str", s)``) as the
        newest; the oldest goes when more than ``size`` are kept."""
        if key in self._seen:
            return
        kind, value = key
        if kind == "int" and type(value) is int:
            code = _INT if -_INT64 <= value < _INT64 else _BIG
        elif kind == "str" and type(value) is str:
            code = _STR
        else:
            raise ValueError(f"a record key is ('int', int) or ('str', str), got {key!r}")
        if self._count == self.size:
            self._seen.popitem(last=False)
            self._str[self._head] = None
            self._head = (self._head + 1) % self.size
            self._count -= 1
        slot = (self._head + self._count) % self.size
        self._kind[slot] = code
        if code == _INT:
            self._int[slot] = value
        else:
            self._str[slot] = value if code == _STR else str(value)
        self._seen[key] = None
        self._count += 1

    def drop_newest(self, n: int) -> None:
        """Forget the ``n`` newest keys (records a member discarded after a crash)."""
        for _ in range(min(n, self._count)):
            self._seen.popitem(last=True)
            self._count -= 1
            self._str[(self._head + self._count) % self.size] = None

    def _order(self) -> np.ndarray:
        return (self._head + np.arange(self._count)) % self.size

    def state(self) -> dict[str, Any]:
        """The keys, oldest first, as a checkpoint stores them: ``kinds`` (0 an int id, 1 a
        string id, 2 an int id beyond 64 bits), ``ints`` (the int ids, in order) and
        ``strs`` (the other ids as strings, in order)."""
        order = self._order()
        kinds = self._kind[order]
        rest = order[kinds != _INT]
        return {"kinds": kinds, "ints": self._int[order[kinds == _INT]],
                "strs": [self._str[i] for i in rest.tolist()] if rest.size else []}

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
