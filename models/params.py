"""Hyper-parameters shared by the estimators: the numeric checks (a bad value is a
``ValueError`` naming it; integers: :func:`dpstream.accounting.check_integer`), the short repr
every estimator shows, the guard against private state leaving in a pickle, and the
small-stream rule of thumb (docs/privacy.md#small-streams). Each estimator's parameters are
declared in its table (:mod:`dpstream.models.param_table`, docs/architecture.md#parameters).

>>> check_integer("n_trees", 10, 1), records_needed(1.0), records_needed(0.1)
(10, 5000, 50000)
"""

from __future__ import annotations

import contextvars
import copy
import inspect
import math
import os
import sys
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..accounting import check_delta, check_integer

__all__ = ["CURATOR_REPORT_KEYS", "ClippedInputWarning", "LARGE_DELTA", "PrivateState",
           "PrivateStateError", "public_report",
           "SMALL_STREAM_SCALE", "ShortRepr", "SmallStreamWarning", "check_small_delta",
           "private_state_access", "check_integer", "check_real", "records_needed",
           "short_repr", "quiet_clipped_inputs", "quiet_small_stream", "warn_clipped_input",
           "warn_small_stream"]

#: the smallest delta refused without ``allow_large_delta=True``
LARGE_DELTA = 1e-3
#: C of the small-stream rule: a model wants ``n * epsilon >= C`` (``records_needed``)
SMALL_STREAM_SCALE = 5_000


