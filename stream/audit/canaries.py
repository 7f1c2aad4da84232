"""The audited stream: background records, canaries, their coins and their slots
(how a run goes: docs/privacy.md#auditing).

Background records come from the schema's public domains with a public rule's label
(:func:`synthetic_records`) or from the curator's data (:func:`source_records`); canaries
(:func:`design_canaries`) sit at extreme points, mislabelled; each is included by a fair coin
(:func:`coin_flips`), and an excluded one leaves a dead letter in its slot, so every public
schedule is the same either way. How the stream is built: docs/audit.md#the-audited-stream.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ...accounting import noise
from ...models.schema import Schema, coerce_schema

__all__ = ["SYNTHETIC_SCHEMA", "AuditStream", "resolve_schema", "rule_signal", "rule_label",
           "synthetic_records", "source_records", "design_canaries", "orthant_labels", "coin_flips",
           "place_canaries", "build_stream", "write_stream", "BLANK"]

#: the audit's synthetic schema (``--schema synthetic``): six numeric features on [0, 100],
#: three categorical features of four values, a binary target
SYNTHETIC_SCHEMA = coerce_schema({
    "features": {**{f"x{i}": {"type": "numeric", "min": 0, "max": 100} for i in range(6)},
                 **{f"c{i}": {"type": "categorical", "values": ["a", "b", "c", "d"]}
                    for i in range(3)}},
    "target": {"type": "binary", "values": [False, True]}})

#: share of synthetic background labels flipped at random (the rule is not a lookup table)
LABEL_NOISE = 0.1
#: a canary is taken only where the rule's signal is at least this strong (its flipped label
#: then contradicts a clear majority of its neighbourhood)
MIN_SIGNAL = 0.25
#: what an excluded canary's slot holds: a message the runner rejects (a dead letter)
BLANK = {"x": None, "y": None}


def resolve_schema(schema: Schema | dict | str) -> Schema:
    """A Schema, its dict, a schema file, or a bundled name: ``synthetic`` (the audit's own),
    ``adult``, ``abalone``."""
    if isinstance(schema, str) and schema in ("synthetic", "adult", "abalone"):
        if schema == "synthetic":
            return SYNTHETIC_SCHEMA
        from ..datasets import ABALONE_SCHEMA, ADULT_SCHEMA
        return coerce_schema(ADULT_SCHEMA if schema == "adult" else ABALONE_SCHEMA)
    return coerce_schema(schema)


def rule_signal(schema: Schema, X: Sequence[dict]) -> np.ndarray:
    """The public rule's signal in ``[-1, 1]``: the mean over features of each value's
    position in its domain (a numeric value scaled to ``[-1, 1]``, the ``j``-th of ``k``
    categories ``2 j / (k - 1) - 1``)."""
    total = np.zeros(len(X))
    for name, feat in schema.features.items():
        if feat.type == "numeric":
            lo, hi = float(feat.min), float(feat.max)
            col = np.array([float(x[name]) for x in X])
            total += 2.0 * (col - lo) / (hi - lo) - 1.0 if hi > lo else 0.0
        else:
            k = len(feat.values)
            pos = {v: j for j, v in enumerate(feat.values)}
            total += np.array([2.0 * pos[x[name]] / (k - 1) - 1.0 if k > 1 else 0.0
                               for x in X])
    return total / max(1, len(schema.features))


def _label_of(schema: Schema, s: float) -> Any:
    t = schema.target
    if t.type == "numeric":
        return float(t.min) + (s + 1.0) / 2.0 * (float(t.max) - float(t.min))
    k = len(t.values)
    return t.values[min(k - 1, int((s + 1.0) / 2.0 * k))]


def rule_label(schema: Schema, x: dict) -> Any:
    """The label the public rule gives ``x`` (without noise)."""
    return _label_of(schema, float(rule_signal(schema, [x])[0]))


def _flip(schema: Schema, s: float) -> Any:
    """The label farthest from the rule's at signal ``s``."""
    t = schema.target
    if t.type == "numeric":
        return float(t.min) if s > 0 else float(t.max)
    return _label_of(schema, -1.0 if s > 0 else 1.0)


def synthetic_records(schema: Schema, n: int, *, seed: Any = None) -> tuple[list[dict], list]:
    """``n`` records drawn from the schema's public domains, labelled by the public rule
    with :data:`LABEL_NOISE` of the labels replaced by a uniform class (or value).

    Examples
    --------
    >>> schema = resolve_schema("synthetic")
    >>> X, y = synthetic_records(schema, 5, seed=0)
    >>> sorted(X[0]) == sorted(schema.features), set(y) <= {False, True}
    (True, True)
    """
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {}
    for name, feat in schema.features.items():
        if feat.type == "numeric":
            lo, hi = float(feat.min), float(feat.max)
            cols[name] = (lo + noise.uniforms(rng, n) * (hi - lo)).tolist()
        else:
            cols[name] = [feat.values[i] for i in noise.choose(rng, len(feat.values), n)]
    X = [{name: cols[name][i] for name in cols} for i in range(n)]
    s = rule_signal(schema, X)
    flip = noise.uniforms(rng, n) < LABEL_NOISE
    other = noise.uniforms(rng, n) * 2.0 - 1.0
    y = [_label_of(schema, float(o if f else v)) for v, f, o in zip(s, flip, other, strict=True)]
    return X, y


def source_records(source: str, schema: Schema, n: int, *, label: str = "y"
                   ) -> tuple[list[dict], list]:
    """The first ``n`` records of a bundled dataset (``adult``, ``abalone``) or a file of
    messages (``.jsonl``, ``{"id", "x", "y"}`` per line) or rows (``.csv`` with a header, the
    label in column ``label``), plain or gzip. Records without a label are skipped."""
    if source in ("adult", "abalone"):
        from ..datasets import load_abalone, load_adult
        X, y, _ = load_adult("all") if source == "adult" else load_abalone()
        return list(X[:n]), list(y[:n])
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"--source {source!r}: not a file, nor adult or abalone")
    opener = gzip.open if path.suffix == ".gz" else open
    kind = path.with_suffix("").suffix if path.suffix == ".gz" else path.suffix
    X, y = [], []
    with opener(path, "rt", encoding="utf-8") as fh:
        if kind == ".csv":
            from ..runner import csv_message
            rows = (csv_message(row, schema, label=label, id_value=i)
                    for i, row in enumerate(csv.DictReader(fh)))
        elif kind == ".jsonl":
            rows = (json.loads(line) for line in fh if line.strip())
        else:
            raise ValueError(f"--source {source!r}: expected .csv or .jsonl (optionally .gz)")
        for msg in rows:
            if len(X) >= n:
                break
            if isinstance(msg, dict) and msg.get("y") is not None and isinstance(msg.get("x"),
                                                                                   dict):
                X.append(msg["x"])
                y.append(msg["y"])
    if not X:
        raise ValueError(f"--source {source!r} holds no labelled record")
    return X, y


