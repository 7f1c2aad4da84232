"""The benchmark suite's harness (issue 7): splits shared with the baselines, the DP Mean
baseline, progressive validation, resumable results, the rendered page, and a CI-sized run
of the whole harness (the ``smoke`` profile) through the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from stattest import halfline_events, outcome_events, privacy_loss_lower_bound

from dpstream.stream.bench import BENCH_MODELS, RESULT_FIELDS, protocol_splits, suite
from dpstream.stream.bench import report as bench_report
from dpstream.stream.bench.baselines import DPMean, baseline_available, run_baseline
from dpstream.stream.bench.throughput import run_stream
from dpstream.stream.cli import main

CLASSES = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
           "target": {"type": "categorical", "values": ["x", "y", "z"]}}
NUMERIC = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
           "target": {"type": "numeric", "min": 0, "max": 10}}


# ----------------------------------------------------------------------------- splits
@pytest.mark.parametrize("protocol", ["cv", "kfold"])
def test_cross_validation_tests_every_row_once_per_repeat(protocol):
    splits = list(protocol_splits(protocol, 103, repeats=2, folds=5, seed=3))
    assert [s.index for s in splits] == list(range(10))
    for r in range(2):
        tested = np.concatenate([s.test for s in splits[5 * r:5 * r + 5]])
        assert sorted(tested) == list(range(103))
        for s in splits[5 * r:5 * r + 5]:
            assert not set(s.train) & set(s.test)
            assert s.train.size + s.test.size == 103
    # repeats draw different partitions
    assert not np.array_equal(splits[0].test, splits[5].test)


def test_holdout_splits_and_labeled_share_are_seeded():
    a = list(protocol_splits("holdout", 1000, repeats=3, folds=1, seed=1, labeled_fraction=0.2))
    b = list(protocol_splits("holdout", 1000, repeats=3, folds=1, seed=1, labeled_fraction=0.2))
    for s, t in zip(a, b, strict=True):
        assert (s.train.size, s.test.size) == (900, 100)
        assert np.array_equal(s.test, t.test) and np.array_equal(s.labeled, t.labeled)
        assert 0.15 < s.labeled.mean() < 0.25
    assert not np.array_equal(a[0].test, a[1].test)
    assert next(protocol_splits("holdout", 50, repeats=1, folds=1)).labeled is None


# ----------------------------------------------------------------------------- DP Mean
def test_dp_mean_charges_its_budget_and_finds_the_majority():
    m = DPMean(CLASSES, epsilon=5.0, seed=0).fit(["y"] * 60 + ["x"] * 30 + ["z"] * 10)
    assert m.value_ == "y"
    assert m.ledger.spent == pytest.approx(5.0)
    assert [h["label"] for h in m.ledger.history] == [
        "DP mean: Laplace class histogram"]
    r = DPMean(NUMERIC, epsilon=2.0, seed=0).fit([7.0] * 2000)
    assert r.value_ == pytest.approx(7.0, abs=0.05)
    assert r.ledger.spent == pytest.approx(2.0)
    assert len(r.ledger.history) == 2
    # a tiny budget on few records: the released mean is noisy, always inside the range
    vals = {round(DPMean(NUMERIC, epsilon=0.05, seed=s).fit([5.0] * 5).value_, 6)
            for s in range(30)}
    assert len(vals) > 5 and all(0 <= v <= 10 for v in vals)   # many clamp to 0 or 10


@pytest.mark.slow
def test_dp_mean_classification_is_epsilon_dp():
    """Neighbours: one more "x" tips a 10-10 tie; the released class's privacy loss <= ε."""
    eps, n = 1.0, 20_000
    base = ["x"] * 10 + ["y"] * 10
    idx = {"x": 0, "y": 1, "z": 2}
    a = np.array([idx[DPMean(CLASSES, eps, seed=s).fit(base + ["x"]).value_]
                  for s in range(n)])
    b = np.array([idx[DPMean(CLASSES, eps, seed=n + s).fit(base).value_] for s in range(n)])
    loss = privacy_loss_lower_bound(a, b, outcome_events(3))
    assert loss <= eps
    assert loss > 0.05        # the test sees the mechanism's dependence on the data


