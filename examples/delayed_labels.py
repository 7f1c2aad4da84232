"""Delayed labels: predict a record when it arrives, learn it when its label comes.

Two ways: river's ``progressive_val_score(..., delay=...)`` with a dpstream model (the model
needs nothing special: it predicts at once and learns when river hands it the label), and the
service's runner over a file where each label is a message of its own, one day (48 records)
after its record, on Elec2.

Run: python examples/delayed_labels.py
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path

from river import evaluate, metrics, tree

from dpstream.models import SGBDTClassifier
from dpstream.stream import load_elec2
from dpstream.stream.service import replay

N, DAY = 10_000, 48   # Elec2 records come every half hour: a label one day late


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    X, y, schema = load_elec2()

    # 1. river: each record predicted on arrival, learned DAY records later
    for name, make in (("dpstream S-GBDT (eps 1)",
                        lambda: SGBDTClassifier(schema=schema, epsilon=1.0, seed=0)),
                       ("river HoeffdingTree", tree.HoeffdingTreeClassifier)):
        for delay in (None, DAY):
            stream = itertools.islice(zip(X, y, strict=True), N)
            acc = evaluate.progressive_val_score(stream, make(), metrics.Accuracy(), delay=delay)
            print(f"{name:24s} labels {'at once' if delay is None else f'{delay} records late':17s}"
                  f" {acc}")

    # 2. the service's runner: a record without y, its label as {"id", "y"} DAY messages later
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "elec2-delayed.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for i in range(N):
                fh.write(json.dumps({"id": i, "x": X[i]}) + "\n")
                if i >= DAY:   # the label of the record one day earlier
                    fh.write(json.dumps({"id": i - DAY, "y": y[i - DAY]}) + "\n")
        schema_path = Path(tmp) / "schema.json"
        schema.dump(schema_path)
        res = replay(str(path), schema=str(schema_path), model="sgbdt", epsilon=1.0, seed=0,
                     evaluate=True)
        keys = ("records_seen", "records_learned", "held", "labels_joined", "records_held")
        print("replay:", {k: res[k] for k in keys if k in res})
        print("replay: prequential score of the joined records", res["prequential"])


if __name__ == "__main__":
    main()
