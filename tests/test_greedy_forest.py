"""DPGDF greedy decision forest (Xin et al., 2019, sound leaf mechanism, complete trees) on windows
(river's checks: tests/test_estimators.py): the Gini utility's sensitivity and monotonicity, the
split and leaf mechanisms (statistically and as the only way training releases anything),
complete trees, bad input, accuracy floors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stattest import outcome_events, privacy_loss_lower_bound

from dpstream.accounting import ExponentialMechanism, ReportNoisyMax
from dpstream.models import GreedyForestClassifier
from dpstream.models.windows.greedy_forest import GINI_SENSITIVITY, gini_utilities
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.bench import run_bench


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.lists(st.integers(0, 60), min_size=2, max_size=4), min_size=1,
                       max_size=6).filter(lambda c: len({len(r) for r in c}) == 1),
       data=st.data())
def test_adding_a_record_lowers_every_gini_utility_by_less_than_two(counts, data):
    """The derivation in the module docstring: Delta u in [0, 2), same direction for every
    attribute (monotonic), whatever the counts and the added record."""
    c = np.array(counts, dtype=float)                    # (branches, classes) of one attribute
    v = data.draw(st.integers(0, c.shape[0] - 1))
    k = data.draw(st.integers(0, c.shape[1] - 1))
    more = c.copy()
    more[v, k] += 1
    drop = gini_utilities(c) - gini_utilities(more)
    assert -1e-9 <= drop < GINI_SENSITIVITY


def test_the_sensitivity_two_is_attained_in_the_limit():
    pure = np.array([[1000.0, 0.0]])
    mixed = np.array([[1000.0, 1.0]])
    assert gini_utilities(pure) - gini_utilities(mixed) > 1.99   # a bound of 1 would be wrong


def test_split_choice_is_epsilon_dp_and_a_halved_sensitivity_is_caught():
    """Neighbouring node data: attribute a holds a pure branch the new record spoils (its
    utility drops by ~2), attribute b does not move: the mechanism's real worst case."""
    d = np.array([[[50.0, 0.0], [0.0, 50.0]], [[50.0, 0.0], [0.0, 50.0]]])   # (attr, v, c)
    dp = d.copy()
    dp[0, 0, 1] += 1            # a: branch p gets a 'v' record
    dp[1, 1, 1] += 1            # b: branch s gets it, stays pure
    eps, n = 1.0, 200_000
    u, up = gini_utilities(d), gini_utilities(dp)
    rng = np.random.default_rng(0)

    def draws(util, sensitivity):
        em = ExponentialMechanism(epsilon=eps, sensitivity=sensitivity, monotonic=True, rng=rng)
        return em.select_rows(np.tile(util, (n, 1)))

    lb = privacy_loss_lower_bound(draws(u, GINI_SENSITIVITY), draws(up, GINI_SENSITIVITY),
                                  outcome_events(2))
    assert 0.4 < lb <= eps
    bad = privacy_loss_lower_bound(draws(u, 1.0), draws(up, 1.0), outcome_events(2))
    assert bad > eps


