"""What a window forest keeps as it closes window after window: memory and checkpoint size.

Usage: python benchmarks/window_forests_long_run_state.py [--model median-forest] [--window 1000]
[--records 2000000] [--every 200000]

A window forest learns Agrawal records (river, function 1, seed 3; the same 50,000 records
over and over) in batches of 2,000, with windows of ``--window`` records and otherwise its
defaults (epsilon 1). Every ``--every`` records it prints one JSON line: ``windows`` closed,
``ledger_partitions`` open in its privacy ledger, ``drift_rates`` kept by its drift signal,
``checkpoint_kb`` (the model saved through :class:`~dpstream.connectors.CheckpointStore`, the
service's format) and ``save_ms`` (that save's wall time). A service runs for months: none of
these may grow with the windows closed (docs/reliability.md, "State that stays bounded over
months").
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from river.datasets import synth

from dpstream.connectors import CheckpointStore
from dpstream.stream.bench.drift_streams import AGRAWAL_SCHEMA
from dpstream.stream.runner import build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="median-forest",
                        choices=("median-forest", "random-forest", "rdt", "greedy-forest"))
    parser.add_argument("--window", type=int, default=1000, help="window size (records)")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--every", type=int, default=200_000, help="records between lines")
    args = parser.parse_args()
    rows = list(synth.Agrawal(classification_function=1, seed=3).take(50_000))
    X, y = [x for x, _ in rows], [v for _, v in rows]
    model = build_model(args.model, AGRAWAL_SCHEMA, epsilon=1.0, seed=0,
                        params={"window_size": args.window})
    with tempfile.TemporaryDirectory() as tmp:
        done = 0
        while done < args.records:
            i = done % len(X)
            n = min(2_000, len(X) - i, args.records - done)
            model.learn_stream(X[i:i + n], y[i:i + n])
            done += n
            if done % args.every == 0 or done == args.records:
                store = CheckpointStore(tmp)
                start = time.perf_counter()
                store.save({"model": model})
                save_ms = (time.perf_counter() - start) * 1000
                store.close()
                size = sum(f.stat().st_size for f in Path(tmp).iterdir() if f.is_file())
                drift = getattr(model, "_drift", None)
                print(json.dumps({"records": done, "windows": model.windows_closed,
                                  "ledger_partitions": len(model._ledger.open_partitions),
                                  "drift_rates": None if drift is None else len(drift.history),
                                  "checkpoint_kb": round(size / 1024),
                                  "save_ms": round(save_ms, 1)}), flush=True)


if __name__ == "__main__":
    main()
