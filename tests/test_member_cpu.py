"""``benchmarks/members_cpu.py`` runs: k members on a model topic in memory train every record
once, adopt each other's windows and report where their CPU goes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "members_cpu.py"


def test_member_cpu_reports_each_k():
    out = subprocess.run([sys.executable, str(SCRIPT), "--records", "4000", "--members", "1,2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["members"] for r in lines] == [1, 2]
    for r in lines:
        assert r["learned"] == r["records"] == 4000, r   # every record trained, once
        assert r["us_per_record"] > 0 and all(c >= 1 for c in r["checkpoints"]), r
        assert all(w >= 2 for w in r["windows_closed"]), r
    # two members adopt each other's windows: counted, not read from the CPU time (a few
    # windows' adoption over 4,000 records can round to 0.0 µs a record on a fast machine)
    # (4,000 records are one turn of each member: the second adopts the first's windows)
    assert lines[0]["union_members"] == [1] and lines[1]["union_members"] == [1, 2]
    assert lines[0]["adopted"] == 0 < lines[1]["adopted"]
    assert lines[1]["adopt"] >= 0
