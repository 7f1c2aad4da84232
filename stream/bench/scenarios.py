"""Benchmark datasets beyond the bundled two: Huang et al.'s small UCI and synthetic sets, and
a drifting stream.

:func:`load_iris` and :func:`load_wine` (scikit-learn's copies of the UCI data),
:func:`load_synthetic` (Huang et al.'s ``syn5d`` .. ``syn15d``), :func:`load_synth` (Fletcher &
Islam's ``synth-a`` .. ``synth-g``) and :func:`load_agrawal_drift` (river's Agrawal with a
drift). Every schema declares public domains, never ranges read from the rows; the suite's
other drifting streams are in :mod:`.drift_streams`.

The datasets and their domains: docs/bench_internals.md#extra-datasets.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ... import import_extra
from ..datasets import Dataset
from ..messages import Schema

__all__ = ["load_iris", "load_wine", "load_synthetic", "load_synth", "load_agrawal_drift",
           "SYNTH_TABLE", "IRIS_SCHEMA",
           "WINE_SCHEMA", "AGRAWAL_SCHEMA"]


def _num(lo: float, hi: float) -> dict:
    return {"type": "numeric", "min": lo, "max": hi}


# UCI iris.names, "Summary Statistics" (min-max per attribute), rounded outward
IRIS_SCHEMA = Schema.model_validate({
    "features": {"sepal length (cm)": _num(4, 8), "sepal width (cm)": _num(2, 4.5),
                 "petal length (cm)": _num(1, 7), "petal width (cm)": _num(0, 2.5)},
    "target": {"type": "categorical", "values": ["setosa", "versicolor", "virginica"]}})

# UCI wine: attribute ranges of the documented chemical analysis, rounded outward
WINE_SCHEMA = Schema.model_validate({
    "features": {
        "alcohol": _num(11, 15), "malic_acid": _num(0, 6), "ash": _num(1, 3.5),
        "alcalinity_of_ash": _num(10, 30), "magnesium": _num(70, 170),
        "total_phenols": _num(0.5, 4), "flavanoids": _num(0, 5.5),
        "nonflavanoid_phenols": _num(0, 0.7), "proanthocyanins": _num(0, 4),
        "color_intensity": _num(1, 13.5), "hue": _num(0.4, 1.8),
        "od280/od315_of_diluted_wines": _num(1, 4), "proline": _num(250, 1700)},
    "target": {"type": "categorical", "values": ["class_0", "class_1", "class_2"]}})

# river.datasets.synth.Agrawal: the generator's documented ranges
AGRAWAL_SCHEMA = Schema.model_validate({
    "features": {
        "salary": _num(20_000, 150_000), "commission": _num(0, 85_000), "age": _num(20, 80),
        "elevel": {"type": "categorical", "values": [0, 1, 2, 3, 4]},
        "car": _num(1, 20), "zipcode": {"type": "categorical", "values": list(range(9))},
        "hvalue": _num(0, 1_350_000), "hyears": _num(1, 30), "loan": _num(0, 500_000)},
    "target": {"type": "binary", "values": [0, 1]}})


def _sklearn(name: str):
    datasets = import_extra("sklearn.datasets", "bench",
                            f"the {name!r} benchmark dataset (scikit-learn's bundled copy)")
    return getattr(datasets, f"load_{name}")()


def _bundled(name: str, schema: Schema) -> Dataset:
    data = _sklearn(name)
    names = list(schema.features)
    classes = schema.target.values
    X = [dict(zip(names, (float(v) for v in row), strict=True)) for row in data.data]
    return Dataset(X, [classes[int(t)] for t in data.target], schema)


def load_iris() -> Dataset:
    """UCI Iris (150 rows, 4 features, 3 classes), scikit-learn's bundled copy."""
    return _bundled("iris", IRIS_SCHEMA)


def load_wine() -> Dataset:
    """UCI Wine (178 rows, 13 features, 3 classes), scikit-learn's bundled copy."""
    return _bundled("wine", WINE_SCHEMA)


def _make_classification():
    return import_extra("sklearn.datasets", "bench",
                        "synthetic benchmark data (scikit-learn's make_classification)"
                        ).make_classification


def load_synthetic(d: int, n: int = 3000, *, random_state: int = 0) -> Dataset:
    """Huang et al.'s SynNd: ``make_classification(n_samples=n, n_features=d, n_classes=2)``.

    Examples
    --------
    >>> X, y, schema = load_synthetic(5)
    >>> len(X), sorted(set(y)), list(schema.features)[:2]
    (3000, [0, 1], ['x0', 'x1'])
    """
    make_classification = _make_classification()
    Xa, ya = make_classification(n_samples=n, n_features=d, n_classes=2,
                                 random_state=random_state)
    return _numeric_dataset(Xa, ya, d)


#: Fletcher & Islam (2017) Table 1: (n_informative, n_random) of SynthA .. SynthG
SYNTH_TABLE = {"a": (5, 0), "b": (10, 0), "c": (15, 0), "d": (10, 5), "e": (5, 10),
               "f": (5, 5), "g": (10, 10)}


