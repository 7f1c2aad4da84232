"""The window framework and the semi-supervised median forests (Huang et al., 2023, Section 5):
which records each tree sees (parallel composition, checked record by record), what each mode
spends, time-based windows, and a resumed replay that equals an uninterrupted one."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpstream.models import (
    GreedyForestClassifier,
    InvalidRecordError,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
)
from dpstream.models.windows.median_forest import grow_median_tree
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.service import replay

#: every classifier on the window framework
WINDOW_FORESTS = [MedianForestClassifier, RandomDecisionForestClassifier, RDTClassifier,
                  GreedyForestClassifier]
#: ledger partitions a window with labels opens: one per tree whose records are disjoint; RDT's
#: trees all read the window's records, so its epsilon / p per tree adds up in one partition
PARTS_PER_WINDOW = {MedianForestClassifier: lambda n_trees: n_trees,
                    RandomDecisionForestClassifier: lambda n_trees: n_trees,
                    RDTClassifier: lambda n_trees: 1,
                    GreedyForestClassifier: lambda n_trees: n_trees}

SCHEMA = {"features": {"uid": {"type": "numeric", "min": 0, "max": 10**6},
                       "a": {"type": "numeric", "min": 0, "max": 1},
                       "c": {"type": "categorical", "values": ["p", "q", "r"]}},
          "target": {"type": "categorical", "values": ["u", "v", "w"]}}
UID = 1   # encoded column of "uid" (column 0 is the constant)


class Spy(MedianForestClassifier):
    """Records, per closed window, which uids grew each tree and which filled its leaves."""

    def _close_window(self):
        self.log.append(("none", [], []))     # replaced if the window trains
        super()._close_window()

    def _train_window(self, X, y, public):
        self.seen_structure, self.seen_leaves = [], []
        trees, algo, extra = super()._train_window(X, y, public)
        self.log[-1] = (algo, self.seen_structure, self.seen_leaves)
        return trees, algo, extra

    def _grow(self, X, depth, budgets):
        self.seen_structure.append((set(X[:, UID].astype(int).tolist()), budgets is None))
        return super()._grow(X, depth, budgets)

    def _tree(self, feature, threshold, depth, X_lab, y_lab, eps_l):
        self.seen_leaves.append((set(X_lab[:, UID].astype(int).tolist()), eps_l))
        return super()._tree(feature, threshold, depth, X_lab, y_lab, eps_l)


def _record(i, rng):
    return {"uid": i, "a": float(rng.random()), "c": "pqr"[int(rng.integers(3))]}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 400), window=st.integers(5, 120), n_trees=st.integers(1, 5),
       labeled_share=st.sampled_from([0.0, 0.2, 0.5, 1.0]),
       mode=st.sampled_from(["features_and_labels", "labels_only", "pte"]),
       seed=st.integers(0, 10**6))
def test_each_record_feeds_one_window_and_one_tree_part(n, window, n_trees, labeled_share,
                                                         mode, seed):
    window = max(window, n_trees)
    rng = np.random.default_rng(seed)
    model = Spy(schema=SCHEMA, epsilon=1.0, n_trees=n_trees, window_size=window,
                max_windows=None, attributes="uniform", min_tree_records=None,
                privacy="features_and_labels" if mode == "features_and_labels" else "labels_only",
                transductive=mode == "pte", grid_share=0.0,   # the spy reads raw rows
                seed=seed)
    model.log = []
    labeled = set()
    for i in range(n):
        lab = rng.random() < labeled_share
        labeled |= {i} if lab else set()
        model.learn_one(_record(i, rng), "uvw"[i % 3] if lab else None)
    closed = n // window
    trained = set(range(closed * window))
    rep = model.privacy_report()
    assert rep["records_learned"] == len(trained) and rep["records_pending"] == n - len(trained)
    windows_with_labels = 0
    used_private = []      # every record whose private content some mechanism read
    for w, (algo, structure, leaves) in enumerate(model.log):
        in_window = set(range(w * window, (w + 1) * window))
        # leaves: the window's labeled records, each in exactly one tree's part
        leaf_sets = [s for s, eps in leaves if eps is not None]
        assert sum(map(len, leaf_sets)) == len(set().union(*leaf_sets)) if leaf_sets else True
        assert set().union(*leaf_sets) == in_window & labeled if leaf_sets else True
        # every closed window trains, labeled or not: whether a window holds a label is
        # content, and the trees (and ledger partitions) it publishes must not tell (issue 63)
        assert not algo.startswith("none")
        windows_with_labels += 1
        assert len(leaf_sets) == n_trees
        used_private += [u for s in leaf_sets for u in s]
        private_structure = [s for s, exact in structure if not exact]
        if algo in ("SPE", "SSPE-1"):
            assert len(private_structure) == n_trees
            assert set().union(*private_structure) == (
                in_window if algo == "SPE" else in_window - labeled)
            used_private += [u for s in private_structure for u in s]
            for s_struct, s_leaf in zip(private_structure, leaf_sets, strict=True):
                # one tree's part: its structure and its leaves hold the same records (SPE) or
                # disjoint ones (SSPE-1) -- never another tree's
                assert s_leaf <= s_struct if algo == "SPE" else not (s_leaf & s_struct)
        else:   # features public: exact medians on every record of the window
            assert not private_structure
            assert all(s == in_window for s, exact in structure)
            assert algo == ("PTE" if mode == "pte" and in_window - labeled else "SSPE-2")
            # PTE's second ensemble: pseudo-labels, no noise, no budget
            assert all(s <= in_window - labeled for s, eps in leaves if eps is None)
    if mode == "features_and_labels":
        # a record's private content is read by one tree's mechanisms only, SPE records once
        # for the structure and once for the leaves of the same tree (epsilon_s + epsilon_l)
        counts = np.bincount(used_private, minlength=n) if used_private else np.zeros(n)
        assert counts.max(initial=0) <= 2
    assert rep["ledger_partitions"] == windows_with_labels * n_trees
    assert rep["epsilon"] == (1.0 if windows_with_labels else 0.0)


def test_modes_spend_what_the_paper_says():
    X, y, schema = load_adult("train")
    # one window of the paper's mode, spending the whole epsilon (no warm-up, no drift signal)
    kw = {"schema": schema, "epsilon": 2.0, "window_size": 2000, "seed": 0, "warmup": None,
          "drift": False, "attributes": "uniform", "min_tree_records": None, "split_share": 0.5,
          "n_trees": 10, "grid_share": 0.0}
    half = [yi if i % 2 else None for i, yi in enumerate(y[:2000])]   # 50% labeled
    few = [yi if i % 5 == 0 else None for i, yi in enumerate(y[:2000])]
    cases = [(MedianForestClassifier(**kw), y[:2000], "SPE", 1.0, 1.0),
             (MedianForestClassifier(**kw), half, "SSPE-1", 2.0, 2.0),
             (MedianForestClassifier(**kw, privacy="labels_only"), few, "SSPE-2", None, 2.0),
             (MedianForestClassifier(**kw, privacy="labels_only", transductive=True), few,
              "PTE", None, 2.0)]
    for model, labels, algo, eps_s, eps_l in cases:
        for xi, yi in zip(X[:2000], labels, strict=True):
            model.learn_one(xi, yi)
        rep = model.privacy_report()
        win = rep["windows"][0]
        assert (win["algorithm"], win["epsilon_splits"], win["epsilon_leaves"]) == \
            (algo, eps_s, eps_l)
        assert rep["epsilon"] == 2.0 and rep["ledger_partitions"] == 10
        assert rep["trees"] == (20 if algo == "PTE" else 10)
        assert rep["protects"] == ("labels" if algo in ("SSPE-2", "PTE")
                                   else "features and labels")
        assert "PUBLIC" in rep["guarantee"] if algo in ("SSPE-2", "PTE") else True
        if eps_s is not None:
            assert sum(win["split_budgets"]) == pytest.approx(eps_s)
    with pytest.raises(ValueError, match="labels_only"):
        MedianForestClassifier(schema=schema, transductive=True)


@pytest.mark.parametrize("cls", WINDOW_FORESTS)
def test_a_window_without_labels_publishes_what_a_labeled_one_does(cls):
    """Whether a window holds labels is content: a window of unlabeled records trains (noise
    leaves) and spends like a labeled one, so the published counts cannot tell them apart
    (issue 63; it used to train nothing and spend nothing)."""
    X, y, schema = load_adult("train")
    reports = []
    for labels in (y[:250], [None] * 250):
        model = cls(schema=schema, window_size=100, n_trees=4, seed=0)
        for xi, yi in zip(X[:250], labels, strict=True):
            model.learn_one(xi, yi)
        reports.append(model.privacy_report())
    for key in ("windows_closed", "trees", "epsilon", "ledger_partitions"):
        assert reports[0][key] == reports[1][key], key
    assert reports[1]["windows_closed"] == 2 and reports[1]["trees"] > 0
    assert reports[1]["unlabeled_seen"] == 250 and reports[1]["records_pending"] == 50


@pytest.mark.parametrize("cls", WINDOW_FORESTS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 700), window=st.integers(10, 200), n_trees=st.integers(1, 10),
       max_windows=st.one_of(st.none(), st.integers(1, 4)), seed=st.integers(0, 10**6))
def test_windows_compose_in_parallel(cls, n, window, n_trees, max_windows, seed):
    window = max(window, n_trees)
    X, y, _ = load_adult("test")
    model = cls(schema=ADULT_SCHEMA, epsilon=1.5, n_trees=n_trees, window_size=window,
                max_windows=max_windows, seed=seed, warmup=None)   # fixed windows
    for i in range(n):
        model.learn_one(X[i], y[i])
    rep = model.privacy_report()
    closed = n // window
    assert rep["windows_closed"] == closed
    assert rep["records_learned"] == closed * window          # each closed window once
    assert rep["records_pending"] == n - closed * window      # the partial one is kept
    trees = model.trees_for(window)    # min_tree_records: small windows train fewer trees
    assert rep["ledger_partitions"] == closed * PARTS_PER_WINDOW[cls](trees)
    # parallel composition over windows (and disjoint trees) keeps the stream at epsilon
    assert rep["epsilon"] == (1.5 if closed else 0.0)
    assert model._ledger.spent <= 1.5
    kept = closed if max_windows is None else min(closed, max_windows)
    assert rep["windows_kept"] == kept and rep["trees"] == kept * trees


@pytest.mark.parametrize("cls", WINDOW_FORESTS)
def test_predictions_are_pure_and_survive_pickling(cls):
    """Predicting stores nothing (the implicit-tree forests cache merged tables, which pickling
    drops): one record or a batch, before or after a pickle round trip, the same answers."""
    X, y, _ = load_adult("train")
    model = cls(schema=ADULT_SCHEMA, window_size=2000, n_trees=20, seed=6)
    model.learn_many(X[:2000], [v if i % 4 == 0 else None for i, v in enumerate(y[:2000])],
                     public=[i % 4 != 0 for i in range(2000)])
    size = len(pickle.dumps(model))
    first = list(model.predict_many(X[5000:6000]))
    assert [model.predict_one(x) for x in X[5000:5200]] == first[:200]
    assert list(model.predict_many(X[5000:6000])) == first
    assert len(pickle.dumps(model)) == size   # nothing kept per prediction
    clone = pickle.loads(pickle.dumps(model))
    assert list(clone.predict_many(X[5000:6000])) == first
    proba = model.predict_proba_one(X[5000])
    assert set(proba) == {False, True} and abs(sum(proba.values()) - 1) < 1e-9


@pytest.mark.parametrize("cls", WINDOW_FORESTS)
def test_bad_input_names_the_field_and_changes_nothing(cls):
    X, y, _ = load_adult("train")
    model = cls(schema=ADULT_SCHEMA, window_size=100, n_trees=3, seed=0,
                on_out_of_domain="error", on_unknown="error")   # the strict input policy
    for xi, yi in zip(X[:150], y[:150], strict=True):
        model.learn_one(xi, yi, public=bool(xi["age"] % 2))
    before = pickle.dumps(model)
    for x, yv, field in (({"age": 200}, True, "age"), ({"colour": 1}, True, "colour"),
                         ({"age": float("nan")}, True, "age"), ({"sex": "Robot"}, True, "sex"),
                         ({"age": 30}, "rich", "y")):
        with pytest.raises(InvalidRecordError) as info:
            model.learn_one(x, yv, public=True)
        assert info.value.field == field
    with pytest.raises(InvalidRecordError, match="workclass"):
        model.predict_one(dict(X[0], workclass="Astronaut"))
    with pytest.raises(ValueError, match="public"):
        model.learn_many(X[:3], y[:3], public=[True, False])
    assert pickle.dumps(model) == before


def test_exact_medians_when_features_are_public():
    rng = np.random.default_rng(4)
    X = np.c_[np.zeros(501), rng.normal(size=501), rng.uniform(size=501)]
    numeric = [(1, -10.0, 10.0), (2, 0.0, 1.0)]
    feature, threshold = grow_median_tree(X, 2, numeric=numeric, categorical=[],
                                          rng=np.random.default_rng(0), budgets=None)
    col = feature[0]
    assert threshold[0] == np.median(X[:, col])
    left = X[:, col] <= threshold[0]
    assert threshold[1] == np.median(X[left, feature[1]])
    assert threshold[2] == np.median(X[~left, feature[2]])
    assert np.all(np.isinf(threshold[3:])) and np.all(feature[3:] == 0)


def test_time_based_windows_close_on_the_clock_and_survive_pickling():
    X, y, schema = load_adult("train")
    model = MedianForestClassifier(schema=schema, window_size=None, window_seconds=60.0,
                                   n_trees=2, seed=0)
    for i in range(300):                       # one record a second: windows of 60 records
        model.learn_one(X[i], y[i], t=1000.0 + i)
    rep = model.privacy_report()
    assert rep["windows_closed"] == 4 and rep["records_pending"] == 60
    assert [w["records"] for w in rep["windows"]] == [60, 60, 60, 60]
    clone = pickle.loads(pickle.dumps(model))
    clone.learn_one(X[300], y[300], t=1000.0 + 300)   # 60 s after the open window's start
    assert clone.privacy_report()["windows_closed"] == 5
    # both limits: whichever comes first
    both = MedianForestClassifier(schema=schema, window_size=25, window_seconds=60.0,
                                  n_trees=2, seed=0)
    for i in range(100):
        both.learn_one(X[i], y[i], t=float(i))
    assert both.privacy_report()["windows_closed"] == 4
    with pytest.raises(ValueError, match="window_size"):
        MedianForestClassifier(schema=schema, window_size=None)
    with pytest.raises(ValueError, match="t must"):
        model.learn_one(X[0], y[0], t=float("nan"))


def test_streaming_prediction_matches_batch_prediction():
    X, y, schema = load_adult("train")
    model = MedianForestClassifier(schema=schema, window_size=3000, seed=2)
    for xi, yi in zip(X[:9000], y[:9000], strict=True):
        model.learn_one(xi, yi)
    batch = model.predict_many(X[9000:9500])
    assert list(batch) == [model.predict_one(x) for x in X[9000:9500]]
    proba = model.predict_proba_one(X[9000])
    assert sum(proba.values()) == pytest.approx(1.0)


def test_resumed_replay_equals_an_uninterrupted_one(tmp_path):
    """A file replayed in two runs (the second resuming the first's checkpoint, with the
    partial window inside it) trains exactly what one run trains: same trees, same report."""
    X, y, schema = load_adult("train")
    lines = []
    for i in range(2600):
        label = y[i] if i % 3 else None                       # a third unlabeled
        lines.append(json.dumps({"id": i, "x": X[i], "y": label}))
    lines.insert(700, '{"id": "bad", "x": {"age": "old"}}')  # a dead letter
    path = tmp_path / "records.jsonl"
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(schema.model_dump_json())
    params = {"window_size": 1000, "privacy": "labels_only", "transductive": True,
              "warmup": None}
    run = {"schema": str(schema_file), "model": "median-forest", "epsilon": 2.0, "seed": 7,
           "params": params}
    path.write_text("\n".join(lines) + "\n")
    whole = replay(str(path), checkpoint_dir=str(tmp_path / "one"), **run)
    path.write_text("\n".join(lines[:1500]) + "\n")
    first = replay(str(path), checkpoint_dir=str(tmp_path / "two"), **run)
    assert first["privacy"]["records_pending"] == 500   # 1500 messages: one window + 500
    path.write_text("\n".join(lines) + "\n")
    second = replay(str(path), checkpoint_dir=str(tmp_path / "two"), **run)
    assert second["records_this_run"] == len(lines) - 1500
    assert second["privacy"] == whole["privacy"]
    assert second["dead_letters"] == whole["dead_letters"] == 1
    assert second["unlabeled"] == whole["unlabeled"] == 2600 // 3 + 1
    assert whole["privacy"]["windows_closed"] == 2 and whole["privacy"]["records_pending"] == 601
