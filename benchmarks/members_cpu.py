"""A member's CPU per record against k, in one process, without a broker or other processes.

Usage: python benchmarks/members_cpu.py [--records N] [--members 1,2,4] [--partitions 12]
[--hold-predictions] [--profile K]

k :class:`~dpstream.stream.members.WindowMember` s (median forest, epsilon 1, as
``examples/scale_out.py`` runs them) share a model topic held in memory and take turns on
Agrawal records dealt to ``--partitions`` partitions, as the service loop drives them.

Prints one JSON line per k: ``us_per_record`` (the members' CPU per record of the stream) and
its parts per record (``checkpoint``, ``predict``, ``learn``, ``grow``, ``adopt``,
``publish``), so the parts that grow with k show, and the cost of one checkpoint at the end.
The setup, each field, and why: docs/benchmark_notes.md#members-cpu-script.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.connectors.model_topic import decode_message, encode_message
from dpstream.stream.members import WindowMember
from dpstream.stream.runner import Runner, streaming_gc


class MemoryModelTopic:
    """The model topic's interface over a list shared by the members (one reader position
    each); messages are encoded and decoded as on the broker."""

    def __init__(self, log: list):
        self.log, self.pos = log, 0
        self.published = self.read = self.rejected = 0

    def publish(self, updates: dict) -> None:
        for key, state in updates.items():
            self.log.append((key, None if state is None else encode_message(state)))
            self.published += 1

    def poll(self, timeout_ms: int = 0) -> dict:
        out = {}
        while self.pos < len(self.log):
            key, value = self.log[self.pos]
            self.pos += 1
            out[key] = None if value is None else decode_message(value)
            self.read += value is not None
        return out

    def catch_up(self, timeout: float = 30.0) -> dict:
        return self.poll()

    def close(self) -> None:
        pass


class DropSink:
    """Predictions: JSON-encoded as the Kafka sink does, then dropped."""

    def send_json(self, value: dict, key: bytes | None = None) -> None:
        json.dumps(value).encode("utf-8")

    def flush(self, timeout: float | None = None) -> None:
        pass


#: (part, the object, the method) timed separately
PARTS = (("checkpoint", Runner, "checkpoint"), ("publish", WindowMember, "publish"),
         ("adopt", WindowMember, "_adopt"))


def run(k: int, values: list[bytes], partitions: int, hold_predictions: bool,
        profile: bool) -> dict:
    from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA

    log: list = []
    spent: dict[str, float] = defaultdict(float)
    originals = {}

    adopted = [0]   # windows and releases adopted (what _adopt returns), all members

    def timed(name, fn):
        def wrapper(*a, **kw):
            t = time.process_time()
            try:
                got = fn(*a, **kw)
            finally:
                spent[name] += time.process_time() - t
            if name == "adopt":
                adopted[0] += got
            return got
        return wrapper

    for name, cls, attr in PARTS:
        originals[(cls, attr)] = getattr(cls, attr)
        setattr(cls, attr, timed(name, getattr(cls, attr)))
    members = []
    prof = cProfile.Profile() if profile else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for m in range(k):
                runner = Runner.create(
                    "median-forest", AGRAWAL_SCHEMA, store=CheckpointStore(Path(tmp) / f"m{m}"),
                    epsilon=1.0, seed=m, params={"n_trees": 5}, predictions=DropSink(),
                    hold_predictions=hold_predictions)
                member = WindowMember(runner, MemoryModelTopic(log), f"m{m}")
                member.start()
                mine = [p for p in range(partitions) if p % k == m]
                for p in mine:   # as the consumer asks at an assignment
                    member.position_of(f"t:{p}")
                member.on_assigned(mine, partitions)
                members.append(member)
            streams = [[] for _ in range(k)]
            offsets = [0] * partitions
            for i, v in enumerate(values):
                p = i % partitions
                streams[p % k].append(SourceRecord(value=v, partition=f"t:{p}",
                                                   offset=offsets[p]))
                offsets[p] += 1
            cpu = [0.0] * k
            turn = 2000
            if prof is not None:
                prof.enable()
            with streaming_gc():   # as the service loop runs
                for start in range(0, max(len(s) for s in streams), turn):
                    for m, member in enumerate(members):
                        chunk = streams[m][start:start + turn]
                        t = time.process_time()
                        if chunk:
                            member.process_adopting(chunk)
                        member.poll()
                        member.runner.maybe_checkpoint()
                        cpu[m] += time.process_time() - t
            if prof is not None:
                prof.disable()
            last = members[0].runner   # one checkpoint at the end: its id memory is full-ish
            end_ms = min(_wall(last.checkpoint) for _ in range(5)) * 1e3
            for member in members:
                member.runner.store.close()
    finally:
        for (cls, attr), fn in originals.items():
            setattr(cls, attr, fn)
    n = len(values)
    out = {"members": k, "records": n, "us_per_record": round(sum(cpu) / n * 1e6, 1),
           "per_member_s": [round(c, 2) for c in cpu],
           **{name: round(spent[name] / n * 1e6, 1) for name, _, _ in PARTS},
           "hold_predictions": hold_predictions,
           "windows_closed": [int(m.runner.model.windows_closed) for m in members],
           # per member: the members whose windows are in the union it predicts with
           "union_members": [len(m.ensemble.members()) for m in members],
           "adopted": adopted[0],
           "checkpoints": [int(m.runner.counters.get("checkpoints", 0)) for m in members],
           "learned": sum(m.runner.counters["learned"] for m in members),
           "checkpoint_ms_at_end": round(end_ms, 1),
           "ids_at_end": len(members[0].runner.ids),
           "open_window_rows_at_end": len(members[0].runner.model._buffer_y)}
    if prof is not None:
        stats = pstats.Stats(prof)
        stats.sort_stats("cumulative").print_stats(40)
    return out


def _wall(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=60_000, help="Agrawal records")
    p.add_argument("--members", type=lambda t: [int(v) for v in t.split(",")],
                   default=[1, 2, 4], help="comma-separated member counts k (default 1,2,4)")
    p.add_argument("--partitions", type=int, default=12, help="partitions of the stream")
    p.add_argument("--hold-predictions", action="store_true",
                   help="the runners' hold_predictions (no checkpoint per round)")
    p.add_argument("--profile", type=int, default=0, metavar="K",
                   help="print the cProfile of the run with K members")
    args = p.parse_args()
    from river.datasets import synth

    n, ks, partitions, profile_k = args.records, args.members, args.partitions, args.profile
    rows = synth.Agrawal(classification_function=2, seed=0).take(n)
    values = [json.dumps({"id": i, "x": x, "y": y}).encode() for i, (x, y) in enumerate(rows)]
    for k in ks:
        print(json.dumps(run(k, values, partitions, args.hold_predictions,
                             profile=k == profile_k)), flush=True)


if __name__ == "__main__":
    main()
