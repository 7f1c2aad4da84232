"""``benchmarks/service_bench.py`` runs end to end against a real broker it starts, on a few
thousand records: every figure the stream-service notes quote is there and consistent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "service_bench.py"


@pytest.mark.kafka
def test_service_bench_reports_rates_stages_latency_and_memory():
    out = subprocess.run([sys.executable, str(SCRIPT), "--model", "median-forest", "--records",
                          "3000", "--soak", "4000", "--latency-rate", "1500",
                          "--latency-seconds", "1", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.splitlines()[-1])
    assert res["kafka_client"] in ("kafka-python", "confluent")
    for key in ("hoeffding_rows_per_s", "file_replay_rows_per_s", "kafka_msgs_per_s",
                "kafka_msgs_per_s_predicting", "soak_rows_per_s"):
        assert res[key] > 0, key
    assert res["kafka_vs_hoeffding"] == round(res["kafka_msgs_per_s"]
                                              / res["hoeffding_rows_per_s"], 2)
    stages = res["stages"]
    assert {"consume", "client_threads", "validate", "bookkeeping", "encode", "predict",
            "publish", "learn"} <= set(stages)
    assert stages["validate"] > 0 and stages["learn"] > 0 and stages["consume"] > 0
    lat = res["latency"]
    assert lat["records"] == 1500 and 0 < lat["p50_s"] <= lat["p99_s"] <= lat["max_s"]
