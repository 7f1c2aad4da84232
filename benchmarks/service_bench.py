"""Stream-service throughput, latency, CPU by stage and memory.

Usage: python benchmarks/service_bench.py [--records N] [--soak N] [--model NAME]
[--set NAME=JSON ...] [--kafka-client auto|kafka-python|confluent] [--latency-rate R]
[--latency-seconds S] [--predictions N] [--json]

``--model`` and ``--set`` take what ``dpstream serve --model`` / ``--set`` take (default
``sgbdt``); ``--kafka-client`` picks the Kafka phases' client (default ``auto``: the fastest
installed). Reports the yardstick (river's Hoeffding tree on the same records), file and Kafka
replay rates, CPU per message by stage, end-to-end latency at a set rate, memory over a soak,
and (``--predictions N``) the cost of checkpointing every round. Each field:
docs/benchmark_notes.md#stream-service-script; results: docs/benchmark_notes.md#stream-service.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.connectors.kafka_clients import kafka_source, resolve_kafka_client
from dpstream.connectors.local_broker import LocalBroker
from dpstream.stream import load_adult
from dpstream.stream.runner import PrequentialScore, Runner, streaming_gc
from dpstream.stream.service import replay


def _params(items: list[str]) -> dict:
    """The ``--set NAME=JSON`` pairs (JSON values; a bare word is a string)."""
    out = {}
    for item in items:
        name, _, raw = item.partition("=")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=200_000, help="Adult records (cycled)")
    p.add_argument("--soak", type=int, default=1_000_000, help="records of the soak")
    p.add_argument("--model", default="sgbdt", help="a dpstream serve --model name")
    p.add_argument("--set", action="append", default=[], metavar="NAME=JSON",
                   help="a model parameter (repeatable)")
    p.add_argument("--kafka-client", default="auto",
                   help="auto, kafka-python or confluent (default auto)")
    p.add_argument("--latency-rate", type=int, default=20_000,
                   help="messages a second of the latency phase (0: no latency phase)")
    p.add_argument("--latency-seconds", type=int, default=10,
                   help="seconds of the latency phase")
    p.add_argument("--predictions", type=int, default=0, metavar="N",
                   help="records of the predictions phase (default 0: none)")
    p.add_argument("--json", action="store_true", help="one JSON line")
    return p.parse_args(argv)


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _message(X: list, y: list, i: int) -> bytes:
    return json.dumps({"id": i, "x": X[i % len(X)], "y": y[i % len(X)]}).encode()


def hoeffding_rate(X: list, y: list, n: int) -> int:
    """River's HoeffdingTreeClassifier predicting then learning ``n`` Adult records."""
    from river import tree

    model = tree.HoeffdingTreeClassifier()
    t0 = time.perf_counter()
    for i in range(n):
        x = X[i % len(X)]
        model.predict_one(x)
        model.learn_one(x, y[i % len(X)])
    return round(n / (time.perf_counter() - t0))


