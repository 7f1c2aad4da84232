"""Exact discrete samplers (issue 65): each draw's distribution against its exact pmf."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpstream.accounting import noise
from dpstream.accounting.discrete import (
    as_fraction,
    bernoulli_exp,
    discrete_gaussian,
    discrete_laplace,
    uniform_below,
)


def _chi2_pvalue(draws: np.ndarray, pmf, k: int) -> float:
    """Goodness of fit of integer ``draws`` to ``pmf`` on [-k, k], tails pooled."""
    support = np.arange(-k, k + 1)
    p = np.array([pmf(int(x)) for x in support])
    p = np.append(p, max(0.0, 1.0 - p.sum()))
    counts = np.array([np.sum(draws == x) for x in support] + [np.sum(np.abs(draws) > k)])
    keep = p * draws.size >= 5
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(p[keep], p[~keep].sum()) * draws.size
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    return float(stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue)


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(3, 2), 4])
def test_discrete_laplace_has_its_exact_pmf(scale):
    rng = np.random.default_rng(11)
    draws = discrete_laplace(rng, scale, size=6000)
    q = math.exp(-1 / float(scale))
    pmf = lambda x: (1 - q) / (1 + q) * q ** abs(x)   # noqa: E731
    assert _chi2_pvalue(draws, pmf, 12) > 1e-3


@pytest.mark.parametrize("sigma2", [Fraction(9, 4), 1, 30])
def test_discrete_gaussian_has_its_exact_pmf(sigma2):
    rng = np.random.default_rng(12)
    draws = discrete_gaussian(rng, sigma2, size=6000)
    s2 = float(sigma2)
    norm = sum(math.exp(-x * x / (2 * s2)) for x in range(-400, 401))
    pmf = lambda x: math.exp(-x * x / (2 * s2)) / norm   # noqa: E731
    assert _chi2_pvalue(draws, pmf, int(4 * math.sqrt(s2)) + 2) > 1e-3


def test_the_control_fails_the_fit():
    """Control: the test tells a wrong scale apart (so the fits above can fail)."""
    rng = np.random.default_rng(13)
    draws = discrete_laplace(rng, Fraction(2), size=6000)
    q = math.exp(-1 / 1.5)
    pmf = lambda x: (1 - q) / (1 + q) * q ** abs(x)   # noqa: E731
    assert _chi2_pvalue(draws, pmf, 12) < 1e-6


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 3)])
def test_bernoulli_exp_has_probability_exp_minus_gamma(gamma):
    rng = np.random.default_rng(14)
    n = 20000
    hits = sum(bernoulli_exp(rng, gamma) for _ in range(n))
    p = math.exp(-float(gamma))
    assert abs(hits / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_uniform_below_is_uniform_and_checked():
    rng = np.random.default_rng(15)
    draws = [uniform_below(rng, 5) for _ in range(5000)]
    assert stats.chisquare(np.bincount(draws, minlength=5)).pvalue > 1e-3
    assert uniform_below(rng, 1) == 0
    with pytest.raises(ValueError):
        uniform_below(rng, 0)


def test_parameters_are_exact_and_validated():
    assert as_fraction(0.1) == Fraction(3602879701896397, 36028797018963968)   # the double
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            as_fraction(bad)
    with pytest.raises(TypeError):
        as_fraction("1")
    with pytest.raises(TypeError):
        as_fraction(True)


# ------------------------------------------------------------------ the compiled samplers

@pytest.mark.parametrize("s,t", [(1, 2), (3, 5), (1024, 3000)])
def test_compiled_discrete_laplace_has_its_exact_pmf(s, t):
    draws = noise.discrete_laplace_fill(noise.secure_generator(21), s, t, 20000)
    q = math.exp(-s / t)
    pmf = lambda x: (1 - q) / (1 + q) * q ** abs(x)   # noqa: E731
    assert _chi2_pvalue(draws, pmf, 40) > 1e-3


@pytest.mark.parametrize("a", [1, 7, 50])
def test_compiled_discrete_gaussian_has_its_exact_pmf(a):
    draws = noise.discrete_gaussian_fill(noise.secure_generator(22), a, 20000)
    support = np.arange(-60 * int(math.sqrt(a)) - 60, 60 * int(math.sqrt(a)) + 61)
    w = np.exp(-support.astype(float) ** 2 / (2 * a))
    z = w.sum()
    pmf = lambda x: math.exp(-x * x / (2 * a)) / z   # noqa: E731
    assert _chi2_pvalue(draws, pmf, 3 * int(math.sqrt(a)) + 5) > 1e-3


def test_compiled_gaussian_control_a_wrong_variance_is_caught():
    draws = noise.discrete_gaussian_fill(noise.secure_generator(23), 9, 20000)
    w = np.exp(-np.arange(-200, 201).astype(float) ** 2 / (2 * 10))
    pmf = lambda x: math.exp(-x * x / 20) / w.sum()   # noqa: E731
    assert _chi2_pvalue(draws, pmf, 14) < 1e-3


def test_large_variances_keep_their_spread_and_the_truncation_is_enforced():
    a = 2**38
    draws = noise.discrete_gaussian_fill(noise.secure_generator(24), a, 20000)
    assert abs(draws.var() / a - 1) < 0.05
    small = noise.discrete_gaussian_fill(noise.secure_generator(25), 10_000, 5000, ymax=50)
    assert np.abs(small).max() <= 50
    with pytest.raises(ValueError, match="2\\^44"):
        noise.discrete_gaussian_fill(noise.secure_generator(1), 2**44, 1)


def test_discrete_laplace_rdp_is_the_brute_force_sum_and_grows_with_the_shift():
    from scipy.special import logsumexp

    lam = 0.3
    x = np.arange(-600, 601).astype(float)
    for k in (1, 4):
        lp = -lam * np.abs(x) - logsumexp(-lam * np.abs(x))
        lq = -lam * np.abs(x - k) - logsumexp(-lam * np.abs(x - k))
        for a in (1.5, 3.0, 20.0):
            brute = logsumexp(a * lp + (1 - a) * lq) / (a - 1)
            exact = noise.discrete_laplace_rdp([a], step_epsilon=lam, shift=k)[0]
            assert exact == pytest.approx(brute, rel=1e-9)
    orders = [1.5, 2.0, 8.0, 64.0]
    shifts = [noise.discrete_laplace_rdp(orders, step_epsilon=lam, shift=k) for k in range(6)]
    assert np.all(np.diff(np.array(shifts), axis=0) >= 0)


def test_the_laplace_mechanism_charges_the_discrete_rdp_and_never_more_than_epsilon():
    from dpstream.accounting import LaplaceMechanism

    for eps, sens in [(0.1, 1.0), (1.0, 3.0), (8.0, 0.5)]:
        mech = LaplaceMechanism(epsilon=eps, sensitivity=sens, rng=1)
        r = mech.rdp([1.5, 2.0, 16.0, 1e6])
        assert np.all(r <= eps + 1e-12) and r[-1] > 0.99 * eps


def test_the_lattice_costs_at_most_a_tiny_factor_of_noise():
    """The release's spread against the continuous mechanism's: ``1 + 2^-12`` (Laplace)."""
    out = noise.laplace_on_lattice(noise.secure_generator(26), np.zeros(40000), epsilon=0.5,
                                   sensitivity=2.0, touched=1)
    assert np.mean(np.abs(out)) == pytest.approx(4.0, rel=0.02)   # E|L| = scale = 4
    assert noise.laplace_lattice_epsilon(0.5, 2.0) <= 0.5
    assert noise.laplace_lattice_epsilon(0.5, 2.0) >= 0.5 * (1 - 2.0 ** -11)


@settings(max_examples=300, deadline=None)
@given(st.floats(2.0**-20, 2.0**20), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_rounding_to_the_lattice_never_moves_neighbours_further_than_the_scale_assumes(
        sensitivity, d, seed):
    """The Laplace release's noise is scaled for ``floor(S / g) + touched`` lattice steps
    between neighbours; rounding (half to even included) never puts them further apart."""
    rng = np.random.default_rng(seed)
    g = noise.lattice_step(sensitivity, noise.LAPLACE_BITS)
    a = rng.uniform(-1e3, 1e3, d) * sensitivity
    # an L1 move of (just under: the float sums' own rounding) S over d coordinates
    share = rng.dirichlet(np.ones(d)) * sensitivity * (1 - 2.0**-30)
    b = a + share * rng.choice([-1.0, 1.0], d)
    ties = rng.integers(0, 2, d).astype(bool)                 # and exact half steps
    a[ties] = (np.floor(a[ties] / g) + 0.5) * g
    b[ties] = a[ties] + np.floor(share[ties] / g) * g
    moved = int(np.abs(noise.snap(a, g) - noise.snap(b, g)).sum())
    assumed = noise._laplace_lattice(1.0, float(sensitivity), d)[1]
    assert moved <= assumed


def test_integer_queries_skip_the_rounding_step_and_misdeclared_ones_fail():
    from dpstream.accounting import LaplaceMechanism

    assert noise._laplace_lattice(1.0, 1.0, 0)[1] == 4096
    assert noise._laplace_lattice(1.0, 1.0, 3)[1] == 4099
    counts = LaplaceMechanism(epsilon=1.0, sensitivity=1.0, integers=True, rng=2)
    assert counts.release(np.arange(5.0)).shape == (5,)
    with pytest.raises(ValueError, match="not a whole number"):
        counts.release(np.array([0.5, 1.0]))
    real = LaplaceMechanism(epsilon=1.0, sensitivity=1.0, rng=2)
    # a vector of real values: one rounding step per coordinate unless told otherwise
    assert real.rdp([2.0], size=3)[0] >= LaplaceMechanism(
        epsilon=1.0, sensitivity=1.0, touched=1, rng=2).rdp([2.0])[0] * 0.999
    with pytest.raises(ValueError, match="touched"):
        LaplaceMechanism(epsilon=1.0, sensitivity=1.0, touched=0)


@pytest.mark.parametrize("n, d", [(1, 3), (2, 7), (5, 2**30), (2**29 + 1, 2**30),
                                  (2**60 + 5, 2**61 + 3), (1, 1 << 12), (4095, 4096)])
def test_the_compiled_bernoulli_compares_digits_exactly(n, d):
    """``_bern`` compares ``k`` binary digits of U and n / d at a time (``k`` from 12 down to
    1 for the largest d); each digit width is checked against the exact probability."""
    import numba

    @numba.njit
    def draws(rng, n, d, m):
        st = np.zeros(2, np.int64)
        out = 0
        for _ in range(m):
            out += noise._bern(rng, st, n, d)
        return out

    m = 200_000
    hits = draws(np.random.default_rng(n % 1000 + d % 997), n, d, m)
    assert stats.binomtest(int(hits), m, n / d).pvalue > 1e-4
