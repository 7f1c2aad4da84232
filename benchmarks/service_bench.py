"""Stream-service throughput and memory (docs/benchmark_notes.md, "Stream service").

Usage: python benchmarks/service_bench.py [--records N] [--soak N] [--model NAME]
[--set NAME=JSON ...] [--predictions N] [--json]

``--model``: any ``dpstream serve --model`` name (default ``sgbdt``, the service's default);
``--set``: a model parameter, as ``dpstream serve --set`` takes it (e.g. ``pool_rounds=200``).

* ``file_replay_rows_per_s``: ``replay()`` of a gzip JSONL file of N Adult records (cycled,
  unique ids) — read, validate, learn, checkpoint every 5 s;
* ``kafka_msgs_per_s``: the same N messages pre-produced to a 2-partition topic on a local tansu
  broker, consumed to the end by ``replay("kafka://...")`` (consumer group, validation,
  learning, checkpoints, offset commits); producing is not timed;
* ``kafka_steady``: the Kafka replay's rate between consecutive 100k-record marks, and the
  resident set size (RSS) at each;
* ``soak``: a ``Runner`` fed ``--soak`` records (default 1,000,000) in process, in the
  service's batches of 2,000 (``process_many``); resident set
  size (RSS) and the model's active pool every 100k records.
* ``predictions`` (only with ``--predictions N``): the same in-process runner, JSON messages,
  publishing a prediction per record to a sink that only counts them, once with a checkpoint
  after every training round (the default with a predictions topic) and once with
  ``hold_predictions`` (``serve --hold-predictions``); ``maybe_checkpoint`` after each batch,
  as the service loop calls it. The rate over the records after the first 110,000 (a full
  S-GBDT pool), and how many checkpoints each wrote.
"""

from __future__ import annotations

import gzip
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.connectors.local_broker import LocalBroker
from dpstream.stream import load_adult
from dpstream.stream.runner import Runner
from dpstream.stream.service import replay