def check_real(name: str, value: Any, lo: float | None = None, hi: float | None = None, *,
               lo_open: bool = True, hi_open: bool = True) -> float:
    """A finite number within the bounds given (open by default; bools rejected).

    >>> check_real("split_share", 1.0, 0, 1)
    Traceback (most recent call last):
    ...
    ValueError: split_share must be < 1, got 1.0
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {value!r}")
    if hi is not None and (value >= hi if hi_open else value > hi):
        raise ValueError(f"{name} must be {'<' if hi_open else '<='} {hi}, got {value!r}")
    return float(value)


def check_small_delta(value: Any, *, allow_large: bool = False) -> float:
    """A model's delta: in (0, 1) (:func:`~dpstream.accounting.check_delta`), and below
    :data:`LARGE_DELTA` unless ``allow_large``.

    (epsilon, delta)-DP allows, with probability up to delta, anything at all — publishing a
    record outright included — so a useful delta is far below one over the number of records
    (the estimators' default is 5e-8). A delta of 1e-3 or more is almost always a slip (a
    0.5 meant as epsilon, a percentage); ``allow_large_delta=True`` accepts it on purpose.
    """
    if not isinstance(allow_large, (bool, np.bool_)):
        raise ValueError(f"allow_large_delta must be True or False, got {allow_large!r}")
    delta = check_delta(value)   # in (0, 1), a real number
    if delta >= LARGE_DELTA and not allow_large:
        raise ValueError(
            f"delta={value!r} is too large: (epsilon, delta)-DP may fail outright with "
            f"probability delta, so delta must be far below 1 / (number of records) — use "
            f"e.g. delta=1e-6 or the default 5e-8, or pass allow_large_delta=True if a delta "
            f">= {LARGE_DELTA:g} is really meant")
    return delta


# -------------------------------------------------------------------------- repr
def short_repr(model: Any) -> str:
    """``Class(schema=<Schema: ...>, name=value, ...)``: the class, its schema summarised
    and the parameters that differ from their defaults (river's repr lists every parameter
    and dumps the whole schema).

    >>> from dpstream.models import SGBDTClassifier
    >>> from dpstream.models.schema import river_check_schema
    >>> SGBDTClassifier(schema=river_check_schema("binary"), epsilon=0.5, seed=1)
    SGBDTClassifier(schema=<Schema: 9 features, target binary>, epsilon=0.5, seed=1)
    """
    parts = []
    for name, param in inspect.signature(type(model).__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        value = getattr(model, name, param.default)
        if name == "schema":
            encoder = getattr(model, "_encoder", None)
            schema = getattr(encoder, "schema", None)
            parts.append("schema=" + (schema.summary() if schema is not None else repr(value)))
        elif not _same(value, param.default):
            parts.append(f"{name}={value!r}")
    return f"{type(model).__name__}({', '.join(parts)})"


def _same(value: Any, default: Any) -> bool:
    if value is default:
        return True
    if type(value) is not type(default) and not (
            isinstance(value, (int, float)) and isinstance(default, (int, float))
            and not isinstance(value, bool) and not isinstance(default, bool)):
        return False
    try:
        return bool(value == default)
    except (TypeError, ValueError):
        return False


class ShortRepr:
    """Mixin: :func:`short_repr` as ``repr(model)`` (put it before river's ``base.Estimator``
    in the bases)."""

    def __repr__(self) -> str:
        return short_repr(self)


# ------------------------------------------------------------------ small streams
class SmallStreamWarning(UserWarning):
    """A model that learned from a stream too short for its epsilon: its predictions are
    mostly noise (the rule: :func:`records_needed`).

    A model warns once, when its ``privacy_report()`` is read after it has released and fewer
    than ``records_needed(epsilon)`` records have arrived (an arrival count: public). Batch
    training (``learn_many``, the papers' setting, which reuses every record over many
    rounds) does not warn. Silence it with
    ``warnings.filterwarnings("ignore", category=SmallStreamWarning)``.
    """


def records_needed(epsilon: float) -> int:
    """Records a DP model learning from a stream wants before its predictions are worth much
    at this ``epsilon``: ``ceil(SMALL_STREAM_SCALE / epsilon)``, i.e. ``n * epsilon >=
    5,000`` — a rule of thumb from S-GBDT's prequential accuracy on Adult and Phishing
    (``docs/privacy.md``, "Small streams"): at ``n * epsilon`` of 1,250-2,500 it did not beat
    the majority class reliably, at 5,000 it did."""
    return math.ceil(SMALL_STREAM_SCALE / float(epsilon))


#: the models that warned already, or must not (:func:`quiet_small_stream`); kept outside
#: the models so that reading a report never changes a model's state (checkpoints compare it)
_WARNED: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def quiet_small_stream(model: Any) -> None:
    """Never warn for ``model``: the stream service reads the report at every checkpoint,
    from the first records of every stream, and its operator sees the guarantee in the
    status instead."""
    _WARNED[id(model)] = model


def warn_small_stream(model: Any, records: int, epsilon: float, *, stacklevel: int = 3) -> bool:
    """Warn once per model (:class:`SmallStreamWarning`) when ``records`` (a public arrival
    count) is below :func:`records_needed` of ``epsilon``; ``True`` if it warned."""
    if _WARNED.get(id(model)) is model or records >= records_needed(epsilon):
        return False
    _WARNED[id(model)] = model
    warnings.warn(
        f"{type(model).__name__} has learned from {records:,} streamed records at "
        f"epsilon={epsilon:g}; a DP model learning from a stream wants about "
        f"{records_needed(epsilon):,} (n * epsilon >= {SMALL_STREAM_SCALE:,}) before its "
        f"predictions beat noise reliably: expect low, seed-dependent accuracy. A longer stream "
        f"or a larger epsilon helps (docs/privacy.md#small-streams; silence it with "
        f"warnings.filterwarnings('ignore', category=SmallStreamWarning))",
        SmallStreamWarning, stacklevel=stacklevel)
    return True


# ------------------------------------------------------------------ clipped inputs
class ClippedInputWarning(UserWarning):
    """A model was given a value outside the schema's public domain and clipped it to the
    domain (``on_out_of_domain="clip"``, the default).

    The declared domain is what counts: the model's noise and its splits are calibrated to it,
    whatever values it is given. Scaling features before a dpstream model (river's
    ``preprocessing.StandardScaler()`` in a pipeline, say) moves them outside a domain declared
    for the raw values, and the model then sees mostly the domain's ends. A model warns once
    (the first clipped value); the stream service does not warn, it counts clipped values
    (``clipped``, a curator-only read-out). Silence it with
    ``warnings.filterwarnings("ignore", category=ClippedInputWarning)``.

    Examples
    --------
    >>> import warnings
    >>> from dpstream.models import MedianForestClassifier
    >>> model = MedianForestClassifier({"features": {"f": {"type": "numeric", "min": 0, "max": 1}},
    ...                                 "target": {"type": "binary", "values": [False, True]}})
    >>> with warnings.catch_warnings(record=True) as got:
    ...     warnings.simplefilter("always")
    ...     model.learn_one({"f": -1.3}, True); model.learn_one({"f": 2.0}, False)
    >>> [w.category.__name__ for w in got]
    ['ClippedInputWarning']
    >>> print(str(got[0].message)[:78])
    feature 'f' = -1.3 is outside the schema's domain [0, 1] and was clipped to 0:
    """


#: the encoders that warned already, or must not (:func:`quiet_clipped_inputs`); kept outside
#: them, as :data:`_WARNED`, so that a warning never changes a model's pickled state
_CLIPPED: weakref.WeakSet = weakref.WeakSet()


def quiet_clipped_inputs(model: Any) -> None:
    """Never warn about ``model``'s clipped inputs: the stream service counts them instead."""
    _CLIPPED.add(model._encoder)


def warn_clipped_input(encoder: Any, name: Any, value: Any, lo: float, hi: float, *,
                       label: bool = False) -> bool:
    """Warn once per ``encoder`` (a model's: :class:`ClippedInputWarning`) that ``value`` of
    feature ``name`` (or the ``label``) was clipped to ``[lo, hi]``; ``value`` may be an array
    of values, the first outside the domain is named. ``True`` if it warned."""
    if encoder in _CLIPPED:
        return False
    _CLIPPED.add(encoder)
    if isinstance(value, np.ndarray):
        value = value[(value < lo) | (value > hi)][0]
    if isinstance(value, np.generic):
        value = value.item()
    what = "the label" if label else f"feature {name!r}"
    warnings.warn(
        f"{what} = {value!r} is outside the schema's {'target range' if label else 'domain'} "
        f"[{lo:g}, {hi:g}] and was clipped "
        f"to {min(max(value, lo), hi):g}: the schema's declared domain is what counts, not the "
        f"values given. Scaling features before a dpstream model (river's "
        f"preprocessing.StandardScaler(), for example) puts them outside a domain declared for "
        f"the raw values: give the model raw values, or declare the domain of the values it "
        f"gets. (Warned once per model; silence it with warnings.filterwarnings('ignore', "
        f"category=ClippedInputWarning))", ClippedInputWarning, stacklevel=_caller_level())
    return True


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside dpstream's library (the user's call, or
    a pipeline's), counted from the caller of this function."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    inside = tuple(os.path.join(root, p) + os.sep
                   for p in ("accounting", "models", "stream", "connectors"))
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


