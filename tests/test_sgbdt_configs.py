"""Per-epsilon S-GBDT settings of the batch benchmarks (stream/bench/configs.py) and the
authors' leaf rule (``leaf_lambda="add"``)."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.models import SGBDTRegressor
from dpstream.stream.bench.configs import SGBDT_CONFIGS, sgbdt_config
from dpstream.stream.bench.protocols import run_bench
from dpstream.stream.datasets import ABALONE_SCHEMA


def test_the_first_bound_that_covers_epsilon_wins_and_defaults_run_above():
    assert sgbdt_config("abalone", 0.05)[0].startswith("abalone eps<=0.05")
    assert sgbdt_config("abalone", 0.07)[0].startswith("abalone eps<=0.1")
    assert sgbdt_config("abalone", 0.5) == ("defaults", {})
    assert sgbdt_config("adult", 2.0)[0].startswith("adult eps<=10")
    assert sgbdt_config("adult", 20.0) == ("defaults", {})
    for rows in SGBDT_CONFIGS.values():   # bounds ascend, every row a valid estimator
        assert [b for b, _, _ in rows] == sorted(b for b, _, _ in rows)
        for bound, _, params in rows:
            if params.get("learning_rate") != 1.0:   # the Adult rows are the classifier's
                SGBDTRegressor(ABALONE_SCHEMA, epsilon=bound, **params)


def test_bench_reports_the_configuration_and_user_values_override_it():
    res = run_bench("sgbdt", "abalone", 0.1, repeats=1)
    assert res["config"].startswith("abalone eps<=0.1")
    res = run_bench("sgbdt", "abalone", 0.1, repeats=1, params={"depth": 3})
    assert res["config"].endswith("+ --set") and res["params"] == {"depth": 3}
    assert "config" not in run_bench("median-forest", "iris", 1.0, repeats=1)


def test_late_arrivals_at_epsilon_0_3_keep_an_honest_floor():
    """The authors' late-arrival row measured 0.328 over 5 x 5-fold CV (our defaults: 0.055);
    two repeats must stay well above the defaults' figure."""
    res = run_bench("sgbdt", "abalone-late", 0.3, repeats=2)
    assert res["mean"] > 0.25, res["mean"]


def test_add_leaves_are_zero_where_the_noisy_count_is_negative():
    model = SGBDTRegressor(ABALONE_SCHEMA, epsilon=1.0, leaf_lambda="add", l2=10.0,
                           grad_clip=1.0, learning_rate=0.5, seed=0)
    n = np.array([-3.0, 0.0, 10.0, 90.0])
    s = np.array([5.0, 5.0, 5.0, -50.0])
    value = model.engine.leaf_values(n, s)
    np.testing.assert_allclose(value, [0.0, -0.5 * 0.5, -0.5 * 0.25, 0.5 * 0.5])
    plain = SGBDTRegressor(ABALONE_SCHEMA, epsilon=1.0, l2=10.0, grad_clip=1.0,
                           learning_rate=0.5, seed=0)
    np.testing.assert_allclose(plain.engine.leaf_values(n, s),
                               [-0.25, -0.25, -0.25, 0.5 * 50 / 90])
    with pytest.raises(ValueError, match="leaf_lambda"):
        SGBDTRegressor(ABALONE_SCHEMA, leaf_lambda="min")


def test_adult_late_arrivals_at_epsilon_0_1_beat_the_defaults():
    """The authors' late row 0.1 as count leaves measured 17.4% error (3 x 5-fold CV; the
    defaults: 21.0%, the authors' released 17.97%): one repeat must stay below 19.5%."""
    assert sgbdt_config("adult-late", 0.1)[0].startswith("adult-late eps<=0.1")
    res = run_bench("sgbdt", "adult-late", 0.1, repeats=1)
    assert res["mean"] < 0.195, res["mean"]


def test_a_new_phase_forgets_spent_records_and_recalibrates_for_its_rounds():
    """The authors' no-filter late arm: the late batch alone trains a phase of fewer rounds
    at a sigma calibrated for them; no record that spent budget in the first phase takes
    part in a round of the second (parallel composition)."""
    from dpstream.stream import load_abalone
    X, y, schema = load_abalone()
    early = [i for i in range(2000) if y[i] <= 9]
    late = [i for i in range(2000) if y[i] > 9]
    for individual_filter in (False, True):   # with the filter, early records have budget
        model = SGBDTRegressor(schema, epsilon=0.5, n_trees=40, seed=0,
                               individual_filter=individual_filter)
        model.learn_many([X[i] for i in early], [y[i] for i in early])
        e = model.engine
        sigma = e.calibration.sigma_leaf
        assert e.phases == 1 and (len(e) > 0) == individual_filter
        assert len(e) == 0 or e.filter.spent.min() > 0   # every pool record has paid
        model.learn_many([X[i] for i in late], [y[i] for i in late], rounds=10,
                         new_phase=True)
        assert e.phases == 2
        if individual_filter:   # every early record left; the late ones have budget left
            assert 0 < len(e) <= len(late) and e.ids.min() >= len(early)
        else:   # worst-case charges: all spent after their phase, but for epsilon_init
            # when no initial-score release took the late records (one does while the
            # released, noisy, count is below INIT_TARGET: the noise decides)
            left = e.filter.bound - e.filter.spent
            assert len(e) == 0 or np.allclose(left, e.config.epsilon_init), left
            assert e.records_exhausted + len(e) == len(early) + len(late)
        assert e.calibration.sigma_leaf < sigma           # 10 rounds: less noise each
        assert e.last_round["sampled"].min() >= len(early)   # late records only
        assert (e.filter.spent <= e.filter.bound + 1e-12).all()
        assert float(model.privacy_report()["epsilon"]) <= 0.5 + 1e-9
        assert len(e.forest) == 50
    with pytest.raises(ValueError, match="at least one round"):
        e.new_phase(0)


def test_the_no_filter_late_arm_trains_its_own_phase():
    """Measured 0.259 over 10 x 5-fold CV at epsilon 0.5 (before the phase: 0.048); one repeat
    must clear 0.15, and stay below the filter arm's 0.348."""
    name, params = sgbdt_config("abalone-late", 0.5, {"individual_filter": False})
    assert "no-filter" in name and params["n_trees"] == 100
    res = run_bench("sgbdt", "abalone-late", 0.5, repeats=1,
                    params={"individual_filter": False})
    assert 0.15 < res["mean"] < 0.348, res["mean"]


def test_a_new_phase_keeps_the_checkpoints_accounting_of_the_initial_score():
    """A checkpoint from before the initial score was charged in the filter paid it apart:
    its new phase's bound is rho_max alone, not rho_max + epsilon_init (that would let a
    record spend the initial score twice)."""
    from dpstream.stream import load_abalone
    X, y, schema = load_abalone()
    model = SGBDTRegressor(schema, epsilon=0.5, n_trees=20, seed=0)
    model.learn_many(X[:500], y[:500])
    e = model.engine
    assert e.filter.bound == pytest.approx(e.calibration.rho_max + e.config.epsilon_init)
    e.init_in_filter = False              # as a pre-filter checkpoint reads
    e.new_phase(10)
    assert e.filter.bound == pytest.approx(e.calibration.rho_max)
    e.init_in_filter = True
    e.new_phase(10)
    assert e.filter.bound == pytest.approx(e.calibration.rho_max + e.config.epsilon_init)
