"""A poll's messages validated at once, into columns: the stream service's batched record path.

:func:`validate_many` gives every message of a batch exactly the outcome
:meth:`RecordValidator.validate <dpstream.stream.messages.RecordValidator.validate>` gives it
alone — the same :class:`~dpstream.stream.messages.ValidRecord` (id, label, public flag,
clipped count) or the same :class:`~dpstream.stream.messages.RejectedRecord` reason — but does
the common case column by column:

* each message is parsed once by the C parser (orjson) and its envelope checked with a few
  type tests: a JSON object of ``id`` (an int, or an ASCII string, within the id limit), ``x``
  (an object), ``y`` and ``public`` (a bool), no longer than the message limit;
* the feature values are transposed to one column per declared feature (one C-level call per
  record when it carries every feature under its declared name); a numeric column becomes one
  float64 array, checked, clipped to the public domain and counted with numpy; a categorical
  column (text categories) becomes category codes through one dictionary;
* labels go through one dictionary of the declared classes (or one array for a numeric
  target).

A message that any of these tests does not clear — unusual JSON (NaN, huge integers, nesting),
an unknown or differently spelled feature, a wrong type, an undeclared category, a missing
required feature, an out-of-domain value under ``on_out_of_domain="error"`` — goes to the
record-by-record validator, which decides it and words the reason as it always has;
``tests/test_batches.py`` checks the two paths agree on generated messages.

The features of the batch stay in columns (:class:`ValidBatch`: ``numeric`` values, NaN when
missing, and ``codes`` of categories, -1 when missing, in the layout of
:meth:`RecordEncoder.compact <dpstream.models.encoding.RecordEncoder.compact>`), so the
runner lays them out for the model once (``RecordEncoder.expand``) and hands the rows to
``predict_many`` and ``learn_stream``; the :class:`ValidRecord` of a message decided here
carries ``x=None``.

Examples
--------
>>> from dpstream.stream.messages import RecordValidator
>>> v = RecordValidator({"features": {"age": {"type": "numeric", "min": 17, "max": 90},
...                                   "sex": {"type": "categorical", "values": ["F", "M"]}},
...                      "target": {"type": "binary", "values": [False, True]}})
>>> b = v.validate_many([b'{"id": 1, "x": {"age": 95, "sex": "M"}, "y": true}',
...                      b'{"id": 2, "x": {"age": 40, "sex": "X"}, "y": false}',
...                      b'{"id": 3, "x": {"sex": "F"}}'])
>>> b.records[0]
ValidRecord(id=1, x=None, y=True, public=False, clipped=1)
>>> b.records[1].reason, b.records[2].labeled
("x.sex: 'X' is not one of the declared categories", False)
>>> b.numeric[[0, 2]].tolist(), b.codes[[0, 2]].tolist()
([[90.0], [nan]], [[1], [0]])
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..models.schema import CategoricalFeature, NumericFeature
from .messages import RejectedRecord, ValidRecord, _fast_loads, _FastError

__all__ = ["ValidBatch", "validate_many"]

_ABSENT = object()
_BIG = 2.0 ** 63   # a float this large may have been an integer beyond 64 bits (messages.py)
_ENVELOPE = frozenset({"id", "x", "y", "public"})
_NUMBER_TYPES = frozenset({float, int, type(None)})


class ValidBatch(NamedTuple):
    """:func:`validate_many`'s result: per message a :class:`ValidRecord` or the
    :class:`RejectedRecord` it raised, and the valid records' features in columns (rows of
    rejected messages hold NaN / -1)."""

    records: list
    numeric: np.ndarray   # (n, numeric features) float64, NaN = missing
    codes: np.ndarray     # (n, categorical features) int32 category codes, -1 = missing


class _Plan:
    """What :func:`validate_many` needs of a validator's schema, built once per validator."""

    def __init__(self, validator: Any):
        schema = validator.schema
        self.names = list(schema.features)
        self.name_set = frozenset(self.names)
        self.getter = operator.itemgetter(*self.names) if self.names else None
        self.numeric = [(j, n, f.min, f.max) for j, (n, f) in enumerate(schema.features.items())
                        if isinstance(f, NumericFeature)]
        self.categorical = []   # (position in names, text value -> code)
        for j, (name, f) in enumerate(schema.features.items()):
            if isinstance(f, CategoricalFeature):
                text = {v: c for c, v in enumerate(f.values) if type(v) is str}
                text[None] = -1   # missing
                self.categorical.append((j, name, text, list(f.values)))
        self.required = [j for j, (_, f) in enumerate(schema.features.items()) if f.required]
        target = schema.target
        self.classes = None if target.values is None else _class_lookup(target.values)
        self.target_range = (target.min, target.max)
        self.id_limit = 10 ** min(validator.max_id_bytes, 19)   # |id| < limit: digits fit
        self.max_id_chars = validator.max_id_bytes               # ASCII: one byte a char


