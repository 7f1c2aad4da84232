"""``benchmarks/kafka_client_cost.py`` runs against a real broker it starts: a source drains
every pre-produced record whatever its partition count, and the model topic's empty polls are
timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "kafka_client_cost.py"


def test_kafka_client_cost_reports_each_measure():
    out = subprocess.run([sys.executable, str(SCRIPT), "--records", "3000", "--partitions",
                          "4,2", "--polls", "50", "--repeat", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["measure"] for r in lines] == ["model_topic_poll", "source", "source"]
    poll, *sources = lines
    assert poll["polls"] == 50 and poll["cpu_us_per_poll"] > 0
    assert [r["partitions"] for r in sources] == [4, 2]
    for r in sources:
        assert r["read"] == 3000 and 0 < r["records"] <= 3000, r   # every record, once
        assert r["polls"] >= 1, r
        assert r["cpu_us_per_record"] > 0 and r["mean_poll_records"] > 0, r
