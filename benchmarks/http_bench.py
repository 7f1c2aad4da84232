"""HTTP predictions: latency and throughput of ``POST /predict``, and what the load costs
training (results: docs/benchmark_notes.md#http-predictions-issue-67).

Usage: python benchmarks/http_bench.py [--messages N] [--seconds S] [--clients K]
[--requests N] [--serve-args ARGS] [--model-file PATH] [--json]

Two phases: **serve** (``dpstream serve --http-predict`` training from a backlog on a local
tansu broker, its rate in quiet and loaded windows, request latency while it trains) and
**serve-model** (the exported checkpoint served by ``dpstream serve-model``: latency, then
``--clients`` concurrent clients). ``--serve-args`` passes more flags to ``dpstream serve``.
Prints a markdown table (``--json``: one JSON object). How each phase measures:
docs/benchmark_notes.md#http-predictions-script.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=450_000,
                   help="Kafka messages the service may train on (default 450,000: more than "
                        "five windows use at full speed on 2 cores)")
    p.add_argument("--seconds", type=float, default=8.0, help="each window (default 8)")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    p.add_argument("--requests", type=int, default=300,
                   help="sequential requests per latency figure of serve-model (default 300)")
    p.add_argument("--serve-args", default="", metavar="ARGS", help="more flags for dpstream "
                   "serve, one string (e.g. '--http-concurrency 1')")
    p.add_argument("--model-file", metavar="PATH", help="benchmark serve-model on this public "
                   "model file only (no broker, no serve)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


class Client:
    """One kept-alive connection; :meth:`post` returns (status, seconds)."""

    def __init__(self, port: int):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def post(self, body: bytes) -> tuple[int, float]:
        t0 = time.perf_counter()
        try:
            self.conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
            reply = self.conn.getresponse()
            reply.read()
            status = reply.status
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            status = -1
        return status, time.perf_counter() - t0

    def close(self) -> None:
        self.conn.close()


def _bodies(size: int, count: int = 200) -> list[bytes]:
    from dpstream.stream import load_adult

    X = load_adult("test").X
    if size == 1:
        return [json.dumps(X[i]).encode() for i in range(count)]
    return [json.dumps(X[i * size % (len(X) - size):][:size]).encode() for i in range(count)]


def _quantiles(seconds: list[float]) -> dict:
    if not seconds:
        return {"p50_ms": None, "p99_ms": None}
    s = sorted(seconds)
    return {"p50_ms": round(1e3 * s[len(s) // 2], 2),
            "p99_ms": round(1e3 * s[min(len(s) - 1, int(0.99 * len(s)))], 2)}


def sequential(port: int, bodies: list[bytes], n: int) -> dict:
    """Latency of ``n`` requests one after another on one connection."""
    client, times, errors = Client(port), [], 0
    for i in range(n):
        status, dt = client.post(bodies[i % len(bodies)])
        times.append(dt)
        errors += status != 200
    client.close()
    return {**_quantiles(times), "requests": n, "errors": errors}


def hammer(port: int, bodies: list[bytes], clients: int, seconds: float,
           records_per_request: int) -> dict:
    """``clients`` threads posting as fast as they are answered for ``seconds``."""
    times: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    stop = threading.Event()

    def run(k: int) -> None:
        client, i = Client(port), k
        while not stop.is_set():
            status, dt = client.post(bodies[i % len(bodies)])
            times[k].append(dt)
            errors[k] += status != 200
            i += clients
        client.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    n = sum(map(len, times))
    return {**_quantiles([t for ts in times for t in ts]), "requests": n, "errors": sum(errors),
            "requests_per_s": round(n / wall), "records_per_s": round(n * records_per_request
                                                                      / wall)}


def _seen(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return next(float(line.split()[-1]) for line in text.splitlines()
                if line.startswith('dpstream_records_total{outcome="seen"}'))


def _window(port: int, seconds: float, work=None) -> dict:
    """The training rate over ``seconds`` while ``work()`` runs (its result beside)."""
    box: dict = {}
    worker = None if work is None else threading.Thread(target=lambda: box.update(work()))
    s0, t0 = _seen(port), time.perf_counter()
    if worker is not None:
        worker.start()
        worker.join()
    else:
        time.sleep(seconds)
    s1, t1 = _seen(port), time.perf_counter()
    return {"training_rows_per_s": round((s1 - s0) / (t1 - t0)), "seen_at_end": int(s1), **box}


def _produce(bootstrap: str, topic: str, n: int) -> None:
    from dpstream.stream import load_adult

    X, y = [], []
    for split in ("train", "test"):
        data = load_adult(split)
        X += data.X
        y += data.y
    values = [json.dumps({"id": i, "x": X[i % len(X)], "y": y[i % len(X)]}).encode()
              for i in range(n)]
    try:
        from confluent_kafka import Producer
    except ImportError:   # kafka-python's producer: slower, the same messages
        from kafka import KafkaProducer

        kp = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
        for v in values:
            kp.send(topic, v)
        kp.flush()
        kp.close()
        return
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for v in values:
        while True:
            try:
                producer.produce(topic, v)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()


def bench_serve(args: argparse.Namespace, tmp: Path) -> tuple[dict, Path]:
    """The service phase; returns its figures and the exported model file."""
    from dpstream.connectors.local_broker import LocalBroker, free_port
    from dpstream.stream import load_adult

    schema = tmp / "schema.json"
    load_adult("train").schema.dump(schema)
    port = free_port()
    one, hundred = _bodies(1), _bodies(100, 50)
    out: dict = {}
    with LocalBroker() as broker:
        broker.create_topic("records")
        t0 = time.perf_counter()
        _produce(broker.bootstrap, "records", args.messages)
        out["produce_s"] = round(time.perf_counter() - t0, 1)
        log = open(tmp / "serve.log", "wb")
        proc = subprocess.Popen(
            [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", "records",
             "--schema", str(schema), "--epsilon", "1.0", "--checkpoint-dir", str(tmp / "ck"),
             "--metrics-port", str(port), "--http-predict", "--seed", "0",
             *args.serve_args.split()],
            stdout=log, stderr=log, env={**os.environ, "DPSTREAM_ALLOW_SEED": "1"})
        try:
            deadline = time.monotonic() + 120
            while True:   # listening, trained a little (past the first checkpoints)
                try:
                    if _seen(port) >= 10_000:
                        break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("serve did not start:\n" + (tmp / "serve.log").read_text(
                        errors="replace")[-3000:])
                time.sleep(0.5)

            def light() -> dict:
                client, t_one, t_hundred = Client(port), [], []
                end = time.perf_counter() + args.seconds
                i = 0
                while time.perf_counter() < end:
                    t_one.append(client.post(one[i % len(one)])[1])
                    t_hundred.append(client.post(hundred[i % len(hundred)])[1])
                    i += 1
                client.close()
                return {"latency_1": {**_quantiles(t_one), "requests": len(t_one)},
                        "latency_100": {**_quantiles(t_hundred), "requests": len(t_hundred)}}

            quiet = [_window(port, args.seconds)]
            out["one_client"] = _window(port, args.seconds, light)
            quiet.append(_window(port, args.seconds))
            out["clients"] = _window(port, args.seconds, lambda: {
                "load": hammer(port, one, args.clients, args.seconds, 1)})
            quiet.append(_window(port, args.seconds))
            out["no_requests"] = [q["training_rows_per_s"] for q in quiet]
            out["stream_ended"] = quiet[-1]["seen_at_end"] >= args.messages
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
            log.close()
    model = tmp / "model.json"
    subprocess.run([*DPSTREAM, "export", "--checkpoint-dir", str(tmp / "ck"), "-o", str(model)],
                   check=True, capture_output=True)
    rates = out["no_requests"]
    out["training_rows_per_s_without_requests"] = round(sum(rates) / len(rates))
    for i, key in ((0, "one_client"), (1, "clients")):   # against the windows on either side
        out[key]["share_kept"] = round(out[key]["training_rows_per_s"]
                                       / ((rates[i] + rates[i + 1]) / 2), 3)
    return out, model


def bench_serve_model(args: argparse.Namespace, model: Path) -> dict:
    proc = subprocess.Popen([*DPSTREAM, "serve-model", str(model), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        found = re.search(r"\((\w+), (\d+) trees.* on http://127\.0\.0\.1:(\d+):", line)
        if found is None:
            raise RuntimeError(f"serve-model did not start: {line}{proc.stderr.read()}")
        port = int(found.group(3))
        one, hundred = _bodies(1), _bodies(100, 50)
        sequential(port, one, 20)   # (the first requests load numba's routing)
        return {"model": found.group(1), "trees": int(found.group(2)),
                "latency_1": sequential(port, one, args.requests),
                "latency_100": sequential(port, hundred, args.requests),
                "clients_1": hammer(port, one, args.clients, args.seconds, 1),
                "clients_100": hammer(port, hundred, args.clients, args.seconds, 100)}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def table(out: dict, clients: int) -> str:
    rows = ["| target | measurement | figure |", "|---|---|---|"]
    m = out["serve_model"]
    rows += [
        f"| serve-model ({m['model']}, {m['trees']} trees) | 1 record per request, one client "
        f"| p50 {m['latency_1']['p50_ms']} ms, p99 {m['latency_1']['p99_ms']} ms |",
        f"| | 100 records per request, one client | p50 {m['latency_100']['p50_ms']} ms, p99 "
        f"{m['latency_100']['p99_ms']} ms |",
        f"| | {clients} clients, 1 record per request | {m['clients_1']['requests_per_s']:,} "
        f"requests/s (p50 {m['clients_1']['p50_ms']} ms, p99 {m['clients_1']['p99_ms']} ms; "
        f"{m['clients_1']['errors']} errors) |",
        f"| | {clients} clients, 100 records per request | "
        f"{m['clients_100']['records_per_s']:,} records/s ({m['clients_100']['requests_per_s']:,}"
        f" requests/s, p50 {m['clients_100']['p50_ms']} ms, p99 {m['clients_100']['p99_ms']} ms;"
        f" {m['clients_100']['errors']} errors) |"]
    s = out.get("serve")
    if s:
        light, load = s["one_client"], s["clients"]["load"]
        rows += [
            f"| serve --http-predict (training S-GBDT from a backlog) | training, no requests "
            f"| {s['training_rows_per_s_without_requests']:,} records/s (the three windows: "
            f"{', '.join(f'{r:,}' for r in s['no_requests'])}) |",
            f"| | one client, 1- and 100-record requests in turn | training "
            f"{light['training_rows_per_s']:,} records/s ({light['share_kept']:.0%} of the "
            f"windows beside); 1 record p50 {light['latency_1']['p50_ms']} ms, p99 "
            f"{light['latency_1']['p99_ms']} ms; 100 records p50 "
            f"{light['latency_100']['p50_ms']} ms, p99 {light['latency_100']['p99_ms']} ms |",
            f"| | {clients} clients, 1 record per request | training "
            f"{s['clients']['training_rows_per_s']:,} records/s "
            f"({s['clients']['share_kept']:.0%}); {load['requests_per_s']:,} requests/s, "
            f"p50 {load['p50_ms']} ms, p99 {load['p99_ms']} ms; {load['errors']} errors (503: "
            f"busy) |"]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: dict = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        if args.model_file:
            model = Path(args.model_file)
        else:
            out["serve"], model = bench_serve(args, Path(tmp))
        out["serve_model"] = bench_serve_model(args, model)
    if args.json:
        print(json.dumps(out))
    else:
        print(table(out, args.clients))
        if out.get("serve", {}).get("stream_ended"):
            print("\nwarning: the service reached the end of the backlog: raise --messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
