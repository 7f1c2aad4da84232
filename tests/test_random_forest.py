"""Fletcher–Islam DP random decision forest (Fletcher & Islam 2017, + addendum) on windows (river's
checks: tests/test_estimators.py): Theorem-2 depth, data-independent implicit trees, accounting,
leaf mechanism, bad input, accuracy floors."""

from __future__ import annotations

import numpy as np
import pytest
from stattest import outcome_events, privacy_loss_lower_bound

from dpstream.models import RandomDecisionForestClassifier
from dpstream.models.windows import random_forest as rf_module
from dpstream.models.windows.random_forest import release_leaf_labels, theorem2_depth
from dpstream.models.windows.random_trees import ImplicitRandomTrees, private_ranges
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.bench import run_bench
from dpstream.stream.bench.scenarios import load_synth


def PaperForest(**kwargs) -> RandomDecisionForestClassifier:   # noqa: N802
    """The forest with the paper's uniform split attributes (mechanism-level tests)."""
    # the paper's 5% range and no feature grid (a stream feature, docs/drift.md); the
    # mechanism tests count windows of 1,000 records first (the warm-up before issue 64)
    kwargs = {"range_share": 0.05, "grid_share": 0.0, "warmup": 1000, **kwargs}
    return RandomDecisionForestClassifier(attributes="uniform", **kwargs)


# Fletcher & Islam (2017) Table 4: (continuous, discrete) -> depth, for every dataset of the paper
TABLE_4 = [(5, 0, 5), (10, 0, 8), (15, 0, 12), (15, 0, 12), (15, 0, 12), (10, 0, 8),
           (20, 0, 15), (4, 0, 4), (16, 0, 12), (10, 0, 8), (6, 8, 9), (0, 22, 11),
           (0, 16, 8), (0, 8, 4)]


@pytest.mark.parametrize("s, r, depth", TABLE_4)
def test_theorem2_depth_reproduces_table_4(s, r, depth):
    assert theorem2_depth(s, r) == depth


def test_depth_of_adult_and_override():
    model = RandomDecisionForestClassifier(schema=ADULT_SCHEMA)
    assert model.depth == 9 and model.n_trees == 100
    assert RandomDecisionForestClassifier(schema=ADULT_SCHEMA, max_depth=4).depth == 4


def test_tree_structure_reads_no_data():
    """Same secret and tree ids: identical leaves for any record, whatever was trained."""
    X, y, _ = load_adult("train")
    a = RandomDecisionForestClassifier(schema=ADULT_SCHEMA, window_size=1000, seed=5)
    b = RandomDecisionForestClassifier(schema=ADULT_SCHEMA, window_size=1000, seed=5)
    a.learn_many(X[:1000], y[:1000])
    b.learn_many(X[5000:6000], [not v for v in y[5000:6000]])
    V = a._trees.matrix(a._encoder.encode_many(X[20000:20200]))
    ids = np.arange(100)
    assert (a._trees.leaf_keys(V, ids) == b._trees.leaf_keys(V, ids)).all()
    # and a numeric split point always lies inside the public domain narrowed by the path
    keys = a._trees.leaf_keys(V, ids)
    assert len(np.unique(keys)) > 100       # records are spread over many leaves


def test_leaves_are_disjoint_records_and_every_record_is_routed_once(monkeypatch):
    calls = []
    original = ImplicitRandomTrees.leaf_keys

    def spy(self, V, trees, *, rows=None, **kw):
        if rows is not None:                 # training routes (tree, row) pairs
            calls.append((np.asarray(trees).copy(), np.asarray(rows).copy(), V.shape[0]))
        return original(self, V, trees, rows=rows, **kw)

    monkeypatch.setattr(ImplicitRandomTrees, "leaf_keys", spy)
    X, y, _ = load_adult("train")
    model = PaperForest(schema=ADULT_SCHEMA, window_size=700, n_trees=7,
                                           seed=2)
    labels = [v if i % 3 else None for i, v in enumerate(y[:2100])]
    for xi, yi in zip(X[:2100], labels, strict=True):
        model.learn_one(xi, yi)
    assert len(calls) == 3
    for w, (trees, rows, n) in enumerate(calls):
        assert n == (np.array(labels[w * 700:(w + 1) * 700], dtype=object) != None).sum()  # noqa: E711
        assert sorted(rows.tolist()) == list(range(n))     # each labeled record exactly once
        assert set(trees.tolist()) == set(range(7 * w, 7 * w + 7))   # this window's trees
        sizes = np.bincount(trees - 7 * w)
        assert sizes.max() - sizes.min() <= 1               # dealt evenly at random
    rep = model.privacy_report()
    assert rep["epsilon"] == 1.0 and rep["ledger_partitions"] == 21
    assert rep["unlabeled_seen"] == 700 and rep["trees"] == 14     # max_windows=2