def main() -> None:
    args = parse_args()
    n, soak, model = args.records, args.soak, args.model
    client = resolve_kafka_client(args.kafka_client)
    X, y, schema = load_adult("all")
    messages = [_message(X, y, i) for i in range(n)]
    params = _params(args.set)
    out: dict = {"model": model, "records": n, "kafka_client": client,
                 **({"params": params} if params else {})}
    out["hoeffding_rows_per_s"] = hoeffding_rate(X, y, min(n, 100_000))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "records.jsonl.gz"
        path.write_bytes(gzip.compress(b"\n".join(messages) + b"\n", compresslevel=1))
        res = replay(str(path), schema=schema, model=model, epsilon=1.0, seed=0,
                     params=params)
        out["file_replay_rows_per_s"] = res["rows_per_s"]
        with LocalBroker() as broker:
            broker.create_topic("bench", partitions=2)
            broker.produce("bench", messages, partitions=2)
            marks: list = []   # (records, seconds, RSS) every 100k records of the replay

            def progress(done: int, _total: object) -> None:
                if done // 100_000 > len(marks) - 1 or not marks:
                    marks.append((done, time.perf_counter(), _rss_mib()))

            t0 = time.perf_counter()
            res = replay(f"kafka://{broker.bootstrap}/bench?group=bench", schema=schema,
                         model=model, epsilon=1.0, seed=0, params=params,
                         progress=progress, kafka_client=client)
            wall = time.perf_counter() - t0
            assert res["records_seen"] == n, res
            out["kafka_msgs_per_s"] = res["rows_per_s_streaming"]
            out["kafka_vs_hoeffding"] = round(out["kafka_msgs_per_s"]
                                              / out["hoeffding_rows_per_s"], 2)
            out["kafka_wall_s_incl_group_join"] = round(wall, 1)
            # steady state: the rate between consecutive 100k marks, and the RSS at each
            out["kafka_steady"] = [
                {"records": b[0], "msgs_per_s": round((b[0] - a[0]) / (b[1] - a[1])),
                 "rss_mib": round(b[2], 1)} for a, b in zip(marks, marks[1:], strict=False)]
            res = replay(f"kafka://{broker.bootstrap}/bench?group=bench-predicting",
                         schema=schema, model=model, epsilon=1.0, seed=0, params=params,
                         evaluate=True, kafka_client=client)
            out["kafka_msgs_per_s_predicting"] = res["rows_per_s_streaming"]
            out["kafka_predicting_vs_hoeffding"] = round(
                out["kafka_msgs_per_s_predicting"] / out["hoeffding_rows_per_s"], 2)
            out["stages"] = {**_consume_cpu(client, broker.bootstrap, n),
                             **_stage_cpu(model, schema, params, messages, tmp)}
            del messages
            if args.latency_rate:
                out["latency"] = _latency(client, broker, model, schema, params, X, y,
                                          args.latency_rate, args.latency_seconds)
        out["soak_rows_per_s"], out["soak"] = _soak(model, schema, params, X, y, soak, tmp)
    n_pred = args.predictions
    if n_pred:
        out["predictions"] = {mode: _predictions_rate(model, schema, X, y, params, n_pred, mode)
                              for mode in ("every_round", "hold")}
    if args.json:
        print(json.dumps(out))
    else:
        _print(out)


def _print(out: dict) -> None:
    for k, v in out.items():
        if k not in ("soak", "kafka_steady", "stages", "latency", "predictions"):
            print(f"{k}: {v}")
    for s in out["kafka_steady"]:
        print(f"  Kafka, up to {s['records']:>9,} records: {s['msgs_per_s']:>7,} msgs/s, "
              f"RSS {s['rss_mib']:7.1f} MiB")
    print("CPU µs per message by stage: " + ", ".join(
        f"{k} {v}" for k, v in out["stages"].items()))
    if "latency" in out:
        lat = out["latency"]
        print(f"latency at {lat['offered']:,} msgs/s offered ({lat['rate']:,} kept): p50 "
              f"{lat['p50_s'] * 1000:.1f} ms, p99 {lat['p99_s'] * 1000:.1f} ms, max "
              f"{lat['max_s'] * 1000:.1f} ms over {lat['records']:,} records")
    for mode, r in out.get("predictions", {}).items():
        print(f"  with predictions, {mode}: {r['rows_per_s']:,} rows/s after the first "
              f"{r['warm']:,}, {r['checkpoints']} checkpoints")
    for s in out["soak"]:
        pool = "" if s["active"] is None else f"active pool {s['active']:6,}, "
        print(f"  after {s['records']:>9,} records: RSS {s['rss_mib']:7.1f} MiB, "
              f"{pool}trees {s['trees']:5,}")


def _consume_cpu(client: str, bootstrap: str, n: int) -> dict:
    """CPU per message of the client reading the ``bench`` topic to its end (a new group),
    from the first poll that returned records: this thread (the client's calls and the
    source records) and the client's own threads."""
    stop = threading.Event()
    source = kafka_source(client, bootstrap, "bench", "bench-consume",
                          position_of=lambda key: None, on_revoke=lambda: None, exclusive=True)
    source.connect(stop)
    got = 0
    while got == 0:
        got = len(source.poll(timeout_ms=200))
    t_thread, t_proc = time.thread_time(), time.process_time()
    counted = 0
    while got < n:
        batch = source.poll(timeout_ms=200)
        got += len(batch)
        counted += len(batch)
    thread, proc = time.thread_time() - t_thread, time.process_time() - t_proc
    source.close()
    return {"consume": round(thread / counted * 1e6, 2),
            "client_threads": round(max(0.0, proc - thread) / counted * 1e6, 2)}


