"""The public schema of a stream, the message format and the service's record validation.

:class:`RecordValidator` turns one raw message into a :class:`ValidRecord` (or a
:class:`LabelMessage`) or raises :class:`RejectedRecord` with a reason;
:meth:`RecordValidator.validate_many` decides a poll's messages column by column
(:class:`ValidBatch`) with the same outcomes. The schema classes come from
:mod:`dpstream.models.schema` and are re-exported here.

The input policy (what is clipped, rejected, missing or unlabeled) and the batched path are
explained in docs/stream_internals.md#record-validation.
"""

from __future__ import annotations

import itertools
import json
import math
import numbers
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from ..models.encoding import check_input_policy
from ..models.schema import CategoricalFeature, NumericFeature, Schema, Target, coerce_schema

__all__ = ["NumericFeature", "CategoricalFeature", "Target", "Schema", "coerce_schema",
           "Message", "ValidRecord", "LabelMessage", "ValidBatch", "RejectedRecord",
           "RecordValidator",
           "MAX_ID_BYTES", "MAX_MESSAGE_BYTES", "MAX_REASON_CHARS"]

#: default cap on a record id: UTF-8 bytes of a string id, decimal digits of an integer id
MAX_ID_BYTES = 256
#: default cap on one raw message (bytes as read from the source)
MAX_MESSAGE_BYTES = 1 << 20
#: a rejection reason longer than this is cut (an unknown feature's name may be huge)
MAX_REASON_CHARS = 400


