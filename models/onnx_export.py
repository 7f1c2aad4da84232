"""ONNX export of a public model file: its trees as one ``ai.onnx.ml`` ``TreeEnsemble``
(opset 5) in double precision, then the link as standard operators.

The converter reads the public model file's JSON object only (docs/model_format.md), so it
serves every family whose file has a ``trees`` section. The graph, its input and outputs,
the precision and what is refused: docs/model_format.md, "ONNX". ``onnx`` is the optional
extra ``dpstream[onnx]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__, import_extra
from .encoding import RecordEncoder
from .public import (
    PublicModelError,
    export_model,
    public_model,
    read_public,
)
from .schema import coerce_schema

__all__ = ["ONNX_ML_OPSET", "ONNX_OPSET", "encode", "export_file", "export_onnx", "to_onnx"]

#: the ``ai.onnx`` opset of the exported graphs (ONNX 1.16's; IR version 10)
ONNX_OPSET = 21
#: the ``ai.onnx.ml`` opset: 5 has ``TreeEnsemble``, whose thresholds, leaf weights and
#: output are double (opsets 1-3's ``TreeEnsembleRegressor`` returns float32); onnxruntime
#: runs it from 1.21 on
ONNX_ML_OPSET = 5
_IR_VERSION = 10
_LINKS = ("logistic", "softmax", "identity", "normalize")


def _onnx() -> Any:
    return import_extra("onnx", "onnx", "ONNX export")


def _public(source: Any) -> dict:
    """The public model file's object of ``source`` (a model, the object, or a path to the
    JSON file), with its format and digest checked."""
    if isinstance(source, (Mapping, str, Path)):
        return read_public(source)
    return read_public(public_model(source))   # TypeError for what has no public model file


def _refuse_keyed(obj: Mapping) -> None:
    if obj.get("trees") is None:
        raise ValueError(
            f"{obj.get('model')} routes records through keyed (hash-routed) trees, which an "
            "ONNX TreeEnsemble (threshold comparisons on input columns) cannot express: "
            "predict with its public model file (dpstream.load_model) or serve it over HTTP "
            "instead")


def _outputs(obj: Mapping) -> int:
    """K, the number of scores a leaf holds (1: a binary classifier's or a regressor's)."""
    trees = obj["trees"]
    return int(trees["n_outputs"]) if "vector" in trees else 1


def _leaf_values(trees: Mapping, size: int, k: int) -> np.ndarray:
    if k == 1:
        return np.asarray(trees["value"], dtype=np.float64).reshape(size, 1)
    return np.asarray(trees["vector"], dtype=np.float64).reshape(size, k)


def _arrays(trees: Mapping, k: int) -> tuple[int, int, int, np.ndarray, np.ndarray,
                                             np.ndarray, np.ndarray]:
    """``(n_trees, max_nodes, max_depth, feature, threshold, left, values)`` checked; a
    forest of no tree becomes one leaf of zeros (the score is then ``base_score``)."""
    try:
        n, m, depth = int(trees["n_trees"]), int(trees["max_nodes"]), int(trees["max_depth"])
        if n == 0:
            return 1, 1, 0, np.zeros(1, np.int64), np.full(1, np.inf), np.zeros(1, np.int64), \
                np.zeros((1, k))
        feature = np.asarray(trees["feature"], dtype=np.int64)
        threshold = np.array([np.inf if v is None else float(v) for v in trees["threshold"]],
                             dtype=np.float64)
        left = np.asarray(trees["left"], dtype=np.int64)
        values = _leaf_values(trees, n * m, k)
    except (KeyError, TypeError, ValueError) as exc:
        raise PublicModelError(f"malformed trees: {exc}") from None
    if n < 0 or m < 1 or depth < 0 or any(a.shape != (n * m,) for a in (feature, threshold, left)):
        raise PublicModelError("malformed trees: every array holds n_trees * max_nodes values")
    local = np.arange(n * m) % m
    if left.min() < 0 or (left >= m).any() or ((left != local) & (left + 1 >= m)).any():
        raise PublicModelError("malformed trees: a child index falls outside its tree")
    if not np.isfinite(values).all():
        raise PublicModelError("malformed trees: a leaf value that is not a finite number")
    return n, m, depth, feature, threshold, left, values


def _reached(n: int, m: int, depth: int, left: np.ndarray) -> np.ndarray:
    """Which nodes a path from a root reaches (padding: none); refuses a path longer than
    ``max_depth`` (the reader stops there), which also stops a cycle."""
    size = n * m
    start = np.arange(size) - np.arange(size) % m
    is_leaf = left == np.arange(size) % m
    reach = np.zeros(size, dtype=bool)
    frontier = np.arange(n) * m
    for _ in range(depth + 1):
        reach[frontier] = True
        inner = frontier[~is_leaf[frontier]]
        frontier = np.concatenate([start[inner] + left[inner], start[inner] + left[inner] + 1])
        if frontier.size == 0:
            return reach
    raise PublicModelError(f"malformed trees: a path longer than max_depth ({depth})")


def _ensemble(obj: Mapping, n_columns: int, k: int) -> dict:
    """The attributes of one ``TreeEnsemble`` (ai.onnx.ml opset 5) for the file's trees.

    Opset 5 lists interior nodes and leaves apart, a leaf feeding one target: a forest of
    K-vector leaves becomes K copies of its trees, copy ``c`` holding component ``c``. Only
    nodes a path reaches are written (padding is dropped). Two shapes are avoided because
    runtimes misread them: a root whose branches lead to the same leaf (onnx's reference
    implementation then reads the leaf at the root's index) and a root whose true and false
    ids are equal, one a node's and one a leaf's (onnxruntime 1.21-1.23 take it for a leaf).
    So a tree that is a single leaf gets a root with two copies of that leaf, and where a
    root's ids would coincide an unused leaf shifts the ids of that tree's leaves.
    """
    n, m, depth, feature, threshold, left, values = _arrays(obj["trees"], k)
    size = n * m
    start = np.arange(size) - np.arange(size) % m   # each node's tree's root
    is_leaf = left == np.arange(size) % m
    reach = _reached(n, m, depth, left)
    used = reach & ~is_leaf
    if feature[used].size and (feature[used].min() < 0 or feature[used].max() >= n_columns):
        raise PublicModelError("malformed trees: a feature column the schema does not have")
    roots = np.arange(n) * m
    lone = roots[is_leaf[roots]]   # trees that are a single leaf
    inner = np.flatnonzero(used | np.isin(np.arange(size), lone))
    leaves = np.sort(np.concatenate([np.flatnonzero(reach & is_leaf), lone]))
    node_id = np.full(size, -1, dtype=np.int64)
    node_id[inner] = np.arange(inner.size)
    leaf_id = np.searchsorted(leaves, np.arange(size))   # (a lone leaf: the first of two)
    single = is_leaf[inner]
    true_child = np.where(single, inner, start[inner] + left[inner])
    false_child = np.where(single, inner, true_child + 1)
    true_leaf, false_leaf = is_leaf[true_child], is_leaf[false_child]
    true_ids = np.where(true_leaf, leaf_id[true_child], node_id[true_child])
    false_ids = np.where(false_leaf, leaf_id[false_child] + single, node_id[false_child])
    copies = [c for c in range(k) if k == 1 or values[leaves, c].any()] or [0]
    n_in, n_leaf, n_copies = inner.size, leaves.size, len(copies)
    # the copies side by side: node and leaf ids move by a copy's count of each
    node_shift = np.repeat(np.arange(n_copies) * n_in, n_in)
    leaf_shift = np.repeat(np.arange(n_copies) * n_leaf, n_in)
    true_leaf, false_leaf = np.tile(true_leaf, n_copies), np.tile(false_leaf, n_copies)
    true_ids = np.tile(true_ids, n_copies) + np.where(true_leaf, leaf_shift, node_shift)
    false_ids = np.tile(false_ids, n_copies) + np.where(false_leaf, leaf_shift, node_shift)
    tree_roots = (node_id[roots] + np.arange(n_copies)[:, None] * n_in).ravel()
    first_leaf = (np.searchsorted(leaves, roots) + np.arange(n_copies)[:, None] * n_leaf).ravel()
    node_tree = (inner // m + np.arange(n_copies)[:, None] * n).ravel()
    weights = np.concatenate([values[leaves, c] for c in copies])
    targets = np.repeat(copies, n_leaf)
    moved, inserts = np.zeros(tree_roots.size, dtype=np.int64), []
    for t, r in enumerate(tree_roots.tolist()):
        if true_ids[r] + true_leaf[r] * len(inserts) == \
                false_ids[r] + false_leaf[r] * len(inserts):
            inserts.append(first_leaf[t])
        moved[t] = len(inserts)
    true_ids += true_leaf * moved[node_tree]
    false_ids += false_leaf * moved[node_tree]
    onnx = _onnx()
    return {
        "n_targets": k,
        "aggregate_function": 1,   # SUM
        "post_transform": 0,       # NONE: the link follows as standard operators
        "tree_roots": tree_roots.tolist(),
        "nodes_featureids": np.tile(np.where(single, 0, feature[inner]), n_copies).tolist(),
        "nodes_splits": onnx.numpy_helper.from_array(
            np.tile(np.where(single, 0.0, threshold[inner]), n_copies)),
        # 0: BRANCH_LEQ, ``x <= split`` goes to the true (left) branch
        "nodes_modes": onnx.numpy_helper.from_array(np.zeros(n_in * n_copies, np.uint8)),
        "nodes_truenodeids": true_ids.tolist(),
        "nodes_trueleafs": true_leaf.astype(np.int64).tolist(),
        "nodes_falsenodeids": false_ids.tolist(),
        "nodes_falseleafs": false_leaf.astype(np.int64).tolist(),
        # NaN (missing) compares false and goes right, as the public model file says
        "nodes_missing_value_tracks_true": [0] * (n_in * n_copies),
        "leaf_targetids": np.insert(targets, inserts, 0).tolist(),
        "leaf_weights": onnx.numpy_helper.from_array(np.insert(weights, inserts, 0.0)),
    }


def _check_head(obj: Mapping, k: int) -> None:
    """The link, the leaves, the base score and the target agree (or a clear error)."""
    link, target = obj.get("link"), obj["schema"].get("target", {})
    classes = target.get("values")
    base = obj.get("base_score")
    if link not in _LINKS:
        raise ValueError(f"link {link!r} cannot be expressed: the ONNX export knows "
                         f"{', '.join(_LINKS)}")
    if link == "identity":
        ok = k == 1 and classes is None and not isinstance(base, list)
        what = "scalar leaves, a scalar base_score and a numeric target"
    elif link == "logistic":
        ok = k == 1 and classes is not None and len(classes) == 2 and not isinstance(base, list)
        what = "scalar leaves, a scalar base_score and two classes"
    else:
        ok = classes is not None and k == len(classes) >= 2 and isinstance(base, list) \
            and len(base) == k
        what = "K-vector leaves and a base_score of K numbers for K classes"
    if not ok:
        raise PublicModelError(f"malformed file: the {link} link needs {what}")


def _head(obj: Mapping) -> tuple[list, list, list]:
    """Nodes from the trees' sum ``trees`` to the outputs (``label`` and ``probabilities``,
    or ``prediction``), their value infos, and the constants they use as initializers."""
    onnx = _onnx()
    h, T = onnx.helper, onnx.TensorProto
    init: dict[str, Any] = {}

    def c(name: str, value: Any, dtype: Any = np.float64) -> str:
        init[name] = onnx.numpy_helper.from_array(np.atleast_1d(np.asarray(value, dtype)), name)
        return name

    link, n = obj["link"], "N"
    nodes = [h.make_node("Add", ["trees", c("base_score", obj["base_score"])], ["raw"])]
    if link == "identity":
        lo, hi = (float(obj["schema"]["target"][b]) for b in ("min", "max"))
        # min + (raw + 1) * (max - min) / 2, in the reference's order of operations
        nodes += [h.make_node("Add", ["raw", c("one", 1.0)], ["shifted"]),
                  h.make_node("Mul", ["shifted", c("width", hi - lo)], ["scaled"]),
                  h.make_node("Div", ["scaled", c("two", 2.0)], ["halved"]),
                  h.make_node("Add", [c("min", lo), "halved"], ["value"]),
                  h.make_node("Reshape", ["value", c("flat", -1, np.int64)], ["prediction"])]
        return nodes, [h.make_tensor_value_info("prediction", T.DOUBLE, [n])], \
            list(init.values())
    k = len(obj["schema"]["target"]["values"])
    if link == "logistic":   # p = (1 + tanh(raw / 2)) / 2, the reference's formula
        nodes += [h.make_node("Mul", ["raw", c("half", 0.5)], ["half_raw"]),
                  h.make_node("Tanh", ["half_raw"], ["tanh"]),
                  h.make_node("Add", ["tanh", c("one", 1.0)], ["tanh_1"]),
                  h.make_node("Mul", ["tanh_1", "half"], ["p1"]),
                  h.make_node("Sub", ["one", "p1"], ["p0"]),
                  h.make_node("Concat", ["p0", "p1"], ["probabilities"], axis=1),
                  h.make_node("Greater", ["raw", c("zero", 0.0)], ["positive"]),
                  h.make_node("Cast", ["positive"], ["index"], to=T.INT64),
                  h.make_node("Reshape", ["index", c("flat", -1, np.int64)], ["label"])]
    elif link == "softmax":
        nodes += [h.make_node("Softmax", ["raw"], ["probabilities"], axis=1),
                  h.make_node("ArgMax", ["raw"], ["label"], axis=1, keepdims=0)]
    else:   # normalize: max(raw, 0) / its sum, or uniform when that sum is <= 0
        nodes += [h.make_node("Relu", ["raw"], ["kept"]),
                  h.make_node("ReduceSum", ["kept", c("axis", 1, np.int64)], ["total"],
                              keepdims=1),
                  h.make_node("Greater", ["total", c("zero", 0.0)], ["some"]),
                  h.make_node("Where", ["some", "total", c("one", 1.0)], ["divisor"]),
                  h.make_node("Div", ["kept", "divisor"], ["shares"]),
                  h.make_node("Where", ["some", "shares", c("uniform", 1.0 / k)],
                              ["probabilities"]),
                  h.make_node("ArgMax", ["raw"], ["label"], axis=1, keepdims=0)]
    return nodes, [h.make_tensor_value_info("label", T.INT64, [n]),
                   h.make_tensor_value_info("probabilities", T.DOUBLE, [n, k])], \
        list(init.values())


def to_onnx(source: Any) -> Any:
    """An ONNX model (``onnx.ModelProto``) computing the predictions of a public model file.

    Parameters
    ----------
    source
        A trained model (its :func:`~dpstream.models.public.public_model` is converted), a
        public model file's object, or the path of one (JSON).

    Returns
    -------
    onnx.ModelProto
        Input ``X``: double ``[N, len(columns)]``, records encoded as docs/model_format.md
        says (:func:`encode`). Outputs: ``label`` (int64 ``[N]``, the index of the class in
        ``schema.target.values``, also in the metadata as ``classes``) and ``probabilities``
        (double ``[N, K]``, the classes in that order) for a classifier; ``prediction``
        (double ``[N]``) for a regressor. ``metadata_props`` hold the file's ``format``,
        ``model``, ``task``, ``link``, ``digest``, ``privacy`` report, ``schema``,
        ``columns`` and ``classes`` (JSON text).

    Raises
    ------
    dpstream.MissingExtraError
        Without the ``onnx`` package (``pip install 'dpstream[onnx]'``).
    ValueError
        For keyed (hash-routed) trees (``"trees": null``) or a link ONNX cannot express;
        :class:`~dpstream.models.public.PublicModelError` (a ``ValueError``) for a malformed
        or altered file.
    TypeError
        For a model that has no public model file.

    Examples
    --------
    >>> import json, numpy as np, onnxruntime as ort
    >>> from dpstream.models import SGBDTClassifier
    >>> from dpstream.models.public import load_model, public_model
    >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
    ...           "target": {"type": "binary", "values": ["no", "yes"]}}
    >>> model = SGBDTClassifier(schema=schema, epsilon=4.0, n_trees=5, round_size=20, seed=0)
    >>> for i in range(400):
    ...     model.learn_one({"a": (i % 10) / 10}, "yes" if i % 10 >= 5 else "no")
    >>> proto = to_onnx(model)
    >>> session = ort.InferenceSession(proto.SerializeToString(),
    ...                                providers=["CPUExecutionProvider"])
    >>> records = [{"a": 0.1}, {"a": 0.9}, {}]        # {}: ``a`` is missing
    >>> label, proba = session.run(["label", "probabilities"], {"X": encode(proto, records)})
    >>> classes = json.loads(session.get_modelmeta().custom_metadata_map["classes"])
    >>> [classes[i] for i in label], [model.predict_one(x) for x in records]
    (['no', 'yes', 'yes'], ['no', 'yes', 'yes'])
    >>> reference = load_model(public_model(model)).predict_proba_many(records)
    >>> bool(np.allclose(proba, np.asarray(reference), rtol=0, atol=1e-12))
    True
    """
    onnx = _onnx()
    obj = _public(source)
    _refuse_keyed(obj)
    try:
        encoder = RecordEncoder(coerce_schema(obj["schema"]))
        k = _outputs(obj)
    except (KeyError, TypeError, ValueError) as exc:
        raise PublicModelError(f"malformed file: {exc}") from None
    if list(encoder.columns) != list(obj.get("columns", [])):
        raise PublicModelError("the schema's encoded columns differ from the file's 'columns'")
    _check_head(obj, k)
    h, T = onnx.helper, onnx.TensorProto
    trees = h.make_node("TreeEnsemble", ["X"], ["trees"], domain="ai.onnx.ml",
                        name="trees", **_ensemble(obj, encoder.n_columns, k))
    nodes, outputs, init = _head(obj)
    graph = h.make_graph([trees, *nodes], f"dpstream_{obj['model']}",
                         [h.make_tensor_value_info("X", T.DOUBLE, ["N", encoder.n_columns])],
                         outputs, initializer=init)
    model = h.make_model(graph, producer_name="dpstream", producer_version=__version__,
                         opset_imports=[h.make_opsetid("", ONNX_OPSET),
                                        h.make_opsetid("ai.onnx.ml", ONNX_ML_OPSET)],
                         doc_string=f"dpstream {obj['model']} ({obj.get('task')}, link "
                                    f"{obj['link']}): X holds records encoded as "
                                    "docs/model_format.md says")
    model.ir_version = _IR_VERSION
    meta = {"format": obj["format"], "model": obj["model"], "task": obj["task"],
            "link": obj["link"], "digest": obj["digest"],
            "privacy": json.dumps(obj["privacy"]),
            "schema": json.dumps(obj["schema"]),   # (in its order: it orders the columns)
            "columns": json.dumps(list(encoder.columns))}
    if encoder.classes is not None:
        meta["classes"] = json.dumps(obj["schema"]["target"]["values"])
    h.set_model_props(model, meta)
    onnx.checker.check_model(model)
    return model


def export_onnx(source: Any, path: str | Path) -> Any:
    """Write :func:`to_onnx` of ``source`` (a model, a public model file's object or path) to
    ``path``; returns the ``onnx.ModelProto``.

    Examples
    --------
    >>> import tempfile, onnx
    >>> from dpstream.models import SGBDTClassifier
    >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
    ...           "target": {"type": "binary", "values": [False, True]}}
    >>> path = tempfile.mkdtemp() + "/model.onnx"
    >>> _ = export_onnx(SGBDTClassifier(schema=schema, epsilon=1.0), path)
    >>> [o.name for o in onnx.load(path).graph.output]
    ['label', 'probabilities']
    """
    model = to_onnx(source)
    Path(path).write_bytes(model.SerializeToString())
    return model


def export_file(model: Any, path: str | Path) -> dict:
    """``model.export(path)``: the public model file (JSON), or its ONNX graph when ``path``
    ends with ``.onnx``; returns the public model file's object."""
    if not str(path).lower().endswith(".onnx"):
        return export_model(model, path)
    obj = public_model(model)
    export_onnx(obj, path)
    return obj


