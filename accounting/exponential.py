"""Selection mechanisms: the exponential mechanism and report-noisy-max / permute-and-flip.

* :class:`ExponentialMechanism` (McSherry and Talwar 2007): output ``r`` with probability
  proportional to ``exp(eps u(r) / (2 Delta))``, or ``exp(eps u(r) / Delta)`` when the utility is
  *monotonic* (adding a record moves every utility in the same direction). Sampled with the
  Gumbel-max trick, which is exact and numerically stable for any utility scale.
* :class:`ReportNoisyMax`: report-one-sided-noisy-argmax (ROSNAM, Dwork and Roth 2014; Fletcher &
Islam (2017)
  addendum) — add one-sided exponential noise of scale ``Delta/eps`` (monotonic) or
  ``2 Delta/eps`` and report the argmax — and permute-and-flip (McKenna and Sheldon 2020).
  Ding et al. (2021) proved the two have the same output distribution; both are exposed so that
  the statistical tests can check each implementation. This is the leaf-label mechanism for the
  window forests: class counts are monotonic with Delta = 1 (Fletcher & Islam 2017, addendum, Table
  5).

The smooth-sensitivity exponential mechanism of Fletcher & Islam's original paper (and Xin et al.
(2019)) is NOT offered: it is not proven differentially private (Fletcher & Islam 2017, addendum).
The test suite implements it only as a negative control and shows that it fails the privacy test
that these mechanisms pass.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from ._validate import as_generator, check_epsilon, check_finite_array, check_int, check_positive

__all__ = ["ExponentialMechanism", "ReportNoisyMax", "gumbel_argmax_core",
           "gumbel_argmax_grouped_core"]


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
    >>> em.select([1e308, -1e308])   # extreme utilities stay stable
    0
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
        """Sample an index (or ``size`` independent indices)."""
        lw = self.log_weights(utilities)
        return _gumbel_argmax(self.rng, lw, size)

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
        # a row whose allowed candidates all tie (an empty tree node, a pure one) is a uniform
        # draw among them: exactly the mechanism's distribution there, one draw not one a
        # candidate (a window forest releases every bucket of a level, most of them empty)
        if allowed is None:
            tie = (U == U[:, :1]).all(axis=1)
        else:
            tie = np.where(ok, U, np.inf).min(axis=1) == np.where(ok, U, -np.inf).max(axis=1)
        pick = np.zeros(U.shape[0], dtype=np.int64)
        if tie.any() and allowed is None:
            pick[tie] = self.rng.integers(U.shape[1], size=int(tie.sum()))
        elif tie.any():
            pick[tie] = _uniform_rows(self.rng, ok[tie])
        if not tie.all():
            lw = np.where(ok[~tie], self.factor * U[~tie], -np.inf)
            pick[~tie] = np.argmax(lw + self.rng.gumbel(size=lw.shape), axis=1)
        return np.where(ok.any(axis=1), pick, -1)


def _uniform_rows(rng: np.random.Generator, ok: np.ndarray) -> np.ndarray:
    """Per row, a uniformly random column among its ``True`` entries (each row has one)."""
    rank = np.minimum((rng.random(ok.shape[0]) * ok.sum(axis=1)).astype(np.int64),
                      ok.sum(axis=1) - 1)
    return np.argmax(np.cumsum(ok, axis=1) > rank[:, None], axis=1)


def _gumbel_argmax(rng: np.random.Generator, log_weights: np.ndarray, size: int | None):
    """argmax(log w + Gumbel) is an exact sample from softmax(log w); -inf entries never win."""
    if size is None:
        return int(np.argmax(log_weights + rng.gumbel(size=log_weights.shape)))
    n = check_int("size", size, minimum=1)
    out = np.empty(n, dtype=np.int64)
    chunk = max(1, 2_000_000 // max(1, log_weights.size))
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        out[start:start + m] = np.argmax(
            log_weights + rng.gumbel(size=(m, log_weights.size)), axis=1)
    return out


def gumbel_argmax_core(rng: np.random.Generator, log_weights: np.ndarray, n: int) -> int:
    """:func:`_gumbel_argmax` (``size=None``) over ``log_weights[:n]``, one draw at a time.

    Plain Python that numba compiles (a tree grower calls it from machine code, the Generator
    passed in): the same mechanism with the same draws in the same order, hence the same index
    for the same generator state. Each draw is numpy's own ``random_gumbel(loc=0, scale=1)``
    (``rng.gumbel``): ``U = 1 - next_double``, redrawn while ``U == 1``, then
    ``0 - 1 * log(-log(U))``; the first largest ``log w + G`` wins, as ``np.argmax``.

    >>> lw = np.array([0.0, 1.5, -2.0])
    >>> a = gumbel_argmax_core(np.random.default_rng(3), lw, 3)
    >>> a == _gumbel_argmax(np.random.default_rng(3), lw, None)
    True
    """
    best, pick = -math.inf, 0
    for i in range(n):
        u = 1.0 - rng.random()
        while not u < 1.0:
            u = 1.0 - rng.random()
        v = log_weights[i] + (0.0 - math.log(-math.log(u)))
        if i == 0 or v > best:
            best, pick = v, i
    return pick


def gumbel_argmax_grouped_core(rng: np.random.Generator, log_weights: np.ndarray,
                               group: np.ndarray, n: int, u: np.ndarray,
                               top: np.ndarray) -> int:
    """:func:`gumbel_argmax_core`'s index — the same draws, the same result — computing the
    Gumbel noise only of the candidates that can win.

    ``group[i]`` (an integer in ``[0, len(top))``) labels candidates whose log-weights are the
    same float (a private median's candidates of equal rank distance). Every uniform is drawn,
    in order, as ``gumbel_argmax_core`` draws them (into ``u``: ``U = 1 - next_double``, redrawn
    while 1). Within a group the noise ``g(U) = -log(-log U)`` is increasing, so only the
    draws near the group's largest ``U`` can reach the largest ``log w + g``: for
    ``U < top (1 - delta)``, ``g(top) - g(U) = int dU / (U (-log U)) >= delta / 36.8``
    (``-log U <= 53 log 2 < 36.8``), which with ``delta = 1e-9 + 2000 * spacing(|log w| + 64)``
    exceeds twice the error of the computed ``g`` (``< 1e-14``) plus the two roundings of
    ``log w + g`` (``<= spacing(|log w| + 37)`` each) many times over: such a candidate's
    computed value is strictly below its group's largest, never the first largest overall.
    The rest ("near" their group's largest: a handful) are computed exactly as the plain core
    computes them and compared in index order with the same strict ``>``, so ties and any
    non-monotone rounding of ``log`` resolve as there. Log-weights are finite or ``-inf``.

    >>> lw = np.array([0.0, 1.5, 0.0, -2.0, 1.5])
    >>> group = np.array([0, 1, 0, 2, 1])
    >>> a = gumbel_argmax_grouped_core(np.random.default_rng(3), lw, group, 5, np.empty(5),
    ...                                np.empty(3))
    >>> a == gumbel_argmax_core(np.random.default_rng(3), lw, 5)
    True
    """
    for i in range(n):
        x = 1.0 - rng.random()
        while not x < 1.0:
            x = 1.0 - rng.random()
        u[i] = x
        top[group[i]] = -1.0
    for i in range(n):
        if u[i] > top[group[i]]:
            top[group[i]] = u[i]
    best, pick = -math.inf, 0
    for i in range(n):
        lw = log_weights[i]
        delta = 1e-9 + 2000.0 * np.spacing(abs(lw) + 64.0)
        if u[i] >= top[group[i]] * (1.0 - delta):   # near its group's largest draw
            v = lw + (0.0 - math.log(-math.log(u[i])))
            if v > best:
                best, pick = v, i
    return pick


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
        n = 1 if size is None else check_int("size", size, minimum=1)
        if self.method == "exponential-noise":
            idx = np.argmax(u + self.rng.exponential(self.scale, size=(n, u.size)), axis=1)
        else:
            idx = self._permute_and_flip(u, n)
        return int(idx[0]) if size is None else idx

    def select_rows(self, utilities) -> np.ndarray:
        """One independent report per row of a 2-d utility array (e.g. the class counts of
        many disjoint leaves), by exponential noise — the same distribution as either method.

        >>> ReportNoisyMax(epsilon=5.0, rng=0).select_rows([[0, 9], [9, 0], [4, 4]]).tolist()[:2]
        [1, 0]
        """
        U = check_finite_array("utilities", utilities, ndim=2, allow_empty=True)
        if U.size == 0:
            return np.zeros(U.shape[0], dtype=np.int64)
        tie = (U == U[:, :1]).all(axis=1)   # all counts equal (an empty leaf): uniform, exactly
        out = np.zeros(U.shape[0], dtype=np.int64)
        if tie.any():
            out[tie] = self.rng.integers(U.shape[1], size=int(tie.sum()))
        if not tie.all():
            out[~tie] = np.argmax(U[~tie] + self.rng.exponential(self.scale,
                                                                 size=(int((~tie).sum()),
                                                                       U.shape[1])), axis=1)
        return out

    def _permute_and_flip(self, u: np.ndarray, n: int) -> np.ndarray:
        # Visit candidates in a uniformly random order; accept candidate r with probability
        # exp((u_r - max u) / scale). The best candidate is always accepted, so every row stops.
        accept_p = np.exp((u - u.max()) / self.scale)
        out = np.empty(n, dtype=np.int64)
        chunk = max(1, 1_000_000 // max(1, u.size))
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            order = np.argsort(self.rng.random((m, u.size)), axis=1)
            accepted = self.rng.random((m, u.size)) < accept_p[order]
            first = np.argmax(accepted, axis=1)
            out[start:start + m] = order[np.arange(m), first]
        return out
