"""The DP feature grid (issue 51): its sensitivity, its noise, the monotone map and its inverse,
and how the window forests release, charge, report and score with it."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
)
from dpstream.models.grid import FeatureGrid
from dpstream.stream import load_elec2

COLUMNS = [(1, 0.0, 1.0), (2, -5.0, 5.0), (3, 0.0, 100.0)]


def _rows(rng: np.random.Generator, n: int) -> np.ndarray:
    X = np.column_stack([np.zeros(n), rng.beta(1, 20, n), rng.normal(0, 2, n),
                         rng.uniform(0, 100, n)])
    X[rng.random(n) < 0.1, 2] = np.nan          # missing values fall in no cell
    return X


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 300), st.sampled_from([4, 16, 32]))
def test_removing_a_record_moves_the_histograms_by_at_most_the_feature_count(seed, n, cells):
    rng = np.random.default_rng(seed)
    X = _rows(rng, n)
    i = int(rng.integers(n))
    full = FeatureGrid.counts(X, COLUMNS, cells)
    less = FeatureGrid.counts(np.delete(X, i, axis=0), COLUMNS, cells)
    assert np.abs(full - less).sum() <= len(COLUMNS)
    assert full.sum() <= n * len(COLUMNS)


def test_the_release_adds_laplace_noise_of_scale_features_over_epsilon():
    """Statistical: the released cells of a constant data set spread as Laplace(F / eps)
    (std sqrt(2) F / eps), read back through the map's first cell of many releases."""
    X = np.full((200, 4), 0.5)
    rng = np.random.default_rng(3)
    eps = 2.0
    draws = np.array([FeatureGrid.counts(X, COLUMNS, 8) + rng.laplace(0, 3 / eps, (3, 8))
                      for _ in range(4000)])
    # the mechanism the grid calls, at the scale it passes
    from dpstream.accounting import LaplaceMechanism
    mech = LaplaceMechanism(epsilon=eps, sensitivity=len(COLUMNS), rng=5)
    noise = np.array([mech.release(np.zeros((3, 8))) for _ in range(4000)])
    assert mech.scale == pytest.approx(len(COLUMNS) / eps)
    assert noise.std() == pytest.approx(np.sqrt(2) * len(COLUMNS) / eps, rel=0.03)
    assert draws.std(axis=0).mean() == pytest.approx(noise.std(), rel=0.05)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_a_threshold_on_mapped_rows_is_the_raw_threshold_on_raw_rows(seed):
    rng = np.random.default_rng(seed)
    X = _rows(rng, 500)
    grid = FeatureGrid.release(X, COLUMNS, epsilon=1.0, rng=seed)
    M = grid.forward(X)
    feature = np.array([1, 2, 3, 0, -1])
    threshold = np.array([rng.uniform(0, 1), rng.uniform(-5, 5), rng.uniform(0, 100), 0.5, 0.0])
    mapped_t = grid.forward(np.array([[0.0, *threshold[:3]]]))[0, 1:]   # thresholds in map space
    t = np.concatenate([mapped_t, threshold[3:]])
    raw = grid.raw_thresholds(feature, t)
    assert raw[3] == 0.5 and raw[4] == 0.0            # other columns and leaves untouched
    for node, c in enumerate((1, 2, 3)):
        ok = ~np.isnan(X[:, c])
        agree = (M[ok, c] <= t[node]) == (X[ok, c] <= raw[node])
        assert agree.mean() >= 0.998                   # (float ties at the threshold only)
    assert np.isnan(M[np.isnan(X[:, 2]), 2]).all()     # missing stays missing
    lo, hi = -5.0, 5.0
    assert (M[~np.isnan(M[:, 2]), 2] >= lo).all() and (M[~np.isnan(M[:, 2]), 2] <= hi).all()


def test_an_even_feature_keeps_about_the_identity_and_a_skewed_one_its_quantiles():
    rng = np.random.default_rng(0)
    X = np.column_stack([np.zeros(4000), rng.uniform(0, 1, 4000), rng.beta(1, 30, 4000)])
    grid = FeatureGrid.release(X, [(1, 0.0, 1.0), (2, 0.0, 1.0)], epsilon=0.5, rng=1)
    u = np.linspace(0, 1, 11)
    mapped = grid.forward(np.column_stack([np.zeros(11), u, u]))
    assert np.abs(mapped[:, 1] - u).max() < 0.12       # about the identity
    median = np.median(grid.forward(X)[:, 2])
    assert 0.35 < median < 0.65                        # the skewed feature spread out


def _elec2(n):
    X, y, schema = load_elec2()
    return X[:n], y[:n], schema


@pytest.mark.parametrize("cls", [MedianForestClassifier, RandomDecisionForestClassifier,
                                 RDTClassifier])
