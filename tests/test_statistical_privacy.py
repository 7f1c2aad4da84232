"""Statistical privacy tests: every mechanism on neighbouring inputs, with a negative control.

Each test samples the real implementation on D and D' (add/remove one record), computes a lower
confidence bound (confidence 1 - 1e-6, Clopper–Pearson, Bonferroni) on the privacy loss over a
family of events, and asserts it stays within the claimed epsilon; then it runs a broken variant
(half the noise, a wrong factor, Fletcher & Islam's smooth-sensitivity exponential mechanism,
swapped noise weights) and asserts the same test rejects it. Seeds are fixed so the suite is
reproducible; the margins are wide enough that the outcome does not hinge on the seed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from stattest import bin_events, halfline_events, outcome_events, privacy_loss_lower_bound

from dpstream.accounting import (
    ExponentialMechanism,
    GaussianMechanism,
    GridlessExponentialMechanism,
    LaplaceMechanism,
    NonSphericalGaussianMechanism,
    PrivateMedian,
    ReportNoisyMax,
    gaussian_delta,
)
from dpstream.accounting.rdp import effective_noise_multiplier

EPS = 1.0


# ----------------------------------------------------------------------------- Laplace

def test_laplace_within_epsilon_and_half_noise_is_caught():
    n = 200_000
    mech = LaplaceMechanism(epsilon=EPS, sensitivity=1.0, rng=11)
    a, b = mech.release(0.0, size=n), mech.release(1.0, size=n)
    events = halfline_events([-1.0, -0.5, 0.0, 1.0, 1.5, 2.0])
    lb = privacy_loss_lower_bound(a, b, events)
    assert lb <= EPS
    assert lb > 0.9 * EPS  # the test is tight: {x <= 0} has loss exactly epsilon

    broken = LaplaceMechanism(epsilon=2 * EPS, sensitivity=1.0, rng=12)  # half the noise
    lb_bad = privacy_loss_lower_bound(broken.release(0.0, size=n), broken.release(1.0, size=n),
                                      events)
    assert lb_bad > EPS


# ----------------------------------------------------------------------------- Gaussian

def _gauss_events(z: float, eps: float) -> list:
    # the optimal event for (eps, delta) is {x <= t*}, t* = (1 - 2 z^2 eps) / 2 (and mirrored)
    t = (1.0 - 2.0 * z * z * eps) / 2.0
    return halfline_events([t - 0.5, t, t + 0.5, 1 - t - 0.5, 1 - t, 1 - t + 0.5])


def test_gaussian_within_its_exact_curve_and_half_noise_is_caught():
    n = 400_000
    z = 1.0
    delta = gaussian_delta(noise_multiplier=z, epsilon=EPS)  # ~0.127: events are not rare
    mech = GaussianMechanism(sigma=z, sensitivity=1.0, rng=21)
    a, b = mech.release(0.0, size=n), mech.release(1.0, size=n)
    lb = privacy_loss_lower_bound(a, b, _gauss_events(z, EPS), delta=delta)
    assert lb <= EPS
    assert lb > 0.8 * EPS

    broken = GaussianMechanism(sigma=z / 2, sensitivity=1.0, rng=22)
    lb_bad = privacy_loss_lower_bound(broken.release(0.0, size=n), broken.release(1.0, size=n),
                                      _gauss_events(z, EPS), delta=delta)
    assert lb_bad > EPS


def test_calibrated_gaussian_meets_target():
    n = 400_000
    mech = GaussianMechanism.calibrated(epsilon=EPS, delta=0.05, sensitivity=2.0, rng=23)
    a, b = mech.release(0.0, size=n), mech.release(2.0, size=n)
    z = mech.noise_multiplier
    events = halfline_events([2.0 * x for x in ((1 - 2 * z * z * EPS) / 2, 0.0, 0.5)])
    assert privacy_loss_lower_bound(a, b, events, delta=0.05) <= EPS


# ------------------------------------------------------------------- non-spherical Gaussian

def test_non_spherical_gaussian_individual_guarantee_and_swapped_weights_caught():
    """DPLeaf's mechanism: a record moves (count, clipped grad sum) by (1, g)."""
    n = 400_000
    sigma, weights, g = 1.2, [0.2, 0.8], 0.3
    shift = np.array([1.0, g])
    z = float(effective_noise_multiplier(sigma=sigma, weights=weights, sensitivities=shift))
    delta = gaussian_delta(noise_multiplier=z, epsilon=EPS)

    inv_var = 2 * np.asarray(weights) / sigma**2
    claimed = inv_var * shift  # Sigma^-1 s: the claimed mechanism's most sensitive direction
    directions = [claimed, np.array([1.0, 0.0]), np.array([0.0, 1.0])]
    events = halfline_events(np.linspace(-1.5, 2.5, 17))

    def loss(mech):
        base = np.zeros((n, 2))
        a, b = mech.release(base), mech.release(base + shift)
        # project so that the shift becomes 1 along each direction: 1-d Gaussians
        return max(privacy_loss_lower_bound(a @ (u / float(u @ shift)),
                                            b @ (u / float(u @ shift)), events, delta=delta)
                   for u in directions)

    good = NonSphericalGaussianMechanism(sigma=sigma, weights=weights, rng=31)
    lb = loss(good)
    assert lb <= EPS
    assert lb > 0.7 * EPS

    # with the weights swapped the count coordinate gets the small noise: the claim breaks
    swapped = NonSphericalGaussianMechanism(sigma=sigma, weights=weights[::-1], rng=32)
    assert loss(swapped) > EPS


