"""``benchmarks/members_machine_contention.py`` runs independent copies at once and compares
each with one copy alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "members_machine_contention.py"


def _run(*args: str) -> list[dict]:
    out = subprocess.run([sys.executable, str(SCRIPT), *args],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_spin_copies_report_each_copy_against_one_alone():
    lines = _run("--copies", "1,2", "--spin", "1000000")
    assert [r["copies"] for r in lines] == [1, 2]
    alone, two = lines
    assert alone["mean_vs_alone"] == 1.0 and len(alone["per_copy"]) == 1
    assert len(two["per_copy"]) == 2 and all(v > 0 for v in two["per_copy"])
    assert two["max"] == max(two["per_copy"])
    # (from the unrounded means)
    assert two["mean_vs_alone"] == pytest.approx(two["mean"] / alone["mean"], rel=0.05)


def test_member_copies_measure_cpu_per_record():
    (line,) = _run("--copies", "1", "--work", "member", "--records", "3000")
    assert line["work"] == "member" and 0 < line["per_copy"][0] < 10_000   # µs a record


def test_copies_must_be_positive():
    out = subprocess.run([sys.executable, str(SCRIPT), "--copies", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "positive" in out.stderr
