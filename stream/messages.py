"""The public schema of a stream and the message format (DESIGN.md §6), with the service's
record validation.

The schema definitions live in :mod:`dpstream.models.schema` because the models validate
records against them and data flows one way (connectors -> stream -> models -> accounting); the
stream layer reads schema files and hands the same objects to the models.

:class:`RecordValidator` turns one raw message (bytes or an already-decoded dict) into a
:class:`ValidRecord` or raises :class:`RejectedRecord` with a reason. The policy is the
schema's:

* a numeric value outside ``[min, max]`` is **clipped** to the domain and counted in the
  curator-only ``clipped`` counter (the public domain is a promise about the data; clipping
  keeps the record and the guarantee) — the models' default too
  (:class:`~dpstream.models.encoding.RecordEncoder`); ``on_out_of_domain="error"`` rejects it;
* unparsable JSON, a message without ``x``, an unknown feature (``on_unknown="error"``, the
  service's default; ``"ignore"`` drops it, as the models do by default), an undeclared
  category, NaN or infinity, a wrong type, a missing ``required`` feature, or a label outside
  the declared classes are **rejected** (the service sends them to the dead-letter sink); a
  target declared ``[false, true]`` takes ``0`` / ``1`` for them, as the models do;
* a numeric label outside the target range is clipped like a feature (or rejected under
  ``on_out_of_domain="error"``);
* ``y`` null or absent is an *unlabeled* record (counted; supervised models skip it);
* a message longer than ``max_message_bytes`` (default 1 MiB) or an id longer than
  ``max_id_bytes`` (default 256 bytes of UTF-8; an integer id by its decimal digits) is
  **rejected** before anything else is kept: ids live in the duplicate memory and the
  checkpoint.

A reason is always valid UTF-8 and at most :data:`MAX_REASON_CHARS` characters (a lone surrogate
in an unknown feature's name is shown escaped), so every sink can carry it.

Examples
--------
>>> from dpstream.stream.messages import RecordValidator, RejectedRecord, Schema
>>> v = RecordValidator({"features": {"age": {"type": "numeric", "min": 17, "max": 90},
...                                   "sex": {"type": "categorical", "values": ["F", "M"]}},
...                      "target": {"type": "binary", "values": [False, True]}})
>>> r = v.validate(b'{"id": 7, "x": {"age": 95, "sex": "M"}, "y": true}')
>>> r.id, r.x, r.y, r.clipped
(7, {'age': 90.0, 'sex': 'M'}, True, 1)
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
"""

from __future__ import annotations

import itertools
import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError

from ..models.encoding import check_input_policy
from ..models.schema import CategoricalFeature, NumericFeature, Schema, Target, coerce_schema

__all__ = ["NumericFeature", "CategoricalFeature", "Target", "Schema", "coerce_schema",
           "Message", "ValidRecord", "RejectedRecord", "RecordValidator", "MAX_ID_BYTES",
           "MAX_MESSAGE_BYTES", "MAX_REASON_CHARS"]

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
    """A validated record: values inside the public domain, ``clipped`` values counted.

    Immutable; a named tuple because the service builds one per message (a frozen
    dataclass's constructor cost 1.75 µs, this one 0.7 µs on this project's machine)."""

    id: str | int
    x: dict[str | int, Any]
    y: Any
    public: bool
    clipped: int

    @property
    def labeled(self) -> bool:
        return self.y is not None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class RecordValidator:
    """Validate raw messages against a schema (see the module docstring for the policy).

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
                raise RejectedRecord(f"{where}: {err['msg']}") from None
            record_id, features, public = msg.id, msg.x, msg.public
        try:
            x, clipped = self._features(features)
            y, label_clipped = self._label(raw.get("y"))
        except RejectedRecord as exc:
            raise RejectedRecord(exc.reason, id=record_id) from None
        return ValidRecord(id=record_id, x=x, y=y, public=public,
                           clipped=clipped + label_clipped)

    def validate_many(self, values: Sequence, slow: Callable[[int], ValidRecord] | None = None
                      ) -> Any:
        """Many messages at once, with the outcome :meth:`validate` gives each, the common
        case validated column by column (:func:`~dpstream.stream.batches.validate_many`;
        ``slow(i)`` decides a message the columns do not)."""
        from .batches import validate_many   # (that module builds on this one)

        return validate_many(self, values, slow)

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

    def _label(self, y: Any) -> tuple[Any, int]:
        target = self.schema.target
        if y is None:
            return None, 0
        if target.values is not None:
            if (len(target.values) == 2 and all(isinstance(c, bool) for c in target.values)
                    and type(y) in (int, float) and y in (0, 1)):
                return y == 1, 0   # river's 0/1 for a [false, true] target, as the models
            return _category("y", y, target.values, what="classes"), 0
        v = _number("y", y)
        if v < target.min or v > target.max:
            if self.on_out_of_domain == "error":
                raise RejectedRecord(f"y: label {_short(y)} is outside the public target "
                                     f"range [{target.min}, {target.max}]")
            return min(max(v, target.min), target.max), 1
        return v, 0


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