@pytest.mark.slow
def test_dp_mean_regression_is_epsilon_dp():
    """Neighbours: a record at the top of the range added to five at the bottom."""
    eps, n = 1.0, 20_000
    a = np.array([DPMean(NUMERIC, eps, seed=s).fit([0.0] * 5 + [10.0]).value_
                  for s in range(n)])
    b = np.array([DPMean(NUMERIC, eps, seed=n + s).fit([0.0] * 5).value_ for s in range(n)])
    loss = privacy_loss_lower_bound(a, b, halfline_events(np.linspace(0.5, 9.5, 19)))
    assert 0.05 < loss <= eps


# ----------------------------------------------------------------------------- baselines
def test_baselines_refuse_a_wrong_epsilon_or_task():
    with pytest.raises(ValueError, match="epsilon must be None"):
        run_baseline("hist-gradient-boosting", "iris", "holdout", epsilon=1.0)
    with pytest.raises(ValueError, match="epsilon must be given"):
        run_baseline("dp-mean", "iris", "holdout")
    with pytest.raises(ValueError, match="unknown baseline"):
        run_baseline("xgboost", "iris", "holdout")
    if baseline_available("diffprivlib-random-forest") is None:
        with pytest.raises(ValueError, match="regression"):
            run_baseline("diffprivlib-random-forest", "abalone", "cv", epsilon=1.0, folds=2)


def test_baselines_train_on_the_labeled_rows_only():
    full = run_baseline("sklearn-random-forest", "syn5d", "holdout", repeats=2)
    few = run_baseline("sklearn-random-forest", "syn5d", "holdout", repeats=2,
                       labeled_fraction=0.01)
    assert full["labeled_fraction"] == 1.0 and few["labeled_fraction"] == 0.01
    assert full["mean"] > few["mean"]     # 27 labels instead of 2,700
    assert sorted(set(RESULT_FIELDS) - set(full)) == []


# ----------------------------------------------------------------------------- streams
def test_stream_runs_dp_models_and_river_learners():
    res = run_stream("median-forest", "adult", epsilon=1.0, n=600, seed=0)
    assert res["kind"] == "dp" and res["params"] == {"window_size": 120, "max_windows": 2}
    assert res["rows_per_s"] > 0 and res["predict_many_rows_per_s"] > 0
    assert res["batch_predict"] == "predict_many"
    arf = run_stream("arf", "abalone", n=200, seed=0)      # categorical "sex" one-hot for river
    assert arf["metric"] == "r2" and arf["batch_predict"].startswith("loop")
    with pytest.raises(ValueError, match="give epsilon"):
        run_stream("rdt", "adult", n=100)
    with pytest.raises(ValueError, match="unknown stream model"):
        run_stream("xgboost", "adult", epsilon=1.0, n=100)
    sharp = run_stream("rdt-sharp", "adult", epsilon=1.0, n=500, seed=0)
    assert sharp["labeled_fraction"] == 0.2 and 0.5 < sharp["mean"] <= 1
    with pytest.raises(ValueError, match="cannot learn"):
        run_stream("rdt", "abalone", epsilon=1.0, n=100)


@pytest.mark.filterwarnings("ignore::dpstream.models.SmallStreamWarning")  # 2,000 records
def test_elec2_stream_cell_carries_its_curve_and_the_page_plots_it(tmp_path):
    """The Elec2 stream in time order: each line carries its prequential accuracy curve, and
    the page draws every model's curve (river's dashed); a line without one (a results file
    from before the curves) still renders, with no curve."""
    rows = [run_stream("rdt", "elec2", epsilon=1.0, n=2000, seed=0),
            run_stream("hoeffding-adaptive-tree", "elec2", n=2000, seed=0)]
    for r in rows:
        assert r["protocol"] == "progressive validation, 2000 records, in time order"
        assert [p[0] for p in r["accuracy_curve"]] == [500, 1000, 1500, 2000]
        assert all(0 <= p[1] <= 1 for p in r["accuracy_curve"]) and r["curve_window"] == 1000
    assert rows[1]["kind"] == "non-private" and rows[1]["mean"] > 0.6
    curve = json.loads(json.dumps(rows[0]["accuracy_curve"]))    # as a results file gives it
    assert curve == rows[0]["accuracy_curve"]
    old = {k: v for k, v in rows[0].items() if k not in ("accuracy_curve", "curve_window",
                                                          "curve_every")}
    for r in rows:
        r.update({"table": "stream", "cell": r["model"], "wall_s": 1.0})
    img = tmp_path / "img"
    md = bench_report.render_markdown(rows, img_dir=img)
    png = img / "bench_stream_elec2_accuracy.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    assert "(img/bench_stream_elec2_accuracy.png)" in md
    assert "the last 1,000 predictions" in md and "### Elec2" in md
    old.update({"table": "stream", "cell": "old", "wall_s": 1.0})
    md = bench_report.render_markdown([old], img_dir=tmp_path / "old")
    assert "_accuracy.png" not in md and "| rdt | dp | 1 |" in md
    assert not (tmp_path / "old" / "bench_stream_elec2_accuracy.png").exists()