def test_training_releases_only_through_the_two_mechanisms(monkeypatch):
    splits, leaves = [], []
    em_rows, rnm_rows = ExponentialMechanism.select_rows, ReportNoisyMax.select_rows

    def em_spy(self, U, allowed=None):
        splits.append((np.array(U), np.array(allowed), self.epsilon, self.sensitivity,
                       self.monotonic))
        return em_rows(self, U, allowed)

    def rnm_spy(self, counts):
        leaves.append((np.array(counts), self.epsilon, self.sensitivity))
        return rnm_rows(self, counts)

    monkeypatch.setattr(ExponentialMechanism, "select_rows", em_spy)
    monkeypatch.setattr(ReportNoisyMax, "select_rows", rnm_spy)
    X, y, _ = load_adult("train")
    model = GreedyForestClassifier(schema=ADULT_SCHEMA, epsilon=0.6, window_size=900,
                                   n_trees=3, max_depth=4, min_tree_records=None, seed=2)
    labels = [v if i % 3 else None for i, v in enumerate(y[:900])]
    model.learn_many(X[:900], labels)
    assert len(splits) == 3 and len(leaves) == 1          # 3 levels of splits, then leaves
    buckets = model._windows[0].extra["buckets"]      # per level, then the leaves
    assert buckets == model.level_buckets(200) and len(buckets) == 4
    for (U, allowed, eps, sens, mono), nb in zip(splits, buckets, strict=False):
        assert eps == pytest.approx(0.1) and sens == 2.0 and mono
        # every bucket of every tree chooses among all 14 attributes (which ones a path used
        # depends on which nodes share the bucket: data); a used one leaves its nodes whole
        assert allowed.item() is None and U.shape == (3 * nb, 14)
    counts, eps, sens = leaves[0]
    assert eps == 0.3 and sens == 1.0
    assert counts.sum() == 600              # each labeled record in exactly one leaf
    # the roots of the three trees hold every record of their level: one bucket each
    assert (splits[0][0] != 0).any(axis=1).sum() <= 3 and counts.shape[0] == 3 * buckets[-1]
    rep = model.privacy_report()
    assert rep["epsilon"] == 0.6 and rep["ledger_partitions"] == 3
    assert rep["epsilon_per_split_level"] == pytest.approx(0.1) and rep["epsilon_leaf"] == 0.3
    assert 3 * rep["epsilon_per_split_level"] + rep["epsilon_leaf"] <= 0.6   # never over


def test_numeric_attributes_use_public_bins_and_missing_goes_last():
    model = GreedyForestClassifier(schema=ADULT_SCHEMA, n_bins=4, seed=0)
    X, _, _ = load_adult("train")
    rows = [dict(X[0], age=17), dict(X[0], age=90), dict(X[0], age=53.5),
            {k: v for k, v in X[0].items() if k != "workclass"}]
    C = model.codes(model._encoder.encode_many(rows))
    age = list(model._encoder._numeric).index("age")         # schema order
    assert C[:3, age].tolist() == [0, 3, 2]    # 17..90 in 4 equal bins; 53.5 starts the third
    workclass = len(model._numeric) + list(model._encoder._categorical).index("workclass")
    assert C[3, workclass] == model._fan[workclass] - 1


def test_complete_trees_empty_nodes_vote_uniformly():
    """Records far from all training data reach nodes nobody reached: coin-flip votes."""
    X, y, _ = load_adult("train")
    model = GreedyForestClassifier(schema=ADULT_SCHEMA, window_size=400, n_trees=100,
                                   max_depth=6, min_tree_records=None, seed=4)
    young = [(x, t) for x, t in zip(X, y, strict=True) if x["age"] < 25][:400]
    model.learn_many([x for x, _ in young], [t for _, t in young])
    far = dict(X[0], age=89, **{"native-country": "Holand-Netherlands",
                                "workclass": "Never-worked", "education": "Doctorate"})
    share = model.predict_proba_one(far)[True]
    assert 0.3 < share < 0.7
    _, nodes, leaves = model._kept()
    # memory follows the public bucket space (a few buckets per record), not the tree size
    buckets = model._windows[0].extra["buckets"]
    assert len(leaves) == 100 * buckets[-1] and len(nodes) == 100 * sum(buckets[:-1])


@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": 0}, "epsilon"), ({"n_trees": 0}, "n_trees"), ({"max_depth": 0}, "max_depth"),
    ({"n_bins": 1}, "n_bins"), ({"window_size": 5, "n_trees": 10}, "window_size")])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GreedyForestClassifier(schema=ADULT_SCHEMA, **kwargs)


def test_adult_accuracy_floors():
    """Issue target: beat the random decision forest on Adult (10-fold CV: measured 0.82 at
    epsilon 1 and 0.79 at 0.1, against the forest's 0.816 and 0.762)."""
    hi = run_bench("greedy-forest", "adult", 1.0, repeats=1, folds=10, seed=0)
    lo = run_bench("greedy-forest", "adult", 0.1, repeats=1, folds=10, seed=0)
    assert hi["mean"] >= 0.81 and lo["mean"] >= 0.77, (hi, lo)
