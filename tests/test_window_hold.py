"""A held window (issue 23, relevance before trees): its relevance is released and charged at
the close, its trees grow later with the evidence that arrived meanwhile; members announce the
release, then the window carries it; the hold waits for the others' releases of the stretch."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpstream.connectors.safe_state import decode, encode
from dpstream.models import MedianForestClassifier, RandomDecisionForestClassifier, RDTClassifier
from dpstream.models.windows.window_exchange import (
    RELEVANCE_FORMAT,
    WindowEnsemble,
    close_open_window,
    relevance_key,
)
from dpstream.stream import ADULT_SCHEMA, load_adult

FORESTS = {"median": MedianForestClassifier, "random": RandomDecisionForestClassifier,
           "rdt": RDTClassifier}


@pytest.fixture(scope="module")
def adult():
    X, y, _ = load_adult("train")
    return X[:1200], y[:1200]


def _model(name="median", seed=0, **kw):
    return FORESTS[name](schema=ADULT_SCHEMA, epsilon=1.0, seed=seed,
                         **{"window_size": 300, "warmup": None, "drift": False, **kw})


def _learn(model, X, y):
    for x, label in zip(X, y, strict=True):
        model.learn_one(x, label)


@pytest.mark.parametrize("name", sorted(FORESTS))
def test_a_held_window_releases_and_charges_at_the_close_and_grows_later(name, adult):
    X, y = adult
    plain, held = _model(name), _model(name)
    held.hold = True
    _learn(plain, X[:300], y[:300])
    _learn(held, X[:300], y[:300])
    assert plain.windows_closed == 1 and held.windows_closed == 0
    assert held.held["index"] == 0 and held.held_records == 300 and held._windows == []
    assert held._relevance.releases == 1 and held.training_rounds == 1
    # charged with its window, exactly as the window trained at once
    assert held._ledger._partitions == plain._ledger._partitions
    assert [h.any() for h in held.held["relevance"]] == [True] * len(held.held["relevance"])
    assert held.grow_held() and not held.grow_held()
    assert held.windows_closed == 1 and held._relevance.releases == 1   # not released again
    assert held._windows[0].relevance is not None and len(held._windows[0].trees) > 0
    assert held._ledger._partitions == plain._ledger._partitions
    rep_p, rep_h = plain.privacy_report(), held.privacy_report()
    for k in ("epsilon", "windows_closed", "records_learned", "ledger_partitions", "trees"):
        assert rep_p[k] == rep_h[k], k


def test_the_next_close_a_drift_and_a_handoff_grow_the_held_window(adult):
    X, y = adult
    model = _model()
    model.hold = True
    _learn(model, X[:600], y[:600])      # the second close grows the first window
    assert model.windows_closed == 1 and model.held["index"] == 1
    model._new_generation()              # a drift detection: the held window grows first
    assert model.windows_closed == 2 and model.held is None and model.generation == 1
    _learn(model, X[600:750], y[600:750])
    assert close_open_window(model)      # a revoke: nothing stays held
    assert model.windows_closed == 3 and model.held is None and model._buffer_y == []
    assert model.generation_windows == 1   # the new generation's one window, counted once


def test_batch_mode_trains_at_once_and_the_report_counts_held_records(adult):
    X, y = adult
    model = _model()
    model.hold = True
    _learn(model, X[:350], y[:350])
    report = model.privacy_report()
    assert report["records_held"] == 300 and report["records_pending"] == 50
    model.learn_many(X[350:650], y[350:650])   # batch mode: one window, trained now
    assert model.held is None and model.windows_closed == 2
    assert "records_held" not in model.privacy_report()


def test_a_held_window_survives_a_checkpoint_and_a_dropped_one_gives_back_its_counts(adult):
    X, y = adult
    model = _model()
    model.hold = True
    _learn(model, X[:400], y[:400])
    tree, arrays = encode(model)
    back = decode(json.loads(json.dumps(tree)), arrays)
    assert back.held["index"] == 0 and back.held_records == 300
    before = [c.copy() for c in back._relevance.counts]
    released = back.held["relevance"]
    assert back.drop_held(published=False) == 300
    assert back.records_seen == 100 and back.held is None and back._relevance.releases == 0
    for c, b, r in zip(back._relevance.counts, before, released, strict=True):
        assert np.allclose(c, b - r)                    # a release nobody saw: taken back
    assert model.drop_held(published=True) == 300 and model._relevance.releases == 1
    assert model._ledger.spent > 0                      # the charge stays: an upper bound


@pytest.mark.parametrize("published", [False, True])
def test_training_goes_on_after_a_dropped_held_window(adult, published):
    """The documented restart path (issue 62): a member drops its checkpoint's held window
    and trains on. The dropped window's charge stays in the ledger's maximum, its index is
    taken by the next window, which charges afresh (it raised BudgetExceededError: the next
    close charged ``window-N/tree-t`` a second time)."""
    X, y = adult
    model = _model()
    model.hold = True
    _learn(model, X[:400], y[:400])
    spent = model._ledger.spent
    assert model.drop_held(published=published) == 300
    _learn(model, X[400:1300], y[400:1300])             # two more windows close
    assert model.windows_closed >= 1 and model.held is not None
    assert model.grow_held()
    report = model.privacy_report()
    assert report["epsilon"] == pytest.approx(spent) and report["epsilon"] <= model.epsilon
    assert model.predict_one(X[0]) in (False, True)


def test_a_marked_window_releases_no_relevance(adult):
    X, y = adult
    model = _model()
    model.hold = True
    model.relevance_spent = True
    _learn(model, X[:300], y[:300])
    assert model.held["relevance"] is None and model._relevance.releases == 0
    _learn(model, X[300:600], y[300:600])               # the mark was for one window
    assert model.held["relevance"] is not None and model._relevance.releases == 1
    plain = _model()                                    # also without a hold
    plain.relevance_spent = True
    _learn(plain, X[:300], y[:300])
    assert plain._relevance.releases == 0 and plain._windows[0].relevance is None


def _pair(adult):
    models = [_model(seed=s) for s in (1, 2)]
    for m, model in enumerate(models):
        model.set_share(0.5, [m], 2)
        model.hold = True
    return models, [WindowEnsemble(model, name) for model, name in zip(models, "ab",
                                                                        strict=True)]


def _announced(adult):
    """a holds its first window and announces it; b adopts the release; a grows it."""
    X, y = adult
    (a, b), (ea, eb) = _pair(adult)
    for i, (x, label) in enumerate(zip(X[:150], y[:150], strict=True)):
        a.learn_one(x, label)
        ea.observe(i)
    first = ea.local_updates()
    eb.adopt(relevance_key("a", 1), first[relevance_key("a", 1)])
    counts = [c.copy() for c in b._relevance.counts]
    a.grow_held()
    return first, ea.local_updates(), ea, eb, counts


@pytest.mark.parametrize("tombstone_first", [False, True])
def test_members_announce_a_held_release_then_the_window_carries_it(adult, tombstone_first):
    first, ups, ea, eb, counts = _announced(adult)
    key = relevance_key("a", 1)
    assert list(first) == [key] and first[key]["format"] == RELEVANCE_FORMAT
    assert first[key]["until"] == 149 and first[key]["partitions"] == [0]
    assert first[key]["index"] == 0 and first[key]["relevance"] is not None
    assert eb.windows == {} and eb.reach == {0: 149.0}
    (wkey,) = [k for k in ups if "/window-" in k]
    assert ups[key] is None and ups[wkey]["relevance_key"] == key
    assert ups[wkey]["until"] == 149 and ups[wkey]["partitions"] == [0]
    # the window takes the release's place in b's evidence, whichever arrives first
    for k in ((key, wkey) if tombstone_first else (wkey, key)):
        eb.adopt(k, ups[k])
    assert set(eb.model._foreign_relevance) == {wkey} and list(eb.windows) == [wkey]
    for c, before in zip(eb.model._relevance.counts, counts, strict=True):
        assert np.allclose(c, before)
    assert ea.local_updates() == {}                      # announced once
    assert not ea.adopt(key, first[key])                 # its own, read back: no change
    with pytest.raises(ValueError, match="not a dpstream-relevance"):
        eb.adopt(relevance_key("a", 7), {**ups[wkey]})
    with pytest.raises(ValueError, match="another configuration"):
        eb.adopt(key, {**first[key], "config": "x"})


def test_the_hold_waits_for_the_others_releases_of_the_stretch(adult):
    X, y = adult
    (a, b), (ea, eb) = _pair(adult)
    for i in range(150):
        a.learn_one(X[i], y[i])
        ea.observe(i)
    assert a.held is not None and not ea.hold_ready()   # b has released nothing yet
    ea.reach[1] = 60            # b's releases reach record 60: short of the middle, 74.5
    assert not ea.hold_ready()
    ea.reach[1] = 80
    assert ea.hold_ready()
    one = _model()
    one.hold = True
    _learn(one, X[:300], y[:300])
    assert WindowEnsemble(one, "solo").hold_ready()      # no other member: nothing to wait for
