"""Gaussian mechanisms: the classic one and the non-spherical Gaussian of Kirschte et al. (2023)
Theorem 10 used by DPLeaf, both releasing discrete Gaussian noise on a public lattice
(:mod:`dpstream.accounting.noise`); and the exact analytic curve of the *continuous* Gaussian
(Balle and Wang 2018), kept as a reference."""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from ._validate import (
    as_generator,
    check_delta,
    check_epsilon,
    check_finite_array,
    check_nonnegative,
    check_positive,
)
from .noise import gaussian_on_lattice, gaussian_steps, scaled_gaussian_on_lattice
from .rdp import (
    _check_weights,
    effective_noise_multiplier,
    gaussian_rdp,
    non_spherical_gaussian_rdp,
    rdp_to_epsilon,
)

#: orders at which a single Gaussian release's RDP is converted to (epsilon, delta)
_ORDERS = np.concatenate([np.linspace(1.02, 1.98, 49), np.arange(2.0, 64.0, 0.25),
                          np.geomspace(64.0, 4096.0, 40)])

__all__ = ["GaussianMechanism", "NonSphericalGaussianMechanism", "gaussian_delta",
           "gaussian_epsilon"]


def _phi(x: float) -> float:
    return float(special.ndtr(x))


def gaussian_delta(*, noise_multiplier: float, epsilon: float) -> float:
    """Exact delta(epsilon) of one Gaussian release (Balle and Wang 2018, Thm. 8).

    ``delta = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z)`` with ``z = sigma/sensitivity``.

    >>> round(gaussian_delta(noise_multiplier=1.0, epsilon=1.0), 4)
    0.1269
    """
    z = check_positive("noise_multiplier", noise_multiplier)
    eps = check_nonnegative("epsilon", epsilon)
    a, b = 1.0 / (2.0 * z), eps * z
    # e^eps * Phi(-a-b) in log space so that large eps does not overflow
    second = math.exp(eps + float(special.log_ndtr(-a - b)))
    return max(0.0, _phi(a - b) - second)


def gaussian_epsilon(*, noise_multiplier: float, delta: float) -> float:
    """Smallest epsilon with ``gaussian_delta(z, epsilon) <= delta`` (the exact privacy curve).

    >>> round(gaussian_epsilon(noise_multiplier=1.0, delta=0.1269), 3)
    1.0
    """
    z = check_positive("noise_multiplier", noise_multiplier)
    d = check_delta(delta)
    if gaussian_delta(noise_multiplier=z, epsilon=0.0) <= d:
        return 0.0
    hi = 1.0
    while gaussian_delta(noise_multiplier=z, epsilon=hi) > d:
        hi *= 2.0
    return float(optimize.brentq(lambda e: gaussian_delta(noise_multiplier=z, epsilon=e) - d,
                                 0.0, hi, xtol=1e-12, rtol=1e-12))


class GaussianMechanism:
    """Add Gaussian noise of standard deviation ``sigma`` to a query with L2 sensitivity
    ``sensitivity``, exactly: discrete Gaussian noise on a public lattice.

    The values are rounded to multiples of ``g = 2^(floor(log2 sigma) - 18)`` and get discrete
    Gaussian noise whose variance parameter (in steps) is raised to cover the rounding
    (:func:`dpstream.accounting.noise.gaussian_on_lattice`; ``touched``: how many coordinates
    one record can change, all of them by default). The Rényi divergence between neighbours is
    then at most ``alpha / (2 z^2)`` with ``z = sigma / sensitivity``, as for the continuous
    Gaussian (Canonne, Kamath and Steinke 2020, Prop. 5), and the noise is at most
    ``1 + sqrt(touched) * z * 2^-18`` times larger. (epsilon, delta) come from that RDP curve
    (Balle et al. 2020, Thm. 21): the exact analytic curve of the continuous Gaussian
    (:func:`gaussian_delta`) is not proven for the discrete one, so it is not used.

    Examples
    --------
    >>> mech = GaussianMechanism.calibrated(epsilon=1.0, delta=1e-5, sensitivity=1.0, rng=3)
    >>> round(mech.sigma, 3)
    4.045
    >>> bool(mech.epsilon_for(delta=1e-5) <= 1.0)
    True
    >>> GaussianMechanism(sigma=1.0, sensitivity=-1.0)
    Traceback (most recent call last):
    ...
    ValueError: sensitivity must be > 0, got -1.0
    """

    #: a mechanism saved in a checkpoint before this existed takes the default (sound: every
    #: coordinate rounded)
    touched: int | None = None

    def __init__(self, *, sigma: float, sensitivity: float,
                 rng: np.random.Generator | int | None = None, touched: int | None = None):
        self.sigma = check_positive("sigma", sigma)
        self.sensitivity = check_positive("sensitivity", sensitivity)
        self.rng = as_generator(rng)
        if touched is not None and (isinstance(touched, bool) or int(touched) != touched
                                    or touched < 1):
            raise ValueError(f"touched must be a positive integer or None, got {touched!r}")
        self.touched = None if touched is None else int(touched)

    @classmethod
    def calibrated(cls, *, epsilon: float, delta: float, sensitivity: float,
                   rng: np.random.Generator | int | None = None,
                   touched: int | None = None) -> GaussianMechanism:
        """The mechanism with the smallest sigma whose RDP curve gives (epsilon, delta)."""
        eps = check_epsilon(epsilon)
        d = check_delta(delta)
        sens = check_positive("sensitivity", sensitivity)

        def excess(z: float) -> float:
            return rdp_to_epsilon(_ORDERS, gaussian_rdp(_ORDERS, z), d)[0] - eps

        lo, hi = 1e-3, 1.0
        while excess(hi) > 0:
            hi *= 2.0
        z = optimize.brentq(excess, lo, hi, xtol=1e-12, rtol=1e-12)
        z *= 1.0 + 1e-9  # land on the private side of the root
        return cls(sigma=z * sens, sensitivity=sens, rng=rng, touched=touched)

    @property
    def noise_multiplier(self) -> float:
        """``sigma / sensitivity``."""
        return self.sigma / self.sensitivity

    def release(self, value, *, size: int | None = None):
        """Return ``value`` plus fresh discrete Gaussian noise on the lattice."""
        v = check_finite_array("value", value)
        shape = v.shape if size is None else (size,) + v.shape
        touched = self.touched if self.touched is not None else max(1, v.size)
        noisy = gaussian_on_lattice(self.rng, np.broadcast_to(v, shape), sigma=self.sigma,
                                    sensitivity=self.sensitivity, touched=touched)
        return float(noisy) if noisy.ndim == 0 else noisy

    def epsilon_for(self, *, delta: float) -> float:
        """Epsilon of one release at ``delta``, from its RDP curve."""
        return rdp_to_epsilon(_ORDERS, self.rdp(_ORDERS), check_delta(delta))[0]

    def rdp(self, orders) -> np.ndarray:
        """RDP of one release at each order."""
        return gaussian_rdp(orders, self.noise_multiplier)

    def __repr__(self) -> str:
        return f"GaussianMechanism(sigma={self.sigma!r}, sensitivity={self.sensitivity!r})"


