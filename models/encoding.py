"""Records -> split columns: validation against the public schema and a flat numeric encoding.

:class:`RecordEncoder` lays a record out so that every split of the array forest is one
``x[col] <= threshold`` comparison: column 0 the constant 0.0, one column per numeric feature,
one 0/1 column per public value of a categorical one; a missing feature is NaN and goes right.
It applies the input policy (``on_out_of_domain``, ``on_unknown``); :class:`InvalidRecordError`
names the field a bad record breaks. :class:`EncodedRows` carries rows validated once.
Nothing is read from the data to build the encoding.

The layout is explained in ``docs/encoding.md#the-record-encoding``, the input policy (and why
clipping to the public domain is free under DP) in ``docs/encoding.md#the-input-policy``.
"""

from __future__ import annotations

import gc
import itertools
import math
import numbers
import operator
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .params import warn_clipped_input
from .schema import CategoricalFeature, Schema, coerce_schema

__all__ = ["EncodedRows", "InvalidRecordError", "ON_OUT_OF_DOMAIN", "ON_UNKNOWN", "RecordEncoder",
           "check_input_policy", "is_frame"]


def is_frame(X: Any) -> bool:
    """Whether ``X`` is a pandas DataFrame, without importing pandas (an optional package:
    when it was never imported, nothing can be a DataFrame).

    >>> is_frame([{"age": 30}]), is_frame(EncodedRows(np.zeros((1, 1)), ("age",)))
    (False, False)
    """
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(X, pd.DataFrame)

#: what an out-of-domain numeric value (feature or label) gets: clipped to the public domain,
#: or an error
ON_OUT_OF_DOMAIN = ("clip", "error")
#: what a feature the schema does not declare gets: skipped, or an error
ON_UNKNOWN = ("ignore", "error")


def check_input_policy(on_out_of_domain: str, on_unknown: str) -> tuple[str, str]:
    """Both input-policy choices, checked (a ``ValueError`` names the bad one).

    >>> check_input_policy("clip", "ignore")
    ('clip', 'ignore')
    >>> check_input_policy("clip", "drop")
    Traceback (most recent call last):
    ...
    ValueError: on_unknown must be one of ('ignore', 'error'), got 'drop'
    """
    for name, value, allowed in (("on_out_of_domain", on_out_of_domain, ON_OUT_OF_DOMAIN),
                                 ("on_unknown", on_unknown, ON_UNKNOWN)):
        if not isinstance(value, str) or value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return on_out_of_domain, on_unknown


