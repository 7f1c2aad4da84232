"""Parameter validation shared by every mechanism and accountant.

Every check raises :class:`ValueError` (or :class:`TypeError` for a wrong type)
with a message that names the offending parameter, so a user who passes
``epsilon=0`` learns which knob is wrong instead of getting a NaN later.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np


def _as_real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must not be NaN")
    return value


def check_positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float after checking ``0 < value`` (and finiteness)."""
    v = _as_real(name, value)
    if not allow_inf and math.isinf(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {v}")
    return v


def check_nonnegative(name: str, value: Any) -> float:
    """Return ``value`` as a float after checking ``0 <= value < inf``."""
    v = _as_real(name, value)
    if math.isinf(v) or v < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {v}")
    return v


def check_epsilon(value: Any, name: str = "epsilon") -> float:
    """An epsilon must be a finite number > 0."""
    return check_positive(name, value)


def check_delta(value: Any, name: str = "delta") -> float:
    """A delta must lie in the open interval (0, 1)."""
    v = _as_real(name, value)
    if not 0.0 < v < 1.0:
        raise ValueError(f"{name} must lie in (0, 1), got {v}")
    return v


def check_sample_rate(value: Any, name: str = "sample_rate") -> float:
    """A Poisson sampling rate must lie in (0, 1]."""
    v = _as_real(name, value)
    if not 0.0 < v <= 1.0:
        raise ValueError(f"{name} must lie in (0, 1], got {v}")
    return v


class ParameterError(ValueError, TypeError):
    """A parameter of the wrong type or out of its range: a ``ValueError`` and a ``TypeError``
    both, so either ``except`` catches it (scikit-learn's ``InvalidParameterError`` does the
    same)."""


ParameterError.__module__ = "dpstream.accounting"   # (where users import it from)


def check_integer(name: str, value: Any, lo: int | None = None, *, hi: int | None = None,
                  none_ok: bool = False) -> int | None:
    """An integer within ``[lo, hi]`` (numpy integers too; bools and floats, even ``3.0``,
    refused): the one integer check of the package. ``None`` passes when ``none_ok``.

    >>> check_integer("n_trees", 10, 1)
    10
    >>> check_integer("max_depth", None, 0, none_ok=True) is None
    True
    >>> check_integer("steps", 3.0, 0)
    Traceback (most recent call last):
    ...
    dpstream.accounting.ParameterError: steps must be an integer >= 0, got 3.0
    """
    if value is None and none_ok:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = " and ".join(b for b in (f">= {lo}" if lo is not None else "",
                                          f"<= {hi}" if hi is not None else "") if b)
        raise ParameterError(f"{name} must be an integer{' ' + bounds if bounds else ''}"
                             f"{' or None' if none_ok else ''}, got {value!r}")
    return int(value)


def check_finite_array(name: str, values: Any, *, ndim: int | None = None,
                       allow_empty: bool = False) -> np.ndarray:
    """Convert to a float array and reject NaN, infinities and (by default) emptiness."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric: {exc}") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (found NaN or infinity)")
    return arr


def check_orders(orders: Any, *, minimum: float = 1.0, integer: bool = False) -> np.ndarray:
    """Rényi orders as a 1-d float array, each > ``minimum`` (or >= 2 integers)."""
    arr = check_finite_array("orders", np.atleast_1d(orders), ndim=1)
    if integer:
        if not np.all(arr == np.round(arr)) or np.any(arr < 2):
            raise ValueError("orders must be integers >= 2 for this bound")
    elif np.any(arr <= minimum):
        raise ValueError(f"orders must all be > {minimum}")
    return arr


def as_generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    """A numpy Generator: a cryptographic one keyed from OS entropy for ``None``, a seeded
    PCG64 for an int, or the one given.

    Seeds are for tests and benchmarks (reproducible, so not secret); production code passes
    ``None`` (:func:`dpstream.accounting.noise.secure_generator`).
    """
    if rng is None:
        from .noise import secure_generator

        return secure_generator()
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    if isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be None, an int seed, a SeedSequence or a numpy Generator, got "
                    f"{type(rng).__name__}")


def child_seed(seed: int | None, child: int) -> np.random.SeedSequence | None:
    """Child number ``child`` of ``SeedSequence(seed)``: the seed of a generator that must be
    independent of the one ``seed`` itself seeds (a model's drift signal beside the model),
    and of every other seed's children; ``None`` (OS entropy) stays ``None``.

    >>> a = as_generator(child_seed(1, 0)).random()
    >>> a == as_generator(child_seed(1, 0)).random(), a == as_generator(1).random()
    (True, False)
    """
    if seed is None:
        return None
    return np.random.SeedSequence(int(seed)).spawn(int(child) + 1)[int(child)]


def run_seed(seed: int, run: int) -> int:
    """The model seed of run ``run`` of a benchmark seeded ``seed``: 32 bits of child ``run``
    of ``SeedSequence(seed)``, so runs of every seed are independent streams (an offset such
    as ``seed * 7919 + run`` lets one run's derived seeds meet another's).

    >>> run_seed(0, 1) == run_seed(0, 1) != run_seed(1, 0)
    True
    """
    return int(np.random.SeedSequence(int(seed)).spawn(int(run) + 1)[int(run)]
               .generate_state(1, np.uint32)[0])
