"""The window forests' public model file: every kept window as released (its trees, released
tables, public vote counts and data-independent routing state), written through a codec that
builds only the window family's own classes, and its predict-only reader
(:class:`PublicWindowForest`). The format: docs/model_format.md, "Window forests".
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from river import base

from ..encoding import is_frame
from ..grid import FeatureGrid
from ..public import PublicModelError, finite_or_none, quiet_report, register_public
from ..schema import coerce_schema
from .buckets import BucketTable
from .greedy_forest import GreedyForestClassifier
from .median_forest import MedianForestClassifier
from .random_forest import RandomDecisionForestClassifier
from .random_trees import ImplicitRandomTrees, KeyedTree, LeafTable
from .rdt import CenterTable, RDTClassifier, RDTTree
from .window_exchange import _PRIVATE_EXTRA, _ROUTING, WindowEnsemble, window_share
from .window_forest import WindowForestBase, _Window
from .window_trees import WindowTree

__all__ = ["PublicWindowForest", "from_plain", "load_window_model", "to_plain"]

#: the classes a window may hold: the only ones a file can make the reader build
_CLASSES: dict[str, type] = {cls.__name__: cls for cls in (
    WindowTree, KeyedTree, RDTTree, BucketTable, LeafTable, CenterTable, ImplicitRandomTrees,
    FeatureGrid)}
#: per window, what prediction reads (the rest of a window's metadata stays behind)
_WINDOW_FIELDS = ("kind", "generation", "labeled", "trees")
#: parameters that are not the model's public configuration
_NOT_CONFIG = ("schema", "seed")


# ---------------------------------------------------------------- the codec
def to_plain(obj: Any, _memo: dict | None = None) -> Any:
    """``obj`` as JSON values: arrays as ``{"@array": dtype, "shape", "data"}``, the window
    family's objects as ``{"@object": name, "@id": n, "state"}`` (a repeated object as
    ``{"@ref": n}``), tuples, non-string keys and non-finite floats tagged.

    >>> to_plain({"a": (1, float("inf")), 2: np.array([1.5, np.nan])})
    {'@dict': [['a', {'@tuple': [1, {'@float': 'inf'}]}], [2, {'@array': '<f8', 'shape': [2], \
'data': [1.5, 'nan']}]]}
    """
    memo = {} if _memo is None else _memo
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, np.bool_):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else {"@float": repr(float(obj))}
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise TypeError(f"an array of dtype {obj.dtype} cannot be exported")
        data = obj.ravel().tolist()
        if obj.dtype.kind == "f":
            data = [v if math.isfinite(v) else repr(v) for v in data]
        return {"@array": obj.dtype.str, "shape": list(obj.shape), "data": data}
    if isinstance(obj, tuple):
        return {"@tuple": [to_plain(v, memo) for v in obj]}
    if isinstance(obj, list):
        return [to_plain(v, memo) for v in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("@") for k in obj):
            return {k: to_plain(v, memo) for k, v in obj.items()}
        return {"@dict": [[to_plain(k, memo), to_plain(v, memo)] for k, v in obj.items()]}
    name = type(obj).__name__
    if _CLASSES.get(name) is not type(obj):
        raise TypeError(f"a {type(obj).__qualname__} cannot go into a public model file")
    if id(obj) in memo:
        return {"@ref": memo[id(obj)][0]}
    memo[id(obj)] = (len(memo), obj)   # (the object is held: its id stays unique)
    getstate = getattr(type(obj), "__getstate__", None)
    state = obj.__getstate__() if getstate is not object.__getstate__ else dict(obj.__dict__)
    return {"@object": name, "@id": memo[id(obj)][0], "state": to_plain(state, memo)}


def from_plain(tree: Any, _memo: dict | None = None) -> Any:
    """The objects :func:`to_plain` wrote (only the window family's classes are built).

    >>> from_plain(to_plain({"a": (1, float("inf")), 2: np.array([1.5, np.nan])}))
    {'a': (1, inf), 2: array([1.5, nan])}
    """
    memo = {} if _memo is None else _memo
    if isinstance(tree, list):
        return [from_plain(v, memo) for v in tree]
    if not isinstance(tree, dict):
        return tree
    if "@array" in tree:
        dtype = np.dtype(str(tree["@array"]))
        if dtype.kind not in "biuf":
            raise PublicModelError(f"an array of dtype {dtype} in the file")
        data = tree["data"]
        if dtype.kind == "f":
            data = [float(v) if isinstance(v, str) else v for v in data]
        return np.array(data, dtype=dtype).reshape([int(s) for s in tree["shape"]])
    if "@float" in tree:
        return float(tree["@float"])
    if "@tuple" in tree:
        return tuple(from_plain(v, memo) for v in tree["@tuple"])
    if "@dict" in tree:
        return {_key(from_plain(k, memo)): from_plain(v, memo) for k, v in tree["@dict"]}
    if "@ref" in tree:
        try:
            return memo[int(tree["@ref"])]
        except KeyError:
            raise PublicModelError(f"a reference to object {tree['@ref']} before it") from None
    if "@object" in tree:
        cls = _CLASSES.get(tree["@object"])
        if cls is None:
            raise PublicModelError(f"the file names a class {tree['@object']!r} that a "
                                   f"window does not hold")
        obj = cls.__new__(cls)
        memo[int(tree["@id"])] = obj
        state = from_plain(tree["state"], memo)
        if not isinstance(state, dict):
            raise PublicModelError(f"a {cls.__name__}'s state is not an object")
        if getattr(cls, "__setstate__", None) is not getattr(object, "__setstate__", None):
            obj.__setstate__(state)
        else:
            obj.__dict__.update(state)
        return obj
    return {k: from_plain(v, memo) for k, v in tree.items()}


def _key(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


# ---------------------------------------------------------------- export
def _public_extra(extra: dict) -> dict:
    """A window's metadata less what is not a DP release (as the model topic sends it)."""
    return {k: v for k, v in extra.items() if k not in _PRIVATE_EXTRA}


def _window(win: _Window) -> dict:
    return {"kind": win.kind, "generation": int(win.generation), "labeled": int(win.labeled),
            "trees": list(win.trees), "extra": _public_extra(win.extra)}


def _config(model: WindowForestBase) -> dict:
    params = {k: v for k, v in model._get_params().items() if k not in _NOT_CONFIG}
    try:
        return json.loads(json.dumps(params, allow_nan=False))
    except (TypeError, ValueError) as exc:   # pragma: no cover - every parameter is JSON
        raise TypeError(f"a parameter of {type(model).__name__} is not JSON: {exc}") from None


def _flat_trees(parts: list[tuple[Any, np.ndarray, float]], k: int) -> dict:
    """The median forest's kept trees as flat arrays with ``vector`` leaves (class scores:
    the leaf's class distribution times its window's weight)."""
    feature, threshold, left, vector = [], [], [], []
    stride = max([f.max_nodes for f, _, _ in parts], default=1)
    depth = max([f.max_depth for f, _, _ in parts], default=0)
    n = 0
    for forest, table, weight in parts:
        m = forest.max_nodes
        for t in range(len(forest)):
            lo = t * m
            pad = stride - m
            feature += forest.feature[lo:lo + m].tolist() + [0] * pad
            threshold += forest.threshold[lo:lo + m].tolist() + [math.inf] * pad
            local = forest.left[lo:lo + m] - lo
            left += local.tolist() + list(range(m, stride))
            vector += (table[lo:lo + m] * weight).tolist() + [[0.0] * k] * pad
            n += 1
    return {"n_trees": n, "max_nodes": stride, "max_depth": depth, "feature": feature,
            "threshold": finite_or_none(threshold), "left": left, "value": [0.0] * len(left),
            "n_outputs": k, "vector": [finite_or_none(row) for row in vector]}


def _export(source: Any) -> dict:
    """The fields of a window forest's (or a member union's) public model file."""
    union = isinstance(source, WindowEnsemble)
    model = source.model if union else source
    encoder = model._encoder
    k = len(encoder.classes)
    if union:
        kept = source._serving()
        state = {"windows": [{**{f: s[f] for f in _WINDOW_FIELDS},
                              "extra": _public_extra(s["extra"]), "routing": s["routing"],
                              "weight": float(w), "share": window_share(s)}
                             for s, _, w in kept]}
        parts = [(v, float(w)) for _, v, w in kept]
    else:
        state = {"windows": [_window(w) for w in model._windows],
                 "routing": {a: getattr(model, a) for a in _ROUTING if hasattr(model, a)}}
        parts = [(model, 1.0)]
    flat = isinstance(model, MedianForestClassifier)   # (keyed trees have no flat form)
    report = quiet_report(source)
    report.pop("local", None)   # (a member's own report: its windows are in the union's)
    if isinstance(report.get("windows"), list):   # the tables are in the file: scalars here
        report["windows"] = [{a: b for a, b in w.items() if isinstance(b, (int, float, str))}
                             for w in report["windows"]]
    return {
        "model": type(model).__name__,
        "task": "multiclass" if k > 2 else "binary",
        "schema": json.loads(encoder.schema.model_dump_json()),
        "columns": list(encoder.columns),
        "link": "normalize",
        "combine": "union" if union else "model",
        "params": _config(model),
        "base_score": [0.0] * k,
        "trees": _flat_trees([(*m._serve(), w) for m, w in parts], k) if flat else None,
        "windows": to_plain(state),
        "privacy": report,
    }


# ---------------------------------------------------------------- reading
class PublicWindowForest(base.Classifier):
    """A predict-only window forest (or member union) from a public model file
    (:func:`~dpstream.models.public.load_model`): ``predict_one``, ``predict_proba_one``,
    ``predict_many`` and ``predict_proba_many`` as the live model's, bit for bit (it predicts
    through the model's own code, over the file's windows).

    Parameters
    ----------
    public
        The public model file's object (format and digest checked by ``load_model``).

    Examples
    --------
    >>> from dpstream.models import MedianForestClassifier
    >>> from dpstream.models.public import load_model, public_model
    >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
    ...           "target": {"type": "binary", "values": [False, True]}}
    >>> model = MedianForestClassifier(schema=schema, epsilon=1.0, n_trees=2, window_size=50,
    ...                                warmup=None, drift=False, seed=1)
    >>> for i in range(200):
    ...     model.learn_one({"a": (i % 10) / 10}, i % 10 >= 5)
    >>> public = load_model(public_model(model))
    >>> [public.predict_one({"a": v}) for v in (0.1, 0.9)]
    [False, True]
    >>> public.predict_proba_one({"a": 0.9}) == model.predict_proba_one({"a": 0.9})
    True
    """

    def __init__(self, public: dict):
        self.public = public
        cls = _MODELS[public["model"]]
        schema = coerce_schema(public["schema"])
        try:
            model = cls(schema=schema, **dict(public.get("params") or {}))
        except (TypeError, ValueError) as exc:
            raise PublicModelError(f"the file's parameters do not make a "
                                   f"{cls.__name__}: {exc}") from None
        if list(model._encoder.columns) != list(public.get("columns", [])):
            raise PublicModelError("the schema's encoded columns differ from the file's "
                                   "'columns'")
        state = from_plain(public["windows"])
        try:
            if public.get("combine") == "union":
                self._union = WindowEnsemble(model, "public")
                self._union._kept = [(s, self._union._view({**s, "records": 0}),
                                      float(s["weight"])) for s in state["windows"]]
                self._model = None
            else:
                self._union = None
                model.__dict__.update(state["routing"])
                model._windows = [_Window(trees=list(w["trees"]), records=0,
                                          labeled=int(w["labeled"]), kind=w["kind"],
                                          extra=dict(w["extra"]),
                                          generation=int(w["generation"]))
                                  for w in state["windows"]]
                model._serving = None
                self._model = model
        except (KeyError, TypeError, AttributeError) as exc:
            raise PublicModelError(f"malformed windows: {exc!r}") from None
        self._encoder = model._encoder

    def learn_one(self, x: Mapping, y: Any = None, **kwargs) -> None:
        raise TypeError("a public model is predict-only: it holds the release, not the "
                        "records to learn from")

    def privacy_report(self) -> dict:
        """The public privacy report the file carries."""
        return dict(self.public["privacy"])

    def _row_scores(self, x: Mapping) -> np.ndarray:
        row = self._encoder._row(x)
        arr = np.fromiter(row, np.float64, len(row))
        if self._union is not None:
            return self._union.scores_row(arr)
        return self._model._score_row(arr)

    def _batch_scores(self, X: Any) -> np.ndarray:
        Xe = self._encoder.encode_many(X)
        if self._union is not None:
            out = np.zeros((Xe.shape[0], len(self._encoder.classes)))
            for _, view, weight in self._union._serving():
                out += weight * view._scores(Xe)
            return out
        return self._model._scores(Xe)

    def predict_proba_one(self, x: Mapping, **kwargs) -> dict:
        classes = self._encoder.classes
        s = np.maximum(self._row_scores(x), 0.0)
        total = s.sum()
        if total <= 0:
            return {c: 1.0 / len(classes) for c in classes}
        return {c: float(v / total) for c, v in zip(classes, s, strict=True)}

    def predict_one(self, x: Mapping, **kwargs) -> Any:
        return self._encoder.classes[int(self._row_scores(x).argmax())]

    def predict_many(self, X: Any) -> Any:
        """Classes of a batch (a pandas Series for a DataFrame, as the live model's)."""
        scores = self._batch_scores(X)
        out = np.array(self._encoder.classes, dtype=object).take(np.argmax(scores, axis=1))
        if is_frame(X):
            import pandas as pd
            return pd.Series(out, index=X.index)
        return out

    def predict_proba_many(self, X: Any) -> Any:
        """Class probabilities of a batch, as :meth:`predict_proba_one` row by row: a pandas
        DataFrame with a column per class (a dict of columns without pandas)."""
        classes = self._encoder.classes
        s = np.maximum(self._batch_scores(X), 0.0)
        total = s.sum(axis=1, keepdims=True)
        p = np.divide(s, total, out=np.full_like(s, 1.0 / len(classes)), where=total > 0)
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover - pandas is optional
            return {c: p[:, i] for i, c in enumerate(classes)}
        return pd.DataFrame(p, columns=list(classes), index=X.index if is_frame(X) else None)

    def __repr__(self) -> str:
        n = len(self.public["windows"].get("windows", []))
        return (f"PublicWindowForest({self.public['model']}, {n} windows, "
                f"epsilon={self.public['privacy'].get('epsilon')})")


def load_window_model(obj: dict) -> PublicWindowForest:
    """The predict-only reader of a window forest's public model file."""
    return PublicWindowForest(obj)


#: the window forests a file may name
_MODELS: dict[str, type] = {cls.__name__: cls for cls in (
    GreedyForestClassifier, MedianForestClassifier, RandomDecisionForestClassifier,
    RDTClassifier)}
for _name in (*_MODELS, "WindowEnsemble"):
    register_public(_name, _export, load_window_model)
