"""The Laplace mechanism (pure epsilon-DP) on a public lattice, with its exact RDP curve."""

from __future__ import annotations

import numpy as np

from ._validate import as_generator, check_epsilon, check_finite_array, check_positive
from .noise import laplace_lattice_rdp, laplace_on_lattice

__all__ = ["LaplaceMechanism"]


class LaplaceMechanism:
    """Add Laplace noise of scale ``sensitivity / epsilon`` to a value or an array of values,
    exactly: on a public lattice, with discrete Laplace noise.

    epsilon-DP for a query whose L1 sensitivity (over add/remove-one neighbours) is
    ``sensitivity``. The value is rounded to multiples of the power of two
    ``g = 2^(floor(log2 sensitivity) - 12)`` and gets discrete Laplace noise of scale at least
    ``ceil(sensitivity / g) / epsilon`` steps (:func:`dpstream.accounting.noise.laplace_on_lattice`;
    the geometric mechanism, Ghosh et al. 2009; sampled as Canonne et al. 2020, Algorithm 2), so
    the set of possible outputs is the lattice whatever the value (no Mironov 2012 attack) and
    the scale is at most ``1 + 2^-12`` times the continuous one. Its RDP is the discrete
    Laplace's, computed exactly (:func:`dpstream.accounting.noise.discrete_laplace_rdp`).

    Parameters
    ----------
    epsilon
        Privacy parameter, > 0.
    sensitivity
        L1 sensitivity of the query, > 0.
    rng
        ``None`` (the default: a cryptographic generator keyed from OS entropy), an int seed
        (tests and benchmarks only) or a numpy Generator.

    Examples
    --------
    >>> mech = LaplaceMechanism(epsilon=0.5, sensitivity=1.0, rng=7)
    >>> mech.scale
    2.0
    >>> noisy = mech.release(np.array([10.0, 20.0]))
    >>> noisy.shape, bool(np.all(noisy * 2**12 % 1 == 0))    # lattice points, step 2^-12
    ((2,), True)
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
        noisy = laplace_on_lattice(self.rng, np.broadcast_to(v, shape),
                                   epsilon=self.epsilon, sensitivity=self.sensitivity)
        return float(noisy) if noisy.ndim == 0 else noisy

    def rdp(self, orders) -> np.ndarray:
        """RDP of one release at each order: the discrete Laplace's, between inputs the lattice
        sensitivity apart (at most ``epsilon`` at every order)."""
        return laplace_lattice_rdp(orders, epsilon=self.epsilon, sensitivity=self.sensitivity)

    def __repr__(self) -> str:
        return f"LaplaceMechanism(epsilon={self.epsilon!r}, sensitivity={self.sensitivity!r})"
