"""Buckets: how the keyed window forests release every node of a level without telling which
ones hold records.

Each level of a keyed tree maps its node keys pseudo-randomly into a public number of buckets
(:func:`bucket_count`, :func:`bucket_keys`) and releases an output for **every** bucket
(:class:`BucketTable` over :func:`bucket_space`), so the published key set is a function of
public tree ids. The buckets of a level partition the records, so a mechanism on each bucket's
pooled counts (:func:`bucket_counts`) composes in parallel as one on each node's would.

The design: ``docs/keyed_trees.md#buckets``.
"""

from __future__ import annotations

import numpy as np

from .random_trees import _U64, LeafTable, _mix, root_keys  # noqa: F401 - root_keys: examples

__all__ = ["BucketTable", "bucket_count", "bucket_counts", "bucket_index", "bucket_keys",
           "bucket_space", "bucket_tag"]

#: the salt of a node key's bucket (:func:`bucket_keys`)
BUCKET_SALT = _U64(0x5851F42D4C957F2D)
#: bucket masks stay below 2**40: the bits above carry the level (:func:`bucket_tag`)
_TAG_SHIFT = 40
#: most buckets of one tree level (a public cap: memory and model-topic message size)
MAX_BUCKETS = 2 ** 16


def bucket_count(n: int, factor: int = 4) -> int:
    """Buckets of one tree level for ``n`` training records (a public count): the smallest
    power of two ``>= factor * n``, at least 64 and at most :data:`MAX_BUCKETS`.

    At most ``n`` buckets hold a record, so two occupied nodes share one with probability
    at most ``1 / factor`` per node.

    >>> bucket_count(200), bucket_count(1), bucket_count(10**9)
    (1024, 64, 65536)
    """
    want = max(64, int(factor) * max(1, int(n)))
    return min(MAX_BUCKETS, 1 << (want - 1).bit_length())


def bucket_tag(level: int) -> np.uint64:
    """The bits that tell apart the buckets of tree level ``level`` (0: a random tree's
    leaves; the greedy forest's node levels 0 .. levels - 1, then its leaves at ``levels``)."""
    return _U64((int(level) + 1) << _TAG_SHIFT)


def bucket_keys(roots: np.ndarray, keys: np.ndarray, buckets, level: int = 0) -> np.ndarray:
    """The released node of each node key: one of ``buckets`` per tree (a public power of
    two), chosen by a pseudo-random function of the key and named ``mix(root ^ tag | bucket)``
    (mixed, so that the tables' open-addressing index spreads them).

    A window forest releases its nodes' outputs over **every** bucket of every tree, so the
    set of published keys is a function of public tree ids alone: which nodes hold records
    is never part of a release. Each record lies in one node per tree level and so in one
    bucket: the buckets of a level partition the records, and a mechanism run on each
    bucket's counts composes in parallel exactly as one run on each node's would (nodes that
    share a bucket pool their counts). ``buckets`` 0 keeps the key itself (windows trained
    before buckets, whose tables are looked up by node key).

    >>> roots = root_keys(1, [0, 1])
    >>> b = bucket_keys(roots, np.array([5, 5], dtype=np.uint64), 64)
    >>> bool(b[0] != b[1]), bool(np.isin(b, bucket_space(roots, 64)).all())
    (True, True)
    >>> bool((bucket_keys(roots, roots, 0) == roots).all())
    True
    """
    keys = np.asarray(keys, dtype=_U64)
    buckets = np.broadcast_to(np.asarray(buckets, dtype=_U64), keys.shape)
    mask = np.where(buckets > 0, buckets - _U64(1), _U64(0))
    out = _mix(np.asarray(roots, dtype=_U64)
               ^ (bucket_tag(level) | (_mix(keys ^ BUCKET_SALT) & mask)))
    return np.where(buckets > 0, out, keys)


def bucket_index(keys: np.ndarray, buckets: int) -> np.ndarray:
    """The bucket (``0 .. buckets - 1``) of each node key: its position in its tree's block
    of :func:`bucket_space`, whose key :func:`bucket_keys` gives.

    >>> roots = root_keys(1, [0])
    >>> k = np.array([3, 4], dtype=np.uint64)
    >>> bool((bucket_space(roots, 64)[bucket_index(k, 64)] == bucket_keys(roots, k, 64)).all())
    True
    """
    mask = _U64(int(buckets) - 1)
    return (_mix(np.asarray(keys, dtype=_U64) ^ BUCKET_SALT) & mask).astype(np.int64)


