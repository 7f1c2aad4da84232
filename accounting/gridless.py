"""The grid-less exponential mechanism of Kirschte et al. (2023), Algorithm 2 (proof: Lemma 26).

:class:`GridlessExponentialMechanism` chooses a split (feature and value) among buckets cut by
the data values in each feature's PUBLIC range, epsilon-DP for any subset-closed utility with
sensitivity Delta, with as many candidates as data points and no grid; split values lie on a
public lattice and are sampled exactly. Derivation and privacy argument:
docs/accounting.md#the-grid-less-exponential-mechanism.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ._validate import (
    as_generator,
    check_epsilon,
    check_finite_array,
    check_positive,
)
from .noise import choose, em_pick_masses, lattice_step, selection_lattice, utility_steps

#: the lattice of split values: ``2^(floor(log2(vmax - vmin)) - SPLIT_BITS)``
SPLIT_BITS = 20

__all__ = ["GridlessExponentialMechanism", "GridlessChoice"]


@dataclass(frozen=True)
class GridlessChoice:
    """The released split: feature index (numerical features first), value, and kind."""

    feature: int
    value: float
    categorical: bool


class GridlessExponentialMechanism:
    """Grid-less exponential mechanism over numerical and categorical features.

    Parameters
    ----------
    epsilon
        Privacy parameter, > 0.
    sensitivity
        Sensitivity ``Delta_u`` of the utility, > 0.
    bounds
        Public ``(vmin, vmax)`` of each numerical feature.
    categories
        Public values of each categorical feature (features ``len(bounds)``, ``len(bounds)+1``...).
    numeric_weight
        The weight ``r`` of a numerical feature relative to one categorical value.
    rng
        ``None`` (OS entropy), an int seed (tests only) or a numpy Generator.

    Examples
    --------
    A private median over one numerical feature, using the rank utility (sensitivity 1/2):

    >>> import numpy as np
    >>> mech = GridlessExponentialMechanism(epsilon=4.0, sensitivity=0.5, bounds=[(0.0, 10.0)],
    ...                                     rng=0)
    >>> data = [np.linspace(4.0, 6.0, 101)]
    >>> def rank_utility(feature, lower_edges, n=101):
    ...     return -np.abs(np.arange(lower_edges.size) - n / 2)
    >>> choice = mech.select(data, rank_utility)
    >>> choice.feature, 4.5 < choice.value < 5.5
    (0, True)
    """

    def __init__(self, *, epsilon: float, sensitivity: float,
                 bounds: Sequence[tuple[float, float]] = (),
                 categories: Sequence[Sequence[float]] = (), numeric_weight: float = 1.0,
                 rng: np.random.Generator | int | None = None):
        self.epsilon = check_epsilon(epsilon)
        self.sensitivity = check_positive("sensitivity", sensitivity)
        b = check_finite_array("bounds", bounds, allow_empty=True).reshape(-1, 2)
        if np.any(b[:, 1] <= b[:, 0]):
            raise ValueError("bounds must satisfy vmin < vmax for every numerical feature")
        self.bounds = b
        self.categories = [check_finite_array(f"categories[{i}]", c, ndim=1)
                           for i, c in enumerate(categories)]
        if len(self.bounds) + len(self.categories) == 0:
            raise ValueError("bounds and categories must not both be empty (no candidates)")
        self.numeric_weight = check_positive("numeric_weight", numeric_weight)
        self.rng = as_generator(rng)

    def _buckets(self, numeric: Sequence[np.ndarray], utility: Callable[[int, np.ndarray],
                                                                        np.ndarray]):
        if len(numeric) != len(self.bounds):
            raise ValueError(f"numeric must hold one column per numerical feature "
                             f"({len(self.bounds)}), got {len(numeric)}")
        factor = self.epsilon / (2.0 * self.sensitivity)
        log_w, lows, highs, feats, utils = [], [], [], [], []
        for i, col in enumerate(numeric):
            vmin, vmax = self.bounds[i]
            v = np.sort(check_finite_array(f"numeric[{i}]", col, ndim=1, allow_empty=True))
            if v.size and (v[0] < vmin or v[-1] > vmax):
                raise ValueError(f"numeric[{i}] must lie within its public bounds "
                                 f"[{vmin}, {vmax}]; clip to the schema domain first")
            edges = np.concatenate(([vmin], v, [vmax]))
            lo, hi = edges[:-1], edges[1:]
            u = check_finite_array(f"utility({i})", utility(i, lo), ndim=1)
            if u.shape != lo.shape:
                raise ValueError(f"utility({i}, ...) must return {lo.size} values, got {u.size}")
            with np.errstate(divide="ignore"):
                lw = np.log(self.numeric_weight / (vmax - vmin)) + np.log(hi - lo) + factor * u
            log_w.append(lw)
            utils.append(u)
            lows.append(lo)
            highs.append(hi)
            feats.append(np.full(lo.size, i))
        for c, values in enumerate(self.categories):
            i = len(self.bounds) + c
            u = check_finite_array(f"utility({i})", utility(i, values), ndim=1)
            if u.shape != values.shape:
                raise ValueError(f"utility({i}, ...) must return {values.size} values")
            log_w.append(factor * u)
            utils.append(u)
            lows.append(values)
            highs.append(values)
            feats.append(np.full(values.size, i))
        return (np.concatenate(log_w), np.concatenate(lows), np.concatenate(highs),
                np.concatenate(feats), np.concatenate(utils))

    def probabilities(self, numeric, utility) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact bucket probabilities with their ``(lower, upper)`` edges (for tests and plots)."""
        lw, lo, hi, _, _ = self._buckets(numeric, utility)
        finite = np.isfinite(lw)
        p = np.zeros_like(lw)
        p[finite] = np.exp(lw[finite] - lw[finite].max())
        return p / p.sum(), lo, hi

    def select(self, numeric: Sequence[np.ndarray],
               utility: Callable[[int, np.ndarray], np.ndarray]) -> GridlessChoice:
        """Release one split, exactly (docs/accounting.md#the-grid-less-exponential-mechanism).

        ``utility(i, candidates)`` returns the utility of each bucket of feature ``i``: for a
        numerical feature ``candidates`` are the buckets' lower edges (any split in the bucket is
        equivalent), for a categorical feature they are its public values.
        """
        _, lo, hi, feats, utilities = self._buckets(numeric, utility)
        n_num = len(self.bounds)
        masses = np.empty(lo.size, dtype=np.int64)
        first = np.zeros(lo.size, dtype=np.int64)
        unit = 1 << 30
        for i in range(n_num + len(self.categories)):
            at = feats == i
            if i >= n_num:
                masses[at] = unit
                continue
            vmin, vmax = self.bounds[i]
            h = lattice_step(float(vmax - vmin), SPLIT_BITS)
            start = np.ceil(lo[at] / h)
            stop = np.ceil(hi[at] / h)
            stop[-1] = np.floor(vmax / h) + 1          # the last bucket holds vmax
            per_point = max(1, int(self.numeric_weight * h / (vmax - vmin) * unit))
            masses[at] = np.maximum(stop - start, 0).astype(np.int64) * per_point
            first[at] = start.astype(np.int64)
        step, num, den = selection_lattice(self.epsilon, self.sensitivity, False)
        k = utility_steps(np.where(masses > 0, utilities, 0.0), step)
        cum = np.cumsum(masses)
        b = int(em_pick_masses(self.rng, k, cum, cum.size, num, den))
        f = int(feats[b])
        if f < n_num:
            vmin, vmax = self.bounds[f]
            h = lattice_step(float(vmax - vmin), SPLIT_BITS)
            points = int(masses[b] // max(1, int(self.numeric_weight * h / (vmax - vmin)
                                                 * unit)))
            return GridlessChoice(f, float((first[b] + int(choose(self.rng, points))) * h),
                                  False)
        return GridlessChoice(f, float(lo[b]), True)
