"""Rényi differential privacy (RDP) curves, subsampling amplification and conversion.

All functions take an array of Rényi orders ``alpha > 1`` and return the RDP ``rho(alpha)`` at
each order, for the add/remove-one neighbouring relation (Kirschte et al., 2023, Definition 1):
base curves (:func:`gaussian_rdp`, :func:`non_spherical_gaussian_rdp`, :func:`laplace_rdp`),
Poisson subsampling (:func:`subsampled_gaussian_rdp`, tight; :func:`zhu_wang_subsampled_rdp`,
an upper bound) and conversion (:func:`rdp_to_epsilon`, :func:`rdp_to_delta`). Formulas and
references: docs/accounting.md#rdp-curves-subsampling-and-conversion.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import special

from . import _sgm
from ._validate import (
    check_delta,
    check_finite_array,
    check_nonnegative,
    check_orders,
    check_positive,
    check_sample_rate,
)

__all__ = [
    "DEFAULT_ORDERS",
    "gaussian_rdp",
    "non_spherical_gaussian_rdp",
    "effective_noise_multiplier",
    "laplace_rdp",
    "subsampled_gaussian_rdp",
    "zhu_wang_subsampled_rdp",
    "rdp_to_epsilon",
    "rdp_to_delta",
]

#: Orders searched by default: fine steps near 1 where small-epsilon regimes are optimal,
#: then every integer to 64 and a few large powers of two (the same coverage as dp-accounting).
DEFAULT_ORDERS: np.ndarray = np.array(
    [1.0 + x / 10.0 for x in range(1, 100)] + list(range(11, 64))
    # above 63, eight integer orders an octave up to 4096: at epsilon <= 0.03 without
    # subsampling the best order is in the hundreds to thousands (1768 at epsilon 0.01, T 200)
    + sorted({int(round(2 ** (k / 8))) for k in range(48, 97)}),
    dtype=np.float64,
)
DEFAULT_ORDERS.setflags(write=False)


# --------------------------------------------------------------------------- base curves

def gaussian_rdp(orders, noise_multiplier: float) -> np.ndarray:
    """RDP of the Gaussian mechanism with noise multiplier ``z = sigma / sensitivity``.

    ``rho(alpha) = alpha / (2 z^2)`` (Mironov 2017, Prop. 7).

    >>> gaussian_rdp([2, 4], noise_multiplier=1.0)
    array([1., 2.])
    """
    a = check_orders(orders)
    z = check_positive("noise_multiplier", noise_multiplier, allow_inf=True)
    if math.isinf(z):
        return np.zeros_like(a)
    return a / (2.0 * z * z)


def _check_weights(weights) -> np.ndarray:
    w = check_finite_array("weights", weights, ndim=1)
    if np.any(w <= 0):
        raise ValueError("weights must all be > 0")
    if not math.isclose(float(w.sum()), 1.0, rel_tol=0, abs_tol=1e-9):
        raise ValueError(f"weights must sum to 1, got {float(w.sum())!r}")
    return w


def effective_noise_multiplier(*, sigma: float, weights, sensitivities) -> np.ndarray:
    """The 1-d noise multiplier equivalent to the non-spherical Gaussian of Kirschte et al. (2023)
    Thm. 10.

    A shift ``s`` under noise ``N(0, D^-1 diag(sigma^2/r_d))`` has squared Mahalanobis norm
    ``D * sum_d r_d s_d^2 / sigma^2``; the privacy-loss distribution is that of a 1-d Gaussian
    with ``z^2 = sigma^2 / (D * sum_d r_d s_d^2)``. This is why the tight subsampled-Gaussian
    accountant applies to DPLeaf unchanged.

    ``sensitivities`` has shape ``(..., D)``; the result has shape ``(...)``.

    >>> float(effective_noise_multiplier(sigma=2.0, weights=[0.5, 0.5], sensitivities=[1.0, 1.0]))
    1.414...
    """
    s = check_positive("sigma", sigma)
    w = _check_weights(weights)
    sens = check_finite_array("sensitivities", sensitivities)
    if sens.shape[-1] != w.size:
        raise ValueError(
            f"sensitivities must have {w.size} entries in the last axis (one per weight), "
            f"got shape {sens.shape}"
        )
    if np.any(sens < 0):
        raise ValueError("sensitivities must be >= 0")
    mahal = w.size * np.sum(w * sens * sens, axis=-1) / (s * s)
    with np.errstate(divide="ignore"):
        return np.where(mahal > 0, 1.0 / np.sqrt(np.maximum(mahal, 1e-300)), np.inf)


def non_spherical_gaussian_rdp(orders, *, sigma: float, weights, sensitivities) -> np.ndarray:
    """(Individual) RDP of the non-spherical Gaussian mechanism (Kirschte et al. 2023, Theorem 10).

    ``rho(alpha) = alpha * D * sum_d r_d s_d^2 / (2 sigma^2)``. Pass the worst-case sensitivities
    for the mechanism's RDP (Corollary 21), or one record's own sensitivities for its individual
    RDP (Theorem 10). ``sensitivities`` of shape ``(n, D)`` gives an ``(n, len(orders))`` array.

    DPLeaf (Corollary 22): D = 2, sensitivities (1, |g_i|), weights (r1, r2):

    >>> non_spherical_gaussian_rdp([2.0], sigma=1.0, weights=[0.2, 0.8], sensitivities=[1.0, 0.5])
    array([0.8])
    """
    a = check_orders(orders)
    w = _check_weights(weights)
    s = check_positive("sigma", sigma)
    sens = check_finite_array("sensitivities", sensitivities)
    if sens.shape[-1] != w.size:
        raise ValueError(
            f"sensitivities must have {w.size} entries in the last axis, got shape {sens.shape}"
        )
    per = w.size * np.sum(w * sens * sens, axis=-1) / (2.0 * s * s)
    return np.multiply.outer(per, a)


def laplace_rdp(orders, epsilon: float) -> np.ndarray:
    """RDP of the Laplace mechanism whose pure-DP parameter is ``epsilon = sensitivity / scale``.

    ``rho(alpha) = 1/(alpha-1) log( alpha/(2alpha-1) e^{(alpha-1)eps}
    + (alpha-1)/(2alpha-1) e^{-alpha eps} )`` (Kirschte et al. 2023, Theorem 20; Mironov 2017 Prop.
    6), evaluated in a form that stays accurate as ``alpha -> 1`` and for large ``alpha * eps``.

    >>> float(laplace_rdp([1e9], epsilon=0.5)[0])  # tends to the pure-DP epsilon
    0.4999...
    """
    a = check_orders(orders)
    eps = check_nonnegative("epsilon", epsilon)
    if eps == 0:
        return np.zeros_like(a)
    # rho = eps + log1p(x)/(a-1), x = (a-1) c, c = expm1((1-2a) eps)/(2a-1), x in (-1/2, 0]
    c = np.expm1((1.0 - 2.0 * a) * eps) / (2.0 * a - 1.0)
    x = (a - 1.0) * c
    ratio = np.where(x != 0, np.log1p(x) / np.where(x != 0, x, 1.0), 1.0)
    return eps + c * ratio


# --------------------------------------------------------------------------- subsampling

def subsampled_gaussian_rdp(orders, *, sample_rate: float, noise_multiplier: float) -> np.ndarray:
    """Tight RDP of the Poisson-subsampled Gaussian mechanism (Mironov, Talwar, Zhang 2019).

    Exact for integer and fractional orders; with ``sample_rate == 1`` it is the plain Gaussian.

    >>> subsampled_gaussian_rdp([2.0, 2.5], sample_rate=1.0, noise_multiplier=1.0)
    array([1.  , 1.25])
    """
    a = check_orders(orders)
    q = check_sample_rate(sample_rate)
    z = check_positive("noise_multiplier", noise_multiplier, allow_inf=True)
    if math.isinf(z):
        return np.zeros_like(a)
    if q == 1.0:
        return a / (2.0 * z * z)
    return np.maximum(_sgm.log_a(q, np.full(a.size, z), a), 0.0) / (a - 1.0)


def zhu_wang_subsampled_rdp(orders, *, sample_rate: float,
                            base_rdp: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Zhu–Wang upper bound on Poisson-subsampled RDP (Kirschte et al. 2023, Theorem 9), integer
    orders >= 2.

    ``base_rdp`` maps an integer array of orders ``2..alpha`` to the base mechanism's RDP there.

    >>> import numpy as np
    >>> zw = zhu_wang_subsampled_rdp([8], sample_rate=0.1,
    ...                              base_rdp=lambda a: gaussian_rdp(a, noise_multiplier=2.0))
    >>> tight = subsampled_gaussian_rdp([8], sample_rate=0.1, noise_multiplier=2.0)
    >>> bool(zw[0] >= tight[0])
    True
    """
    a = check_orders(orders, integer=True)
    q = check_sample_rate(sample_rate)
    top = int(a.max())
    ls = np.arange(2, top + 1)
    base = check_finite_array("base_rdp(orders)", base_rdp(ls.astype(np.float64)), ndim=1)
    if base.shape != ls.shape:
        raise ValueError("base_rdp must return one value per order")
    if np.any(base < 0):
        raise ValueError("base_rdp must be >= 0")
    with np.errstate(divide="ignore"):
        log_q, log_1q = math.log(q), (math.log1p(-q) if q < 1 else -np.inf)
    out = np.empty_like(a)
    for idx, alpha_f in enumerate(a):
        alpha = int(alpha_f)
        terms = [(alpha - 1) * log_1q + math.log(alpha * q - q + 1) if q < 1 else -np.inf]
        lb2 = special.gammaln(alpha + 1) - special.gammaln(3) - special.gammaln(alpha - 1)
        terms.append(lb2 + 2 * log_q + ((alpha - 2) * log_1q if alpha > 2 else 0.0) + base[0])
        if alpha >= 3:
            ell = np.arange(3, alpha + 1, dtype=np.float64)
            lb = (special.gammaln(alpha + 1) - special.gammaln(ell + 1)
                  - special.gammaln(alpha - ell + 1))
            with np.errstate(invalid="ignore"):
                pw = np.where(alpha - ell > 0, (alpha - ell) * log_1q, 0.0)
            terms.extend(math.log(3.0) + lb + pw + ell * log_q + (ell - 1) * base[1: alpha - 1])
        out[idx] = float(special.logsumexp(terms)) / (alpha - 1)
    return out


