"""The one noise source: a cryptographic generator and exact lattice noise, compiled.

Every published value is rounded to a public lattice, gets exact discrete Laplace or Gaussian
noise and returns to floats exactly (the outputs never depend on the input's float bits);
:func:`secure_generator` is AES-128-CTR. Design: docs/accounting.md#exact-noise-on-a-public-lattice.

Examples
--------
>>> rng = secure_generator(seed=1)
>>> type(rng.bit_generator).__name__
'AESCounter'
>>> x = laplace_on_lattice(rng, np.array([10.0, 20.0]), epsilon=1.0, sensitivity=1.0)
>>> x.shape, bool(np.all(x / lattice_step(1.0, LAPLACE_BITS) % 1 == 0))
((2,), True)
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
from numba import njit

__all__ = ["secure_generator", "is_secure", "lattice_step", "snap", "laplace_on_lattice",
           "gaussian_on_lattice", "discrete_laplace_fill", "discrete_gaussian_fill",
           "discrete_laplace_rdp", "laplace_lattice_rdp", "gaussian_steps",
           "scaled_gaussian_on_lattice",
           "laplace_lattice_epsilon", "laplace_rounding", "gaussian_noise_on_lattice",
           "common_step", "on_lattice",
           "sampling_threshold", "uniforms", "choose", "permutation", "nb_choose", "nb_uniform",
           "selection_lattice", "utility_steps", "em_pick", "pf_pick", "select_rows",
           "em_pick_dist", "distance_factor", "select_by_distance", "em_pick_masses",
           "LAPLACE_BITS",
           "GAUSS_BITS", "GAUSS_YMAX"]

#: a Laplace release's lattice step is ``2^(floor(log2 sensitivity) - LAPLACE_BITS)``: the
#: rounding adds at most one step to the sensitivity, a factor below ``1 + 2^-LAPLACE_BITS``
LAPLACE_BITS = 12
#: a Gaussian release's lattice step is ``2^(floor(log2 sigma) - GAUSS_BITS)``, so sigma on the
#: lattice lies in ``[2^18, 2^19)``, well inside the sampler's range (below 2^22)
GAUSS_BITS = 18
#: the discrete Gaussian sampler's truncation (lattice units): 256 sigma for the largest
#: variance parameter it takes (``a < 2^44``)
GAUSS_YMAX = 1 << 30
#: each laplace draw's ``s`` (its scale is ``t / s`` lattice units): ``t`` resolves the scale
#: to one part in ``2^10`` of a lattice step
_LAPLACE_S = 1 << 10


def secure_generator(seed: int | None = None) -> np.random.Generator:
    """A numpy Generator on AES-128 in counter mode (randomgen's ``AESCounter``).

    ``seed=None`` (production) keys it from 128 bits of OS entropy. An int seed is for tests
    and benchmarks: reproducible, and therefore not secret.

    >>> a, b = secure_generator(5), secure_generator(5)
    >>> bool(a.integers(2**62) == b.integers(2**62)), is_secure(a)
    (True, True)
    >>> is_secure(np.random.default_rng(1))
    False
    """
    from randomgen import AESCounter

    return np.random.Generator(AESCounter(seed))


def is_secure(rng: np.random.Generator) -> bool:
    """Whether ``rng``'s bit generator is a cryptographic one (AES counter or ChaCha)."""
    return type(rng.bit_generator).__name__ in ("AESCounter", "ChaCha")


def lattice_step(scale: float, bits: int) -> float:
    """``2^(floor(log2 scale) - bits)``: a public power of two well below ``scale``.

    >>> lattice_step(1.0, 10), lattice_step(3.0, 1)
    (0.0009765625, 1.0)
    """
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    return math.ldexp(1.0, math.frexp(scale)[1] - 1 - bits)


def snap(values, step: float) -> np.ndarray:
    """``values`` rounded to the nearest multiple of ``step`` (a power of two), as int64
    multiples; exact (``values / step`` only shifts the exponent; halves round to even).

    >>> snap(np.array([0.3, -1.26, 2.5]), 0.5).tolist()
    [1, -3, 5]
    """
    k = np.rint(np.asarray(values, dtype=np.float64) / step)
    if k.size and not np.all(np.abs(k) < 2.0 ** 52):
        raise ValueError(f"a value is too large for the lattice of step {step!r} "
                         f"(|value| must stay below 2^52 steps)")
    return k.astype(np.int64)


# --------------------------------------------------------------------------- compiled samplers

# The samplers' randomness is a buffer of uniform bits (``st``: the bits, how many are left),
# refilled from the generator's 53-bit uniforms (``random()`` is ``(next_uint64 >> 11) 2^-53``,
# so ``random() * 2^53`` is an exactly uniform 53-bit integer). A Bernoulli(n / d) compares
# those bits with the binary expansion of n / d (two bits on average), a uniform integer below
# n takes the fewest bits that hold n - 1 and is redrawn while >= n: every draw is exact, and a
# sample costs a few bits instead of a few generator calls. Bits left over at the end of a
# batch are dropped (which bits are dropped does not depend on their values).

_TWO53 = 9007199254740992.0


@njit(cache=True, nogil=True)
def _bits(rng, st, m):   # pragma: no cover - compiled
    """``m`` (1..53) uniform bits as an integer."""
    if st[1] < m:
        st[0] = np.int64(rng.random() * _TWO53)
        st[1] = 53
    x = st[0] & ((np.int64(1) << m) - 1)
    st[0] >>= m
    st[1] -= m
    return x


@njit(cache=True, nogil=True)
def _bitlen(x):   # pragma: no cover - compiled
    """The bit length of ``0 <= x < 2^63`` (``int.bit_length``): a binary search in six
    halvings of the shift (32, 16, ..., 1)."""
    b = 0
    s = 32
    while s:
        if x >> s:
            x >>= s
            b += s
        s >>= 1
    return b + x


@njit(cache=True, nogil=True)
def _bern(rng, st, n, d):   # pragma: no cover - compiled
    """Bernoulli(n / d) exactly, 0 <= n, 1 <= d < 2^62: a uniform U against n / d, ``k``
    binary digits at a time (``p = floor(n 2^k / d)``, the next ``k`` digits of n / d, against
    ``k`` fresh bits of U) until they differ (U < n / d when U's digits are the smaller); a
    tie with nothing left of n / d means U >= n / d. ``k <= max(1, 62 - bitlen(d))`` keeps
    ``n 2^k`` below 2^63."""
    if n <= 0:
        return False
    if n >= d:
        return True
    k = 62 - _bitlen(d)
    if k > 12:
        k = 12
    elif k < 1:          # d >= 2^61: one digit at a time (n 2 < 2^63)
        k = 1
    while True:
        n <<= k
        p = n // d
        n -= p * d
        u = _bits(rng, st, k)
        if u != p:
            return u < p
        if n == 0:           # n / d's expansion ended: U >= n / d
            return False


@njit(cache=True, nogil=True)
def _below(rng, st, n):   # pragma: no cover - compiled
    """An exactly uniform integer in [0, n), 1 <= n <= 2^53."""
    if n <= 1:
        return 0
    m = _bitlen(n - 1)
    while True:
        x = _bits(rng, st, m)
        if x < n:
            return x


@njit(cache=True, nogil=True)
def _bern_exp_small(rng, st, n, d):   # pragma: no cover - compiled
    """Bernoulli(exp(-n/d)) for 0 <= n <= d (Algorithm 1: Bernoulli(gamma/k) drawn as
    Bernoulli(1/k) and Bernoulli(n/d), so no product of integers is formed)."""
    if not _bern(rng, st, n, d):      # k = 1 (Bernoulli(1/1) is always true)
        return True
    k = 2
    while _bern(rng, st, 1, k) and _bern(rng, st, n, d):
        k += 1
    return k % 2 == 1


@njit(cache=True, nogil=True)
def _bern_exp(rng, st, n, d):   # pragma: no cover - compiled
    """Bernoulli(exp(-n/d)) for n >= 0, d >= 1: exp(-1)^floor(n/d) * exp(-(n mod d)/d)."""
    q = n // d
    for _ in range(q):
        if not _bern_exp_small(rng, st, 1, 1):
            return False
    return _bern_exp_small(rng, st, n - q * d, d)


@njit(cache=True, nogil=True)
def _bern_exp_sq(rng, st, r, t, d):   # pragma: no cover - compiled
    """Bernoulli(exp(-(r/t)^2 / d)) for 0 <= r < t, d >= 1: Algorithm 1 with
    Bernoulli(gamma/k) = Bernoulli(1/k) Bernoulli(1/d) Bernoulli(r/t) Bernoulli(r/t)."""
    k = 1
    while (_bern(rng, st, 1, k) and _bern(rng, st, 1, d)
           and _bern(rng, st, r, t) and _bern(rng, st, r, t)):
        k += 1
    return k % 2 == 1


@njit(cache=True, nogil=True)
def _dlap(rng, st, s, t):   # pragma: no cover - compiled
    """One integer with P(x) ∝ exp(-|x| s / t) (Algorithm 2)."""
    while True:
        u = _below(rng, st, t)
        if not _bern_exp_small(rng, st, u, t):
            continue
        v = 0
        while _bern_exp_small(rng, st, 1, 1):
            v += 1
        y = (u + t * v) // s
        b = _bits(rng, st, 1)
        if b == 1 and y == 0:
            continue
        return -y if b == 1 else y


@njit(cache=True, nogil=True)
def _bern_exp_ratio_product(rng, st, q, a, r, t):   # pragma: no cover - compiled
    """Bernoulli(exp(-(q/a)(r/t))) for q >= 0, a >= 1, 0 <= r < t, forming no product:
    q = q1 a + q2 makes it exp(-r/t)^q1 times exp(-(q2/a)(r/t)), the second by Algorithm 1
    with Bernoulli(gamma/k) = Bernoulli(1/k) Bernoulli(q2/a) Bernoulli(r/t)."""
    q1 = q // a
    q2 = q - q1 * a
    for _ in range(q1):
        if not _bern_exp_small(rng, st, r, t):
            return False
    k = 1
    while _bern(rng, st, 1, k) and _bern(rng, st, q2, a) and _bern(rng, st, r, t):
        k += 1
    return k % 2 == 1


@njit(cache=True, nogil=True)
def _dgauss(rng, st, a, t, ymax):   # pragma: no cover - compiled
    """One integer with P(x) ∝ exp(-x^2 / (2a)), |x| <= ymax (Algorithm 3; proposal scale t).

    Accept with exp(-(|y| t - a)^2 / (2 a t^2)); with |y t - a| = q t + r that exponent is
    q^2/(2a) + (q/a)(r/t) + (r/t)^2/(2a), three factors drawn separately. For a < 2^44,
    t <= 2^22 + 1 and ymax <= 2^30 every integer formed stays below 2^62."""
    while True:
        y = _dlap(rng, st, 1, t)
        ay = abs(y)
        if ay > ymax:
            continue
        m = abs(ay * t - a)
        q = m // t
        r = m - q * t
        if not _bern_exp(rng, st, q * q, 2 * a):
            continue
        if not _bern_exp_ratio_product(rng, st, q, a, r, t):
            continue
        if not _bern_exp_sq(rng, st, r, t, 2 * a):
            continue
        return y


@njit(cache=True, nogil=True)
def _dlap_fill(rng, s, t, out):   # pragma: no cover - compiled
    st = np.zeros(2, np.int64)
    for i in range(out.size):
        out[i] = _dlap(rng, st, s, t)


@njit(cache=True, nogil=True)
def _dgauss_fill(rng, a, t, ymax, out):   # pragma: no cover - compiled
    st = np.zeros(2, np.int64)
    for i in range(out.size):
        out[i] = _dgauss(rng, st, a, t, ymax)


def discrete_laplace_fill(rng: np.random.Generator, s: int, t: int, size) -> np.ndarray:
    """``size`` integers with ``P(x) ∝ exp(-|x| s / t)``, exactly (compiled Algorithm 2).

    >>> x = discrete_laplace_fill(secure_generator(2), 1, 3, 4000)
    >>> x.dtype.name, bool(abs(x.mean()) < 0.3)
    ('int64', True)
    """
    s, t = int(s), int(t)
    if s < 1 or t < 1 or t >= 2**40:
        raise ValueError(f"need integers 1 <= s and 1 <= t < 2^40, got s={s}, t={t}")
    out = np.empty(size, dtype=np.int64)
    _dlap_fill(rng, s, t, out.reshape(-1))
    return out


def discrete_gaussian_fill(rng: np.random.Generator, a: int, size,
                           ymax: int = GAUSS_YMAX) -> np.ndarray:
    """``size`` integers with ``P(x) ∝ exp(-x^2 / (2a))`` (variance parameter ``a``, an
    integer), truncated to ``|x| <= ymax`` (compiled Algorithm 3).

    >>> x = discrete_gaussian_fill(secure_generator(3), 9, 6000)
    >>> bool(abs(x.var() - 9) < 1)
    True
    """
    a, ymax = int(a), int(ymax)
    if not 1 <= a < 2**44:    # keeps every integer _dgauss forms below 2^62
        raise ValueError(f"a must be an integer in [1, 2^44), got {a}")
    if ymax < 1 or ymax > GAUSS_YMAX:
        raise ValueError(f"ymax must be in [1, {GAUSS_YMAX}], got {ymax}")
    t = math.isqrt(a) + 1
    out = np.empty(size, dtype=np.int64)
    _dgauss_fill(rng, a, t, ymax, out.reshape(-1))
    return out


# --------------------------------------------------------------------------- lattice releases

@functools.lru_cache(maxsize=4096)
def _laplace_lattice(epsilon: float, sensitivity: float, rounding: int = 1
                     ) -> tuple[float, int, int, int]:
    """``(step, sens_lattice, s, t)``: the Laplace release's public lattice, its sensitivity in
    lattice steps and the exact scale ``t / s >= sens_lattice / epsilon`` lattice units.

    Rounding to the nearest lattice point moves each coordinate by at most half a step, so two
    values ``d`` apart land at most ``floor(d / step) + 1`` steps apart (the difference of the
    rounded values is an integer below ``d / step + 1``; rounding half to even does not break
    this); over the ``rounding`` coordinates a record can touch, an L1 sensitivity ``S``
    becomes ``floor(S / step) + rounding`` steps. Values that are lattice points already
    (integer counts on a step that divides 1) move by nothing: ``rounding = 0``."""
    g = lattice_step(sensitivity, LAPLACE_BITS)
    sens = math.floor(Fraction(sensitivity) / Fraction(g)) + int(rounding)
    t = math.ceil(Fraction(sens * _LAPLACE_S) / Fraction(epsilon))
    return g, sens, _LAPLACE_S, t


def laplace_rounding(size: int, sensitivity: float, *, touched: int | None = None,
                     integers: bool = False) -> int:
    """The lattice steps that rounding a release of ``size`` values can add to its
    sensitivity: 0 for integer-valued queries (counts) whose lattice step divides 1
    (``sensitivity < 8192``), else ``touched`` (the coordinates one record can change; all
    ``size`` of them by default). A function of public quantities only: ``integers`` is a
    property of the query (a count is a whole number whatever the data), checked against the
    values by :func:`laplace_on_lattice`.

    >>> laplace_rounding(2, 1.0, integers=True), laplace_rounding(3, 1.0)
    (0, 3)
    >>> laplace_rounding(3, 1.0, touched=1), laplace_rounding(1, 2.0**14, integers=True)
    (1, 1)
    """
    if integers and lattice_step(sensitivity, LAPLACE_BITS) <= 1.0:
        return 0
    d = max(1, int(size)) if touched is None else int(touched)
    if d < 1:
        raise ValueError(f"touched must be a positive integer, got {touched!r}")
    return d


def laplace_on_lattice(rng: np.random.Generator, values, *, epsilon: float,
                       sensitivity: float, touched: int | None = None,
                       integers: bool = False) -> np.ndarray:
    """``values`` rounded to the lattice of :func:`lattice_step` ``(sensitivity, 12)`` plus
    discrete Laplace noise: epsilon-DP for a query of L1 sensitivity ``sensitivity``.

    On the lattice the sensitivity is ``floor(sensitivity / g)`` steps plus what rounding adds
    (:func:`laplace_rounding`: one step per coordinate a record touches, ``touched``, all by
    default; none for ``integers``) and the noise scale is ``t / s >= that / epsilon`` steps,
    so the release is ``epsilon``-DP exactly (the geometric mechanism; Ghosh, Roughgarden and
    Sundararajan 2009). A query declared ``integers`` whose values are not whole numbers
    raises, rather than spend more than its epsilon.

    >>> rng = secure_generator(4)
    >>> out = laplace_on_lattice(rng, np.zeros(20000), epsilon=0.5, sensitivity=1.0, touched=1)
    >>> bool(abs(np.mean(np.abs(out)) - 2.0) < 0.1)
    True
    >>> laplace_on_lattice(rng, np.array([0.5]), epsilon=1.0, sensitivity=1.0, integers=True)
    Traceback (most recent call last):
    ...
    ValueError: integers=True (a count query) but a value is not a whole number
    """
    v = np.asarray(values, dtype=np.float64)
    if integers and v.size and not np.all(v == np.rint(v)):
        raise ValueError("integers=True (a count query) but a value is not a whole number")
    rounding = laplace_rounding(v.size, float(sensitivity), touched=touched, integers=integers)
    g, _, s, t = _laplace_lattice(float(epsilon), float(sensitivity), rounding)
    k = snap(v, g)
    noise = discrete_laplace_fill(rng, s, t, k.shape)
    return (k + noise).astype(np.float64) * g


def laplace_lattice_epsilon(epsilon: float, sensitivity: float, rounding: int = 1) -> float:
    """The per-step epsilon ``s / t`` of :func:`laplace_on_lattice` times its lattice
    sensitivity: at most ``epsilon``.

    >>> laplace_lattice_epsilon(1.0, 1.0) <= 1.0
    True
    """
    _, sens, s, t = _laplace_lattice(float(epsilon), float(sensitivity), int(rounding))
    return float(Fraction(sens * s, t))


def _gaussian_lattice(sigma: float, sensitivity: float, touched: int) -> tuple[float, int]:
    """``(step, a)``: the Gaussian release's lattice and its integer variance parameter, with
    ``sqrt(a) >= (sigma / sensitivity) * (sensitivity / step + sqrt(touched))``."""
    g = lattice_step(sigma, GAUSS_BITS)
    root = math.isqrt(touched)
    root = root if root * root == touched else root + 1          # >= sqrt(touched)
    sens = Fraction(sensitivity) / Fraction(g) + root              # L2, lattice units
    z = Fraction(sigma) / Fraction(sensitivity)
    return g, math.ceil((z * sens) ** 2)


def gaussian_on_lattice(rng: np.random.Generator, values, *, sigma: float, sensitivity: float,
                        touched: int | None = None) -> np.ndarray:
    """``values`` on the lattice of :func:`lattice_step` ``(sigma, 20)`` plus discrete Gaussian
    noise whose variance keeps the noise multiplier ``sigma / sensitivity`` on the lattice.

    ``touched`` is the number of coordinates one record can change (all of them by default):
    rounding adds at most ``sqrt(touched)`` steps to the L2 sensitivity, and the variance
    parameter ``a`` is raised to cover it, so the Rényi divergence between neighbours is at
    most ``alpha / (2 z^2)``, ``z = sigma / sensitivity``, as for the continuous Gaussian
    (Canonne et al. 2020, Prop. 5 with an integer shift). The extra noise is a factor
    ``1 + sqrt(touched) * z * 2^-18`` at most.

    >>> rng = secure_generator(5)
    >>> out = gaussian_on_lattice(rng, np.full(20000, 3.0), sigma=2.0, sensitivity=1.0)
    >>> bool(abs(out.mean() - 3) < 0.05), bool(abs(out.std() - 2) < 0.05)
    (True, True)
    """
    v = np.asarray(values, dtype=np.float64)
    d = int(v.size if touched is None else touched)
    g, a = _gaussian_lattice(float(sigma), float(sensitivity), max(d, 1))
    k = snap(v, g)
    noise = discrete_gaussian_fill(rng, a, k.shape)
    return (k + noise).astype(np.float64) * g


def gaussian_steps(stddevs) -> np.ndarray:
    """The lattice step of each column of :func:`scaled_gaussian_on_lattice`: a record that
    moves column ``j`` by ``s_j`` moves it by at most ``s_j + step_j`` after rounding, so its
    RDP is charged with ``s_j + step_j`` (``step_j <= stddevs[j] * 2^-18``).

    >>> gaussian_steps([1.0, 3.0]).tolist() == [2.0**-18, 2.0**-17]
    True
    """
    return np.array([lattice_step(float(s), GAUSS_BITS) for s in np.atleast_1d(stddevs)])


def scaled_gaussian_on_lattice(rng: np.random.Generator, values, stddevs) -> np.ndarray:
    """Column ``j`` of ``values`` (shape ``(..., D)``) rounded to its lattice
    (:func:`gaussian_steps`) plus discrete Gaussian noise whose variance parameter is at least
    ``(stddevs[j] / step_j)^2``: the non-spherical Gaussian on lattices.

    >>> out = scaled_gaussian_on_lattice(secure_generator(6), np.zeros((20000, 2)), [1.0, 4.0])
    >>> out.std(axis=0).round(1).tolist()
    [1.0, 4.0]
    """
    v = np.asarray(values, dtype=np.float64)
    sd = np.atleast_1d(np.asarray(stddevs, dtype=np.float64))
    if v.shape[-1:] != sd.shape:
        raise ValueError(f"values must have {sd.size} columns, got shape {v.shape}")
    out = np.empty_like(v)
    for j, g in enumerate(gaussian_steps(sd)):
        a = math.ceil((Fraction(float(sd[j])) / Fraction(float(g))) ** 2)
        k = snap(v[..., j], g)
        out[..., j] = (k + discrete_gaussian_fill(rng, a, k.shape)).astype(np.float64) * g
    return out


def gaussian_noise_on_lattice(rng: np.random.Generator, multiples, step: float,
                              sigma: float) -> np.ndarray:
    """``(multiples + X) * step`` with ``X`` discrete Gaussian of variance parameter
    ``ceil((sigma / step)^2)``: Gaussian noise of standard deviation at least ``sigma`` for
    values already on the lattice of ``step`` (``multiples``: int64 counts of steps).

    For a query whose values are exact multiples of ``step`` (integer counts with ``step <= 1``,
    sums of gradients first rounded to ``step``) a record's shift is an integer number of steps,
    and the Rényi divergence is at most the continuous Gaussian's at ``sigma``; nothing is added
    to the sensitivity. ``sigma / step`` must lie in ``[1, 2^22)``.

    >>> out = gaussian_noise_on_lattice(secure_generator(7), np.zeros(20000, np.int64), 2.0**-10,
    ...                                 3.0)
    >>> bool(abs(out.std() - 3) < 0.1), bool(np.all(out * 2**10 % 1 == 0))
    (True, True)
    """
    k = np.asarray(multiples, dtype=np.int64)
    return (k + discrete_gaussian_fill(rng, _variance_steps(float(sigma), float(step)),
                                       k.shape)).astype(np.float64) * step


@functools.lru_cache(maxsize=4096)
def _variance_steps(sigma: float, step: float) -> int:
    """``ceil((sigma / step)^2)``, exactly; ``sigma / step`` must lie in ``[1, 2^22)``."""
    ratio = Fraction(sigma) / Fraction(step)
    if not 1 <= ratio < 2**22:
        raise ValueError(f"sigma / step must lie in [1, 2^22), got {float(ratio)!r}")
    return math.ceil(ratio ** 2)


def common_step(sigmas) -> float:
    """One public lattice step for values released with several noise levels: about
    ``min(sigmas) * 2^-14``, coarsened when needed so that ``max(sigmas) / step < 2^22``.

    >>> common_step([1.0, 4.0]) == 2.0**-14
    True
    >>> common_step([1e-3, 1e3]) == lattice_step(1e3, 21)
    True
    """
    sig = [float(s) for s in sigmas if s > 0]
    if not sig:
        raise ValueError("need at least one sigma > 0")
    return _common_step(min(sig), max(sig))


@functools.lru_cache(maxsize=1024)
def _common_step(low: float, high: float) -> float:
    return max(lattice_step(low, 14), lattice_step(high, 21))


def on_lattice(values, step: float, bound: float | None = None) -> np.ndarray:
    """``values`` rounded to the nearest multiple of ``step``, as floats (exact); with
    ``bound``, first clipped to the largest multiple of ``step`` not above ``bound``, so the
    result stays within ``[-bound, bound]``.

    A record's contribution rounded this way *before* it enters a sum makes the sum an exact
    multiple of ``step``, and the record's shift is its rounded contribution: charge the
    privacy cost on the rounded values.

    >>> on_lattice(np.array([0.3, -0.99, 0.74]), 0.25, bound=0.9).tolist()
    [0.25, -0.75, 0.75]
    """
    v = np.asarray(values, dtype=np.float64)
    if bound is not None:
        top = math.floor(bound / step) * step
        v = np.clip(v, -top, top)
    return snap(v, step).astype(np.float64) * step


def sampling_threshold(rate: float) -> float:
    """The threshold a uniform of :func:`uniforms` is compared with (``u < threshold``) to keep
    a record with probability exactly ``floor(rate 2^53) / 2^53 <= rate``: a Poisson
    subsample never samples more often than its accounting says.

    >>> sampling_threshold(0.1) <= 0.1, sampling_threshold(1.0)
    (True, 1.0)
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must lie in [0, 1], got {rate!r}")
    return math.floor(rate * 2.0**53) / 2.0**53


def uniforms(rng: np.random.Generator, size=None) -> np.ndarray | float:
    """Uniform draws ``k / 2^53`` (``k`` exactly uniform on ``[0, 2^53)``) for choices that do
    not look at the data: random split points, Poisson subsampling (with
    :func:`sampling_threshold`), candidate points. They come from the same generator as every
    noise draw.

    >>> u = uniforms(secure_generator(8), 4)
    >>> bool(np.all((u >= 0) & (u < 1))), bool(np.all(u * 2**53 % 1 == 0))
    (True, True)
    """
    return rng.random(size)


def choose(rng: np.random.Generator, n: int, size=None):
    """Exactly uniform integers in ``[0, n)`` (a data-independent choice).

    >>> sorted(set(choose(secure_generator(9), 3, 200).tolist()))
    [0, 1, 2]
    """
    return rng.integers(0, n, size=size)


def permutation(rng: np.random.Generator, n: int) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` (dealing records into parts).

    >>> sorted(permutation(secure_generator(10), 5).tolist())
    [0, 1, 2, 3, 4]
    """
    return rng.permutation(n)


@njit(cache=True, nogil=True)
def nb_choose(rng, n):   # pragma: no cover - compiled
    """:func:`choose` for compiled kernels: one exactly uniform integer in ``[0, n)``."""
    return rng.integers(0, n)


@njit(cache=True, nogil=True)
def nb_uniform(rng):   # pragma: no cover - compiled
    """:func:`uniforms` for compiled kernels: one draw ``k / 2^53``."""
    return rng.random()


# --------------------------------------------------------------------------- exact selection

#: the exponent's factor ``epsilon / (2 sensitivity)`` (or ``epsilon / sensitivity``) is rounded
#: *down* to a multiple of ``2^-FACTOR_BITS`` per lattice step of utility: never more than asked
FACTOR_BITS = 30
#: a selection's utilities are rounded to multiples of ``2^(floor(log2 sensitivity) - 12)``
UTILITY_BITS = 12


@functools.lru_cache(maxsize=4096)
def selection_lattice(epsilon: float, sensitivity: float, monotonic: bool
                      ) -> tuple[float, int, int]:
    """``(step, num, den)`` for an exact selection: utilities rounded to multiples of
    ``step``, and the exponent ``(num / den) * k`` for a utility of ``k`` steps.

    On the lattice a utility's sensitivity is ``ceil(sensitivity / step)`` steps (rounding is
    monotone, so monotonic utilities stay monotonic); ``num / den`` is the largest multiple of
    ``2^-30`` not above ``epsilon / (c * ceil(sensitivity / step))`` (``c`` = 1 monotonic, 2
    not), so the selection is ``epsilon``-DP for the rounded utilities.

    >>> step, num, den = selection_lattice(1.0, 1.0, False)
    >>> step, den, num / den <= 1.0 / (2 * 4096)
    (0.000244140625, 1073741824, True)
    """
    step = lattice_step(float(sensitivity), UTILITY_BITS)
    sens = math.ceil(Fraction(float(sensitivity)) / Fraction(step))
    exact = Fraction(float(epsilon)) / ((1 if monotonic else 2) * sens)
    den = 1 << FACTOR_BITS
    return step, math.floor(exact * den), den


def utility_steps(utilities, step: float) -> np.ndarray:
    """Utilities as int64 multiples of ``step`` (:func:`snap`), with a clear error for
    utilities too large for the lattice."""
    u = np.asarray(utilities, dtype=np.float64)
    if u.size and not np.all(np.abs(u) < step * 2.0**52):
        raise ValueError(f"utilities must stay below {step * 2.0**52:.3g} in magnitude for an "
                         f"exact selection (sensitivity / 4096 * 2^52)")
    return snap(u, step)


@njit(cache=True, nogil=True)
def _bern_exp_times(rng, st, d, num, den):   # pragma: no cover - compiled
    """Bernoulli(exp(-d num / den)) for d >= 0, 0 <= num, den >= 1: exp(-num/den)^d, each
    factor split into exp(-1)^(num // den) exp(-(num mod den)/den); early exit."""
    if d < 2**31 and num < 2**31:        # the product fits: one Bernoulli(exp(-n/den))
        return _bern_exp(rng, st, d * num, den)
    q = num // den
    r = num - q * den
    for _ in range(d):
        for _ in range(q):
            if not _bern_exp_small(rng, st, 1, 1):
                return False
        if r > 0 and not _bern_exp_small(rng, st, r, den):
            return False
    return True


@njit(cache=True, nogil=True)
def em_pick(rng, k, n, num, den):   # pragma: no cover - compiled
    """The exponential mechanism over ``k[:n]`` (int64 utilities on the lattice), exactly:
    index ``i`` with probability proportional to ``exp((num / den) k_i)``. Rejection sampling:
    a uniform candidate is kept with probability ``exp(-(num / den)(max k - k_i))``, exact by
    Algorithm 1 of Canonne et al. (2020); at most ``n`` tries on average."""
    top = k[0]
    for i in range(1, n):
        if k[i] > top:
            top = k[i]
    st = np.zeros(2, np.int64)
    while True:
        i = _below(rng, st, n)
        if _bern_exp_times(rng, st, top - k[i], num, den):
            return i


@njit(cache=True, nogil=True)
def em_pick_dist(rng, dist, n, num, den):   # pragma: no cover - compiled
    """:func:`em_pick` for utilities ``-dist[:n]`` (int64 distances, as a private median's
    ``|2 rank - n|``): index ``i`` with probability proportional to
    ``exp(-(num / den) dist_i)``, exactly."""
    low = dist[0]
    for i in range(1, n):
        if dist[i] < low:
            low = dist[i]
    st = np.zeros(2, np.int64)
    while True:
        i = _below(rng, st, n)
        if _bern_exp_times(rng, st, dist[i] - low, num, den):
            return i


@functools.lru_cache(maxsize=4096)
def distance_factor(epsilon: float, per_unit: int = 2) -> tuple[int, int]:
    """``(num, den)``: the largest multiple of ``2^-30`` not above ``epsilon / per_unit``, the
    exponent's factor per unit of an integer distance (a private median's ``|2 rank - n|``
    moves by at most 1 between neighbours and its mechanism uses ``exp(-epsilon d / 2)``).

    >>> distance_factor(1.0)
    (536870912, 1073741824)
    """
    den = 1 << FACTOR_BITS
    return math.floor(Fraction(float(epsilon)) / per_unit * den), den


@njit(cache=True, nogil=True)
def _dist_rows(rng, D, num, den, out):   # pragma: no cover - compiled
    for r in range(D.shape[0]):
        out[r] = em_pick_dist(rng, D[r], D.shape[1], num, den)


def select_by_distance(rng: np.random.Generator, distances, epsilon: float) -> np.ndarray:
    """One exact selection per row of int64 ``distances`` with probability proportional to
    ``exp(-epsilon d / 2)`` (:func:`distance_factor`, :func:`em_pick_dist`).

    >>> select_by_distance(secure_generator(12), [[9, 0, 9]], 20.0).tolist()
    [1]
    """
    D = np.ascontiguousarray(np.atleast_2d(np.asarray(distances, dtype=np.int64)))
    num, den = distance_factor(epsilon)
    out = np.empty(D.shape[0], dtype=np.int64)
    if D.shape[1]:
        _dist_rows(rng, D, num, den, out)
    return out


@njit(cache=True, nogil=True)
def em_pick_masses(rng, k, cum, n, num, den):   # pragma: no cover - compiled
    """The exponential mechanism with a public base measure, exactly: index ``i`` with
    probability proportional to ``mass_i exp((num / den) k_i)``, ``cum`` the int64 running
    sums of the masses (``cum[n - 1] > 0``). A candidate drawn in proportion to its mass (an
    exactly uniform integer below the total) is kept with probability
    ``exp(-(num / den)(max k - k_i))``, the maximum over candidates of positive mass."""
    top = 0
    found = False
    prev = 0
    for i in range(n):
        if cum[i] > prev and (not found or k[i] > top):
            top = k[i]
            found = True
        prev = cum[i]
    total = cum[n - 1]
    st = np.zeros(2, np.int64)
    while True:
        u = rng.integers(0, total)
        lo, hi = 0, n - 1            # the first i with cum[i] > u
        while lo < hi:
            mid = (lo + hi) >> 1
            if cum[mid] > u:
                hi = mid
            else:
                lo = mid + 1
        if _bern_exp_times(rng, st, top - k[lo], num, den):
            return lo


@njit(cache=True, nogil=True)
def pf_pick(rng, k, n, num, den, order):   # pragma: no cover - compiled
    """Permute-and-flip (McKenna and Sheldon 2020) over ``k[:n]``, exactly: candidates in a
    uniformly random order (``order``: scratch of ``n``), each kept with probability
    ``exp(-(num / den)(max k - k_i))``; the best is always kept."""
    top = k[0]
    for i in range(1, n):
        if k[i] > top:
            top = k[i]
    for i in range(n):
        order[i] = i
    st = np.zeros(2, np.int64)
    for i in range(n - 1, 0, -1):      # Fisher-Yates with exactly uniform integers
        j = _below(rng, st, i + 1)
        t = order[i]
        order[i] = order[j]
        order[j] = t
    for i in range(n):
        c = order[i]
        if _bern_exp_times(rng, st, top - k[c], num, den):
            return c
    return order[n - 1]   # unreachable: the best candidate is kept with probability 1


@njit(cache=True, nogil=True)
def _pick_rows(rng, K, ok, num, den, pf, out):   # pragma: no cover - compiled
    m, n = K.shape
    buf = np.empty(n, np.int64)
    idx = np.empty(n, np.int64)
    order = np.empty(n, np.int64)
    for r in range(m):
        c = 0
        for j in range(n):
            if ok[r, j]:
                buf[c] = K[r, j]
                idx[c] = j
                c += 1
        if c == 0:
            out[r] = -1
        elif pf:
            out[r] = idx[pf_pick(rng, buf, c, num, den, order)]
        else:
            out[r] = idx[em_pick(rng, buf, c, num, den)]


def select_rows(rng: np.random.Generator, utilities, *, epsilon: float, sensitivity: float,
                monotonic: bool = False, allowed=None, method: str = "exponential"
                ) -> np.ndarray:
    """One exact selection per row of ``utilities`` (2-d): the exponential mechanism
    (``method="exponential"``) or permute-and-flip (``"permute-and-flip"``) on the utilities
    rounded to :func:`selection_lattice`; ``allowed`` restricts each row (``-1`` where a row
    allows nothing).

    >>> select_rows(secure_generator(11), [[0.0, 50.0], [50.0, 0.0]], epsilon=5.0,
    ...             sensitivity=1.0).tolist()
    [1, 0]
    """
    U = np.atleast_2d(np.asarray(utilities, dtype=np.float64))
    ok = (np.ones(U.shape, dtype=np.bool_) if allowed is None
          else np.ascontiguousarray(np.asarray(allowed, dtype=np.bool_)))
    if ok.shape != U.shape:
        raise ValueError(f"allowed has shape {ok.shape}, utilities {U.shape}")
    step, num, den = selection_lattice(epsilon, sensitivity, monotonic)
    K = utility_steps(np.where(ok, U, 0.0), step)
    out = np.empty(U.shape[0], dtype=np.int64)
    if U.size:
        _pick_rows(rng, np.ascontiguousarray(K), ok, num, den,
                   method == "permute-and-flip", out)
    else:
        out[:] = -1
    return out


def laplace_lattice_rdp(orders, *, epsilon: float, sensitivity: float,
                        shift: float | None = None, rounding: int = 1) -> np.ndarray:
    """RDP of :func:`laplace_on_lattice` ``(epsilon, sensitivity)`` between inputs that differ
    by ``shift`` in L1 (``sensitivity`` by default) over ``rounding`` rounded coordinates (0 for
    integer-valued queries; :func:`laplace_rounding`): the discrete Laplace's, between lattice
    points ``floor(shift / step) + rounding`` steps apart (at most ``epsilon`` at every order).

    >>> r = laplace_lattice_rdp([2.0, 64.0], epsilon=0.3, sensitivity=8.0, shift=1.0,
    ...                         rounding=0)
    >>> bool(np.all(r <= 0.3 / 8 + 1e-12))
    True
    """
    g, sens, s, t = _laplace_lattice(float(epsilon), float(sensitivity), int(rounding))
    k = sens if shift is None else (math.floor(Fraction(float(shift)) / Fraction(g))
                                    + int(rounding))
    return discrete_laplace_rdp(orders, step_epsilon=float(np.nextafter(s / t, np.inf)),
                                shift=k)


def discrete_laplace_rdp(orders, *, step_epsilon: float, shift: int) -> np.ndarray:
    """Exact RDP of discrete Laplace noise ``P(x) ∝ exp(-step_epsilon |x|)`` between inputs
    ``shift`` integers apart (three geometric series; the continuous formula is *not* an
    upper bound for the discrete mechanism when ``step_epsilon`` is large).

    >>> from dpstream.accounting.rdp import laplace_rdp
    >>> r = discrete_laplace_rdp([2.0, 8.0], step_epsilon=1e-3, shift=1000)
    >>> bool(np.allclose(r, laplace_rdp([2.0, 8.0], 1.0), rtol=1e-3))
    True
    """
    a = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    lam, k = float(step_epsilon), int(shift)
    if lam <= 0 or k < 0:
        raise ValueError("step_epsilon must be > 0 and shift >= 0")
    if k == 0:
        return np.zeros_like(a)
    out = np.empty_like(a)
    logq = -lam
    log1mq = math.log(-math.expm1(logq))                      # log(1 - q)
    logc = log1mq - math.log1p(math.exp(logq))                # log((1-q)/(1+q))
    for i, al in enumerate(a):
        if al <= 1:
            raise ValueError("orders must all be > 1")
        terms = [(1 - al) * k * logq - log1mq, al * k * logq - log1mq]
        if k > 1:
            lr = (2 * al - 1) * logq                          # log r, r = q^(2 al - 1) < 1
            # sum_{x=1}^{k-1} r^x = r (1 - r^(k-1)) / (1 - r)
            inner = lr + math.log(-math.expm1((k - 1) * lr)) - math.log(-math.expm1(lr))
            terms.append((1 - al) * k * logq + inner)
        m = max(terms)
        out[i] = (logc + m + math.log(sum(math.exp(x - m) for x in terms))) / (al - 1)
    return out