def test_retired_windows_take_their_leaves_along():
    X, y, _ = load_adult("train")
    model = PaperForest(schema=ADULT_SCHEMA, window_size=300, n_trees=5,
                                           max_windows=2, seed=8)
    for xi, yi in zip(X[:1000], y[:1000], strict=True):
        model.learn_one(xi, yi)
    assert model.privacy_report()["trees"] == 10
    # the stored table is every bucket of the two kept windows' trees only: a public size
    assert len(model._kept()[1]) == sum(len(w.trees) * w.extra["buckets"]
                                        for w in model._windows)
    assert "leaves_reached" not in str(model.privacy_report())   # non-DP: not in the report


def test_leaf_release_is_epsilon_dp_and_double_epsilon_is_caught():
    """The release the model makes per leaf, on many leaves at once (neighbouring counts)."""
    n, eps = 200_000, 0.8
    d = np.tile([5.0, 3.0, 0.0], (n, 1))
    dp = np.tile([5.0, 4.0, 0.0], (n, 1))      # one more record of class 1
    rng = np.random.default_rng(3)
    events = outcome_events(3)
    lb = privacy_loss_lower_bound(release_leaf_labels(d, eps, rng),
                                  release_leaf_labels(dp, eps, rng), events)
    assert 0.5 * eps < lb <= eps
    bad = privacy_loss_lower_bound(release_leaf_labels(d, 2 * eps, rng),
                                   release_leaf_labels(dp, 2 * eps, rng), events)
    assert bad > eps


def test_training_releases_leaves_only_through_the_mechanism(monkeypatch):
    seen = []

    def spy(counts, epsilon, rng):
        seen.append((counts.copy(), epsilon))
        return release_leaf_labels(counts, epsilon, rng)

    monkeypatch.setattr(rf_module, "release_leaf_labels", spy)
    X, y, _ = load_adult("train")
    model = PaperForest(schema=ADULT_SCHEMA, epsilon=0.3, window_size=500,
                                           n_trees=5, seed=1)
    model.learn_many(X[:500], y[:500])
    (counts, eps), = seen
    # 83 records per numeric attribute: too few for a private range, all 0.3 to the leaves
    assert eps == 0.3 and counts.sum() == 500        # every labeled record in one leaf count
    # one released label per bucket of every tree, occupied or not: a public number
    w = model._windows[0]
    assert counts.shape[0] == len(w.trees) * w.extra["buckets"] == len(w.extra["table"])
    assert model.diagnostics()[0]["buckets_reached"] == (counts.sum(axis=1) > 0).sum()


def test_empty_leaves_vote_uniformly_at_random():
    """A point far from every training record falls in empty leaves: coin-flip votes."""
    X, y, _ = load_adult("train")
    model = PaperForest(schema=ADULT_SCHEMA, window_size=400, n_trees=100,
                        min_tree_records=None, seed=4, max_windows=None)   # 100 trees of 4
    young = [(x, t) for x, t in zip(X, y, strict=True) if x["age"] < 25][:400]
    model.learn_many([x for x, _ in young], [t for _, t in young])
    far = dict(X[0], age=89, **{"capital-gain": 99000, "hours-per-week": 98})
    share = model.predict_proba_one(far)[True]
    assert 0.3 < share < 0.7                  # Binomial(100, 1/2) / 100, mostly empty leaves
    few = PaperForest(schema=ADULT_SCHEMA, window_size=400, n_trees=4,
                                         seed=4)
    few.learn_many([x for x, _ in young], [t for _, t in young])
    hits = np.mean([few.predict_one(x) == t for x, t in young[:100]])
    assert hits > 0.9                         # where the data is, the majority label wins


