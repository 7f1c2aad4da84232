"""Gaussian mechanisms: the classic one (with the exact analytic calibration of Balle and
Wang 2018) and the non-spherical Gaussian of Kirschte et al. (2023) Theorem 10 used by DPLeaf."""

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
from .rdp import (
    _check_weights,
    effective_noise_multiplier,
    gaussian_rdp,
    non_spherical_gaussian_rdp,
)

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
    """Add ``N(0, sigma^2)`` noise to a query with L2 sensitivity ``sensitivity``.

    (epsilon, delta)-DP for the pairs on its exact privacy curve (:func:`gaussian_delta`); RDP
    ``alpha / (2 z^2)`` with ``z = sigma / sensitivity``. Use :meth:`calibrated` to get the
    smallest sigma for a target (epsilon, delta).

    Examples
    --------
    >>> mech = GaussianMechanism.calibrated(epsilon=1.0, delta=1e-5, sensitivity=1.0, rng=3)
    >>> round(mech.sigma, 3)
    3.731
    >>> round(mech.epsilon_for(delta=1e-5), 6)
    1.0
    >>> GaussianMechanism(sigma=1.0, sensitivity=-1.0)
    Traceback (most recent call last):
    ...
    ValueError: sensitivity must be > 0, got -1.0
    """

    def __init__(self, *, sigma: float, sensitivity: float,
                 rng: np.random.Generator | int | None = None):
        self.sigma = check_positive("sigma", sigma)
        self.sensitivity = check_positive("sensitivity", sensitivity)
        self.rng = as_generator(rng)

    @classmethod
    def calibrated(cls, *, epsilon: float, delta: float, sensitivity: float,
                   rng: np.random.Generator | int | None = None) -> GaussianMechanism:
        """The mechanism with the smallest sigma that is (epsilon, delta)-DP (analytic Gaussian)."""
        eps = check_epsilon(epsilon)
        d = check_delta(delta)
        sens = check_positive("sensitivity", sensitivity)
        lo, hi = 1e-3, 1.0
        while gaussian_delta(noise_multiplier=hi, epsilon=eps) > d:
            hi *= 2.0
        z = optimize.brentq(lambda zz: gaussian_delta(noise_multiplier=zz, epsilon=eps) - d,
                            lo, hi, xtol=1e-12, rtol=1e-12)
        z *= 1.0 + 1e-9  # land on the private side of the root
        return cls(sigma=z * sens, sensitivity=sens, rng=rng)

    @property
    def noise_multiplier(self) -> float:
        """``sigma / sensitivity``."""
        return self.sigma / self.sensitivity

    def release(self, value, *, size: int | None = None):
        """Return ``value`` plus fresh Gaussian noise."""
        v = check_finite_array("value", value)
        shape = v.shape if size is None else (size,) + v.shape
        noisy = v + self.rng.normal(0.0, self.sigma, size=shape)
        return float(noisy) if noisy.ndim == 0 else noisy

    def epsilon_for(self, *, delta: float) -> float:
        """Exact epsilon of one release at ``delta``."""
        return gaussian_epsilon(noise_multiplier=self.noise_multiplier, delta=delta)

    def rdp(self, orders) -> np.ndarray:
        """RDP of one release at each order."""
        return gaussian_rdp(orders, self.noise_multiplier)

    def __repr__(self) -> str:
        return f"GaussianMechanism(sigma={self.sigma!r}, sensitivity={self.sensitivity!r})"


class NonSphericalGaussianMechanism:
    """Release a D-vector with noise ``N(0, D^-1 diag(sigma^2 / r_d))`` (Kirschte et al. 2023, Thm
    10).

    The weights ``r_d > 0`` (summing to 1) shift noise between coordinates. DPLeaf (Kirschte et al.
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
        return v + self.rng.normal(size=v.shape) * self.stddevs

    def rdp(self, orders, *, sensitivities) -> np.ndarray:
        """(Individual) RDP for a record with the given per-coordinate sensitivities."""
        return non_spherical_gaussian_rdp(orders, sigma=self.sigma, weights=self.weights,
                                          sensitivities=sensitivities)

    def noise_multiplier(self, sensitivities) -> np.ndarray:
        """The equivalent 1-d noise multiplier for the given sensitivities."""
        return effective_noise_multiplier(sigma=self.sigma, weights=self.weights,
                                          sensitivities=sensitivities)

    def __repr__(self) -> str:
        return (f"NonSphericalGaussianMechanism(sigma={self.sigma!r}, "
                f"weights={self.weights.tolist()!r})")
