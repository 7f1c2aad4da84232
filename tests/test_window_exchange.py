"""Window forests across members (issue 23, item 1): export finished windows as plain data,
merge the windows of every member under one window policy, predict the same on every member."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpstream.connectors.safe_state import decode, encode
from dpstream.models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
)
from dpstream.models.windows.window_exchange import WindowEnsemble, export_window, window_key
from dpstream.stream import ADULT_SCHEMA, load_adult

FORESTS = {
    "median": (MedianForestClassifier, {"n_trees": 5}),
    "greedy": (GreedyForestClassifier, {"n_trees": 10}),
    "random": (RandomDecisionForestClassifier, {"n_trees": 10}),
    "rdt": (RDTClassifier, {"n_trees": 5}),
}
# windows whose merged score is exactly the single-process score of the same windows
EXACT = ("median", "greedy", "random")


@pytest.fixture(scope="module")
def adult():
    X, y, _ = load_adult("train")
    return X[:2400], y[:2400], X[2400:2700]


def _model(name, seed, **kw):
    cls, params = FORESTS[name]
    return cls(schema=ADULT_SCHEMA, epsilon=1.0, seed=seed,
               **{"window_size": 400, "warmup": None, "max_windows": 4, **params, **kw})


def _exchange(ensembles, through_bytes=False):
    """Every member's updates to every other member (optionally through the safe encoding)."""
    updates = [e.local_updates() for e in ensembles]
    for e in ensembles:
        for ups in updates:
            for key, state in ups.items():
                if through_bytes and state is not None:
                    tree, arrays = encode(state)
                    state = decode(json.loads(json.dumps(tree)), arrays)
                e.adopt(key, state)


@pytest.mark.parametrize("name", sorted(FORESTS))
def test_two_halves_predict_the_same_on_every_member(name, adult):
    X, y, probe = adult
    halves = [_model(name, 10 + m) for m in range(2)]
    for i, (x, label) in enumerate(zip(X, y, strict=False)):
        halves[i % 2].learn_one(x, label)     # disjoint records: partition i % 2
    ens = [WindowEnsemble(h, f"m{m}") for m, h in enumerate(halves)]
    _exchange(ens, through_bytes=True)
    assert [len(e.windows) for e in ens] == [6, 6]        # 3 windows per half, all members'
    assert len(ens[0].kept()) == 4                         # max_windows over the union
    assert [s["key"] for s in ens[0].kept()] == [s["key"] for s in ens[1].kept()]
    p0 = [ens[0].predict_one(x) for x in probe]
    assert p0 == [ens[1].predict_one(x) for x in probe]
    assert list(ens[0].predict_many(probe)) == list(ens[1].predict_many(probe)) == p0
    pr = [ens[0].predict_proba_one(x) for x in probe[:20]]
    assert pr == [ens[1].predict_proba_one(x) for x in probe[:20]]
    acc = np.mean([p == t for p, t in zip(p0, load_adult("train")[1][2400:2700], strict=False)])
    assert acc > 0.7, acc   # a working classifier, not a constant


@pytest.mark.parametrize("decay", [1.0, 0.7])
@pytest.mark.parametrize("name", EXACT)
def test_one_member_ensemble_is_the_model(name, decay, adult):
    """The union weighs windows as one process does, the window decay included."""
    X, y, probe = adult
    model = _model(name, 3, window_decay=decay)
    model.learn_many(X[:300], y[:300])     # a batch window
    for x, label in zip(X[300:1500], y[300:1500], strict=False):
        model.learn_one(x, label)
    ens = WindowEnsemble(model, "solo")
    ens.local_updates()
    assert len(ens.kept()) == len(model._windows) == 4
    np.testing.assert_allclose(
        np.array([ens.scores_row(np.array(model._encoder._row(x))) for x in probe]),
        model._scores(model._encoder.encode_many(probe)), rtol=1e-9, atol=1e-12)
    assert list(ens.predict_many(probe)) == list(model.predict_many(probe))


