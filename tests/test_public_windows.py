"""The window forests' public model file (issue 67): export -> load gives the live model's
predictions bit for bit, for every window forest and a member's union, at several points of a
stream, after retirements and drift generations; the file holds only the release (neighbouring
streams give files that differ in DP values only; no training record's values appear in it);
the median forest's flat trees are readable from the format page alone."""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import pytest

import dpstream
from dpstream.models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
)
from dpstream.models.public import PublicModelError, digest, load_model, public_model
from dpstream.models.windows.public_windows import from_plain, to_plain
from dpstream.models.windows.window_exchange import WindowEnsemble
from dpstream.stream import load_adult, load_elec2

FORESTS = [MedianForestClassifier, RandomDecisionForestClassifier, GreedyForestClassifier,
           RDTClassifier]


@pytest.fixture(scope="module")
def adult():
    X, y, schema = load_adult("train")
    return X, y, schema


def _model(cls, schema, **kw):
    params = {"schema": schema, "epsilon": 1.0, "seed": 3, "window_size": 400,
              "max_windows": 3, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**params)


def _probe(X):
    """Test rows: unseen records, some with a numeric and a categorical feature missing."""
    rows = [dict(x) for x in X[20000:20150]]
    for i, row in enumerate(rows[:40]):
        row.pop(sorted(row)[i % len(row)], None)
    return rows


def _same(live, public, rows):
    """Predictions of ``public`` equal ``live``'s exactly (one at a time and as a batch)."""
    assert [public.predict_one(x) for x in rows] == [live.predict_one(x) for x in rows]
    assert [public.predict_proba_one(x) for x in rows] == \
        [live.predict_proba_one(x) for x in rows]
    assert list(public.predict_many(rows)) == list(live.predict_many(rows))


def _roundtrip(model) -> object:
    """Through the JSON text, as a reader of the file gets it."""
    return load_model(json.loads(json.dumps(public_model(model), allow_nan=False)))


@pytest.mark.parametrize("cls", FORESTS, ids=lambda c: c.__name__)
def test_export_load_gives_the_live_predictions_along_the_stream(cls, adult):
    X, y, schema = adult
    model = _model(cls, schema)
    rows = _probe(X)
    _same(model, _roundtrip(model), rows)   # before any window: the uniform prior
    seen = 0
    for stop in (700, 1900, 3100):   # max_windows=3 of 400: windows retire from the second
        for i in range(seen, stop):
            model.learn_one(X[i], y[i])
        seen = stop
        assert model.windows_closed >= 1
        public = _roundtrip(model)
        _same(model, public, rows)
        assert public.privacy_report()["epsilon"] == pytest.approx(
            model.privacy_report()["epsilon"])
    model._new_generation()   # a drift detection: the old concept's windows retire
    for i in range(seen, seen + 900):
        model.learn_one(X[i], y[i])
    assert model.generation == 1
    _same(model, _roundtrip(model), rows)
    with pytest.raises(TypeError, match="predict-only"):
        _roundtrip(model).learn_one(X[0], y[0])


@pytest.mark.parametrize("cls", [MedianForestClassifier, RDTClassifier],
                         ids=lambda c: c.__name__)
def test_a_members_union_exports_with_its_predictions(cls, adult):
    X, y, schema = adult
    members = [_model(cls, schema, seed=s, max_windows=None) for s in (1, 2)]
    for i in range(2400):
        members[i % 2].learn_one(X[i], y[i])
    a, b = WindowEnsemble(members[0], "a"), WindowEnsemble(members[1], "b")
    for mine, other in ((a, b), (b, a)):
        for key, state in other.local_updates().items():
            mine.adopt(key, state)
    assert len(a.kept()) >= 4 and a.members() == ["a", "b"]
    obj = json.loads(json.dumps(public_model(a)))
    assert obj["combine"] == "union" and obj["model"] == cls.__name__
    public = load_model(obj)
    rows = _probe(X)
    assert [public.predict_one(x) for x in rows] == [a.predict_one(x) for x in rows]
    assert [public.predict_proba_one(x) for x in rows] == \
        [a.predict_proba_one(x) for x in rows]
    assert list(public.predict_many(rows)) == list(a.predict_many(rows))


def _flat_scores(trees: dict, row: np.ndarray) -> np.ndarray:
    """docs/model_format.md's routing, written from the page: one row, every tree."""
    k, m = trees["n_outputs"], trees["max_nodes"]
    out = np.zeros(k)
    for t in range(trees["n_trees"]):
        j = 0
        while trees["left"][t * m + j] != j:
            node = t * m + j
            go_left = row[trees["feature"][node]] <= trees["threshold"][node]  # NaN: False
            j = trees["left"][node] + (0 if go_left else 1)
        out += np.array(trees["vector"][t * m + j])
    return out


def test_the_median_forests_flat_trees_follow_the_format_page(adult):
    X, y, schema = adult
    model = _model(MedianForestClassifier, schema)
    for i in range(1500):
        model.learn_one(X[i], y[i])
    obj = public_model(model)
    assert obj["link"] == "normalize" and obj["trees"]["n_trees"] > 0
    enc = dpstream.models.RecordEncoder(schema)
    for x in _probe(X)[:60]:
        s = np.maximum(_flat_scores(obj["trees"], enc.encode_many([x])[0]), 0.0)
        live = model.predict_proba_one(x)
        p = s / s.sum() if s.sum() > 0 else np.full(len(s), 1 / len(s))
        assert np.allclose(p, [live[c] for c in enc.classes], atol=1e-12)
    assert public_model(RDTClassifier(schema=schema, epsilon=1.0, seed=0))["trees"] is None


