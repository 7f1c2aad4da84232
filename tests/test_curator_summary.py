"""The curator's summary explains itself (issue 61, part 3): beside the accuracy, the majority
share and a short-stream warning; exact counts of clipped values, missing features, coerced
labels and skipped blank lines (replay, ``status --curator``, ``serve`` on stop with
``--curator-metrics``), off every public surface; and a model that clips its inputs warns
once (:class:`~dpstream.models.params.ClippedInputWarning`)."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import warnings

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from river import datasets, preprocessing

from dpstream import models
from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.models import ClippedInputWarning, MedianForestClassifier, SmallStreamWarning
from dpstream.models.schema import river_check_schema
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.cli import main
from dpstream.stream.metrics import CURATOR_SERIES, CURATOR_SUMMARY_KEYS, ServiceCollector
from dpstream.stream.runner import Runner
from dpstream.stream.service import ServeSettings, serve

SCHEMA = {"features": {"age": {"type": "numeric", "min": 17, "max": 90},
                       "sex": {"type": "categorical", "values": ["F", "M"]}},
          "target": {"type": "binary", "values": [False, True]}}
#: what the file below holds besides 60 clean records
COUNTS = {"clipped": 1, "missing_features": 2, "coerced_labels": 1}


def _messages() -> list[dict]:
    """60 records; one with age 150 (clipped), one without age and one with sex null (two
    missing features), one labeled 1 for true (coerced)."""
    out = [{"id": i, "x": {"age": 20 + i % 50, "sex": "FM"[i % 2]}, "y": i % 3 == 0}
           for i in range(60)]
    out[5]["x"]["age"] = 150
    del out[7]["x"]["age"]
    out[9]["x"]["sex"] = None
    out[11]["y"] = 1
    return out


def _files(tmp_path) -> tuple[str, str]:
    """The records as JSONL with three blank lines among them, and the schema file."""
    lines = [json.dumps(m) for m in _messages()]
    for at in (3, 20, 40):
        lines.insert(at, "  " if at == 20 else "")
    src = tmp_path / "records.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    return str(src), str(schema)


def _replay(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["replay", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


# --------------------------------------------------------------------------- replay
def test_replay_counts_each_input_exactly_in_json_and_text(tmp_path, capsys):
    src, schema = _files(tmp_path)
    base = ["--source", src, "--schema", schema, "--epsilon", "1", "--model", "median-forest"]
    code, out, _ = _replay(capsys, *base, "--json", "--checkpoint-dir", str(tmp_path / "ck"))
    assert code == 0
    res = json.loads(out)
    assert {k: res[k] for k in COUNTS} == COUNTS
    assert res["blank_lines_this_run"] == 3 and res["records_this_run"] == 60
    assert res["dead_letters"] == 0 and res["curator_only"] is True
    code, text, _ = _replay(capsys, *base, "--checkpoint-dir", str(tmp_path / "text"))
    assert code == 0
    assert ("  inputs: clipped values 1, missing features 2, labels coerced (0/1 -> false/true) "
            "1, blank lines skipped 3") in text.splitlines(), text
    # a resumed replay reads nothing new: the cumulative counts stay, no blank line this run
    code, out, _ = _replay(capsys, *base, "--json", "--checkpoint-dir", str(tmp_path / "ck"))
    res = json.loads(out)
    assert {k: res[k] for k in COUNTS} == COUNTS and res["blank_lines_this_run"] == 0


def test_a_csv_label_other_than_true_or_false_is_coerced(tmp_path, capsys):
    src = tmp_path / "records.csv"
    rows = ["age,sex,y", "30,F,True", "40,M,1", "50,F,true", "60,M,False", "", "70,,0"]
    src.write_text("\n".join(rows) + "\n", encoding="utf-8")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    code, out, _ = _replay(capsys, "--source", str(src), "--schema", str(schema), "--epsilon",
                           "1", "--model", "median-forest", "--json", "--checkpoint-dir",
                           str(tmp_path / "ck"))
    res = json.loads(out)
    assert code == 0 and res["records_learned"] == 5
    assert (res["coerced_labels"], res["missing_features"], res["blank_lines_this_run"]) == (
        3, 1, 1)


def test_a_short_replay_warns_and_shows_the_majority_share(tmp_path, capsys):
    """200 Adult records at epsilon 1: the summary says the stream is short for the budget
    (once, as a line of the summary, not a Python warning) and, beside the accuracy, the
    share of the most frequent label; the median forest has no tree yet and predicts one
    label, so it does not beat that share, and the summary says so."""
    X, y, _ = load_adult("train")
    src = tmp_path / "adult.jsonl"
    src.write_text("".join(json.dumps({"id": i, "x": X[i], "y": y[i]}) + "\n"
                           for i in range(200)), encoding="utf-8")
    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    base = ["--source", str(src), "--schema", str(schema), "--epsilon", "1", "--seed", "0",
            "--model", "median-forest"]
    code, text, err = _replay(capsys, *base, "--checkpoint-dir", str(tmp_path / "text"))
    assert code == 0
    short = ("  warning: 200 records at epsilon 1 is a short stream for this budget: about 5,000 "
             "are wanted (n·ε ≥ 5,000); expect low, seed-dependent accuracy")
    assert [line for line in text.splitlines() if line.startswith(short)], text
    assert text.count("short stream") == 1 and "SmallStreamWarning" not in err + text
    assert "(most frequent label: 0." in text
    assert "warning: the model did not beat predicting the most frequent label" in text
    code, out, _ = _replay(capsys, *base, "--json", "--checkpoint-dir", str(tmp_path / "js"))
    res = json.loads(out)
    score = res["prequential"]
    assert 0.5 < score["majority_share"] < 1 and score["accuracy"] <= score["majority_share"]
    assert len(res["warnings"]) == 2 and "short stream" in res["warnings"][1]


def test_no_warning_on_a_long_enough_stream_that_beats_the_majority(tmp_path, capsys):
    code, out, _ = _replay(capsys, "--source", "adult", "--epsilon", "1", "--seed", "0",
                           "--model", "median-forest", "--json", "--checkpoint-dir",
                           str(tmp_path / "ck"))
    res = json.loads(out)
    assert code == 0 and res["warnings"] == []
    assert res["prequential"]["accuracy"] > res["prequential"]["majority_share"]
    assert res["blank_lines_this_run"] == 0


# ----------------------------------------------------------------- the curator surfaces
def _runner(tmp_path) -> Runner:
    runner = Runner.create("median-forest", SCHEMA, store=CheckpointStore(tmp_path / "ck"),
                           epsilon=1.0, seed=0)
    runner.process_many([SourceRecord(m, "t:0", i) for i, m in enumerate(_messages())])
    runner.checkpoint()
    return runner


def _status(capsys, directory, *args: str) -> tuple[str, str]:
    capsys.readouterr()
    assert main(["status", "--checkpoint-dir", str(directory), *args]) == 0
    out = capsys.readouterr()
    return out.out, out.err


def test_status_shows_the_counts_only_with_curator(tmp_path, capsys):
    _runner(tmp_path).store.close()
    public = json.loads(_status(capsys, tmp_path / "ck", "--json")[0])
    assert not set(public) & (set(COUNTS) | {"warnings"})
    text = _status(capsys, tmp_path / "ck")[0]
    assert "inputs:" not in text and "warning" not in text
    whole = json.loads(_status(capsys, tmp_path / "ck", "--json", "--curator")[0])
    assert {k: whole[k] for k in COUNTS} == COUNTS
    assert whole["warnings"] and "60 records at epsilon 1 is a short stream" in whole["warnings"][0]
    text = _status(capsys, tmp_path / "ck", "--curator")[0]
    assert ("  inputs: clipped values 1, missing features 2, labels coerced (0/1 -> false/true) "
            "1") in text.splitlines(), text
    assert "  warning: 60 records at epsilon 1 is a short stream" in text
    assert {"missing_features", "coerced_labels", "blank_lines_this_run",
            "warnings"} <= CURATOR_SUMMARY_KEYS


def _scrape(collector: ServiceCollector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_metrics_show_the_counts_only_in_curator_mode(tmp_path):
    runner = _runner(tmp_path)
    public, whole = _scrape(ServiceCollector(runner)), _scrape(ServiceCollector(runner,
                                                                                curator=True))
    runner.store.close()
    for series in ("dpstream_missing_features_total", "dpstream_coerced_labels_total"):
        assert series in CURATOR_SERIES and series not in public
    assert "dpstream_missing_features_total 2.0" in whole.splitlines()
    assert "dpstream_coerced_labels_total 1.0" in whole.splitlines()
    assert "dpstream_clipped_values_total 1.0" in whole.splitlines()


@pytest.mark.parametrize("curator", [False, True])
def test_serve_logs_the_curator_summary_on_stop_only_with_curator_metrics(curator, tmp_path,
                                                                          caplog):
    """``serve`` stopped before any broker answered: its stop lines resume the checkpoint's
    60 records — the short-stream warning always (public counts), the curator's counts only
    with ``--curator-metrics`` (the service log is public otherwise)."""
    from dpstream.connectors.local_broker import free_port

    _runner(tmp_path).store.close()
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    settings = ServeSettings(bootstrap=f"127.0.0.1:{free_port()}", topic="t",
                             schema_path=str(schema), epsilon=1.0, model="median-forest",
                             checkpoint_dir=str(tmp_path / "ck"), metrics_port=0,
                             warm_up=False, curator_metrics=curator)
    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="dpstream.service")
    worker = threading.Thread(target=serve, args=(settings,), kwargs={"stop": stop})
    worker.start()
    deadline = time.monotonic() + 30
    while "metrics on http" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)   # the runner resumed the checkpoint: stop it now
    stop.set()
    worker.join(60)
    assert not worker.is_alive()
    lines = [r.getMessage() for r in caplog.records if r.name == "dpstream.service"]
    assert any("60 records at epsilon 1 is a short stream" in m for m in lines), lines
    summary = [m for m in lines if m.startswith("curator-only summary")]
    if curator:
        assert summary == ["curator-only summary (not DP, do not publish): learned 60, dead "
                           "letters 0, duplicates 0; inputs: clipped values 1, missing features "
                           "2, labels coerced (0/1 -> false/true) 1"]
    else:
        assert summary == [] and not any("missing features" in m for m in lines)


# --------------------------------------------------------------------------- the models
PHISHING = river_check_schema("binary")
REGRESSION = river_check_schema("regression")
#: every estimator dpstream.models exports
ALL = [cls for name in models.__all__
       if hasattr(cls := getattr(models, name), "privacy_report")]


def _clipped_warnings(record) -> list:
    return [w for w in record if issubclass(w.category, ClippedInputWarning)]


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.__name__)
def test_a_model_warns_once_when_it_clips_its_inputs(cls):
    schema = REGRESSION if cls.__name__.endswith("Regressor") else PHISHING
    name = next(iter(schema["features"]))
    lo, hi = schema["features"][name]["min"], schema["features"][name]["max"]
    label = 5.0 if schema is REGRESSION else True
    model = cls(schema, seed=0)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", SmallStreamWarning)
        model.learn_one({name: (lo + hi) / 2}, label)       # in the domain: no warning
        assert _clipped_warnings(got) == []
        model.learn_one({name: hi + 7.5}, label)
        model.learn_one({name: lo - 3.0}, label)
        model.learn_many([{name: hi + 1.0}], [label])
        model.predict_one({name: hi + 2.0})
    clipped = _clipped_warnings(got)
    assert len(clipped) == 1, [str(w.message) for w in clipped]
    message = str(clipped[0].message)
    assert f"feature {name!r} = {hi + 7.5!r} is outside the schema's domain" in message
    assert f"[{lo:g}, {hi:g}]" in message and "StandardScaler" in message
    assert "declared domain is what counts" in message
    assert clipped[0].filename == __file__   # points at the caller


def test_a_standard_scaler_in_front_of_a_unit_schema_warns_once():
    """river's StandardScaler puts Phishing's [0, 1] features around 0 with unit variance:
    clipped, and the model says so once."""
    model = preprocessing.StandardScaler() | MedianForestClassifier(PHISHING, seed=0)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", SmallStreamWarning)
        for x, y in itertools.islice(datasets.Phishing(), 300):
            model.predict_one(x)
            model.learn_one(x, y)
    clipped = _clipped_warnings(got)
    assert len(clipped) == 1 and "StandardScaler" in str(clipped[0].message)


def test_in_domain_input_and_the_stream_service_do_not_warn(tmp_path):
    model = MedianForestClassifier(PHISHING, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClippedInputWarning)
        for x, y in itertools.islice(datasets.Phishing(), 300):
            model.learn_one(x, y)
        model.learn_many([x for x, _ in itertools.islice(datasets.Phishing(), 50)],
                         [y for _, y in itertools.islice(datasets.Phishing(), 50)])
        # the service counts what it clips (the runner's model never warns)
        runner = Runner.create("median-forest", SCHEMA, store=CheckpointStore(tmp_path),
                               epsilon=1.0, seed=0)
        runner.model.learn_one({"age": 150, "sex": "F"}, True)
        runner.process_many([SourceRecord(m, "t:0", i) for i, m in enumerate(_messages())])
        assert runner.counters["clipped"] == 1
        runner.store.close()