def test_retired_windows_leave_the_union_and_policy_keeps_the_newest(adult):
    X, y, _ = adult
    a, b = _model("median", 1, max_windows=2), _model("median", 2, max_windows=2)
    ea, eb = WindowEnsemble(a, "a"), WindowEnsemble(b, "b")
    for x, label in zip(X[:800], y[:800], strict=False):
        a.learn_one(x, label)
    _exchange([ea, eb])
    assert sorted(eb.windows) == [window_key("a", 0), window_key("a", 1)]
    for x, label in zip(X[800:1200], y[800:1200], strict=False):
        a.learn_one(x, label)                  # window 2 closes, window 0 retires in a
    ups = ea.local_updates()
    assert ups == {window_key("a", 0): None, window_key("a", 2): ups[window_key("a", 2)]}
    for key, state in ups.items():
        assert eb.adopt(key, state)
    assert sorted(eb.windows) == [window_key("a", 1), window_key("a", 2)]
    for x, label in zip(X[1200:1600], y[1200:1600], strict=False):
        b.learn_one(x, label)                  # b's window is the newest published
    _exchange([ea, eb])
    assert [s["key"] for s in ea.kept()] == [window_key("a", 2), window_key("b", 0)]
    assert ea.members() == ["a", "b"]
    assert not eb.adopt(window_key("a", 0), None)   # an unknown tombstone changes nothing


def test_exported_state_holds_releases_only(adult):
    X, y, _ = adult
    model = _model("random", 5)
    for x, label in zip(X[:800], y[:800], strict=False):
        model.learn_one(x, label)
    state = export_window(model, 1, member="m")
    assert "diagnostics" in model._windows[1].extra and "diagnostics" not in state["extra"]

    def walk(obj):
        if isinstance(obj, (np.random.Generator, np.random.BitGenerator)):
            raise AssertionError("a random generator in an exported window")
        if isinstance(obj, dict):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)
        elif hasattr(obj, "__dict__"):
            walk(vars(obj))
    walk(state)
    assert state["records"] == 400 and state["index"] == 1
    assert 0 < state["epsilon"] <= model.epsilon
    with pytest.raises(IndexError):
        export_window(model, 5, member="m")
    ens = WindowEnsemble(_model("random", 6), "n")
    ens.adopt(state["key"], state)
    report = ens.privacy_report()
    assert report["members"] == ["m"] and report["epsilon"] == state["epsilon"]
    assert report["windows"][0] | {"member": "m", "index": 1} == report["windows"][0]


def test_foreign_configurations_and_forged_keys_are_refused(adult):
    X, y, _ = adult
    model = _model("median", 1)
    for x, label in zip(X[:400], y[:400], strict=False):
        model.learn_one(x, label)
    state = export_window(model, 0, member="a")
    other = WindowEnsemble(_model("median", 2, n_trees=7), "b")
    with pytest.raises(ValueError, match="another configuration"):
        other.adopt(state["key"], state)
    same = WindowEnsemble(_model("median", 2), "b")
    with pytest.raises(ValueError, match="own key"):
        same.adopt(window_key("a", 9), state)
    with pytest.raises(ValueError, match="not a dpstream-window"):
        same.adopt(state["key"], {"format": "pickle"})
    mine = export_window(model, 0, member="b")   # "b"'s key, a window its model lacks
    assert not same.adopt(mine["key"], mine)      # (a lost checkpoint's): ignored
    with pytest.raises(ValueError, match="member id"):
        WindowEnsemble(model, "a/b")