def test_the_first_labeled_window_releases_the_grid_and_pays_for_it(cls):
    X, y, schema = _elec2(4000)
    model = cls(schema=schema, epsilon=1.0, seed=0)
    for xi, yi in zip(X, y, strict=True):
        model.learn_one(xi, yi)
    report = model.privacy_report()
    grid = report["feature_grid"]
    # the first window of at least grid_min_records (1,000) messages: after the warm-up's
    # 125, 250 and 500 (the random forest and RDT: 250 and 500), issue 64
    g = 3 if cls is MedianForestClassifier else 2
    assert grid["released"] and grid["window"] == g and grid["records"] == 1000
    # that window's partitions: trees + grid (+ drift) within the budget, exactly
    ledger = model._ledger
    first = {p: v for p, v in ledger._partitions.items() if p.startswith(f"window-{g}/")}
    assert first and max(first.values()) <= 1.0
    grid_parts = {h["partition"] for h in ledger.history if h["label"] == "FeatureGrid"}
    assert grid_parts == set(first)       # every part of the first window, no other window
    assert max(first.values()) == pytest.approx(1.0)   # trees + grid + drift: the budget
    assert grid["epsilon"] == pytest.approx(model.grid_share * (1.0 - model.epsilon_drift))
    assert report["epsilon"] <= report["epsilon_budget"]
    # the next window did not pay again
    second = {p: v for p, v in ledger._partitions.items() if p.startswith(f"window-{g + 1}/")}
    assert max(second.values()) < max(first.values()) + 1e-12
    # the grid survives a checkpoint and scores the same
    again = pickle.loads(pickle.dumps(model))
    probe = X[:200]
    assert [again.predict_one(x) for x in probe] == [model.predict_one(x) for x in probe]


def test_the_median_forest_refreshes_its_grid_every_grid_refresh_windows():
    X, y, schema = _elec2(3000)
    model = MedianForestClassifier(schema=schema, epsilon=1.0, seed=0, warmup=500,
                                   window_size=500, grid_refresh=2)
    model.grid_min_records = 500   # (windows of 500 may release it)
    for xi, yi in zip(X[:1000], y[:1000], strict=True):
        model.learn_one(xi, yi)
    first = model._grid
    first_window = [t.threshold.copy() for t in model._windows[0].trees]
    for xi, yi in zip(X[1000:], y[1000:], strict=True):
        model.learn_one(xi, yi)
    grid = model.privacy_report()["feature_grid"]
    assert model.windows_closed == 6
    assert grid["releases"] == 3 and grid["window"] == 4 and grid["records"] == 500
    assert model._grid is not first
    ledger = model._ledger
    paid = {h["partition"].split("/")[0] for h in ledger.history if h["label"] == "FeatureGrid"}
    assert paid == {"window-0", "window-2", "window-4"}
    assert max(ledger._partitions.values()) <= 1.0 + 1e-12
    # a window's trees keep the raw thresholds they were grown with
    for old, new in zip(first_window, model._windows[0].trees, strict=True):
        np.testing.assert_array_equal(old, new.threshold)
    with pytest.raises(ValueError, match="grid_refresh"):
        MedianForestClassifier(schema=schema, grid_refresh=0)
    rdt = RDTClassifier(schema=schema)
    rdt.grid_refresh = 2   # implicit trees score every window through one grid
    with pytest.raises(ValueError, match="raw units"):
        rdt._check_params()


@pytest.mark.parametrize("cls", [MedianForestClassifier, RandomDecisionForestClassifier])
def test_a_group_member_releases_its_own_grid_from_its_first_window(cls):
    """Issue 62: a member (share 1/2 of six partitions) releases a grid from its first
    window (half of member_warmup and of grid_min_records: 500 messages) and pays for it
    there, as one process does; before, members released none and their union scored 1-2 pp
    below one process."""
    X, y, schema = _elec2(1600)
    model = cls(schema=schema, epsilon=1.0, seed=0)
    model.set_share(0.5, [0, 1, 2], 6)
    for xi, yi in zip(X, y, strict=True):
        model.learn_one(xi, yi)
    grid = model.privacy_report()["feature_grid"]
    g = 0
    assert grid["released"] and grid["window"] == g and grid["records"] == 500
    ledger = model._ledger
    paid = {h["partition"].split("/")[0] for h in ledger.history if h["label"] == "FeatureGrid"}
    assert paid == {f"window-{g}"}
    assert max(ledger._partitions.values()) <= 1.0 + 1e-12