# ------------------------------------------------------------------ private state
_PRIVATE_ACCESS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "dpstream_private_state_access", default=False)


class PrivateStateError(TypeError):
    """A live model was pickled outside :func:`private_state_access`: its state holds the
    records it learns from (docs/privacy.md, "Taking the model out")."""


@contextmanager
def private_state_access(allowed: bool = True) -> Iterator[None]:
    """Let the code in this block pickle live models: a trusted curator's copy, which holds
    the records a model learns from. Outside it, ``pickle.dumps(model)`` raises
    :class:`PrivateStateError`; ship ``model.export(path)`` instead (the DP release only).

    >>> import pickle
    >>> from dpstream.models import RDTClassifier
    >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
    ...           "target": {"type": "binary", "values": [False, True]}}
    >>> model = RDTClassifier(schema=schema, epsilon=1.0, seed=0)
    >>> pickle.dumps(model)
    Traceback (most recent call last):
    ...
    dpstream.models.params.PrivateStateError: pickling a live RDTClassifier copies its ...
    >>> with private_state_access():
    ...     clone = pickle.loads(pickle.dumps(model))
    >>> type(clone).__name__
    'RDTClassifier'
    """
    token = _PRIVATE_ACCESS.set(bool(allowed))
    try:
        yield
    finally:
        _PRIVATE_ACCESS.reset(token)


class PrivateState:
    """Mixin of every live estimator: pickling refuses outside :func:`private_state_access`
    (a river user's habit, ``pickle.dump(model, f)`` to ship a model, would ship the records
    in it). ``copy.deepcopy`` stays in-process and works; the checkpoint encoder reads the
    state through ``__dpstream_reduce__``, never through pickle."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        if not _PRIVATE_ACCESS.get():
            raise PrivateStateError(
                f"pickling a live {type(self).__name__} copies its private state (the records "
                f"it learns from): ship model.export(path), the DP release only "
                f"(dpstream.load_model reads it); save with the service's checkpoints; a "
                f"trusted curator's copy: inside dpstream.models.private_state_access()")
        return super().__reduce_ex__(protocol)

    def __dpstream_reduce__(self, protocol: int = 4) -> Any:
        """The pickle reduction without the guard (the safe checkpoint encoder's)."""
        return object.__reduce_ex__(self, protocol)

    def __deepcopy__(self, memo: dict) -> Any:
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        state = copy.deepcopy(self.__getstate__(), memo)
        if hasattr(new, "__setstate__"):
            new.__setstate__(state)
        else:   # pragma: no cover - every estimator's state is its __dict__
            new.__dict__.update(state)
        return new


# ------------------------------------------------------------------ public reports
#: Keys of a model's privacy report (at any depth: ``drift``, ``feature_grid``, a member's
#: ``local`` report) that are exact functions of private data: the model's counts of valid
#: records it was given, learned, buffered, holding or out of budget, S-GBDT's per-record
#: spend, the round interval, the counts of unlabeled and public-flagged records, and its
#: feature grid's
#: records (those whose budget could afford the release: their gradients decide) and records
#: learned at the release. A report key that is an exact count of private data takes one of
#: these names (``tests/test_report_keys.py`` compares every other key on neighbouring
#: streams); generic names such as ``records`` are not listed, as window forests publish
#: their windows' sizes under them.
CURATOR_REPORT_KEYS: frozenset[str] = frozenset({
    "records_seen", "records_learned", "records_pending", "records_active",
    "records_exhausted", "records_evicted", "records_dropped", "records_filtered",
    "init_score_records", "spend_fraction", "spend_by_age", "round_interval",
    "drift_forgotten_records", "records_in_release", "records_learned_at_release",
    "unlabeled_seen", "public_seen",
})


def public_report(report: dict) -> dict:
    """``report`` (a privacy report) without :data:`CURATOR_REPORT_KEYS`, at any depth.

    >>> public_report({"epsilon": 1.0, "spend_fraction": {"max": 0.3}, "drift": {
    ...     "releases": 4, "records_dropped": 7}})
    {'epsilon': 1.0, 'drift': {'releases': 4}}
    """
    def cut(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items() if k not in CURATOR_REPORT_KEYS}
        if isinstance(value, list):
            return [cut(v) for v in value]
        return value
    return cut(report)