@pytest.mark.parametrize("name", ["median", "random", "rdt"])
def test_members_draw_attributes_from_the_whole_groups_relevance_evidence(name, adult):
    """Each window's released relevance histograms travel with it: a member's evidence is
    its own releases plus those of the other members' windows in the union, a tombstone
    takes a window's back, and reading the topic again after a restart adds none twice."""
    X, y, _ = adult
    a, b = _model(name, 21, max_windows=2), _model(name, 22, max_windows=2)
    ea, eb = WindowEnsemble(a, "a"), WindowEnsemble(b, "b")
    own_a = [c.copy() for c in a._relevance.counts]
    for i, (x, label) in enumerate(zip(X[:1600], y[:1600], strict=False)):
        (a if i % 2 == 0 else b).learn_one(x, label)
    own = {m: [c.copy() for c in m._relevance.counts] for m in (a, b)}
    assert not np.allclose(own[a][0], own_a[0])       # a released evidence of its own
    _exchange([ea, eb], through_bytes=True)
    kept_b = [s for s in eb.windows.values() if s["member"] == "b"]
    from_b = [sum(np.asarray(s["relevance"][j]) for s in kept_b) for j in range(len(own[a]))]
    for j, c in enumerate(a._relevance.counts):
        np.testing.assert_allclose(c, own[a][j] + from_b[j])
    restarted = WindowEnsemble(a, "a")                 # the topic read again: no change
    for state in list(eb.windows.values()):
        restarted.adopt(state["key"], state)
    for j, c in enumerate(a._relevance.counts):
        np.testing.assert_allclose(c, own[a][j] + from_b[j])
    # b closes windows, its oldest retire
    for x, label in zip(X[1600:2400], y[1600:2400], strict=False):
        b.learn_one(x, label)
    _exchange([ea, eb])
    kept_b = [s for s in ea.windows.values() if s["member"] == "b"]
    assert len(kept_b) == 2 and set(a._foreign_relevance) == {s["key"] for s in kept_b}
    for j, c in enumerate(a._relevance.counts):
        np.testing.assert_allclose(
            c, own[a][j] + sum(np.asarray(s["relevance"][j]) for s in kept_b))


def _three_members(function, seed, n, first_seed):
    """Agrawal records and three median-forest members, each on one of three partitions."""
    from river.datasets import synth

    from dpstream.stream.bench.drift_streams import AGRAWAL_SCHEMA

    rows = list(synth.Agrawal(classification_function=function, seed=seed).take(n))
    models = [MedianForestClassifier(schema=AGRAWAL_SCHEMA, epsilon=1.0, n_trees=4,
                                     window_size=1200, warmup=None, max_windows=3,
                                     drift=False, seed=first_seed + m) for m in range(3)]
    for m, model in enumerate(models):
        model.set_share(1 / 3, [m], 3)
    return ([x for x, _ in rows], [v for _, v in rows], models,
            [WindowEnsemble(model, f"m{m}") for m, model in enumerate(models)])


def _step(models, ensembles, rows, live, departed=True):
    """The live members learn their partitions' records of ``rows`` (partition = row number
    mod 3) and exchange updates — with the tombstones of departed members (``departed``)."""
    X, y = rows
    for m in live:
        parts = models[m].partitions[0]
        idx = [i for i in range(len(X)) if i % 3 in parts]
        models[m].learn_stream([X[i] for i in idx], [y[i] for i in idx])
    updates = [{**ensembles[m].local_updates(),
                **(ensembles[m].departed_updates() if departed else {})} for m in live]
    for m in live:
        for ups in updates:
            for key, state in ups.items():
                ensembles[m].adopt(key, state)


