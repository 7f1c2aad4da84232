"""The shared array-based tree structure: a forest stored as flat numpy arrays.

:class:`Forest` holds every node's ``feature`` column of the encoded record, ``threshold``,
``left`` child (the right child is ``left + 1``) and ``value``; a record goes left iff
``x[feature] <= threshold``, and a leaf is its own left child. Prediction is ``max_depth``
rounds of array operations over all (row, tree) pairs; :func:`complete_tree_layout` and
:func:`complete_depth` describe complete heap-layout trees.

The layout is explained in ``docs/encoding.md#the-array-forest``.
"""

from __future__ import annotations

import numpy as np

# compiled routing (numba); a test that sets one of these names to None runs the numpy
# routing below, which gives the same results
from .forest_kernels import (
    add_node_values,
    route_block,
    route_complete,
    sum_block,
    sum_block_parts,
    sum_one,
    sum_one_parts,
)

__all__ = ["Forest", "complete_tree_layout", "complete_depth"]

_CHUNK = 512  # rows x 150 trees per step stays in cache (see docs/benchmark_notes.md)


def _floats(X) -> np.ndarray:
    """Float64 rows for the kernels, in any memory order (a column-major pool stays so)."""
    return np.asarray(X, dtype=np.float64)


def complete_tree_layout(depth: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Heap layout of a complete binary tree: ``(n_nodes, internal_ids, leaf_ids)``.

    Internal node ``i`` has children ``2i + 1`` and ``2i + 2``.

    >>> n, internal, leaves = complete_tree_layout(2)
    >>> n, internal.tolist(), leaves.tolist()
    (7, [0, 1, 2], [3, 4, 5, 6])
    """
    n_internal = 2**depth - 1
    n_nodes = 2 * n_internal + 1
    return n_nodes, np.arange(n_internal), np.arange(n_internal, n_nodes)


def complete_depth(left) -> int:
    """The depth of a tree given by its local ``left`` children if it is a complete binary
    tree in heap layout (node ``i < 2**d - 1`` has left child ``2i + 1``; every other node is
    a self-looping leaf or padding), else -1. The compiled kernels walk such trees without
    reading ``left``.

    >>> complete_depth([1, 3, 5, 3, 4, 5, 6]), complete_depth([1, 1, 2, 3, 4])
    (2, 1)
    >>> complete_depth([1, 1, 3, 4, 4])   # node 2 is internal, node 1 a leaf: not complete
    -1
    """
    left = np.asarray(left, dtype=np.int64)
    idx = np.arange(left.size)
    internal = left != idx
    c = int(np.count_nonzero(internal))
    d = (c + 1).bit_length() - 1
    if (1 << d) - 1 != c or 2 * c + 1 > left.size or not np.array_equal(left[:c], 2 * idx[:c] + 1):
        return -1
    return d


class Forest:
    """Trees as flat arrays ``(feature, threshold, left, value)`` with vectorised prediction.

    Parameters
    ----------
    max_nodes
        Nodes per tree (the stride); smaller trees are padded with unreachable leaves.
    max_depth
        The longest root-to-leaf path; prediction runs this many routing steps.
    n_outputs
        ``1``: one value per node (``value``). ``K > 1``: also a K-vector per node
        (``vector``, shape ``(nodes, K)``; a multi-class booster's leaves), summed by
        :meth:`predict_vector_sum`.

    Examples
    --------
    >>> import numpy as np
    >>> forest = Forest(max_nodes=3, max_depth=1)
    >>> t = forest.add_tree(feature=[1, 0, 0], threshold=[0.5, np.inf, np.inf],
    ...                     left=[1, 1, 2], value=[0.0, -1.0, 2.0])
    >>> X = np.array([[0.0, 0.2], [0.0, 0.9], [0.0, np.nan]])
    >>> forest.predict_sum(X).tolist()            # NaN (missing) goes right
    [-1.0, 2.0, 2.0]
    >>> forest.apply(t, X).tolist()               # leaf (local index) per row
    [1, 2, 2]
    >>> len(forest)
    1
    """

    vector: np.ndarray | None = None   # (forests pickled before vector values: none)

    def __init__(self, *, max_nodes: int, max_depth: int, n_outputs: int = 1):
        if max_nodes < 1 or max_depth < 0 or n_outputs < 1:
            raise ValueError("max_nodes and n_outputs must be >= 1 and max_depth >= 0")
        self.max_nodes = int(max_nodes)
        self.max_depth = int(max_depth)
        self.n_trees = 0
        cap = 8 * self.max_nodes
        self.feature = np.zeros(cap, dtype=np.int32)
        self.threshold = np.full(cap, np.inf)
        self.left = np.zeros(cap, dtype=np.int32)
        self.value = np.zeros(cap)
        if n_outputs > 1:
            self.vector = np.zeros((cap, int(n_outputs)))
        # per tree: its depth when it is a complete heap-layout tree, else -1 (the kernels
        # walk complete trees without reading ``left``; see :mod:`~dpstream.models.forest_kernels`)
        self.depths = np.full(8, -1, dtype=np.int64)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["depths"]   # derived from ``left``: never saved, so it cannot disagree
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        state.pop("depths", None)
        self.__dict__.update(state)
        k = self.max_nodes
        self.depths = np.full(max(8, self.feature.size // k), -1, dtype=np.int64)
        for t in range(self.n_trees):
            self.depths[t] = complete_depth(self.left[t * k:(t + 1) * k] - t * k)

    def __len__(self) -> int:
        return self.n_trees

    def _grow(self) -> None:
        cap = 2 * self.feature.size
        for name, fill in (("feature", 0), ("threshold", np.inf), ("left", 0), ("value", 0.0)):
            old = getattr(self, name)
            new = np.full(cap, fill, dtype=old.dtype)
            new[: old.size] = old
            setattr(self, name, new)
        depths = np.full(cap // self.max_nodes, -1, dtype=np.int64)
        depths[:self.depths.size] = self.depths
        self.depths = depths
        if self.vector is not None:
            vector = np.zeros((cap, self.vector.shape[1]))
            vector[:self.vector.shape[0]] = self.vector
            self.vector = vector

    def add_tree(self, *, feature, threshold, left, value) -> int:
        """Append one tree given by local arrays (length ``<= max_nodes``); returns its index.

        ``left`` holds local child indices (the right child is ``left + 1``); a leaf must be
        its own left child, route through feature 0 and have threshold ``+inf``.
        """
        feature = np.asarray(feature, dtype=np.int32)
        n = feature.size
        if not 0 < n <= self.max_nodes:
            raise ValueError(f"a tree has 1..{self.max_nodes} nodes, got {n}")
        if (self.n_trees + 1) * self.max_nodes > self.feature.size:
            self._grow()
        base = self.n_trees * self.max_nodes
        sl = slice(base, base + n)
        self.feature[sl] = feature
        self.threshold[sl] = np.asarray(threshold, dtype=np.float64)
        self.left[sl] = np.asarray(left, dtype=np.int32) + base
        self.value[sl] = np.asarray(value, dtype=np.float64)
        # padding nodes: self-looping leaves
        pad = slice(base + n, base + self.max_nodes)
        self.feature[pad] = 0
        self.threshold[pad] = np.inf
        self.left[pad] = np.arange(base + n, base + self.max_nodes, dtype=np.int32)
        self.value[pad] = 0.0
        if self.vector is not None:
            self.vector[base:base + self.max_nodes] = 0.0
        self.depths[self.n_trees] = complete_depth(self.left[base:base + self.max_nodes] - base)
        self.n_trees += 1
        return self.n_trees - 1

    def drop_oldest(self, k: int = 1) -> None:
        """Retire the ``k`` oldest trees (the others keep their order; indices shift by ``k``)."""
        if not 0 <= k <= self.n_trees:
            raise ValueError(f"can drop 0..{self.n_trees} trees, got {k}")
        if k == 0:
            return
        shift, end = k * self.max_nodes, self.n_trees * self.max_nodes
        arrays = (self.feature, self.threshold, self.left, self.value)
        for arr in arrays if self.vector is None else (*arrays, self.vector):
            arr[: end - shift] = arr[shift:end]
        self.left[: end - shift] -= shift
        self.depths[: self.n_trees - k] = self.depths[k:self.n_trees]
        self.n_trees -= k

    def set_values(self, tree: int, local_ids, values) -> None:
        """Overwrite node values of one tree (e.g. its leaves once they are computed)."""
        base = self._base(tree)
        self.value[base + np.asarray(local_ids, dtype=np.int64)] = values

    def set_vectors(self, tree: int, local_ids, vectors) -> None:
        """Overwrite node K-vectors of one tree (rows of ``vectors``, one per node id)."""
        base = self._base(tree)
        self.vector[base + np.asarray(local_ids, dtype=np.int64)] = vectors

    def tree_vectors(self, tree: int) -> np.ndarray:
        """The K-vectors of one tree's nodes by local index (a view, shape
        ``(max_nodes, K)``): index it with :meth:`apply`'s nodes."""
        base = self._base(tree)
        return self.vector[base:base + self.max_nodes]

    def predict_vector_sum(self, X: np.ndarray) -> np.ndarray:
        """Sum over trees of the K-vector each row reaches, shape ``(rows, K)``.

        >>> f = Forest(max_nodes=3, max_depth=1, n_outputs=2)
        >>> t = f.add_tree(feature=[0, 0, 0], threshold=[0.5, np.inf, np.inf],
        ...                left=[1, 1, 2], value=[0.0, 0.0, 0.0])
        >>> f.set_vectors(t, [1, 2], [[1.0, -1.0], [0.0, 2.0]])
        >>> f.predict_vector_sum(np.array([[0.2], [0.9]])).tolist()
        [[1.0, -1.0], [0.0, 2.0]]
        """
        out = np.zeros((np.shape(X)[0], self.vector.shape[1]))
        for s, g in self._routed(X):
            for t in range(g.shape[1]):   # one gather per tree: no (rows, trees, K) temporary
                out[s:s + g.shape[0]] += self.vector[g[:, t]]
        return out

    def predict_vector_sum_one(self, row: np.ndarray) -> np.ndarray:
        """:meth:`predict_vector_sum` of one encoded row (a 1-d array): a K-vector."""
        if self.n_trees == 0:
            return np.zeros(self.vector.shape[1])
        return self.vector[self.nodes_one(row)].sum(axis=0)

    def _base(self, tree: int) -> int:
        if not 0 <= tree < self.n_trees:
            raise IndexError(f"tree {tree} out of range (forest has {self.n_trees})")
        return tree * self.max_nodes

    def _route(self, X: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Global node reached from ``start`` (shape (m, k)) after ``max_depth`` steps."""
        m, width = X.shape
        flat = np.ascontiguousarray(X).ravel()
        if np.isnan(flat).any():
            flat = np.where(np.isnan(flat), np.inf, flat)   # missing -> +inf: goes right below
        rowoff = (np.arange(m, dtype=np.int32) * width)[:, None]
        g = start
        feature, threshold, left = self.feature, self.threshold, self.left
        for _ in range(self.max_depth):
            # take(mode="clip") skips bounds checks: every index is valid by construction;
            # a leaf compares the constant 0 with +inf (0 > inf is False) and stays put
            xv = flat.take(feature.take(g, mode="clip") + rowoff, mode="clip")
            g = left.take(g, mode="clip") + (xv > threshold.take(g, mode="clip"))
        return g

    def apply(self, tree: int, X: np.ndarray) -> np.ndarray:
        """Local index of the node each row of ``X`` reaches in one tree."""
        X = np.asarray(X, dtype=np.float64)
        base = self._base(tree)
        if route_complete is not None and self.depths[tree] >= 0:
            return route_complete(_floats(X), base, self.feature, self.threshold,
                                  int(self.depths[tree])) - base
        if route_block is not None:
            X = _floats(X)
            roots = np.array([base], dtype=np.int64)
            return route_block(X, roots, self.feature, self.threshold, self.left,
                               self.max_depth)[:, 0] - base
        out = np.empty(X.shape[0], dtype=np.int64)
        for s in range(0, X.shape[0], 16 * _CHUNK):
            Xc = X[s:s + 16 * _CHUNK]
            start = np.full((Xc.shape[0], 1), base, dtype=np.int32)
            out[s:s + Xc.shape[0]] = self._route(Xc, start)[:, 0] - base
        return out

    def add_tree_values(self, score: np.ndarray, tree: int, nodes: np.ndarray,
                        sign: float = 1.0) -> None:
        """``score += sign * value`` of the local node each row reached in one tree
        (``nodes``, as :meth:`apply` gives them), in place and without a gathered
        temporary; ``sign=-1.0`` takes a retired tree's values away. The same bits as
        ``score += predict_tree(tree, X)`` (or ``-=``)."""
        base = self._base(tree)
        values, nodes = self.value[base:base + self.max_nodes], np.asarray(nodes, dtype=np.int64)
        if add_node_values is None:   # the numpy reference (tests compare the two)
            score += float(sign) * values[nodes]
        else:
            add_node_values(score, values, nodes, float(sign))

    def predict_tree(self, tree: int, X: np.ndarray) -> np.ndarray:
        """Value of the node each row reaches in one tree."""
        return self.value[self.apply(tree, X) + self._base(tree)]

    def _routed(self, X: np.ndarray):
        """``(start, nodes)`` per block of rows: the global node each row reaches in each tree."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError("X must be a 2-d array of encoded records")
        if self.n_trees == 0 or X.shape[0] == 0:
            return
        chunk = max(1, (_CHUNK * 150) // self.n_trees)
        if route_block is not None:   # compiled, in blocks of rows so memory stays bounded
            roots = np.arange(self.n_trees, dtype=np.int64) * self.max_nodes
            for s in range(0, X.shape[0], chunk):
                yield s, route_block(X[s:s + chunk], roots, self.feature, self.threshold,
                                     self.left, self.max_depth)
            return
        roots = (np.arange(self.n_trees) * self.max_nodes).astype(np.int32)[None, :]
        for s in range(0, X.shape[0], chunk):
            Xc = X[s:s + chunk]
            yield s, self._route(Xc, np.broadcast_to(roots, (Xc.shape[0], self.n_trees)))

    def predict_sum(self, X: np.ndarray) -> np.ndarray:
        """Sum over trees of the value each row reaches (the raw boosting score)."""
        if sum_block is not None and self.n_trees:
            X = _floats(X)
            if X.ndim != 2:
                raise ValueError("X must be a 2-d array of encoded records")
            roots = np.arange(self.n_trees, dtype=np.int64) * self.max_nodes
            return sum_block(X, roots, self.depths[:self.n_trees], self.feature,
                             self.threshold, self.left, self.value, self.max_depth)
        out = np.zeros(np.shape(X)[0])
        for s, g in self._routed(X):
            out[s:s + g.shape[0]] = self.value.take(g).sum(axis=1)
        return out

    def predict_sum_parts(self, X: np.ndarray, slots: np.ndarray,
                          n_slots: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`predict_sum`, and each row's sum over the trees of each slot (``slots[t]``:
        the slot of tree ``t``): ``(totals, parts)``, parts of shape ``(rows, n_slots)``.

        The totals are :meth:`predict_sum`'s bit for bit; a slot sums its trees in their
        order from 0.0, so adding a later tree's value to it later gives the same bits as
        summing again.

        >>> f = Forest(max_nodes=1, max_depth=0)
        >>> for v in (1.0, 2.0, 4.0):
        ...     _ = f.add_tree(feature=[0], threshold=[np.inf], left=[0], value=[v])
        >>> total, parts = f.predict_sum_parts(np.zeros((1, 1)), np.array([0, 0, 1]), 2)
        >>> total.tolist(), parts.tolist()
        ([7.0], [[3.0, 4.0]])
        """
        slots = np.asarray(slots, dtype=np.int64)
        if slots.shape != (self.n_trees,) or (slots.size and not
                                              0 <= slots.min() <= slots.max() < n_slots):
            raise ValueError(f"slots must give each of the {self.n_trees} trees a slot in "
                             f"[0, {n_slots})")
        m = np.shape(X)[0]
        if self.n_trees == 0 or m == 0:
            return np.zeros(m), np.zeros((m, n_slots))
        if sum_block_parts is not None:
            X = _floats(X)
            if X.ndim != 2:
                raise ValueError("X must be a 2-d array of encoded records")
            roots = np.arange(self.n_trees, dtype=np.int64) * self.max_nodes
            return sum_block_parts(X, roots, self.depths[:self.n_trees], self.feature,
                                   self.threshold, self.left, self.value, self.max_depth,
                                   slots, int(n_slots))
        values = self.leaf_values(X)
        parts = np.zeros((m, n_slots))
        for t in range(self.n_trees):   # the slot sums in tree order, as the kernel adds
            parts[:, slots[t]] += values[:, t]
        return self.predict_sum(X), parts

    def leaf_values(self, X: np.ndarray) -> np.ndarray:
        """The value each row reaches in each tree, shape ``(rows, trees)`` (e.g. votes)."""
        return self.value.take(self.nodes(X))

    def nodes(self, X: np.ndarray) -> np.ndarray:
        """The global node each row reaches in each tree, shape ``(rows, trees)``.

        Index any per-node table with it (e.g. leaf class counts of shape ``(nodes, k)``).
        """
        out = np.zeros((np.shape(X)[0], self.n_trees), dtype=np.int64)
        for s, g in self._routed(X):
            out[s:s + g.shape[0]] = g
        return out

    def nodes_one(self, row: np.ndarray) -> np.ndarray:
        """:meth:`nodes` of one encoded row (a 1-d array), without the batch set-up."""
        row = np.where(row == row, row, np.inf)   # missing (NaN) -> +inf: goes right below
        g = np.arange(0, self.n_trees * self.max_nodes, self.max_nodes, dtype=np.intp)
        feature, threshold, left = self.feature, self.threshold, self.left
        for _ in range(self.max_depth):
            # leaves compare the constant 0 with +inf: 0 > inf is False, so they stay put
            g = left.take(g) + (row.take(feature.take(g)) > threshold.take(g))
        return g

    def predict_sum_one(self, row: np.ndarray) -> float:
        """:meth:`predict_sum` of one encoded row (a 1-d array), without the batch set-up."""
        if self.n_trees == 0:
            return 0.0
        if sum_one is not None:
            return float(sum_one(_floats(row), self.n_trees, self.max_nodes, self.depths,
                                 self.feature, self.threshold, self.left, self.value,
                                 self.max_depth))
        return float(self.value.take(self.nodes_one(row)).sum())

    def predict_sum_parts_one(self, row: np.ndarray, slots: np.ndarray,
                              n_slots: int) -> tuple[float, np.ndarray]:
        """:meth:`predict_sum_parts` of one encoded row (a 1-d array): ``(total, parts)``,
        the total :meth:`predict_sum_one`'s bit for bit."""
        if self.n_trees == 0:
            return 0.0, np.zeros(n_slots)
        if sum_one_parts is not None:
            total, parts = sum_one_parts(_floats(row), self.n_trees, self.max_nodes,
                                         self.depths, self.feature, self.threshold, self.left,
                                         self.value, self.max_depth,
                                         np.asarray(slots, dtype=np.int64), int(n_slots))
            return float(total), parts
        total, parts = self.predict_sum_parts(np.asarray(row)[None, :], slots, n_slots)
        return self.predict_sum_one(row), parts[0]

    def to_dict(self) -> dict:
        """Plain-list state (JSON-friendly)."""
        n = self.n_trees * self.max_nodes
        return {"max_nodes": self.max_nodes, "max_depth": self.max_depth,
                "feature": self.feature[:n].tolist(), "threshold": self.threshold[:n].tolist(),
                "left": (self.left[:n] - np.repeat(np.arange(self.n_trees) * self.max_nodes,
                                                   self.max_nodes)).tolist(),
                "value": self.value[:n].tolist(),
                **({} if self.vector is None else {"n_outputs": self.vector.shape[1],
                                                   "vector": self.vector[:n].tolist()})}

    @classmethod
    def from_dict(cls, state: dict) -> Forest:
        vector = state.get("vector")
        forest = cls(max_nodes=state["max_nodes"], max_depth=state["max_depth"],
                     n_outputs=int(state.get("n_outputs", 1)))
        k = forest.max_nodes
        for t in range(len(state["feature"]) // k):
            sl = slice(t * k, (t + 1) * k)
            forest.add_tree(feature=state["feature"][sl], threshold=state["threshold"][sl],
                            left=state["left"][sl], value=state["value"][sl])
            if forest.vector is not None:
                forest.set_vectors(t, np.arange(k), vector[sl])
        return forest
