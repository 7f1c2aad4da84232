"""Issue 20, benchmarks: river's drifting streams in the suite (loaders, cells, the plot), the
DP-EBM peer, and the §VIII-E late-arrival scenario built as Kirschte et al.'s code builds it."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

from dpstream.stream.bench import report as bench_report
from dpstream.stream.bench import suite
from dpstream.stream.bench.baselines import baseline_available, dp_ebm_frame
from dpstream.stream.bench.drift_streams import (
    DRIFT_SCENARIOS,
    WINDOW_FORESTS,
    drift_geometry,
    load_drift_stream,
    run_drift_stream,
)
from dpstream.stream.bench.protocols import (
    _EARLY,
    best_threshold_error,
    late_batches,
    protocol_splits,
    score_model,
)
from dpstream.stream.datasets import load_abalone, load_adult


def _key(x: dict) -> tuple:
    return tuple(sorted(x.items()))


def _concepts(name: str, n: int) -> tuple[list[tuple], list[tuple]]:
    """The first ``n`` records of the scenario's old and new concept, generated on their own."""
    sc = DRIFT_SCENARIOS[name]
    old = [_key(x) for x, _ in itertools.islice(sc.generator(sc.before, sc.seed), n)]
    new = [_key(x) for x, _ in itertools.islice(sc.generator(sc.after, sc.seed + 1), n)]
    return old, new


# ----------------------------------------------------------------------------- loaders
@pytest.mark.parametrize("name", sorted(DRIFT_SCENARIOS))
def test_drift_streams_keep_to_their_declared_schema(name):
    data = load_drift_stream(name, n=600)
    assert len(data.X) == len(data.y) == 600
    assert set(data.y) <= {0, 1} and all(type(v) is int for v in data.y)
    features = data.schema.features
    for x in data.X:
        assert list(x) == list(features)
        for k, v in x.items():
            f = features[k]
            if getattr(f, "values", None) is not None:
                assert v in f.values, (k, v)
            else:
                assert f.min <= v <= f.max, (k, v)
    if not name.startswith("agrawal"):          # river's SEA and Hyperplane key by integers
        assert all(isinstance(k, int) for k in features)


@pytest.mark.parametrize("name", ["sea-abrupt", "agrawal-4-0-abrupt", "hyperplane-abrupt"])
def test_an_abrupt_drift_switches_concept_at_its_position(name):
    n = 2_000
    position, width = drift_geometry(name, n)
    assert (position, width) == (1_000, 1)
    rows = [_key(x) for x in load_drift_stream(name, n).X]
    old, new = _concepts(name, n)
    assert rows[:position] == old[:position]
    assert rows[position:] == new[:n - position]
    assert rows[position] != old[position]       # the old concept does not go on


