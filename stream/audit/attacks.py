"""The attacks of ``dpstream audit``: one score per canary from the released model only
(the public model file), and the public schedules that say which slots of a stream reach it
(how a run goes: docs/privacy.md#auditing).

:func:`schedule` gives a model's public :class:`Schedule` (S-GBDT's rounds, DPBoost's and the
window forests' windows); :func:`attack` scores each canary where it can act, with
:func:`model_scores` (the whole model's probability of the canary's label) as the fallback
when the released trees or windows do not match the schedule. What each family's attack
scores and why: docs/audit.md#the-attacks.
"""

from __future__ import annotations

import json
import warnings
from typing import Any, NamedTuple

import numpy as np

from ...models.encoding import RecordEncoder
from ...models.public import digest, load_model
from ...models.schema import Schema
from .canaries import AuditStream

__all__ = ["Schedule", "schedule", "attack", "model_scores", "ATTACKS"]

#: the attack each family gets (and its one-line description for reports)
ATTACKS = {
    "trees": "sum of the leaf values, toward the canary's label, of the released trees its "
             "rounds (or window) trained",
    "window": "probability of the canary's label under the released window it fell in",
    "model": "probability of the canary's label under the whole released model "
             "(a regressor: minus the absolute error)",
}


class Schedule(NamedTuple):
    """What the public schedule says about a stream of ``total`` messages: the ``kind`` of
    attack, the ``eligible`` slots (whose canary reaches the released model) and the
    family's ``detail`` (round counts, window bounds)."""
    kind: str
    total: int
    eligible: np.ndarray
    detail: dict


def schedule(model_name: str, model: Any, total: int, canaries: int = 0) -> Schedule:
    """The public schedule of ``model`` (a fresh model of the audited configuration, used
    for its parameters and, for S-GBDT, for a dry run of its rounds) over ``total``
    messages of which ``canaries`` are canaries' slots.

    Examples
    --------
    RDT's windows close after 250, 500, 1,000, ... messages and the newest two vote, so on a
    stream of 21,000 messages canaries go in messages 3,750 to 15,749:

    >>> from dpstream.stream.runner import build_model
    >>> from dpstream.stream.audit.canaries import SYNTHETIC_SCHEMA
    >>> sched = schedule("rdt", build_model("rdt", SYNTHETIC_SCHEMA, epsilon=1.0), 21_000)
    >>> sched.kind, sched.detail["starts"], sched.detail["ends"]
    ('window', [3750, 7750], [7750, 15750])
    """
    if model_name == "sgbdt":
        return _rounds(model, total)
    if model_name == "dpboost":
        # DPBoost counts learned records: the background alone fills this many full windows
        span = int(model.window_size)
        full = (total - canaries) // span * span
        trees = int(model.n_ensembles) * int(model.trees_per_ensemble)
        return Schedule("trees", total, np.arange(full),
                        {"window_size": span, "trees_per_window": trees})
    return _windows(model, total)


