"""Split-attribute probabilities from a DP attribute-relevance release
(models/windows/relevance.py) and the median forest's use of them."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from river.datasets import synth

from dpstream.models import MedianForestClassifier
from dpstream.models.windows.relevance import AttributeRelevance
from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA as AGRAWAL


def _rel(**kw):
    return AttributeRelevance(numeric=[(0, 0.0, 10.0), (1, 0.0, 10.0)],
                              categorical=[[2, 3, 4]], n_classes=2, **kw)


def test_no_evidence_is_the_uniform_rule_and_weights_are_probabilities():
    rel = _rel()
    assert rel.weights().tolist() == pytest.approx([1 / 3] * 3)
    rng = np.random.default_rng(0)
    n = 3000
    cat = rng.integers(0, 3, n)
    X = np.c_[rng.uniform(0, 10, n), rng.uniform(0, 10, n), np.ones((n, 3))]
    X[np.arange(n), 2 + cat] = 0.0
    X[:50, 2:] = np.nan                     # missing categorical values have their own cell
    y = (cat == 1).astype(int)              # only the categorical attribute matters
    rel.release(X, y, epsilon=1.0, rng=rng)
    w = rel.weights()
    assert w.sum() == pytest.approx(1.0) and (w >= rel.floor / 3 - 1e-12).all()
    assert int(np.argmax(w)) == 2 and w[2] > 0.6
    rel.reset()
    assert rel.releases == 0 and rel.weights().tolist() == pytest.approx([1 / 3] * 3)


def test_evidence_accumulates_over_releases():
    rng = np.random.default_rng(1)

    def window(n):
        X = np.c_[rng.uniform(0, 10, n), rng.uniform(0, 10, n), np.ones((n, 3))]
        X[:, 2] = 0.0
        return X, (X[:, 0] > 5).astype(int)

    one, many = _rel(), _rel()
    X, y = window(300)
    one.release(X, y, epsilon=0.2, rng=rng)
    many.release(X, y, epsilon=0.2, rng=rng)
    for _ in range(20):
        many.release(*window(300), epsilon=0.2, rng=rng)
    assert many.releases == 21 and many.weights()[0] > 0.75
    assert many.weights()[0] > one.weights()[0] - 0.05


def _agrawal(function: int, n: int, seed: int = 1) -> list:
    return list(synth.Agrawal(classification_function=function, seed=seed).take(n))


def test_median_forest_charges_relevance_and_trees_to_exactly_the_budget():
    rows = _agrawal(0, 8000)
    m = MedianForestClassifier(schema=AGRAWAL, epsilon=1.5, seed=0)
    for x, y in rows:
        m.predict_one(x)
        m.learn_one(x, y)
    labels = {h["label"] for h in m._ledger.history}
    assert {"AttributeRelevance", "MedianForestClassifier", "DPDriftSignal"} <= labels
    rep = m.privacy_report()
    assert rep["epsilon"] == 1.5 and rep["epsilon"] <= rep["epsilon_budget"]
    assert rep["attributes"]["rule"] == "relevance" and rep["attributes"]["releases"] >= 3
    # Agrawal function 0 depends on age alone: the released evidence says so
    names = rep["attributes"]["names"]
    assert names[int(np.argmax(rep["attributes"]["weights"]))] == "age"


def test_uniform_attributes_spend_nothing_on_relevance_and_old_checkpoints_load():
    rows = _agrawal(0, 3000)
    m = MedianForestClassifier(schema=AGRAWAL, epsilon=1.0, attributes="uniform", seed=0)
    m.learn_many([x for x, _ in rows], [y for _, y in rows])
    assert "AttributeRelevance" not in {h["label"] for h in m._ledger.history}
    assert m._ledger.spent == pytest.approx(1.0)
    assert m.privacy_report()["attributes"]["rule"] == "uniform"
    with pytest.raises(ValueError, match="attributes"):
        MedianForestClassifier(schema=AGRAWAL, attributes="greedy")
    with pytest.raises(ValueError, match="relevance_share"):
        MedianForestClassifier(schema=AGRAWAL, relevance_share=1.5)
    state = MedianForestClassifier(schema=AGRAWAL, seed=0).__dict__.copy()
    for name in ("attributes", "relevance_share", "_relevance"):
        state.pop(name)
    old = MedianForestClassifier.__new__(MedianForestClassifier)
    old.__setstate__(state)
    old.learn_many([x for x, _ in rows], [y for _, y in rows])
    assert old.attributes == "uniform" and old.windows_closed == 1


def test_small_windows_train_fewer_fuller_trees():
    rows = _agrawal(1, 3000)
    m = MedianForestClassifier(schema=AGRAWAL, epsilon=1.0, n_trees=10, drift=False, seed=0)
    for x, y in rows:
        m.learn_one(x, y)
    trees = [len(w.trees) for w in m._windows]
    # the warm-up's 125, 250, 500 and 1,000 records, 250 per tree (at least one)
    assert [w.records for w in m._windows] == [125, 250, 500, 1000]
    assert trees == [1, 1, 2, 4]
    assert m.trees_for(10_000) == 10 and m.trees_for(10) == 1
    parts = {h["partition"] for h in m._ledger.history}
    assert parts == {f"window-{w}/tree-{t}" for w, n in enumerate(trees) for t in range(n)}
    clone = pickle.loads(pickle.dumps(m))
    assert [clone.predict_one(x) for x, _ in rows[:200]] == \
        [m.predict_one(x) for x, _ in rows[:200]]
    with pytest.raises(ValueError, match="min_tree_records"):
        MedianForestClassifier(schema=AGRAWAL, min_tree_records=0)


def test_relevance_beats_uniform_attributes_on_agrawal_streams():
    """The stream default against the paper's rule, prequential on rows 10k-20k, epsilon 1,
    two model seeds: Agrawal functions 0 (age decides) and 3 (age, elevel and salary)."""

    def second_half(rows, **kw):
        out = []
        for seed in (0, 1):
            m = MedianForestClassifier(schema=AGRAWAL, epsilon=1.0, seed=seed, **kw)
            hits = 0
            for i, (x, y) in enumerate(rows):
                hits += m.predict_one(x) == y and i >= 10_000
                m.learn_one(x, y)
            out.append(hits / 10_000)
        return float(np.mean(out))

    for function in (0, 3):
        rows = _agrawal(function, 20_000, seed=2)
        assert second_half(rows) > second_half(rows, attributes="uniform") + 0.03, function


def test_slots_draw_attributes_in_proportion_and_route_like_the_repeated_attribute():
    from dpstream.models.encoding import RecordEncoder
    from dpstream.models.windows.random_trees import ImplicitRandomTrees
    from dpstream.models.windows.relevance import slot_counts

    enc = RecordEncoder({"features": {"a": {"type": "numeric", "min": 0, "max": 1},
                                      "b": {"type": "numeric", "min": 0, "max": 1},
                                      "c": {"type": "categorical", "values": ["p", "q"]}},
                         "target": {"type": "binary", "values": [0, 1]}})
    base = ImplicitRandomTrees(enc, depth=1, secret=11)
    counts = slot_counts(np.array([0.8, 0.1, 0.1]), n_numeric=2)
    assert counts.tolist() == [10, 1, 1]
    slots = base.with_slots(counts)
    rng = np.random.default_rng(0)
    X = enc.encode_many([{"a": float(a), "b": float(b), "c": "pq"[int(c)]}
                         for a, b, c in zip(rng.random(400), rng.random(400),
                                            rng.integers(0, 2, 400), strict=False)])
    V = base.matrix(X)
    # which attribute each depth-1 tree splits on: the one whose value decides its leaf
    trees = np.arange(2000)
    keys = slots.leaf_keys(slots.view(V), trees)
    splits_a = 0
    for t in range(trees.size):
        groups = {}
        for row, key in zip(V, keys[:, t], strict=False):
            groups.setdefault(key, []).append(row[1])
        if len(groups) == 2:
            lows = [max(v) for v in groups.values()]
            highs = [min(v) for v in groups.values()]
            splits_a += min(lows) <= max(highs) and sorted(lows)[0] < sorted(highs)[1]
    # 10 of 12 slots are attribute a: about 83% of the trees split on it (uniform: 33%)
    assert 0.75 < splits_a / trees.size < 0.9
    with pytest.raises(ValueError, match="counts"):
        base.with_slots([1, 1])
    with pytest.raises(ValueError, match="counts"):
        slots.with_slots(counts)


@pytest.mark.parametrize("name", ["RandomDecisionForestClassifier", "RDTClassifier"])
def test_keyed_forests_relevance_beats_uniform_attributes_and_charges_exactly(name):
    """The random forest and RDT (attribute slots of their keyed trees) against their papers'
    uniform attributes, prequential on rows 10k-20k of Agrawal function 0, epsilon 1; the
    relevance release is charged in the window's partitions and the report stays at epsilon."""
    import dpstream.models as models

    cls = getattr(models, name)
    rows = _agrawal(0, 20_000, seed=2)

    def run(**kw):
        m = cls(schema=AGRAWAL, epsilon=1.0, seed=0, **kw)
        hits = 0
        for i, (x, y) in enumerate(rows):
            hits += m.predict_one(x) == y and i >= 10_000
            m.learn_one(x, y)
        return hits / 10_000, m

    acc, m = run()
    base, _ = run(attributes="uniform")
    assert acc > base + 0.05
    rep = m.privacy_report()
    assert rep["epsilon"] == 1.0 and rep["attributes"]["rule"] == "relevance"
    win = m._windows[-1].extra
    assert win["epsilon_relevance"] == rep["attributes"]["epsilon"] > 0
    parts = {h["partition"].split("/")[0] for h in m._ledger.history}
    assert parts == {f"window-{w}" for w in range(m.windows_closed)}
    if name == "RandomDecisionForestClassifier":
        total = win["epsilon_relevance"] + win["epsilon_leaves"] + win["epsilon_range"]
        assert total <= m.epsilon_trees + 1e-15
