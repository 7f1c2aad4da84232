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


# ------------------------------------------------ S-GBDT rounds: the engines on D and D'

def _engines_at_unit_z(cls, params: dict, D: list, yD: list, star: dict, y_star) -> list:
    """The engines of ``cls(**params)`` holding D and D' = D + ``star`` (no round run), their
    leaf sigma set so that a round's noise multiplier at |g| = g* is exactly 1."""
    import dataclasses
    engines = []
    for X, y in ((D, yD), (D + [star], yD + [y_star])):
        m = cls(**params)
        m.learn_many(X, y, rounds=0)
        e = m.engine
        c = e.config
        sigma = math.sqrt(2 * (c.r1 + (1 - c.r1) * c.grad_clip ** 2))   # z(g*) = 1 exactly
        e.calibration = dataclasses.replace(e.calibration, sigma_leaf=sigma)
        engines.append(e)
    return engines


# ------------------------------------------------ S-GBDT round with split selection

def _split_round_llr(n: int, *, broken: bool, monkeypatch) -> tuple[np.ndarray, np.ndarray, float]:
    """The S-GBDT round that chooses its root from noisy gradient histograms, run end to end
    (engine.draw_tree + engine.noisy_leaf_stats) on D and on D' = D + one record whose
    clipped gradient is g*. Returns the log-likelihood ratio of each output (released root
    histogram, noisy leaf counts and sums) under the *claimed* noise, on D' and on D, and the
    claimed noise multiplier z(g*) of the round. Subsampling is off (rate 1), so the round
    must be exactly a Gaussian mechanism with that z."""

    from dpstream.models import SGBDTRegressor
    from dpstream.models.boosting import hist_splits
    from dpstream.models.boosting.hist_splits import _Cells, histogram_sigma

    schema = {"features": {f"x{i}": {"type": "numeric", "min": 0, "max": 1} for i in range(4)},
              "target": {"type": "numeric", "min": -1, "max": 1}}
    rng = np.random.default_rng(5)
    D = [{f"x{i}": float(v) for i, v in enumerate(row)} for row in rng.uniform(0, 1, (6, 4))]
    yD = [float(v) for v in rng.uniform(-0.3, 0.3, 6)]
    star, y_star = {f"x{i}": 0.9 for i in range(4)}, 1.0   # residual -1 = -g*
    # g* = 1 and a large split share: the histograms carry most of the round's sensitivity
    params = dict(schema=schema, depth=1, subsample=1.0, n_trees=1, split_levels=1,
                  grad_clip=1.0, split_share=0.9, split_bins=4, split_decay=0.0,
                  min_leaf_records=0.0, drift=False, init_share=0.0, seed=0)
    if broken:   # the per-feature factor forgotten: sqrt(L F) = 2 times too little noise
        real = hist_splits.histogram_sigma
        monkeypatch.setattr("dpstream.models.boosting.sgbdt_engine.histogram_sigma",
                            lambda s, *, levels, n_features, split_share:
                            real(s, levels=levels, n_features=1, split_share=split_share))
    e_d, e_dp = _engines_at_unit_z(SGBDTRegressor, params, D, yD, star, y_star)
    c = e_d.config
    sigma = e_d.calibration.sigma_leaf
    s_h = histogram_sigma(sigma, levels=1, n_features=4, split_share=c.r_split)
    s_n = sigma / math.sqrt(2 * c.r1)
    s_s = sigma / math.sqrt(2 * (1 - c.r1 - c.r_split))
    cells = _Cells(e_d.encoder, c.split_bins)
    X_d = e_d.X.copy()
    g_d = np.clip(e_d.gradients(), -c.grad_clip, c.grad_clip)
    lo = np.array([[lo for _, lo, _ in cells.numeric]] * len(X_d))
    hi = np.array([[hi for _, _, hi in cells.numeric]] * len(X_d))
    cell_d = cells.numeric_cells(X_d, lo, hi) + cells.offset[None, :]
    mu_hist = np.bincount(cell_d.ravel(), weights=np.repeat(g_d, 4), minlength=cells.size)
    x_star = e_dp.X[-1:]
    g_star = float(np.clip(e_dp.gradients()[-1], -c.grad_clip, c.grad_clip))
    assert abs(g_star) == c.grad_clip
    v_hist = np.zeros(cells.size)
    v_hist[(cells.numeric_cells(x_star, lo[:1], hi[:1]) + cells.offset[None, :]).ravel()] = g_star
    mu2 = float(np.sum(v_hist ** 2) / s_h ** 2 + 1 / s_n ** 2 + g_star ** 2 / s_s ** 2)

    def llr(e) -> np.ndarray:
        prep = {"g": np.clip(e.gradients(), -c.grad_clip, c.grad_clip),
                "sampled": np.ones(len(e), dtype=bool)}
        out = np.empty(n)
        for k in range(n):
            e.split_memory = {}
            tree = e.draw_tree(prep)
            noisy_n, noisy_s = e.noisy_leaf_stats(tree, prep)
            hist = e.split_memory["root"]
            go_left = X_d[:, tree.feature[0]] <= tree.threshold[0]
            mu_n = np.array([go_left.sum(), (~go_left).sum()], dtype=float)
            mu_s = np.array([g_d[go_left].sum(), g_d[~go_left].sum()])
            leaf = 0 if x_star[0, tree.feature[0]] <= tree.threshold[0] else 1
            out[k] = (float(v_hist @ (hist - mu_hist)) / s_h ** 2
                      + (noisy_n[leaf] - mu_n[leaf]) / s_n ** 2
                      + g_star * (noisy_s[leaf] - mu_s[leaf]) / s_s ** 2 - mu2 / 2)
        return out

    return llr(e_dp), llr(e_d), 1.0 / math.sqrt(mu2)