# ------------------------------------------------------------------- exponential mechanism

def test_exponential_mechanism_and_missing_factor_two_caught():
    n, k = 400_000, 100
    events = [lambda x: x == 0, lambda x: x != 0]
    # worst case: r0 loses Delta, all others gain Delta
    u_d = np.zeros(k)
    u_d[0] = 1.0
    u_dp = np.ones(k)
    u_dp[0] = 0.0
    em = ExponentialMechanism(epsilon=EPS, sensitivity=1.0, rng=41)
    a, b = em.select(u_d, size=n), em.select(u_dp, size=n)
    lb = privacy_loss_lower_bound(a, b, events)
    assert lb <= EPS
    assert lb > 0.75 * EPS  # the true loss on outcome 0 is 0.99 * epsilon

    wrong = ExponentialMechanism(epsilon=EPS, sensitivity=1.0, monotonic=True, rng=42)
    lb_bad = privacy_loss_lower_bound(wrong.select(u_d, size=n), wrong.select(u_dp, size=n),
                                      events)
    assert lb_bad > EPS


# ------------------------------------------------------------- report-noisy-max / PF

def smooth_sensitivity_em(counts, epsilon, rng, size):
    """Fletcher & Islam's ORIGINAL leaf-label mechanism — NOT differentially private (its addendum).

    Utility 1 for the majority class, 0 otherwise, 'sensitivity' e^(-j eps) with j the gap between
    the two largest counts. Implemented here only as a negative control.
    """
    counts = np.asarray(counts, dtype=float)
    top2 = np.sort(counts)[-2:]
    j = top2[1] - top2[0]
    u = (counts == counts.max()).astype(float)
    logw = epsilon * u / (2 * math.exp(-j * epsilon))
    return np.argmax(logw + rng.gumbel(size=(size, counts.size)), axis=1)


@pytest.mark.parametrize("method", ReportNoisyMax.METHODS)
def test_report_noisy_max_on_class_counts(method):
    n, k = 200_000, 50
    d = np.zeros(k)
    dp = d.copy()
    dp[0] += 1.0  # one more record of class 0: counts are monotonic, Delta = 1
    rnm = ReportNoisyMax(epsilon=EPS, method=method, rng=51)
    events = outcome_events(k)
    lb = privacy_loss_lower_bound(rnm.select(d, size=n), rnm.select(dp, size=n), events)
    assert lb <= EPS
    assert lb > 0.75 * EPS

    half = ReportNoisyMax(epsilon=2 * EPS, method=method, rng=52)  # half the noise
    assert privacy_loss_lower_bound(half.select(d, size=n), half.select(dp, size=n),
                                    events) > EPS