def _paths(a, b, at="") -> set[str]:
    """Paths where two JSON values differ (a path names dict keys, not list positions)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return {f"{at}/{k}" for k in a.keys() ^ b.keys()}
        return set().union(*[_paths(a[k], b[k], f"{at}/{k}") for k in a]) if a else set()
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return {at}
        return set().union(*[_paths(u, v, at) for u, v in zip(a, b, strict=True)]) if a \
            else set()
    return set() if a == b or (isinstance(a, float) and isinstance(b, float)
                               and math.isnan(a) and math.isnan(b)) else {at}


#: where neighbouring streams' files may differ: DP releases, and what is computed from them
#: and the public schema alone
DP_FIELDS = re.compile(
    r"^/(digest"
    # the DP attribute-relevance weights, and the routers' slots drawn from them (with_slots);
    # the DP numeric ranges of a window (private_ranges), and the routers' bounds from them
    r"|privacy/attributes/weights"
    r"|windows/windows/(extra|trees)/(router/|state/router/)?state/"
    r"(_num_cols|_lo|_hi|_cat_groups|_last|_view|s|r)(/data|/shape)?"
    r"|windows/windows/extra/numeric_range|privacy/windows/numeric_range"
    # noisy counts, labels and split attributes of every leaf, cell, center and bucket
    r"|windows/windows/extra/(table|nodes|leaves|cells|centers)/state/"
    r"(labels|codes|values|values32|points|point)(/data)?"
    # the median forest: EM-chosen split attributes and values, noisy leaf counts (and the
    # flat trees' distributions from them)
    r"|windows/windows/trees/state/(feature|threshold|counts)/data"
    r"|trees/(feature|threshold|vector)|privacy/windows/split_budgets"
    r")$")


@pytest.mark.parametrize("cls", FORESTS, ids=lambda c: c.__name__)
def test_neighbouring_streams_differ_in_dp_values_only(cls, adult):
    X, y, schema = adult
    files = []
    for drop in (None, 517):   # one record removed
        model = _model(cls, schema, seed=11, drift=False)
        for i in range(2000):
            if i != drop:
                model.learn_one(X[i], y[i])
        model.learn_one(X[2000], y[2000])   # both streams: 2000 records
        files.append(public_model(model))
    differ = _paths(*files)
    assert "/digest" in differ
    assert not [p for p in differ if not DP_FIELDS.match(p)], sorted(differ)


@pytest.mark.parametrize("cls", FORESTS, ids=lambda c: c.__name__)
def test_no_training_records_values_are_in_the_file(cls, adult):
    """Every numeric value of the file, against every training record's numeric values: no
    record has all of its (non-boundary) values there."""
    X, y, schema = adult
    model = _model(cls, schema)
    for i in range(1600):
        model.learn_one(X[i], y[i])
    text = json.dumps(public_model(model))
    in_file = {float(v) for v in re.findall(r"-?\d+\.?\d*(?:e-?\d+)?", text)}
    numeric = [f for f, spec in schema.features.items() if spec.type == "numeric"]
    found = 0
    for x in X[:1600]:
        vals = {float(x[f]) for f in numeric if x.get(f) is not None} - {0.0, 1.0}
        found += bool(vals) and vals <= in_file
    assert found == 0


def test_the_codec_builds_only_window_classes():
    assert from_plain(to_plain({"t": (1, 2), "a": np.arange(3, dtype=np.uint64)}))["t"] == (1, 2)
    with pytest.raises(PublicModelError, match="names a class"):
        from_plain({"@object": "Popen", "@id": 0, "state": {"args": "touch /tmp/x"}})
    with pytest.raises(PublicModelError, match="dtype"):
        from_plain({"@array": "|O", "shape": [1], "data": [0]})
    with pytest.raises(TypeError, match="cannot go into"):
        to_plain(object())


def test_a_window_file_is_checked_when_it_is_loaded(adult):
    X, y, schema = adult
    model = _model(RandomDecisionForestClassifier, schema)
    for i in range(900):
        model.learn_one(X[i], y[i])
    obj = public_model(model)
    bad = json.loads(json.dumps(obj))
    bad["params"]["n_trees"] = -1
    bad["digest"] = digest(bad)
    with pytest.raises(PublicModelError, match="parameters"):
        load_model(bad)
    bad = json.loads(json.dumps(obj))
    bad["windows"]["windows"][0]["trees"] = {"@object": "Popen", "@id": 99, "state": {}}
    bad["digest"] = digest(bad)
    with pytest.raises(PublicModelError, match="names a class"):
        load_model(bad)


def test_elec2_export_after_drift_detections():
    """A real drifting stream with the drift signal on: the file after each detection."""
    X, y, schema = load_elec2()
    model = _model(MedianForestClassifier, schema, max_windows=4)
    rows = [dict(x) for x in X[30000:30100]]
    generation = 0
    for i in range(12000):
        model.learn_one(X[i], y[i])
        if model.generation != generation:
            generation = model.generation
            _same(model, _roundtrip(model), rows)
    _same(model, _roundtrip(model), rows)
