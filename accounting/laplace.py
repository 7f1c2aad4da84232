"""The Laplace mechanism (pure epsilon-DP) and its RDP curve."""

from __future__ import annotations

import numpy as np

from ._validate import as_generator, check_epsilon, check_finite_array, check_positive
from .rdp import laplace_rdp

__all__ = ["LaplaceMechanism"]


class LaplaceMechanism:
    """Add ``Laplace(0, sensitivity / epsilon)`` noise to a value or an array of values.

    epsilon-DP for a query whose L1 sensitivity (over add/remove-one neighbours) is
    ``sensitivity`` (Dwork and Roth 2014, Thm. 3.6). Its RDP at order alpha is
    :func:`dpstream.accounting.rdp.laplace_rdp` (Kirschte et al. 2023, Theorem 20).

    Parameters
    ----------
    epsilon
        Privacy parameter, > 0.
    sensitivity
        L1 sensitivity of the query, > 0.
    rng
        ``None`` (OS entropy, the default), an int seed (tests only) or a numpy Generator.

    Examples
    --------
    >>> mech = LaplaceMechanism(epsilon=0.5, sensitivity=1.0, rng=7)
    >>> mech.scale
    2.0
    >>> noisy = mech.release(np.array([10.0, 20.0]))
    >>> noisy.shape
    (2,)
    >>> LaplaceMechanism(epsilon=0, sensitivity=1.0)
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be > 0, got 0.0
    """

    def __init__(self, *, epsilon: float, sensitivity: float,
                 rng: np.random.Generator | int | None = None):
        self.epsilon = check_epsilon(epsilon)
        self.sensitivity = check_positive("sensitivity", sensitivity)
        self.rng = as_generator(rng)

    @property
    def scale(self) -> float:
        """The Laplace scale ``b = sensitivity / epsilon``."""
        return self.sensitivity / self.epsilon

    def release(self, value, *, size: int | None = None):
        """Return ``value`` plus fresh Laplace noise (same shape; ``size`` repeats a scalar)."""
        v = check_finite_array("value", value, allow_empty=False)
        shape = v.shape if size is None else (size,) + v.shape
        noisy = v + self.rng.laplace(0.0, self.scale, size=shape)
        return float(noisy) if noisy.ndim == 0 else noisy

    def rdp(self, orders) -> np.ndarray:
        """RDP of one release at each order."""
        return laplace_rdp(orders, self.epsilon)

    def __repr__(self) -> str:
        return f"LaplaceMechanism(epsilon={self.epsilon!r}, sensitivity={self.sensitivity!r})"