def test_a_gradual_drift_mixes_the_concepts_over_its_width():
    n = 12_000
    position, width = drift_geometry("sea-gradual", n)
    assert (position, width) == (6_000, 2_000)
    old, new = map(set, _concepts("sea-gradual", n))
    from_new = np.array([_key(x) in new for x in load_drift_stream("sea-gradual", n).X])
    assert not (set(map(_key, load_drift_stream("sea-gradual", n).X)) - old - new)
    assert from_new[:position - width].mean() < 0.05
    assert 0.3 < from_new[position - width // 4:position + width // 4].mean() < 0.7
    assert from_new[position + width:].mean() > 0.95


def test_agrawal_scenarios_use_the_named_functions_and_seeds():
    sc = DRIFT_SCENARIOS["agrawal-4-0-gradual"]
    assert (sc.family, sc.before, sc.after, sc.width, sc.seed) == ("agrawal", 4, 0, 1_000, 21)
    assert DRIFT_SCENARIOS["agrawal-1-3-abrupt"].seed == 11
    assert drift_geometry("agrawal-1-3-gradual") == (15_000, 1_000)


# ----------------------------------------------------------------------------- cells
def test_a_drift_run_records_overall_tail_and_windowed_accuracy():
    res = run_drift_stream("sgbdt", "agrawal-4-0-abrupt", epsilon=1.0, n=1_200, repeats=2,
                           params={"drift": False})
    assert res["kind"] == "dp" and res["params"] == {"drift": False} and res["delta"] > 0
    assert (res["drift_at"], res["drift_width"], res["window"], res["tail_rows"]) == \
        (600, 1, 20, 200)
    assert len(res["curve"]) == 60 and all(0 <= v <= 1 for v in res["curve"])
    assert res["mean"] == pytest.approx(np.mean(res["curve"]), abs=1e-3)
    assert [s["seed"] for s in res["per_seed"]] == [21, 22]
    assert res["tail_accuracy"] == pytest.approx(np.mean([s["tail_accuracy"]
                                                          for s in res["per_seed"]]))
    assert 0.5 <= res["majority_tail"] <= 1 and res["rows_per_s"] > 0
    with pytest.raises(ValueError, match="give epsilon"):
        run_drift_stream("sgbdt", "sea-abrupt", n=100)
    with pytest.raises(ValueError, match="epsilon must be None"):
        run_drift_stream("arf", "sea-abrupt", epsilon=1.0, n=100)
    with pytest.raises(ValueError, match="unknown drift scenario"):
        run_drift_stream("arf", "sea", n=100)


def test_river_learners_follow_an_abrupt_sea_drift():
    res = run_drift_stream("hoeffding-tree", "sea-abrupt", n=6_000)
    assert res["kind"] == "non-private" and res["epsilon"] is None
    assert res["tail_accuracy"] > res["majority_tail"] + 0.05   # it learned the new concept


def test_profiles_hold_the_drift_cells():
    full = [c for c in suite.build_matrix("full") if c.kind == "drift"]
    assert {c.dataset for c in full} == set(DRIFT_SCENARIOS)
    assert len(full) == 8 * len(DRIFT_SCENARIOS)
    assert {(c.name, c.params, c.epsilon) for c in full} == {
        ("sgbdt", (("drift", True),), 1.0),
        ("sgbdt", (("drift", False), ("grid_share", 0.0), ("split_levels", 0)), 1.0),
        *((f, (), 1.0) for f in WINDOW_FORESTS),          # library defaults, S-GBDT's epsilon
        ("hoeffding-tree", (), None), ("arf", (), None)}
    for scenario in DRIFT_SCENARIOS:                       # every arm in every scenario
        assert len({c.name for c in full if c.dataset == scenario}) == 7
    assert all(c.n == 30_000 and c.repeats == 3 for c in full)
    quick = [c for c in suite.build_matrix("quick") if c.kind == "drift"]
    assert 0 < len(quick) < len(full) and all(c.repeats == 1 for c in quick)
    assert suite.variant_label("sgbdt", {"drift": True}) == "sgbdt adaptive"
    assert suite.variant_label("sgbdt", {"drift": False, "grid_share": 0.0,
                                          "split_levels": 0}) == "sgbdt faithful"


@pytest.mark.parametrize("forest", sorted(WINDOW_FORESTS))
def test_window_forest_arms_run_a_drift_scenario_with_their_defaults(forest, monkeypatch):
    built = []
    cls = WINDOW_FORESTS[forest]

    class Spy(cls):
        def __init__(self, **kwargs):
            built.append(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setitem(WINDOW_FORESTS, forest, Spy)
    res = run_drift_stream(forest, "sea-abrupt", epsilon=1.0, n=3_000, repeats=1)
    assert res["kind"] == "dp" and res["params"] == {} and res["epsilon"] == 1.0
    assert res["delta"] is not None and len(res["curve"]) == 60
    # only the schema, epsilon and seed: the window sizes, warm-up and drift signal are the
    # library's defaults (no DRIFT_PARAMS window override)
    assert [sorted(kw) for kw in built] == [["epsilon", "schema", "seed"]]
    model = Spy(**built[0])
    assert model.window_size == cls(schema=model.schema, epsilon=1.0).window_size
    assert 0.5 < res["tail_accuracy"] <= 1       # a warm-up window trained and predicts
    with pytest.raises(ValueError, match="give epsilon"):
        run_drift_stream(forest, "sea-abrupt", n=100)


def test_a_drift_cell_runs_through_the_suite_and_is_plotted(tmp_path, monkeypatch):
    tiny = suite.Profile((), (1.0,), {"cv": 1}, drifts=("sea-gradual",), drift_n=2_400,
                         drift_seeds=1)
    monkeypatch.setitem(suite.PROFILES, "tiny", tiny)
    results = tmp_path / "tiny.jsonl"
    rows, skipped = suite.run_suite("tiny", results)
    assert skipped == [] and len(rows) == 8
    assert {r["table"] for r in rows} == {"drift"}
    assert {r["model"] for r in rows} == {"sgbdt", *WINDOW_FORESTS, "hoeffding-tree", "arf"}
    for r in rows:
        assert {"mean", "tail_accuracy", "curve", "drift_at", "drift_width", "window",
                "rows_per_s", "majority_tail", "per_seed", "cell"} <= set(r)
        assert len(r["curve"]) == 60 and r["drift_at"] == 1_200
    docs = tmp_path / "docs" / "benchmarks.md"
    bench_report.write_report(rows, docs, profile="tiny")
    text = docs.read_text()
    assert "## Drifting streams" in text
    header = next(ln for ln in text.splitlines() if ln.startswith("| scenario | majority"))
    assert header.split(" | ")[2:] == ["sgbdt adaptive", "sgbdt faithful", "median-forest",
                                       "greedy-forest", "rdt", "random-forest",
                                       "hoeffding-tree", "arf |"]
    line = next(ln for ln in text.splitlines() if ln.startswith("| SEA variant 0 → 2"))
    assert line.count(" / ") == 8                 # overall / last records, eight arms
    png = docs.parent / "img" / "bench_drift_sea-gradual.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    assert "(img/bench_drift_sea-gradual.png)" in text
    assert "### SEA" not in text                  # drift rows make no ε table
    from matplotlib.image import imread
    assert imread(png).shape[:2] == (760, 950)    # two panels: no more than six lines in one


# ----------------------------------------------------------------------------- DP-EBM
def test_dp_ebm_runs_on_sgbdt_tables_only():
    cells = [c for c in suite.build_matrix("full") if c.name == "dp-ebm"]
    assert {(c.dataset, c.protocol) for c in cells} == {("adult", "cv"), ("abalone", "cv")}
    sgbdt = {(c.dataset, c.epsilon) for c in suite.build_matrix("full")
             if c.name == "sgbdt" and c.kind == "model" and c.dataset in ("adult", "abalone")}
    assert {(c.dataset, c.epsilon) for c in cells} == sgbdt      # equal epsilon
    assert not [c for c in suite.build_matrix("smoke") if c.name == "dp-ebm"]


def test_dp_ebm_gets_the_public_domains_not_the_data():
    X, _, schema = load_adult("all")
    frame, public = dp_ebm_frame(schema, X[:50])
    assert list(frame.columns) == public["feature_names"] == [str(k) for k in schema.features]
    for name, kind in zip(public["feature_names"], public["feature_types"], strict=True):
        feat = schema.features[name]
        if kind == "nominal":
            assert feat.values is not None and name not in public["privacy_bounds"]
        else:
            assert public["privacy_bounds"][name] == (feat.min, feat.max)
    assert public["privacy_bounds"]["age"] == (17.0, 90.0)


def test_dp_ebm_is_skipped_with_a_reason_when_interpret_is_missing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "interpret", None)      # import interpret -> ImportError
    monkeypatch.setitem(sys.modules, "interpret.privacy", None)
    reason = baseline_available("dp-ebm")
    assert reason is not None and "interpret is not installed" in reason
    cell = suite.Cell("baseline", "dp-ebm", "abalone", "cv", 1.0, folds=2)
    monkeypatch.setattr(suite, "build_matrix", lambda profile: [cell])
    rows, skipped = suite.run_suite("smoke", tmp_path / "r.jsonl")
    assert rows == [] and skipped == [(cell, reason)]


def test_dp_ebm_runs_at_the_rows_epsilon_when_installed():
    pytest.importorskip("interpret.privacy")
    from dpstream.stream.bench.baselines import run_baseline
    res = run_baseline("dp-ebm", "abalone", "cv", epsilon=2.0, folds=2)
    assert res["kind"] == "dp-anchor" and res["metric"] == "r2" and res["epsilon"] == 2.0
    assert res["delta"] == 5e-8 and np.isfinite(res["mean"])


# ----------------------------------------------------------------------------- late arrivals
def test_adult_late_batch_is_the_authors_label_split_of_each_training_fold():
    X, y, _ = load_adult("all")
    split = next(protocol_splits("cv", len(y), repeats=1, folds=5, seed=0))
    early, late = late_batches("adult-late", y, split.train)
    assert sorted(np.concatenate([early, late])) == sorted(split.train)
    assert not any(y[i] for i in early) and all(y[i] for i in late)
    # a shifted population: the late batch is older and more educated than the first one
    for col, gap in (("age", 4.0), ("education-num", 1.5)):
        first = np.mean([X[i][col] for i in early])
        second = np.mean([X[i][col] for i in late])
        assert second - first > gap, (col, first, second)
    assert 0.2 < len(late) / len(split.train) < 0.3


def test_abalone_late_batch_is_rings_ten_and_over():
    _, y, _ = load_abalone()
    split = next(protocol_splits("cv", len(y), repeats=1, folds=5, seed=0))
    early, late = late_batches("abalone-late", y, split.train)
    assert max(y[i] for i in early) <= 9 and min(y[i] for i in late) >= 10
    # the authors' cut: label scaled to [-1, 1] on the 1..29 range, early <= -0.36
    assert all((2 * (y[i] - 1) / 28 - 1 <= -0.36) == _EARLY["abalone-late"](y[i])
               for i in split.train)


def test_a_late_scenario_trains_the_early_population_first_then_the_late_batch():
    class Recorder:
        n_trees = 7

        def __init__(self):
            self.calls = []

        def learn_many(self, X, y, rounds=None):
            self.calls.append((list(y), rounds))

        def predict_many(self, X):
            return [False] * len(X)

    X, y, _ = load_adult("all")
    split = next(protocol_splits("cv", len(y), repeats=1, folds=5, seed=0))
    model = Recorder()
    err = score_model(model, X, y, split.train, split.test, "error", late=_EARLY["adult-late"])
    (first, r1), (second, r2) = model.calls
    assert (r1, r2) == (7, 7) and set(first) == {False} and set(second) == {True}
    assert len(first) + len(second) == split.train.size
    assert err == pytest.approx(np.mean([y[i] for i in split.test]))


def test_best_threshold_error_scans_the_authors_threshold_grid():
    positive = np.array([0, 0, 1, 1, 0, 1], dtype=bool)
    p = np.array([0.9, 0.91, 0.95, 0.97, 0.92, 0.99])     # every score above 0.5
    assert np.mean((p > 0.5) != positive) == 0.5
    assert best_threshold_error(positive, p) == 0.0       # threshold 0.93 separates them
    flat = np.full(6, 0.3)
    assert best_threshold_error(positive, flat) == pytest.approx(0.5)    # all "positive"
    rng = np.random.default_rng(0)
    q, t = rng.random(500), rng.random(500) < 0.3
    grid = np.arange(q.min(), q.max() + 0.005, 0.01)
    assert best_threshold_error(t, q) == pytest.approx(min(np.mean((q >= g) != t)
                                                           for g in grid))