class InvalidRecordError(ValueError):
    """A record (or label) that breaks the public schema; ``field`` names the culprit."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_missing(value: Any, frame: bool) -> bool:
    if value is None:
        return True
    if not frame:
        return False
    return (isinstance(value, float) and value != value) or type(value).__name__ == "NAType"


class EncodedRows:
    """Records already validated and laid out in an encoder's columns.

    The stream service validates a batch of messages into columns once
    (:meth:`~dpstream.stream.messages.RecordValidator.validate_many`) and hands the rows to
    the model's ``predict_many`` and ``learn_stream`` as they are: :meth:`RecordEncoder.encode_many`
    returns :attr:`rows` unchanged when :attr:`columns` are its own, instead of encoding
    dicts again. :meth:`take` keeps a link to the batch it was taken from, so a model that
    remembers its last ``predict_many`` can tell that a learned subset is part of it.

    Parameters
    ----------
    rows
        ``(n, n_columns)`` float64 rows, as :meth:`RecordEncoder.encode_many` lays them out
        (read-only from here on).
    columns
        The encoder's :attr:`RecordEncoder.columns` they were laid out for.

    Examples
    --------
    >>> enc = RecordEncoder({"features": {"age": {"type": "numeric", "min": 17, "max": 90}},
    ...                      "target": {"type": "binary", "values": [False, True]}})
    >>> batch = EncodedRows(enc.encode_many([{"age": 30}, {"age": 50}]), enc.columns)
    >>> len(batch), enc.encode_many(batch).tolist()
    (2, [[0.0, 30.0], [0.0, 50.0]])
    >>> part = batch.take([1]); part.rows.tolist(), part.parent is batch, part.index.tolist()
    ([[0.0, 50.0]], True, [1])
    """

    __slots__ = ("rows", "columns", "parent", "index")

    def __init__(self, rows: np.ndarray, columns: list[str], *, parent: EncodedRows | None = None,
                 index: np.ndarray | None = None):
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != len(columns):
            raise ValueError(f"encoded rows: a 2-D array of {len(columns)} columns, got shape "
                             f"{rows.shape}")
        rows.flags.writeable = False
        self.rows, self.columns = rows, list(columns)
        self.parent, self.index = parent, index

    def __len__(self) -> int:
        return self.rows.shape[0]

    def take(self, index: Any) -> EncodedRows:
        """The rows at ``index`` (positions in this batch), linked to the original batch."""
        index = np.asarray(index, dtype=np.intp)
        root = self if self.parent is None else self.parent
        where = index if self.parent is None else self.index[index]
        return EncodedRows(self.rows[index], self.columns, parent=root, index=where)


class RecordEncoder:
    """Validate records against a :class:`~dpstream.models.schema.Schema` and encode them.

    Parameters
    ----------
    schema
        A ``Schema``, the equivalent dict, or a path to a schema file.
    on_out_of_domain
        ``"clip"`` (default): a finite number outside its public domain (a feature's
        ``[min, max]``, a numeric target's range) is clipped to it; ``"error"``: it raises
        :class:`InvalidRecordError`.
    on_unknown
        ``"ignore"`` (default): a feature the schema does not declare is skipped; ``"error"``:
        it raises :class:`InvalidRecordError`.

    Examples
    --------
    >>> enc = RecordEncoder({"features": {"age": {"type": "numeric", "min": 17, "max": 90},
    ...                                   "sex": {"type": "categorical", "values": ["F", "M"]}},
    ...                      "target": {"type": "binary", "values": [False, True]}})
    >>> enc.n_columns, enc.columns
    (4, ['<leaf>', 'age', 'sex=F', 'sex=M'])
    >>> enc.encode_one({"age": 40, "sex": "M"}).tolist()
    [0.0, 40.0, 1.0, 0.0]
    >>> enc.encode_one({"sex": "F"}).tolist()      # age missing
    [0.0, nan, 0.0, 1.0]
    >>> enc.encode_one({"age": 120, "sex": "M", "zip": "10115"}).tolist()   # clipped; no zip
    [0.0, 90.0, 1.0, 0.0]
    >>> strict = RecordEncoder(enc.schema, on_out_of_domain="error", on_unknown="error")
    >>> strict.encode_one({"age": 120, "sex": "M"})
    Traceback (most recent call last):
    ...
    dpstream.models.encoding.InvalidRecordError: age: value 120 is outside the public ...
    >>> strict.encode_one({"zip": "10115"})
    Traceback (most recent call last):
    ...
    dpstream.models.encoding.InvalidRecordError: zip: unknown feature (not declared in the ...
    >>> enc.encode_target_one(True), enc.encode_target_one(1), enc.decode_target(0.0)
    (1.0, 1.0, False)
    """

    # encoders pickled before the input policy had none: they take the defaults
    on_out_of_domain = "clip"
    on_unknown = "ignore"

    def __init__(self, schema: Schema | Mapping | str, *, on_out_of_domain: str = "clip",
                 on_unknown: str = "ignore"):
        self.on_out_of_domain, self.on_unknown = check_input_policy(on_out_of_domain,
                                                                    on_unknown)
        self.schema = coerce_schema(dict(schema) if isinstance(schema, Mapping) else schema)
        self.columns: list[str] = ["<leaf>"]
        self._numeric: dict[str, tuple[int, float, float]] = {}
        self._categorical: dict[str, tuple[int, dict[Any, int], int]] = {}
        for name, feature in self.schema.features.items():
            if isinstance(feature, CategoricalFeature):
                start = len(self.columns)
                codes = {}
                for j, value in enumerate(feature.values):
                    codes[value] = j
                    self.columns.append(f"{name}={value}")
                self._categorical[name] = (start, codes, len(feature.values))
            else:
                self._numeric[name] = (len(self.columns), feature.min, feature.max)
                self.columns.append(name)
        self.n_columns = len(self.columns)
        self._template = [0.0] + [math.nan] * (self.n_columns - 1)
        self._names = set(self.schema.features)
        self._names_list = list(self.schema.features)
        # per categorical feature: its column span, value -> ready block (1.0 everywhere but
        # 0.0 at the value's column) and the blocks by code
        self._blocks: dict[str, tuple[int, int, dict[Any, list[float]], list[list[float]]]] = {}
        for name, (start, codes, k) in self._categorical.items():
            ready = [[0.0 if j == c else 1.0 for j in range(k)] for c in range(k)]
            self._blocks[name] = (start, start + k, {v: ready[c] for v, c in codes.items()},
                                  ready)
        self._bool_code = {name: [isinstance(v, bool) for v in f.values]
                           for name, f in self.schema.features.items()
                           if isinstance(f, CategoricalFeature)}
        # True == 1 == 1.0: the value types a batch column may hold for the fast path to agree
        # with _row's strict bool check (None: any type; set(): fall back to _row)
        self._cat_types: dict[str, set | None] = {}
        for name, f in self.schema.features.items():
            if isinstance(f, CategoricalFeature):
                bools = [isinstance(v, bool) for v in f.values]
                if all(bools):
                    self._cat_types[name] = {bool, type(None)}
                elif any(bools):
                    self._cat_types[name] = set()
                elif any(isinstance(v, numbers.Number) for v in f.values):
                    self._cat_types[name] = {"no bools"}
                else:
                    self._cat_types[name] = None
        target = self.schema.target
        self._classes = list(target.values) if target.values is not None else None
        self._target_range = (target.min, target.max)

    # ----------------------------------------------------------------- features
    def encode_one(self, x: Mapping) -> np.ndarray:
        """One record (a dict feature -> value) as a row of :attr:`n_columns` floats."""
        return np.array(self._row(x), dtype=np.float64)

    def _row(self, x: Mapping) -> list[float]:
        if not isinstance(x, Mapping):
            raise InvalidRecordError("x", f"expected a dict of features, got {type(x).__name__}")
        row = self._template.copy()
        numeric, blocks = self._numeric, self._blocks
        for name, value in x.items():
            # fast paths: a float in range, a declared str category (a str is never a bool, so
            # the bool check of _feature holds); anything else takes the general path
            kind = type(value)
            if kind is float:
                spec = numeric.get(name)
                if spec is not None:
                    col, lo, hi = spec
                    if lo <= value <= hi:
                        row[col] = value
                        continue
            elif kind is str:
                cat = blocks.get(name)
                if cat is not None:
                    block = cat[2].get(value)
                    if block is not None:
                        row[cat[0]:cat[1]] = block
                        continue
            if value is None:
                continue
            self._feature(row, name, value)
        return row

    def _feature(self, row: list[float], name: Any, value: Any) -> None:
        """Validate one present feature value and write its columns into ``row``."""
        numeric, categorical = self._numeric, self._categorical
        spec = numeric.get(name)
        if spec is None and name not in categorical:
            declared = self.schema.resolve(name)   # 3 and "3" name one feature
            if declared is not None:
                name, spec = declared, numeric.get(declared)
        if spec is not None:
            col, lo, hi = spec
            kind = type(value)
            if kind is not float and kind is not int and (
                    isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise InvalidRecordError(
                    name, f"expected a number, got {type(value).__name__} {_describe(value)}")
            try:
                v = float(value)
            except OverflowError:   # an integer too large for a float
                v = math.inf
            if not lo <= v <= hi:
                v = self._clip(name, value, v, lo, hi)
            row[col] = v
            return
        cat = categorical.get(name)
        if cat is None:
            if self.on_unknown == "ignore":
                return
            raise InvalidRecordError(name, "unknown feature (not declared in the schema)")
        start, codes, k = cat
        try:
            code = codes.get(value)
        except TypeError:
            code = None
        if code is not None and isinstance(value, bool) is not self._bool_code[name][code]:
            # True == 1 == 1.0 share one key of ``codes``: a schema may declare both kinds
            values = self.schema.features[name].values
            code = next((j for j, v in enumerate(values) if v == value
                         and isinstance(v, bool) == isinstance(value, bool)), None)
        if code is None:
            raise InvalidRecordError(
                name, f"{_describe(value)} is not one of the declared categories")
        row[start:start + k] = self._blocks[name][3][code]

    def _clip(self, name: Any, value: Any, v: float, lo: float, hi: float, *,
              label: bool = False) -> float:
        """An out-of-range number ``v`` (of ``value``) clipped to ``[lo, hi]``, or the error
        the policy (or a NaN / infinity, never clipped) calls for."""
        what = "the public target range" if label else "the public domain"
        if math.isnan(v):
            raise InvalidRecordError(name, "NaN is not a label" if label else
                                     "NaN is not a value (leave the feature out to mark it "
                                     "missing)")
        if self.on_out_of_domain == "clip":
            if math.isinf(v):
                raise InvalidRecordError(
                    name, f"{_describe(value)} is not a finite number (only a finite value "
                          f"is clipped to {what})")
            warn_clipped_input(self, name, value, lo, hi, label=label)   # once per model
            return lo if v < lo else hi
        raise InvalidRecordError(
            name, f"{'label' if label else 'value'} {_describe(value)} is outside {what} "
                  f"[{lo}, {hi}]")

    def _ignorable(self, keys: Iterable) -> bool:
        """Whether every key is skipped by the policy: unknown under ``on_unknown="ignore"``
        (a key that spells a declared feature differently is not unknown)."""
        return self.on_unknown == "ignore" and all(self.schema.resolve(k) is None for k in keys)

    def encode_many(self, X: Iterable[Mapping] | Any) -> np.ndarray:
        """Many records (dicts, or a pandas DataFrame whose NaN cells mean *missing*).

        Validation is the same as :meth:`encode_one`'s and the first bad record raises its
        :class:`InvalidRecordError`; clean batches are encoded column by column with numpy.
        :class:`EncodedRows` laid out for this encoder's columns come back as they are.
        """
        if type(X) is EncodedRows:
            if X.columns != self.columns:
                raise ValueError("encoded rows laid out for other columns than this encoder's")
            return X.rows
        frame = is_frame(X)
        if not frame and not isinstance(X, list):
            X = list(X)
        paused = gc.isenabled()
        if paused:   # transposing builds many small tuples; a cyclic-GC pass over them only costs
            gc.disable()
        try:
            out = self._encode_columns(X, frame) if len(X) else np.empty((0, self.n_columns))
        finally:
            if paused:
                gc.enable()
        if out is not None:
            return out
        # slow path: record by record, so the first bad record raises with its field
        if frame:
            X = [{k: v for k, v in r.items() if not (isinstance(v, float) and math.isnan(v))}
                 for r in X.to_dict("records")]
        return np.array([self._row(x) for x in X], dtype=np.float64)

    def _columns(self, X: list) -> dict | None:
        """Dict records transposed to columns (``None`` -> missing), or ``None`` if odd."""
        names = self._names_list
        try:   # usual case: every record carries every feature
            if set(map(len, X)) == {len(names)}:
                if len(names) == 1:
                    return {names[0]: [r[names[0]] for r in X]}
                rows = map(operator.itemgetter(*names), X)
                return dict(zip(names, zip(*rows, strict=True), strict=True))
        except (KeyError, TypeError):
            pass
        if not all(isinstance(r, Mapping) for r in X):
            return None
        extra = set().union(*X) - self._names
        if extra and not self._ignorable(extra):
            return None
        return {name: [r.get(name) for r in X] for name in names}

    def _encode_columns(self, X: Any, frame: bool) -> np.ndarray | None:
        """Vectorised encoding of a clean batch; ``None`` when anything needs a closer look."""
        if frame:
            extra = [k for k in X.columns if str(k) not in self._names]
            if extra and not self._ignorable(extra):
                return None
            columns = {str(k): X[k] for k in X.columns if str(k) in self._names}
        else:
            columns = self._columns(X)
            if columns is None:
                return None
        n = len(X)
        out = np.full((n, self.n_columns), np.nan)
        out[:, 0] = 0.0
        for name, col in columns.items():
            spec = self._numeric.get(name)
            if frame:
                series, col = col, col.to_numpy()
                if col.dtype.kind == "O":
                    col = col.tolist()
                    if spec is not None:   # NaN / None / pd.NA cells all mean missing
                        for i in np.flatnonzero(series.isna().to_numpy()).tolist():
                            col[i] = None
            if spec is not None:
                values = self._numeric_column(col, frame)
                if values is None:
                    return None
                c, lo, hi = spec
                present = values[~np.isnan(values)]
                if present.size and (present.min() < lo or present.max() > hi):
                    # clipped as _feature clips (NaN, missing, stays); an infinity or the
                    # "error" policy goes to _row, which raises for the first bad record
                    if self.on_out_of_domain != "clip" or not np.isfinite(present).all():
                        return None
                    warn_clipped_input(self, name, present, lo, hi)   # once per model
                    values = np.where(values < lo, lo, np.where(values > hi, hi, values))
                out[:, c] = values
                continue
            start, codes, k = self._categorical[name]
            allowed = self._cat_types[name]
            if allowed is not None:
                kinds = set(map(type, col))
                if allowed == {"no bools"}:
                    if not kinds.isdisjoint({bool, np.bool_}):
                        return None
                elif not kinds <= allowed:
                    return None
            try:
                idx = np.array(list(map(codes.get, col, itertools.repeat(-1, n))), dtype=np.int64)
            except TypeError:   # an unhashable value
                return None
            unknown = np.flatnonzero(idx == -1)
            # a value outside the codes must be a missing one: None (or NaN / pd.NA in a frame)
            if unknown.size and not all(_is_missing(col[i], frame) for i in unknown.tolist()):
                return None
            block = out[:, start:start + k]
            block[:] = 1.0
            known = idx >= 0
            rows = np.flatnonzero(known)
            block[rows, idx[rows]] = 0.0
            if unknown.size:
                block[unknown] = np.nan
        return out

    @staticmethod
    def _numeric_column(col: Any, frame: bool) -> np.ndarray | None:
        if isinstance(col, np.ndarray) and col.dtype.kind in "fiu":
            return col.astype(np.float64)
        kinds = set(map(type, col)) - {type(None)}
        if not all(issubclass(t, numbers.Real) and not issubclass(t, (bool, np.bool_))
                   for t in kinds):
            return None
        try:
            values = np.array(col, dtype=np.float64)   # None -> NaN
        except OverflowError:   # an integer too large for a float: let _row name it
            return None
        if not frame and int(np.isnan(values).sum()) != col.count(None):
            return None   # dicts: NaN is an error, only None (or absence) is missing
        return values

    # ------------------------------------------------------------ compact rows
    def compact(self, rows: np.ndarray) -> dict:
        """Encoded rows in a small lossless form (numeric columns, and one category code per
        categorical feature, -1 when missing) — for checkpoints; :meth:`expand` inverts it."""
        rows = np.asarray(rows, dtype=np.float64)
        numeric = rows[:, [c for c, _, _ in self._numeric.values()]]
        # a block holds 1 everywhere but a 0 at the code: code = sum(0..k-1) - block @ (0..k-1);
        # a missing value (NaN block) stays NaN
        codes = np.full((rows.shape[0], len(self._categorical)), -1, dtype=np.int32)
        for j, (start, _, k) in enumerate(self._categorical.values()):
            raw = k * (k - 1) / 2 - rows[:, start:start + k] @ np.arange(k, dtype=np.float64)
            present = ~np.isnan(raw)
            codes[present, j] = np.rint(raw[present])
        return {"numeric": numeric, "codes": codes}

    def expand(self, compact: dict) -> np.ndarray:
        """Inverse of :meth:`compact`."""
        numeric, codes = compact["numeric"], compact["codes"]
        out = np.full((numeric.shape[0], self.n_columns), np.nan)
        out[:, 0] = 0.0
        for j, (c, _, _) in enumerate(self._numeric.values()):
            out[:, c] = numeric[:, j]
        for j, (start, _, k) in enumerate(self._categorical.values()):
            present = codes[:, j] >= 0
            block = out[:, start:start + k]
            block[present] = 1.0
            rows = np.flatnonzero(present)
            block[rows, codes[rows, j]] = 0.0
        return out

    # ------------------------------------------------------------------- target
    @property
    def classes(self) -> list | None:
        """The public class values (``None`` for a numeric target)."""
        return self._classes

    def encode_target_one(self, y: Any) -> float:
        """A label as a float: class index for classes, the value scaled to [-1, 1] if numeric.

        A binary target declared as exactly ``[false, true]`` also takes ``0`` / ``1`` (river's
        habit) for them; a numeric label outside the target range follows
        ``on_out_of_domain``."""
        classes = self._classes
        if classes is not None:
            for i, c in enumerate(classes):
                if y == c and isinstance(y, (bool, np.bool_)) == isinstance(c, bool):
                    return float(i)
            if (len(classes) == 2 and all(isinstance(c, bool) for c in classes)
                    and isinstance(y, numbers.Real) and (y == 0 or y == 1)):
                return float(classes.index(y == 1))
            raise InvalidRecordError(
                "y", f"label {_describe(y)} is not one of the declared classes {classes}")
        if isinstance(y, (bool, np.bool_)) or not isinstance(y, numbers.Real):
            raise InvalidRecordError("y", f"expected a number, got {type(y).__name__} "
                                          f"{_describe(y)}")
        lo, hi = self._target_range
        try:
            v = float(y)
        except OverflowError:   # an integer too large for a float
            v = math.inf
        if not lo <= v <= hi:
            v = self._clip("y", y, v, lo, hi, label=True)
        return 2.0 * (v - lo) / (hi - lo) - 1.0

    def encode_targets(self, y: Iterable) -> np.ndarray:
        """Many labels (see :meth:`encode_target_one`)."""
        return np.array([self.encode_target_one(v) for v in y], dtype=np.float64)

    def decode_target(self, value: float) -> Any:
        """Inverse of :meth:`encode_target_one` (a class index, or a scaled numeric value)."""
        if self._classes is not None:
            return self._classes[int(value)]
        lo, hi = self._target_range
        return lo + (float(value) + 1.0) * (hi - lo) / 2.0

    # ------------------------------------------------------- split candidates
    def numeric_columns(self) -> list[tuple[int, float, float]]:
        """``(column, min, max)`` of every numeric feature, in schema order."""
        return list(self._numeric.values())

    def categorical_columns(self) -> list[list[int]]:
        """The columns of each categorical feature (one per public value), in schema order."""
        return [list(range(start, start + k)) for start, _, k in self._categorical.values()]
