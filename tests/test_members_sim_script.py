"""``benchmarks/members_sim.py`` runs k members in process and compares them with one process,
paired by seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "members_sim.py"


def _run(*args: str) -> list[dict]:
    out = subprocess.run([sys.executable, str(SCRIPT), "--json", *args],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_members_are_compared_with_one_process_seed_by_seed():
    one, two = _run("--stream", "agrawal", "--records", "2000", "--members", "1,2",
                    "--seeds", "2", "--partitions", "4", "--workers", "2")
    assert (one["members"], two["members"]) == (1, 2)
    assert two["partitions"] == 4 and two["assignment"] == "range"
    assert "vs_one_pp" not in one
    diff = [100 * (b - a) for a, b in zip(one["per_seed"], two["per_seed"], strict=True)]
    assert abs(two["vs_one_pp"] - sum(diff) / 2) < 0.02 and two["vs_one_se_pp"] >= 0


def test_parallel_workers_give_the_seeds_the_same_results():
    args = ("--stream", "agrawal", "--records", "1500", "--members", "2", "--seeds", "2",
            "--assignment", "roundrobin")
    (alone,), (parallel,) = _run(*args), _run(*args, "--workers", "2")
    assert alone["per_seed"] == parallel["per_seed"] and alone["assignment"] == "roundrobin"


def test_members_in_step_until_lag_after(monkeypatch):
    """With --lag-after past the stream's end the members never drift apart: the same hits
    as no lag; with it inside the stream, they drift apart there (other hits)."""
    import numpy as np
    from river.datasets import synth

    from dpstream.models.windows.window_forest import WindowForestBase

    # warm-up windows of 100 (200 x 1/2): several windows close before and after the lag
    monkeypatch.setattr(WindowForestBase, "member_warmup", 200)
    from dpstream.stream.bench.member_sim import prequential
    from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA

    rows = list(synth.Agrawal(classification_function=2, seed=0).take(3000))
    X, y = [x for x, _ in rows], [v for _, v in rows]
    kw = dict(k=2, seed=3, partitions=4, hold=True, warmup=200)
    in_step = prequential(X, y, AGRAWAL_SCHEMA, **kw)
    never = prequential(X, y, AGRAWAL_SCHEMA, lags=(0, 500), lag_after=3000, **kw)
    later = prequential(X, y, AGRAWAL_SCHEMA, lags=(0, 500), lag_after=1000, **kw)
    assert np.array_equal(in_step, never)
    assert np.array_equal(in_step[:1000], later[:1000]) and not np.array_equal(in_step, later)
