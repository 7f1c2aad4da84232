"""The public schema: feature domains and label classes, declared — never read from data.

:class:`Schema` (numeric features with ``[min, max]``, categorical ones with their values, the
target's classes or range), :class:`SchemaError`, and :func:`coerce_schema`, which accepts a
schema, the equivalent dict or a schema file. Models validate every record against it
(:mod:`dpstream.models.encoding`); the stream layer re-exports it as
:mod:`dpstream.stream.messages`. A bound or class list the schema lacks is an error: finding it
in the data would leak.

The file format, required features and integer feature names are described in
``docs/encoding.md#the-public-schema``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

__all__ = ["NumericFeature", "CategoricalFeature", "Target", "Schema", "SchemaError",
           "coerce_schema", "require_schema", "river_check_schema"]

Scalar = bool | int | float | str
#: a feature name: a string or an integer (river's synthetic streams key features by integers)
FeatureKey = StrictStr | StrictInt


class SchemaError(ValueError):
    """A schema that breaks the format; ``problems`` holds one plain line per field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid schema: " + "; ".join(problems))


def _plain(exc: ValidationError) -> list[str]:
    """pydantic's errors as ``field: what is wrong`` lines (no discriminator tags, no URLs)."""
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"] if p not in ("numeric", "categorical", "[key]")]
        where = ".".join(loc) or "schema"
        kind, msg = err["type"], err["msg"]
        if kind == "missing":
            field = loc[-1] if loc else "?"
            where = ".".join(loc[:-1]) or "schema"
            text = f"'{field}' is required"
        elif kind == "extra_forbidden":
            text = "is not a schema field"
        elif "[key]" in [str(p) for p in err["loc"]]:
            where = "features"
            text = f"feature names must be strings or integers, got {err.get('input')!r}"
        elif kind == "union_tag_invalid" or kind == "union_tag_not_found":
            text = "'type' must be \"numeric\" or \"categorical\""
        elif kind == "too_short":
            text = "must not be empty"
        else:
            text = msg.removeprefix("Value error, ")
        if f"{where}: {text}" not in lines:
            lines.append(f"{where}: {text}")
    return lines


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
    """Public feature domains and label classes of a stream.

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
    """

    features: dict[FeatureKey, Feature] = Field(min_length=1)
    target: Target
    _aliases: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _one_spelling(self) -> Schema:
        aliases: dict = {}
        for name in self.features:
            other = _other_spelling(name)
            if other is not None and other in self.features:
                raise ValueError(f"features {name!r} and {other!r} name the same feature")
            aliases[name] = name
            if other is not None:
                aliases[other] = name
        self._aliases = aliases
        return self

    def resolve(self, key: Any) -> str | int | None:
        """The declared feature name a record key stands for (``3`` and ``"3"`` are one
        name), or ``None`` for an unknown key."""
        try:
            return self._aliases.get(key)
        except TypeError:   # an unhashable key
            return None

    def resolve_other(self, name: str | int) -> str | int | None:
        """The other spelling of a declared feature name (``3`` for ``"3"`` and back), or
        ``None`` if it has none."""
        other = _other_spelling(name)
        return other if other is not None and self.resolve(other) == name else None

    @property
    def feature_names(self) -> list[str | int]:
        return list(self.features)

    def summary(self) -> str:
        """A one-line description (a model's repr shows this, not the whole schema).

        >>> Schema.model_validate({"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
        ...                        "target": {"type": "binary", "values": [False, True]}}
        ...                       ).summary()
        '<Schema: 1 feature, target binary>'
        """
        n = len(self.features)
        return f"<Schema: {n} feature{'' if n == 1 else 's'}, target {self.target.type}>"

    @property
    def numeric_features(self) -> list[str]:
        return [n for n, f in self.features.items() if isinstance(f, NumericFeature)]

    @property
    def categorical_features(self) -> list[str]:
        return [n for n, f in self.features.items() if isinstance(f, CategoricalFeature)]

    @classmethod
    def load(cls, path: str | Path) -> Schema:
        """Read a schema JSON file (:class:`SchemaError` names what is wrong)."""
        with open(path, encoding="utf-8") as fh:
            try:
                doc = json.load(fh)
            except json.JSONDecodeError as exc:
                raise SchemaError([f"{path}: not JSON ({exc.msg} at line {exc.lineno})"]) from None
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            raise SchemaError([f"{path}: {p}" for p in _plain(exc)]) from None

    def dump(self, path: str | Path) -> None:
        """Write the schema as JSON (the same format :meth:`load` reads)."""
        Path(path).write_text(self.model_dump_json(indent=2, exclude_none=True), encoding="utf-8")


