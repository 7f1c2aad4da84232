"""River habits meet one input policy (issue 49): out-of-domain values are clipped, unknown
features ignored, 0/1 labels accepted for a [false, true] target, and the first hour's other
stumbles (no schema, long reprs, an untrained model's epsilon, a large delta, a stream too
short for its epsilon) get a clear answer."""

from __future__ import annotations

import json
import math
import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river import datasets, evaluate, metrics, preprocessing

from dpstream.models import (
    DPBoostClassifier,
    DPBoostRegressor,
    GreedyForestClassifier,
    InvalidRecordError,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
    RecordEncoder,
    SGBDTClassifier,
    SGBDTRegressor,
    SmallStreamWarning,
)
from dpstream.models.params import LARGE_DELTA, records_needed
from dpstream.models.schema import river_check_schema
from dpstream.stream import load_adult
from dpstream.stream.messages import RecordValidator, RejectedRecord

PHISHING = river_check_schema("binary")
REGRESSION = river_check_schema("regression")
CLASSIFIERS = [SGBDTClassifier, DPBoostClassifier, MedianForestClassifier,
               RandomDecisionForestClassifier, RDTClassifier, GreedyForestClassifier]
ALL = [*CLASSIFIERS, SGBDTRegressor, DPBoostRegressor]


def _schema(cls):
    return REGRESSION if cls in (SGBDTRegressor, DPBoostRegressor) else PHISHING


def _phishing():
    return [(x, y) for x, y in datasets.Phishing()]


# ---------------------------------------------------------------- out of domain
def test_standard_scaler_pipeline_runs_over_phishing_to_the_end():
    """StandardScaler moves values outside [0, 1]; they are clipped, nothing aborts."""
    model = preprocessing.StandardScaler() | SGBDTClassifier(PHISHING, epsilon=1.0, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallStreamWarning)
        metric = evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy())
    assert model["SGBDTClassifier"].records_seen == 1250
    assert 0.0 < metric.get() <= 1.0


def test_on_out_of_domain_error_raises_as_before():
    model = preprocessing.StandardScaler() | SGBDTClassifier(PHISHING, epsilon=1.0, seed=0,
                                                             on_out_of_domain="error")
    with pytest.raises(InvalidRecordError, match="outside the public domain"):
        evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy())


@pytest.mark.parametrize("cls", ALL)
def test_every_estimator_clips_by_default_and_raises_on_request(cls):
    schema = _schema(cls)
    name = next(iter(schema["features"]))
    top = schema["features"][name]["max"]
    lax, strict = cls(schema, seed=0), cls(schema, seed=0, on_out_of_domain="error")
    assert lax.on_out_of_domain == "clip" and strict.on_out_of_domain == "error"
    np.testing.assert_array_equal(lax._encoder.encode_one({name: top + 5.0}),
                                  lax._encoder.encode_one({name: top}))
    lax.predict_one({name: top + 5.0})
    with pytest.raises(InvalidRecordError, match="outside the public domain") as info:
        strict.predict_one({name: top + 5.0})
    assert info.value.field == name
    assert strict.clone().on_out_of_domain == "error"   # a river parameter: clone keeps it


def test_numeric_labels_are_clipped_to_the_target_range():
    model = SGBDTRegressor(REGRESSION, seed=0)
    assert model._encoder.encode_target_one(150.0) == model._encoder.encode_target_one(100)
    assert model._encoder.encode_target_one(-3) == -1.0
    strict = SGBDTRegressor(REGRESSION, seed=0, on_out_of_domain="error")
    with pytest.raises(InvalidRecordError, match="outside the public target range"):
        strict.learn_one({"gallup": 40.0}, 150.0)