def bucket_counts(keys: np.ndarray, tree: np.ndarray, labels: np.ndarray, n_trees: int,
                  buckets: int, n_classes: int) -> np.ndarray:
    """Class counts of every bucket of ``n_trees`` trees (rows in :func:`bucket_space`'s
    order): record ``i`` reached node ``keys[i]`` of tree number ``tree[i]`` (0-based within the
    release) with class ``labels[i]``.

    >>> bucket_counts(np.array([3, 3, 9], dtype=np.uint64), np.array([0, 0, 1]),
    ...               np.array([1, 0, 1]), 2, 64, 2).sum(axis=0).tolist()
    [1.0, 2.0]
    """
    counts = np.zeros((int(n_trees) * int(buckets), int(n_classes)))
    np.add.at(counts, (np.asarray(tree, dtype=np.int64) * int(buckets)
                       + bucket_index(keys, buckets), np.asarray(labels, dtype=np.intp)), 1.0)
    return counts


def bucket_space(roots: np.ndarray, buckets: int, level: int = 0) -> np.ndarray:
    """Every bucket key of trees ``roots`` (tree-major): the public key set of a release.

    >>> bucket_space(root_keys(1, [0, 1]), 64).shape
    (128,)
    """
    roots = np.asarray(roots, dtype=_U64)
    span = bucket_tag(level) | np.arange(int(buckets), dtype=_U64)
    return _mix(roots[:, None] ^ span[None, :]).ravel()


class BucketTable(LeafTable):
    """A :class:`LeafTable` over every bucket of some trees (:func:`bucket_space` of each
    ``(buckets, level)`` block, in turn; ``values`` one row per bucket in that order).

    Its keys are a function of the trees' root keys, so a stored or published copy holds the
    roots, the blocks and the values only — one-hot rows (released labels) and single small
    integers (released attributes) as one byte each, values a float32 holds exactly as float32
    — and rebuilds the keys on load.

    >>> roots = root_keys(1, [0, 1])
    >>> votes = np.eye(2)[np.arange(2 * 64) % 2]
    >>> table = BucketTable(roots, [(64, 0)], votes)
    >>> sorted(table.__getstate__()), table.__getstate__()["labels"].dtype.name
    (['blocks', 'labels', 'roots', 'width'], 'uint8')
    >>> copy = BucketTable.__new__(BucketTable)
    >>> copy.__setstate__(table.__getstate__())
    >>> bool((copy.keys == table.keys).all() and (copy.values == table.values).all())
    True

    Counts released over every bucket, then found by a reached node's key:

    >>> roots = root_keys(7, [0, 1])
    >>> counts = bucket_counts(np.array([11, 12, 11], dtype=np.uint64), np.array([0, 0, 1]),
    ...                        np.array([1, 0, 1]), 2, 64, 2)
    >>> counts.shape, float(counts.sum())
    ((128, 2), 3.0)
    >>> table = BucketTable(roots, [(64, 0)], counts)
    >>> idx, hit = table.find(bucket_keys(roots[[0]], np.array([11], dtype=np.uint64), 64))
    >>> bool(hit[0]), table.values[idx[0]].tolist()
    (True, [0.0, 1.0])
    """

    def __init__(self, roots: np.ndarray, blocks, values: np.ndarray):
        self.roots = np.array(roots, dtype=_U64)   # its own copy: never shared state
        self.blocks = [(int(b), int(level)) for b, level in blocks]
        keys = self._space()
        values = np.asarray(values, dtype=np.float64)
        if values.shape[0] != keys.size:
            raise ValueError(f"{values.shape[0]} rows for {keys.size} buckets")
        order = np.argsort(keys, kind="stable")
        super().__init__(keys[order], values[order])

    def _space(self) -> np.ndarray:
        return np.concatenate([bucket_space(self.roots, b, level) for b, level in self.blocks]
                              or [np.zeros(0, dtype=_U64)])

    def __getstate__(self) -> dict:
        order = np.argsort(self._space(), kind="stable")
        values = np.empty_like(self.values)
        values[order] = self.values                         # back to the blocks' order
        state = {"roots": self.roots, "blocks": self.blocks, "width": int(values.shape[1])}
        onehot = values.size and ((values == 0) | (values == 1)).all() \
            and (values.sum(axis=1) == 1).all() and values.shape[1] <= 256
        if onehot:
            state["labels"] = values.argmax(axis=1).astype(np.uint8)
        elif values.shape[1] == 1 and np.array_equal(values, np.clip(np.round(values), 0, 255)):
            state["codes"] = values[:, 0].astype(np.uint8)       # the greedy forest's attributes
        elif np.array_equal(values.astype(np.float32), values):
            state["values32"] = values.astype(np.float32)
        else:
            state["values"] = values
        return state

    def __setstate__(self, state: dict) -> None:
        if "labels" in state:
            values = np.zeros((state["labels"].size, int(state["width"])))
            values[np.arange(state["labels"].size), state["labels"].astype(np.intp)] = 1.0
        elif "codes" in state:
            values = state["codes"].astype(np.float64)[:, None]
        else:
            values = np.asarray(state.get("values", state.get("values32")), dtype=np.float64)
        BucketTable.__init__(self, state["roots"], state["blocks"], values)