@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": 0}, "epsilon"), ({"n_trees": 0}, "n_trees"), ({"max_depth": -1}, "max_depth"),
    ({"window_size": 5, "n_trees": 10}, "window_size"), ({"max_windows": 0}, "max_windows"),
    ({"window_size": None}, "window_seconds")])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RandomDecisionForestClassifier(schema=ADULT_SCHEMA, **kwargs)


def test_adult_accuracy_floor_at_epsilon_1():
    """Issue target: Adult error <= 20% at epsilon 1 (one 10-fold CV; measured 0.817)."""
    res = run_bench("random-forest", "adult", 1.0, repeats=1, folds=10, seed=0)
    assert res["mean"] >= 0.80, res


def test_synthetic_floor_at_epsilon_1():
    """Fletcher & Islam's SynthA; measured 0.81 over 10 folds (docs/benchmark_notes.md)."""
    res = run_bench("random-forest", "synth-a", 1.0, repeats=1, folds=10, seed=0)
    assert res["mean"] >= 0.77, res


def _largest_leaf_shares(model, X) -> list[float]:
    """Per tree of the first window: the share of ``X`` in its most crowded leaf."""
    w = model._windows[0]
    router = w.extra.get("router", model._trees)
    V = model._trees.matrix(model._encoder.encode_many(X))
    keys = router.leaf_keys(V, [tr.id for tr in w.trees])
    return [np.unique(keys[:, j], return_counts=True)[1].max() / len(X)
            for j in range(keys.shape[1])]


def test_split_points_fall_where_the_data_is_on_synthf():
    """The structural bug: split points drawn over SynthF's public domain (±11.5, 99% of the
    values within ±3.8) left most records in one leaf of most trees, so the forest scored
    ~80% at every epsilon. Inside the window's private range every tree splits the data."""
    X, y, schema = load_synth("f", n=10_000)
    shares = {}
    for share in (0.0, 0.05):
        model = PaperForest(schema=schema, n_trees=10, range_share=share,
                                               drift=False, seed=0)
        model.learn_many(X, y)
        shares[share] = _largest_leaf_shares(model, X)
        w = model._windows[0]
        if share:   # most attributes narrowed (each does in about 88% of draws: all ten
            # together in only a quarter of them)
            lo, hi = np.array(w.extra["numeric_range"]).T
            assert (lo >= -11.5).all() and (hi <= 11.5).all() and ((hi - lo) < 12).sum() >= 7
        else:
            assert "router" not in w.extra and "numeric_range" not in w.extra
    assert np.median(shares[0.0]) > 0.4, shares[0.0]      # one leaf holds most of the data
    assert np.median(shares[0.05]) < 0.25, shares[0.05]   # spread over many leaves


def test_synthf_reaches_the_papers_accuracy_at_epsilon_1():
    """Fletcher & Islam (2017) Fig. 9: over 85% on SynthF at epsilon 1 with 30,000 records
    (79-80% at every epsilon before the private range; 1 x 5-fold: 0.865)."""
    res = run_bench("random-forest", "synth-f", 1.0, repeats=1, folds=5, seed=0)
    assert res["mean"] >= 0.84, res


