"""Records -> split columns: validation against the public schema and a flat numeric encoding.

Every tree in :mod:`dpstream.models.forest` compares one column with one threshold
(``go left iff x[col] <= threshold``). The encoder lays a record out so that this one comparison
covers both kinds of split:

* column 0 is the constant 0.0 (leaves route through it and stay where they are);
* a numeric feature is one column holding its value;
* a categorical feature with ``k`` public values is ``k`` columns, column ``j`` holding 0.0 when
  the value is ``values[j]`` and 1.0 otherwise, so the split "feature == values[j]" is
  ``x[col_j] <= 0.5``.

A feature that is absent from the record (or ``None``) is *missing*: its columns hold NaN, every
comparison with NaN is false, and the record goes right at every split on that feature. A
missing value is not an error (river streams drop features freely); a value that breaks the
schema is: an unknown feature, NaN, a number outside the declared domain, an undeclared
category, or the wrong type each raise :class:`InvalidRecordError` naming the field. Nothing
is read from the data to build the encoding.

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
>>> enc.encode_one({"age": 120, "sex": "M"})
Traceback (most recent call last):
...
dpstream.models.encoding.InvalidRecordError: age: value 120 is outside the public domain [17.0, 90.0]
>>> enc.encode_target_one(True), enc.decode_target(0.0)
(1.0, False)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .schema import CategoricalFeature, Schema, coerce_schema

__all__ = ["InvalidRecordError", "RecordEncoder"]


class InvalidRecordError(ValueError):
    """A record (or label) that breaks the public schema; ``field`` names the culprit."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class RecordEncoder:
    """Validate records against a :class:`~dpstream.models.schema.Schema` and encode them.

    Parameters
    ----------
    schema
        A ``Schema``, the equivalent dict, or a path to a schema file.
    """

    def __init__(self, schema: Schema | Mapping | str):
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
        numeric, categorical = self._numeric, self._categorical
        for name, value in x.items():
            if value is None:
                continue
            spec = numeric.get(name)
            if spec is not None:
                col, lo, hi = spec
                if isinstance(value, bool) or not isinstance(value, numbers.Real):
                    raise InvalidRecordError(
                        name, f"expected a number, got {type(value).__name__} {_describe(value)}")
                v = float(value)
                if not lo <= v <= hi:
                    if math.isnan(v):
                        raise InvalidRecordError(
                            name, "NaN is not a value (leave the feature out to mark it missing)")
                    raise InvalidRecordError(
                        name, f"value {_describe(value)} is outside the public domain [{lo}, {hi}]")
                row[col] = v
                continue
            cat = categorical.get(name)
            if cat is None:
                raise InvalidRecordError(name, "unknown feature (not declared in the schema)")
            start, codes, k = cat
            try:
                code = codes.get(value)
            except TypeError:
                code = None
            if code is None or (isinstance(value, bool) is not isinstance(
                    self.schema.features[name].values[code], bool)):
                raise InvalidRecordError(
                    name, f"{_describe(value)} is not one of the declared categories")
            row[start:start + k] = [1.0] * k
            row[start + code] = 0.0
        return row

    def encode_many(self, X: Iterable[Mapping] | Any) -> np.ndarray:
        """Many records (dicts, or a pandas DataFrame whose NaN cells mean *missing*)."""
        if hasattr(X, "to_dict") and hasattr(X, "columns"):
            rows = [{k: v for k, v in r.items() if not (isinstance(v, float) and math.isnan(v))}
                    for r in X.to_dict("records")]
        else:
            rows = X
        out = [self._row(x) for x in rows]
        if not out:
            return np.empty((0, self.n_columns))
        return np.array(out, dtype=np.float64)

    # ------------------------------------------------------------------- target
    @property
    def classes(self) -> list | None:
        """The public class values (``None`` for a numeric target)."""
        return self._classes

    def encode_target_one(self, y: Any) -> float:
        """A label as a float: class index for classes, the value scaled to [-1, 1] if numeric."""
        if self._classes is not None:
            for i, c in enumerate(self._classes):
                if y == c and isinstance(y, (bool, np.bool_)) == isinstance(c, bool):
                    return float(i)
            raise InvalidRecordError(
                "y", f"label {_describe(y)} is not one of the declared classes {self._classes}")
        if isinstance(y, (bool, np.bool_)) or not isinstance(y, numbers.Real):
            raise InvalidRecordError("y", f"expected a number, got {type(y).__name__} "
                                          f"{_describe(y)}")
        lo, hi = self._target_range
        v = float(y)
        if not lo <= v <= hi:
            raise InvalidRecordError(
                "y", f"label {_describe(y)} is outside the public target range [{lo}, {hi}]")
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
