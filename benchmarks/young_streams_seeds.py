"""The young-stream defaults (issue 64) against the warm-up before them, over several seeds, on
the long-stream figures a seed-0 check reads: the window forests' "early" accuracy (records
2,000-5,000 of Agrawal functions 1-4, as ``../shared/checks/window_forest_streams.py``) and
their second half (records 15,000-30,000), and the median forest's prequential accuracy
over the whole of Elec2 (as ``real_streams.py``), with where along Elec2 the two differ.

    python benchmarks/young_streams_seeds.py --what early --model random-forest --seeds 0 1 2 3 4 5
    python benchmarks/young_streams_seeds.py --what elec2 --seeds 0 1 2 3 4 5 --workers 2

"before" is the same model with ``warmup=1000`` (the default until 2026-12-05). Prints one
line per arm and, for Elec2, the mean difference by stretch of the stream. The figures and
what they mean: docs/benchmark_notes.md, "Young streams (2026-12-06)".
"""

from __future__ import annotations

import argparse
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from river.datasets import synth

import dpstream.models as M
from dpstream.stream import load_elec2

MODELS = {"median-forest": M.MedianForestClassifier,
          "random-forest": M.RandomDecisionForestClassifier, "rdt": M.RDTClassifier,
          "greedy-forest": M.GreedyForestClassifier}
ARMS = {"now": {}, "before": {"warmup": 1000}}
#: Agrawal's schema as ``window_forest_streams.py`` declares it (every feature numeric)
AGRAWAL = {"features": {
    "salary": {"type": "numeric", "min": 20000, "max": 150000},
    "commission": {"type": "numeric", "min": 0, "max": 85000},
    "age": {"type": "numeric", "min": 20, "max": 80},
    "elevel": {"type": "numeric", "min": 0, "max": 4},
    "car": {"type": "numeric", "min": 1, "max": 20},
    "zipcode": {"type": "numeric", "min": 0, "max": 8},
    "hvalue": {"type": "numeric", "min": 0, "max": 1_200_000},
    "hyears": {"type": "numeric", "min": 1, "max": 30},
    "loan": {"type": "numeric", "min": 0, "max": 500_000}},
    "target": {"type": "binary", "values": [0, 1]}}
EDGES = [0, 500, 1000, 2000, 4000, 8000, 16000, 32000]


def hits(model: str, arm: str, rows: list, schema, seed: int) -> np.ndarray:
    """Prequential hits (predict, then learn) of one model, arm and seed over ``rows``."""
    warnings.simplefilter("ignore")
    m = MODELS[model](schema=schema, epsilon=1.0, seed=seed, **ARMS[arm])
    out = np.zeros(len(rows), dtype=bool)
    for i, (x, y) in enumerate(rows):
        out[i] = m.predict_one(x) == y
        m.learn_one(x, y)
    return out


def agrawal(model: str, arm: str, seed: int, n: int, start: int) -> float:
    """Mean accuracy over records ``start`` to ``n`` of Agrawal functions 1-4 (stream seed
    1), each of ``n`` records."""
    accs = []
    for f in (1, 2, 3, 4):
        rows = list(synth.Agrawal(classification_function=f, seed=1).take(n))
        accs.append(hits(model, arm, rows, AGRAWAL, seed)[start:].mean())
    return float(np.mean(accs))


def early(model: str, arm: str, seed: int) -> float:
    """Records 2,000-5,000 (the check's "early")."""
    return agrawal(model, arm, seed, 5000, 2000)


def second(model: str, arm: str, seed: int) -> float:
    """Records 15,000-30,000 of 30,000 (the check's "second half")."""
    return agrawal(model, arm, seed, 30000, 15000)


def elec2(model: str, arm: str, seed: int) -> np.ndarray:
    X, y, schema = load_elec2()
    return hits(model, arm, list(zip(X, y, strict=True)), schema, seed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what", choices=["early", "second", "elec2"], required=True)
    ap.add_argument("--model", choices=sorted(MODELS), default="median-forest")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    jobs = [(arm, s) for arm in ARMS for s in a.seeds]
    fn = {"early": early, "second": second, "elec2": elec2}[a.what]
    with ProcessPoolExecutor(a.workers) as pool:
        got = dict(zip(jobs, pool.map(fn, [a.model] * len(jobs), *zip(*jobs, strict=True)),
                       strict=True))
    for arm in ARMS:
        vals = [float(np.mean(got[arm, s])) for s in a.seeds]
        print(f"{a.model} {a.what} {arm:6s}: seeds {a.seeds} "
              f"{' '.join(f'{v:.3f}' for v in vals)}  mean {np.mean(vals):.3f}", flush=True)
    if a.what == "elec2":
        diff = np.array([got["now", s].astype(float) - got["before", s] for s in a.seeds])
        edges = [e for e in EDGES if e < diff.shape[1]] + [diff.shape[1]]
        for lo, hi in zip(edges, edges[1:], strict=False):
            print(f"  records {lo:>6,}-{hi:<6,} now - before {100 * diff[:, lo:hi].mean():+.2f} pp")


if __name__ == "__main__":
    main()
