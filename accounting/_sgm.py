"""Vectorised ``log A_alpha`` of the sampled Gaussian mechanism (Mironov, Talwar, Zhang 2019).

The scalar series of :mod:`dpstream.accounting.rdp` for many ``(alpha, z)`` pairs at once; each
value equals the one-order evaluation of the same point. Design:
docs/accounting.md#the-vectorised-sampled-gaussian-series.

Examples
--------
>>> import numpy as np
>>> v = log_a(0.1, np.array([2.0, 2.0]), np.array([2.5, 8.0]))
>>> bool(v[0] < v[1])
True
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special

_LOG_HALF = math.log(0.5)
_LOG_2 = math.log(2.0)
_SQRT2 = math.sqrt(2)
_MAX_TERMS = 100_000
_CHUNK = 1 << 19   # terms per row block of the fractional series
_add = np.add.reduce
_maximum = np.maximum.reduce


def _lse_rows(a: np.ndarray) -> np.ndarray:
    """``scipy.special.logsumexp`` of each row of ``a`` (same steps, so the same rounding).

    >>> float(_lse_rows(np.log(np.array([[1.0, 2.0, 3.0]])))[0]) == math.log(6.0)
    True
    """
    # the caller (:func:`log_a`) silences the floating-point warnings of infinite terms
    out_inf = np.log(_add(np.exp(a), axis=1))
    a_max = _maximum(a, axis=1, keepdims=True)
    is_max = a == a_max
    m = _add(is_max.astype(np.float64), axis=1, keepdims=True)
    e = np.exp(np.where(is_max, -np.inf, a) - a_max)
    s = _add(e, axis=1, keepdims=True)
    s = np.where(s == 0, s, s / m)
    out = (np.log1p(s) + np.log(m) + a_max)[:, 0]
    return np.where(np.isfinite(out), out, out_inf)


def _lse_ragged(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Row-wise log-sum-exp of the first ``lengths[r]`` entries of each row (``-inf`` if none).

    Rows of one length are reduced together, so each row is summed exactly like a 1-d array of
    its own entries.
    """
    out = np.full(values.shape[0], -np.inf)
    for n in np.unique(lengths):
        if n == 0:
            continue
        rows = np.flatnonzero(lengths == n)
        out[rows] = _lse_rows(values[rows, :n])
    return out


