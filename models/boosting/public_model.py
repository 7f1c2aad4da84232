"""The public model file: a trained model's differentially private release, and nothing else.

A live model holds private state beside its release: S-GBDT's pool of records and their
gradients, a window forest's open window, generators, unreleased sums, curator counts. The
public model file (``model.export(path)``, ``dpstream export``) holds only what the model
released: its trees as released (structure, thresholds from the public schema or from DP
releases, noisy leaf values), the public schema, the public part of its privacy report, a
format tag and a content digest. :func:`load_model` reads one into a predict-only estimator
(:class:`PublicBoostedClassifier`, :class:`PublicBoostedRegressor`) that gives the live
model's predictions, bit for bit: it routes with the same array forest
(:class:`~dpstream.models.forest.Forest`) and encodes records with the same encoder. Loading
runs no code from the file: it is JSON, read by :func:`json.loads` and checked field by field.

The format (``dpstream-model/1``) is specified in docs/model_format.md, for readers in any
language. This release exports the boosted models (S-GBDT classifiers, binary and multi-class,
and regressors; DPBoost); the window forests raise a clear error.

Examples
--------
>>> from dpstream.models import SGBDTClassifier
>>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
...           "target": {"type": "binary", "values": [False, True]}}
>>> model = SGBDTClassifier(schema=schema, epsilon=1.0, n_trees=5, round_size=20, seed=0)
>>> for i in range(200):
...     model.learn_one({"a": (i % 10) / 10}, i % 10 >= 5)
>>> public = load_model(public_model(model))
>>> [public.predict_one({"a": v}) == model.predict_one({"a": v}) for v in (0.1, 0.9)]
[True, True]
>>> public.predict_proba_one({"a": 0.9}) == model.predict_proba_one({"a": 0.9})
True
>>> public.learn_one({"a": 0.5}, True)
Traceback (most recent call last):
...
TypeError: a public model is predict-only: it holds the release, not the records to learn from
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from river import base

from ..encoding import RecordEncoder
from ..forest import Forest
from ..params import public_report
from ..schema import coerce_schema
from .scores import RawScoreClassifier, RawScoreRegressor

__all__ = ["PUBLIC_FORMAT", "PublicBoostedClassifier", "PublicBoostedRegressor",
           "PublicModelError", "export_model", "load_model", "public_model"]

#: the format tag of a public model file (docs/model_format.md)
PUBLIC_FORMAT = "dpstream-model/1"

_BOOSTED = {"SGBDTClassifier": "classifier", "SGBDTRegressor": "regressor",
            "DPBoostClassifier": "classifier", "DPBoostRegressor": "regressor"}


class PublicModelError(ValueError):
    """A public model file that is malformed, of another format, or altered (its digest)."""


def _finite_or_none(values: np.ndarray) -> list:
    """Floats for JSON: ``+inf`` (a leaf's threshold) as ``null``; NaN is refused."""
    out = np.asarray(values, dtype=np.float64)
    if np.isnan(out).any():
        raise ValueError("a released value is NaN: the model cannot be exported")
    return [None if math.isinf(v) else float(v) for v in out.tolist()]


def _trees(forest: Forest) -> dict:
    """The forest's live trees as flat arrays (docs/model_format.md, "Trees")."""
    state = forest.to_dict()
    trees = {"n_trees": len(forest), "max_nodes": state["max_nodes"],
             "max_depth": state["max_depth"], "feature": state["feature"],
             "threshold": _finite_or_none(state["threshold"]), "left": state["left"],
             "value": _finite_or_none(state["value"])}
    if "vector" in state:
        trees["n_outputs"] = state["n_outputs"]
        trees["vector"] = [_finite_or_none(row) for row in np.asarray(state["vector"])]
    return trees


def _boosted(model: Any) -> tuple[Forest, Any]:
    """The forest and the initial score a boosted model predicts with."""
    if hasattr(model, "_forest"):   # DPBoost
        return model._forest, (model.init_score or 0.0)
    engine = model._engine   # S-GBDT: the current generation's engine (None: untrained)
    if engine is None:
        k = len(model._encoder.classes or ())   # (0: a regressor)
        if k > 2:   # a multi-class booster's raw score is a K-vector, 0 before any round
            return Forest(max_nodes=1, max_depth=0, n_outputs=k), np.zeros(k)
        return Forest(max_nodes=1, max_depth=0), 0.0
    return engine.forest, engine.base_score


def public_model(model: Any) -> dict:
    """The release of ``model`` as the public model file's JSON object, with its digest.

    Raises
    ------
    TypeError
        For a model the format does not cover yet (the window forests) or not a dpstream
        model at all.
    """
    name = type(model).__name__
    if name not in _BOOSTED:
        raise TypeError(f"{name} cannot be exported to a public model file in this release: "
                        f"the format covers {', '.join(sorted(_BOOSTED))} (the window forests "
                        f"follow; see docs/model_format.md)")
    forest, base_score = _boosted(model)
    encoder = model._encoder
    classes = encoder.classes
    base = np.atleast_1d(np.asarray(base_score, dtype=np.float64))
    out = {
        "format": PUBLIC_FORMAT,
        "model": name,
        "task": ("regression" if _BOOSTED[name] == "regressor" else
                 "multiclass" if classes is not None and len(classes) > 2 else "binary"),
        "schema": json.loads(encoder.schema.model_dump_json()),
        "columns": list(encoder.columns),
        "link": ("identity" if _BOOSTED[name] == "regressor" else
                 "softmax" if classes is not None and len(classes) > 2 else "logistic"),
        "base_score": _finite_or_none(base) if base.size > 1 else float(base[0]),
        "trees": _trees(forest),
        "privacy": public_report(_quiet_report(model)),
    }
    out["digest"] = _digest(out)
    return out


def _quiet_report(model: Any) -> dict:
    import warnings

    with warnings.catch_warnings():   # (a small stream's warning: the report is the point)
        warnings.simplefilter("ignore")
        return json.loads(json.dumps(model.privacy_report(), default=_jsonable))


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def _digest(obj: dict) -> str:
    """SHA-256 of the canonical JSON of every field but ``digest`` (sorted keys, no spaces)."""
    body = {k: v for k, v in obj.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def export_model(model: Any, path: str | Path) -> dict:
    """Write the public model file of ``model`` to ``path`` (JSON); returns its object."""
    obj = public_model(model)
    Path(path).write_text(json.dumps(obj, allow_nan=False, indent=None) + "\n",
                          encoding="utf-8")
    return obj


def load_model(source: str | Path | Mapping) -> PublicBoostedClassifier | PublicBoostedRegressor:
    """A predict-only estimator from a public model file (a path, or its parsed object).

    Raises
    ------
    PublicModelError
        When the file is not a ``dpstream-model/1`` file, a field is malformed, or the digest
        does not match its content.
    """
    if isinstance(source, Mapping):
        obj = dict(source)
    else:
        try:
            obj = json.loads(Path(source).read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise PublicModelError(f"{source}: not JSON ({exc})") from None
    if not isinstance(obj, dict) or obj.get("format") != PUBLIC_FORMAT:
        raise PublicModelError(f"not a {PUBLIC_FORMAT} file (format "
                               f"{obj.get('format') if isinstance(obj, dict) else None!r})")
    if obj.get("digest") != _digest(obj):
        raise PublicModelError("the digest does not match the content: the file was altered "
                               "or truncated")
    kind = _BOOSTED.get(obj.get("model"))
    if kind is None:
        raise PublicModelError(f"unknown model {obj.get('model')!r}")
    cls = PublicBoostedRegressor if kind == "regressor" else PublicBoostedClassifier
    return cls(obj)


def _forest(trees: dict) -> Forest:
    try:
        n, k = int(trees["n_trees"]), int(trees["max_nodes"])
        state = {"max_nodes": k, "max_depth": int(trees["max_depth"]),
                 "feature": [int(v) for v in trees["feature"]],
                 "threshold": [math.inf if v is None else float(v) for v in trees["threshold"]],
                 "left": [int(v) for v in trees["left"]],
                 "value": [float(v) for v in trees["value"]]}
        if "vector" in trees:
            state["n_outputs"] = int(trees["n_outputs"])
            state["vector"] = np.array([[float(v) for v in row] for row in trees["vector"]],
                                       dtype=np.float64).reshape(n * k, state["n_outputs"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PublicModelError(f"malformed trees: {exc}") from None
    if any(len(state[f]) != n * k for f in ("feature", "threshold", "left", "value")):
        raise PublicModelError("malformed trees: every array holds n_trees * max_nodes values")
    local = np.array(state["left"], dtype=np.int64).reshape(max(n, 0), k) if n else None
    if local is not None and (local.min() < 0 or (local >= k).any()
                              or ((local != np.arange(k)) & (local + 1 >= k)).any()):
        raise PublicModelError("malformed trees: a child index falls outside its tree")
    if n and not all(0 <= f < 10**6 for f in state["feature"]):
        raise PublicModelError("malformed trees: a negative feature column")
    return Forest.from_dict(state)


class _PublicBoosted(base.Estimator):
    """What both public boosted estimators share: the encoder, the forest and the report."""

    def __init__(self, public: dict):
        self.public = public
        self._encoder = RecordEncoder(coerce_schema(public["schema"]))
        if list(self._encoder.columns) != list(public.get("columns", [])):
            raise PublicModelError("the schema's encoded columns differ from the file's "
                                   "'columns'")
        self._forest_ = _forest(public["trees"])
        if self._forest_.n_trees and int(np.max(self._forest_.feature[
                :self._forest_.n_trees * self._forest_.max_nodes])) >= self._encoder.n_columns:
            raise PublicModelError("malformed trees: a feature column the schema does not have")
        base_score = public["base_score"]
        self._base = (np.array([float(v) for v in base_score]) if isinstance(base_score, list)
                      else float(base_score))

    def learn_one(self, x: Mapping, y: Any = None, **kwargs) -> None:
        raise TypeError("a public model is predict-only: it holds the release, not the "
                        "records to learn from")

    def privacy_report(self) -> dict:
        """The public privacy report the file carries."""
        return dict(self.public["privacy"])

    def _raw_one(self, x: Mapping) -> Any:
        row = self._encoder.encode_one(x)
        f = self._forest_
        if f.vector is not None:
            return self._base + f.predict_vector_sum_one(row)
        return self._base + f.predict_sum_one(row)

    def _raw_many(self, X: Any) -> np.ndarray:
        Xe = self._encoder.encode_many(X)
        f = self._forest_
        if f.vector is not None:
            return self._base + f.predict_vector_sum(Xe)
        return self._base + f.predict_sum(Xe)

    def __str__(self) -> str:
        return repr(self)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.public['model']}, "
                f"{self.public['trees']['n_trees']} trees, epsilon="
                f"{self.public['privacy'].get('epsilon')})")


class PublicBoostedClassifier(RawScoreClassifier, _PublicBoosted, base.Classifier):
    """A public S-GBDT or DPBoost classifier: ``predict_one``, ``predict_proba_one``,
    ``predict_many``, ``predict_proba_many`` as the live model's (:func:`load_model`)."""


class PublicBoostedRegressor(RawScoreRegressor, _PublicBoosted, base.Regressor):
    """A public S-GBDT or DPBoost regressor: ``predict_one`` and ``predict_many`` as the
    live model's (:func:`load_model`)."""
