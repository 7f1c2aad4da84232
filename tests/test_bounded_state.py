"""A window forest, its drift signal and a group member keep bounded state over many windows.

A service runs for months: at 20,000 records a second and windows of 10,000 records a window
forest closes about 170,000 windows a day. Anything kept per window — a ledger partition per
tree, a released drift rate, a member's close stamp or release number — grows the memory and
every checkpoint without end. These tests close hundreds of windows and check that each such
record stays bounded, and that the privacy guarantee reported is the one the unbounded
bookkeeping gave.
"""

from __future__ import annotations

import random
import threading

from dpstream.connectors import CheckpointStore
from dpstream.connectors.model_topic import ModelTopic
from dpstream.models import MedianForestClassifier, RDTClassifier
from dpstream.models import drift as drift_module
from dpstream.models.windows.window_exchange import WindowEnsemble
from dpstream.models.windows.window_forest import WindowForestBase
from dpstream.stream.members import WindowMember
from dpstream.stream.runner import Runner

SCHEMA = {"features": {"a": {"type": "numeric", "min": 0, "max": 1},
                       "b": {"type": "numeric", "min": 0, "max": 1}},
          "target": {"type": "binary", "values": [False, True]}}


def _rows(n, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.random(), rng.random()
        out.append(({"a": a, "b": b}, (a + 0.3 * b > 0.6) != (rng.random() < 0.1)))
    return out


def _train(model, rows, batch=200):
    for i in range(0, len(rows), batch):
        part = rows[i:i + batch]
        model.learn_stream([x for x, _ in part], [y for _, y in part])


def test_the_ledger_keeps_the_voting_windows_partitions_only(monkeypatch):
    rows = _rows(24_000)
    params = dict(schema=SCHEMA, epsilon=1.0, n_trees=2, window_size=60, warmup=None,
                  max_windows=3, seed=4)
    for cls in (MedianForestClassifier, RDTClassifier):
        model = cls(**params)
        _train(model, rows)
        assert model.windows_closed >= 390
        names = model._ledger.open_partitions
        # the kept windows' partitions (and nothing else): a tree's, a window's
        windows = {int(n.split("/")[0][7:]) for n in names}
        first = model.windows_closed - len(model._windows)
        assert windows == set(range(first, model.windows_closed)), (cls.__name__, windows)
        assert len(names) <= (model.max_windows + 1) * model.n_trees
        # the same stream with every partition kept open: the same guarantee
        monkeypatch.setattr(WindowForestBase, "_close_retired_partitions", lambda self: None)
        unbounded = cls(**params)
        _train(unbounded, rows)
        monkeypatch.undo()
        assert len(unbounded._ledger.open_partitions) > 10 * len(names)
        assert model._ledger.spent == unbounded._ledger.spent
        assert model.privacy_report()["epsilon"] == unbounded.privacy_report()["epsilon"]
        assert model._ledger.report()["closed_partitions"] == (
            len(unbounded._ledger.open_partitions) - len(names))


def test_a_checkpoint_with_every_partition_open_is_compacted_at_the_next_close(tmp_path):
    rows = _rows(6_000, seed=1)
    model = MedianForestClassifier(schema=SCHEMA, epsilon=1.0, n_trees=2, window_size=60,
                                   warmup=None, max_windows=3, seed=5)
    _train(model, rows[:3_000])
    for w in range(model.windows_closed - len(model._windows)):   # as saved before the change
        model._ledger.charge(model.epsilon_trees, partition=f"window-{w}/tree-0")
    spent = model._ledger.spent
    store = CheckpointStore(tmp_path)
    store.save({"model": model})
    store.close()
    restored = CheckpointStore.read(tmp_path)["model"]
    assert len(restored._ledger.open_partitions) > 40
    _train(restored, rows[3_000:3_120])
    assert len(restored._ledger.open_partitions) <= 4 * restored.n_trees
    assert restored._ledger.spent >= spent


def test_the_drift_signal_keeps_its_last_releases(monkeypatch):
    monkeypatch.setattr(drift_module, "HISTORY", 50)
    signal = drift_module.DPDriftSignal(1.0, window=2, seed=0)
    for i in range(1_000):
        signal.update(float(i % 3 == 0))
    assert signal.releases == 500 and len(signal.history) == 50
    assert len(signal.change_at) <= 50


def test_a_members_close_stamps_and_release_numbers_stay_bounded(tmp_path):
    model = MedianForestClassifier(schema=SCHEMA, epsilon=1.0, n_trees=2, window_size=60,
                                   warmup=None, max_windows=3, seed=6)
    model.set_share(0.5, [0], 2)   # one of two members
    ens = WindowEnsemble(model, "m0")
    rows = _rows(12_000, seed=2)
    for i in range(0, len(rows), 20):   # (at most one close a batch: windows of 30)
        part = rows[i:i + 20]
        model.learn_stream([x for x, _ in part], [y for _, y in part])
        ens.observe(float(i + len(part)), float(i))
        ens.local_updates()
        ens.hold_ready()
        model.grow_held()
    closes = model.windows_closed + (model.held is not None)
    assert closes >= 300 and ens.closes == closes
    assert len(ens._until) <= model.max_windows + 3
    # a member reading its own releases back keeps only the current hold's and newer
    runner = Runner.create("median-forest", SCHEMA, store=CheckpointStore(tmp_path / "m"),
                           epsilon=1.0, params={"window_size": 60, "warmup": None})
    member = WindowMember(runner, ModelTopic("localhost:1", "models", stop=threading.Event()),
                          "m1")
    for seq in range(1, 500):
        runner.model.windows_held = seq
        member._note_released(seq)
    assert 499 in member.own_released and len(member.own_released) <= 65
    member._note_released(10)   # an old release read late: not the current hold's
    assert 10 not in member.own_released


def test_the_long_run_benchmark_prints_bounded_figures():
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = (Path(__file__).resolve().parent.parent / "benchmarks"
              / "window_forests_long_run_state.py")
    out = subprocess.run([sys.executable, str(script), "--records", "30000", "--every",
                          "10000", "--window", "500"], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    assert [r["records"] for r in lines] == [10_000, 20_000, 30_000]
    assert lines[-1]["windows"] >= 50
    assert all(r["ledger_partitions"] <= 6 * 10 for r in lines)   # (max_windows + 1) trees
    assert all(r["checkpoint_kb"] > 0 and r["save_ms"] > 0 for r in lines)
