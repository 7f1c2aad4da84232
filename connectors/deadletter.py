"""Dead-letter reasons grouped and counted: what a replay's summary lists as its top reasons.

:func:`reason_group` drops the offending value and its position from a reason, so the records
rejected for the same cause count together; :class:`ReasonTally` counts the groups. The counts
are exact functions of the data's content: curator-only. See
docs/connectors.md#dead-letter-reasons.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["reason_group", "ReasonTally"]

#: (pattern, replacement) applied in order by :func:`reason_group`
_GROUPS = [
    (re.compile(r"^([^:]+): .* is not one of the declared (\w+)$", re.S),
     r"\1: not one of the declared \2"),
    (re.compile(r"^([^:]+): expected (a number|a string or an integer), got (\w+) .*$", re.S),
     r"\1: expected \2, got \3"),
    (re.compile(r"^([^:]+): .* is not a finite number$", re.S), r"\1: not a finite number"),
    (re.compile(r"^([^:]+): (value|label) .* is outside (the public .*)$", re.S),
     r"\1: \2 outside \3"),
    (re.compile(r"^(message|id): \d+ (bytes|digits), longer than"), r"\1: longer than"),
    (re.compile(r"^line has \d+ fields, the header (\d+)$"),
     r"line has a wrong number of fields (the header has \1)"),
    (re.compile(r" at (char|byte) \d+$"), ""),
]
#: distinct groups a tally keeps; later new ones count as :data:`OTHER`
MAX_GROUPS = 1000
OTHER = "(other reasons)"


def reason_group(reason: str) -> str:
    """``reason`` without the offending value or its position in the message.

    Examples
    --------
    >>> reason_group("x.sex: 'Robot' is not one of the declared categories")
    'x.sex: not one of the declared categories'
    >>> reason_group("unparsable JSON: Expecting value at char 17")
    'unparsable JSON: Expecting value'
    >>> reason_group("x.colour: unknown feature (not declared in the schema)")
    'x.colour: unknown feature (not declared in the schema)'
    """
    for pattern, repl in _GROUPS:
        reason = pattern.sub(repl, reason)
    return reason


class ReasonTally:
    """A dead-letter sink that counts each reason's group, then passes the dead letter on.

    Parameters
    ----------
    sink
        The sink written to (``send`` / ``flush`` / ``close``), or ``None`` to count only.

    Examples
    --------
    >>> tally = ReasonTally(None)
    >>> for reason in ["x.age: expected a number, got str 'old'",
    ...                "x.age: expected a number, got str 'young'",
    ...                "line has 2 fields, the header 3"]:
    ...     tally.send(b"", reason, {})
    >>> for entry in tally.top():
    ...     print(entry["count"], entry["reason"])
    2 x.age: expected a number, got str
    1 line has a wrong number of fields (the header has 3)
    """

    def __init__(self, sink: Any):
        self.sink = sink
        self.counts: dict[str, int] = {}

    def send(self, raw: bytes, reason: str, position: dict, key: bytes | None = None) -> None:
        group = reason_group(reason)
        if group not in self.counts and len(self.counts) >= MAX_GROUPS:
            group = OTHER
        self.counts[group] = self.counts.get(group, 0) + 1
        if self.sink is not None:
            self.sink.send(raw, reason, position, key=key)

    def flush(self) -> None:
        if self.sink is not None:
            self.sink.flush()

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()

    def top(self, n: int = 5) -> list[dict]:
        """The ``n`` most frequent groups, ``{"reason", "count"}`` each, most frequent first."""
        ranked = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
        return [{"reason": reason, "count": count} for reason, count in ranked]