def _class_lookup(values: list) -> dict:
    """``(type, label) -> declared class`` for the labels ``_label`` maps without a doubt."""
    out: dict = {}
    for c in values:
        if isinstance(c, bool):
            out[(bool, c)] = c
        elif isinstance(c, (int, float)):
            out[(type(c), c)] = c
            if float(c) == c:
                out[(float, float(c))] = c
            if isinstance(c, float) and c.is_integer() and abs(c) < 2 ** 53:
                out[(int, int(c))] = c
        elif type(c) is str:
            out[(str, c)] = c
    if len(values) == 2 and all(isinstance(c, bool) for c in values):
        for v in (0, 1):   # river's 0 / 1 for a [false, true] target
            out[(int, v)] = out[(float, float(v))] = v == 1
    return out


def validate_many(validator: Any, values: Sequence, slow: Callable[[int], ValidRecord]
                  | None = None) -> ValidBatch:
    """Validate ``values`` (raw messages) as ``validator.validate`` would one by one; see the
    module docstring. ``slow(i)`` decides message ``i`` when the column path does not (it
    returns a :class:`ValidRecord` or raises :class:`RejectedRecord`); by default
    ``validator.validate(values[i])``."""
    plan = validator.__dict__.get("_batch_plan")
    if plan is None:
        plan = validator._batch_plan = _Plan(validator)
    n = len(values)
    records: list = [None] * n
    numeric = np.full((n, len(plan.numeric)), np.nan)
    codes = np.full((n, len(plan.categorical)), -1, dtype=np.int32)
    take, xs, ids, ys, pubs = _envelopes(validator, plan, values)
    out_slow = set() if len(take) == n else set(range(n)) - set(take)
    if take:
        ok, clipped, label_clipped, y_out = _columns(validator, plan, take, xs, ys, numeric,
                                                     codes)
        made = list(map(ValidRecord, ids, itertools.repeat(None, len(take)), y_out, pubs,
                        (clipped + label_clipped).tolist()))
        if len(take) == n and ok.all():   # the usual batch: every message decided here
            records = made
        else:
            for k in np.flatnonzero(ok).tolist():
                records[take[k]] = made[k]
            out_slow.update(take[k] for k in np.flatnonzero(~ok).tolist())
    decide = slow if slow is not None else (lambda i: validator.validate(values[i]))
    for i in sorted(out_slow):
        try:
            record = decide(i)
        except RejectedRecord as exc:
            records[i] = exc
            continue
        records[i] = record
        if record.x is not None:
            _compact_row(plan, record.x, numeric[i], codes[i])
    return ValidBatch(records, numeric, codes)


