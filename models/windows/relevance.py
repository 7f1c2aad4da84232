"""Which attributes to split on: a differentially private attribute-relevance estimate.

:class:`AttributeRelevance` releases, per window, one (bin, class) histogram per attribute from
a disjoint random part of the window's labeled records: each record is in one cell of one
histogram (sensitivity 1), so Laplace noise of scale ``1/epsilon`` per cell makes the release
``epsilon``-DP. The accumulated noisy histograms' information gains, with a floor that keeps
every attribute in play, become the probabilities the trees draw split attributes with
(post-processing). :func:`owned_attributes` splits the attributes among group members.

The mechanism and the probabilities: ``docs/window_exchange.md#attribute-relevance``.
"""

from __future__ import annotations

import numpy as np

from ...accounting import LaplaceMechanism, noise

__all__ = ["AttributeRelevance", "owned_attributes", "slot_counts"]


def slot_counts(weights: np.ndarray, per_attribute: int = 4, max_slots: int = 48,
                max_categorical: int = 8, n_numeric: int | None = None) -> np.ndarray:
    """Attribute probabilities as integer slot counts (each at least 1) for trees that draw
    attributes uniformly among slots
    (:meth:`~dpstream.models.windows.random_trees.ImplicitRandomTrees.with_slots`):
    ``round(w_j * T)`` with ``T = min(per_attribute * F, max_slots)`` (a walk's cost grows
    with the slots); uniform weights give ``per_attribute`` each (fewer when capped). With
    ``n_numeric``, the categorical slots (the attributes after the first ``n_numeric``) are
    scaled down to at most ``max_categorical`` or their number if larger (the compiled walks
    find the free ones in a bit mask through a table up to 8 of them, bit by bit beyond).

    >>> slot_counts(np.array([0.7, 0.1, 0.1, 0.1])).tolist()
    [11, 2, 2, 2]
    >>> slot_counts(np.full(3, 1 / 3)).tolist()
    [4, 4, 4]
    """
    w = np.asarray(weights, dtype=np.float64)
    total = max(w.size, min(per_attribute * w.size, max_slots))
    counts = np.maximum(1, np.rint(w * total)).astype(np.int64)
    limit = max(max_categorical, w.size - (n_numeric or 0))
    if n_numeric is not None and counts[n_numeric:].sum() > limit:
        cat = counts[n_numeric:]
        counts[n_numeric:] = np.maximum(1, np.floor(cat * limit / cat.sum()))
    return counts


