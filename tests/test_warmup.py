"""The service's warm-up: made-up records from the schema's public domains, a throwaway model."""

from __future__ import annotations

import json
import logging

import pytest

from dpstream.stream import ADULT_SCHEMA, load_abalone
from dpstream.stream.messages import RecordValidator
from dpstream.stream.run import public_records, warm_up
from dpstream.stream.runner import SERVICE_MODELS
from dpstream.stream.service import ServeSettings, _warm_up


@pytest.mark.parametrize("schema", [ADULT_SCHEMA, load_abalone()[2]], ids=["adult", "abalone"])
def test_made_up_records_stay_in_the_declared_domains_and_validate(schema):
    X, y = public_records(schema, 300, seed=1)
    validator = RecordValidator(schema)
    for i, (x, label) in enumerate(zip(X, y, strict=True)):
        for name, value in x.items():
            feat = schema.features[name]
            if feat.type == "numeric":
                assert feat.min <= value <= feat.max
            else:
                assert value in feat.values
        rec = validator.validate(json.dumps({"id": i, "x": x, "y": label}).encode())
        assert rec.y is not None
    t = schema.target
    assert (all(t.min <= v <= t.max for v in y) if t.type == "numeric"
            else set(y) == set(t.values))
    assert public_records(schema, 5, seed=2) == public_records(schema, 5, seed=2)


@pytest.mark.parametrize("name", sorted(SERVICE_MODELS))
def test_every_service_model_warms_up_through_a_round(name):
    stats = warm_up(name, ADULT_SCHEMA, epsilon=1.0, member=True)
    assert stats["records"] == 600
    assert stats["windows"] >= 1 or stats["rounds"] >= 1, stats


def test_serve_warms_up_by_default_and_a_failure_only_costs_the_log_line(caplog):
    assert ServeSettings.model_fields["warm_up"].default is True
    settings = ServeSettings(bootstrap="localhost:1", topic="t", group="g",
                             schema_path="s.json", checkpoint_dir="c", model="median-forest",
                             epsilon=1.0)
    with caplog.at_level(logging.INFO, logger="dpstream.service"):
        _warm_up(settings, ADULT_SCHEMA, member=True)
    assert "warmed up in" in caplog.text
    bad = settings.model_copy(update={"params": {"n_trees": 0}})
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dpstream.service"):
        _warm_up(bad, ADULT_SCHEMA, member=False)
    assert "warm-up skipped (ParameterError: n_trees" in caplog.text
