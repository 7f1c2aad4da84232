"""Every key of every model's public privacy report (issue 63, finding 2).

``public_report`` (what ``dpstream status --json`` and ``report.json`` show) drops the keys of
:data:`~dpstream.stream.metrics.CURATOR_REPORT_KEYS`; everything it keeps must be a DP release
or a function of public quantities. Each test here builds a model, through the service's
runner where the service runs it, on two neighbouring streams: the same messages with the same
seed, one record's label changed (a top-range label for regression) or one of its features set
to its domain's maximum. Then every key path of the public report — and of ``status``'s whole
public summary — must be equal, except the DP-noisy releases listed in :data:`NOISY` with the
reason. Until issue 63, S-GBDT's ``feature_grid.records`` (how many pool records could afford
the grid release: their budgets depend on their gradients) differed here (1689 against 1688
with one label changed; with one feature changed too, for three classes); it is now
``records_in_release``, a curator-only key, as is ``records_learned_at_release``.
"""

from __future__ import annotations

import re
import warnings

import pytest
from paths import leaf_paths

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.models.boosting.dpboost import DPBoostClassifier
from dpstream.models.boosting.sgbdt_grid import GRID_RECORDS
from dpstream.models.windows.window_exchange import WindowEnsemble
from dpstream.stream import ABALONE_SCHEMA, ADULT_SCHEMA, load_abalone, load_adult
from dpstream.stream.metrics import CURATOR_REPORT_KEYS, public_report, public_summary
from dpstream.stream.runner import Runner

#: Adult records per stream: S-GBDT releases its feature grid at its first round after
#: GRID_RECORDS arrivals, and the warm-up window forests close windows of 1,000 and 2,000
N = 3000
#: the changed record: in S-GBDT's pool at the grid release and in the forests' first window
AT = 500
#: key paths (regular expressions) whose values are DP-noisy releases, with the reason;
#: they may differ between neighbours, every other path may not
NOISY = {
    r"/feature_grid/quantiles_10_50_90/": "the feature grid: Laplace histograms (pure "
                                          "epsilon-DP), its quantiles post-processing",
    r"/attributes/weights/": "attribute relevance: Laplace histograms of (bin, class) counts",
}

ABALONE_SEX = {"features": {k: v for k, v in ABALONE_SCHEMA.model_dump()["features"].items()
                            if k != "sex"},
               "target": {"type": "categorical", "values": ["M", "F", "I"]}}


def _adult(change: str | None, start: int = 0) -> list[dict]:
    X, y, _ = load_adult("train")
    values = [{"id": i, "x": dict(X[i]), "y": y[i]} for i in range(start, start + N)]
    if change == "label":
        values[AT]["y"] = not values[AT]["y"]
    elif change == "feature":
        values[AT]["x"]["capital-gain"] = 99999.0      # the domain's maximum
    return values


def _abalone(change: str | None) -> list[dict]:
    X, y, _ = load_abalone()
    values = [{"id": i, "x": dict(X[i]), "y": y[i]} for i in range(N)]
    if change == "label":
        values[AT]["y"] = 29.0                          # the top of the target range
    elif change == "feature":
        values[AT]["x"]["height"] = 1.2                 # the domain's maximum
    return values


def _abalone_sex(change: str | None) -> list[dict]:
    X, _, _ = load_abalone()
    values = [{"id": i, "x": {k: v for k, v in X[i].items() if k != "sex"}, "y": X[i]["sex"]}
              for i in range(N)]
    if change == "label":
        values[AT]["y"] = "I" if values[AT]["y"] != "I" else "M"
    elif change == "feature":
        values[AT]["x"]["height"] = 1.2
    return values


#: service models: name -> (runner model, schema, stream, parameters)
SERVICE = {
    # (the schedule before the young phase, issue 64: the known case of
    # test_sgbdt_grid_release_counts_are_curator_only needs a record whose gradients decide
    # whether it affords the grid release, which these 3,000 records give)
    "sgbdt-binary": ("sgbdt", ADULT_SCHEMA, _adult, {"n_trees": 10, "warmup_rounds": 0,
                                                       "split_after": 0, "min_leaf_records": 20.0}),
    "sgbdt-multiclass": ("sgbdt", ABALONE_SEX, _abalone_sex, {"n_trees": 10}),
    "sgbdt-regression": ("sgbdt", ABALONE_SCHEMA, _abalone, {"n_trees": 10}),
    "median-forest": ("median-forest", ADULT_SCHEMA, _adult, {}),
    "random-forest": ("random-forest", ADULT_SCHEMA, _adult, {}),
    "rdt": ("rdt", ADULT_SCHEMA, _adult, {}),
    "greedy-forest": ("greedy-forest", ADULT_SCHEMA, _adult, {}),
}