def _compact(values: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Move each row's kept entries to its front, in order; also return how many there are."""
    order = np.argsort(~keep, axis=1, kind="stable")
    return np.take_along_axis(values, order, axis=1), keep.sum(axis=1)


@lru_cache(maxsize=256)
def _int_terms(alpha: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``k``, ``alpha - k``, ``k^2 - k`` and ``log binom(alpha, k)`` for ``k = 0..alpha``."""
    k = np.arange(alpha + 1, dtype=np.float64)
    log_binom = special.gammaln(alpha + 1) - special.gammaln(k + 1) - special.gammaln(alpha - k + 1)
    parts = (k, alpha - k, k * k - k, log_binom)
    for p in parts:
        p.setflags(write=False)
    return parts


def _log_a_int(q: float, z: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Integer orders: the binomial expansion (Mironov et al. 2019, Sec. 3.3), per pair."""
    out = np.empty(alpha.size)
    log_q, log_1q = math.log(q), math.log1p(-q)
    for a in np.unique(alpha):
        rows = np.flatnonzero(alpha == a)
        k, rest, kk, log_binom = _int_terms(int(a))
        zr = z[rows, None]
        terms = log_binom + k * log_q + rest * log_1q + kk / (2 * zr * zr)
        out[rows] = _lse_rows(terms)
    return out


def _frac_series(q: float, z: np.ndarray, alpha: np.ndarray, n_terms: int):
    """The two erfc-weighted series' terms for ``i < n_terms`` and where each pair stops.

    Returns ``(s0, s1, coef, stop)``; ``stop`` is -1 where the series runs past ``n_terms``.
    """
    log_q, log_1q = math.log(q), math.log1p(-q)
    z0 = (z * z * math.log(1.0 / q - 1.0) + 0.5)[:, None]
    a = alpha[:, None]
    zz = (2 * z * z)[:, None]
    sz = (_SQRT2 * z)[:, None]
    i = np.arange(n_terms, dtype=np.float64)[None, :]
    coef = special.binom(a, i)
    log_coef = np.log(np.abs(coef))
    j = a - i
    s0 = (log_coef + i * log_q + j * log_1q + (i * i - i) / zz + _LOG_HALF
          + (_LOG_2 + special.log_ndtr(-((i - z0) / sz) * math.sqrt(2.0))))
    s1 = (log_coef + j * log_q + i * log_1q + (j * j - j) / zz + _LOG_HALF
          + (_LOG_2 + special.log_ndtr(-((z0 - j) / sz) * math.sqrt(2.0))))
    # the scalar loop: stop before a zero coefficient, or after the first term past alpha whose
    # two contributions are both below e^-30
    zero = coef == 0
    small = (i > a) & (np.maximum(s0, s1) < -30.0)
    first_zero = np.where(zero.any(axis=1), zero.argmax(axis=1), n_terms + 1)
    first_small = np.where(small.any(axis=1), small.argmax(axis=1) + 1, n_terms + 1)
    stop = np.minimum(first_zero, first_small)
    stop[stop > n_terms] = -1
    return s0, s1, coef, stop


def _log_a_frac(q: float, z: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Fractional orders: two erfc-weighted series (Mironov et al. 2019, Sec. 3.3), per pair.

    Positive and negative contributions (the generalised binomial coefficients change sign past
    ``i > alpha``) are summed separately in log space and subtracted once at the end.
    """
    m = alpha.size
    log_pos, log_neg, n_neg = np.empty(m), np.empty(m), np.empty(m, dtype=np.int64)
    todo = np.arange(m)
    n_terms = int(math.ceil(float(alpha.max()))) + 32 if m else 0
    while todo.size:
        if n_terms > _MAX_TERMS + 1:  # pragma: no cover - the series converges long before this
            raise ArithmeticError("subsampled Gaussian RDP series did not converge")
        left = []
        step = max(1, _CHUNK // n_terms)   # bounds the memory of long series
        for start in range(0, todo.size, step):
            part = todo[start:start + step]
            s0, s1, coef, stop = _frac_series(q, z[part], alpha[part], n_terms)
            done = stop >= 0
            left.append(part[~done])
            rows = part[done]
            if not rows.size:
                continue
            s0, s1, coef, stop = s0[done], s1[done], coef[done], stop[done]
            used = np.arange(n_terms)[None, :] < stop[:, None]
            both = np.stack([s0, s1], axis=2).reshape(rows.size, 2 * n_terms)
            pos, n_p = _compact(both, np.repeat(used & (coef > 0), 2, axis=1))
            neg, n_n = _compact(both, np.repeat(used & (coef < 0), 2, axis=1))
            log_pos[rows] = _lse_ragged(pos, n_p)
            log_neg[rows] = _lse_ragged(neg, n_n)
            n_neg[rows] = n_n
        todo = np.concatenate(left)
        n_terms *= 2
    out = np.empty(m)
    for r in range(m):
        lp, ln = float(log_pos[r]), float(log_neg[r])
        if not n_neg[r]:
            out[r] = lp
            continue
        if ln >= lp:  # pragma: no cover - cannot happen for valid inputs
            raise ArithmeticError("subsampled Gaussian RDP series lost precision")
        out[r] = lp + math.log1p(-math.exp(ln - lp))
    return out


def log_a(q: float, z: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``log A_alpha`` of the sampled Gaussian mechanism for each pair ``(z[r], alpha[r])``.

    Parameters
    ----------
    q : float
        Poisson sampling rate in ``(0, 1)``.
    z : numpy.ndarray
        Finite noise multipliers, one per pair.
    alpha : numpy.ndarray
        Rényi orders ``> 1``, one per pair (integer-valued ones use the binomial expansion).

    Returns
    -------
    numpy.ndarray
        One ``log A_alpha`` per pair.

    Examples
    --------
    >>> bool(log_a(0.5, np.array([1.0]), np.array([2.0]))[0] > 0)
    True
    """
    z = np.asarray(z, dtype=np.float64).ravel()
    alpha = np.asarray(alpha, dtype=np.float64).ravel()
    out = np.empty(alpha.size)
    is_int = np.array([float(a).is_integer() for a in alpha], dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if is_int.any():
            out[is_int] = _log_a_int(q, z[is_int], alpha[is_int])
        if not is_int.all():
            out[~is_int] = _log_a_frac(q, z[~is_int], alpha[~is_int])
    return out
