"""``dpstream replay`` as a new user meets it: failures exit non-zero with their reasons, the
dead letters stay where the summary says, the prequential score is reported, the output reads
well through a pipe; ``dpstream --version``."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dpstream
from dpstream.connectors import CheckpointStore
from dpstream.connectors.deadletter import ReasonTally, reason_group
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.cli import main
from dpstream.stream.service import format_replay, replay, replay_verdict

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]


def run(cwd: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*DPSTREAM, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, **kwargs)


def _records(path: Path, n: int, *, bad_every: int = 0, all_bad: bool = False) -> Path:
    """``n`` Adult records as JSONL; an undeclared feature in every ``bad_every``-th (or in
    every record with ``all_bad``)."""
    X, y, _ = load_adult("train")
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            x = dict(X[i])
            if all_bad or (bad_every and i % bad_every == bad_every - 1):
                x["colour"] = "red"
            fh.write(json.dumps({"id": i, "x": x, "y": y[i]}) + "\n")
    return path


def _schema(tmp_path: Path) -> str:
    path = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(path)
    return str(path)


def test_a_replay_that_rejects_every_record_fails_and_says_why(tmp_path):
    src = _records(tmp_path / "bad.jsonl", 300, all_bad=True)
    out = run(tmp_path, "replay", "--source", str(src), "--schema", _schema(tmp_path),
              "--epsilon", "1", "--keep-checkpoint")
    assert out.returncode == 1, out.stderr
    assert re.search(r"^\s+300  x\.colour: unknown feature \(not declared in the schema\)$",
                     out.stdout, re.M), out.stdout
    assert "failed: nothing was learned (every record was a dead letter)" in out.stderr
    assert "300 of 300 records (100.0%) were dead letters" in out.stderr
    assert "curator's" in out.stdout and "do not publish" in out.stdout
    # the dead-letter file it names is there, under reports/ of the working directory
    named = re.search(r"dead letters 300 \(-> (.+?)\)", out.stdout).group(1)
    path = tmp_path / named
    assert path.is_file() and Path(named).parts[0] == "reports"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 300 and lines[0]["reason"].startswith("x.colour: unknown feature")
    # ... next to the checkpoint it names (the model, nothing learned)
    ck = re.search(r"checkpoint: (\S+)", out.stdout).group(1)
    assert (tmp_path / ck / "checkpoint.dpck").is_file() and path.parent == tmp_path / ck
    assert not (tmp_path / ck / "lock").exists()   # removed on a clean exit


def test_a_replay_without_a_checkpoint_dir_leaves_no_record_behind(tmp_path):
    src = _records(tmp_path / "some-bad.jsonl", 300, bad_every=10)
    schema = _schema(tmp_path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    out = run(tmp_path, "replay", "--source", str(src), "--schema", schema,
              "--epsilon", "1", "--model", "median-forest", env={**os.environ, "TMPDIR": str(temp)})
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before   # no reports/, no checkpoint
    assert not list(temp.iterdir())   # the temporary checkpoint folder is gone
    assert "checkpoint: none kept (it holds records" in out.stdout
    assert "dead letters 30 (-> the temporary folder, removed)" in out.stdout


def test_the_dead_letter_share_threshold(tmp_path, capsys):
    src = _records(tmp_path / "some-bad.jsonl", 500, bad_every=5)   # 100 of 500: 20%
    schema = _schema(tmp_path)
    base = ("replay", "--source", str(src), "--schema", schema, "--epsilon", "1", "--json")
    strict = run(tmp_path, *base, "--checkpoint-dir", str(tmp_path / "a"))
    assert strict.returncode == 1
    res = json.loads(strict.stdout)
    assert res["failures"] == ["100 of 500 records (20.0%) were dead letters, more than "
                               "--max-dead-letter-share 0.1"]
    assert res["dead_letter_reasons"] == [
        {"reason": "x.colour: unknown feature (not declared in the schema)", "count": 100}]
    assert res["curator_only"] is True and res["learned_this_run"] == 400
    assert "failed: 100 of 500 records (20.0%)" in strict.stderr
    loose = run(tmp_path, *base, "--checkpoint-dir", str(tmp_path / "b"),
                "--max-dead-letter-share", "0.25")
    assert loose.returncode == 0, loose.stderr
    assert json.loads(loose.stdout)["failures"] == []
    # a resumed replay with nothing new to read is no failure (the checkpoint learned before)
    again = run(tmp_path, *base, "--checkpoint-dir", str(tmp_path / "b"))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["records_this_run"] == 0
    with pytest.raises(SystemExit) as exit_:
        main([*base, "--max-dead-letter-share", "1.5"])
    assert exit_.value.code == 2
    assert "--max-dead-letter-share is a share in [0, 1]" in capsys.readouterr().err


def test_the_prequential_score_in_text_and_json(tmp_path):
    src = _records(tmp_path / "good.jsonl", 1500)
    schema = _schema(tmp_path)
    text = run(tmp_path, "replay", "--source", str(src), "--schema", schema, "--epsilon", "4",
               "--seed", "0")
    assert text.returncode == 0, text.stderr
    found = re.search(r"prequential accuracy (0\.\d{4}) on 1500 labeled records", text.stdout)
    assert found, text.stdout
    js = run(tmp_path, "replay", "--source", str(src), "--schema", schema, "--epsilon", "4",
             "--seed", "0", "--json")
    score = json.loads(js.stdout)["prequential"]
    assert score["records"] == 1500 and 0.5 < score["accuracy"] <= 1
    assert score["accuracy"] == float(found.group(1))
    assert 0.5 < score["majority_share"] < 1
    reg = run(tmp_path, "replay", "--source", "abalone", "--epsilon", "2", "--seed", "0",
              "--json")
    assert reg.returncode == 0, reg.stderr
    res = json.loads(reg.stdout)
    score = res["prequential"]
    assert score["records"] == 4177 and score["mae"] > 0 and -1 < score["r2"] < 1
    text = format_replay(res)   # what the same replay prints without --json
    assert f"prequential R2 {score['r2']:.4f}, MAE {score['mae']:.4g} on 4177" in text, text


def test_piped_output_puts_the_summary_on_its_own_line(tmp_path):
    """More than 5,000 records: a terminal would get a progress line; a pipe gets none, and a
    terminal's progress line ends before the summary starts."""
    src = _records(tmp_path / "many.jsonl", 6000)
    args = ("replay", "--source", str(src), "--schema", _schema(tmp_path), "--epsilon", "1")
    piped = run(tmp_path, *args, "--checkpoint-dir", str(tmp_path / "p"))
    merged = subprocess.run([*DPSTREAM, *args, "--checkpoint-dir", str(tmp_path / "m")],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=300)
    for out in (piped.stdout, merged.stdout):
        assert "\r" not in out
        assert out.splitlines()[0].startswith("replayed "), out
    # on a terminal (a pseudo-terminal for stdout and stderr): progress, then a new line
    master, slave = pty.openpty()
    proc = subprocess.Popen([*DPSTREAM, *args, "--checkpoint-dir", str(tmp_path / "t")],
                            cwd=tmp_path, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(300) == 0
    tty = b"".join(chunks).decode()
    assert "\r  6000 records" in tty, tty
    start = tty.index("replayed ")
    assert tty[start - 1] == "\n", repr(tty[max(0, start - 40):start + 10])


def test_version_prints_the_package_version(tmp_path):
    out = run(tmp_path, "--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"dpstream {dpstream.__version__}"


def test_library_replay_without_a_directory_names_no_deleted_file(tmp_path):
    src = _records(tmp_path / "few.jsonl", 50, bad_every=10)
    res = replay(str(src), schema=ADULT_SCHEMA, epsilon=1.0, seed=0)
    assert res["checkpoint_dir"] is None and res["dead_letter_file"] is None
    assert res["prequential"] is None                 # evaluate=False: the library's default
    assert res["dead_letter_reasons"][0]["count"] == 5
    kept = replay(str(src), schema=ADULT_SCHEMA, epsilon=1.0, seed=0, evaluate=True,
                  dead_letter_file=str(tmp_path / "dl.jsonl"), checkpoint_dir=str(tmp_path / "c"))
    assert Path(kept["dead_letter_file"]).is_file() and kept["prequential"]["records"] == 45
    model = CheckpointStore.read(tmp_path / "c")["model"]
    assert model.predict_one(load_adult("train")[0][0]) in (True, False)
    assert replay_verdict(kept, 0.1) == [] and replay_verdict(kept, 0.05) != []


def test_reasons_group_by_field_and_cause_without_values():
    cases = {
        "x.sex: 'Robot' is not one of the declared categories":
            "x.sex: not one of the declared categories",
        "y: 'rich' is not one of the declared classes": "y: not one of the declared classes",
        "x.age: expected a number, got str 'old'": "x.age: expected a number, got str",
        "x.age: inf is not a finite number": "x.age: not a finite number",
        "x.age: value 120.0 is outside the public domain [17.0, 90.0]":
            "x.age: value outside the public domain [17.0, 90.0]",
        "y: label 40 is outside the public target range [1.0, 29.0]":
            "y: label outside the public target range [1.0, 29.0]",
        "unparsable JSON: Expecting ',' delimiter at char 31":
            "unparsable JSON: Expecting ',' delimiter",
        "not UTF-8 text: invalid start byte at byte 0": "not UTF-8 text: invalid start byte",
        "message: 2000000 bytes, longer than the 1048576-byte limit":
            "message: longer than the 1048576-byte limit",
        "id: expected a string or an integer, got list [1, 2]":
            "id: expected a string or an integer, got list",
        "line has 2 fields, the header 3": "line has a wrong number of fields (the header has 3)",
        "x.colour: unknown feature (not declared in the schema)":
            "x.colour: unknown feature (not declared in the schema)",
    }
    for reason, group in cases.items():
        assert reason_group(reason) == group, reason
    tally = ReasonTally(None)
    for i in range(1200):   # a bounded number of groups, the rest counted together
        tally.send(b"", f"x.f{i}: unknown feature (not declared in the schema)", {})
    assert len(tally.counts) == 1001 and tally.counts["(other reasons)"] == 200


def test_a_replay_stopped_before_its_first_record_is_not_a_failure(tmp_path):
    """Asked to stop (SIGTERM, Ctrl-C) before a record was read: exit 0 and say so; an
    empty source is still a failure."""
    import threading

    src = _records(tmp_path / "few.jsonl", 50)
    stop = threading.Event()
    stop.set()
    res = replay(str(src), schema=ADULT_SCHEMA, epsilon=1.0, seed=0, stop=stop)
    assert res["stopped"] and res["records_this_run"] == 0
    assert replay_verdict(res) == []
    assert "stopped before the end of the source" in format_replay(res)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = replay(str(empty), schema=ADULT_SCHEMA, epsilon=1.0, seed=0)
    assert not res["stopped"]
    assert replay_verdict(res) == ["nothing was learned (no record in the source)"]
