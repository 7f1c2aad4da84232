"""The bundled datasets load from package data, match the raw files, and fit their schemas."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import pytest
from pydantic import ValidationError

from dpstream.models import MedianForestClassifier, SmallStreamWarning
from dpstream.stream import Schema, coerce_schema, load_abalone, load_adult, load_elec2
from dpstream.stream.datasets import open_data

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"


def _in_domain(X, schema):
    for row in X:
        assert set(row) == set(schema.features)
        for name, feat in schema.features.items():
            v = row[name]
            if feat.type == "numeric":
                assert feat.min <= v <= feat.max, (name, v)
            else:
                assert v in feat.values, (name, v)


def test_adult_sizes_labels_and_domains():
    X, y, schema = load_adult("train")
    assert len(X) == len(y) == 32561
    assert 0.23 < sum(y) / len(y) < 0.25  # adult.names: 23.93% >50K over all data
    Xt, yt, _ = load_adult("test")
    assert len(Xt) == 16281
    assert len(load_adult("all").X) == 48842
    _in_domain(X + Xt, schema)
    with pytest.raises(ValueError, match="split"):
        load_adult("validation")


def test_abalone_sizes_and_domains():
    X, y, schema = load_abalone()
    assert len(X) == 4177 and min(y) >= schema.target.min and max(y) <= schema.target.max
    _in_domain(X, schema)


def test_elec2_in_time_order_with_its_public_schema():
    X, y, schema = load_elec2()
    names = ["period", "nswprice", "nswdemand", "vicprice", "vicdemand", "transfer"]
    assert len(X) == len(y) == 45312
    assert set(y) == {0, 1} and all(type(v) is int for v in y)
    # time order: the period (time of day) starts at midnight and cycles every 48 records
    assert X[0]["period"] == 0.0 and X[47]["period"] == 1.0 and X[48]["period"] == 0.0
    assert all(X[i]["period"] == 0.0 for i in range(0, len(X), 48))
    assert list(schema.features) == names
    for feat in schema.features.values():
        assert (feat.type, feat.min, feat.max) == ("numeric", 0.0, 1.0)
    assert schema.target.type == "binary" and schema.target.values == [0, 1]
    _in_domain(X, schema)


def test_a_dp_model_learns_the_first_elec2_records():
    X, y, schema = load_elec2()
    model = MedianForestClassifier(schema=schema, epsilon=1.0, window_size=50, seed=0)
    with warnings.catch_warnings():     # 100 records at epsilon 1: the model says it is few
        warnings.simplefilter("ignore", SmallStreamWarning)
        for xi, yi in zip(X[:100], y[:100], strict=True):
            model.predict_one(xi)
            model.learn_one(xi, yi)
        assert model.predict_one(X[100]) in (0, 1)
        assert model.privacy_report()["records_seen"] == 100


@pytest.mark.skipif(not SHARED.exists(), reason="shared/datasets is not beside this checkout")
@pytest.mark.parametrize("name,raw", [("adult.data", "adult.data"), ("adult.test", "adult.test"),
                                      ("abalone.csv", "abalone.csv"),
                                      ("elec2.csv", "elec2.csv")])
def test_bundled_files_are_unmodified(name, raw):
    with open_data(name) as fh:
        bundled = fh.read().encode("utf-8")
    assert hashlib.sha256(bundled).hexdigest() == hashlib.sha256(
        (SHARED / raw).read_bytes()).hexdigest()


def test_schema_rejects_missing_public_knowledge(tmp_path):
    base = {"features": {"age": {"type": "numeric", "min": 0, "max": 1}},
            "target": {"type": "binary", "values": [0, 1]}}
    Schema.model_validate(base)
    bad = [
        {"features": {"age": {"type": "numeric", "min": 0}}, "target": base["target"]},
        {"features": {"age": {"type": "numeric", "min": 2, "max": 1}}, "target": base["target"]},
        {"features": {"c": {"type": "categorical", "values": []}}, "target": base["target"]},
        {"features": {"c": {"type": "categorical", "values": ["a", "a"]}},
         "target": base["target"]},
        {"features": base["features"], "target": {"type": "binary", "values": [0]}},
        {"features": base["features"], "target": {"type": "numeric", "min": 0}},
        {"features": {}, "target": base["target"]},
        {"features": base["features"], "target": base["target"], "extra": 1},
    ]
    for doc in bad:
        with pytest.raises(ValidationError):
            Schema.model_validate(doc)
    path = tmp_path / "schema.json"
    Schema.model_validate(base).dump(path)
    assert coerce_schema(str(path)) == coerce_schema(base)


def test_attribution_ships_with_the_data():
    from importlib import resources

    text = resources.files("dpstream.stream").joinpath("data", "ATTRIBUTION.md").read_text()
    assert "CC BY 4.0" in text and "Kohavi" in text and "Nash" in text and "Harries" in text