@pytest.mark.parametrize("broken", [False, True])
def test_sgbdt_split_selection_round_is_the_claimed_gaussian(broken, monkeypatch):
    """The round's whole output (root histogram, chosen split, leaves) is the Gaussian
    mechanism with the paper's per-record z(g*) — the split histograms take their share of
    the leaf-sum budget; the negative control (noise missing the sqrt(L F) factor) fails."""
    _assert_unit_gaussian_round(*_split_round_llr(20_000, broken=broken,
                                                  monkeypatch=monkeypatch), broken=broken)


def _assert_unit_gaussian_round(a: np.ndarray, b: np.ndarray, z: float, *, broken: bool):
    """The log-likelihood ratios ``a`` (on D') and ``b`` (on D) of a round claimed to be the
    Gaussian mechanism with noise multiplier ``z`` = 1: within epsilon at its delta, and
    near-tight (the test has power); a broken round passes epsilon."""
    assert z == pytest.approx(1.0, rel=1e-9)   # the claimed round noise multiplier
    delta = gaussian_delta(noise_multiplier=z, epsilon=EPS)
    events = halfline_events(np.linspace(-2.0, 2.0, 9))
    lb = privacy_loss_lower_bound(a, b, events, delta=delta)
    if broken:
        assert lb > EPS
    else:
        assert 0.5 * EPS < lb <= EPS   # the optimal statistic is near-tight


# ------------------------------------------------- multi-class S-GBDT round (K-vector leaves)