class Message(BaseModel):
    """One stream message: ``{"id": str|int, "x": {feature: value}, "y": label|null,
    "public": bool}`` (``y`` absent = unlabeled, ``public`` absent = a private record)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str | int
    x: dict[str | int, Any]
    y: Any = None
    public: bool = False


class RejectedRecord(ValueError):
    """A message that breaks the schema or the message format; ``reason`` says how (valid
    UTF-8, at most :data:`MAX_REASON_CHARS` characters). ``id`` is the record's id when the
    message got as far as a valid one (the dead-letter key carries it), else ``None``."""

    def __init__(self, reason: str, id: str | int | None = None):
        reason = reason.encode("utf-8", "backslashreplace").decode("utf-8")
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[:MAX_REASON_CHARS - 3] + "..."
        super().__init__(reason)
        self.reason = reason
        self.id = id


class ValidRecord(NamedTuple):
    """A validated record: values inside the public domain, ``clipped`` values counted, and
    ``missing`` the declared features it lacks (absent or null); ``coerced`` is 1 when its
    label is a number read as a boolean class (``0`` / ``1`` for ``false`` / ``true``; a
    CSV label other than ``True`` / ``False``, :func:`~dpstream.stream.runner.csv_message`).

    Immutable; a named tuple because the service builds one per message (a frozen
    dataclass's constructor cost 1.75 µs, this one 0.7 µs on this project's machine)."""

    id: str | int
    x: dict[str | int, Any]
    y: Any
    public: bool
    clipped: int
    missing: int = 0
    coerced: int = 0

    @property
    def labeled(self) -> bool:
        return self.y is not None


class LabelMessage(NamedTuple):
    """A label for a record sent earlier (delayed labels, :mod:`dpstream.stream.labels`):
    ``{"id": ..., "y": ...}`` without ``x``, the label checked as a record's is (``clipped``,
    ``coerced`` as in :class:`ValidRecord`)."""

    id: str | int
    y: Any
    clipped: int = 0
    coerced: int = 0

    #: a label message has no features
    x = None
    #: nor a public flag (the record it labels has its own)
    public = False

    @property
    def labeled(self) -> bool:
        return True


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class RecordValidator:
    """Validate raw messages against a schema.

    The policy (clipped, rejected, missing, unlabeled, label messages, size limits) is in
    docs/stream_internals.md#the-input-policy.

    Parameters
    ----------
    schema
        The stream's public schema (object, dict or file path).
    max_id_bytes
        Longest record id kept: UTF-8 bytes of a string id, decimal digits of an integer id.
    max_message_bytes
        Longest raw message (bytes or text as read from the source) that is decoded at all.
    on_out_of_domain
        ``"clip"`` (default, as the models): an out-of-domain number is clipped and counted;
        ``"error"``: the message is rejected.
    on_unknown
        ``"error"`` (default: the message goes to the dead-letter sink, so a producer's typo
        is seen); ``"ignore"``: the unknown feature is dropped, as the models do by default.

    Examples
    --------
    >>> from dpstream.stream.messages import RecordValidator, RejectedRecord, Schema
    >>> v = RecordValidator({"features": {"age": {"type": "numeric", "min": 17, "max": 90},
    ...                                   "sex": {"type": "categorical", "values": ["F", "M"]}},
    ...                      "target": {"type": "binary", "values": [False, True]}})
    >>> r = v.validate(b'{"id": 7, "x": {"age": 95, "sex": "M"}, "y": true}')
    >>> r.id, r.x, r.y, r.clipped
    (7, {'age': 90.0, 'sex': 'M'}, True, 1)
    >>> r = v.validate(b'{"id": 10, "x": {"sex": null}, "y": 1}')   # 1 for true; both missing
    >>> r.y, r.missing, r.coerced
    (True, 2, 1)
    >>> v.validate(b'{"id": 8, "x": {"age": 40, "sex": "X"}, "y": false}')
    Traceback (most recent call last):
    ...
    dpstream.stream.messages.RejectedRecord: x.sex: 'X' is not one of the declared categories
    >>> v.validate(b'{"id": 9, "x": {"age": 4')
    Traceback (most recent call last):
    ...
    dpstream.stream.messages.RejectedRecord: unparsable JSON: Expecting ',' delimiter at char 24
    >>> v.validate(b'{"id": "' + b"r" * 300 + b'", "x": {}}')
    Traceback (most recent call last):
    ...
    dpstream.stream.messages.RejectedRecord: id: 300 bytes, longer than the 256-byte limit
    >>> b = v.validate_many([b'{"id": 1, "x": {"age": 95, "sex": "M"}, "y": true}',
    ...                      b'{"id": 2, "x": {"age": 40, "sex": "X"}, "y": false}',
    ...                      b'{"id": 3, "x": {"sex": "F"}}'])
    >>> b.records[0]
    ValidRecord(id=1, x=None, y=True, public=False, clipped=1, missing=0, coerced=0)
    >>> b.records[1].reason, b.records[2].labeled
    ("x.sex: 'X' is not one of the declared categories", False)
    >>> b.numeric[[0, 2]].tolist(), b.codes[[0, 2]].tolist()
    ([[90.0], [nan]], [[1], [0]])
    """

    def __init__(self, schema: Schema | Mapping | str, *, max_id_bytes: int = MAX_ID_BYTES,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, on_out_of_domain: str = "clip",
                 on_unknown: str = "error"):
        self.on_out_of_domain, self.on_unknown = check_input_policy(on_out_of_domain,
                                                                    on_unknown)
        if int(max_id_bytes) < 1 or int(max_message_bytes) < 1:
            raise ValueError(f"max_id_bytes and max_message_bytes must be positive, got "
                             f"{max_id_bytes} and {max_message_bytes}")
        self.max_id_bytes = int(max_id_bytes)
        self.max_message_bytes = int(max_message_bytes)
        self.schema = coerce_schema(dict(schema) if isinstance(schema, Mapping) else schema)
        self._required = [n for n, f in self.schema.features.items() if f.required]
        self._width = len(self.schema.features)
        # value -> declared value, per categorical feature (True == 1 is sorted out below)
        self._lookup = {n: {v: v for v in f.values} for n, f in self.schema.features.items()
                        if isinstance(f, CategoricalFeature)}
        # record key (either spelling) -> (name, numeric?, min, max, lookup, spec): one dict
        # lookup per value instead of pydantic attribute access on the hot path
        self._plan: dict = {}
        for name, spec in self.schema.features.items():
            entry = ((name, True, spec.min, spec.max, None, spec)
                     if isinstance(spec, NumericFeature)
                     else (name, False, None, None, self._lookup[name], spec))
            for key in (name, self.schema.resolve_other(name)):
                if key is not None:
                    self._plan[key] = entry

    def validate(self, raw: bytes | str | Mapping) -> ValidRecord:
        """One message -> :class:`ValidRecord`, or :class:`RejectedRecord` with the reason."""
        if isinstance(raw, (bytes, bytearray, memoryview)):
            raw = bytes(raw)
            self._check_size(len(raw))
            fast = _fast_decode(raw)
            if fast is not None:
                raw = fast
            else:
                try:
                    raw = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise RejectedRecord(f"not UTF-8 text: {exc.reason} at byte "
                                         f"{exc.start}") from None
        elif isinstance(raw, str):
            if len(raw) > self.max_message_bytes // 4:
                self._check_size(len(raw.encode("utf-8", "surrogatepass")))
            fast = _fast_decode(raw)
            if fast is not None:
                raw = fast
        if isinstance(raw, str):
            try:
                raw = _DECODER.decode(raw)
            except json.JSONDecodeError as exc:
                raise RejectedRecord(f"unparsable JSON: {exc.msg} at char {exc.pos}") from None
            except ValueError as exc:
                raise RejectedRecord(f"unparsable JSON: {exc}") from None
            except RecursionError:
                raise RejectedRecord("unparsable JSON: nested too deeply") from None
        if type(raw) is not dict and not isinstance(raw, Mapping):
            raise RejectedRecord(f"a message is a JSON object, got {type(raw).__name__}")
        record_id = raw.get("id", _ABSENT)
        if record_id is not _ABSENT and (isinstance(record_id, bool)
                                         or not isinstance(record_id, (str, int))):
            raise RejectedRecord(f"id: expected a string or an integer, got "
                                 f"{type(record_id).__name__} {_short(record_id)}")
        if isinstance(record_id, (str, int)):
            self._check_id(record_id)
        features, public = raw.get("x"), raw.get("public", False)
        if "x" not in raw and raw.get("y") is not None:
            return self._label_message(raw, record_id)
        if not (type(raw) is dict and record_id is not _ABSENT and type(features) is dict
                and type(public) is bool and raw.keys() <= _MESSAGE_KEYS
                and set(map(type, features)) <= _FEATURE_KEY_TYPES):
            # anything unusual: pydantic checks the message and words the reason (the common
            # case above is what it would accept, without building a model)
            try:
                msg = Message.model_validate(dict(raw))
            except ValidationError as exc:
                err = exc.errors()[0]
                if err["type"] == "extra_forbidden":
                    raise RejectedRecord(f"message: unknown key {_short(err['loc'][0])} (a "
                                         f"message holds id, x, y and public)") from None
                where = ".".join(str(p) for p in err["loc"]) or "message"
                if where == "x" and err["type"] == "missing":
                    raise RejectedRecord("x: Field required (a record holds x; a label message "
                                         "holds id and a non-null y)", id=raw.get("id")
                                         if isinstance(raw.get("id"), (str, int))
                                         and not isinstance(raw.get("id"), bool)
                                         else None) from None
                raise RejectedRecord(f"{where}: {err['msg']}") from None
            record_id, features, public = msg.id, msg.x, msg.public
        try:
            x, clipped = self._features(features)
            y, label_clipped, coerced = self._label(raw.get("y"))
        except RejectedRecord as exc:
            raise RejectedRecord(exc.reason, id=record_id) from None
        return ValidRecord(id=record_id, x=x, y=y, public=public,
                           clipped=clipped + label_clipped,
                           missing=self._width - len(x),
                           coerced=coerced)

    def _label_message(self, raw: Mapping, record_id: Any) -> LabelMessage:
        """``raw`` without ``x`` and with a label: a label message, or the reason it is not."""
        if record_id is _ABSENT:
            raise RejectedRecord("label message: id is required (a label joins its record by "
                                 "id)")
        extra = sorted(str(k) for k in raw if k not in ("id", "y"))
        if extra:
            raise RejectedRecord(f"label message: unknown key {_short(extra[0])} (a label "
                                 f"message holds id and y)", id=record_id)
        try:
            y, clipped, coerced = self._label(raw["y"])
        except RejectedRecord as exc:
            raise RejectedRecord(exc.reason, id=record_id) from None
        return LabelMessage(record_id, y, clipped, coerced)

    def validate_many(self, values: Sequence, slow: Callable[[int], ValidRecord] | None = None
                      ) -> Any:
        """Many messages at once, with the outcome :meth:`validate` gives each, the common
        case validated column by column (docs/stream_internals.md#batches): a
        :class:`ValidBatch`. ``slow(i)`` decides message ``i`` when the columns do not (it
        returns a :class:`ValidRecord` or raises :class:`RejectedRecord`); by default
        ``self.validate(values[i])``."""
        return _validate_many(self, values, slow)

    def _check_size(self, size: int) -> None:
        if size > self.max_message_bytes:
            raise RejectedRecord(f"message: {size} bytes, longer than the "
                                 f"{self.max_message_bytes}-byte limit")

    def _check_id(self, record_id: str | int) -> None:
        if isinstance(record_id, str):
            try:
                size = len(record_id.encode("utf-8"))
            except UnicodeEncodeError:
                raise RejectedRecord("id: not valid Unicode (a lone surrogate)") from None
            what = "bytes"
        elif record_id.bit_length() > 13_000:   # str() would refuse it (over 4,300 digits)
            raise RejectedRecord(f"id: an integer of more than 3,900 digits, longer than the "
                                 f"{self.max_id_bytes}-digit limit")
        else:
            size, what = len(str(abs(record_id))), "digits"
        if size > self.max_id_bytes:
            raise RejectedRecord(f"id: {size} {what}, longer than the {self.max_id_bytes}-"
                                 f"{what[:-1]} limit")

    def _features(self, x: dict) -> tuple[dict, int]:
        out: dict[str, Any] = {}
        clipped = 0
        plan = self._plan
        for key, value in x.items():
            try:
                entry = plan.get(key)   # 3 and "3" name one feature
            except TypeError:           # an unhashable key
                entry = None
            if entry is None:
                if self.on_unknown == "ignore":
                    continue
                name = str(key) if len(str(key)) <= 60 else str(key)[:57] + "..."
                raise RejectedRecord(f"x.{name}: unknown feature (not declared in the schema)")
            if value is None:
                continue
            name, numeric, lo, hi, lookup, spec = entry
            kind = type(value)
            if numeric:
                if kind is float:
                    v = value
                    if v != v or v in (math.inf, -math.inf):
                        raise RejectedRecord(f"x.{name}: {v} is not a finite number")
                elif kind is int and -_EXACT_INT < value < _EXACT_INT:   # (bool is not int)
                    v = float(value)
                else:
                    v = _number(f"x.{name}", value)
                if v < lo or v > hi:
                    if self.on_out_of_domain == "error":
                        raise RejectedRecord(f"x.{name}: value {_short(value)} is outside "
                                             f"the public domain [{lo}, {hi}]")
                    v = min(max(v, lo), hi)
                    clipped += 1
                out[name] = v
            else:
                if kind is str:   # a text value can only equal a declared text category
                    declared = lookup.get(value, _ABSENT)
                    if type(declared) is str:
                        out[name] = declared
                        continue
                try:
                    declared = lookup.get(value, _ABSENT)
                except TypeError:   # unhashable
                    declared = _ABSENT
                if declared is _ABSENT or isinstance(declared, bool) != isinstance(value, bool):
                    declared = _category(f"x.{name}", value, spec.values)
                out[name] = declared
        for name in self._required:
            if name not in out:
                raise RejectedRecord(f"x.{name}: required feature is missing")
        return out, clipped

    def _label(self, y: Any) -> tuple[Any, int, int]:
        """The declared label, whether it was clipped and whether it was coerced."""
        target = self.schema.target
        if y is None:
            return None, 0, 0
        if target.values is not None:
            if (len(target.values) == 2 and all(isinstance(c, bool) for c in target.values)
                    and type(y) in (int, float) and y in (0, 1)):
                return y == 1, 0, 1   # river's 0/1 for a [false, true] target, as the models
            return _category("y", y, target.values, what="classes"), 0, 0
        v = _number("y", y)
        if v < target.min or v > target.max:
            if self.on_out_of_domain == "error":
                raise RejectedRecord(f"y: label {_short(y)} is outside the public target "
                                     f"range [{target.min}, {target.max}]")
            return min(max(v, target.min), target.max), 1, 0
        return v, 0, 0


_ABSENT = object()
_EXACT_INT = 2 ** 53   # integers a float holds exactly (and never overflows on)
_MESSAGE_KEYS = frozenset(Message.model_fields)
_FEATURE_KEY_TYPES = {str, int}


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON value")


#: one decoder for every message (``json.loads`` with an option builds a new one per call)
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)

try:   # a C parser about three times as fast as the standard library's on these messages
    from orjson import JSONDecodeError as _FastError
    from orjson import loads as _fast_loads
except ImportError:   # pragma: no cover - orjson is a dependency; the slow path still works
    _fast_loads = None

#: scalars a flat message's fields hold; anything else is decoded again by the standard parser
_FLAT = frozenset({str, int, float, bool, type(None)})
#: orjson turns an integer outside 64 bits into a float (the standard parser keeps it an
#: exact ``int``); no integer inside 64 bits becomes a float, so a float this large is redone
_BIG = 2.0 ** 63


def _fast_decode(raw: str | bytes) -> dict | None:
    """A message's JSON object parsed by orjson, or ``None``: then the standard parser decides
    (it gives the value or the error it always gave).

    orjson accepts only strict JSON, so whatever it refuses (NaN, ``1e400``, a lone
    surrogate, invalid UTF-8, deep nesting) goes to the standard parser. What it accepts it
    parses as the standard parser does, with one exception: an integer beyond 64 bits becomes
    a float. So its result is used only for a *flat* message — a dict whose values, and its
    ``x``'s values, are plain scalars with no float of magnitude ``2**63`` or more (no integer
    inside 64 bits becomes a float). ``tests/test_messages.py`` compares both parsers on
    generated text.
    """
    if _fast_loads is None:
        return None   # pragma: no cover - orjson is a dependency
    try:
        value = _fast_loads(raw)
    except _FastError:
        return None
    if type(value) is not dict:
        return None
    x = value.get("x")
    nested = x if type(x) is dict else None
    flat, big = _FLAT, _BIG
    for v in itertools.chain(value.values(), () if nested is None else nested.values()):
        t = type(v)
        if t not in flat:
            if v is nested and nested is not None:
                continue
            return None
        if t is float and not -big < v < big:
            return None
    return value


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RejectedRecord(f"{where}: expected a number, got {type(value).__name__} "
                             f"{_short(value)}")
    try:
        v = float(value)
    except OverflowError:   # an integer too large for a float
        raise RejectedRecord(f"{where}: {_short(value)} is not a finite number") from None
    if not math.isfinite(v):
        raise RejectedRecord(f"{where}: {v} is not a finite number")
    return v


def _category(where: str, value: Any, values: list, what: str = "categories") -> Any:
    for declared in values:
        if value == declared and isinstance(value, bool) == isinstance(declared, bool):
            return declared
    raise RejectedRecord(f"{where}: {_short(value)} is not one of the declared {what}")


# ---------------------------------------------------------------- batches
_ENVELOPE = _MESSAGE_KEYS
_NUMBER_TYPES = frozenset({float, int, type(None)})


class ValidBatch(NamedTuple):
    """:meth:`RecordValidator.validate_many`'s result: per message a :class:`ValidRecord` or the
    :class:`RejectedRecord` it raised, and the valid records' features in columns (rows of
    rejected messages hold NaN / -1)."""

    records: list
    numeric: np.ndarray   # (n, numeric features) float64, NaN = missing
    codes: np.ndarray     # (n, categorical features) int32 category codes, -1 = missing


class _Plan:
    """What :meth:`RecordValidator.validate_many` needs of a validator's schema (built once
    per validator)."""

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


def _validate_many(validator: Any, values: Sequence, slow: Callable[[int], ValidRecord]
                   | None = None) -> ValidBatch:
    """Validate ``values`` (raw messages) as ``validator.validate`` would one by one; see
    docs/stream_internals.md#batches. ``slow(i)`` decides message ``i`` when the column path
    does not (it returns a :class:`ValidRecord` or raises :class:`RejectedRecord`); by default
    ``validator.validate(values[i])``."""
    plan = batch_plan(validator)
    n = len(values)
    records: list = [None] * n
    numeric = np.full((n, len(plan.numeric)), np.nan)
    codes = np.full((n, len(plan.categorical)), -1, dtype=np.int32)
    take, xs, ids, ys, pubs = _envelopes(validator, plan, values)
    out_slow = set() if len(take) == n else set(range(n)) - set(take)
    if take:
        ok, clipped, label_clipped, y_out, coerced = _columns(validator, plan, take, xs, ys,
                                                              numeric, codes)
        missing = (np.count_nonzero(np.isnan(numeric), axis=1)   # NaN values, -1 codes
                   + np.count_nonzero(codes < 0, axis=1))[take]
        made = list(map(ValidRecord, ids, itertools.repeat(None, len(take)), y_out, pubs,
                        (clipped + label_clipped).tolist(), missing.tolist(), coerced))
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
        if record.x is not None:   # (a label message has none)
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
        if x.keys() <= name_set:
            for j, name in enumerate(names):
                cols[j][k] = x.get(name)
        else:
            ok[k] = False
    return cols


def _columns(validator: Any, plan: _Plan, take: list, xs: list, ys: list, numeric: np.ndarray,
             codes: np.ndarray) -> tuple:
    """Fill ``numeric`` / ``codes`` rows of ``take`` from the columns; which records cleared
    every test, their clipped counts, label clips, labels and label coercions."""
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
    labels, label_clipped, coerced = _labels(validator, plan, ys, ok)
    return ok, clipped, label_clipped, labels, coerced


def _code(text: dict, value: Any) -> int:
    try:
        return text.get(value, -2)
    except TypeError:
        return -2


def _labels(validator: Any, plan: _Plan, ys: list, ok: np.ndarray) -> tuple[list, np.ndarray,
                                                                            list]:
    """The declared label of each record, whether it was clipped and whether it was coerced
    (a number read as a boolean class); a label the lookup cannot place marks its record not
    ``ok`` (the record path decides it)."""
    m = len(ys)
    coerced = [0] * m
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
                if type(declared) is bool and type(v) is not bool:
                    coerced[k] = 1
        return out, np.zeros(m, dtype=np.int64), coerced
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
    return out, np.array(clip_flags, dtype=np.int64), coerced


def batch_plan(validator: Any) -> _Plan:
    """The validator's column layout of a batch (built once)."""
    plan = validator.__dict__.get("_batch_plan")
    if plan is None:
        plan = validator._batch_plan = _Plan(validator)
    return plan