def _layout(source: Any) -> tuple[Mapping, list]:
    """The public schema and the columns of ``source``: an exported ONNX model (or its
    ``.onnx`` path), or whatever :func:`to_onnx` takes."""
    if isinstance(source, (str, Path)) and str(source).endswith(".onnx"):
        source = _onnx().load(str(source))
    if hasattr(source, "metadata_props") and hasattr(source, "graph"):
        meta = {p.key: p.value for p in source.metadata_props}
        if "schema" not in meta or "columns" not in meta:
            raise ValueError("this ONNX model was not exported by dpstream: no 'schema' and "
                             "'columns' in its metadata")
        return json.loads(meta["schema"]), json.loads(meta["columns"])
    obj = _public(source)
    return obj["schema"], obj["columns"]


def encode(source: Any, records: Iterable[Mapping] | Any) -> np.ndarray:
    """Records as the ONNX model's input ``X``: double rows laid out as the file's
    ``columns`` (:class:`~dpstream.models.encoding.RecordEncoder`; missing features are NaN).

    ``source`` is the ONNX model (or its ``.onnx`` path), or a model, a public model file's
    object or its path; ``records`` are dicts (or a pandas DataFrame).

    Examples
    --------
    >>> from dpstream.models import SGBDTRegressor
    >>> from dpstream.models.public import public_model
    >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1},
    ...                        "c": {"type": "categorical", "values": ["x", "y"]}},
    ...           "target": {"type": "numeric", "min": 0, "max": 10}}
    >>> obj = public_model(SGBDTRegressor(schema=schema, epsilon=1.0))
    >>> obj["columns"]
    ['<leaf>', 'a', 'c=x', 'c=y']
    >>> encode(obj, [{"a": 0.25, "c": "y"}, {"c": "x"}]).tolist()   # a missing: NaN
    [[0.0, 0.25, 1.0, 0.0], [0.0, nan, 0.0, 1.0]]
    """
    schema, columns = _layout(source)
    encoder = RecordEncoder(coerce_schema(dict(schema)))
    if list(encoder.columns) != list(columns):
        raise ValueError("the schema's encoded columns differ from the model's 'columns'")
    return encoder.encode_many(records)
