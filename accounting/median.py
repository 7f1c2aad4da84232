"""The private median of Huang, Lei & Kabán (2023), Section 4, with public bounds.

:class:`PrivateMedian`: the exponential mechanism over candidates drawn uniformly from the
PUBLIC interval ``[lower, upper]`` (never the data's min and max), rank utility with sensitivity
1/2 (:data:`MEDIAN_SENSITIVITY`), epsilon-DP, sampled exactly. Derivation:
docs/accounting.md#the-private-median.
"""

from __future__ import annotations

import math

import numpy as np

from ._validate import as_generator, check_epsilon, check_finite_array, check_integer
from .exponential import ExponentialMechanism
from .noise import distance_factor, em_pick_dist, select_by_distance

__all__ = ["PrivateMedian", "MEDIAN_SENSITIVITY", "categorical_distances_core",
           "median_candidates_core"]

#: Sensitivity of the rank utility (Huang et al., 2023, Section 4).
MEDIAN_SENSITIVITY = 0.5


class PrivateMedian:
    """epsilon-DP median of values in a public interval (Huang et al., 2023, Alg. 1 ``PrivateMedian``).

    Parameters
    ----------
    epsilon
        Privacy parameter, > 0.
    lower, upper
        The public bounds of the values (from the schema, narrowed by the split path).
    n_candidates
        How many uniform candidates to draw from ``[lower, upper]`` (data-independent).
    rng
        ``None`` (OS entropy), an int seed (tests only) or a numpy Generator.

    Examples
    --------
    >>> import numpy as np
    >>> med = PrivateMedian(epsilon=2.0, lower=0.0, upper=100.0, rng=0)
    >>> values = np.random.default_rng(1).uniform(40, 60, size=500)
    >>> 45 < med.release(values) < 55
    True
    >>> med.release([150.0])
    Traceback (most recent call last):
    ...
    ValueError: values must lie within the public bounds [0.0, 100.0]; clip them to the schema domain first
    >>> PrivateMedian(epsilon=1.0, lower=5.0, upper=5.0)
    Traceback (most recent call last):
    ...
    ValueError: upper must be > lower, got lower=5.0, upper=5.0
    """

    def __init__(self, *, epsilon: float, lower: float, upper: float, n_candidates: int = 256,
                 rng: np.random.Generator | int | None = None):
        self._em = ExponentialMechanism(epsilon=epsilon, sensitivity=MEDIAN_SENSITIVITY, rng=rng)
        lo = float(check_finite_array("lower", lower, ndim=0))
        hi = float(check_finite_array("upper", upper, ndim=0))
        if not hi > lo:
            raise ValueError(f"upper must be > lower, got lower={lo}, upper={hi}")
        self.lower, self.upper = lo, hi
        self.n_candidates = check_integer("n_candidates", n_candidates, 1)

    @property
    def epsilon(self) -> float:
        return self._em.epsilon

    @property
    def rng(self) -> np.random.Generator:
        return self._em.rng

    def utilities(self, values, candidates) -> np.ndarray:
        """The rank utility ``-|rank(r) - n/2|`` of each candidate."""
        v = np.sort(self._values(values))
        rank = np.searchsorted(v, np.asarray(candidates, dtype=np.float64), side="right")
        return -np.abs(rank - v.size / 2.0)

    def release(self, values, *, size: int | None = None):
        """Draw fresh uniform candidates and return one chosen by the exponential mechanism.

        ``size`` returns that many independent releases (each with its own candidates).
        """
        v = np.sort(self._values(values))
        if size is None:
            return self.release_sorted(v, epsilon=self.epsilon, lower=self.lower,
                                       upper=self.upper, n_candidates=self.n_candidates,
                                       rng=self.rng)
        n = check_integer("size", size, 1)
        out = np.empty(n)
        chunk = max(1, 1_000_000 // self.n_candidates)
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            cand = self.rng.uniform(self.lower, self.upper, size=(m, self.n_candidates))
            rank = np.searchsorted(v, cand, side="right")
            pick = select_by_distance(self.rng, np.abs(2 * rank - v.size), self.epsilon)
            out[start:start + m] = cand[np.arange(m), pick]
        return out

    @staticmethod
    def release_sorted(values: np.ndarray, *, epsilon: float, lower: float, upper: float,
                       n_candidates: int, rng: np.random.Generator) -> float:
        """One :meth:`release` of values already sorted in ascending order — the same draws
        and the same result — without building a mechanism: the form a tree grower calls
        once per node. The checks are O(1) on the sorted values (NaN sorts last and fails
        the upper bound).

        >>> v = np.sort(np.random.default_rng(1).uniform(40, 60, size=500))
        >>> a = PrivateMedian(epsilon=2.0, lower=0.0, upper=100.0, rng=5).release(v)
        >>> a == PrivateMedian.release_sorted(v, epsilon=2.0, lower=0.0, upper=100.0,
        ...                                   n_candidates=256, rng=np.random.default_rng(5))
        True
        """
        if not (epsilon > 0 and math.isfinite(epsilon) and math.isfinite(lower)
                and math.isfinite(upper) and upper > lower and n_candidates >= 1):
            raise ValueError("need epsilon > 0 and finite bounds with upper > lower")
        if values.ndim != 1 or (values.size and not (values[0] >= lower
                                                     and values[-1] <= upper)):
            raise ValueError(f"values must be sorted, finite and within the public bounds "
                             f"[{lower}, {upper}]")
        cand = rng.uniform(lower, upper, size=(1, n_candidates))
        rank = np.searchsorted(values, cand, side="right")
        num, den = distance_factor(epsilon)
        dist = np.abs(2 * rank[0] - values.size).astype(np.int64)
        return float(cand[0, em_pick_dist(rng, dist, n_candidates, num, den)])

    def _values(self, values) -> np.ndarray:
        v = check_finite_array("values", values, ndim=1, allow_empty=True)
        if v.size and (v.min() < self.lower or v.max() > self.upper):
            raise ValueError(
                f"values must lie within the public bounds [{self.lower}, {self.upper}]; "
                "clip them to the schema domain first")
        return v

    @staticmethod
    def categorical(codes, *, n_categories: int, epsilon: float,
                    rng: np.random.Generator | int | None = None) -> int:
        """The paper's categorical variant: choose a category code by ``-|count(r) - n/2|``.

        >>> PrivateMedian.categorical([0, 0, 1, 2, 2, 2], n_categories=3, epsilon=50.0, rng=0)
        2
        """
        k = check_integer("n_categories", n_categories, 1)
        c = np.asarray(codes)
        if c.size and (c.dtype.kind not in "iu" or c.min() < 0 or c.max() >= k):
            raise ValueError(f"codes must be integers in [0, {k})")
        counts = np.bincount(c.astype(np.int64), minlength=k) if c.size else np.zeros(k)
        # the exponential mechanism on the integer distances |2 count - n| (u = -d / 2)
        num, den = distance_factor(check_epsilon(epsilon))
        dist = np.abs(2 * counts.astype(np.int64) - c.size)
        return int(em_pick_dist(as_generator(rng), dist, k, num, den))


# PrivateMedian's releases before the exponential mechanism's draw, as plain Python that numba
# compiles (a tree grower runs them in machine code with the Generator passed in; followed by
# noise.em_pick_dist they are release_sorted and categorical: the same candidates, distances
# and draws in the same order, checked in tests/test_median_kernels.py).

def median_candidates_core(values: np.ndarray, m: int, lower: float, upper: float,
                           rng: np.random.Generator, cand: np.ndarray,
                           distance: np.ndarray) -> None:
    """:meth:`PrivateMedian.release_sorted`'s candidates and distances, into buffers.

    ``values[:m]`` are the node's values, sorted; ``len(cand)`` uniform candidates are drawn
    from ``[lower, upper]`` into ``cand`` (``lower + (upper - lower) * next_double`` each, as
    ``rng.uniform``) and ``distance`` gets ``|2 rank - m|``, ``rank = #{v <= candidate}``. The
    caller checks the bounds (finite, ``upper > lower``); values outside them raise.

    >>> v = np.array([0.2, 0.4, 0.9])
    >>> cand, dist = np.empty(4), np.empty(4, dtype=np.int64)
    >>> median_candidates_core(v, 3, 0.0, 1.0, np.random.default_rng(0), cand, dist)
    >>> cand.round(2).tolist(), dist.tolist()
    ([0.64, 0.27, 0.04, 0.02], [1, 1, 3, 3])
    """
    if m > 0 and not (values[0] >= lower and values[m - 1] <= upper):
        raise ValueError("values must be sorted, finite and within the public bounds")
    for c in range(cand.shape[0]):
        cand[c] = rng.uniform(lower, upper)
    for c in range(cand.shape[0]):
        x = cand[c]
        lo, hi = 0, m   # rank = #{v <= x}: np.searchsorted(values, x, side="right")
        while lo < hi:
            mid = (lo + hi) >> 1
            if values[mid] <= x:
                lo = mid + 1
            else:
                hi = mid
        distance[c] = abs(2 * lo - m)


def categorical_distances_core(counts: np.ndarray, k: int, distance: np.ndarray) -> None:
    """:meth:`PrivateMedian.categorical`'s distances ``|2 count - n|`` of the category counts
    ``counts[:k]`` into ``distance[:k]`` (``n`` the counts' sum).

    >>> dist = np.empty(3, dtype=np.int64)
    >>> categorical_distances_core(np.array([1, 4, 1]), 3, dist)
    >>> dist.tolist()
    [4, 2, 4]
    """
    n = 0
    for c in range(k):
        n += counts[c]
    for c in range(k):
        distance[c] = abs(2 * counts[c] - n)
