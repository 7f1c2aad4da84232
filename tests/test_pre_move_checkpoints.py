"""Checkpoints and model-topic messages written before ``dpstream.models`` was grouped into
sub-packages (issue 48) still load, report their status, resume and convert.

``tests/data/pre_move/`` holds what main 33ba533 (flat ``models/``) wrote: two service
checkpoints of ``dpstream replay`` over Adult records 0-999 (with ids; epsilon 1, seed 0), one
S-GBDT and one median forest, the probabilities each gave for records 2000-2019, and one window
of the median forest as a model-topic message. Their class names are the old modules'
(``dpstream.models.sgbdt:SGBDTClassifier``, ``dpstream.models.window_trees:WindowTree``);
:data:`~dpstream.connectors.safe_state.MOVED_MODULES` maps them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpstream.connectors.checkpoint import CheckpointStore
from dpstream.connectors.model_topic import decode_message
from dpstream.connectors.safe_state import MOVED_MODULES, StateError, decode
from dpstream.stream import ADULT_SCHEMA, load_adult

DATA = Path(__file__).parent / "data" / "pre_move"
EXPECTED = json.loads((DATA / "expected.json").read_text())
MODELS = {"sgbdt": "SGBDTClassifier", "median-forest": "MedianForestClassifier"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpstream.stream.cli", *args],
                          capture_output=True, text=True)


def _directory(name: str, tmp_path: Path) -> Path:
    d = tmp_path / name
    d.mkdir()
    shutil.copy(DATA / f"{name}.dpck", d / "checkpoint.dpck")
    return d


@pytest.mark.parametrize("name", list(MODELS))
def test_the_files_name_the_old_modules(name):
    """The fixtures really are pre-move files (else the tests below prove nothing)."""
    data = (DATA / f"{name}.dpck").read_bytes()
    old = [m for m in MOVED_MODULES if f'"{m}:'.encode() in data]
    assert old and not any(f'"{new}:'.encode() in data for new in MOVED_MODULES.values())


@pytest.mark.parametrize("name", list(MODELS))
def test_a_pre_move_checkpoint_loads_and_predicts_as_it_did(name, tmp_path):
    state = CheckpointStore.read(_directory(name, tmp_path))
    model = state["model"]
    assert type(model).__name__ == MODELS[name]
    assert type(model).__module__.startswith(("dpstream.models.boosting.",
                                              "dpstream.models.windows."))
    X, _, _ = load_adult("train")
    lo, hi = EXPECTED["records"]
    proba = [list(model.predict_proba_one(x).values()) for x in X[lo:hi]]
    np.testing.assert_allclose(proba, EXPECTED[name], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(MODELS))
def test_status_reports_a_pre_move_checkpoint(name, tmp_path):
    out = cli("status", "--checkpoint-dir", str(_directory(name, tmp_path)), "--json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["model"] == name and status["records_seen"] == EXPECTED["learned"]
    assert status["privacy"]["epsilon_budget"] == 1.0


@pytest.mark.parametrize("name", list(MODELS))
def test_a_replay_resumes_from_a_pre_move_checkpoint(name, tmp_path):
    """The records the old checkpoint learned (ids 0-999) are duplicates; 1000-1499 are new."""
    d = _directory(name, tmp_path)
    X, y, _ = load_adult("train")
    records = tmp_path / "more.jsonl"
    records.write_text("".join(json.dumps({"id": i, "x": X[i], "y": bool(y[i])}) + "\n"
                               for i in range(1500)))
    schema = tmp_path / "schema.json"
    schema.write_text(ADULT_SCHEMA.model_dump_json())
    out = cli("replay", "--source", str(records), "--schema", str(schema), "--model", name,
              "--epsilon", "1", "--seed", "0", "--checkpoint-dir", str(d), "--json")
    assert out.returncode == 0, out.stderr
    assert "resumed from" in out.stderr
    summary = json.loads(out.stdout)
    assert summary["records_learned"] == 1500 and summary["duplicates"] == 1000, summary
    # written again with the current module names
    data = (d / "checkpoint.dpck").read_bytes()
    assert not any(f'"{m}:'.encode() in data for m in MOVED_MODULES)


def test_migrate_checkpoint_rewrites_the_old_names(tmp_path):
    d = _directory("sgbdt", tmp_path)
    out = cli("migrate-checkpoint", "--checkpoint-dir", str(d))
    assert out.returncode == 0, out.stderr
    assert "module names -> current" in out.stdout
    data = (d / "checkpoint.dpck").read_bytes()
    assert not any(f'"{m}:'.encode() in data for m in MOVED_MODULES)
    assert b'"dpstream.models.boosting.sgbdt:SGBDTClassifier"' in data
    X, _, _ = load_adult("train")
    lo, hi = EXPECTED["records"]
    model = CheckpointStore.read(d)["model"]
    proba = [list(model.predict_proba_one(x).values()) for x in X[lo:hi]]
    np.testing.assert_allclose(proba, EXPECTED["sgbdt"], rtol=0, atol=1e-12)
    again = cli("migrate-checkpoint", "--checkpoint-dir", str(d))   # nothing left to do
    assert again.returncode != 0 and "nothing to migrate" in again.stderr


def test_a_pre_move_model_topic_message_decodes_and_merges(tmp_path):
    from dpstream.models.windows.window_exchange import WindowEnsemble

    state = decode_message((DATA / "median-forest-window.msg").read_bytes())
    assert type(state["trees"][0]).__module__ == "dpstream.models.windows.window_trees"
    model = CheckpointStore.read(_directory("median-forest", tmp_path))["model"]
    ensemble = WindowEnsemble(model, member="m2")   # another member reads m1's window
    assert ensemble.adopt(state["key"], state)
    assert state["key"] in [w["key"] for w in ensemble.kept()]
    X, _, _ = load_adult("train")
    assert set(ensemble.predict_proba_one(X[2000])) == {False, True}


def test_the_map_does_not_open_a_way_around_the_allow_list():
    """An old name resolves only to the class of the same name in the module it moved to."""
    with pytest.raises(StateError, match="no such class"):
        decode({"@": "obj", "cls": "dpstream.models.sgbdt:Path", "state": None}, [])
    with pytest.raises(StateError, match="not allowed"):
        decode({"@": "obj", "cls": "os:system", "state": None}, [])