def design_canaries(schema: Schema, m: int, *, seed: Any = None,
                    background: tuple[Sequence[dict], Sequence] | None = None
                    ) -> tuple[list[dict], list]:
    """``m`` canaries at distinct extreme points of the public domain: each numeric feature
    at its minimum or maximum, each categorical feature at one of its values, no two alike.

    Synthetic background (``background=None``): points where the rule's signal is at least
    :data:`MIN_SIGNAL` strong, labelled against the rule. A real source's ``background``
    (records, labels): each canary takes the label its *orthant* holds least (the background
    records on the same side of every numeric feature's midpoint: :func:`orthant_labels`).

    Examples
    --------
    >>> schema = resolve_schema("synthetic")
    >>> points, labels = design_canaries(schema, 4, seed=0)
    >>> all(points[0][f] in (0.0, 100.0) for f in ("x0", "x1", "x2", "x3", "x4", "x5"))
    True
    >>> [rule_label(schema, p) != label for p, label in zip(points, labels)]
    [True, True, True, True]
    """
    rng = np.random.default_rng(seed)
    feats = list(schema.features.items())
    sizes = [2 if f.type == "numeric" else len(f.values) for _, f in feats]
    space = math.prod(sizes)
    against = None if background is None else orthant_labels(schema, *background)
    points: list[dict] = []
    out_labels: list = []
    for code in _codes(sizes, space, rng):
        x = {name: ((float(f.max) if c else float(f.min)) if f.type == "numeric"
                    else f.values[c]) for (name, f), c in zip(feats, code, strict=True)}
        if against is not None:
            label = against(x)
        else:
            s = float(rule_signal(schema, [x])[0])
            if abs(s) < MIN_SIGNAL:
                continue
            label = _flip(schema, s)
        points.append(x)
        out_labels.append(label)
        if len(points) == m:
            return points, out_labels
    raise ValueError(f"the schema's extreme points give only {len(points)} distinct canaries"
                     + (f" (of {space}, far enough from the rule's boundary)"
                        if against is None else "") + f": use --canaries {len(points)} or "
                     f"fewer")