def _envelopes(validator: Any, plan: _Plan, values: Sequence) -> tuple:
    """The messages whose envelope clears the fast tests: their positions, ``x`` dicts, ids,
    labels and public flags."""
    whole = _whole_batch(validator, plan, values)
    if whole is not None:
        return whole
    take, xs, ids, ys, pubs = [], [], [], [], []
    loads, envelope, max_bytes = _fast_loads, _ENVELOPE, validator.max_message_bytes
    id_limit, id_chars = plan.id_limit, plan.max_id_chars
    for i, raw in enumerate(values):
        if type(raw) is not bytes or len(raw) > max_bytes:
            continue
        try:
            d = loads(raw)
        except _FastError:
            continue
        if type(d) is not dict or not d.keys() <= envelope:
            continue
        x, rid, pub = d.get("x"), d.get("id"), d.get("public", False)
        kind = type(rid)
        if type(x) is not dict or type(pub) is not bool or not (
                (kind is int and -id_limit < rid < id_limit)
                or (kind is str and len(rid) <= id_chars and rid.isascii())):
            continue
        take.append(i)
        xs.append(x)
        ids.append(rid)
        ys.append(d.get("y"))
        pubs.append(pub)
    return take, xs, ids, ys, pubs


def _whole_batch(validator: Any, plan: _Plan, values: Sequence) -> tuple | None:
    """:func:`_envelopes` of a batch whose every envelope clears the tests, with C-level
    passes over the batch instead of a Python loop per message; ``None`` when any message
    needs a closer look (then the loop finds which)."""
    n = len(values)
    if not n or set(map(type, values)) != {bytes} or max(map(len, values)) > \
            validator.max_message_bytes:
        return None
    try:
        ds = list(map(_fast_loads, values))
    except _FastError:
        return None
    if set(map(type, ds)) != {dict} or not all(map(_ENVELOPE.issuperset, ds)):
        return None
    get = dict.get
    xs = list(map(get, ds, itertools.repeat("x", n)))
    ids = list(map(get, ds, itertools.repeat("id", n)))
    pubs = list(map(get, ds, itertools.repeat("public", n), itertools.repeat(False, n)))
    if set(map(type, xs)) != {dict} or not set(map(type, pubs)) <= {bool}:
        return None
    kinds = set(map(type, ids))
    if kinds == {int}:
        try:
            ints = np.fromiter(ids, dtype=np.int64, count=n)
        except OverflowError:
            return None
        if not (np.abs(ints) < plan.id_limit).all() or (ints == np.iinfo(np.int64).min).any():
            return None
    elif kinds == {str}:
        if max(map(len, ids)) > plan.max_id_chars or not all(map(str.isascii, ids)):
            return None
    else:
        return None
    return list(range(n)), xs, ids, list(map(get, ds, itertools.repeat("y", n))), pubs


def _transpose(plan: _Plan, xs: list, ok: np.ndarray) -> list:
    """One list per declared feature (``None`` where absent); a record with a key that is not
    a declared name as declared is marked not ``ok``."""
    m, width = len(xs), len(plan.names)
    if not width:
        for k, x in enumerate(xs):
            ok[k] = not x
        return []
    if set(map(len, xs)) == {width}:
        try:   # the usual case: every record carries every feature under its name
            rows = list(map(plan.getter, xs))
        except KeyError:
            rows = None
        if rows is not None:
            return [list(col) for col in zip(*rows, strict=True)] if width > 1 else [rows]
    names, name_set = plan.names, plan.name_set
    cols = [[None] * m for _ in names]
    for k, x in enumerate(xs):
        if len(x) == width and x.keys() == name_set or x.keys() <= name_set:
            for j, name in enumerate(names):
                cols[j][k] = x.get(name)
        else:
            ok[k] = False
    return cols


