"""Speed and memory of every stream model with its library defaults, each in a fresh process.

:func:`run_speed` runs one *speed cell*: one model with the estimator's defaults over the Adult
stream, measuring ``rows_per_s`` (``predict_one`` then ``learn_one``),
``predict_many_rows_per_s`` and the resident memory (``peak_rss_mib``, ``rss_start_mib``,
``rss_end_mib``). :func:`run_speed_isolated` runs a cell in a fresh Python process, through
the command line (it prints one JSON line)::

    python -m dpstream.stream.bench.speed MODEL [--dataset adult] [--epsilon 1] [--n N]

What is measured, and why in a fresh process: docs/bench_internals.md#speed-cells.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import numpy as np

from .protocols import BENCH_MODELS
from .throughput import RIVER_MODELS, STREAMS, time_batch

__all__ = ["SPEED_MODELS", "WARMUP_RECORDS", "peak_rss_mib", "reset_peak", "run_speed",
           "run_speed_isolated", "status_mib", "trim"]

#: every stream model of the speed rows: S-GBDT and DPBoost (classifiers), the four window
#: forests, and river's HoeffdingTree and ARF for reference
SPEED_MODELS = ("sgbdt", "dpboost", "median-forest", "greedy-forest", "rdt", "random-forest",
                *RIVER_MODELS)
#: records of the throwaway warm-up run (kernels loaded, warm-up windows trained once)
WARMUP_RECORDS = 4_000


# ------------------------------------------------------------ resident memory (the suite's
# cells too): Linux /proc, getrusage elsewhere
def status_mib(field_name: str) -> float | None:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in MiB; None if unreadable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB (since the last reset, where supported)."""
    peak = status_mib("VmHWM")
    if peak is not None:
        return peak
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux >= 4.0); False if it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def trim() -> None:
    """Give freed heap back to the OS (glibc), so a start RSS is what is live."""
    import ctypes
    import gc
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _build(model: str, schema: Any, epsilon: float | None, seed: int):
    if model in RIVER_MODELS:
        if epsilon is not None:
            raise ValueError(f"{model} is river's non-private learner: epsilon must be None")
        from river import forest, tree
        est = (tree.HoeffdingTreeClassifier() if model == "hoeffding-tree"
               else forest.ARFClassifier(seed=seed))
        return est, "non-private"
    if model not in SPEED_MODELS:
        raise ValueError(f"unknown speed model {model!r}; choose from {SPEED_MODELS}")
    if epsilon is None:
        raise ValueError(f"{model} is differentially private: give epsilon")
    classes = BENCH_MODELS[model]
    cls = classes.get("accuracy") or classes.get("error")
    return cls(schema=schema, epsilon=epsilon, seed=seed), "dp"


def _prequential(est: Any, X: list, y: list) -> tuple[np.ndarray, float]:
    hits = np.zeros(len(y), dtype=bool)
    t0 = time.perf_counter()
    for i, (xi, yi) in enumerate(zip(X, y, strict=True)):
        hits[i] = est.predict_one(xi) == yi
        est.learn_one(xi, yi)
    return hits, time.perf_counter() - t0


def run_speed(model: str, dataset: str = "adult", *, epsilon: float | None = None,
              n: int | None = None, seed: int = 0) -> dict:
    """Measure ``model`` (library defaults) on the stream ``dataset`` in this process.

    The memory figures are this process's: call it in a fresh one
    (:func:`run_speed_isolated`) for figures that belong to the model alone.

    Examples
    --------
    >>> res = run_speed("hoeffding-tree", "adult", n=300)
    >>> res["kind"], res["n"], res["params"], res["peak_rss_mib"] >= res["rss_start_mib"] > 0
    ('non-private', 300, {}, True)
    """
    if dataset not in STREAMS:
        raise ValueError(f"unknown stream {dataset!r}; choose from {sorted(STREAMS)}")
    X, y, schema = STREAMS[dataset](seed)
    if schema.target.values is None:
        raise ValueError(f"the speed rows are classification streams; {dataset} is regression")
    if n is not None:
        X, y = X[:n], y[:n]
    n = len(y)
    warm_X, warm_y, _ = STREAMS[dataset](seed + 1)
    warm, _ = _build(model, schema, epsilon, seed + 1)
    _prequential(warm, warm_X[:WARMUP_RECORDS], warm_y[:WARMUP_RECORDS])
    if hasattr(warm, "predict_many"):   # small and large batches: the forests score a
        warm.predict_many(warm_X[:200])    # batch of 256+ rows with other (trie) kernels,
        warm.predict_many(warm_X[:2000])   # whose load must not be timed either
    del warm, warm_X, warm_y
    trim()
    exact = reset_peak()       # else the peak may be the warm-up's (two copies of the data)
    start = status_mib("VmRSS")
    est, kind = _build(model, schema, epsilon, seed)
    hits, stream_s = _prequential(est, X, y)
    peak_stream = peak_rss_mib()
    batch_s, batch = time_batch(est, X, kind)
    delta = est.privacy_report().get("delta") if kind == "dp" else None
    return {"model": model, "dataset": dataset, "epsilon": epsilon, "delta": delta,
            "metric": "accuracy", "mean": float(hits.mean()), "std": 0.0, "repeats": 1,
            "folds": 1, "seconds": round(stream_s + batch_s, 3),
            "rows_per_s": round(n / stream_s, 1),
            "predict_many_rows_per_s": round(n / batch_s, 1), "batch_predict": batch,
            "params": {}, "estimator": type(est).__name__,
            "protocol": f"progressive validation, {n:,} records, library defaults",
            "labeled_fraction": 1.0, "kind": kind, "n": n,
            "rss_start_mib": start, "peak_rss_mib": peak_rss_mib(),
            "peak_rss_stream_mib": peak_stream, "rss_end_mib": status_mib("VmRSS"),
            "peak_rss_scope": "subprocess", "peak_rss_reset": exact,
            "warmup_records": WARMUP_RECORDS}


def run_speed_isolated(model: str, dataset: str = "adult", *, epsilon: float | None = None,
                       n: int | None = None, seed: int = 0, timeout: float = 3_600) -> dict:
    """:func:`run_speed` in a fresh Python process (its own interpreter, heap and peak RSS)."""
    cmd = [sys.executable, "-m", "dpstream.stream.bench.speed", model, "--dataset", dataset,
           "--seed", str(seed)]
    if epsilon is not None:
        cmd += ["--epsilon", repr(float(epsilon))]
    if n is not None:
        cmd += ["--n", str(n)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"speed run of {model} failed ({done.returncode}):\n"
                           f"{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=SPEED_MODELS)
    parser.add_argument("--dataset", default="adult")
    parser.add_argument("--epsilon", type=float, default=None,
                        help="the DP models' budget (default 1; river's learners: none)")
    parser.add_argument("--n", type=int, default=None, help="records (default: the stream)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    eps = args.epsilon
    if eps is None and args.model not in RIVER_MODELS:
        eps = 1.0
    print(json.dumps(run_speed(args.model, args.dataset, epsilon=eps, n=args.n,
                               seed=args.seed)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