@pytest.mark.parametrize("value, reason", [
    (math.nan, "NaN"), (math.inf, "not a finite number"), (-math.inf, "not a finite number"),
    (10**400, "not a finite number"), ("0.5", "expected a number"), (True, "expected a number"),
])
def test_what_clipping_cannot_mend_stays_an_error(value, reason):
    model = SGBDTClassifier(PHISHING, seed=0)
    with pytest.raises(InvalidRecordError, match=reason) as info:
        model.learn_one({"long_url": value}, True)
    assert info.value.field == "long_url" and model.records_seen == 0


def test_undeclared_categories_stay_errors():
    enc = RecordEncoder({"features": {"c": {"type": "categorical", "values": ["a", "b"]}},
                         "target": {"type": "binary", "values": [False, True]}})
    with pytest.raises(InvalidRecordError, match="not one of the declared categories"):
        enc.encode_one({"c": "z"})
    with pytest.raises(InvalidRecordError, match="not one of the declared categories"):
        enc.encode_many([{"c": "a"}, {"c": "z"}])


# ------------------------------------------------------------- unknown features
@pytest.mark.parametrize("cls", ALL)
def test_unknown_features_are_ignored_by_default_and_raise_on_request(cls):
    schema = _schema(cls)
    name = next(iter(schema["features"]))
    x = {name: schema["features"][name]["min"], "zip": "10115"}
    lax, strict = cls(schema, seed=0), cls(schema, seed=0, on_unknown="error")
    np.testing.assert_array_equal(lax._encoder.encode_one(x),
                                  lax._encoder.encode_one({name: x[name]}))
    np.testing.assert_array_equal(lax._encoder.encode_many([x, x]),
                                  lax._encoder.encode_many([{name: x[name]}] * 2))
    lax.predict_one(x)
    with pytest.raises(InvalidRecordError, match="unknown feature") as info:
        strict.predict_one(x)
    assert info.value.field == "zip"


def test_a_second_spelling_of_a_declared_name_is_not_unknown():
    schema = {"features": {3: {"type": "numeric", "min": 0, "max": 1}},
              "target": {"type": "binary", "values": [False, True]}}
    enc = RecordEncoder(schema, on_unknown="error")
    assert enc.encode_many([{"3": 0.5}, {3: 2.0}])[:, 1].tolist() == [0.5, 1.0]


