"""The bundled datasets (UCI Adult and Abalone, Harries' Elec2) with their public schemas.

All ship gzipped inside the package (see ``stream/data/ATTRIBUTION.md``); nothing is downloaded.

Examples
--------
>>> X, y, schema = load_adult("train")
>>> len(X), X[0]["age"], X[0]["workclass"], y[0]
(32561, 39.0, 'State-gov', False)
>>> schema.target.values
[False, True]
>>> X, y, schema = load_abalone()
>>> len(X), y[0], schema.features["sex"].values
(4177, 15.0, ['M', 'F', 'I'])
"""

from __future__ import annotations

import csv
import gzip
import io
from importlib import resources
from typing import NamedTuple

from .messages import Schema

__all__ = ["Dataset", "load_adult", "load_abalone", "load_elec2", "ADULT_SCHEMA",
           "ABALONE_SCHEMA", "ELEC2_FEATURES", "ELEC2_SCHEMA", "open_data"]


class Dataset(NamedTuple):
    """Rows as river-style dicts, labels, and the public schema."""

    X: list[dict]
    y: list
    schema: Schema


_ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week",
    "native-country",
]
_MISSING = "?"  # Adult marks unknown categories with '?'; it is declared as a category of its own


def _cat(*values: str, missing: bool = False) -> dict:
    return {"type": "categorical", "values": list(values) + ([_MISSING] if missing else [])}