class NonSphericalGaussianMechanism:
    """Release a D-vector with noise ``N(0, D^-1 diag(sigma^2 / r_d))`` (Kirschte et al. 2023, Thm
    10).

    The weights ``r_d > 0`` (summing to 1) shift noise between coordinates. Each coordinate is
    released on its own public lattice with discrete Gaussian noise
    (:func:`dpstream.accounting.noise.scaled_gaussian_on_lattice`); rounding can move a record's
    shift in coordinate ``d`` by one lattice step ``g_d <= stddev_d * 2^-18``, and :meth:`rdp`
    charges ``s_d + g_d`` for it. DPLeaf (Kirschte et al.
    2023, Alg. 4) releases (leaf count, clipped gradient sum) with D = 2 and weights (r1, r2), i.e.
    noise variances ``sigma^2/(2 r1)`` and ``sigma^2/(2 r2)``. A record that moves the output by
    ``s = (s_1..s_D)`` has individual RDP ``alpha * D * sum_d r_d s_d^2 / (2 sigma^2)``
    (:meth:`rdp`), which equals a 1-d Gaussian with noise multiplier :meth:`noise_multiplier`.

    Examples
    --------
    >>> mech = NonSphericalGaussianMechanism(sigma=2.0, weights=[0.2, 0.8], rng=1)
    >>> mech.stddevs.round(4)
    array([3.1623, 1.5811])
    >>> mech.release([[10.0, 0.5], [3.0, -0.1]]).shape
    (2, 2)
    >>> float(mech.rdp([2.0], sensitivities=[1.0, 0.1])[0])
    0.104...
    """

    def __init__(self, *, sigma: float, weights, rng: np.random.Generator | int | None = None):
        self.sigma = check_positive("sigma", sigma)
        self.weights = _check_weights(weights)
        self.rng = as_generator(rng)

    @property
    def dim(self) -> int:
        return int(self.weights.size)

    @property
    def stddevs(self) -> np.ndarray:
        """Per-coordinate noise standard deviations ``sigma / sqrt(D r_d)``."""
        return self.sigma / np.sqrt(self.dim * self.weights)

    def release(self, values):
        """Add independent noise to each coordinate of ``values`` (shape ``(..., D)``)."""
        v = check_finite_array("values", values)
        if v.shape[-1] != self.dim:
            raise ValueError(f"values must have {self.dim} entries in the last axis, got {v.shape}")
        return scaled_gaussian_on_lattice(self.rng, v, self.stddevs)

    def rdp(self, orders, *, sensitivities) -> np.ndarray:
        """(Individual) RDP for a record with the given per-coordinate sensitivities, each
        raised by its coordinate's lattice step."""
        return non_spherical_gaussian_rdp(orders, sigma=self.sigma, weights=self.weights,
                                          sensitivities=self._on_lattice(sensitivities))

    def _on_lattice(self, sensitivities) -> np.ndarray:
        s = np.abs(np.asarray(sensitivities, dtype=np.float64))
        return np.where(s > 0, s + gaussian_steps(self.stddevs), 0.0)

    def noise_multiplier(self, sensitivities) -> np.ndarray:
        """The equivalent 1-d noise multiplier for the given sensitivities (each raised by its
        coordinate's lattice step)."""
        return effective_noise_multiplier(sigma=self.sigma, weights=self.weights,
                                          sensitivities=self._on_lattice(sensitivities))

    def __repr__(self) -> str:
        return (f"NonSphericalGaussianMechanism(sigma={self.sigma!r}, "
                f"weights={self.weights.tolist()!r})")
