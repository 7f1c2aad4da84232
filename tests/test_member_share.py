"""A member's share of the stream sizes its windows and trees (issue 23): k members that each
read 1/k of the records train windows and trees of 1/k the size, the union counts each window as
its share of a whole one, and together they close windows when one process would — so the
union is as accurate as one process instead of k windows' worth of records behind it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dpstream.connectors import CheckpointStore
from dpstream.connectors.safe_state import decode, encode
from dpstream.models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
)
from dpstream.models.windows.window_exchange import (
    WindowEnsemble,
    _newest,
    export_window,
    window_share,
)
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.bench.member_sim import SERVICE_POLICY, prequential

SCALED = {
    "median": (MedianForestClassifier, {"n_trees": 5}),
    "greedy": (GreedyForestClassifier, {"n_trees": 6}),
    "random": (RandomDecisionForestClassifier, {"n_trees": 9}),
}


@pytest.fixture(scope="module")
def adult():
    X, y, _ = load_adult("all")
    return X, y


def _model(cls, seed, **kw):
    return cls(schema=ADULT_SCHEMA, epsilon=1.0, seed=seed,
               **{"window_size": 600, "warmup": None, "max_windows": 4, **kw})


@pytest.mark.parametrize("name", sorted(SCALED))
def test_a_share_scales_window_sizes_and_tree_counts(name, adult):
    X, y = adult
    cls, params = SCALED[name]
    model = _model(cls, 1, min_tree_records=None, **params)
    model.set_share(1 / 3)
    cap = math.floor(params["n_trees"] / 3 + 0.5)
    assert model.share == pytest.approx(1 / 3)
    assert (model.current_window_size, model.trees_for(200)) == (200, cap)
    for x, label in zip(X[:600], y[:600], strict=True):
        model.learn_one(x, label)
    assert model.windows_closed == 3 and model.records_trained == 600
    for win in model._windows:
        assert (win.records, len(win.trees), win.extra["share"]) == (200, cap, model.share)
    report = model.privacy_report()
    # the guarantee is the single process's: every record in one window and one tree's part
    assert report["epsilon"] == pytest.approx(1.0) and report["member_share"] == model.share
    assert "0.3333 of the stream" in report["window_policy"]


def test_warm_up_and_small_windows_scale_with_the_share(adult):
    X, y = adult
    model = MedianForestClassifier(schema=ADULT_SCHEMA, epsilon=1.0, n_trees=5,
                                   window_size=1000, warmup=100, seed=0)
    model.member_warmup = 100   # (a member's warm-up starts at 1,000 by default, issue 64)
    model.set_share(0.5)
    sizes = []
    for x, label in zip(X[:1700], y[:1700], strict=True):
        before = model.windows_closed
        model.learn_one(x, label)
        if model.windows_closed != before:
            sizes.append(model._windows[-1].records)
    assert sizes == [50, 100, 200, 400, 500]      # 1000 * 0.5 caps the warm-up's 800 * 0.5
    # min_tree_records (the median forest's 250) still caps a small window's trees; a full
    # one trains 5 * 0.5 = 2.5 -> 3
    assert [len(w.trees) for w in model._windows] == [1, 1, 1, 1, 2]
    assert model.trees_for(500) == 2 and model.trees_for(5000) == 3


def test_share_one_is_the_single_process_model(adult):
    X, y = adult
    plain, reset = (MedianForestClassifier(schema=ADULT_SCHEMA, epsilon=1.0, seed=5)
                    for _ in range(2))
    reset.set_share(0.25)
    reset.set_share(1)
    for x, label in zip(X[:4000], y[:4000], strict=True):
        plain.learn_one(x, label)
        reset.learn_one(x, label)
    probe = X[40_000:40_300]
    assert list(plain.predict_many(probe)) == list(reset.predict_many(probe))
    assert plain.privacy_report() == reset.privacy_report()
    assert all("share" not in w.extra for w in reset._windows)


def test_rdt_keeps_whole_windows(adult):
    X, y = adult
    model = _model(RDTClassifier, 2, n_trees=5)
    model.set_share(0.5)        # accepted, but RDT fills the same fixed trees in every window
    assert model.share == 1.0 and model.current_window_size == 600
    for x, label in zip(X[:600], y[:600], strict=True):
        model.learn_one(x, label)
    assert model.windows_closed == 1 and "share" not in model._windows[0].extra
    assert window_share(export_window(model, 0, member="a")) == 1.0


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, float("nan"), True, "half"])
def test_invalid_shares_are_refused(bad, adult):
    X, y = adult
    model = _model(MedianForestClassifier, 3, n_trees=3)
    with pytest.raises(ValueError, match="share"):
        model.set_share(bad)
    for x, label in zip(X[:600], y[:600], strict=True):
        model.learn_one(x, label)
    state = export_window(model, 0, member="a")
    state["extra"]["share"] = bad
    other = WindowEnsemble(_model(MedianForestClassifier, 4, n_trees=3), "b")
    with pytest.raises(ValueError, match="share of the stream"):
        other.adopt(state["key"], state)
    assert not other.windows


def test_the_union_counts_each_window_as_its_share():
    windows = [{"key": str(i), "extra": {"share": s} if s != 1.0 else {}}
               for i, s in enumerate([1.0, 1.0, 0.5, 0.5, 1 / 3, 1 / 3, 1 / 3])]
    # newest first: three thirds make one whole window, two halves another: cap 2 stops there
    assert [w["key"] for w in _newest(windows, 2)] == ["2", "3", "4", "5", "6"]
    assert [w["key"] for w in _newest(windows, 3)] == ["1", "2", "3", "4", "5", "6"]
    assert [w["key"] for w in _newest(windows[:2], 1)] == ["1"]    # whole windows: as before
    assert _newest(windows, None) == windows
    big = [{"key": "0", "extra": {}}]
    assert _newest(big, 1) == big          # at least one window votes


def test_three_members_keep_three_times_the_windows_and_agree(adult):
    X, y = adult
    members = [_model(MedianForestClassifier, 10 + m, n_trees=3, max_windows=2)
               for m in range(3)]
    for m in members:
        m.set_share(1 / 3)
    ens = [WindowEnsemble(m, f"m{i}") for i, m in enumerate(members)]
    for i, (x, label) in enumerate(zip(X[:3000], y[:3000], strict=True)):
        members[i % 3].learn_one(x, label)
    updates = [e.local_updates() for e in ens]
    for e in ens:
        for ups in updates:
            for key, state in ups.items():
                if state is not None:   # through the data-only encoding, as on the topic
                    tree, arrays = encode(state)
                    state = decode(json.loads(json.dumps(tree)), arrays)
                e.adopt(key, state)
    assert [len(m._windows) for m in members] == [2, 2, 2]   # each keeps its max_windows
    kept = [[s["key"] for s in e.kept()] for e in ens]
    assert len(kept[0]) == 6 and kept[0] == kept[1] == kept[2]   # 6 thirds = 2 whole windows
    probe = X[40_000:40_200]
    assert list(ens[0].predict_many(probe)) == list(ens[2].predict_many(probe))


def test_share_survives_a_checkpoint(adult, tmp_path):
    X, y = adult
    model = _model(MedianForestClassifier, 6, n_trees=3)
    model.set_share(0.5)
    for x, label in zip(X[:450], y[:450], strict=True):
        model.learn_one(x, label)
    with CheckpointStore(tmp_path / "c") as store:
        store.save({"model": model})
    back = CheckpointStore.read(tmp_path / "c")["model"]
    assert back.share == 0.5 and back.current_window_size == 300
    assert len(back._buffer_y) == 150 and back._windows[0].extra["share"] == 0.5
    older = model.__getstate__()
    older.pop("_share")                  # a checkpoint from before shares: one process
    again = object.__new__(MedianForestClassifier)
    again.__setstate__(older)
    assert again.share == 1.0 and again.current_window_size == 600


def test_rows_held_by_an_older_checkpoint_are_released_with_the_next_window(adult, tmp_path):
    """Members used to hold their windows' relevance rows for round(1 / share) windows; a
    checkpoint from then is released with the next window's rows, in one release, with the
    smallest epsilon they were charged. A drift reset still drops rows held unreleased."""
    X, y = adult
    model = _model(MedianForestClassifier, 7, n_trees=3)
    model.set_share(1 / 3, [0, 3], 6)
    for x, label in zip(X[:200], y[:200], strict=True):
        model.learn_one(x, label)
    assert model.windows_closed == 1 and model._relevance.releases == 1
    eps = model._relevance_split()[1]
    held = model._encoder.encode_many(X[200:250])
    model._relevance_pending = [[held, np.zeros(50, dtype=np.int64), eps / 2]]
    with CheckpointStore(tmp_path / "c") as store:
        store.save({"model": model})
    back = CheckpointStore.read(tmp_path / "c")["model"]
    seen = []
    release = back._relevance.release
    back._relevance.release = lambda X, y, epsilon, rng: (seen.append((len(y), epsilon)),
                                                          release(X, y, epsilon=epsilon,
                                                                  rng=rng))
    for x, label in zip(X[250:450], y[250:450], strict=True):
        back.learn_one(x, label)
    assert seen == [(250, eps / 2)] and "_relevance_pending" not in back.__dict__
    back._relevance_pending = [[held, np.zeros(50, dtype=np.int64), eps]]
    back._new_generation()        # a drift reset drops the old concept's unreleased rows
    assert "_relevance_pending" not in back.__dict__ and back._relevance.releases == 0


def test_members_sized_by_share_are_as_accurate_as_one_process_on_adult(adult):
    """The issue's target, in process: three members (two of six partitions each) within
    1 pp of one process on the whole Adult stream; with whole windows they fall behind,
    because up to three windows' records wait in open windows (``python
    benchmarks/members_sim.py``, four other seeds: one process 0.7998, three members 0.7961
    by share and 0.7892 with whole windows)."""
    X, y = adult
    one, shared, whole = (float(prequential(X, y, ADULT_SCHEMA, k=k, seed=3, whole=w).mean())
                          for k, w in ((1, False), (3, False), (3, True)))
    print(json.dumps({"one": one, "three_by_share": shared, "three_whole": whole}))
    assert one > 0.78
    assert shared >= one - 0.01, (one, shared)
    assert shared > whole, (shared, whole)


def test_two_members_with_the_services_defaults_are_as_accurate_as_one_process(adult):
    """Issue 62's target, in process at the median forest's own defaults (what ``serve`` and
    ``examples/scale_out.py`` run: small decaying windows, the feature grid): two members,
    each releasing its own grid and holding its windows, within 1 pp of one process on the
    first 30,000 Adult records, on average over seeds 0-5. Members without grids of their own
    scored 1.4 pp below one process on average (``python benchmarks/members_sim.py --stream
    adult --members 1,2 --seeds 8 --hold --service``: benchmark notes).

    One seed's gap spreads over about 0.6 pp (with float noise seeds 0-5 read -0.04 to
    -1.19 pp, mean -0.32; with the exact noise of issue 65 -1.52 to +0.50, mean -0.93: the
    target holds on the mean, just, and this test once took seed 3 alone)."""
    X, y = adult
    gaps, ones = [], []
    for seed in range(6):
        one, two = (float(prequential(X[:30_000], y[:30_000], ADULT_SCHEMA, k=k, seed=seed,
                                      hold=k > 1, **SERVICE_POLICY).mean()) for k in (1, 2))
        ones.append(one)
        gaps.append(two - one)
    print(json.dumps({"one": ones, "gap": gaps}))
    assert np.mean(ones) > 0.77
    assert np.mean(gaps) >= -0.01, gaps


def test_status_shows_the_member_share(tmp_path, capsys, adult):
    from dpstream.connectors import SourceRecord
    from dpstream.stream.runner import Runner
    from dpstream.stream.service import status_command

    X, y = adult
    runner = Runner.create("median-forest", ADULT_SCHEMA, store=CheckpointStore(tmp_path),
                           epsilon=1.0, seed=0, params={"window_size": 600, "warmup": None})
    runner.model.set_share(0.5)
    for i in range(400):
        runner.process(SourceRecord({"id": i, "x": X[i], "y": y[i]}, "t:0", i))
    runner.checkpoint()
    runner.store.close()
    assert status_command(str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "member share 0.5 of the partitions" in out and "1 windows closed" in out