# ------------------------------------------------------------------ 0/1 labels
def test_zero_one_labels_mean_false_true_for_a_boolean_target():
    X = [x for x, _ in _phishing()][:400]
    y = [t for _, t in _phishing()][:400]
    a = SGBDTClassifier(PHISHING, epsilon=1.0, round_size=50, seed=3)
    b = SGBDTClassifier(PHISHING, epsilon=1.0, round_size=50, seed=3)
    for xi, yi in zip(X, y, strict=True):
        a.learn_one(xi, yi)
        b.learn_one(xi, int(yi))
    assert [a.predict_one(x) for x in X] == [b.predict_one(x) for x in X]
    enc = a._encoder
    assert [enc.encode_target_one(v) for v in (0, 1, np.int64(1), 0.0, True, np.bool_(False))] \
        == [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    with pytest.raises(InvalidRecordError, match="not one of the declared classes"):
        enc.encode_target_one(2)
    reversed_ = RecordEncoder({**PHISHING, "target": {"type": "binary",
                                                      "values": [True, False]}})
    assert reversed_.encode_target_one(1) == 0.0   # 1 is True, wherever True is declared


def test_other_class_sets_are_unchanged():
    for values, bad in (([0, 1], True), (["no", "yes"], 1), ([False, True, "maybe"], 1)):
        kind = "binary" if len(values) == 2 else "categorical"
        enc = RecordEncoder({**PHISHING, "target": {"type": kind, "values": values}})
        with pytest.raises(InvalidRecordError, match="not one of the declared classes"):
            enc.encode_target_one(bad)


# --------------------------------------------------------------- missing schema
@pytest.mark.parametrize("cls", ALL)
def test_a_missing_schema_shows_an_example_and_the_docs(cls):
    with pytest.raises(TypeError) as info:
        cls(epsilon=1.0)
    text = str(info.value)
    assert text.startswith(f"{cls.__name__} needs the stream's public schema")
    assert '"features": {"age": {"type": "numeric", "min": 17, "max": 90}' in text
    assert "docs/service.md#messages-and-the-schema" in text
    assert isinstance(cls(_schema(cls)), cls)   # positional use still works


# ------------------------------------------------------------------------ repr
@pytest.mark.parametrize("cls", ALL)
def test_repr_is_short(cls):
    model = cls(_schema(cls), seed=4)
    text = repr(model)
    kind = _schema(cls)["target"]["type"]
    n = len(_schema(cls)["features"])
    assert text == f"{cls.__name__}(schema=<Schema: {n} features, target {kind}>, seed=4)"
    assert repr(model.clone()) == text


def test_repr_lists_only_parameters_that_differ_from_their_defaults():
    model = SGBDTClassifier(PHISHING, epsilon=0.5, delta=5e-8, depth=6, on_unknown="error")
    assert repr(model) == ("SGBDTClassifier(schema=<Schema: 9 features, target binary>, "
                           "epsilon=0.5, on_unknown='error')")


# ------------------------------------------------------------ untrained epsilon
@pytest.mark.parametrize("cls", ALL)
def test_an_untrained_model_has_spent_nothing(cls):
    assert cls(_schema(cls), seed=0).privacy_report()["epsilon"] == 0.0


def test_sgbdt_reports_its_bound_apart_until_it_releases():
    model = SGBDTClassifier(PHISHING, epsilon=1.0, round_size=20, seed=0)
    before = model.privacy_report()
    assert before["epsilon"] == 0.0 and 0.99 < before["epsilon_bound"] <= 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallStreamWarning)
        for x, y in _phishing()[:1]:   # the young phase's first round: the first arrival
            model.learn_one(x, y)
        after = model.privacy_report()
    assert after["rounds"] == 1 and after["epsilon"] == after["epsilon_bound"]
    assert after["epsilon_bound"] == before["epsilon_bound"]


# ------------------------------------------------------------------------ delta
@pytest.mark.parametrize("cls", [SGBDTClassifier, SGBDTRegressor])
@pytest.mark.parametrize("delta", [0.5, LARGE_DELTA, 0.01])
def test_a_large_delta_is_refused_unless_allowed(cls, delta):
    with pytest.raises(ValueError) as info:
        cls(_schema(cls), delta=delta)
    text = str(info.value)
    assert text.startswith(f"delta={delta!r} is too large") and "allow_large_delta=True" in text
    model = cls(_schema(cls), delta=delta, allow_large_delta=True)
    assert model.privacy_report()["delta"] == delta
    assert model.clone().allow_large_delta is True
    assert cls(_schema(cls), delta=LARGE_DELTA * 0.999).delta < LARGE_DELTA
    with pytest.raises(ValueError, match="delta"):
        cls(_schema(cls), delta=1.0, allow_large_delta=True)   # (0, 1) still holds


