"""dpstream.stream — the record flow: public schema, datasets, windows, runner and CLI."""

from __future__ import annotations

from .datasets import (
    ABALONE_SCHEMA,
    ADULT_SCHEMA,
    ELEC2_SCHEMA,
    Dataset,
    load_abalone,
    load_adult,
    load_elec2,
)
from .messages import CategoricalFeature, NumericFeature, Schema, Target, coerce_schema

__all__ = [
    "ABALONE_SCHEMA",
    "ADULT_SCHEMA",
    "CategoricalFeature",
    "Dataset",
    "ELEC2_SCHEMA",
    "NumericFeature",
    "Schema",
    "Target",
    "coerce_schema",
    "load_abalone",
    "load_adult",
    "load_elec2",
]
