"""What checkpointing every S-GBDT release costs a service that publishes predictions
(why it checkpoints: docs/reliability.md#checkpoints).

A runner with a counting predictions sink learns Adult in the service's batches; ``--hold``
holds predictions until the periodic checkpoint instead. Prints one JSON line: rows per wall
and CPU second, the checkpoints written and their CPU. How it runs:
docs/benchmark_notes.md#s-gbdt-checkpoint-cost-script.

Usage::

    python benchmarks/sgbdt_checkpoint_cost.py --records 20000 --warm-up 110000
    python benchmarks/sgbdt_checkpoint_cost.py --records 20000 --warm-up 30000 --hold
    python benchmarks/sgbdt_checkpoint_cost.py --model median-forest --records 100000 \
        --warm-up 40000
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


class _Count:
    """A predictions sink that only counts."""

    sent = 0

    def send_json(self, value, key=None) -> None:
        self.sent += 1

    def flush(self) -> None:
        pass


def measure(records: int, warm_up: int, hold: bool, model: str = "sgbdt") -> dict:
    X, y, schema = load_adult("all")
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner.create(model, schema, store=CheckpointStore(Path(tmp)), epsilon=1.0,
                               seed=0, predictions=_Count(), hold_predictions=hold)
        spent = [0.0]
        save = runner.checkpoint

        def timed() -> None:
            start = time.process_time()
            save()
            spent[0] += time.process_time() - start

        runner.checkpoint = timed
        total = warm_up + records
        for start in range(0, total, 2000):
            if start == warm_up:
                wall0, cpu0 = time.perf_counter(), time.process_time()
                saves0, spent[0] = runner.counters["checkpoints"], 0.0
            batch = [SourceRecord(json.dumps({"id": i, "x": X[i % len(X)],
                                              "y": y[i % len(X)]}).encode(), "b", i)
                     for i in range(start, min(total, start + 2000))]
            runner.process_many(batch)
            runner.maybe_checkpoint()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        held = sum(1 for _ in runner.outbox)
        return {"model": model, "records": records, "warm_up": warm_up, "hold": hold,
                "rows_per_s_wall": round(records / wall), "rows_per_s_cpu": round(records / cpu),
                "checkpoints": runner.counters["checkpoints"] - saves0,
                "checkpoint_cpu_s": round(spent[0], 2), "cpu_s": round(cpu, 2),
                "held_at_end": held}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--warm-up", type=int, default=110_000)
    parser.add_argument("--hold", action="store_true", help="hold predictions instead")
    parser.add_argument("--model", default="sgbdt", help="a service model name (default sgbdt)")
    args = parser.parse_args()
    if args.warm_up % 2000:
        parser.error("--warm-up must be a multiple of 2,000 (the batch size)")
    print(json.dumps(measure(args.records, args.warm_up, args.hold, args.model)))


if __name__ == "__main__":
    main()
