"""dpstream.stream — the record flow: public schema, datasets, windows, runner and CLI."""

from __future__ import annotations

from .datasets import ABALONE_SCHEMA, ADULT_SCHEMA, Dataset, load_abalone, load_adult
from .messages import CategoricalFeature, NumericFeature, Schema, Target, coerce_schema

__all__ = [
    "ABALONE_SCHEMA",
    "ADULT_SCHEMA",
    "CategoricalFeature",
    "Dataset",
    "NumericFeature",
    "Schema",
    "Target",
    "coerce_schema",
    "load_abalone",
    "load_adult",
]