def _stage_cpu(model: str, schema, params: dict, messages: list, tmp: str) -> dict:
    """The runner's CPU per message by stage (``Runner.stage_seconds``), on ``messages`` in
    the service's batches of 2,000, every record predicted before it is learned."""
    store = CheckpointStore(Path(tmp) / "stages")
    runner = Runner.create(model, schema, store=store, epsilon=1.0, seed=0, params=params,
                           scorer=PrequentialScore(schema.target.type != "numeric"))
    runner.stage_seconds = {}
    with streaming_gc():   # as the service runs
        for start in range(0, len(messages), 2000):
            runner.process_many([SourceRecord(m, "bench:0", start + j, raw=m)
                                 for j, m in enumerate(messages[start:start + 2000])])
            runner.maybe_checkpoint()
    store.close()
    return {k: round(v / len(messages) * 1e6, 2) for k, v in runner.stage_seconds.items()}


def _latency(client: str, broker: LocalBroker, model: str, schema, params: dict, X: list,
             y: list, rate: int, seconds: int) -> dict:
    """Broker-to-prediction latency at an offered rate (module docstring)."""
    total = rate * seconds
    broker.create_topic("live", partitions=2)
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        store = CheckpointStore(Path(tmp) / "ck")
        runner = Runner.create(model, schema, store=store, epsilon=1.0, seed=0, params=params,
                               scorer=PrequentialScore(True))
        source = kafka_source(client, broker.bootstrap, "live", "live",
                              position_of=runner.position_of, on_revoke=runner.checkpoint,
                              exclusive=True)
        source.connect(stop)
        joined = time.perf_counter() + 60
        while not source.assigned and time.perf_counter() < joined:
            source.poll(timeout_ms=200)   # join the group before the producer starts
        producer = threading.Thread(target=_produce, args=(broker.bootstrap, "live", X, y,
                                                           rate, total), daemon=True)
        waits: list = []
        t0 = time.perf_counter()
        producer.start()
        while len(waits) < total and time.perf_counter() - t0 < seconds * 3 + 30:
            recs = source.poll(timeout_ms=100)
            for start in range(0, len(recs), 2000):
                chunk = recs[start:start + 2000]
                runner.process_many(chunk)
                now = time.time()
                waits.extend(now - r.meta["timestamp"] for r in chunk)
            runner.maybe_checkpoint()
        wall = time.perf_counter() - t0
        producer.join()
        source.close()
        store.close()
    w = np.array(waits)
    return {"offered": rate, "records": len(waits), "rate": round(len(waits) / wall),
            "p50_s": round(float(np.percentile(w, 50)), 4),
            "p99_s": round(float(np.percentile(w, 99)), 4), "max_s": round(float(w.max()), 4)}


def _produce(bootstrap: str, topic: str, X: list, y: list, rate: int, total: int) -> None:
    """``total`` messages at ``rate`` a second, in 10 ms bursts (confluent-kafka's producer
    when installed: it keeps up at rates kafka-python's cannot on two cores)."""
    try:
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
        send = producer.produce
        poll, flush = producer.poll, producer.flush
    except ImportError:
        from kafka import KafkaProducer
        kp = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)

        def send(topic, value):
            kp.send(topic, value)
        poll, flush = (lambda timeout: None), kp.flush
    t0 = time.perf_counter()
    for i in range(total):
        if i % max(1, rate // 100) == 0:
            ahead = i / rate - (time.perf_counter() - t0)
            if ahead > 0:
                time.sleep(ahead)
            poll(0)
        while True:
            try:
                send(topic, value=_message(X, y, i))
                break
            except BufferError:   # confluent's queue is full: let it drain
                poll(0.01)
    flush()


def _soak(model: str, schema, params: dict, X: list, y: list, soak: int, tmp: str) -> tuple:
    """Records/s and the RSS, active pool and trees every 100k records of a soak (the
    service's batches of JSON messages, in process, with the service's GC thresholds)."""
    store = CheckpointStore(Path(tmp) / "soak")
    runner = Runner.create(model, schema, store=store, epsilon=1.0, seed=0, params=params)
    samples = []
    t0 = time.perf_counter()
    with streaming_gc():
        for start in range(0, soak, 2000):
            runner.process_many([SourceRecord(_message(X, y, i), "soak:0", i)
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
    return round(soak / (time.perf_counter() - t0)), samples


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
            runner.process_many([SourceRecord(_message(X, y, i), "bench", i)
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
