"""The suite's young-stream section (issue 64): the runner's curves and oracle-refit reference,
the section's tables and plots, and the cells of the full and quick profiles."""

from __future__ import annotations

import pytest

from dpstream.stream.bench import suite
from dpstream.stream.bench.young_streams import (
    RESTART,
    RESTART_AFTER,
    RESTART_N,
    YOUNG_DATASETS,
    YOUNG_MODELS,
    before_params,
    load_young,
    run_young_stream,
    young_section,
)


@pytest.fixture(scope="module")
def phishing():
    """Two models on the first 700 Phishing records, one seed, now and before."""
    out = []
    for model in ("sgbdt", "rdt"):
        for params in ({}, before_params(model, "phishing")):
            out.append(run_young_stream(model, "phishing", seeds=(0,), params=params, n=700))
    return out


def test_runner_curves_and_oracle(phishing):
    res = phishing[0]
    assert res["metric"] == "accuracy" and res["n"] == 700 and res["window"] == 125
    assert len(res["curve"]) == 700 // 125 and all(0 <= v <= 1 for v in res["curve"])
    # t = 125, 250, 500 while t < 700: the last test segment is the 200 records left
    assert [p[0] for p in res["oracle_curve"]] == [125, 250, 500]
    assert [p[2] for p in res["oracle_curve"]] == [125, 250, 200]
    weighted = sum(p[1] * p[2] for p in res["oracle_curve"]) / 575
    assert res["oracle"] == pytest.approx(weighted, abs=1e-3)
    assert res["first_batch"] == res["oracle_curve"][0][1]
    assert res["per_seed"] == [{"seed": 0, "accuracy": res["mean"]}] and res["std"] == 0
    assert res["kind"] == "dp" and res["delta"] is not None and res["params"] == {}
    assert phishing[1]["params"] == before_params("sgbdt", "phishing")


def test_runner_regression_and_errors():
    res = run_young_stream("sgbdt", "abalone", seeds=(0, 1), n=400, window=100)
    assert res["metric"] == "r2" and len(res["curve"]) == 4 and len(res["per_seed"]) == 2
    assert [p[0] for p in res["oracle_curve"]] == [125, 250]
    with pytest.raises(ValueError, match="does not run"):
        run_young_stream("rdt", "abalone", n=400)
    with pytest.raises(ValueError, match="unknown young-stream dataset"):
        run_young_stream("rdt", "iris")
    with pytest.raises(ValueError, match="n must be None"):
        run_young_stream("rdt", RESTART, n=1000)
    assert before_params("sgbdt", "abalone") == {"warmup_rounds": 0, "min_leaf_records": 20.0}


def test_restart_reuses_the_drift_scenario():
    rows, _ = load_young(RESTART, seed=0)
    assert len(rows) == RESTART_N and len(rows[0][0]) == 9
    from dpstream.stream.bench.drift_streams import load_drift_stream
    base = load_drift_stream("agrawal-4-0-abrupt")
    assert [y for _, y in rows[14_990:15_010]] == base.y[14_990:15_010]


def test_section_renders_tables_and_plots(phishing, tmp_path):
    lines = young_section(phishing, tmp_path, "img/")
    md = "\n".join(lines)
    assert md.startswith("## Young streams: the first records and every drift restart")
    assert "| model | prequential now | before | oracle-refit | batch on first 125 |" in md
    row = next(line for line in lines if line.startswith("| sgbdt |"))
    assert row.count("%") == 4
    assert (tmp_path / "bench_young_phishing.png").stat().st_size > 0
    assert "](img/bench_young_phishing.png)" in md
    restart = [dict(r, dataset=RESTART, drift_at=500, after_rows=100, n=700, window=50,
                    curve=[0.5] * 14, before_change=0.8, overall=0.7, majority_after=0.6)
               for r in phishing]
    md = "\n".join(young_section(restart, tmp_path, "img/"))
    assert "### Drift restart" in md and "60.0% after the change" in md
    assert (tmp_path / "bench_young_restart.png").stat().st_size > 0


def test_full_profile_has_young_cells_now_and_before():
    cells = [c for c in suite.build_matrix("full") if c.kind == "young"]
    pairs = {(c.name, c.dataset) for c in cells}
    assert {d for _, d in pairs} == {*YOUNG_DATASETS, RESTART}
    assert pairs >= {(m, d) for m in YOUNG_MODELS for d in (*YOUNG_DATASETS, RESTART)
                     if d != "abalone"} | {("sgbdt", "abalone")}
    assert ("rdt", "abalone") not in pairs
    for name, dataset in pairs:
        variants = {c.params for c in cells if (c.name, c.dataset) == (name, dataset)}
        assert variants == {(), tuple(sorted(before_params(name, dataset).items()))}
    assert all(c.epsilon == 1.0 and c.repeats == 3 and c.protocol == "young" for c in cells)
    quick = {c.dataset for c in suite.build_matrix("quick") if c.kind == "young"}
    assert quick == {"phishing", RESTART}
    assert not [c for c in suite.build_matrix("smoke") if c.kind == "young"]
    before = next(c for c in cells if c.params and c.name == "rdt")
    assert before.describe() == "rdt before · phishing (young) · ε=1"
    assert RESTART_AFTER == 2_000