# --------------------------------------------------------------------------- conversion

def rdp_to_epsilon(orders, rdp, delta: float) -> tuple[float, float]:
    """Smallest epsilon over ``orders`` for the given delta (Balle et al. 2020, Theorem 21).

    Returns ``(epsilon, order)``. Orders at or below 1.01 are skipped (the bound is unstable there).

    >>> rdp_to_epsilon([2.0, 10.0], [0.1, 0.5], delta=1e-5)
    (1.418..., 10.0)

    Examples
    --------
    >>> import numpy as np
    >>> from dpstream.accounting import rdp
    >>> orders = np.array([2.0, 8.0, 32.0])
    >>> rdp.gaussian_rdp(orders, noise_multiplier=2.0)
    array([0.25, 1.  , 4.  ])
    >>> curve = 150 * rdp.subsampled_gaussian_rdp(rdp.DEFAULT_ORDERS, sample_rate=0.1,
    ...                                           noise_multiplier=5.0)
    >>> eps, order = rdp.rdp_to_epsilon(rdp.DEFAULT_ORDERS, curve, delta=1e-6)
    >>> round(eps, 3), order
    (1.171, 19.0)
    """
    a = check_orders(orders)
    r = check_finite_array("rdp", rdp, ndim=1)
    d = check_delta(delta)
    if r.shape != a.shape:
        raise ValueError(f"rdp must have one value per order ({a.size}), got {r.size}")
    if np.any(r < 0):
        raise ValueError("rdp must be >= 0")
    usable = a > 1.01
    if not np.any(usable):
        raise ValueError("orders must include at least one order > 1.01")
    eps = np.full_like(a, np.inf)
    au, ru = a[usable], r[usable]
    eps[usable] = ru + np.log1p(-1.0 / au) - (math.log(d) + np.log(au)) / (au - 1.0)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(a[i])


def rdp_to_delta(orders, rdp, epsilon: float) -> tuple[float, float]:
    """Smallest delta over ``orders`` for the given epsilon (inverse of :func:`rdp_to_epsilon`).

    >>> d, order = rdp_to_delta([2.0, 10.0], [0.1, 0.5], epsilon=1.5)
    >>> d < 1e-4
    True
    """
    a = check_orders(orders)
    r = check_finite_array("rdp", rdp, ndim=1)
    eps = check_nonnegative("epsilon", epsilon)
    if r.shape != a.shape:
        raise ValueError(f"rdp must have one value per order ({a.size}), got {r.size}")
    usable = a > 1.01
    log_d = np.full_like(a, np.inf)
    au, ru = a[usable], r[usable]
    log_d[usable] = (au - 1.0) * (ru - eps + np.log1p(-1.0 / au)) - np.log(au)
    i = int(np.argmin(log_d))
    return float(min(1.0, math.exp(min(0.0, log_d[i])))), float(a[i])
