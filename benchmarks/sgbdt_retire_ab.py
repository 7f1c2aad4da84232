"""The service's S-GBDT runner with block retirement against one tree at a time, interleaved.

Usage: python benchmarks/sgbdt_retire_ab.py [--warm N] [--records N] [--blocks 100,1] [--json]

Single runs of ``benchmarks/service_bench.py`` scatter by 10% or more on a shared 2-core
machine, more than the difference measured here, so this compares the settings side by side
in one process: a ``Runner`` per ``retire_block`` (the default ``max_trees`` of 1,000, every
other setting the service's default, epsilon 1, seed 0) is fed Adult records (adult.data and
adult.test cycled, unique ids, JSON-like dicts) in the service's batches of 2,000
(``process_many``). After ``--warm`` records each (default 260,000: a full pool of 100,000
and a full forest, so every round retires trees), the next ``--records`` (default 200,000)
are fed batch by batch, the runners taking turns, and each runner's time is summed over its
own batches. Prints per setting the microseconds a record and the records a second, and the
ratio of the first setting's rate to each other's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.stream import load_adult
from dpstream.stream.runner import Runner

BATCH = 2000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--warm", type=int, default=260_000, help="records before the timing")
    p.add_argument("--records", type=int, default=200_000, help="records timed")
    p.add_argument("--blocks", type=lambda t: [int(b) for b in t.split(",")], default=[100, 1],
                   help="comma-separated retire_block values (default 100,1)")
    p.add_argument("--json", action="store_true", help="one JSON line")
    args = p.parse_args()
    warm, n, blocks = args.warm, args.records, args.blocks
    X, y, schema = load_adult("all")

    def batch(start: int) -> list:
        return [SourceRecord({"id": i, "x": X[i % len(X)], "y": y[i % len(X)]}, "ab", i)
                for i in range(start, start + BATCH)]

    with tempfile.TemporaryDirectory() as tmp:
        runners = [Runner.create("sgbdt", schema, store=CheckpointStore(Path(tmp) / str(b)),
                                 epsilon=1.0, seed=0, params={"retire_block": b})
                   for b in blocks]
        for start in range(0, warm, BATCH):
            for r in runners:
                r.process_many(batch(start))
        spent = [0.0] * len(runners)
        for start in range(warm, warm + n, BATCH):
            for turn in range(len(runners)):   # each takes the first turn in turn
                j = (turn + start // BATCH) % len(runners)
                records = batch(start)
                t0 = time.perf_counter()
                runners[j].process_many(records)
                spent[j] += time.perf_counter() - t0
        out = {"warm": warm, "records": n}
        for b, r, s in zip(blocks, runners, spent, strict=True):
            e = r.model.engine
            out[f"block_{b}"] = {"us_per_record": round(s / n * 1e6, 2),
                                 "records_per_s": round(n / s),
                                 "trees": len(e.forest), "trees_retired": e.trees_retired,
                                 "pool": len(e)}
        for b, s in zip(blocks[1:], spent[1:], strict=True):
            out[f"speedup_vs_block_{b}"] = round(s / spent[0], 3)
        for r in runners:
            r.store.close()
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
