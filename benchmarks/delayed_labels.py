"""Delayed labels (issue 66): prequential accuracy when each label comes ``d`` records after
its record, every model beside river's Hoeffding tree with the same delay; and the service's
message rate with labels as messages of their own against labels inside the records.

* **Accuracy.** Each record is predicted when it arrives and learned ``d`` records later (what
  ``river.evaluate.progressive_val_score(..., delay=d)`` does; a queue of at most ``d``
  records). Elec2 in time order (45,312 records; ``d`` = 48, one day, and 336, one week) and
  Adult's training split in file order (``d`` = 1,000), ε = 1, the mean over ``--seeds``.
* **Service rate** (``--service``): ``dpstream.stream.service.replay`` over two JSONL files of
  the same Adult records, one with each label inside its record, one with each record unlabeled
  and its label as a message ``{"id", "y"}`` 1,000 messages later; messages a second (a delayed
  stream has twice the messages).

Usage::

    python benchmarks/delayed_labels.py --seeds 0 1 2 [--plot docs/img/delayed_labels.png]
    python benchmarks/delayed_labels.py --service [--records 30000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from collections import deque
from pathlib import Path

import numpy as np
from river import tree

from dpstream.stream import load_adult, load_elec2
from dpstream.stream.bench.protocols import BENCH_MODELS

MODELS = {name: kinds.get("accuracy", kinds.get("error")) for name, kinds in BENCH_MODELS.items()
          if name in ("sgbdt", "median-forest", "random-forest", "rdt", "greedy-forest")}
DELAYS = {"elec2": (0, 48, 336), "adult": (0, 1000)}


def prequential(model, rows: list, delay: int) -> float:
    """Accuracy of predictions made on arrival, each record learned ``delay`` records later."""
    right, waiting = 0, deque()
    for x, y in rows:
        right += model.predict_one(x) == y
        waiting.append((x, y))
        if len(waiting) > delay:
            model.learn_one(*waiting.popleft())
    return right / len(rows)


def accuracy(seeds: list[int]) -> list[dict]:
    X, y, elec = load_elec2()
    aX, ay, adult = load_adult("train")
    streams = {"elec2": (list(zip(X, y, strict=True)), elec),
               "adult": (list(zip(aX, ay, strict=True)), adult)}
    out = []
    for stream, (rows, schema) in streams.items():
        for name in [*MODELS, "river HoeffdingTree"]:
            for d in DELAYS[stream]:
                t = time.perf_counter()
                if name in MODELS:
                    accs = [prequential(MODELS[name](schema=schema, epsilon=1.0, seed=s), rows, d)
                            for s in seeds]
                else:
                    accs = [prequential(tree.HoeffdingTreeClassifier(), rows, d)]
                out.append({"stream": stream, "model": name, "delay": d,
                            "accuracy": round(float(np.mean(accs)), 4),
                            "sd": round(float(np.std(accs)), 4), "runs": len(accs),
                            "seconds": round(time.perf_counter() - t, 1)})
                print(json.dumps(out[-1]), flush=True)
    return out


def plot(rows: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=False)
    for ax, stream in zip(axes, DELAYS, strict=True):
        for name in [*MODELS, "river HoeffdingTree"]:
            pts = [(r["delay"], r["accuracy"]) for r in rows
                   if r["stream"] == stream and r["model"] == name]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o",
                        linestyle="--" if "river" in name else "-", label=name)
        ax.set_title(f"{stream}: accuracy by label delay (ε = 1)")
        ax.set_xlabel("label delay (records)")
        ax.set_ylabel("prequential accuracy")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def service(records: int, models: list[str], delay: int = 1000) -> list[dict]:
    from dpstream.stream.service import replay

    X, y, schema = load_adult("train")
    n = min(records, len(X))
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        now, late = Path(tmp) / "now.jsonl", Path(tmp) / "late.jsonl"
        with open(now, "w") as a, open(late, "w") as b:
            pending = deque()
            for i in range(n):
                a.write(json.dumps({"id": i, "x": X[i], "y": y[i]}) + "\n")
                b.write(json.dumps({"id": i, "x": X[i]}) + "\n")
                pending.append(i)
                if len(pending) > delay // 2:   # a label message every record: delay messages
                    j = pending.popleft()
                    b.write(json.dumps({"id": j, "y": y[j]}) + "\n")
            for j in pending:
                b.write(json.dumps({"id": j, "y": y[j]}) + "\n")
        schema_path = Path(tmp) / "schema.json"
        schema.dump(schema_path)
        for model in models:
            for name, path in (("labels inside", now), ("labels late", late)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = replay(str(path), schema=str(schema_path), model=model, epsilon=1.0,
                                 seed=0, hold_unlabeled=True)
                out.append({"model": model, "stream": name, "messages": res["records_this_run"],
                            "learned": res["learned_this_run"],
                            "msgs_per_s": res["rows_per_s_streaming"]})
                print(json.dumps(out[-1]), flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--plot", default=None, metavar="PNG")
    ap.add_argument("--service", action="store_true")
    ap.add_argument("--records", type=int, default=30_000)
    ap.add_argument("--models", default="sgbdt,median-forest,rdt")
    args = ap.parse_args(argv)
    if args.service:
        service(args.records, args.models.split(","))
        return
    rows = accuracy(args.seeds)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
