"""The Laplace mechanism (pure epsilon-DP) on a public lattice, with its exact RDP curve."""

from __future__ import annotations

import numpy as np

from ._validate import as_generator, check_epsilon, check_finite_array, check_positive
from .noise import (
    LAPLACE_BITS,
    laplace_lattice_rdp,
    laplace_on_lattice,
    laplace_rounding,
    lattice_step,
)

__all__ = ["LaplaceMechanism"]


class LaplaceMechanism:
    """Add Laplace noise of scale ``sensitivity / epsilon`` to a value or an array of values,
    exactly: on a public lattice, with discrete Laplace noise.

    epsilon-DP for a query whose L1 sensitivity (over add/remove-one neighbours) is
    ``sensitivity``. The value is rounded to multiples of the power of two
    ``g = 2^(floor(log2 sensitivity) - 12)`` and gets discrete Laplace noise of scale at least
    ``(floor(sensitivity / g) + r) / epsilon`` steps, ``r`` the steps rounding can add: one per
    coordinate a record touches, none for an integer-valued query
    (:func:`dpstream.accounting.noise.laplace_on_lattice`; the geometric mechanism, Ghosh et al.
    2009; sampled as Canonne et al. 2020, Algorithm 2). The set of possible outputs is the
    lattice whatever the value (no Mironov 2012 attack) and the scale is at most
    ``1 + r 2^-12`` times the continuous one. Its RDP is the discrete Laplace's, computed
    exactly (:func:`dpstream.accounting.noise.discrete_laplace_rdp`).

    Parameters
    ----------
    epsilon
        Privacy parameter, > 0.
    sensitivity
        L1 sensitivity of the query, > 0.
    rng
        ``None`` (the default: a cryptographic generator keyed from OS entropy), an int seed
        (tests and benchmarks only) or a numpy Generator.
    touched
        How many coordinates of a released array one record can change (the rounding adds a
        lattice step for each). ``None``: all of them (a scalar: 1). A histogram's count, a
        leaf's value: 1.
    integers
        The query's values are whole numbers (counts): they are lattice points already and
        rounding adds nothing. Checked at each release (a misdeclared query raises).

    Examples
    --------
    >>> mech = LaplaceMechanism(epsilon=0.5, sensitivity=1.0, rng=7)
    >>> mech.scale
    2.0
    >>> noisy = mech.release(np.array([10.0, 20.0]))
    >>> noisy.shape, bool(np.all(noisy * 2**12 % 1 == 0))    # lattice points, step 2^-12
    ((2,), True)
    >>> counts = LaplaceMechanism(epsilon=0.5, sensitivity=1.0, integers=True, rng=7)
    >>> counts.release(np.array([3.0, 0.0, 5.0])).shape
    (3,)
    >>> LaplaceMechanism(epsilon=0, sensitivity=1.0)
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be > 0, got 0.0
    """

    # a mechanism saved in a checkpoint before these existed takes the defaults (sound: every
    # coordinate rounded)
    touched: int | None = None
    integers: bool = False

    def __init__(self, *, epsilon: float, sensitivity: float,
                 rng: np.random.Generator | int | None = None, touched: int | None = None,
                 integers: bool = False):
        self.epsilon = check_epsilon(epsilon)
        self.sensitivity = check_positive("sensitivity", sensitivity)
        self.rng = as_generator(rng)
        if touched is not None and (isinstance(touched, bool) or int(touched) != touched
                                    or touched < 1):
            raise ValueError(f"touched must be a positive integer or None, got {touched!r}")
        self.touched = None if touched is None else int(touched)
        self.integers = bool(integers)

    @property
    def scale(self) -> float:
        """The Laplace scale ``b = sensitivity / epsilon``."""
        return self.sensitivity / self.epsilon

    def release(self, value, *, size: int | None = None):
        """Return ``value`` plus fresh Laplace noise (same shape; ``size`` repeats a scalar)."""
        v = check_finite_array("value", value, allow_empty=False)
        shape = v.shape if size is None else (size,) + v.shape
        # the rounding's steps are those of one release of ``value`` (``size`` repeats it:
        # independent releases of the same value)
        rounding = laplace_rounding(v, self.sensitivity, touched=self.touched,
                                    integers=self.integers)
        noisy = laplace_on_lattice(self.rng, np.broadcast_to(v, shape),
                                   epsilon=self.epsilon, sensitivity=self.sensitivity,
                                   touched=max(rounding, 1), integers=rounding == 0)
        return float(noisy) if noisy.ndim == 0 else noisy

    def rdp(self, orders, *, size: int = 1) -> np.ndarray:
        """RDP of one release of ``size`` values at each order: the discrete Laplace's, between
        inputs the lattice sensitivity apart (at most ``epsilon`` at every order)."""
        rounding = 0 if self.integers and lattice_step(self.sensitivity, LAPLACE_BITS) <= 1 \
            else (self.touched or max(1, int(size)))
        return laplace_lattice_rdp(orders, epsilon=self.epsilon, sensitivity=self.sensitivity,
                                   rounding=rounding)

    def __repr__(self) -> str:
        return f"LaplaceMechanism(epsilon={self.epsilon!r}, sensitivity={self.sensitivity!r})"
