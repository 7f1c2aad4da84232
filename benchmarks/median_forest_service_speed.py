"""The median forest as the stream service drives it: ``predict_many`` then ``learn_stream``
on chunks of 2,000 Adult records (``dpstream serve --model median-forest``, defaults,
epsilon 1, seed 0), model cost only.

Usage: python benchmarks/median_forest_service_speed.py [--records N] [--repeats R] [--encoded]
[--json]

``--encoded``: the chunks go in as :class:`~dpstream.models.encoding.EncodedRows` encoded
before the timing, so the figures are the model's own cost. Prints ``rows_per_s``,
``rows_per_cpu_s``, the learn / predict shares per row and a ``fingerprint`` (equal across two
versions: the same trees, bit for bit). The fields and how to A/B two checkouts:
docs/benchmark_notes.md#median-forest-service-speed-script.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

from _timing import emit  # a sibling: benchmarks/ is on sys.path

from dpstream.models.encoding import EncodedRows
from dpstream.stream import load_adult
from dpstream.stream.runner import build_model


def run(X: list, y: list, schema, chunk: int = 2_000,
        encoded: bool = False) -> tuple[float, float, str, float]:
    """One pass: (learn seconds, predict seconds, fingerprint, CPU seconds of the pass)."""
    model = build_model("median-forest", schema, epsilon=1.0, seed=0, params={})
    enc = model._encoder
    batches = [EncodedRows(enc.encode_many(X[s:s + chunk]), enc.columns) if encoded
               else X[s:s + chunk] for s in range(0, len(X), chunk)]
    digest = hashlib.sha256()
    learn = predict = 0.0
    cpu = time.process_time()
    for b, s in zip(batches, range(0, len(X), chunk), strict=True):
        t0 = time.perf_counter()
        proba = model.predict_many(b)
        t1 = time.perf_counter()
        model.learn_stream(b, y[s:s + chunk])
        t2 = time.perf_counter()
        predict += t1 - t0
        learn += t2 - t1
        digest.update(repr(proba).encode())
    cpu = time.process_time() - cpu
    digest.update(repr(model.privacy_report()).encode())
    return learn, predict, digest.hexdigest()[:16], cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=200_000, help="Adult records, repeated")
    p.add_argument("--repeats", type=int, default=3, help="timed runs (the median is shown)")
    p.add_argument("--encoded", action="store_true", help="hand over EncodedRows")
    p.add_argument("--json", action="store_true", help="one JSON line")
    args = p.parse_args()
    n, repeats = args.records, args.repeats
    X0, y0, schema = load_adult("all")
    X = [X0[i % len(X0)] for i in range(n)]
    y = [y0[i % len(y0)] for i in range(n)]
    encoded = args.encoded
    run(X[:20_000], y[:20_000], schema)   # warm: compiled kernels loaded
    runs = [run(X, y, schema, encoded=encoded) for _ in range(repeats)]
    learn = statistics.median(r[0] for r in runs)
    predict = statistics.median(r[1] for r in runs)
    total = statistics.median(r[0] + r[1] for r in runs)
    cpu = statistics.median(r[3] for r in runs)
    emit({"records": n, "encoded": encoded, "rows_per_s": round(n / total),
          "rows_per_cpu_s": round(n / cpu),
          "learn_us_per_row": round(1e6 * learn / n, 2),
          "predict_us_per_row": round(1e6 * predict / n, 2),
          "fingerprint": runs[0][2], "same_every_run": len({r[2] for r in runs}) == 1},
         args.json)


if __name__ == "__main__":
    main()
