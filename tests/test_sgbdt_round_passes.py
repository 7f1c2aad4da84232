"""The compiled passes of an S-GBDT round equal the numpy steps they replace, bit for bit, and
the pool's in-place buffers and learn_stream's reuse leave every result unchanged."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dpstream.accounting import IndividualRenyiFilter, RoundCostTable
from dpstream.accounting.noise import on_lattice
from dpstream.models import SGBDTClassifier
from dpstream.models.boosting import hist_splits as hs
from dpstream.models.boosting.round_kernels import (
    category_codes_into,
    clip_gradients,
    leaf_counts_sums,
    leaf_counts_sums_rows,
)
from dpstream.models.boosting.scores import sigmoid
from dpstream.models.encoding import EncodedRows, RecordEncoder
from dpstream.stream import load_adult


@pytest.fixture(scope="module")
def adult():
    X, y, schema = load_adult("train")
    return X[:6000], y[:6000], schema


@pytest.mark.parametrize("bins", [2, 8, 32])
def test_best_split_kernel_equals_the_numpy_path(adult, bins, monkeypatch):
    cells = hs._cells_of(RecordEncoder(adult[2]), bins)
    rng = np.random.default_rng(bins)
    n_feat = len(cells.numeric) + len(cells.categorical)
    for trial in range(600):
        H = rng.normal(0.0, 10.0 ** rng.uniform(-2, 3), cells.size)
        if trial % 7 == 0:
            H[rng.integers(0, cells.size, 9)] = 0.0
        iv = [(lo, hi) for _, lo, hi in cells.numeric]
        if trial % 5 == 1:
            iv[0] = (3.0, 3.0)   # an empty interval: never split
        cats = [list(c) for c in cells.categorical]
        if trial % 4 == 2:
            cats[1] = None       # fixed by the path
        if trial % 9 == 4:
            cats[2] = cats[2][1:]   # narrowed: the numpy path
        allowed = np.ones(n_feat, dtype=bool)
        if trial % 6 == 3:
            allowed[rng.integers(0, n_feat, 3)] = False
        got = hs._best_split(H, cells, iv, cats, allowed)
        with monkeypatch.context() as m:
            m.setattr(hs, "njit", None)
            want = hs._best_split(H, cells, iv, cats, allowed)
        assert got == want


def test_round_passes_equal_the_numpy_steps():
    rng = np.random.default_rng(3)
    table = RoundCostTable(order=8.0, sigma_leaf=3.0, leaf_noise_split=0.2, sample_rate=0.1,
                           grad_clip=0.5)
    for loss in ("logistic", "squared"):
        score = rng.normal(0.0, 2.0, 5000)
        y = (rng.random(5000) < 0.4).astype(float)
        spent = rng.uniform(0.0, 1.0, 5000)
        u = rng.random(5000)
        for by_cost in (True, False):
            g = score - y if loss == "squared" else sigmoid(score) - y
            np.clip(g, -0.5, 0.5, out=g)
            cost = table.cost(g) if by_cost else np.full(g.size, table.max_cost)
            f = IndividualRenyiFilter(order=8.0, bound=1.0)
            f.add(g.size)
            f.spent = spent.copy()
            cont = f.step(cost)
            sampled = cont & (u < 0.1)

            g2 = score.copy() if loss == "squared" else sigmoid(score)
            assert not clip_gradients(g2, y, 0.5)
            assert np.array_equal(g, g2)
            f2 = IndividualRenyiFilter(order=8.0, bound=1.0)
            f2.add(g.size)
            f2.spent = spent.copy()
            cont2, sampled2, rows = f2.step_sample(cost, u, 0.1)
            assert np.array_equal(cont, cont2) and np.array_equal(sampled, sampled2)
            assert np.array_equal(f.spent, f2.spent) and f2.rounds == f.rounds == 1
            assert np.array_equal(rows, np.flatnonzero(sampled))
            assert f2.count_exhausted(min_cost=0.05) == int(f.exhausted(min_cost=0.05).sum())
            nodes = rng.integers(3, 7, g.size)
            a = leaf_counts_sums(nodes, 3, sampled, g, 4)
            b = leaf_counts_sums_rows(nodes, 3, rows, g, 4)
            assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert clip_gradients(np.array([0.1, np.nan]), np.zeros(2), 0.5)
    # with a lattice step: the clip, then accounting.noise.on_lattice, bit for bit
    g = np.random.default_rng(5).normal(size=3000)
    y = np.zeros(3000)
    for step, bound in ((2.0**-14, 0.5), (2.0**-3, 0.3), (1.0, 2.5)):
        want = on_lattice(g, step, bound)
        got = g.copy()
        assert not clip_gradients(got, y, np.floor(bound / step) * step, step)
        assert np.array_equal(got, want)
    f = IndividualRenyiFilter(order=8.0, bound=1.0)
    f.add(3)
    for bad in ([0.1, np.nan, 0.1], [0.1, -0.2, 0.1], [np.inf, 0.0, 0.0]):
        with pytest.raises(ValueError):   # checked before anything is charged
            f.step_sample(np.array(bad), np.zeros(3), 0.5)
        assert f.spent.tolist() == [0.0, 0.0, 0.0] and f.rounds == 0


def test_raw_tree_equals_the_grids_raw_thresholds(adult):
    from dpstream.models.boosting.random_splits import random_complete_tree
    from dpstream.models.boosting.sgbdt_grid import raw_tree
    from dpstream.models.grid import FeatureGrid
    enc = RecordEncoder(adult[2])
    grid = FeatureGrid.release(enc.encode_many(adult[0][:3000]), enc.numeric_columns(),
                               epsilon=1.0, rng=0)
    rng = np.random.default_rng(5)
    for _ in range(300):
        tree = random_complete_tree(enc, depth=6, rng=rng)
        threshold = tree.threshold.copy()
        threshold[rng.integers(0, 63, 3)] = [np.nan, -1e9, 1e12]   # outside: kept
        tree = tree._replace(threshold=threshold)
        want = grid.raw_thresholds(tree.feature, tree.threshold)
        got = raw_tree(grid, tree).threshold
        assert np.array_equal(got, want, equal_nan=True)
        assert np.array_equal(tree.threshold, threshold, equal_nan=True)   # not changed


def test_grid_mapping_equals_the_grids_map_columns(adult):
    from dpstream.models.boosting.sgbdt_grid import map_grid_columns
    from dpstream.models.grid import FeatureGrid
    enc = RecordEncoder(adult[2])
    columns = enc.numeric_columns() + [(0, 2.0, 2.0)]   # and a column with an empty domain
    grid = FeatureGrid.release(enc.encode_many(adult[0][:3000]), columns, epsilon=1.0, rng=0)
    rng = np.random.default_rng(9)
    lo = np.array([c[1] for c in columns])
    hi = np.array([c[2] for c in columns])
    for _ in range(50):
        V = lo + (hi - lo) * rng.uniform(-0.1, 1.1, (64, len(columns)))
        V[rng.random(V.shape) < 0.05] = np.nan
        V[0, 0], V[1, 1] = lo[0], hi[1]   # the domain's ends
        want = grid.map_columns(V)
        got = map_grid_columns(grid, V)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.int64), want[~nan].view(np.int64))   # bits


def test_category_codes_into_equals_category_codes(adult):
    enc = RecordEncoder(adult[2])
    X = enc.encode_many(adult[0][:500] + [{"age": 30.0}])   # the last: categories missing
    want = hs.category_codes(enc, X)
    cats = enc.categorical_columns()
    out = np.zeros(want.shape, dtype=np.int16)
    category_codes_into(X, np.array([c[0] for c in cats]), np.array([len(c) for c in cats]),
                        out)
    assert np.array_equal(out, want)


def test_the_pool_buffers_follow_assignments_and_stay_out_of_checkpoints(adult):
    X, y, schema = adult
    m = SGBDTClassifier(schema=schema, epsilon=1.0, seed=0)
    for xi, yi in zip(X[:3000], y[:3000], strict=True):
        m.learn_one(xi, yi)
    e = m.engine
    assert e._bufs and e.score.base is e._bufs["score"]
    state = e.__getstate__()
    assert "_bufs" not in state and state["score"].base is e._bufs["score"]   # a view: its rows
    clone = pickle.loads(pickle.dumps(m))
    assert clone.engine._bufs == {} and np.array_equal(clone.engine.score, e.score)
    e.score = e.score + 0.0   # a new array (as the distributed party assigns one)
    for model in (m, clone):
        for xi, yi in zip(X[3000:4000], y[3000:4000], strict=True):
            model.learn_one(xi, yi)
    for name in ("y", "score", "ids", "codes"):
        assert np.array_equal(getattr(m.engine, name), getattr(clone.engine, name))
    assert np.array_equal(m.engine.filter.spent, clone.engine.filter.spent)
    assert m.privacy_report() == clone.privacy_report()


def test_learn_stream_reuses_encoded_rows_with_the_result_of_learn_one(adult):
    X, y, schema = adult
    a = SGBDTClassifier(schema=schema, epsilon=1.0, seed=0)
    b = SGBDTClassifier(schema=schema, epsilon=1.0, seed=0)
    enc = b._encoder
    for s in range(0, 6000, 1500):
        batch = EncodedRows(enc.encode_many(X[s:s + 1500]), enc.columns)
        keep = [j for j in range(1500) if j % 7 != 2]
        pa = [a.predict_one(X[s + j]) for j in range(1500)]
        assert b.predict_many(batch).tolist() == pa
        for j in keep:
            a.learn_one(X[s + j], y[s + j])
        b.learn_stream(batch.take(keep), [y[s + j] for j in keep])
    assert a.training_rounds == b.training_rounds > 100
    assert a.privacy_report() == b.privacy_report()
    assert [a.predict_proba_one(x) for x in X[:300]] == [b.predict_proba_one(x) for x in X[:300]]