#: below this many extreme points they are all listed (in a random order), above it drawn
_LISTED = 1 << 18


def _codes(sizes: list[int], space: int, rng: np.random.Generator):
    """Distinct extreme points as tuples of value indices, in a random order: every one
    of them when there are at most :data:`_LISTED`, else random draws without repeats (a
    run of draws that finds nothing new ends it)."""
    if space <= _LISTED:
        for flat in noise.permutation(rng, space):
            code, rest = [], int(flat)
            for k in sizes:
                code.append(rest % k)
                rest //= k
            yield tuple(code)
        return
    seen: set[tuple] = set()
    misses = 0
    while misses < 10_000:
        code = tuple(int(noise.choose(rng, k)) for k in sizes)
        if code in seen:
            misses += 1
            continue
        misses = 0
        seen.add(code)
        yield code


def orthant_labels(schema: Schema, X: Sequence[dict], y: Sequence, *, least: int = 20
                   ) -> Callable[[dict], Any]:
    """A function of a point: the label its orthant's background records hold least (for a
    numeric target, the end of the target range farther from their mean). An orthant with
    fewer than ``least`` records answers for the whole background."""
    numeric = [n for n, f in schema.features.items() if f.type == "numeric"]
    mids = {n: (float(schema.features[n].min) + float(schema.features[n].max)) / 2.0
            for n in numeric}

    def key(x: dict) -> tuple:
        return tuple(x.get(n) is not None and float(x[n]) > mids[n] for n in numeric)

    groups: dict[tuple, list] = {}
    for x, label in zip(X, y, strict=True):
        groups.setdefault(key(x), []).append(label)
    t = schema.target

    def against(labels: list) -> Any:
        if t.type == "numeric":
            mean = float(np.mean([float(v) for v in labels]))
            return float(t.min) if mean > (float(t.min) + float(t.max)) / 2.0 else float(t.max)
        counts = [sum(1 for v in labels if v == c) for c in t.values]
        return t.values[int(np.argmin(counts))]

    overall = against(list(y))
    return lambda x: (against(groups[key(x)]) if len(groups.get(key(x), ())) >= least
                      else overall)


def coin_flips(m: int, *, seed: Any = None) -> np.ndarray:
    """The secrets: ``m`` fair coins, True for an included canary."""
    return noise.choose(np.random.default_rng(seed), 2, m).astype(bool)


def place_canaries(eligible: np.ndarray, m: int, *, seed: Any = None) -> np.ndarray:
    """``m`` distinct slots drawn uniformly from ``eligible`` (sorted)."""
    eligible = np.asarray(eligible, dtype=np.int64)
    if eligible.size < m:
        raise ValueError(f"only {eligible.size} slots of the stream reach the released model "
                         f"for {m} canaries: raise --records or lower --canaries")
    pick = noise.permutation(np.random.default_rng(seed), eligible.size)[:m]
    return np.sort(eligible[pick])


class AuditStream(NamedTuple):
    """A stream with its canaries: ``messages`` in order (a canary's slot holds the canary
    or :data:`BLANK`), the canaries' ``points``, ``labels``, ``slots`` (message positions)
    and ``secrets`` (True: included)."""
    messages: list[dict]
    points: list[dict]
    labels: list
    slots: np.ndarray
    secrets: np.ndarray


def build_stream(X: Sequence[dict], y: Sequence, points: Sequence[dict], labels: Sequence,
                 slots: np.ndarray, secrets: np.ndarray) -> AuditStream:
    """Interleave background records and canaries: message ``slots[i]`` is canary ``i``
    when ``secrets[i]``, else a blank; the background fills the other slots in order."""
    total = len(X) + len(points)
    slot_of = {int(s): i for i, s in enumerate(slots)}
    messages, b = [], 0
    for k in range(total):
        i = slot_of.get(k)
        if i is None:
            messages.append({"id": f"r{b}", "x": X[b], "y": y[b]})
            b += 1
        elif secrets[i]:
            messages.append({"id": f"canary-{i}", "x": points[i], "y": labels[i]})
        else:
            messages.append({"id": f"canary-{i}", **BLANK})
    return AuditStream(messages, list(points), list(labels), np.asarray(slots),
                       np.asarray(secrets, dtype=bool))


def write_stream(stream: AuditStream, path: str | Path) -> Path:
    """The stream as a JSONL file of service messages (docs/service.md)."""
    path = Path(path)
    buf = io.StringIO()
    for msg in stream.messages:
        buf.write(json.dumps(msg, allow_nan=False))
        buf.write("\n")
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path