def coerce_schema(schema: Any) -> Schema:
    """Accept a :class:`Schema`, the equivalent dict, or a path to a schema file.

    Examples
    --------
    >>> coerce_schema({"features": {"age": {"type": "numeric", "min": 17}},
    ...                 "target": {"type": "binary", "values": [0, 1]}})
    Traceback (most recent call last):
    ...
    dpstream.models.schema.SchemaError: invalid schema: features.age: 'max' is required
    >>> sea = coerce_schema({"features": {0: {"type": "numeric", "min": 0, "max": 10},
    ...                                   1: {"type": "numeric", "min": 0, "max": 10}},
    ...                      "target": {"type": "binary", "values": [False, True]}})
    >>> sea.feature_names, sea.resolve("1"), sea.resolve(1), sea.resolve("x")
    ([0, 1], 1, 1, None)
    """
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, dict):
        try:
            return Schema.model_validate(schema)
        except ValidationError as exc:
            raise SchemaError(_plain(exc)) from None
    if isinstance(schema, (str, Path)):
        return Schema.load(schema)
    raise TypeError(f"schema must be a Schema, a dict or a path, got {type(schema).__name__}")


#: what a model built without a schema says (``{owner}``: the model's class name)
MISSING_SCHEMA = """{owner} needs the stream's public schema: the feature domains and label \
classes, declared by you (never read from the data). For example:

    schema = {{"features": {{"age": {{"type": "numeric", "min": 17, "max": 90}},
                           "sex": {{"type": "categorical", "values": ["F", "M"]}}}},
              "target": {{"type": "binary", "values": [False, True]}}}}
    model = {owner}(schema=schema, epsilon=1.0)

A Schema object, that dict, or the path of a JSON schema file. The format: \
docs/service.md#messages-and-the-schema"""


def require_schema(schema: Any, owner: str) -> Any:
    """``schema`` unchanged, or, if it is ``None``, a :class:`TypeError` that shows a short
    example schema and where the format is documented.

    >>> require_schema(None, "SGBDTClassifier")
    Traceback (most recent call last):
    ...
    TypeError: SGBDTClassifier needs the stream's public schema: ...
    """
    if schema is None:
        raise TypeError(MISSING_SCHEMA.format(owner=owner))
    return schema


def _other_spelling(name: str | int) -> str | int | None:
    """``3`` <-> ``"3"``: the other spelling of an integer feature name, if any."""
    if isinstance(name, int):
        return str(name)
    if name.isdigit() and str(int(name)) == name:
        return int(name)
    return None


def river_check_schema(task: str) -> dict:
    """The public schema of the dataset river's estimator checks feed a ``task``: ``"binary"``
    (Phishing: nine features in [0, 1]) or ``"regression"`` (TrumpApproval: poll shares in
    percent). Every estimator's ``_unit_test_params`` declares it, as a user would.

    >>> sorted(river_check_schema("regression")["target"].items())
    [('max', 100), ('min', 0), ('type', 'numeric')]
    >>> len(river_check_schema("binary")["features"])
    9
    """
    if task == "regression":
        pct = {"type": "numeric", "min": 0, "max": 100}
        return {"features": {"ordinal_date": {"type": "numeric", "min": 736000, "max": 738000},
                             "gallup": pct, "ipsos": pct, "morning_consult": pct,
                             "rasmussen": pct, "you_gov": pct},
                "target": {"type": "numeric", "min": 0, "max": 100}}
    if task == "binary":
        unit = {"type": "numeric", "min": 0, "max": 1}
        names = ["empty_server_form_handler", "popup_window", "https",
                 "request_from_other_domain", "anchor_from_other_domain", "is_popular",
                 "long_url", "age_of_domain", "ip_in_url"]
        return {"features": {n: unit for n in names},
                "target": {"type": "binary", "values": [False, True]}}
    raise ValueError(f"task must be 'binary' or 'regression', got {task!r}")
