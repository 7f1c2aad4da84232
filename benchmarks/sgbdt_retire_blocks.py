"""S-GBDT's block retirement against one tree at a time, on long river streams.

Usage: python benchmarks/sgbdt_retire_blocks.py [--records N] [--functions 1,2,3,4]
[--blocks 1,100] [--max-trees M] [--seeds 0] [--drift] [--json]

For each Agrawal function (``--drift``: also a drift from function 1 to 3) and each
``retire_block``, an ``SGBDTClassifier`` (epsilon 1) learns the stream as the service does.
Prints per run the prequential accuracy (whole stream, last 25,000 records), the rounds, the
trees retired and kept, and the rows per second; with ``--json`` one object per line. The
setup: docs/benchmark_notes.md#s-gbdt-block-retirement-script.
"""

from __future__ import annotations

import argparse
import json
import time

from river.datasets import synth

from dpstream.models import SGBDTClassifier
from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA

TAIL = 25_000


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def _stream(name: str, n: int) -> tuple[list, list]:
    if name == "drift-1-3":
        gen = synth.ConceptDriftStream(
            stream=synth.Agrawal(classification_function=1, seed=1),
            drift_stream=synth.Agrawal(classification_function=3, seed=2),
            position=n // 2, width=1000, seed=3)
    else:
        gen = synth.Agrawal(classification_function=int(name[1:]), seed=1)
    rows = list(gen.take(n))
    return [x for x, _ in rows], [y for _, y in rows]


def run(name: str, X: list, y: list, block: int, max_trees: int = 1000,
        seed: int = 0) -> dict:
    model = SGBDTClassifier(schema=AGRAWAL_SCHEMA, epsilon=1.0, seed=seed, retire_block=block,
                            max_trees=max_trees)
    hits = tail_hits = 0
    n = len(y)
    t0 = time.perf_counter()
    i = 0
    while i < n:
        room, labeled = model.stream_room()
        k = min(500, room, labeled or room, n - i)
        batch = X[i:i + k]
        preds = model.predict_many(batch)
        for j, p in enumerate(preds):
            ok = p == y[i + j]
            hits += ok
            tail_hits += ok and i + j >= n - TAIL
        model.learn_stream(batch, y[i:i + k])
        i += k
    seconds = time.perf_counter() - t0
    e = model.engine
    tail = min(TAIL, n)
    return {"stream": name, "records": n, "seed": seed, "retire_block": block,
            "accuracy": round(hits / n, 4), "accuracy_last_25k": round(tail_hits / tail, 4),
            "rounds": e.rounds, "trees_retired": e.trees_retired, "trees": len(e.forest),
            "rows_per_s": round(n / seconds)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=200_000, help="records of each stream")
    p.add_argument("--functions", type=_ints, default=[1, 2, 3, 4],
                   help="comma-separated Agrawal functions (default 1,2,3,4)")
    p.add_argument("--blocks", type=_ints, default=[1, 100],
                   help="comma-separated retire_block values (default 1,100)")
    p.add_argument("--max-trees", type=int, default=1000, help="the models' max_trees")
    p.add_argument("--seeds", type=_ints, default=[0], help="comma-separated model seeds")
    p.add_argument("--drift", action="store_true", help="also function 1 -> 3 at the middle")
    p.add_argument("--json", action="store_true", help="one JSON line per run")
    args = p.parse_args()
    n, blocks, max_trees, seeds = args.records, args.blocks, args.max_trees, args.seeds
    names = [f"f{f}" for f in args.functions]
    if args.drift:
        names.append("drift-1-3")
    for name in names:
        X, y = _stream(name, n)
        for seed in seeds:
            for block in blocks:
                out = run(name, X, y, block, max_trees, seed)
                if args.json:
                    print(json.dumps(out), flush=True)
                else:
                    print(" ".join(f"{k}={v}" for k, v in out.items()), flush=True)


if __name__ == "__main__":
    main()