@pytest.mark.parametrize("epsilon", [1.0, 0.5, 1.5])
def test_range_and_leaves_spend_exactly_the_windows_charge(monkeypatch, epsilon):
    """Every record: one attribute's part of the range, then one leaf of one tree, plus the
    drift signal. The two parts add up to the window's per-tree charge exactly (in the
    ledger's decimals), each mechanism runs at its part, and each (window, tree) partition
    sums to epsilon."""
    from fractions import Fraction
    spent = {}

    def range_spy(values, lo, hi, eps, bins, rng, **kw):
        spent.setdefault("range", []).append((values.shape[0], eps))
        return private_ranges(values, lo, hi, eps, bins, rng, **kw)

    def leaf_spy(counts, eps, rng):
        spent.setdefault("leaves", []).append((counts.sum(), eps))
        return release_leaf_labels(counts, eps, rng)

    monkeypatch.setattr(rf_module, "private_ranges", range_spy)
    monkeypatch.setattr(rf_module, "release_leaf_labels", leaf_spy)
    X, y, _ = load_adult("train")
    model = PaperForest(schema=ADULT_SCHEMA, epsilon=epsilon, n_trees=10,
                                           window_size=3000, max_windows=None, range_share=0.5,
                                           range_bins=2, seed=6)
    labels = [v if i % 4 else None for i, v in enumerate(y[:7000])]
    for xi, yi in zip(X[:7000], labels, strict=True):        # warm-up windows 1k, 2k, 3k
        model.learn_one(xi, yi)
    assert model.windows_closed == 3
    exact = lambda v: Fraction(repr(v))                       # noqa: E731
    for w, (n_range, eps_range), (n_leaf, eps_leaf) in zip(
            model._windows, spent["range"], spent["leaves"], strict=True):
        # labeled records (3 in 4 of the window's messages), once each
        assert n_range == n_leaf == w.records * 3 // 4
        assert w.extra["epsilon_range"] == eps_range and w.extra["epsilon_leaves"] == eps_leaf
        trees_eps = model._epsilon_rest() if w is not model._windows[0] else None
        total = exact(eps_range) + exact(eps_leaf)
        assert eps_range > 0 and abs(float(exact(eps_range) / total) - 0.5) < 1e-9
        if trees_eps is not None:
            assert total == exact(trees_eps)
    partitions = {}
    for charge in model._ledger.history:
        partitions[charge["partition"]] = partitions.get(charge["partition"], 0) + \
            exact(charge["epsilon"])
    assert len(partitions) == 30 and set(partitions.values()) == {exact(epsilon)}
    assert model.privacy_report()["epsilon"] == epsilon


def test_range_share_zero_spends_everything_on_the_leaves():
    X, y, _ = load_adult("train")
    model = PaperForest(schema=ADULT_SCHEMA, epsilon=0.5, n_trees=5,
                                           window_size=500, range_share=0.0, seed=1)
    model.learn_many(X[:500], y[:500])
    w = model._windows[0]
    assert w.extra["epsilon_leaves"] == 0.5 and w.extra["epsilon_range"] == 0.0
    assert "range" not in model._ledger.history[0]["label"]


def test_small_windows_train_fewer_fuller_trees():
    """min_tree_records: a window trains min(n_trees, labeled // min_tree_records) trees, each
    charged once; tree ids stay distinct across windows."""
    X, y, _ = load_adult("train")
    model = PaperForest(schema=ADULT_SCHEMA, n_trees=20, window_size=4000,
                                           min_tree_records=150, max_windows=None,
                                           drift=False, seed=2)
    for xi, yi in zip(X[:7000], y[:7000], strict=True):          # windows of 1k, 2k, 4k
        model.learn_one(xi, yi)
    assert [len(w.trees) for w in model._windows] == [6, 13, 20]
    ids = [tr.id for w in model._windows for tr in w.trees]
    assert len(set(ids)) == len(ids) == 39
    assert model.privacy_report()["ledger_partitions"] == 39
    assert model.predict_one(X[9000]) in (False, True)


def test_windows_too_small_for_a_range_leave_its_share_to_the_leaves():
    """The range needs each attribute's part to hold 8 (ln(bins) + 2) / epsilon_range records
    (public counts): SynthF's 10 attributes at epsilon 1 need 8,290 labeled records."""
    _, _, schema = load_synth("f", n=100)
    model = PaperForest(schema=schema, drift=False)
    assert not model.ranged(8200) and model.ranged(8300)
    assert not RandomDecisionForestClassifier(schema=schema, range_share=0).ranged(10**9)
    X, y, _ = load_synth("f", n=3000)
    model.learn_many(X, y)
    w = model._windows[0]
    assert w.extra["epsilon_range"] == 0.0 and w.extra["epsilon_leaves"] == 1.0
    assert "router" not in w.extra
