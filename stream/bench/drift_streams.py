"""Drifting streams for the suite: river's synthetic generators with an abrupt or gradual drift.

:data:`DRIFT_SCENARIOS` joins two concepts of river's Agrawal, SEA or Hyperplane generator with
river's ``ConceptDriftStream`` (the drift at :func:`drift_geometry`); the schemas declare the
generators' documented domains, nothing is read from the records. :func:`load_drift_stream`
gives a scenario's records and :func:`run_drift_stream` runs one model over it prequentially
(S-GBDT, the window forests of :data:`WINDOW_FORESTS`, river's HoeffdingTree and ARF).

The scenarios, the drift's shape and what is reported: docs/bench_internals.md#drifting-streams.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
    SGBDTClassifier,
)
from ..datasets import Dataset
from ..messages import Schema
from .scenarios import AGRAWAL_SCHEMA

__all__ = ["DRIFT_MODELS", "DRIFT_SCENARIOS", "HYPERPLANE_SCHEMA", "REFERENCE_N", "SEA_SCHEMA",
           "WINDOW_FORESTS", "DriftScenario", "drift_geometry", "load_drift_stream",
           "run_drift_stream"]

#: the reference stream length and drift position (the scenarios scale with ``n``)
REFERENCE_N = 30_000
REFERENCE_POSITION = 15_000
TAIL = 5_000          # the "last 5k" records of the reference stream
WINDOW = 500          # records per point of the accuracy curve of the reference stream

# river.datasets.synth.SEA: x0, x1, x2 uniform on [0, 10]
SEA_SCHEMA = Schema.model_validate({
    "features": {j: {"type": "numeric", "min": 0, "max": 10} for j in range(3)},
    "target": {"type": "binary", "values": [0, 1]}})

# river.datasets.synth.Hyperplane: n_features uniform on [0, 1]
HYPERPLANE_SCHEMA = Schema.model_validate({
    "features": {j: {"type": "numeric", "min": 0, "max": 1} for j in range(10)},
    "target": {"type": "binary", "values": [0, 1]}})


@dataclass(frozen=True)
class DriftScenario:
    """Two concepts of one river generator, the drift between them, and the base seed.

    Parameters
    ----------
    family
        ``"agrawal"``, ``"sea"`` or ``"hyperplane"``.
    before, after
        The concept before and after: Agrawal's classification function, SEA's variant
        (Hyperplane: ignored, the new concept is the next seed's hyperplane).
    width
        Width of the drift in records of the reference stream (1: abrupt).
    seed
        Seed of the first run; run ``r`` uses ``seed + r`` (concept after: one more).
    """

    family: str
    before: int
    after: int
    width: int
    seed: int

    @property
    def schema(self) -> Schema:
        return {"agrawal": AGRAWAL_SCHEMA, "sea": SEA_SCHEMA,
                "hyperplane": HYPERPLANE_SCHEMA}[self.family]

    def describe(self) -> str:
        """One line: the generator, the two concepts and the kind of drift."""
        kind = "abrupt" if self.width == 1 else f"gradual, width {self.width:,}"
        concepts = {"agrawal": f"Agrawal function {self.before} → {self.after}",
                    "sea": f"SEA variant {self.before} → {self.after}, 10% label noise",
                    "hyperplane": "Hyperplane (10 features, 5% noise) → a new hyperplane"}
        return f"{concepts[self.family]} ({kind})"

    def generator(self, concept: int, seed: int):
        from river.datasets import synth
        if self.family == "agrawal":
            return synth.Agrawal(classification_function=concept, seed=seed)
        if self.family == "sea":
            return synth.SEA(variant=concept, noise=0.1, seed=seed)
        return synth.Hyperplane(seed=seed, n_features=10, mag_change=0.0,
                                noise_percentage=0.05)


DRIFT_SCENARIOS: dict[str, DriftScenario] = {
    "agrawal-1-3-abrupt": DriftScenario("agrawal", 1, 3, 1, 11),
    "agrawal-1-3-gradual": DriftScenario("agrawal", 1, 3, 1_000, 11),
    "agrawal-4-0-abrupt": DriftScenario("agrawal", 4, 0, 1, 21),
    "agrawal-4-0-gradual": DriftScenario("agrawal", 4, 0, 1_000, 21),
    "sea-abrupt": DriftScenario("sea", 0, 2, 1, 31),
    "sea-gradual": DriftScenario("sea", 0, 2, 5_000, 31),
    "hyperplane-abrupt": DriftScenario("hyperplane", 0, 1, 1, 41),
    "hyperplane-gradual": DriftScenario("hyperplane", 0, 1, 5_000, 41),
}

#: dpstream's window forests on the drifting streams: the river-API classes with their library
#: defaults (windows, warm-up, drift signal: nothing tuned per scenario, no window override)
WINDOW_FORESTS = {"median-forest": MedianForestClassifier,
                  "greedy-forest": GreedyForestClassifier,
                  "rdt": RDTClassifier,
                  "random-forest": RandomDecisionForestClassifier}

#: the models of a drift cell: dpstream's S-GBDT (arms by params) and window forests (DP), and
#: river's non-private trees
DRIFT_MODELS = ("sgbdt", *WINDOW_FORESTS, "hoeffding-tree", "arf")


def _scenario(name: str) -> DriftScenario:
    if name not in DRIFT_SCENARIOS:
        raise ValueError(f"unknown drift scenario {name!r}; choose from {sorted(DRIFT_SCENARIOS)}")
    return DRIFT_SCENARIOS[name]


def drift_geometry(name: str, n: int = REFERENCE_N) -> tuple[int, int]:
    """``(position, width)`` of scenario ``name`` in a stream of ``n`` records."""
    sc = _scenario(name)
    scale = n / REFERENCE_N
    return max(1, round(REFERENCE_POSITION * scale)), max(1, round(sc.width * scale))


def load_drift_stream(name: str, n: int = REFERENCE_N, *, seed: int | None = None) -> Dataset:
    """The first ``n`` records of scenario ``name`` (``seed``: the scenario's first by default).

    Labels are ints 0 / 1 (river's SEA yields booleans).

    Examples
    --------
    >>> data = load_drift_stream("sea-abrupt", n=300)
    >>> len(data.X), sorted(data.X[0]), drift_geometry("sea-abrupt", 300)
    (300, [0, 1, 2], (150, 1))
    """
    sc = _scenario(name)
    seed = sc.seed if seed is None else seed
    position, width = drift_geometry(name, n)
    old, new = sc.generator(sc.before, seed), sc.generator(sc.after, seed + 1)
    if width == 1:
        # river's ConceptDriftStream overflows math.exp for width 1 past ~180 records before
        # the drift; its limit is this step: the old concept's records, then the new one's
        stream = itertools.chain(itertools.islice(old, position), new)
    else:
        from river.datasets import synth
        stream = synth.ConceptDriftStream(stream=old, drift_stream=new, position=position,
                                          width=width, seed=seed)
    X, y = [], []
    for x, label in itertools.islice(stream, n):
        X.append(dict(x))
        y.append(int(label))
    return Dataset(X, y, sc.schema)


def _model(model: str, schema: Schema, epsilon: float | None, seed: int, params: dict):
    if model == "sgbdt" or model in WINDOW_FORESTS:
        if epsilon is None:
            raise ValueError(f"{model} is differentially private: give epsilon")
        cls = SGBDTClassifier if model == "sgbdt" else WINDOW_FORESTS[model]
        return cls(schema=schema, epsilon=epsilon, seed=seed, **params), "dp"
    if model not in DRIFT_MODELS:
        raise ValueError(f"unknown drift-stream model {model!r}; choose from {DRIFT_MODELS}")
    if epsilon is not None:
        raise ValueError(f"{model} is river's non-private learner: epsilon must be None")
    from river import forest, tree
    est = (tree.HoeffdingTreeClassifier() if model == "hoeffding-tree"
           else forest.ARFClassifier(seed=seed))
    return est, "non-private"


def run_drift_stream(model: str, scenario: str, *, epsilon: float | None = None,
                     n: int = REFERENCE_N, repeats: int = 1, params: dict | None = None,
                     progress: Callable[[int, int], None] | None = None) -> dict:
    """Prequential accuracy of ``model`` over ``repeats`` seeds of a drifting stream.

    Parameters
    ----------
    model
        ``"sgbdt"`` (``params`` pick the arm, e.g. ``{"drift": False}``), a window forest of
        :data:`WINDOW_FORESTS` (its defaults unless ``params`` say otherwise),
        ``"hoeffding-tree"`` or ``"arf"`` (river's, non-private, defaults).
    scenario
        A name of :data:`DRIFT_SCENARIOS`.
    epsilon
        The DP model's budget (S-GBDT and the window forests); ``None`` for river's learners.
    n
        Records per run (the drift scales with it, see :func:`drift_geometry`).
    repeats
        Runs, on the scenario's seeds ``seed, seed + 1, ...`` (the model is seeded alike).
    params
        Keyword arguments of the DP model.
    progress
        Called with ``(records done, records in all runs)`` every 1% of the work.

    Returns
    -------
    dict
        The bench fields (:data:`~dpstream.stream.bench.protocols.RESULT_FIELDS`; ``mean``: the
        overall prequential accuracy over the runs, ``std`` across runs) plus
        ``tail_accuracy`` / ``tail_std`` (the last ``tail_rows`` records: 5,000 of the
        reference stream), ``curve`` (mean accuracy of each window of ``window`` records),
        ``drift_at``, ``drift_width``, ``majority_tail`` (the share of the commonest label in
        the tail: what a constant predictor scores there), ``per_seed`` and ``kind``.

    Examples
    --------
    >>> res = run_drift_stream("hoeffding-tree", "sea-gradual", n=600, repeats=1)
    >>> res["kind"], res["drift_at"], res["window"], len(res["curve"]), res["tail_rows"]
    ('non-private', 300, 10, 60, 100)
    """
    sc = _scenario(scenario)
    if n < 60:
        raise ValueError(f"n must be >= 60, got {n}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    params = dict(params or {})
    position, width = drift_geometry(scenario, n)
    window = max(1, round(WINDOW * n / REFERENCE_N))
    tail = max(1, round(TAIL * n / REFERENCE_N))
    step = max(1, repeats * n // 100)
    overall, tails, majority, curves, per_seed = [], [], [], [], []
    stream_s, delta, kind = 0.0, None, "non-private"
    for r in range(repeats):
        seed = sc.seed + r
        data = load_drift_stream(scenario, n, seed=seed)
        est, kind = _model(model, data.schema, epsilon, seed, params)
        hits = np.zeros(n, dtype=bool)
        t0 = time.perf_counter()
        for i, (xi, yi) in enumerate(zip(data.X, data.y, strict=True)):
            hits[i] = est.predict_one(xi) == yi
            est.learn_one(xi, yi)
            if progress is not None and (r * n + i + 1) % step == 0:
                progress(r * n + i + 1, repeats * n)
        stream_s += time.perf_counter() - t0
        labels = np.asarray(data.y[-tail:])
        overall.append(float(hits.mean()))
        tails.append(float(hits[-tail:].mean()))
        majority.append(float(max(labels.mean(), 1 - labels.mean())))
        curves.append(hits[: n - n % window].reshape(-1, window).mean(axis=1))
        per_seed.append({"seed": seed, "accuracy": overall[-1], "tail_accuracy": tails[-1]})
        if kind == "dp":
            delta = est.privacy_report().get("delta")
    label = "abrupt" if width == 1 else f"width {width:,}"
    return {"model": model, "dataset": scenario, "epsilon": epsilon, "delta": delta,
            "metric": "accuracy", "mean": float(np.mean(overall)), "std": float(np.std(overall)),
            "repeats": repeats, "folds": 1, "seconds": round(stream_s, 3),
            "rows_per_s": round(repeats * n / stream_s, 1), "params": params,
            "protocol": f"prequential, {n:,} records, drift at {position:,} ({label})",
            "labeled_fraction": 1.0, "kind": kind, "n": n, "drift_at": position,
            "drift_width": width, "window": window, "tail_rows": tail,
            "tail_accuracy": float(np.mean(tails)), "tail_std": float(np.std(tails)),
            "majority_tail": float(np.mean(majority)),
            "curve": np.mean(curves, axis=0).round(4).tolist(), "per_seed": per_seed,
            "scenario": sc.describe()}
