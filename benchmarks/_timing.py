"""Shared helpers of the benchmark scripts (run them as ``python benchmarks/NAME.py``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    """The fastest of ``repeats`` timed calls of ``fn``, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def emit(out: dict, as_json: bool = False) -> None:
    """One JSON line if ``as_json`` (a script's ``--json``), else one ``name: value`` per line."""
    if as_json:
        print(json.dumps(out))
        return
    for k, v in out.items():
        print(f"{k}: {v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k}: {v}")
