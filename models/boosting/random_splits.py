"""Random complete trees whose splits come from the public schema only (Kirschte et al. 2023,
§VI-C).

:func:`random_complete_tree` draws one; :func:`route_tree` routes records through it. The
draw uses only the public domains and the tree drawn so far, never data, so the layout leaks
nothing. Design: docs/sgbdt_internals.md#random-complete-trees.
"""

from __future__ import annotations

from typing import NamedTuple
from weakref import WeakKeyDictionary

import numpy as np

from ...accounting import noise
from ..encoding import RecordEncoder
from ..forest import complete_depth, complete_tree_layout, route_block, route_complete

# compiled draw (numba); with ``draw_splits`` set to None (a test) _draw_python below gives
# the same trees
from ._draw_kernels import PY_SUM_COMPENSATED, draw_splits

__all__ = ["RandomTree", "feature_order", "pick_weighted", "random_complete_tree",
           "route_tree"]

_DOMAINS: WeakKeyDictionary = WeakKeyDictionary()   # encoder -> the kernel's domain arrays


class RandomTree(NamedTuple):
    """Local arrays of one complete tree in heap layout (see :class:`~.forest.Forest`)."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    leaves: np.ndarray


def feature_order(encoder: RecordEncoder) -> list[str]:
    """Feature names in the order :func:`random_complete_tree` indexes them."""
    schema = encoder.schema
    return schema.numeric_features + schema.categorical_features


def random_complete_tree(encoder: RecordEncoder, *, depth: int, rng: np.random.Generator,
                         numeric_weight: float = 1.0,
                         only_feature: int | None = None) -> RandomTree:
    """Draw one complete tree of ``depth`` from the encoder's public domains.

    ``only_feature`` (an index into the schema's features, numeric ones first, then categorical
    ones — see :func:`feature_order`) restricts every split of the tree to that one feature:
    the tree is then a step function of one feature, and an ensemble that cycles through the
    features is an additive model (the authors' "cyclical feature interactions").

    Each internal node draws a feature (weight ``numeric_weight`` for a numeric feature, 1 for
    a categorical one, as in the paper) and then a split: a threshold uniform in the feature's
    public interval, narrowed along the path, or one of its public values not yet decided on
    the path, for an "==" split. The tree is complete (``2**depth`` leaves, empty ones
    included).

    Examples
    --------
    >>> import numpy as np
    >>> from dpstream.models.encoding import RecordEncoder
    >>> enc = RecordEncoder({"features": {"x": {"type": "numeric", "min": 0, "max": 10},
    ...                                   "c": {"type": "categorical", "values": ["a", "b"]}},
    ...                      "target": {"type": "numeric", "min": 0, "max": 1}})
    >>> tree = random_complete_tree(enc, depth=2, rng=np.random.default_rng(0))
    >>> len(tree.feature), tree.leaves.tolist()
    (7, [3, 4, 5, 6])
    >>> bool(np.all(tree.threshold[tree.leaves] == np.inf))
    True
    """
    n_nodes, internal, leaves = complete_tree_layout(depth)
    feature = np.zeros(n_nodes, dtype=np.int32)
    threshold = np.full(n_nodes, np.inf)
    left = np.arange(n_nodes, dtype=np.int32)
    left[internal] = 2 * internal + 1
    # two uniforms per internal node (feature, then split), drawn in one call
    uniforms = noise.uniforms(rng, 2 * internal.size)
    if draw_splits is not None:
        num, cat = _domains(encoder)
        only = -1
        if only_feature is not None:   # a negative index matches no feature, as in Python
            only = int(only_feature) if only_feature >= 0 else num[0].size + cat[0].size
        draw_splits(uniforms, internal.size, *num, *cat, float(numeric_weight), only,
                    PY_SUM_COMPENSATED, feature, threshold)
    else:
        _draw_python(encoder, uniforms.tolist(), internal, numeric_weight, only_feature,
                     feature, threshold)
    return RandomTree(feature, threshold, left, leaves)


def _domains(encoder: RecordEncoder) -> tuple[tuple, tuple]:
    """The kernel's view of the public domains, built once per encoder."""
    cached = _DOMAINS.get(encoder)
    if cached is None:
        numeric = encoder.numeric_columns()
        categorical = encoder.categorical_columns()
        num = (np.array([c for c, _, _ in numeric], dtype=np.int64),
               np.array([lo for _, lo, _ in numeric], dtype=np.float64),
               np.array([hi for _, _, hi in numeric], dtype=np.float64))
        cat = (np.array([c[0] if c else 0 for c in categorical], dtype=np.int64),
               np.array([len(c) for c in categorical], dtype=np.int64))
        cached = (num, cat)
        _DOMAINS[encoder] = cached
    return cached


def pick_weighted(weights: list[float], total: float, u: float) -> int:
    """Inverse-CDF draw: the index ``i`` with probability ``weights[i] / total`` for a uniform
    ``u`` (the last positive weight when round-off leaves ``u * total`` at the end).

    >>> pick_weighted([1.0, 0.0, 3.0], 4.0, 0.2), pick_weighted([1.0, 0.0, 3.0], 4.0, 0.3)
    (0, 2)
    """
    target, acc, j = u * total, 0.0, -1
    for i, w in enumerate(weights):
        if w > 0:
            j = i
            acc += w
            if target < acc:
                break
    return j


def _draw_python(encoder: RecordEncoder, uniforms: list[float], internal: np.ndarray,
                 numeric_weight: float, only_feature: int | None, feature: np.ndarray,
                 threshold: np.ndarray) -> None:
    """The reference draw in plain Python (the kernel replays it; tests compare the two)."""
    numeric = encoder.numeric_columns()
    categorical = encoder.categorical_columns()
    n_num = len(numeric)
    # per-node state: numeric intervals and, per categorical feature, the columns still open
    # (None once the path has fixed the value). Plain Python over pre-drawn uniforms: numpy
    # calls per node would cost more than the arithmetic (a round draws one tree)
    intervals = {0: [(lo, hi) for _, lo, hi in numeric]}
    open_cats: dict[int, list[list[int] | None]] = {0: [list(c) for c in categorical]}
    for node in internal.tolist():
        iv, cats = intervals.pop(node), open_cats.pop(node)
        weights = [numeric_weight if hi > lo else 0.0 for lo, hi in iv] + \
                  [1.0 if (c is not None and len(c) > 1) else 0.0 for c in cats]
        if only_feature is not None:
            weights = [w if i == only_feature else 0.0 for i, w in enumerate(weights)]
        total = sum(weights)
        l_iv, r_iv = list(iv), list(iv)
        l_cats, r_cats = list(cats), list(cats)
        u_feature, u_split = uniforms[2 * node], uniforms[2 * node + 1]
        if total <= 0:  # nothing left to split on: everything goes left
            feature[node], threshold[node] = 0, np.inf
        else:
            j = pick_weighted(weights, total, u_feature)
            if j < n_num:
                lo, hi = iv[j]
                t = lo + u_split * (hi - lo)
                feature[node], threshold[node] = numeric[j][0], t
                l_iv[j], r_iv[j] = (lo, t), (t, hi)
            else:
                k = j - n_num
                cols = cats[k]
                col = cols[min(int(u_split * len(cols)), len(cols) - 1)]
                feature[node], threshold[node] = col, 0.5   # left iff value == this category
                l_cats[k] = None
                r_cats[k] = [c for c in cols if c != col]
        for child, civ, ccat in ((2 * node + 1, l_iv, l_cats), (2 * node + 2, r_iv, r_cats)):
            if child < internal.size:
                intervals[child], open_cats[child] = civ, ccat


_ROOT = np.zeros(1, dtype=np.int64)


def route_tree(tree: RandomTree, X: np.ndarray) -> np.ndarray:
    """The node (heap index) each row of ``X`` reaches in a standalone tree (``feature``,
    ``threshold``, ``left`` arrays; leaves loop on themselves) — S-GBDT routes its pool
    through a round's tree with it before the tree joins the forest."""
    depth = int(np.log2(tree.feature.size + 1)) - 1
    if route_complete is not None and complete_depth(tree.left) == depth:
        return route_complete(np.asarray(X, dtype=np.float64), 0, tree.feature, tree.threshold,
                              depth)
    if route_block is not None:
        return route_block(np.asarray(X, dtype=np.float64), _ROOT, tree.feature,
                           tree.threshold, tree.left, depth)[:, 0]
    node = np.zeros(X.shape[0], dtype=np.int64)
    rows = np.arange(X.shape[0])
    for _ in range(depth):
        go_left = X[rows, tree.feature[node]] <= tree.threshold[node]
        node = np.where(go_left, tree.left[node], tree.left[node] + 1)
    return node