def _arg(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def _params() -> dict:
    """The ``--set NAME=JSON`` pairs (JSON values; a bare word is a string)."""
    out = {}
    for i, arg in enumerate(sys.argv[:-1]):
        if arg == "--set":
            name, _, raw = sys.argv[i + 1].partition("=")
            try:
                out[name] = json.loads(raw)
            except json.JSONDecodeError:
                out[name] = raw
    return out


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def main() -> None:
    n, soak = _arg("--records", 200_000), _arg("--soak", 1_000_000)
    model = sys.argv[sys.argv.index("--model") + 1] if "--model" in sys.argv else "sgbdt"
    X, y, schema = load_adult("all")
    messages = [json.dumps({"id": i, "x": X[i % len(X)], "y": y[i % len(X)]}).encode()
                for i in range(n)]
    params = _params()
    out: dict = {"model": model, "records": n, **({"params": params} if params else {})}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "records.jsonl.gz"
        path.write_bytes(gzip.compress(b"\n".join(messages) + b"\n", compresslevel=1))
        res = replay(str(path), schema=schema, model=model, epsilon=1.0, seed=0,
                     params=params)
        out["file_replay_rows_per_s"] = res["rows_per_s"]
        with LocalBroker() as broker:
            broker.create_topic("bench", partitions=2)
            broker.produce("bench", messages, partitions=2)
            del messages
            marks: list = []   # (records, seconds, RSS) every 100k records of the replay

            def progress(done: int, _total: object) -> None:
                if done // 100_000 > len(marks) - 1 or not marks:
                    marks.append((done, time.perf_counter(), _rss_mib()))

            t0 = time.perf_counter()
            res = replay(f"kafka://{broker.bootstrap}/bench?group=bench", schema=schema,
                         model=model, epsilon=1.0, seed=0, params=params,
                         progress=progress)
            wall = time.perf_counter() - t0
            assert res["records_seen"] == n, res
            out["kafka_msgs_per_s"] = res["rows_per_s_streaming"]
            out["kafka_wall_s_incl_group_join"] = round(wall, 1)
            # steady state: the rate between consecutive 100k marks, and the RSS at each
            out["kafka_steady"] = [
                {"records": b[0], "msgs_per_s": round((b[0] - a[0]) / (b[1] - a[1])),
                 "rss_mib": round(b[2], 1)} for a, b in zip(marks, marks[1:], strict=False)]

        store = CheckpointStore(Path(tmp) / "soak")
        runner = Runner.create(model, schema, store=store, epsilon=1.0, seed=0, params=params)
        samples = []
        t0 = time.perf_counter()
        for start in range(0, soak, 2000):   # in the service's batches (process_many)
            runner.process_many([SourceRecord({"id": i, "x": X[i % len(X)],
                                               "y": y[i % len(X)]}, "soak", i)
                                 for i in range(start, min(soak, start + 2000))])
            if (start + 2000) % 100_000 == 0:
                runner.maybe_checkpoint()
                engine = getattr(runner.model, "engine", None)   # S-GBDT's pool and forest
                samples.append({"records": start + 2000, "rss_mib": round(_rss_mib(), 1),
                                "active": None if engine is None else len(engine),
                                "trees": len(engine.forest) if engine is not None
                                else getattr(runner.model, "n_trees_kept", 0)})
        runner.checkpoint()
        store.close()
        out["soak_rows_per_s"] = round(soak / (time.perf_counter() - t0))
        out["soak"] = samples
    n_pred = _arg("--predictions", 0)
    if n_pred:
        out["predictions"] = {mode: _predictions_rate(model, schema, X, y, params, n_pred, mode)
                              for mode in ("every_round", "hold")}
    if "--json" in sys.argv:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            if k not in ("soak", "kafka_steady"):
                print(f"{k}: {v}")
        for s in out["kafka_steady"]:
            print(f"  Kafka, up to {s['records']:>9,} records: {s['msgs_per_s']:>7,} msgs/s, "
                  f"RSS {s['rss_mib']:7.1f} MiB")
        for mode, r in out.get("predictions", {}).items():
            print(f"  with predictions, {mode}: {r['rows_per_s']:,} rows/s after the first "
                  f"{r['warm']:,}, {r['checkpoints']} checkpoints")
        for s in out["soak"]:
            pool = "" if s["active"] is None else f"active pool {s['active']:6,}, "
            print(f"  after {s['records']:>9,} records: RSS {s['rss_mib']:7.1f} MiB, "
                  f"{pool}trees {s['trees']:5,}")


class _CountingSink:
    """A predictions sink that only counts (the benchmark measures the runner, not Kafka)."""

    def __init__(self) -> None:
        self.sent = 0

    def send_json(self, value: dict, key: bytes | None = None) -> None:
        self.sent += 1

    def flush(self) -> None:
        pass


def _predictions_rate(model: str, schema, X, y, params: dict, n: int, mode: str,
                      warm: int = 110_000) -> dict:
    """Rows/s of the runner with a predictions sink after ``warm`` records (module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = CheckpointStore(Path(tmp) / "ck")
        sink = _CountingSink()
        runner = Runner.create(model, schema, store=store, epsilon=1.0, seed=0, params=params,
                               predictions=sink, hold_predictions=mode == "hold")
        t0 = before = 0.0
        for start in range(0, warm + n, 2000):
            if start == warm:
                t0, before = time.perf_counter(), runner.counters["checkpoints"]
            runner.process_many([SourceRecord(json.dumps({"id": i, "x": X[i % len(X)],
                                                          "y": y[i % len(X)]}).encode(),
                                              "bench", i)
                                 for i in range(start, min(warm + n, start + 2000))])
            runner.maybe_checkpoint()
        rate = n / (time.perf_counter() - t0)
        runner.checkpoint()   # releases what is still held (not timed: a stop would do it)
        assert sink.sent == warm + n, sink.sent   # one prediction per record, all released
        store.close()
        return {"rows_per_s": round(rate), "warm": warm,
                "checkpoints": runner.counters["checkpoints"] - before}


if __name__ == "__main__":
    main()