@pytest.mark.parametrize("departed", [True, False])
def test_a_member_that_left_is_retired_and_does_not_vote_after_a_drift(departed):
    """Three members on three partitions; m2 leaves and its partition goes to m0. Once newer
    windows push m2's out of the vote, the others retire them (tombstones), so after both
    live members retire their old concept (a drift generation) only the new concept votes —
    as in one process. Without the tombstones m2's old windows vote again (control)."""
    X, y, models, ens = _three_members(function=1, seed=3, n=27_000, first_seed=20)
    for i in range(0, 12_000, 300):
        _step(models, ens, (X[i:i + 300], y[i:i + 300]), (0, 1, 2), departed)
    assert {s["member"] for s in ens[0].kept()} == {"m0", "m1", "m2"}
    models[0].set_share(2 / 3, [0, 2], 3)          # m2 left; its partition is m0's now
    for i in range(12_000, 13_200, 300):
        _step(models, ens, (X[i:i + 300], y[i:i + 300]), (0, 1), departed)
    # m2's windows still vote: it is not retired before newer windows push them all out
    assert "m2" in {s["member"] for s in ens[0].kept()}
    assert any(k.startswith("m2/") for k in ens[1].windows)
    for i in range(13_200, 21_000, 300):
        _step(models, ens, (X[i:i + 300], y[i:i + 300]), (0, 1), departed)
    assert "m2" not in {s["member"] for s in ens[0].kept()}
    for m in (0, 1):
        models[m]._new_generation()   # a drift: the old concept's windows retire
    for i in range(21_000, 22_500, 300):
        _step(models, ens, (X[i:i + 300], y[i:i + 300]), (0, 1), departed)
    voting = [ens[0].kept(), ens[1].kept()]
    assert [(s["member"], s["index"]) for s in voting[0]] == \
        [(s["member"], s["index"]) for s in voting[1]]
    assert 1 in {s["generation"] for s in voting[0]}
    if departed:
        assert not any(k.startswith("m2/") for e in ens[:2] for k in e.windows)
        assert "m2" not in {s["member"] for s in voting[0]}
    else:   # the control: the departed member's old-concept windows vote again
        assert "m2" in {s["member"] for s in voting[0]}


def test_a_stalled_member_keeps_its_windows_and_a_reexport_keeps_its_time():
    """A member that publishes nothing for a long time but keeps its partition is not
    retired by the others (its windows fill what the two others' cannot); a member that
    exports its windows again (after a restart) gives them the time they were first
    published, so an old window never comes back newest."""
    X, y, models, ens = _three_members(function=2, seed=4, n=15_000, first_seed=30)
    for i in range(0, 3_000, 300):
        _step(models, ens, (X[i:i + 300], y[i:i + 300]), (0, 1, 2))
    first = {k: s["published"] for k, s in ens[2].windows.items() if k.startswith("m2/")}
    for i in range(3_000, 15_000, 300):   # m2 stalls; its partition stays its own
        _step(models, ens, (X[i:i + 300], y[i:i + 300]), (0, 1))
    assert set(first) <= set(ens[0].windows) and set(first) <= set(ens[1].windows)
    again = WindowEnsemble(models[2], "m2").local_updates()   # m2 restarted
    assert {k: s["published"] for k, s in again.items()} == first


def test_window_decay_enters_the_configuration_digest_only_when_it_changes_the_vote():
    """Members from before ``window_decay`` (no such parameter: the vote of decay 1) still
    match a member at decay 1; a member that decays its windows is another configuration."""
    from dpstream.models.windows.window_exchange import window_config
    old = _model("median", 0, window_decay=1.0)
    del old.__dict__["window_decay"]          # as a model pickled before the parameter
    assert window_config(old) == window_config(_model("median", 1, window_decay=1.0))
    assert window_config(old) != window_config(_model("median", 1, window_decay=0.9))


@pytest.mark.parametrize("name", EXACT)
def test_consecutive_batches_through_a_members_views_get_their_own_scores(name, adult):
    """A member's window views start as copies of the model: each batch they score, one
    after another and between the model's own batches, gets its own rows' predictions (a
    score memo that went with the copies once answered a view with another batch's
    scores)."""
    X, y, probe = adult
    model = _model(name, 5)
    model.learn_stream(X[:1600], y[:1600])
    model.predict_many(probe[:150])   # the model scores a batch before the views exist
    ens = WindowEnsemble(model, "solo")
    ens.local_updates()
    for a, b in ((0, 150), (150, 300), (0, 150), (75, 225)):
        batch = probe[a:b]
        model.predict_many(batch)
        assert list(ens.predict_many(batch)) == [ens.predict_one(x) for x in batch]