def _multiclass_round_llr(n: int, *, broken: bool, monkeypatch):
    """One multi-class S-GBDT round (the engine's clipping, draw_tree, noisy_leaf_stats)
    on D and on D' = D + one record whose 5-class gradient is clipped to L2 norm g*.
    Returns the log-likelihood ratio of each released output (the noisy leaf counts and
    K-vector sums) under the *claimed* Gaussian, on D' and on D, and the claimed noise
    multiplier z(g*). The negative control clips each component to g* instead of the
    vector's norm: the record then moves the sums by about 1.9 g*."""

    from dpstream.models import SGBDTClassifier
    from dpstream.models.boosting import sgbdt_multi

    classes = list(range(5))
    schema = {"features": {f"x{i}": {"type": "numeric", "min": 0, "max": 1} for i in range(3)},
              "target": {"type": "categorical", "values": classes}}
    rng = np.random.default_rng(7)
    D = [{f"x{i}": float(v) for i, v in enumerate(row)} for row in rng.uniform(0, 1, (8, 3))]
    yD = [int(v) for v in rng.integers(0, 5, 8)]
    star, y_star = {f"x{i}": 0.9 for i in range(3)}, 4
    params = dict(schema=schema, depth=1, subsample=1.0, n_trees=1, split_levels=0,
                  grad_clip=0.25, min_leaf_records=0.0, drift=False, init_share=0.0,
                  grid_share=0.0, seed=0)
    if broken:
        monkeypatch.setattr(sgbdt_multi, "clip_rows",
                            lambda v, bound: np.clip(v, -bound, bound, out=v))
    e_d, e_dp = _engines_at_unit_z(SGBDTClassifier, params, D, yD, star, y_star)
    c = e_d.config
    sigma = e_d.calibration.sigma_leaf
    s_n, s_s = sigma / math.sqrt(2 * c.r1), sigma / math.sqrt(2 * (1 - c.r1))
    g_d = sgbdt_multi.clip_rows(e_d.gradients(), c.grad_clip)
    g_star = e_dp.gradients()[-1]
    g_star = g_star * min(1.0, c.grad_clip / np.linalg.norm(g_star))   # the claimed clip
    assert np.linalg.norm(g_star) == pytest.approx(c.grad_clip)
    x_star = e_dp.X[-1]
    mu2 = 1 / s_n ** 2 + float(g_star @ g_star) / s_s ** 2

    def llr(e) -> np.ndarray:
        # the round's clipped gradients, every record sampled (no filter: one draw each time)
        prep = {"g": sgbdt_multi.clip_rows(e.gradients(), c.grad_clip),
                "sampled": np.ones(len(e), dtype=bool)}
        out = np.empty(n)
        for k in range(n):
            tree = e.draw_tree(prep)
            noisy_n, noisy_s = e.noisy_leaf_stats(tree, prep)
            f, t = tree.feature[0], tree.threshold[0]
            left = e_d.X[:, f] <= t
            mu_n = np.array([left.sum(), (~left).sum()], dtype=float)
            mu_s = np.stack([g_d[left].sum(axis=0), g_d[~left].sum(axis=0)])
            leaf = 0 if x_star[f] <= t else 1
            out[k] = ((noisy_n[leaf] - mu_n[leaf]) / s_n ** 2
                      + float(g_star @ (noisy_s[leaf] - mu_s[leaf])) / s_s ** 2 - mu2 / 2)
        return out

    return llr(e_dp), llr(e_d), 1.0 / math.sqrt(mu2)


@pytest.mark.parametrize("broken", [False, True])
def test_multiclass_sgbdt_round_is_the_claimed_gaussian(broken, monkeypatch):
    """A K-class round's released leaves are the Gaussian mechanism with the binary
    per-record z at the gradient's L2 norm; clipping each component instead is caught."""
    _assert_unit_gaussian_round(*_multiclass_round_llr(20_000, broken=broken,
                                                       monkeypatch=monkeypatch), broken=broken)


# ----------------------------------------------------------------- attribute relevance

def _relevance_sums(n_records: int, runs: int, seed: int, owned=None) -> np.ndarray:
    """Identical records (every attribute's cell 0, class 0) through
    AttributeRelevance.release: the sum of cell (0, class 0) over the two attributes' noisy
    histograms. Each record lands in exactly one attribute's histogram, so the sum counts the
    records once: one more record moves it by 1."""
    from dpstream.models.windows.relevance import AttributeRelevance
    rng = np.random.default_rng(seed)
    X, y = np.zeros((n_records, 2)), np.zeros(n_records, dtype=np.int64)
    out = np.empty(runs)
    for i in range(runs):
        rel = AttributeRelevance([(0, 0.0, 1.0), (1, 0.0, 1.0)], [], n_classes=2, n_bins=2)
        rel.set_owned(owned)
        rel.release(X, y, epsilon=EPS, rng=rng)
        out[i] = rel.counts[0][0, 0] + rel.counts[1][0, 0]
    return out


@pytest.mark.parametrize("broken,owned", [(False, None), (False, [1]), (True, None)])
def test_attribute_relevance_release_is_epsilon_dp(broken, owned, monkeypatch):
    """The relevance release deals each record to one attribute's histogram (sensitivity 1);
    a group member that owns attribute 1 only puts every record in its histogram. The
    negative control puts every record in every attribute's histogram with the same noise:
    the sum then moves by 2 and the loss reaches about 2 epsilon."""
    if broken:
        from dpstream.models.windows import relevance
        monkeypatch.setattr(relevance, "_deal", lambda n, k, rng: [np.arange(n)] * k)
    runs = 60_000
    a, b = (_relevance_sums(n, runs, seed=s, owned=owned) for n, s in ((20, 1), (21, 2)))
    base = 40.0 if broken else 20.0
    events = halfline_events([base + d for d in (-1.0, 0.0, 0.5, 1.0, 2.0, 3.0)])
    lb = privacy_loss_lower_bound(a, b, events)
    if broken:
        assert lb > EPS
    else:
        assert 0.5 * EPS < lb <= EPS
