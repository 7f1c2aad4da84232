"""Per-record sums of blocks of trees, so that S-GBDT retires a block of trees without routing
its pool through them: :class:`BlockSums`.

Slot ``j`` of a pool record holds the sum of the values the record reaches in the live trees
of that slot's block, added in tree order from 0.0, so summing the trees again gives the same
bits: the sums are derived data, not stored in a checkpoint (:meth:`BlockSums.ensure`).

Design: docs/sgbdt_internals.md#block-sums (and docs/sgbdt.md#trees-retire-in-blocks).
"""

from __future__ import annotations

import numpy as np

from .round_kernels import move_rows


class BlockSums:
    """The block sums of a pool whose rows live in ``[:n]`` of arrays with spare capacity.

    Tree ``s`` (its serial: trees are numbered in the order they are added) belongs to block
    ``s // block``, kept in slot ``(s // block) % n_slots``; with ``n_slots = max_trees //
    block + 2`` a slot is used again only after its block has retired (and was cleared).

    Examples
    --------
    >>> import numpy as np
    >>> from dpstream.models.forest import Forest
    >>> forest = Forest(max_nodes=1, max_depth=0)
    >>> for v in (1.0, 2.0, 4.0):
    ...     _ = forest.add_tree(feature=[0], threshold=[np.inf], left=[0], value=[v])
    >>> sums = BlockSums(block=2, max_trees=4)
    >>> sums.n_slots, sums.slots(first=0, n_trees=3).tolist()   # trees 0, 1 | 2
    (4, [0, 0, 1])
    >>> pool = np.zeros((5, 1))                      # five records arrive: scored with sums
    >>> total, parts = forest.predict_sum_parts(pool, sums.slots(first=0, n_trees=3),
    ...                                         sums.n_slots)
    >>> sums.append(0, parts, capacity=8)
    >>> float(total[0]), sums.view(5)[0].tolist()
    (7.0, [3.0, 4.0, 0.0, 0.0])
    >>> sums.oldest_block(first=0, n_trees=3)        # (trees in the oldest block, its slot)
    (2, 0)
    >>> import pickle
    >>> restored = pickle.loads(pickle.dumps(sums))  # a checkpoint keeps no sums...
    >>> restored.ready
    False
    >>> restored.ensure(forest, pool, n=5, capacity=8, first=0)   # ...they are summed again
    >>> bool(np.array_equal(restored.view(5), sums.view(5)))
    True
    """

    def __init__(self, *, block: int, max_trees: int):
        if not 1 < block <= max_trees:
            raise ValueError(f"block must be in 2..max_trees ({max_trees}), got {block}")
        self.block = int(block)
        self.n_slots = int(max_trees) // self.block + 2
        # one row per pool row (the pool's capacity), column-major: a slot is one contiguous
        # column; None after a restore until ensure() sums it again
        self._rows: np.ndarray | None = np.zeros((0, self.n_slots), order="F")

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_rows"] = None   # derived: summed again on restore, never saved
        return state

    # ---------------------------------------------------------------- layout
    def slots(self, *, first: int, n_trees: int) -> np.ndarray:
        """The slot of each of ``n_trees`` live trees, oldest first, whose serials start at
        ``first`` (kept until the forest changes: every prediction asks for it)."""
        key = (first, n_trees)
        cached = getattr(self, "_slots", None)
        if cached is None or cached[0] != key:
            slots = ((first + np.arange(n_trees)) // self.block) % self.n_slots
            slots.flags.writeable = False
            self._slots = cached = (key, slots)
        return cached[1]

    def slot_of(self, serial: int) -> int:
        return (serial // self.block) % self.n_slots

    def oldest_block(self, *, first: int, n_trees: int) -> tuple[int, int]:
        """``(k, slot)``: how many of the live trees (serials from ``first``) are in the oldest
        block, and that block's slot."""
        return min(n_trees, self.block - first % self.block), self.slot_of(first)

    # ------------------------------------------------------------------ rows
    @property
    def ready(self) -> bool:
        return self._rows is not None

    def ensure(self, forest, X: np.ndarray, *, n: int, capacity: int, first: int) -> None:
        """Sum the ``n`` pool rows ``X`` again (after a restore): the same bits as the sums
        kept along the way."""
        if self._rows is None:
            rows = np.zeros((capacity, self.n_slots), order="F")
            slots = self.slots(first=first, n_trees=len(forest))
            rows[:n] = forest.predict_sum_parts(X, slots, self.n_slots)[1]
            self._rows = rows

    def view(self, n: int) -> np.ndarray:
        """The sums of the pool rows ``[:n]``, one column per slot (a view)."""
        return self._rows[:n]

    def column(self, slot: int, n: int) -> np.ndarray:
        """One slot's sums of the pool rows ``[:n]`` (a contiguous view, written in place)."""
        return self._rows[:n, slot]

    def append(self, n: int, parts: np.ndarray, capacity: int) -> None:
        """Write the sums of new pool rows ``n ..`` (growing to ``capacity`` rows if needed)."""
        if capacity > self._rows.shape[0]:
            grown = np.zeros((capacity, self.n_slots), order="F")
            grown[:n] = self._rows[:n]
            self._rows = grown
        self._rows[n:n + parts.shape[0]] = parts

    def compact(self, holes: np.ndarray, movers: np.ndarray, keep: int, n: int,
                capacity: int) -> None:
        """The pool's compaction: rows ``movers`` fill ``holes``, rows ``keep .. n`` are
        cleared, and the capacity follows the pool's."""
        move_rows(self._rows, holes, movers)
        self._rows[keep:n] = 0.0
        if capacity < self._rows.shape[0]:
            self._rows = self._rows[:capacity].copy(order="F")

    def clear(self, slot: int | None = None) -> None:
        """Empty one slot (its block retired), or every slot (no live tree)."""
        if slot is None:
            self._rows[:] = 0.0
        else:
            self._rows[:, slot] = 0.0
