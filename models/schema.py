"""The public schema: feature domains and label classes, declared — never read from data.

Models validate every record against it (:mod:`dpstream.models.encoding`); the stream layer
re-exports it as :mod:`dpstream.stream.messages`.

The schema file format (DESIGN.md §6)::

    {"features": {"age": {"type": "numeric", "min": 17, "max": 90},
                  "workclass": {"type": "categorical", "values": ["Private", "..."]}},
     "target": {"type": "binary", "values": [false, true]}}

A feature may add ``"required": true``: the stream service then rejects a record without it
(otherwise an absent feature is *missing*, which the models handle). A numeric feature without
both bounds, a categorical feature without values, or a target without
its classes (or bounds) is an error, not a warning: a mechanism that had to look at the data to
find them would leak.

Examples
--------
>>> schema = Schema.model_validate({
...     "features": {"age": {"type": "numeric", "min": 17, "max": 90},
...                  "sex": {"type": "categorical", "values": ["Female", "Male"]}},
...     "target": {"type": "binary", "values": [False, True]}})
>>> schema.feature_names
['age', 'sex']
>>> schema.features["age"].width
73.0
>>> Schema.model_validate({"features": {"age": {"type": "numeric", "min": 17}},
...                        "target": {"type": "binary", "values": [0, 1]}})
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for Schema
features.age.numeric.max
  Field required ...
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["NumericFeature", "CategoricalFeature", "Target", "Schema", "coerce_schema"]

Scalar = bool | int | float | str


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NumericFeature(_Strict):
    """A numeric feature with its public domain ``[min, max]``."""

    type: Literal["numeric"]
    min: float
    max: float
    required: bool = False

    @model_validator(mode="after")
    def _bounds(self) -> NumericFeature:
        if not (math.isfinite(self.min) and math.isfinite(self.max)):
            raise ValueError("min and max must be finite numbers")
        if not self.min < self.max:
            raise ValueError(f"min must be < max, got min={self.min}, max={self.max}")
        return self

    @property
    def width(self) -> float:
        return self.max - self.min


class CategoricalFeature(_Strict):
    """A categorical feature with its public list of values."""

    type: Literal["categorical"]
    values: list[Scalar] = Field(min_length=1)
    required: bool = False

    @field_validator("values")
    @classmethod
    def _unique(cls, v: list[Scalar]) -> list[Scalar]:
        if len(set(map(repr, v))) != len(v):
            raise ValueError("values must be unique")
        return v


Feature = Annotated[NumericFeature | CategoricalFeature, Field(discriminator="type")]


class Target(_Strict):
    """The label: ``binary`` / ``categorical`` with classes, or ``numeric`` with bounds."""

    type: Literal["binary", "categorical", "numeric"]
    values: list[Scalar] | None = None
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _complete(self) -> Target:
        if self.type == "numeric":
            if self.min is None or self.max is None:
                raise ValueError("a numeric target needs both min and max")
            if not (math.isfinite(self.min) and math.isfinite(self.max) and self.min < self.max):
                raise ValueError(f"target min must be < max, got {self.min}, {self.max}")
            if self.values is not None:
                raise ValueError("a numeric target takes min/max, not values")
        else:
            if not self.values:
                raise ValueError(f"a {self.type} target needs its public class values")
            if len(set(map(repr, self.values))) != len(self.values):
                raise ValueError("target values must be unique")
            if self.type == "binary" and len(self.values) != 2:
                raise ValueError("a binary target needs exactly two values")
            if self.type == "categorical" and len(self.values) < 2:
                raise ValueError("a categorical target needs at least two values")
        return self


class Schema(_Strict):
    """Public feature domains and label classes of a stream."""

    features: dict[str, Feature] = Field(min_length=1)
    target: Target

    @property
    def feature_names(self) -> list[str]:
        return list(self.features)

    @property
    def numeric_features(self) -> list[str]:
        return [n for n, f in self.features.items() if isinstance(f, NumericFeature)]

    @property
    def categorical_features(self) -> list[str]:
        return [n for n, f in self.features.items() if isinstance(f, CategoricalFeature)]

    @classmethod
    def load(cls, path: str | Path) -> Schema:
        """Read a schema JSON file."""
        with open(path, encoding="utf-8") as fh:
            return cls.model_validate(json.load(fh))

    def dump(self, path: str | Path) -> None:
        """Write the schema as JSON (the same format :meth:`load` reads)."""
        Path(path).write_text(self.model_dump_json(indent=2, exclude_none=True), encoding="utf-8")


def coerce_schema(schema: Any) -> Schema:
    """Accept a :class:`Schema`, the equivalent dict, or a path to a schema file."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, dict):
        return Schema.model_validate(schema)
    if isinstance(schema, (str, Path)):
        return Schema.load(schema)
    raise TypeError(f"schema must be a Schema, a dict or a path, got {type(schema).__name__}")
