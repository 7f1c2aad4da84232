"""File replay with exactly-once resume: a gzip JSONL file whose last part arrives later.

Writes 3,000 Adult records (two malformed) as JSONL, replays the first, truncated, copy (the
replay stops at the cut with a clear error, keeping what it read), then the complete file with
the same checkpoint directory: the second replay learns only what the first did not.

Run: python examples/file_replay.py
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
from pathlib import Path

from dpstream.stream import load_adult
from dpstream.stream.service import replay


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    X, y, schema = load_adult("train")
    lines = [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(3000)]
    lines[10] = b'{"id": 10, "x": {"age": "forty"}, "y": true}'        # wrong type
    lines[20] = b'{"id": 20, "x": {"age": 40}, "y": tru'                  # cut JSON
    data = gzip.compress(b"\n".join(lines) + b"\n")

    with tempfile.TemporaryDirectory() as tmp:
        path, ck = Path(tmp) / "records.jsonl.gz", Path(tmp) / "checkpoint"
        path.write_bytes(data[: len(data) // 2])                         # still being written
        first = replay(str(path), schema=schema, epsilon=1.0, checkpoint_dir=str(ck))
        print(f"first replay: {first['records_seen']} records, stopped with: {first['error']}")
        path.write_bytes(data)                                          # now complete
        second = replay(str(path), schema=schema, epsilon=1.0, checkpoint_dir=str(ck))
        print(f"second replay: {second['records_this_run']} new records "
              f"({second['rows_per_s']} rows/s); in total {second['records_learned']} learned, "
              f"{second['dead_letters']} dead letters, nothing twice")
        for entry in map(json.loads, (ck / "dead-letters.jsonl").read_text().splitlines()):
            print(f"  dead letter at line {entry['position']['line']}: {entry['reason']}")
        p = second["privacy"]
        print(f"guarantee: ({p['epsilon']:.3f}, {p['delta']:g})-DP per record, {p['trees']} trees")


if __name__ == "__main__":
    main()