def load_synth(letter: str, n: int = 30_000, *, random_state: int = 0) -> Dataset:
    """Fletcher & Islam's Synth{A..G}: ``make_classification`` with 30,000 balanced binary records,
    ``n_informative`` and ``n_random`` useless features from its Table 1 (no redundant or
    repeated ones: the two sum to the feature count of its Table 4), defaults otherwise.

    The public domain of every feature is ``[-b, b]`` with ``b = 3 sqrt(d) + 2`` (the rule of
    :func:`load_synthetic`; the few values beyond it are clipped)."""
    key = letter.lower().removeprefix("synth-")
    if key not in SYNTH_TABLE:
        raise ValueError(f"unknown synthetic set {letter!r}; choose from synth-a .. synth-g")
    informative, useless = SYNTH_TABLE[key]
    d = informative + useless
    make_classification = _make_classification()
    Xa, ya = make_classification(n_samples=n, n_features=d, n_informative=informative,
                                 n_redundant=0, n_repeated=0, n_classes=2,
                                 random_state=random_state)
    return _numeric_dataset(Xa, ya, d)


def _numeric_dataset(Xa: np.ndarray, ya: np.ndarray, d: int) -> Dataset:
    bound = round(3 * math.sqrt(d) + 2, 1)
    names = [f"x{j}" for j in range(d)]
    schema = Schema.model_validate({"features": {c: _num(-bound, bound) for c in names},
                                    "target": {"type": "binary", "values": [0, 1]}})
    Xa = np.clip(Xa, -bound, bound)
    X = [dict(zip(names, row.tolist(), strict=True)) for row in Xa]
    return Dataset(X, [int(v) for v in ya], schema)


def load_agrawal_drift(n: int = 60_000, *, drift_at: int = 30_000, width: int = 1_000,
                       seed: int = 0, functions: tuple[int, int] = (0, 2)) -> Dataset:
    """``n`` records of Agrawal ``functions[0]`` drifting to ``functions[1]`` around ``drift_at``.

    River's ``ConceptDriftStream`` joins ``Agrawal(functions[0], seed=seed)`` and
    ``Agrawal(functions[1], seed=seed + 1)``: record ``t`` comes from the new concept with
    probability ``1 / (1 + exp(-4 (t - drift_at) / width))`` (``width=1``: an abrupt switch).

    Examples
    --------
    >>> X, y, schema = load_agrawal_drift(1000, drift_at=500, seed=1)
    >>> len(X), schema.features["elevel"].values
    (1000, [0, 1, 2, 3, 4])
    """
    from river.datasets import synth

    before, after = functions
    stream = synth.ConceptDriftStream(
        stream=synth.Agrawal(classification_function=before, seed=seed),
        drift_stream=synth.Agrawal(classification_function=after, seed=seed + 1),
        position=drift_at, width=width, seed=seed)
    X, y = [], []
    for x, label in itertools.islice(stream, n):
        X.append(dict(x))
        y.append(int(label))
    return Dataset(X, y, AGRAWAL_SCHEMA)


#: river's multi-class generators the suite streams (issue 52): each one's public feature
#: domain (from the generator's definition: waveforms of height <= 6 plus unit noise, LED
#: segments 0/1, RBF centroids in [0, 1] with their spread) and its classes
MULTICLASS_STREAMS: dict[str, tuple[float, float, int]] = {
    "waveform": (-5.0, 10.0, 3), "led": (0.0, 1.0, 10), "random-rbf": (-1.5, 2.5, 5)}


def load_multiclass(name: str, n: int = 20_000, *, seed: int = 0) -> Dataset:
    """``n`` records of river's ``Waveform``, ``LED`` (10% noise) or ``RandomRBF`` (5 classes,
    10 features), stream seed ``seed + 1``, with the public schema of
    :data:`MULTICLASS_STREAMS` (values outside a domain follow the input policy: clipped)."""
    from river.datasets import synth

    if name not in MULTICLASS_STREAMS:
        raise ValueError(f"unknown multi-class stream {name!r}; choose from "
                         f"{sorted(MULTICLASS_STREAMS)}")
    lo, hi, k = MULTICLASS_STREAMS[name]
    stream = {"waveform": lambda: synth.Waveform(seed=seed + 1),
              "led": lambda: synth.LED(seed=seed + 1, noise_percentage=0.1),
              "random-rbf": lambda: synth.RandomRBF(seed_model=seed + 1, seed_sample=seed + 2,
                                                    n_classes=k, n_features=10)}[name]()
    rows = list(itertools.islice(stream, n))
    schema = Schema.model_validate({
        "features": {key: _num(lo, hi) for key in rows[0][0]},
        "target": {"type": "categorical", "values": list(range(k))}})
    return Dataset([dict(x) for x, _ in rows], [int(label) for _, label in rows], schema)