# ----------------------------------------------------------------------------- the matrix
def test_full_matrix_covers_every_model_and_every_quoted_epsilon():
    cells = suite.build_matrix("full")
    keys = {c.key() for c in cells}
    assert len(keys) == len(cells)
    models = {c.name for c in cells if c.kind == "model"}
    assert models == set(BENCH_MODELS)
    for (model, params, dataset, lf), points in suite.PAPER.items():
        for eps in points:
            assert any(c.kind == "model" and c.name == model and c.params == params
                       and c.dataset == dataset and c.labeled_fraction == lf
                       and c.epsilon == eps for c in cells), (model, dataset, eps)
    for (model, params, dataset, _lf), points in suite.RELEASED.items():
        for eps in points:   # the S-GBDT authors' released results: their ε too
            assert any(c.kind == "model" and c.name == model and c.params == params
                       and c.dataset == dataset and c.epsilon == eps for c in cells), \
                (model, params, dataset, eps)
    eps = {c.epsilon for c in cells if c.kind == "model"}
    assert set(suite.GRID) <= eps and min(eps) == 0.01 and max(eps) == 10
    quick = {c.epsilon for c in suite.build_matrix("quick") if c.kind == "model"}
    assert 0.01 not in quick and 0.03 not in quick   # the released ε are full-profile only
    kinds = {c.name for c in cells if c.kind == "baseline"}
    assert kinds == {"hist-gradient-boosting", "sklearn-random-forest",
                     "diffprivlib-random-forest", "dp-ebm", "dp-mean"}
    assert {c.name for c in cells if c.kind == "stream"} >= {"hoeffding-tree", "arf"}
    elec2 = {(c.name, c.epsilon, c.n) for c in cells if c.kind == "stream"
             and c.dataset == "elec2"}
    adult = {c.name for c in cells if c.kind == "stream" and c.dataset == "adult"
             and c.epsilon is not None}
    assert elec2 == {(m, 1.0, None) for m in adult} | {
        (m, None, None) for m in ("hoeffding-tree", "hoeffding-adaptive-tree", "arf")}


def test_quick_profile_has_the_rows_the_issue_names():
    names = {c.name for c in suite.build_matrix("quick")}
    assert {"sgbdt", "median-forest", "random-forest", "diffprivlib-random-forest",
            "hist-gradient-boosting", "sklearn-random-forest", "hoeffding-tree",
            "arf"} <= names


