"""Bad input gets a ValueError (or TypeError) whose message names the parameter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpstream.accounting import (
    BudgetLedger,
    ExponentialMechanism,
    GaussianMechanism,
    GridlessExponentialMechanism,
    IndividualRenyiFilter,
    LaplaceMechanism,
    NonSphericalGaussianMechanism,
    PrivateMedian,
    RDPAccountant,
    ReportNoisyMax,
    RoundCostTable,
    calibrate_noise_multiplier,
    calibrate_sgbdt,
    rdp,
)

BAD_EPS = [0, -1.0, math.nan, math.inf]
BAD_DELTA = [0.0, 1.0, -0.1, 2.0, math.nan]
BAD_Q = [0.0, -0.5, 1.5, math.nan]


@pytest.mark.parametrize("eps", BAD_EPS)
@pytest.mark.parametrize("factory", [
    lambda e: LaplaceMechanism(epsilon=e, sensitivity=1.0),
    lambda e: ExponentialMechanism(epsilon=e, sensitivity=1.0),
    lambda e: ReportNoisyMax(epsilon=e),
    lambda e: PrivateMedian(epsilon=e, lower=0.0, upper=1.0),
    lambda e: GridlessExponentialMechanism(epsilon=e, sensitivity=1.0, bounds=[(0, 1)]),
    lambda e: BudgetLedger(total_epsilon=e),
    lambda e: GaussianMechanism.calibrated(epsilon=e, delta=1e-5, sensitivity=1.0),
    lambda e: calibrate_noise_multiplier(epsilon=e, delta=1e-5, sample_rate=0.1, steps=10),
])
def test_epsilon_must_be_positive_and_finite(factory, eps):
    with pytest.raises(ValueError, match="epsilon"):
        factory(eps)


@pytest.mark.parametrize("delta", BAD_DELTA)
@pytest.mark.parametrize("call", [
    lambda d: GaussianMechanism.calibrated(epsilon=1.0, delta=d, sensitivity=1.0),
    lambda d: calibrate_noise_multiplier(epsilon=1.0, delta=d, sample_rate=0.1, steps=10),
    lambda d: rdp.rdp_to_epsilon([2.0], [0.1], delta=d),
    lambda d: RDPAccountant().get_epsilon(delta=d),
    lambda d: calibrate_sgbdt(epsilon=1.0, delta=d, sample_rate=0.1, rounds=10, grad_clip=0.1,
                              leaf_noise_split=0.2),
])
def test_delta_must_be_in_open_unit_interval(call, delta):
    with pytest.raises(ValueError, match="delta"):
        call(delta)


@pytest.mark.parametrize("q", BAD_Q)
@pytest.mark.parametrize("call", [
    lambda q: rdp.subsampled_gaussian_rdp([2.0], sample_rate=q, noise_multiplier=1.0),
    lambda q: rdp.zhu_wang_subsampled_rdp([2], sample_rate=q,
                                          base_rdp=lambda a: rdp.gaussian_rdp(a, 1.0)),
    lambda q: RDPAccountant().compose_subsampled_gaussian(noise_multiplier=1.0, sample_rate=q),
    lambda q: calibrate_noise_multiplier(epsilon=1.0, delta=1e-5, sample_rate=q, steps=10),
])
def test_sample_rate_must_be_in_half_open_unit_interval(call, q):
    with pytest.raises(ValueError, match="sample_rate"):
        call(q)


@pytest.mark.parametrize("utilities", [[], [1.0, math.nan], [math.inf, 0.0], [-math.inf]])
@pytest.mark.parametrize("mech", [ExponentialMechanism(epsilon=1.0, sensitivity=1.0, rng=0),
                                  ReportNoisyMax(epsilon=1.0, rng=0)])
def test_utilities_must_be_nonempty_and_finite(mech, utilities):
    with pytest.raises(ValueError, match="utilities"):
        mech.select(utilities)


def test_other_parameters_are_named():
    with pytest.raises(ValueError, match="sensitivity"):
        LaplaceMechanism(epsilon=1.0, sensitivity=0.0)
    with pytest.raises(ValueError, match="sigma"):
        GaussianMechanism(sigma=-1.0, sensitivity=1.0)
    with pytest.raises(ValueError, match="weights must sum to 1"):
        NonSphericalGaussianMechanism(sigma=1.0, weights=[0.5, 0.6])
    with pytest.raises(ValueError, match="noise_multiplier"):
        rdp.gaussian_rdp([2.0], noise_multiplier=0.0)
    with pytest.raises(ValueError, match="orders"):
        rdp.gaussian_rdp([0.5], noise_multiplier=1.0)
    with pytest.raises(ValueError, match="orders must be integers"):
        rdp.zhu_wang_subsampled_rdp([2.5], sample_rate=0.1,
                                    base_rdp=lambda a: rdp.gaussian_rdp(a, 1.0))
    with pytest.raises(ValueError, match="steps"):
        calibrate_noise_multiplier(epsilon=1.0, delta=1e-5, sample_rate=0.1, steps=0)
    with pytest.raises(ValueError, match="accountant"):
        RDPAccountant(accountant="moments")
    with pytest.raises(ValueError, match="leaf_noise_split"):
        RoundCostTable(order=2.0, sigma_leaf=1.0, leaf_noise_split=1.0, sample_rate=0.1,
                       grad_clip=0.1)
    with pytest.raises(ValueError, match="bound"):
        IndividualRenyiFilter(order=2.0, bound=0.0)
    with pytest.raises(ValueError, match="costs"):
        f = IndividualRenyiFilter(order=2.0, bound=1.0)
        f.add(2)
        f.step([0.1])
    with pytest.raises(ValueError, match="values must lie within"):
        PrivateMedian(epsilon=1.0, lower=0.0, upper=1.0).release([0.5, 2.0])
    with pytest.raises(ValueError, match="values must be finite"):
        PrivateMedian(epsilon=1.0, lower=0.0, upper=1.0).release([0.5, math.nan])
    fast = dict(epsilon=1.0, lower=0.0, upper=1.0, n_candidates=8,
                rng=np.random.default_rng(0))   # the tree grower's O(1)-checked form
    for values in ([0.5, 2.0], [-1.0, 0.5], [0.5, math.nan]):
        with pytest.raises(ValueError, match="within the public bounds"):
            PrivateMedian.release_sorted(np.array(values), **fast)
    for bad in (dict(epsilon=0.0), dict(upper=0.0), dict(lower=-math.inf)):
        with pytest.raises(ValueError, match="epsilon > 0 and finite bounds"):
            PrivateMedian.release_sorted(np.array([0.5]), **{**fast, **bad})
    with pytest.raises(ValueError, match="codes must be integers"):
        PrivateMedian.categorical(np.array([0.0, 1.0]), n_categories=2, epsilon=1.0)
    with pytest.raises(ValueError, match="bounds and categories"):
        GridlessExponentialMechanism(epsilon=1.0, sensitivity=1.0)
    with pytest.raises(TypeError, match="rng"):
        LaplaceMechanism(epsilon=1.0, sensitivity=1.0, rng="seed")
    with pytest.raises(TypeError, match="epsilon"):
        LaplaceMechanism(epsilon="1", sensitivity=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        BudgetLedger(total_epsilon=1.0).charge(-0.1)


def test_seeded_mechanisms_reproduce_and_unseeded_do_not():
    a = LaplaceMechanism(epsilon=1.0, sensitivity=1.0, rng=5).release(np.zeros(4))
    b = LaplaceMechanism(epsilon=1.0, sensitivity=1.0, rng=5).release(np.zeros(4))
    c = LaplaceMechanism(epsilon=1.0, sensitivity=1.0).release(np.zeros(4))
    d = LaplaceMechanism(epsilon=1.0, sensitivity=1.0).release(np.zeros(4))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(c, d)


def test_the_categorical_median_is_the_exponential_mechanisms_draw():
    """PrivateMedian.categorical samples without building a mechanism per node: the same
    weights and the same draw as ExponentialMechanism.select on the rank utilities."""
    rng = np.random.default_rng(7)
    for seed in range(200):
        k = int(rng.integers(1, 9))
        codes = rng.integers(0, k, size=int(rng.integers(0, 40)))
        counts = np.bincount(codes, minlength=k)
        em = ExponentialMechanism(epsilon=0.7, sensitivity=0.5, rng=seed)
        want = em.select(-np.abs(counts - codes.size / 2.0))
        assert PrivateMedian.categorical(codes, n_categories=k, epsilon=0.7, rng=seed) == want
