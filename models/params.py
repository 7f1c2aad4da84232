"""Hyper-parameter checks shared by the estimators: a bad value is a ``ValueError`` naming it.

>>> check_integer("n_trees", 10, 1)
10
>>> check_integer("max_depth", None, 0, none_ok=True) is None
True
>>> check_real("split_share", 1.0, 0, 1)
Traceback (most recent call last):
...
ValueError: split_share must be < 1, got 1.0
>>> check_integer("n_trees", True, 1)
Traceback (most recent call last):
...
ValueError: n_trees must be an integer >= 1, got True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["check_integer", "check_real"]


def check_integer(name: str, value: Any, lo: int, *, none_ok: bool = False) -> int | None:
    """An integer ``>= lo`` (bools rejected); ``None`` passes when ``none_ok``."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}"
                         f"{' or None' if none_ok else ''}, got {value!r}")
    return int(value)


def check_real(name: str, value: Any, lo: float | None = None, hi: float | None = None, *,
               lo_open: bool = True, hi_open: bool = True) -> float:
    """A finite number within the bounds given (open by default; bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {value!r}")
    if hi is not None and (value >= hi if hi_open else value > hi):
        raise ValueError(f"{name} must be {'<' if hi_open else '<='} {hi}, got {value!r}")
    return float(value)