# ----------------------------------------------------------------------------- harness
@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One run of the smoke profile through the CLI (the CI-sized suite)."""
    root = tmp_path_factory.mktemp("suite")
    results, docs = root / "results.jsonl", root / "docs" / "benchmarks.md"
    argv = ["suite", "--profile", "smoke", "--results", str(results), "--docs", str(docs)]
    assert main(argv) == 0
    return root, results, docs, argv


def test_smoke_run_writes_one_complete_line_per_cell(smoke):
    _, results, _, _ = smoke
    rows = suite.load_results(results)
    cells = suite.build_matrix("smoke")
    expected = [c for c in cells if c.kind != "baseline"
                or baseline_available(c.name) is None]
    assert len(rows) == len(expected)
    assert [r["cell"] for r in rows] == [c.key() for c in expected]
    for r in rows:
        assert set(RESULT_FIELDS) <= set(r)
        assert r["peak_rss_mib"] > 10 and r["rows_per_s"] > 0
        assert 0 < r["rss_start_mib"] <= r["peak_rss_mib"]
        assert r["profile"] == "smoke" and r["machine"] and r["date"]
        assert np.isfinite(r["mean"])
    kinds = {r["kind"] for r in rows}
    assert {"dp", "non-private", "dp-baseline"} <= kinds
    streams = [r for r in rows if r["table"] == "stream"]
    assert {r["model"] for r in streams} == {"sgbdt", "hoeffding-tree", "arf"}
    assert all(r["predict_many_rows_per_s"] > 0 for r in streams)


def test_smoke_run_resumes_without_rerunning_and_survives_a_torn_line(smoke):
    _, results, _, _ = smoke
    before = results.read_text()
    started = []
    rows, _ = suite.run_suite("smoke", results, on_start=lambda c, i, n: started.append(c))
    assert started == [] and results.read_text() == before
    # a crash mid-write leaves a torn last line, and the last cell lost: it runs again
    lines = before.splitlines()
    results.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:25])
    rows, _ = suite.run_suite("smoke", results, on_start=lambda c, i, n: started.append(c))
    assert [c.key() for c in started] == [json.loads(lines[-1])["cell"]]
    assert len(rows) == len(lines)


def test_smoke_page_has_tables_and_real_plots(smoke):
    _, _, docs, _ = smoke
    text = docs.read_text()
    assert text.startswith("# Benchmarks")
    assert "### Iris" in text and "### Abalone" in text and "### Abalone stream" in text
    assert "| 1 | " in text and "hist-gradient-boosting" in text
    imgs = sorted((docs.parent / "img").glob("*.png"))
    assert [p.name for p in imgs] == ["bench_abalone_cv.png", "bench_iris_holdout.png",
                                      "bench_stream_abalone.png"]
    for p in imgs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5_000
        assert f"(img/{p.name})" in text
    missing = [ln for ln in text.splitlines() if ln.startswith("| diffprivlib-random-forest |")]
    if baseline_available("diffprivlib-random-forest") is None:
        # no table row says *skipped* (the page's prose explains what a skipped cell looks like)
        skipped = [ln for ln in text.splitlines() if ln.startswith("|") and "skipped" in ln]
        assert missing == [] and "diffprivlib-random-forest" in text and skipped == []
    else:                     # the page says what it could not measure, why, and the fix
        assert len(missing) == 1 and "diffprivlib is not installed" in missing[0]
        assert "skipped: diffprivlib is not installed: `pip install 'dpstream[bench]'`" \
            in missing[0]
        assert "| 1 | " in text and "| skipped |" in text   # its column in the Iris table


def test_cli_lists_cells_and_renders_without_running(smoke, capsys):
    root, results, docs, argv = smoke
    assert main(["suite", "--profile", "smoke", "--results", str(results), "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == len(suite.build_matrix("smoke"))
    assert sum(line.startswith("done") for line in listed) == len(suite.load_results(results))
    docs.unlink()
    assert main(argv + ["--render-only"]) == 0
    assert docs.exists()
    with pytest.raises(SystemExit):
        main(["suite", "--profile", "smoke", "--results", str(root / "none.jsonl"),
              "--docs", str(root / "x.md"), "--render-only"])


def test_paper_rows_show_ratio_and_verdict_in_the_metric_direction():
    def row(mean, eps):
        return {"model": "sgbdt", "dataset": "adult", "epsilon": eps, "metric": "error",
                "mean": mean, "std": 0.01, "repeats": 1, "folds": 5, "params": {},
                "labeled_fraction": 1.0, "kind": "dp", "table": "cv", "protocol": "5-fold CV"}
    md = bench_report.render_markdown([row(0.16, 0.54), row(0.20, 0.15)])
    assert "| sgbdt | 0.54 | 16.00% ± 1.00 | 17.10% | 0.94 | ✓ |" in md
    assert "| sgbdt | 0.15 | 20.00% ± 1.00 | 18.10% | 1.10 | ✗ |" in md


def test_sgbdt_rows_show_the_authors_released_results_beside_the_papers():
    def row(mean, eps, dataset="adult", metric="error"):
        return {"model": "sgbdt", "dataset": dataset, "epsilon": eps, "metric": metric,
                "mean": mean, "std": 0.01, "repeats": 1, "folds": 5, "params": {},
                "labeled_fraction": 1.0, "kind": "dp", "table": "cv", "protocol": "5-fold CV"}
    md = bench_report.render_markdown([row(0.169, 0.1), row(0.25, 0.01)])
    assert "authors' released | beats released |" in md
    # no paper figure at these ε: the released one alone, in the metric's direction
    assert "| sgbdt | 0.1 | 16.90% ± 1.00 | — | — |  | 17.29% | ✓ |" in md
    assert "| sgbdt | 0.01 | 25.00% ± 1.00 | — | — |  | 23.60% | ✗ |" in md
    md = bench_report.render_markdown([row(0.30, 0.2, "abalone", "r2"),
                                       row(0.40, 0.15, "abalone", "r2")])
    assert "| sgbdt | 0.2 | 0.300 ± 0.010 | — | — |  | 0.317 | ✗ |" in md
    assert "| 0.390 | 1.03 | ✓ | — |  |" in md    # a paper figure, no released one