# ---------------------------------------------------------------- small streams
def test_the_small_stream_warning_fires_on_phishing_at_epsilon_one():
    model = SGBDTClassifier(PHISHING, epsilon=1.0, seed=0)
    evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy())
    assert records_needed(1.0) > 1250
    with pytest.warns(SmallStreamWarning, match="1,250 streamed records at epsilon=1") as got:
        model.privacy_report()
    assert got[0].filename == __file__   # points at the caller
    before = pickle.dumps(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.privacy_report()   # once per model
    assert pickle.dumps(model) == before   # reading the report changes no state


def test_no_small_stream_warning_on_an_adult_sized_stream():
    X, y, schema = load_adult("train")
    model = SGBDTClassifier(schema=schema, epsilon=1.0, round_size=256, seed=0)
    assert len(X) >= records_needed(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallStreamWarning)
        for xi, yi in zip(X, y, strict=True):
            model.learn_one(xi, yi)
        report = model.privacy_report()
    assert report["records_seen"] == len(X) and report["epsilon"] > 0


@pytest.mark.parametrize("cls", [MedianForestClassifier, DPBoostClassifier])
def test_other_families_warn_on_a_small_stream_too(cls):
    model = cls(PHISHING, epsilon=1.0, seed=0, **({"window_size": 500} if cls is
                                                  DPBoostClassifier else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallStreamWarning)
        assert model.privacy_report()["epsilon"] == 0.0   # nothing released: no verdict
        for x, y in _phishing():
            model.learn_one(x, y)
    with pytest.warns(SmallStreamWarning):
        model.privacy_report()


def test_batch_training_and_silenced_models_do_not_warn():
    data = _phishing()
    model = SGBDTClassifier(PHISHING, epsilon=1.0, n_trees=5, extra_trees=0, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallStreamWarning)
        model.learn_many([x for x, _ in data], [y for _, y in data])
        model.privacy_report()
    stream = SGBDTClassifier(PHISHING, epsilon=1.0, round_size=50, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=SmallStreamWarning)   # as documented
        for x, y in data[:100]:
            stream.learn_one(x, y)
        stream.privacy_report()


# --------------------------------------------------------------------- service
def test_the_service_keeps_dead_lettering_unknown_features_and_clipping():
    v = RecordValidator(PHISHING)
    with pytest.raises(RejectedRecord, match="x.zip: unknown feature"):
        v.validate({"id": 1, "x": {"zip": 3}, "y": True})
    r = v.validate({"id": 2, "x": {"long_url": -1.0}, "y": True})
    assert r.x == {"long_url": 0.0} and r.clipped == 1
    ignoring = RecordValidator(PHISHING, on_unknown="ignore")
    assert ignoring.validate({"id": 3, "x": {"zip": 3, "https": 1}, "y": True}).x == {
        "https": 1.0}
    strict = RecordValidator(REGRESSION, on_out_of_domain="error")
    with pytest.raises(RejectedRecord, match="x.gallup: value 101 is outside"):
        strict.validate({"id": 4, "x": {"gallup": 101}, "y": 5})
    with pytest.raises(RejectedRecord, match="y: label 101 is outside"):
        strict.validate({"id": 5, "x": {"gallup": 1}, "y": 101})
    with pytest.raises(ValueError, match="on_unknown"):
        RecordValidator(PHISHING, on_unknown="drop")


def test_service_and_api_clip_alike():
    schema = {"features": {"a": {"type": "numeric", "min": -2, "max": 3}},
              "target": {"type": "numeric", "min": 0, "max": 1}}
    v, enc = RecordValidator(schema), RecordEncoder(schema)
    for a in (-7, -2.5, 0.25, 3, 4.5, 10**6):
        r = v.validate({"id": 1, "x": {"a": a}, "y": a})
        np.testing.assert_array_equal(enc.encode_one(r.x), enc.encode_one({"a": a}))
        assert enc.encode_target_one(r.y) == enc.encode_target_one(a)


# ------------------------------------------------------------- old checkpoints
def test_encoders_and_models_pickled_before_the_policy_take_its_defaults():
    model = SGBDTClassifier(PHISHING, seed=0)
    state = model.__getstate__()
    for name in ("on_out_of_domain", "on_unknown", "allow_large_delta"):
        state.pop(name)
    enc_state = dict(model._encoder.__dict__)
    enc_state.pop("on_out_of_domain"), enc_state.pop("on_unknown")
    enc = RecordEncoder.__new__(RecordEncoder)
    enc.__dict__.update(enc_state)
    state["_encoder"] = enc
    old = SGBDTClassifier.__new__(SGBDTClassifier)
    old.__setstate__(state)
    assert (old.on_out_of_domain, old.on_unknown, old.allow_large_delta) == (
        "clip", "ignore", False)
    assert old._encoder.encode_one({"long_url": 7, "zip": 1})[7] == 1.0
    assert repr(old) == repr(model)


# ------------------------------------------------ vectorised == record by record
_SCHEMA = {"features": {"x": {"type": "numeric", "min": -5, "max": 5},
                        "n": {"type": "numeric", "min": 0, "max": 100},
                        "colour": {"type": "categorical", "values": ["red", "green"]},
                        "flag": {"type": "categorical", "values": [False, True]}},
           "target": {"type": "binary", "values": [False, True]}}
_VALUES = {
    "x": st.one_of(st.floats(-50, 50), st.integers(-50, 50), st.none(),
                   st.sampled_from([math.inf, -math.inf, math.nan, np.float64(-7.5)])),
    "n": st.one_of(st.integers(-10**6, 10**6), st.floats(-1e300, 1e300), st.none(),
                   st.sampled_from([10**400, np.int64(-3), np.int64(101)])),
    "colour": st.one_of(st.sampled_from(["red", "green"]), st.none(), st.just("pink")),
    "flag": st.one_of(st.booleans(), st.none(), st.just(1)),
    "extra": st.one_of(st.floats(allow_nan=True), st.text(max_size=3), st.none()),
}


@st.composite
def _records(draw):
    return {k: draw(v) for k, v in _VALUES.items() if draw(st.integers(0, 4))}


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(_records(), min_size=1, max_size=10),
       out=st.sampled_from(["clip", "error"]), unknown=st.sampled_from(["ignore", "error"]))
def test_vectorised_and_per_record_encoding_agree_under_every_policy(batch, out, unknown):
    pd = pytest.importorskip("pandas")
    enc = RecordEncoder(_SCHEMA, on_out_of_domain=out, on_unknown=unknown)
    expected, error = [], None
    for rec in batch:
        try:
            expected.append(enc.encode_one(rec))
        except InvalidRecordError as exc:
            error = exc
            break
    if error is None:
        np.testing.assert_array_equal(enc.encode_many(batch), np.array(expected))
        fast = enc._encode_columns(batch, False)
        if fast is not None:
            np.testing.assert_array_equal(fast, np.array(expected))
        if all(not (isinstance(v, float) and math.isnan(v)) for r in batch for v in r.values()):
            frame = pd.DataFrame(batch, columns=sorted({k for r in batch for k in r}))
            np.testing.assert_array_equal(enc.encode_many(frame), np.array(expected))
    else:
        with pytest.raises(InvalidRecordError) as info:
            enc.encode_many(batch)
        assert (info.value.field, info.value.reason) == (error.field, error.reason)


def test_clipped_batches_take_the_vectorised_path():
    enc = RecordEncoder(_SCHEMA)
    batch = [{"x": -9.0, "n": 250, "colour": "red", "flag": True, "zip": "x"},
             {"x": 2.5, "n": -1, "colour": "green", "flag": False, "zip": "y"}]
    fast = enc._encode_columns(batch, False)
    assert fast is not None
    np.testing.assert_array_equal(fast, np.array([enc.encode_one(r) for r in batch]))
    assert fast[:, 1].tolist() == [-5.0, 2.5] and fast[:, 2].tolist() == [100.0, 0.0]


def test_the_service_takes_0_1_labels_for_a_false_true_target_as_the_models_do():
    from dpstream.stream.messages import RecordValidator, RejectedRecord

    v = RecordValidator(PHISHING)
    for raw, want in ((0, False), (1, True), (1.0, True), (0.0, False), (True, True),
                      (False, False)):
        rec = v.validate(json.dumps({"id": 1, "x": {"https": 0.5}, "y": raw}))
        assert rec.y is want
    with pytest.raises(RejectedRecord, match="not one of the declared classes"):
        v.validate(json.dumps({"id": 1, "x": {"https": 0.5}, "y": 2}))
    with pytest.raises(RejectedRecord, match="not one of the declared classes"):
        v.validate(json.dumps({"id": 1, "x": {"https": 0.5}, "y": 0.5}))