def compact_features(validator: Any, x: dict) -> tuple[np.ndarray, np.ndarray]:
    """A validated record's features as one row of a batch's columns: ``(numeric, codes)``
    (NaN / -1 where missing; what :meth:`RecordValidator.validate_many` keeps)."""
    plan = batch_plan(validator)
    numeric = np.empty(len(plan.numeric))
    codes = np.empty(len(plan.categorical), dtype=np.int32)
    _compact_row(plan, x, numeric, codes)
    return numeric, codes


def row_features(validator: Any, numeric: np.ndarray, codes: np.ndarray) -> dict:
    """Inverse of :func:`compact_features`: the validated features of one batch row.

    >>> v = RecordValidator({"features": {"age": {"type": "numeric", "min": 0, "max": 99},
    ...                                   "sex": {"type": "categorical", "values": ["F", "M"]}},
    ...                      "target": {"type": "binary", "values": [False, True]}})
    >>> row_features(v, *compact_features(v, {"age": 30.0, "sex": "M"}))
    {'age': 30.0, 'sex': 'M'}
    """
    plan = batch_plan(validator)
    x: dict = {}
    for c, (_j, name, _lo, _hi) in enumerate(plan.numeric):
        v = float(numeric[c])
        if v == v:
            x[name] = v
    for c, (_j, name, _text, values) in enumerate(plan.categorical):
        if codes[c] >= 0:
            x[name] = values[int(codes[c])]
    return x


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