_paths = leaf_paths


def _differ(a: dict, b: dict) -> dict[str, tuple]:
    """The key paths of ``a`` and ``b`` (two reports) with different values, less the
    DP-noisy ones (:data:`NOISY`)."""
    pa, pb = _paths(a), _paths(b)
    return {p: (pa.get(p, "<absent>"), pb.get(p, "<absent>")) for p in pa.keys() | pb.keys()
            if pa.get(p) != pb.get(p) and not any(re.search(n, p) for n in NOISY)}


def _runner(tmp_path, case: str, change: str | None, seed: int = 0) -> Runner:
    name, schema, stream, params = SERVICE[case]
    runner = Runner.create(name, schema,
                           store=CheckpointStore(tmp_path / f"{change}-{seed}"),
                           epsilon=1.0, seed=seed, params=params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner.process_many([SourceRecord(v, "t:0", i) for i, v in enumerate(stream(change))])
    return runner


@pytest.mark.parametrize("change", ["label", "feature"])
@pytest.mark.parametrize("case", sorted(SERVICE))
def test_neighbouring_streams_leave_every_public_report_key_equal(case, change, tmp_path):
    runners = {c: _runner(tmp_path, case, c) for c in (None, change)}
    try:
        summaries = {c: r.summary() for c, r in runners.items()}
    finally:
        for r in runners.values():
            r.store.close()
    for s in summaries.values():
        assert s["records_learned"] == N and s["dead_letters"] == 0   # both records valid
    reports = [public_report(s["privacy"]) for s in summaries.values()]
    assert not _differ(*reports)
    # the whole public `status` summary too: counters, offsets and the report
    assert not _differ(*(public_summary(s) for s in summaries.values()))


def test_sgbdt_grid_release_counts_are_curator_only(tmp_path):
    """The known case: which records could afford the grid release depends on their
    gradients. The curator's report tells the neighbours apart (for most seeds: with the
    exact noise of issue 65, seeds 1-5 and 7 of 0-7 do, by one to three records); the public
    one never does."""
    differ = 0
    for seed in range(4):
        runners = {c: _runner(tmp_path, "sgbdt-binary", c, seed) for c in (None, "label")}
        try:
            grids = [r.model.privacy_report()["feature_grid"] for r in runners.values()]
        finally:
            for r in runners.values():
                r.store.close()
        assert all(g["released"] and g["records_learned_at_release"] >= GRID_RECORDS
                   for g in grids)
        differ += grids[0]["records_in_release"] != grids[1]["records_in_release"]
        public = [public_report({"feature_grid": g}) for g in grids]
        assert "records_in_release" not in public[0]["feature_grid"] and not _differ(*public)
    assert differ >= 2, differ
    assert {"records_in_release", "records_learned_at_release"} <= CURATOR_REPORT_KEYS


@pytest.mark.parametrize("change", ["label", "feature"])
def test_dpboost_report_keys(change):
    reports = []
    for c in (None, change):
        model = DPBoostClassifier(schema=ADULT_SCHEMA, epsilon=1.0, seed=0, window_size=1000)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for v in _adult(c):
                model.learn_one(v["x"], v["y"])
            reports.append(model.privacy_report())   # (a short stream: it warns)
    assert reports[0]["windows"] == N // 1000 and reports[0]["trees"] > 0
    assert not _differ(*(public_report(r) for r in reports))


@pytest.mark.parametrize("change", ["label", "feature"])
def test_a_members_union_report_keys(change, tmp_path):
    """Two members of a median forest: ``a`` reads the neighbouring streams, ``b`` other
    records; each member's union report (every member's windows, its own report as
    ``local``) is public but for DP-noisy values."""
    unions = []
    for c in (None, change):
        a = _runner(tmp_path / "a", "median-forest", c)
        b = Runner.create("median-forest", ADULT_SCHEMA, store=CheckpointStore(tmp_path / f"b{c}"),
                          epsilon=1.0, seed=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            b.process_many([SourceRecord(v, "t:1", i) for i, v in enumerate(_adult(None, N))])
        members = [WindowEnsemble(a.model, "a"), WindowEnsemble(b.model, "b")]
        updates = [m.local_updates() for m in members]
        for m in members:
            for ups in updates:
                for key, state in ups.items():
                    m.adopt(key, state)
        unions.append([m.privacy_report() for m in members])
        a.store.close()
        b.store.close()
    for before, after in zip(*unions, strict=True):
        # each member's warm-up windows of 125, 250, 500 and 1,000 records closed in its 3,000
        assert len(before["windows"]) == 8 and before["members"] == ["a", "b"]
        assert not _differ(public_report(before), public_report(after))
