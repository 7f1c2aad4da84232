"""A stream of Adult records with delayed labels, and an independent oracle of what the runner's
join must make of it (tests of issue 66: tests/test_delayed_labels.py and the service tests).

The oracle re-states docs/service.md's rules in a few lines of plain Python, without the
runner's code: every message counts in ``seen``; a record without ``y`` is held; a held record
expires once more than ``max_messages`` messages arrived after it (checked at each message,
before it is handled) or when holding it would exceed ``max_records`` (the oldest first); a
label (a message without ``x``, or a full record with ``y`` whose id is held) joins its held
record and is learned at its own position (a full record with ``y`` whose id was held, joined
or expired is a label too); a label without a held record is ``repeated`` (its record was
joined before), ``expired`` (its record expired) or ``unknown``.
"""

from __future__ import annotations

import json
import random
from collections import Counter, OrderedDict

from dpstream.stream import load_adult


def delayed_stream(n: int, *, seed: int = 0, immediate: float = 0.3, never: float = 0.1,
                   max_delay: float = 300.0, unknown: int = 5, repeated: int = 5,
                   full_labels: int = 5, bad: int = 5) -> list[bytes]:
    """``n`` records: a share ``immediate`` with their label, a share ``never`` never labeled,
    the rest labeled by a label message up to ``max_delay`` messages later (labels out of
    order); plus ``unknown`` labels for ids never sent, ``repeated`` second labels,
    ``full_labels`` labels sent as a full record again, and ``bad`` malformed label
    messages."""
    rng = random.Random(seed)
    X, y, _ = load_adult("train")
    events: list[tuple[float, int, dict | bytes]] = []
    delayed = []
    for i in range(n):
        r = rng.random()
        if r < immediate:
            events.append((i, 0, {"id": i, "x": X[i], "y": y[i]}))
            continue
        events.append((i, 0, {"id": i, "x": X[i]}))
        if r < 1 - never:
            at = i + rng.uniform(0.5, max_delay)
            delayed.append((i, at))
            if len(delayed) % 97 == 0 and full_labels > 0:   # the label as a full record
                full_labels -= 1
                events.append((at, 1, {"id": i, "x": X[i], "y": y[i]}))
            else:
                events.append((at, 1, {"id": i, "y": y[i]}))
    for k in range(repeated):
        i, at = delayed[(k * 13) % len(delayed)]
        events.append((at + rng.uniform(1, 50), 2, {"id": i, "y": y[i]}))
    for k in range(unknown):
        events.append((rng.uniform(0, n), 3, {"id": f"nobody-{k}", "y": True}))
    bad_kinds = [b'{"y": true}',                                  # no id
                 b'{"id": 3, "y": "maybe"}',                      # not a class
                 b'{"id": 4, "y": true, "public": true}',         # a key a label lacks
                 b'{"id": 5}']                                    # neither x nor y
    for k in range(bad):
        events.append((rng.uniform(0, n), 4, bad_kinds[k % len(bad_kinds)]))
    events.sort(key=lambda e: (e[0], e[1]))
    return [m if isinstance(m, bytes) else json.dumps(m).encode() for _, _, m in events]


def oracle(messages: list[bytes], *, max_messages: int, max_records: int = 10**9) -> dict:
    """The counters the join must end with (module docstring), and ``records_held``."""
    held: OrderedDict = OrderedDict()
    joined, expired = set(), set()
    c = Counter()
    for seen, raw in enumerate(messages, start=1):
        while held and next(iter(held.values())) < seen - max_messages:
            expired.add(held.popitem(last=False)[0])
            c["held_expired"] += 1
        try:
            d = json.loads(raw)
        except ValueError:
            d = None
        if not isinstance(d, dict):
            c["dead_letters"] += 1
            continue
        if "x" not in d:
            if "id" not in d or d.get("y") not in (True, False) or set(d) - {"id", "y"}:
                c["dead_letters"] += 1
                continue
        key = d["id"]
        if "x" not in d or (d.get("y") is not None
                            and (key in held or key in joined or key in expired)):
            if key in held:
                del held[key]
                joined.add(key)
                c["labels_joined"] += 1
                c["learned"] += 1
            else:
                c["labels_repeated" if key in joined else
                  "labels_expired" if key in expired else "labels_unknown"] += 1
        elif d.get("y") is None:
            held[key] = seen
            c["held"] += 1
            c["unlabeled"] += 1
            if len(held) > max_records:
                expired.add(held.popitem(last=False)[0])
                c["held_expired"] += 1
        else:
            c["learned"] += 1
    out = dict(c)
    out["seen"] = len(messages)
    out["records_held"] = len(held)
    return out