ADULT_SCHEMA = Schema.model_validate({
    "features": {
        "age": {"type": "numeric", "min": 17, "max": 90},
        "workclass": _cat("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov",
                          "Local-gov", "State-gov", "Without-pay", "Never-worked", missing=True),
        "fnlwgt": {"type": "numeric", "min": 0, "max": 1_500_000},
        "education": _cat("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school",
                          "Assoc-acdm", "Assoc-voc", "9th", "7th-8th", "12th", "Masters",
                          "1st-4th", "10th", "Doctorate", "5th-6th", "Preschool"),
        "education-num": {"type": "numeric", "min": 1, "max": 16},
        "marital-status": _cat("Married-civ-spouse", "Divorced", "Never-married", "Separated",
                               "Widowed", "Married-spouse-absent", "Married-AF-spouse"),
        "occupation": _cat("Tech-support", "Craft-repair", "Other-service", "Sales",
                           "Exec-managerial", "Prof-specialty", "Handlers-cleaners",
                           "Machine-op-inspct", "Adm-clerical", "Farming-fishing",
                           "Transport-moving", "Priv-house-serv", "Protective-serv",
                           "Armed-Forces", missing=True),
        "relationship": _cat("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative",
                             "Unmarried"),
        "race": _cat("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
        "sex": _cat("Female", "Male"),
        "capital-gain": {"type": "numeric", "min": 0, "max": 99_999},
        "capital-loss": {"type": "numeric", "min": 0, "max": 5_000},
        "hours-per-week": {"type": "numeric", "min": 1, "max": 99},
        "native-country": _cat(
            "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
            "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba",
            "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico",
            "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan",
            "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand",
            "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong",
            "Holand-Netherlands", missing=True),
    },
    "target": {"type": "binary", "values": [False, True]},
})

ABALONE_SCHEMA = Schema.model_validate({
    "features": {
        "sex": {"type": "categorical", "values": ["M", "F", "I"]},
        "length": {"type": "numeric", "min": 0, "max": 1.0},
        "diameter": {"type": "numeric", "min": 0, "max": 1.0},
        "height": {"type": "numeric", "min": 0, "max": 1.2},
        "whole_weight": {"type": "numeric", "min": 0, "max": 3.0},
        "shucked_weight": {"type": "numeric", "min": 0, "max": 1.5},
        "viscera_weight": {"type": "numeric", "min": 0, "max": 0.8},
        "shell_weight": {"type": "numeric", "min": 0, "max": 1.1},
    },
    "target": {"type": "numeric", "min": 1, "max": 29},
})

#: Elec2's features in the file's column order (``date`` and ``day`` are not in the file)
ELEC2_FEATURES = ("period", "nswprice", "nswdemand", "vicprice", "vicdemand", "transfer")

#: Elec2's public schema: the dataset's description (``stream/data/ATTRIBUTION.md``) publishes
#: every feature normalised to [0, 1] and a 0/1 label; nothing here is read from the records
ELEC2_SCHEMA = Schema.model_validate({
    "features": {name: {"type": "numeric", "min": 0.0, "max": 1.0} for name in ELEC2_FEATURES},
    "target": {"type": "binary", "values": [0, 1]},
})


def open_data(name: str) -> io.TextIOWrapper:
    """Open one bundled data file (``adult.data``, ``adult.test``, ``adult.names``,
    ``abalone.csv``, ``elec2.csv``) as decompressed text."""
    ref = resources.files("dpstream.stream").joinpath("data", f"{name}.gz")
    return io.TextIOWrapper(gzip.GzipFile(fileobj=ref.open("rb")), encoding="utf-8", newline="")


def _adult_rows(name: str) -> tuple[list[dict], list[bool]]:
    X, y = [], []
    numeric = set(ADULT_SCHEMA.numeric_features)
    with open_data(name) as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("|"):
                continue
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != len(_ADULT_COLUMNS) + 1:
                raise ValueError(f"{name}: malformed line {line[:60]!r}")
            X.append({c: (float(v) if c in numeric else v)
                      for c, v in zip(_ADULT_COLUMNS, parts[:-1], strict=True)})
            y.append(parts[-1].rstrip(".") == ">50K")
    return X, y


def load_adult(split: str = "train") -> Dataset:
    """UCI Adult: ``"train"`` (adult.data, 32,561 rows), ``"test"`` (adult.test, 16,281) or
    ``"all"`` (both, 48,842). Label: ``True`` for income >50K."""
    files = {"train": ["adult.data"], "test": ["adult.test"],
             "all": ["adult.data", "adult.test"]}
    if split not in files:
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    X, y = [], []
    for name in files[split]:
        xs, ys = _adult_rows(name)
        X.extend(xs)
        y.extend(ys)
    return Dataset(X, y, ADULT_SCHEMA)


def load_abalone() -> Dataset:
    """UCI Abalone (4,177 rows): predict the number of rings (a regression target, 1-29)."""
    X, y = [], []
    with open_data("abalone.csv") as fh:
        for row in csv.DictReader(fh):
            rings = float(row.pop("rings"))
            X.append({k: (v if k == "sex" else float(v)) for k, v in row.items()})
            y.append(rings)
    return Dataset(X, y, ABALONE_SCHEMA)


def load_elec2() -> Dataset:
    """Elec2, the New South Wales electricity market stream (Harries, 1999), in time order.

    A standard real drifting stream: 45,312 half-hourly records from 7 May 1996 to
    5 December 1998. The label says whether the price went up against the mean of the last
    24 hours. Never shuffle it: its order is the point.

    Returns
    -------
    Dataset
        ``X``: one dict a record, the six features :data:`ELEC2_FEATURES` as floats in
        [0, 1] (``period`` is the time of day, 0 at midnight, cycling every 48 records);
        ``y``: the labels as ints, 1 for *up*; ``schema``: :data:`ELEC2_SCHEMA`, every
        feature numeric in [0, 1] and a binary target with values ``[0, 1]`` (public
        knowledge from the dataset's description, never read from the records).

    Examples
    --------
    >>> X, y, schema = load_elec2()
    >>> len(X), sorted(X[0]), y[0]
    (45312, ['nswdemand', 'nswprice', 'period', 'transfer', 'vicdemand', 'vicprice'], 1)
    >>> schema.target.values, schema.features["nswprice"].max
    ([0, 1], 1.0)
    """
    X, y = [], []
    with open_data("elec2.csv") as fh:
        for row in csv.DictReader(fh):
            y.append(int(row.pop("class")))
            X.append({name: float(row[name]) for name in ELEC2_FEATURES})
    return Dataset(X, y, ELEC2_SCHEMA)
