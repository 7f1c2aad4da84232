"""Exact samplers on the integers: discrete Laplace and discrete Gaussian noise.

Pure-Python rational arithmetic (Canonne, Kamath and Steinke 2020), the reference for the
compiled samplers; design: docs/accounting.md#exact-samplers-on-the-integers.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = discrete_laplace(rng, 2, size=5)
>>> x.dtype, x.shape
(dtype('int64'), (5,))
>>> int(discrete_gaussian(rng, Fraction(9, 4))) in range(-60, 61)
True
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["uniform_below", "bernoulli", "bernoulli_exp", "discrete_laplace",
           "discrete_gaussian", "as_fraction"]


def as_fraction(value: Fraction | int | float, name: str = "value") -> Fraction:
    """``value`` as an exact :class:`~fractions.Fraction` (a float is taken as the binary
    fraction it is); it must be finite and > 0.

    >>> as_fraction(0.25), as_fraction(3)
    (Fraction(1, 4), Fraction(3, 1))
    """
    if isinstance(value, bool) or not isinstance(value, (Fraction, int, float, np.integer,
                                                         np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if isinstance(value, (float, np.floating)) and not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    out = Fraction(value) if not isinstance(value, (np.integer, np.floating)) \
        else Fraction(value.item())
    if out <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return out


def uniform_below(rng: np.random.Generator, n: int) -> int:
    """An exactly uniform integer in ``[0, n)``: the fewest whole bytes that hold ``n - 1``,
    redrawn while the value is ``>= n`` (fewer than two draws on average).

    >>> rng = np.random.default_rng(1)
    >>> sorted({uniform_below(rng, 3) for _ in range(200)})
    [0, 1, 2]
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0
    bits = (n - 1).bit_length()
    nbytes = (bits + 7) // 8
    mask = (1 << bits) - 1
    while True:
        v = int.from_bytes(rng.bytes(nbytes), "little") & mask
        if v < n:
            return v


def bernoulli(rng: np.random.Generator, p: Fraction) -> bool:
    """``True`` with probability exactly ``p`` (a fraction in [0, 1])."""
    if not 0 <= p <= 1:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    return uniform_below(rng, p.denominator) < p.numerator


def bernoulli_exp(rng: np.random.Generator, gamma: Fraction) -> bool:
    """``True`` with probability exactly ``exp(-gamma)``, ``gamma >= 0`` rational
    (Canonne et al. 2020, Algorithm 1).

    >>> rng = np.random.default_rng(2)
    >>> draws = [bernoulli_exp(rng, Fraction(1, 2)) for _ in range(4000)]
    >>> abs(sum(draws) / 4000 - math.exp(-0.5)) < 0.03
    True
    """
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    while gamma > 1:   # exp(-gamma) = exp(-1)^floor(gamma) * exp(-(gamma - floor(gamma)))
        if not bernoulli_exp(rng, Fraction(1)):
            return False
        gamma -= 1
    k = 1
    while bernoulli(rng, gamma / k):
        k += 1
    return k % 2 == 1


def _discrete_laplace_one(rng: np.random.Generator, s: int, t: int) -> int:
    """One draw with ``P(x) ∝ exp(-|x| s / t)`` (Algorithm 2; scale ``t / s``)."""
    while True:
        u = uniform_below(rng, t)
        if not bernoulli_exp(rng, Fraction(u, t)):
            continue
        v = 0
        while bernoulli_exp(rng, Fraction(1)):
            v += 1
        y = (u + t * v) // s
        negative = uniform_below(rng, 2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_laplace(rng: np.random.Generator, scale: Fraction | int | float,
                     size: int | tuple[int, ...] | None = None) -> np.ndarray | int:
    """Discrete Laplace noise: integers with ``P(x) ∝ exp(-|x| / scale)``, exactly.

    Adding it to an integer query of L1 sensitivity ``Δ`` with ``scale = Δ / epsilon`` is
    epsilon-DP (Canonne et al. 2020, Prop. 3 / the geometric mechanism).

    >>> rng = np.random.default_rng(3)
    >>> x = discrete_laplace(rng, Fraction(1, 2), size=2000)
    >>> bool(abs(x.mean()) < 0.1), sorted(set(x.tolist()))[:1] <= [-2]
    (True, True)
    """
    sc = as_fraction(scale, "scale")
    s, t = sc.denominator, sc.numerator
    return _fill(lambda: _discrete_laplace_one(rng, s, t), size)


def _discrete_gaussian_one(rng: np.random.Generator, sigma2: Fraction, t: int) -> int:
    """One draw with ``P(x) ∝ exp(-x² / (2 sigma2))`` (Algorithm 3, Laplace proposal of
    scale ``t = floor(sigma) + 1``)."""
    while True:
        y = _discrete_laplace_one(rng, 1, t)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if bernoulli_exp(rng, gamma):
            return y


def discrete_gaussian(rng: np.random.Generator, sigma2: Fraction | int | float,
                      size: int | tuple[int, ...] | None = None) -> np.ndarray | int:
    """Discrete Gaussian noise: integers with ``P(x) ∝ exp(-x² / (2 sigma2))``, exactly
    (``sigma2``: the variance parameter, rational).

    Its Rényi divergence between shifts by ``Δ`` is at most ``alpha Δ² / (2 sigma2)``, as for
    the continuous Gaussian (Canonne et al. 2020, Prop. 5).

    >>> rng = np.random.default_rng(4)
    >>> x = discrete_gaussian(rng, 4, size=3000)
    >>> bool(abs(x.var() - 4) < 0.5)
    True
    """
    s2 = as_fraction(sigma2, "sigma2")
    t = math.isqrt(s2.numerator // s2.denominator) + 1   # floor(sigma) + 1
    return _fill(lambda: _discrete_gaussian_one(rng, s2, t), size)


def _fill(draw, size: int | tuple[int, ...] | None) -> np.ndarray | int:
    if size is None:
        return draw()
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    out = np.empty(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    for i in range(out.size):
        out[i] = draw()
    return out.reshape(shape)
