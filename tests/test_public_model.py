"""The public model file (issue 67): export -> load gives the live model's predictions, bit
for bit, at several points of a stream (after drift generations and tree retirements); the
file holds the release only (neighbouring streams differ in DP values alone, no training
record's values appear); it is checked on load; pickling a live model refuses outside
``private_state_access()``."""

from __future__ import annotations

import copy
import json
import pickle
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest

import dpstream
import dpstream.models.public
from dpstream.connectors import CheckpointStore
from dpstream.models import (
    DPBoostClassifier,
    DPBoostRegressor,
    MedianForestClassifier,
    PrivateStateError,
    SGBDTClassifier,
    SGBDTRegressor,
    private_state_access,
)
from dpstream.models.boosting.public_model import (
    PUBLIC_FORMAT,
    PublicModelError,
    export_model,
    load_model,
    public_model,
)
from dpstream.stream import load_abalone, load_adult

warnings.simplefilter("ignore")   # (small streams on purpose)

ADULT = load_adult("train")
ABALONE = load_abalone()
#: Adult with a three-class label (age mod 3): a multi-class booster
MULTI_SCHEMA = {**json.loads(ADULT.schema.model_dump_json()),
                "target": {"type": "categorical", "values": ["a", "b", "c"]}}
MULTI_Y = [["a", "b", "c"][int(x["age"]) % 3] for x in ADULT.X]


def _same(live, public, X, proba: bool = True) -> None:
    """Every prediction API of the public model equals the live model's, exactly."""
    assert [public.predict_one(x) for x in X] == [live.predict_one(x) for x in X]
    assert list(public.predict_many(X)) == list(live.predict_many(X))
    if proba:
        assert [public.predict_proba_one(x) for x in X] == [live.predict_proba_one(x)
                                                             for x in X]
        assert np.array_equal(np.asarray(public.predict_proba_many(X)),
                              np.asarray(live.predict_proba_many(X)))


def _round_trip(model, tmp_path):
    path = tmp_path / "model.json"
    model.export(path)
    return dpstream.load_model(str(path))


@pytest.mark.parametrize("make, data, y, proba", [
    (lambda: SGBDTClassifier(schema=ADULT.schema, epsilon=1.0, seed=0),
     ADULT.X, ADULT.y, True),
    (lambda: SGBDTClassifier(schema=MULTI_SCHEMA, epsilon=1.0, seed=1), ADULT.X, MULTI_Y, True),
    (lambda: SGBDTRegressor(schema=ABALONE.schema, epsilon=1.0, seed=2), ABALONE.X, ABALONE.y,
     False),
], ids=["sgbdt-binary", "sgbdt-multiclass", "sgbdt-regression"])
def test_export_then_load_predicts_as_the_live_model_along_a_stream(tmp_path, make, data, y,
                                                                     proba):
    model = make()
    test = data[-300:]
    points = (0, 400, 1500, 3000)
    for a, b in zip(points, points[1:], strict=False):
        for i in range(a, b):
            model.learn_one(data[i], y[i])
        _same(model, _round_trip(model, tmp_path), test, proba)
    assert model._engine is not None and len(model._engine.forest) > 0


def test_export_follows_tree_retirement_and_drift_generations(tmp_path):
    """A stream whose label flips halfway: S-GBDT's drift signal starts a new generation,
    and its oldest trees retire in blocks; the file follows both."""
    model = SGBDTClassifier(schema=ADULT.schema, epsilon=4.0, seed=3)
    X, y = ADULT.X[:6000], ADULT.y[:6000]
    for i in range(6000):
        model.learn_one(X[i], y[i] if i < 3000 else not y[i])
        if i in (2000, 5999):
            _same(model, _round_trip(model, tmp_path), ADULT.X[-200:])
    report = model.privacy_report()
    assert report["trees_retired"] > 0
    assert report["drift"]["generation"] >= 1, "the flip should start a new generation"