def _columns(validator: Any, plan: _Plan, take: list, xs: list, ys: list, numeric: np.ndarray,
             codes: np.ndarray) -> tuple:
    """Fill ``numeric`` / ``codes`` rows of ``take`` from the columns; which records cleared
    every test, their clipped counts, label clips and labels."""
    m = len(take)
    ok = np.ones(m, dtype=bool)
    cols = _transpose(plan, xs, ok)
    clipped = np.zeros(m, dtype=np.int64)   # per record: values clipped
    rows = np.asarray(take, dtype=np.intp)
    clip = validator.on_out_of_domain == "clip"
    for c, (j, _name, lo, hi) in enumerate(plan.numeric):
        col = cols[j]
        if not set(map(type, col)) <= _NUMBER_TYPES:
            for k, v in enumerate(col):
                if type(v) not in _NUMBER_TYPES:
                    ok[k], col[k] = False, None
            col = list(col)
        try:
            arr = np.array(col, dtype=np.float64)
        except OverflowError:   # an integer beyond a float: the record path names it
            arr = np.array([v if v is None or abs(v) < _BIG else None for v in col],
                           dtype=np.float64)
            ok &= np.array([v is None or abs(v) < _BIG for v in col])
        with np.errstate(invalid="ignore"):
            ok &= ~(np.abs(arr) >= _BIG)
            out = (arr < lo) | (arr > hi)
        if out.any():
            if clip:
                arr = np.clip(arr, lo, hi)
                clipped += out
            else:
                ok &= ~out
        numeric[rows, c] = arr
    for c, (j, _name, text, _values) in enumerate(plan.categorical):
        col = cols[j]
        try:   # (text holds None -> -1: missing)
            code = np.fromiter(map(text.get, col, itertools.repeat(-2, m)), dtype=np.int32,
                               count=m)
        except TypeError:   # an unhashable value
            code = np.array([_code(text, v) for v in col], dtype=np.int32)
        ok &= code != -2
        codes[rows, c] = np.maximum(code, -1)
    for j in plan.required:
        ok &= np.fromiter(map(operator.is_not, cols[j], itertools.repeat(None, m)), dtype=bool,
                          count=m)
    labels, label_clipped = _labels(validator, plan, ys, ok)
    return ok, clipped, label_clipped, labels


def _code(text: dict, value: Any) -> int:
    try:
        return text.get(value, -2)
    except TypeError:
        return -2


def _labels(validator: Any, plan: _Plan, ys: list, ok: np.ndarray) -> tuple[list, np.ndarray]:
    """The declared label of each record and whether it was clipped; a label the lookup
    cannot place marks its record not ``ok`` (the record path decides it)."""
    m = len(ys)
    if plan.classes is not None:
        lookup, out = plan.classes, [None] * m
        for k, v in enumerate(ys):
            if v is None:
                continue
            try:
                declared = lookup.get((type(v), v), _ABSENT)
            except TypeError:
                declared = _ABSENT
            if declared is _ABSENT:
                ok[k] = False
            else:
                out[k] = declared
        return out, np.zeros(m, dtype=np.int64)
    lo, hi = plan.target_range
    out, clip_flags = list(ys), [0] * m
    error = validator.on_out_of_domain != "clip"
    for k, v in enumerate(ys):
        if v is None:
            continue
        kind = type(v)
        if (kind is not float and kind is not int) or not -_BIG < v < _BIG:
            ok[k] = False
            continue
        v = float(v)
        if v < lo or v > hi:
            if error:
                ok[k] = False
                continue
            v, clip_flags[k] = min(max(v, lo), hi), 1
        out[k] = v
    return out, np.array(clip_flags, dtype=np.int64)


def _compact_row(plan: _Plan, x: dict, numeric: np.ndarray, codes: np.ndarray) -> None:
    """A validated record's features (as :meth:`RecordValidator.validate` gives them, under
    their declared names) written into one row of the batch's columns."""
    for c, (_j, name, _lo, _hi) in enumerate(plan.numeric):
        v = x.get(name)
        numeric[c] = np.nan if v is None else v
    for c, (_j, name, _text, values) in enumerate(plan.categorical):
        v = x.get(name, _ABSENT)
        codes[c] = -1
        if v is not _ABSENT and v is not None:
            for code, declared in enumerate(values):
                if declared is v or (declared == v
                                     and isinstance(declared, bool) == isinstance(v, bool)):
                    codes[c] = code
                    break