def test_smooth_sensitivity_exponential_mechanism_fails_the_same_test():
    """The negative control of Fletcher & Islam's addendum: the test the shipped mechanisms pass."""
    n = 200_000
    rng = np.random.default_rng(53)
    d, dp = [0.0, 1.0], [0.0, 2.0]  # neighbours: one more record in class 1
    lb_bad = privacy_loss_lower_bound(smooth_sensitivity_em(d, EPS, rng, n),
                                      smooth_sensitivity_em(dp, EPS, rng, n), outcome_events(2))
    assert lb_bad > EPS
    good = ReportNoisyMax(epsilon=EPS, rng=54)
    assert privacy_loss_lower_bound(good.select(d, size=n), good.select(dp, size=n),
                                    outcome_events(2)) <= EPS


# ------------------------------------------------------------------- private median

def test_private_median_within_epsilon_and_doubled_epsilon_caught():
    n = 400_000
    d = np.array([0.25, 0.25, 0.75, 0.75])
    dp = np.append(d, 0.1)
    events = bin_events(np.linspace(0, 1, 21))
    med = PrivateMedian(epsilon=EPS, lower=0.0, upper=1.0, n_candidates=20, rng=61)
    lb = privacy_loss_lower_bound(med.release(d, size=n), med.release(dp, size=n), events)
    assert lb <= EPS
    assert lb > 0.7 * EPS

    # a utility whose sensitivity is claimed as 1/4 instead of 1/2 = twice the epsilon
    bad = PrivateMedian(epsilon=2 * EPS, lower=0.0, upper=1.0, n_candidates=20, rng=62)
    assert privacy_loss_lower_bound(bad.release(d, size=n), bad.release(dp, size=n),
                                    events) > EPS


# ------------------------------------------------------------- grid-less exponential mech.

def _gridless_samples(eps, data, n, seed):
    mech = GridlessExponentialMechanism(epsilon=eps, sensitivity=0.5, bounds=[(0.0, 1.0)],
                                        categories=[[0.0, 1.0]], numeric_weight=1.0, rng=seed)
    c = np.asarray(data["cat"])
    v = np.sort(data["num"])

    def utility(feature, candidates):
        if feature == 0:  # rank utility of a median split, subset-closed on buckets
            return -np.abs(np.searchsorted(v, candidates, side="right") - v.size / 2)
        return -np.abs(np.array([np.sum(c == x) for x in candidates]) - c.size / 2)

    out = np.empty(n)
    for i in range(n):
        ch = mech.select([data["num"]], utility)
        out[i] = ch.value if not ch.categorical else 2.0 + ch.value  # categorical -> {2, 3}
    return out


def test_gridless_exponential_mechanism_within_epsilon_and_doubled_caught():
    n = 60_000
    d = {"num": np.array([0.3, 0.3, 0.7, 0.7]), "cat": np.array([0.0, 1.0, 1.0, 1.0])}
    dp = {"num": np.append(d["num"], 0.05), "cat": np.append(d["cat"], 0.0)}
    events = bin_events(list(np.linspace(0, 1, 11)) + [1.5, 2.5, 3.5])
    lb = privacy_loss_lower_bound(_gridless_samples(EPS, d, n, 71),
                                  _gridless_samples(EPS, dp, n, 72), events)
    assert lb <= EPS
    assert lb > 0.5 * EPS
    lb_bad = privacy_loss_lower_bound(_gridless_samples(3 * EPS, d, n, 73),
                                      _gridless_samples(3 * EPS, dp, n, 74), events)
    assert lb_bad > EPS
