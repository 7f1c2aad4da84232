"""The suite's delayed-label section (issue 66): its cells, a short run of each kind of model
and the rendered table and plot."""

from __future__ import annotations

import pytest

from dpstream.stream.bench import suite
from dpstream.stream.bench.delayed import (
    DELAYED_MODELS,
    DELAYED_SCENARIOS,
    delayed_section,
    run_delayed,
)


def test_full_profile_runs_every_model_at_every_delay():
    cells = [c for c in suite.build_matrix("full") if c.kind == "delayed"]
    got = {(c.name, c.dataset, dict(c.params)["delay"]) for c in cells}
    want = {(m, d, k) for d, ks in DELAYED_SCENARIOS.items() for m in DELAYED_MODELS for k in ks}
    assert got == want and len(cells) == len(want)
    for c in cells:   # river's tree draws no noise: one run, no epsilon
        assert (c.epsilon is None) == (c.name == "hoeffding-tree")
        assert (c.repeats == 1) == (c.name == "hoeffding-tree")
        assert "(delayed)" in c.describe()   # what --only "(delayed)" selects
    assert not [c for c in suite.build_matrix("quick") if c.kind == "delayed"]


def test_a_delay_is_learned_later_and_costs_the_tree_accuracy():
    now = run_delayed("hoeffding-tree", "elec2", 0, n=3000)
    late = run_delayed("hoeffding-tree", "elec2", 1000, n=3000)
    assert now["repeats"] == late["repeats"] == 1 and now["epsilon"] is None
    assert now["params"] == {"delay": 0} and late["params"] == {"delay": 1000}
    # the first 1,000 records are predicted before anything is learned
    assert late["mean"] < now["mean"] - 0.05


@pytest.mark.parametrize("model", ["sgbdt", "rdt"])
def test_dp_models_run_delayed_over_seeds(model):
    seen = []
    res = run_delayed(model, "adult", 200, n=1500, seeds=(0, 1),
                      progress=lambda done, total: seen.append((done, total)))
    assert res["repeats"] == 2 and len(res["per_seed"]) == 2 and res["epsilon"] == 1.0
    assert 0.5 < res["mean"] < 1.0 and res["kind"] == "dp"
    assert seen[-1] == (3000, 3000)


def test_unknown_names_fail_clearly():
    with pytest.raises(ValueError, match="unknown model"):
        run_delayed("xgboost", "adult", 0)
    with pytest.raises(ValueError, match="unknown delayed-label stream"):
        run_delayed("rdt", "iris", 0)
    with pytest.raises(ValueError, match="delay must be"):
        run_delayed("rdt", "adult", -1)


def test_the_section_renders_a_table_per_stream_and_a_plot(tmp_path):
    rows = [run_delayed("hoeffding-tree", "elec2", d, n=1500) for d in (0, 48)]
    rows += [dict(r, model="rdt", epsilon=1.0, repeats=3, std=0.02) for r in rows]
    md = "\n".join(delayed_section(rows, tmp_path, "img/"))
    assert "### Elec2" in md and "| at once | d = 48 (a day) | loss |" in md
    assert md.count("| RDT |") == 1 and md.count("| river Hoeffding tree |") == 1
    assert "![prequential accuracy against the label delay](img/bench_delayed_labels.png)" in md
    assert (tmp_path / "bench_delayed_labels.png").stat().st_size > 10_000
