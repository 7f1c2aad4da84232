"""Selection mechanisms: the exponential mechanism and report-noisy-max / permute-and-flip.

* :class:`ExponentialMechanism` (McSherry and Talwar 2007), epsilon-DP, sampled exactly on a
  public lattice of utilities;
* :class:`ReportNoisyMax`: report-one-sided-noisy-argmax and permute-and-flip (one output
  distribution), epsilon-DP; the window forests' leaf-label mechanism.

The smooth-sensitivity exponential mechanism is NOT offered (not proven DP). Design and privacy
argument: docs/accounting.md#selection-mechanisms.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from ._validate import (
    as_generator,
    check_epsilon,
    check_finite_array,
    check_integer,
    check_positive,
)
from .noise import select_rows as _exact_rows

__all__ = ["ExponentialMechanism", "ReportNoisyMax"]


def _utilities(utilities) -> np.ndarray:
    return check_finite_array("utilities", utilities, ndim=1)


class ExponentialMechanism:
    """Select an index with probability proportional to ``exp(eps * u / (2 * sensitivity))``.

    Parameters
    ----------
    epsilon
        Privacy parameter, > 0.
    sensitivity
        Largest change of any single utility between neighbouring datasets, > 0.
    monotonic
        ``True`` only if, between neighbours, all utilities move in the same direction; then the
        factor 2 is dropped and the mechanism is still epsilon-DP (McSherry and Talwar 2007).
    rng
        ``None`` (OS entropy), an int seed (tests only) or a numpy Generator.

    Examples
    --------
    >>> em = ExponentialMechanism(epsilon=1.0, sensitivity=1.0, rng=0)
    >>> em.probabilities([0.0, 2.0]).round(4)
    array([0.2689, 0.7311])
    >>> em.select([0.0, 2.0]) in (0, 1)
    True
    >>> em.select([1e15, -1e15])     # beyond the lattice: a clear error
    Traceback (most recent call last):
    ...
    ValueError: utilities must stay below 1.1e+12 in magnitude for an exact selection ...
    >>> em.select([])
    Traceback (most recent call last):
    ...
    ValueError: utilities must not be empty
    >>> em.select([0.0, float("nan")])
    Traceback (most recent call last):
    ...
    ValueError: utilities must be finite (found NaN or infinity)
    """

    def __init__(self, *, epsilon: float, sensitivity: float, monotonic: bool = False,
                 rng: np.random.Generator | int | None = None):
        self.epsilon = check_epsilon(epsilon)
        self.sensitivity = check_positive("sensitivity", sensitivity)
        self.monotonic = bool(monotonic)
        self.rng = as_generator(rng)

    @property
    def factor(self) -> float:
        """The multiplier of the utility in the exponent."""
        return self.epsilon / (self.sensitivity if self.monotonic else 2.0 * self.sensitivity)

    def log_weights(self, utilities) -> np.ndarray:
        """Unnormalised log-probabilities ``factor * u``."""
        return self.factor * _utilities(utilities)

    def probabilities(self, utilities) -> np.ndarray:
        """The exact output distribution for these utilities."""
        return special.softmax(self.log_weights(utilities))

    def select(self, utilities, *, size: int | None = None):
        """Sample an index (or ``size`` independent indices), exactly."""
        u = _utilities(utilities)
        n = 1 if size is None else check_integer("size", size, 1)
        idx = _exact_rows(self.rng, np.broadcast_to(u, (n, u.size)), epsilon=self.epsilon,
                          sensitivity=self.sensitivity, monotonic=self.monotonic)
        return int(idx[0]) if size is None else idx

    def select_rows(self, utilities, allowed=None) -> np.ndarray:
        """One independent selection per row of a 2-d utility array (e.g. the candidates of
        many disjoint tree nodes). ``allowed`` (same shape, bool) restricts each row to its
        public candidate set; a row with no candidate gives ``-1``.

        >>> em = ExponentialMechanism(epsilon=50.0, sensitivity=1.0, rng=0)
        >>> em.select_rows([[0.0, 1.0, 0.0], [9.0, 0.0, 1.0], [0.0, 0.0, 9.0]],
        ...                allowed=[[1, 1, 1], [0, 1, 1], [0, 0, 0]]).tolist()
        [1, 2, -1]
        >>> picks = em.select_rows(np.zeros((4000, 3)))     # all tie: uniform, one draw a row
        >>> bool(np.bincount(picks).min() > 1200)
        True
        """
        U = check_finite_array("utilities", utilities, ndim=2, allow_empty=True)
        ok = np.ones(U.shape, dtype=bool) if allowed is None else np.asarray(allowed, bool)
        if ok.shape != U.shape:
            raise ValueError(f"allowed has shape {ok.shape}, utilities {U.shape}")
        if U.size == 0:
            return np.full(U.shape[0], -1, dtype=np.int64)
        return _exact_rows(self.rng, U, epsilon=self.epsilon, sensitivity=self.sensitivity,
                           monotonic=self.monotonic, allowed=ok)


class ReportNoisyMax:
    """Report-one-sided-noisy-argmax / permute-and-flip for count-like utilities.

    Parameters
    ----------
    epsilon
        Privacy parameter, > 0.
    sensitivity
        Largest change of any utility between neighbours (1 for class counts).
    monotonic
        Class counts are monotonic (adding a record never lowers a count): noise scale
        ``sensitivity/epsilon``. Otherwise ``2*sensitivity/epsilon``.
    method
        ``"permute-and-flip"`` (default) or ``"exponential-noise"`` (ROSNAM); same distribution.
    rng
        ``None`` (OS entropy), an int seed (tests only) or a numpy Generator.

    Examples
    --------
    >>> rnm = ReportNoisyMax(epsilon=1.0, rng=0)
    >>> counts = [3, 40, 2]
    >>> rnm.select(counts)
    1
    >>> ReportNoisyMax(epsilon=1.0, method="smooth-sensitivity")
    Traceback (most recent call last):
    ...
    ValueError: method must be 'permute-and-flip' or 'exponential-noise', got 'smooth-sensitivity'
    """

    METHODS = ("permute-and-flip", "exponential-noise")

    def __init__(self, *, epsilon: float, sensitivity: float = 1.0, monotonic: bool = True,
                 method: str = "permute-and-flip", rng: np.random.Generator | int | None = None):
        self.epsilon = check_epsilon(epsilon)
        self.sensitivity = check_positive("sensitivity", sensitivity)
        self.monotonic = bool(monotonic)
        if method not in self.METHODS:
            raise ValueError(
                f"method must be 'permute-and-flip' or 'exponential-noise', got {method!r}")
        self.method = method
        self.rng = as_generator(rng)

    @property
    def scale(self) -> float:
        """Scale of the one-sided exponential noise (``1 / rate``)."""
        return self.sensitivity / self.epsilon * (1.0 if self.monotonic else 2.0)

    def select(self, utilities, *, size: int | None = None):
        """Report the (noisy) best index, or ``size`` independent reports."""
        u = _utilities(utilities)
        n = 1 if size is None else check_integer("size", size, 1)
        idx = self.select_rows(np.broadcast_to(u, (n, u.size)))
        return int(idx[0]) if size is None else idx

    def select_rows(self, utilities) -> np.ndarray:
        """One independent report per row of a 2-d utility array (e.g. the class counts of
        many disjoint leaves): exact permute-and-flip, the distribution of either method.

        >>> ReportNoisyMax(epsilon=5.0, rng=0).select_rows([[0, 9], [9, 0], [4, 4]]).tolist()[:2]
        [1, 0]
        """
        U = check_finite_array("utilities", utilities, ndim=2, allow_empty=True)
        if U.size == 0:
            return np.zeros(U.shape[0], dtype=np.int64)
        return _exact_rows(self.rng, U, epsilon=self.epsilon, sensitivity=self.sensitivity,
                           monotonic=self.monotonic, method="permute-and-flip")