def _rounds(model: Any, total: int) -> Schedule:
    """S-GBDT's rounds: ``after[a]`` rounds have run once message ``a`` is in."""
    after = np.empty(total, dtype=np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a in range(total):
            model.advance(1)
            after[a] = model.training_rounds
        kept = int(model.privacy_report().get("trees") or 0)
    rounds = int(after[-1]) if total else 0
    first = np.concatenate(([0], after[:-1]))      # the first round message a can enter
    span = int(model.n_trees)
    # the young phase's trees and the oldest blocks retire: the kept trees are the last rounds
    ok = (first >= rounds - kept) & (first + span <= rounds)
    return Schedule("trees", total, np.flatnonzero(ok),
                    {"first_round": first, "rounds": rounds, "span": span})


def _windows(model: Any, total: int) -> Schedule:
    """A window forest's tumbling windows: the k-th closes after ``min(window_size,
    warmup 2^k)`` messages; the newest ``max_windows`` closed ones vote."""
    if getattr(model, "window_seconds", None) is not None or model.window_size is None:
        raise ValueError("the audit needs windows that close on message counts (no "
                         "window_seconds, a window_size)")
    bounds, start, k = [], 0, 0
    while True:
        size = int(model.window_size if model.warmup is None
                   else min(model.window_size, model.warmup * 2 ** min(k, 40)))
        if start + size > total:
            break
        bounds.append((start, start + size))
        start, k = start + size, k + 1
    bounds = bounds[-(model.max_windows or len(bounds)):] if bounds else []
    eligible = np.concatenate([np.arange(s, e) for s, e in bounds]) if bounds \
        else np.zeros(0, dtype=np.int64)
    return Schedule("window", total, eligible, {"starts": [s for s, _ in bounds],
                                                "ends": [e for _, e in bounds]})


# ------------------------------------------------------------------ scores
def attack(public: dict, stream: AuditStream, sched: Schedule, schema: Schema
           ) -> tuple[np.ndarray, str]:
    """Scores of the canaries (higher: more likely included) and the attack that made them
    (a key of :data:`ATTACKS`), from the public model file's object ``public`` only."""
    if sched.kind == "trees":
        scores = _tree_scores(public, stream, sched, schema)
        if scores is not None:
            return scores, "trees"
    elif sched.kind == "window":
        scores = _window_scores(public, stream, sched, schema)
        if scores is not None:
            return scores, "window"
    return model_scores(load_model(public), stream.points, stream.labels, schema), "model"


def model_scores(model: Any, points: list[dict], labels: list, schema: Schema) -> np.ndarray:
    """The whole model's probability of each canary's label at its point (a regressor:
    minus the absolute error). ``model``: anything with ``predict_proba_one`` /
    ``predict_one``."""
    if schema.target.type == "numeric":
        return np.array([-abs(float(model.predict_one(x)) - float(y))
                         for x, y in zip(points, labels, strict=True)])
    return np.array([float(model.predict_proba_one(x).get(y, 0.0))
                     for x, y in zip(points, labels, strict=True)])


def _leaf_values(trees: dict, rows: np.ndarray) -> np.ndarray:
    """Per row and tree the leaf value (or K-vector) the row reaches: the routing of
    docs/model_format.md, "Trees", on the flat arrays."""
    n, stride = int(trees["n_trees"]), int(trees["max_nodes"])
    feature = np.asarray(trees["feature"], dtype=np.int64)
    threshold = np.array([np.inf if t is None else t for t in trees["threshold"]])
    left = np.asarray(trees["left"], dtype=np.int64)
    base = np.arange(n, dtype=np.int64) * stride
    node = np.zeros((rows.shape[0], n), dtype=np.int64)       # local index per tree
    for _ in range(int(trees["max_depth"])):
        g = base[None, :] + node
        lf = left[g]
        leaf = lf == node
        x = np.take_along_axis(rows, feature[g], axis=1)
        go_left = x <= threshold[g]                             # NaN compares false: right
        node = np.where(leaf, node, np.where(go_left, lf, lf + 1))
    g = base[None, :] + node
    if "vector" in trees:
        return np.asarray(trees["vector"], dtype=np.float64)[g]
    return np.asarray(trees["value"], dtype=np.float64)[g]


def _direction(public: dict, labels: list, schema: Schema, values: np.ndarray) -> np.ndarray:
    """Leaf values turned toward each canary's label: (rows, trees)."""
    t = schema.target
    if t.type == "numeric":
        mid = (float(t.min) + float(t.max)) / 2.0
        return values * np.where(np.array([float(y) for y in labels]) >= mid, 1.0, -1.0)[:, None]
    classes = [json.dumps(v) for v in t.values]
    idx = np.array([classes.index(json.dumps(y)) for y in labels])
    if values.ndim == 3:                                        # K-vector leaves
        own = np.take_along_axis(values, idx[:, None, None], axis=2)[..., 0]
        return own - values.mean(axis=2)
    return values * np.where(idx == 1, 1.0, -1.0)[:, None]


def _tree_scores(public: dict, stream: AuditStream, sched: Schedule, schema: Schema
                 ) -> np.ndarray | None:
    trees = public.get("trees")
    if not trees or int(trees["n_trees"]) == 0:
        return None
    n = int(trees["n_trees"])
    d = sched.detail
    slots = np.asarray(stream.slots)
    if "first_round" in d:            # S-GBDT: the kept trees are the last n rounds
        offset = d["rounds"] - n
        if offset < 0:
            return None
        lo = d["first_round"][slots] - offset
        hi = lo + d["span"]
    else:                             # DPBoost: the learned position, canaries at 1/2
        per = d["trees_per_window"]
        if n % per:
            return None               # not whole windows' trees (retired ones)
        before = np.searchsorted(slots, slots)                  # canaries before each
        window = (slots - before // 2) // d["window_size"]
        lo = window * per
        hi = lo + per
    if (hi > n).any() or (lo < 0).any():
        return None
    rows = RecordEncoder(schema).encode_many(stream.points)
    values = _direction(public, stream.labels, schema, _leaf_values(trees, rows))
    cols = np.arange(n)[None, :]
    inside = (cols >= lo[:, None]) & (cols < hi[:, None])
    return (values * inside).sum(axis=1)


def _window_scores(public: dict, stream: AuditStream, sched: Schedule, schema: Schema
                   ) -> np.ndarray | None:
    from ...models.windows.public_windows import from_plain, to_plain

    state = from_plain(public["windows"])
    windows = state.get("windows", [])
    sizes = [e - s for s, e in zip(sched.detail["starts"], sched.detail["ends"], strict=True)]
    if [int(w["labeled"]) for w in windows] != sizes:
        return None                   # not the public schedule's windows: a drift restart
    which = np.searchsorted(np.asarray(sched.detail["ends"]), stream.slots, side="right")
    per = np.zeros((len(stream.points), len(windows)))
    for j, win in enumerate(windows):
        one = {**public, "windows": to_plain({**state, "windows": [win]})}
        one["digest"] = digest(one)
        per[:, j] = model_scores(load_model(one), stream.points, stream.labels, schema)
    return per[np.arange(len(stream.points)), which]