def owned_attributes(partitions: list[int], total: int, n_attributes: int) -> list[int] | None:
    """The attributes whose relevance histograms a group member releases: attribute ``j`` of
    ``F = n_attributes`` belongs to partition ``floor(j * total / F)`` of a topic's ``total``,
    and a member owns the attributes of the partitions it holds; ``None`` (every attribute)
    for a member holding them all, or none of them (an assignment of no partition of the
    topic: nothing to split); ``[]`` for a member whose partitions own no attribute (more
    partitions than attributes: it releases no histogram).

    Why: each release adds Laplace noise of the same scale to every cell it releases, however
    few records it holds. One process releases each attribute's histogram once per window;
    ``k`` members releasing every attribute from their ``1 / k`` of the window would bring
    ``k`` times that noise into the group's summed evidence (measured on river's Agrawal:
    three members 8 pp behind one process). With the attributes split by partition, every
    attribute belongs to exactly one partition, so the group releases it once per window,
    whatever the assignment. The attributes of consecutive partitions are consecutive, and
    each partition owns about ``F / total`` of them: Kafka's range assignor (kafka-python's
    default, and so ``dpstream serve``'s) gives each member a block of partitions and with it
    its share of the attributes, within one, so each attribute's histogram holds about as
    many records as one process deals it. (Until 2026-11-27, with more partitions than
    attributes, partition ``p`` owned attribute ``p mod F``: some attributes had two owners,
    two releases from twice the records, and the rest three quarters of one process's
    records, whose noise then passed for relevance: two, three and four members of a
    12-partition Agrawal topic were 2.6-3.6 pp behind one process in process, and are within
    1 pp now; docs/benchmark_notes.md, 2026-11-27's tenth stop.)
    The split is public (the group's assignment decides it) and each record still enters one
    cell of one histogram.

    >>> owned_attributes([0, 3], 6, 9)        # 2 of 6 partitions, 9 attributes
    [0, 1, 5]
    >>> owned_attributes([9, 10, 11], 12, 9)  # a block of 3 of 12 partitions
    [7, 8]
    >>> owned_attributes([3], 12, 9)          # this partition owns no attribute
    []
    >>> owned_attributes([0, 1], 2, 5) is None, owned_attributes([], 6, 9) is None
    (True, True)
    """
    parts = {int(p) for p in partitions if 0 <= int(p) < total}
    if not parts or n_attributes <= 0 or parts == set(range(total)):
        return None   # every attribute: the whole topic, or no partition of it known
    return [j for j in range(n_attributes) if j * total // n_attributes in parts]


def _entropy(counts: np.ndarray) -> np.ndarray:
    """Entropy (nats) of the class distribution of each row of ``counts`` (rows of zeros: 0)."""
    total = counts.sum(axis=-1, keepdims=True)
    p = np.divide(counts, total, out=np.zeros_like(counts), where=total > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1)


def _deal(n: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random partition of ``range(n)`` into ``k`` disjoint parts (data-independent)."""
    return np.array_split(noise.permutation(rng, n), k)


class AttributeRelevance:
    """Accumulated DP (bin, class) histograms per attribute, and split-attribute probabilities.

    Parameters
    ----------
    numeric
        ``(column, min, max)`` of each numeric attribute (public schema domains).
    categorical
        The encoded columns of each categorical attribute (one per public value; the encoder
        writes 0 in the column of the record's value, 1 in the others, NaN when missing).
    n_classes
        Public number of classes.
    n_bins
        Equal-width cells of each numeric attribute's domain.
    floor
        Share of the probability spread uniformly over all attributes, so that every attribute
        keeps being drawn (the evidence may be wrong, or the concept may change).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = np.c_[rng.uniform(0, 10, 4000), rng.uniform(0, 10, 4000), rng.uniform(0, 10, 4000)]
    >>> y = (X[:, 1] > 5).astype(int)                      # only attribute 1 matters
    >>> rel = AttributeRelevance(numeric=[(0, 0.0, 10.0), (1, 0.0, 10.0), (2, 0.0, 10.0)],
    ...                          categorical=[], n_classes=2, n_bins=8)
    >>> rel.weights().round(3).tolist()                    # no evidence: uniform
    [0.333, 0.333, 0.333]
    >>> rel.release(X, y, epsilon=1.0, rng=rng)
    >>> w = rel.weights()
    >>> int(np.argmax(w)), bool(w[1] > 0.6)
    (1, True)
    """

    #: the attributes whose histograms :meth:`release` fills (``None``: all of them)
    owned: list[int] | None = None

    def __init__(self, numeric: list[tuple[int, float, float]], categorical: list[list[int]],
                 n_classes: int, n_bins: int = 8, floor: float = 0.3):
        self.numeric = [(int(c), float(lo), float(hi)) for c, lo, hi in numeric]
        self.categorical = [list(cols) for cols in categorical]
        self.n_classes = int(n_classes)
        self.n_bins = int(n_bins)
        self.floor = float(floor)
        cells = [self.n_bins] * len(self.numeric) + [len(c) for c in self.categorical]
        self._cells = [k + 1 for k in cells]          # + one cell for a missing value
        self.counts = [np.zeros((k, self.n_classes)) for k in self._cells]
        self.releases = 0

    @property
    def n_attributes(self) -> int:
        return len(self._cells)

    def reset(self) -> None:
        """Forget the evidence (a new concept: the drift signal fired)."""
        self.counts = [np.zeros_like(c) for c in self.counts]
        self.releases = 0

    def _cell(self, j: int, X: np.ndarray) -> np.ndarray:
        """The cell of attribute ``j`` each row of ``X`` falls in (the last: missing)."""
        if j < len(self.numeric):
            col, lo, hi = self.numeric[j]
            v = X[:, col]
            width = (hi - lo) / self.n_bins if hi > lo else 1.0
            cell = np.clip(np.floor((np.nan_to_num(v, nan=lo) - lo) / width), 0,
                           self.n_bins - 1).astype(np.int64)
            return np.where(np.isnan(v), self.n_bins, cell)
        cols = self.categorical[j - len(self.numeric)]
        is_value = X[:, cols] <= 0.5
        return np.where(is_value.any(axis=1), is_value.argmax(axis=1), len(cols))

    def set_owned(self, attributes: list[int] | None) -> None:
        """Release histograms of ``attributes`` only (``None``: every attribute, as one
        process does; ``[]``: none, a member whose partitions own no attribute); see
        :func:`owned_attributes` for why members of a group split them."""
        if attributes is not None:
            attributes = sorted({int(j) for j in attributes})
            if attributes and (attributes[0] < 0 or attributes[-1] >= self.n_attributes):
                raise ValueError(f"owned attributes must be a subset of "
                                 f"0..{self.n_attributes - 1}, got {attributes}")
            if len(attributes) == self.n_attributes:
                attributes = None
        self.owned = attributes

    def release(self, X: np.ndarray, y: np.ndarray, *, epsilon: float,
                rng: np.random.Generator) -> None:
        """Release one window's histograms (``epsilon``-DP per record) and add them up.

        ``X``: the window's labeled encoded rows; ``y``: their class indices. The rows are
        dealt among the :attr:`owned` attributes (all by default); the others' histograms
        are not released (zeros in :attr:`last_release`; all zeros for a member that owns
        none, which still counts the release: the group's releases of a window stay one per
        member).
        """
        n = X.shape[0]
        own = list(range(self.n_attributes)) if self.owned is None else self.owned
        parts = _deal(n, len(own), rng) if own else []   # (none owned: no record is read)
        mech = LaplaceMechanism(epsilon=epsilon, sensitivity=1.0, rng=rng, integers=True)
        released = [np.zeros_like(c) for c in self.counts]
        for j, part in zip(own, parts, strict=True):
            k = self._cells[j] * self.n_classes   # whole counts: np.add.at's += 1, binned
            hist = np.bincount(self._cell(j, X[part]) * self.n_classes + y[part],
                               minlength=k).reshape(self._cells[j], self.n_classes)
            hist = hist.astype(np.float64)
            released[j] = mech.release(hist)
            self.counts[j] += released[j]
        self.releases += 1
        self.last_release = released   # released values: other members may add them up

    def merge(self, histograms: list, sign: float = 1.0) -> None:
        """Add (``sign=-1``: take back) another release's noisy histograms — one window of
        another group member, say: summing released values is post-processing.

        Examples
        --------
        >>> rel = AttributeRelevance(numeric=[(0, 0.0, 1.0)], categorical=[], n_classes=2,
        ...                          n_bins=2)
        >>> rel.merge([np.array([[5.0, 0.0], [0.0, 5.0], [0.0, 0.0]])])
        >>> rel.counts[0].sum(), rel.releases
        (np.float64(10.0), 0)
        """
        if len(histograms) != len(self.counts) or any(
                np.shape(h) != c.shape for h, c in zip(histograms, self.counts, strict=False)):
            raise ValueError("relevance histograms of another shape (another schema or "
                             "n_bins) cannot be merged")
        for c, h in zip(self.counts, histograms, strict=True):
            c += sign * np.asarray(h, dtype=np.float64)

    def gains(self) -> np.ndarray:
        """Information gain (nats) of each attribute's accumulated noisy histogram."""
        out = np.zeros(self.n_attributes)
        for j, c in enumerate(self.counts):
            c = np.maximum(c, 0.0)
            total = c.sum()
            if total <= 0:
                continue
            rows = c.sum(axis=1)
            gain = _entropy(c.sum(axis=0)) - float((rows / total) @ _entropy(c))
            out[j] = gain
        return out

    def weights(self) -> np.ndarray:
        """The probability of drawing each attribute (numeric first, then categorical).

        An attribute without evidence while others have some (a group member's attributes
        that another member releases, before its first window arrives) counts with the mean
        gain of those that have: neither favoured nor starved."""
        F = self.n_attributes
        uniform = np.full(F, 1.0 / F)
        has = np.array([c.any() for c in self.counts], dtype=bool)
        if F == 0 or not has.any():
            return uniform   # no evidence yet (merged releases of other members count too)
        g = self.gains()
        if not has.all():
            g[~has] = g[has].mean()
        if g.sum() <= 0:
            return uniform
        return self.floor * uniform + (1.0 - self.floor) * g / g.sum()