@pytest.mark.parametrize("cls, data", [(DPBoostClassifier, ADULT), (DPBoostRegressor, ABALONE)])
def test_dpboost_exports_too(tmp_path, cls, data):
    model = cls(schema=data.schema, epsilon=1.0, seed=0)
    model.learn_many(data.X[:3000], data.y[:3000])
    assert len(model._forest) > 0
    _same(model, _round_trip(model, tmp_path), data.X[-300:], cls is DPBoostClassifier)


def _flatten(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _flatten(v, f"{path}.{k}")
    elif isinstance(obj, list) and obj and isinstance(obj[0], (dict, list)):
        for i, v in enumerate(obj):
            yield from _flatten(v, f"{path}[{i}]")
    else:
        yield path, obj


def test_neighbouring_streams_differ_in_released_values_only():
    """Two streams that differ in one record, the same seeds: the files differ only where a
    DP release is (the trees, the initial score, the feature grid's quantiles) and in the
    digest; the schema, the columns, the format and the public report's other fields are
    the same, and the file holds no curator count."""
    X, y = list(ADULT.X[:2500]), list(ADULT.y[:2500])
    other = dict(X[1234], age=90, **{"capital-gain": 99999})
    files = []
    for rows in (X, X[:1234] + [other] + X[1235:]):
        model = SGBDTClassifier(schema=ADULT.schema, epsilon=1.0, seed=7)
        for x, label in zip(rows, y, strict=True):
            model.learn_one(x, label)
        files.append(dict(_flatten(public_model(model))))
    assert files[0].keys() == files[1].keys()
    differ = {k for k in files[0] if files[0][k] != files[1][k]}
    released = (".trees.", ".base_score", ".privacy.feature_grid.quantiles_10_50_90", ".digest")
    assert differ and all(k.startswith(released) for k in differ), sorted(differ)
    for key in files[0]:
        leaf = key.rsplit(".", 1)[-1]
        assert leaf not in {"records_seen", "records_learned", "spend_fraction",
                            "records_active", "init_score_records"}, key


def test_no_training_records_values_are_in_the_file():
    model = SGBDTClassifier(schema=ADULT.schema, epsilon=1.0, seed=0)
    X, y = ADULT.X[:3000], ADULT.y[:3000]
    for x, label in zip(X, y, strict=True):
        model.learn_one(x, label)
    obj = public_model(model)
    numbers = {v for _, v in _flatten(obj) if isinstance(v, float)}
    numbers |= {float(v) for k, vs in _flatten(obj) if isinstance(vs, list)
                for v in vs if isinstance(v, (int, float)) and not isinstance(v, bool)}
    fnlwgt = {float(x["fnlwgt"]) for x in X}   # a near-unique census weight per record
    assert not numbers & fnlwgt
    text = json.dumps(obj)
    rows = random.Random(0).sample(X, 50)
    for x in rows:   # no record's (fnlwgt, age) pair either, in any form
        assert f"{x['fnlwgt']}" not in text.replace(".0,", ",")


def test_a_file_is_checked_when_it_is_loaded(tmp_path):
    model = SGBDTClassifier(schema=ADULT.schema, epsilon=1.0, seed=0)
    for i in range(800):
        model.learn_one(ADULT.X[i], ADULT.y[i])
    obj = export_model(model, tmp_path / "m.json")
    assert obj["format"] == PUBLIC_FORMAT and obj["digest"].startswith("sha256:")
    forged = json.loads(json.dumps(obj))
    forged["trees"]["value"][3] += 1.0
    with pytest.raises(PublicModelError, match="digest does not match"):
        load_model(forged)
    with pytest.raises(PublicModelError, match="not a dpstream-model/1 file"):
        load_model({**obj, "format": "something/9"})
    broken = {**obj, "trees": {**obj["trees"], "left": obj["trees"]["left"][:-1]}}
    broken["digest"] = dpstream.models.public.digest(broken)
    with pytest.raises(PublicModelError, match="malformed trees"):
        load_model(broken)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(PublicModelError, match="not JSON"):
        load_model(tmp_path / "bad.json")
    public = load_model(obj)
    with pytest.raises(TypeError, match="predict-only"):
        public.learn_one(ADULT.X[0], True)
    assert public.privacy_report()["epsilon"] == obj["privacy"]["epsilon"]


def test_what_is_not_a_dpstream_model_is_refused_with_the_list(tmp_path):
    with pytest.raises(TypeError, match="cannot be exported .* covers .*MedianForestClassifier"):
        dpstream.models.public.export_model(object(), tmp_path / "m.json")
    model = MedianForestClassifier(schema=ADULT.schema, epsilon=1.0, seed=0)
    assert model.export(tmp_path / "m.json")["model"] == "MedianForestClassifier"


def test_pickling_a_live_model_refuses_outside_private_state_access(tmp_path):
    model = SGBDTClassifier(schema=ADULT.schema, epsilon=1.0, seed=0)
    for i in range(600):
        model.learn_one(ADULT.X[i], ADULT.y[i])
    with private_state_access(False):   # (the tests are the curator: see conftest)
        with pytest.raises(PrivateStateError, match=r"model.export\(path\)"):
            pickle.dumps(model)
        clone = copy.deepcopy(model)   # in process: allowed
        assert clone.predict_one(ADULT.X[5]) == model.predict_one(ADULT.X[5])
        store = CheckpointStore(tmp_path / "ck")   # the checkpoint path needs no pickle
        store.save({"model": model, "positions": {}, "counters": {}, "ids": []})
        back = store.load()["model"]
        store.close()
        assert back.predict_one(ADULT.X[5]) == model.predict_one(ADULT.X[5])
    with private_state_access():
        assert pickle.loads(pickle.dumps(model)).predict_one(ADULT.X[5]) == \
            model.predict_one(ADULT.X[5])


def test_dpstream_export_writes_a_checkpoints_public_model(tmp_path):
    ck = tmp_path / "ck"
    run = [sys.executable, "-m", "dpstream.stream.cli"]
    subprocess.run([*run, "replay", "--source", "adult", "--epsilon", "1.0", "--seed", "0",
                    "--checkpoint-dir", str(ck), "--json"], check=True, capture_output=True)
    out = subprocess.run([*run, "export", "--checkpoint-dir", str(ck), "-o",
                          str(tmp_path / "model.json")], check=True, capture_output=True,
                         text=True)
    assert "public model file" in out.stdout and "SGBDTClassifier" in out.stdout
    public = dpstream.load_model(str(tmp_path / "model.json"))
    live = CheckpointStore.read(ck)["model"]
    _same(live, public, load_adult("test").X[:300])
    ck = tmp_path / "ck-rdt"   # a window forest's checkpoint (keyed trees: windows only)
    subprocess.run([*run, "replay", "--source", "adult", "--model", "rdt", "--epsilon", "1.0",
                    "--seed", "0", "--checkpoint-dir", str(ck), "--json"], check=True,
                   capture_output=True)
    out = subprocess.run([*run, "export", "--checkpoint-dir", str(ck), "-o",
                          str(tmp_path / "rdt.json")], check=True, capture_output=True, text=True)
    assert "RDTClassifier" in out.stdout and "windows" in out.stdout
    live = CheckpointStore.read(ck)["model"]
    public = dpstream.load_model(str(tmp_path / "rdt.json"))
    rows = load_adult("test").X[:300]
    _same(live, public, rows, proba=False)   # (a live window forest has no proba_many)
    assert [public.predict_proba_one(x) for x in rows] == [live.predict_proba_one(x) for x in rows]
    missing = subprocess.run([*run, "export", "--checkpoint-dir", str(tmp_path / "none"), "-o",
                              str(tmp_path / "x.json")], capture_output=True, text=True)
    assert missing.returncode != 0 and "no checkpoint" in missing.stderr
