"""Issue 21, benchmarks: speed and memory rows of every stream model with its library defaults,
each measured in a fresh process, and their table on the benchmarks page."""

from __future__ import annotations

import pytest

from dpstream.stream.bench import report as bench_report
from dpstream.stream.bench import suite
from dpstream.stream.bench.speed import SPEED_MODELS, run_speed, run_speed_isolated


def test_every_stream_model_has_a_speed_row_in_the_full_profile():
    cells = [c for c in suite.build_matrix("full") if c.kind == "speed"]
    assert {c.name for c in cells} == {"sgbdt", "dpboost", "median-forest", "greedy-forest",
                                      "rdt", "random-forest", "hoeffding-tree", "arf"}
    assert set(SPEED_MODELS) == {c.name for c in cells}
    assert all(c.dataset == "adult" and c.n is None and c.params == () for c in cells)
    assert {c.name for c in cells if c.epsilon is None} == {"hoeffding-tree", "arf"}
    assert {c.epsilon for c in cells if c.epsilon is not None} == {1.0}


def test_a_speed_run_uses_the_estimators_defaults():
    res = run_speed("greedy-forest", "adult", epsilon=1.0, n=1_500)
    assert res["kind"] == "dp" and res["params"] == {} and res["n"] == 1_500
    assert res["estimator"] == "GreedyForestClassifier" and res["batch_predict"] == "predict_many"
    assert res["rows_per_s"] > 0 and res["predict_many_rows_per_s"] > 0
    assert 0 < res["rss_start_mib"] <= res["peak_rss_mib"]
    with pytest.raises(ValueError, match="give epsilon"):
        run_speed("rdt", "adult", n=100)
    with pytest.raises(ValueError, match="epsilon must be None"):
        run_speed("arf", "adult", epsilon=1.0, n=100)
    with pytest.raises(ValueError, match="regression"):
        run_speed("sgbdt", "abalone", epsilon=1.0, n=100)


def test_speed_cells_run_in_their_own_process_and_render(tmp_path, monkeypatch):
    tiny = suite.Profile((), (1.0,), {"cv": 1}, speeds=("median-forest", "hoeffding-tree"),
                         speed_n=800)
    monkeypatch.setitem(suite.PROFILES, "tiny", tiny)
    rows, skipped = suite.run_suite("tiny", tmp_path / "tiny.jsonl")
    assert skipped == [] and [r["model"] for r in rows] == ["median-forest", "hoeffding-tree"]
    for r in rows:
        assert r["table"] == "speed" and r["n"] == 800 and r["peak_rss_scope"] == "subprocess"
        # the child's own figures, not overwritten by the suite's process
        assert 0 < r["rss_start_mib"] <= r["peak_rss_mib"] and r["rss_end_mib"] > 0
    assert rows[1]["batch_predict"].startswith("loop")
    docs = tmp_path / "docs" / "benchmarks.md"
    bench_report.write_report(rows, docs, profile="tiny")
    text = docs.read_text()
    assert "## Speed and memory with the library defaults" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| median-forest |"))
    assert "`MedianForestClassifier`" in line and line.count("rows/s") == 2
    assert line.count("MiB") == 4                  # start, peak, added, end
    png = docs.parent / "img" / "bench_speed_adult.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "### Adult" not in text                 # speed rows make no ε or stream table


def test_an_isolated_run_reports_a_failure():
    with pytest.raises(RuntimeError, match="speed run of"):
        run_speed_isolated("sgbdt", "abalone", epsilon=1.0, n=100)
