"""The public schema of a stream (DESIGN.md §6), re-exported for the record flow.

The definitions live in :mod:`dpstream.models.schema` because the models validate records
against them and data flows one way (connectors -> stream -> models -> accounting); the stream
layer reads schema files and hands the same objects to the models.

Examples
--------
>>> from dpstream.stream.schema import Schema
>>> Schema.model_validate({"features": {"x": {"type": "numeric", "min": 0, "max": 1}},
...                        "target": {"type": "numeric", "min": 0, "max": 1}}).feature_names
['x']
"""

from __future__ import annotations

from ..models.schema import CategoricalFeature, NumericFeature, Schema, Target, coerce_schema

__all__ = ["NumericFeature", "CategoricalFeature", "Target", "Schema", "coerce_schema"]
