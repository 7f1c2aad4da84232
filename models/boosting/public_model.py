"""The public model file: a trained model's differentially private release, and nothing else.

The file holds only what an S-GBDT or DPBoost model released (its trees as released, the
public schema, the public part of its privacy report, a format tag and a digest), never its
private state; :func:`~dpstream.models.public.load_model` reads one into a predict-only
:class:`PublicBoostedClassifier` or :class:`PublicBoostedRegressor` that predicts as the live
model did, bit for bit. Loading runs no code from the file: it is JSON, checked field by
field. The format (``dpstream-model/1``) is specified in docs/model_format.md.

Design: docs/sgbdt_internals.md#the-public-model-file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from river import base

from ..encoding import RecordEncoder
from ..forest import Forest
from ..public import (
    PUBLIC_FORMAT,
    PublicModelError,
    export_model,
    finite_or_none,
    load_model,
    public_model,
    quiet_report,
    register_public,
)
from ..schema import coerce_schema
from .scores import RawScoreClassifier, RawScoreRegressor

__all__ = ["PUBLIC_FORMAT", "PublicBoostedClassifier", "PublicBoostedRegressor",
           "PublicModelError", "export_model", "load_model", "public_model"]

_BOOSTED = {"SGBDTClassifier": "classifier", "SGBDTRegressor": "regressor",
            "DPBoostClassifier": "classifier", "DPBoostRegressor": "regressor"}


def _trees(forest: Forest) -> dict:
    """The forest's live trees as flat arrays (docs/model_format.md, "Trees")."""
    state = forest.to_dict()
    trees = {"n_trees": len(forest), "max_nodes": state["max_nodes"],
             "max_depth": state["max_depth"], "feature": state["feature"],
             "threshold": finite_or_none(state["threshold"]), "left": state["left"],
             "value": finite_or_none(state["value"])}
    if "vector" in state:
        trees["n_outputs"] = state["n_outputs"]
        trees["vector"] = [finite_or_none(row) for row in np.asarray(state["vector"])]
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


def _export(model: Any) -> dict:
    """The boosted model's fields of its public model file (docs/model_format.md)."""
    name = type(model).__name__
    forest, base_score = _boosted(model)
    encoder = model._encoder
    classes = encoder.classes
    base = np.atleast_1d(np.asarray(base_score, dtype=np.float64))
    multi = classes is not None and len(classes) > 2
    regressor = _BOOSTED[name] == "regressor"
    return {
        "model": name,
        "task": "regression" if regressor else "multiclass" if multi else "binary",
        "schema": json.loads(encoder.schema.model_dump_json()),
        "columns": list(encoder.columns),
        "link": "identity" if regressor else "softmax" if multi else "logistic",
        "base_score": finite_or_none(base) if base.size > 1 else float(base[0]),
        "trees": _trees(forest),
        "privacy": quiet_report(model),
    }


def _read(obj: dict) -> PublicBoostedClassifier | PublicBoostedRegressor:
    cls = PublicBoostedRegressor if _BOOSTED[obj["model"]] == "regressor" else \
        PublicBoostedClassifier
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
    ``predict_many``, ``predict_proba_many`` as the live model's (:func:`load_model`).

    Examples
    --------
    >>> from dpstream.models import SGBDTClassifier
    >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
    ...           "target": {"type": "binary", "values": [False, True]}}
    >>> model = SGBDTClassifier(schema=schema, epsilon=1.0, n_trees=5, round_size=20, seed=0)
    >>> for i in range(200):
    ...     model.learn_one({"a": (i % 10) / 10}, i % 10 >= 5)
    >>> from dpstream.models.public import load_model, public_model
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


class PublicBoostedRegressor(RawScoreRegressor, _PublicBoosted, base.Regressor):
    """A public S-GBDT or DPBoost regressor: ``predict_one`` and ``predict_many`` as the
    live model's (:func:`load_model`)."""


for _name in _BOOSTED:
    register_public(_name, _export, _read)