def test_a_held_window_releases_its_grid_when_its_trees_grow_and_a_dropped_one_never():
    """A member holding its first window has charged the grid's share with it but releases
    the grid only when the window's trees grow: a held window dropped untrained (a restart
    whose records another member trains) published nothing from its records, and the next
    window releases a grid of its own. With a refresh due in a held window, the windows
    exported meanwhile carry the grid they were grown on, not one from the held records."""
    X, y, schema = _elec2(2600)

    def member(**kw):
        model = MedianForestClassifier(schema=schema, epsilon=1.0, seed=0, warmup=500,
                                       window_size=500, drift=False, **kw)
        model.set_share(1.0, [0], 1)
        model.hold = True
        model.grid_min_records = 500   # (windows of 500 may release it)
        return model

    model = member()
    for xi, yi in zip(X[:500], y[:500], strict=True):
        model.learn_one(xi, yi)
    assert model.held is not None and model._grid is None
    charged = [h for h in model._ledger.history if h["label"] == "FeatureGrid"]
    assert {h["partition"].split("/")[0] for h in charged} == {"window-0"}
    assert max(model._ledger._partitions.values()) == pytest.approx(1.0)   # charged in full
    again = pickle.loads(pickle.dumps(model))   # the pending release survives a checkpoint
    assert model.grow_held() and model._grid is not None
    assert model.privacy_report()["feature_grid"]["window"] == 0
    assert again.drop_held(published=False) == 500 and again._grid is None
    for xi, yi in zip(X[500:1100], y[500:1100], strict=True):   # the next window: its own
        again.learn_one(xi, yi)
    again.grow_held()
    assert again.privacy_report()["feature_grid"]["window"] == 0   # (the index is reused)
    assert again._grid is not None and len(again._windows) == 1

    from dpstream.models.windows.window_exchange import export_window

    refresh = member(grid_refresh=2)
    for xi, yi in zip(X[:1500], y[:1500], strict=True):   # window 2 closes: held, refresh due
        refresh.learn_one(xi, yi)
    assert refresh.held["index"] == 2 and refresh._held.get("grid")
    first = refresh._grid
    assert export_window(refresh, 1, member="m")["routing"]["_grid"] is first
    refresh.grow_held()
    assert refresh._grid is not first
    assert refresh.privacy_report()["feature_grid"]["window"] == 2


def test_a_learn_many_batch_releases_no_grid():
    """A batch is one window at the paper's settings: the grid is a stream feature."""
    X, y, schema = _elec2(1000)
    model = RDTClassifier(schema=schema, epsilon=1.0, seed=0)
    model.learn_many(X, y)
    assert model._grid is None and model.privacy_report()["epsilon"] <= 1.0


def test_grid_share_zero_releases_nothing_and_greedy_is_off_by_default():
    X, y, schema = _elec2(1500)
    for model in (MedianForestClassifier(schema=schema, seed=0, grid_share=0.0),
                  GreedyForestClassifier(schema=schema, seed=0)):
        for xi, yi in zip(X, y, strict=True):
            model.learn_one(xi, yi)
        assert model._grid is None
        assert model.privacy_report()["feature_grid"]["released"] is False
    with pytest.raises(ValueError, match="grid_share"):
        MedianForestClassifier(schema=schema, grid_share=1.0)


def test_median_trees_keep_raw_thresholds_and_score_raw_rows():
    """The median forest's trees are taken back to raw units: scoring raw rows through them
    equals scoring mapped rows through the trees as grown."""
    X, y, schema = _elec2(2000)
    model = MedianForestClassifier(schema=schema, epsilon=1.0, seed=1)
    model.learn_stream(X, y)
    assert model._grid is not None
    enc = model._encoder.encode_many(X[:300])
    tree = model._windows[3].trees[0]   # the 1,000-record window, grown on the grid
    mapped = model._grid.forward(enc)
    inner = tree.feature >= 0
    grown = tree.threshold.copy()
    cols = np.array([c for c, _, _ in model._grid.columns])
    numeric = inner & np.isin(tree.feature, cols)
    # map the raw thresholds forward again: the routing of mapped rows must agree
    row = np.zeros((numeric.sum(), enc.shape[1]))
    row[np.arange(numeric.sum()), tree.feature[numeric]] = grown[numeric]
    grown[numeric] = model._grid.forward(row)[np.arange(numeric.sum()), tree.feature[numeric]]
    from dpstream.models.windows.window_trees import WindowTree
    as_grown = WindowTree(feature=tree.feature, threshold=grown, counts=tree.counts,
                          depth=tree.depth)
    assert (as_grown.leaves(mapped) == tree.leaves(enc)).mean() >= 0.995


def test_a_union_scores_each_members_windows_through_that_members_grid():
    """Two processes with their own grids (or none): every window the union adopts is scored
    through the grid its trees were grown on, so the union of one process's windows scores as
    that process does."""
    from dpstream.models.windows.window_exchange import WindowEnsemble, export_window

    X, y, schema = _elec2(3200)
    gridded = RDTClassifier(schema=schema, epsilon=1.0, seed=0)
    plain = RDTClassifier(schema=schema, epsilon=1.0, seed=1, grid_share=0.0)
    for model in (gridded, plain):
        model.learn_stream(X[:3000], y[:3000])
    assert gridded._grid is not None and plain._grid is None
    union = WindowEnsemble(plain, "b")          # this member has no grid of its own
    first = gridded.windows_closed - len(gridded._windows)
    for i in range(first, gridded.windows_closed):
        state = export_window(gridded, i, member="a")
        assert state["routing"]["_grid"] is gridded._grid
        union.adopt(state["key"], state)
    probe = X[3000:3200]
    assert list(union.predict_many(probe)) == list(gridded.predict_many(probe))
