"""Mironov's attack (CCS 2012) on floating-point Laplace noise, and the same attack on noise
drawn on a public lattice (issue 65). The event: an output within 1/32 of 0 that lies on the
2^-53 lattice. ``1 + L`` is rounded to the doubles near 1, which are multiples of 2^-53, so that
event is far likelier from input 1 than from input 0 (whose output ``L`` is as fine as the
sampler makes it): single outputs tell the neighbours apart whatever epsilon says."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpstream.accounting import (
    GaussianMechanism,
    LaplaceMechanism,
    NonSphericalGaussianMechanism,
    noise,
)
from dpstream.accounting.discrete import discrete_laplace

EPSILON = 1.0
N = 40000


def _on_lattice_near_zero(out: np.ndarray) -> np.ndarray:
    scaled = out * 2.0 ** 53   # exact: a power of two
    return (np.abs(out) < 1 / 32) & (scaled == np.round(scaled))


def _likelihood_ratio(release) -> float:
    """P(event | input 1) / P(event | input 0), each from N releases (+1 smoothing)."""
    rng = np.random.default_rng(5)
    hits = {v: int(_on_lattice_near_zero(release(rng, float(v))).sum()) for v in (0, 1)}
    return (hits[1] + 1) / (hits[0] + 1)


def test_floating_point_laplace_is_broken_by_the_lattice_event():
    """Control: the textbook ``v + rng.laplace(1 / epsilon)`` fails: the ratio is far above
    e^epsilon."""
    ratio = _likelihood_ratio(lambda rng, v: v + rng.laplace(0.0, 1.0 / EPSILON, size=N))
    assert ratio > 3 * math.exp(EPSILON), ratio


def test_noise_on_a_public_lattice_gives_the_attack_nothing():
    """Values rounded to a public power-of-two granularity, then exact discrete Laplace noise
    on that lattice: every output is a lattice point whatever the input, and the event's
    ratio stays within e^epsilon (here: it happens always)."""
    g = 2.0 ** -10
    scale = Fraction(1) / Fraction(EPSILON) / Fraction(g)   # in lattice steps

    def release(rng, v):
        return (round(v / g) + discrete_laplace(rng, scale, size=N)) * g

    ratio = _likelihood_ratio(release)
    assert ratio <= math.exp(EPSILON), ratio


# ------------------------------------------------------------------ the mechanisms themselves

def _mechanism_ratio(make, n: int = N) -> float:
    hits = {}
    for v in (0, 1):
        mech = make(rng=np.random.default_rng(7 + v))
        hits[v] = int(_on_lattice_near_zero(mech.release(np.full(n, float(v)))).sum())
    return (hits[1] + 1) / (hits[0] + 1)


def test_the_laplace_mechanism_gives_the_attack_nothing():
    ratio = _mechanism_ratio(lambda rng: LaplaceMechanism(epsilon=EPSILON, sensitivity=1.0,
                                                          rng=rng))
    assert ratio <= math.exp(EPSILON), ratio


def test_floating_point_gaussian_is_broken_and_the_gaussian_mechanism_is_not():
    """sigma = 4 claims about (2, 2e-15)-DP: its event ratio may not pass e^2 by much. The
    float construction's ratio is far above; the mechanism's stays near 1."""
    sigma = 4.0
    rng = np.random.default_rng(9)
    hits = [int(_on_lattice_near_zero(v + rng.normal(0.0, sigma, size=4 * N)).sum())
            for v in (0.0, 1.0)]
    assert (hits[1] + 1) / (hits[0] + 1) > 3 * math.exp(2.0), hits
    ratio = _mechanism_ratio(lambda rng: GaussianMechanism(sigma=sigma, sensitivity=1.0,
                                                           touched=1, rng=rng), n=4 * N)
    assert ratio <= math.exp(2.0), ratio


@pytest.mark.parametrize("make", [
    lambda rng: LaplaceMechanism(epsilon=0.7, sensitivity=3.0, rng=rng),
    lambda rng: GaussianMechanism(sigma=2.5, sensitivity=1.0, touched=1, rng=rng),
    lambda rng: NonSphericalGaussianMechanism(sigma=2.0, weights=[0.3, 0.7], rng=rng),
], ids=["laplace", "gaussian", "non-spherical"])
def test_the_possible_outputs_do_not_depend_on_the_input(make):
    """The precision test: outputs from neighbouring inputs (and from inputs one ulp apart)
    are points of one public lattice, and the lattice is all the release reveals: the
    residues modulo the step are 0 for every input."""
    inputs = [0.0, 1.0, np.nextafter(1.0, 2.0), 1 / 3, 1e-12]
    steps = set()
    for i, v in enumerate(inputs):
        mech = make(np.random.default_rng(100 + i))
        if isinstance(mech, NonSphericalGaussianMechanism):
            out = mech.release(np.full((3000, 2), v))
            step = noise.gaussian_steps(mech.stddevs)
        elif isinstance(mech, GaussianMechanism):
            out = mech.release(np.full(3000, v))
            step = noise.lattice_step(mech.sigma, noise.GAUSS_BITS)
        else:
            out = mech.release(np.full(3000, v))
            step = noise.lattice_step(mech.sensitivity, noise.LAPLACE_BITS)
        assert np.all(out / step == np.round(out / step))      # on the lattice, exactly
        steps.add(tuple(np.atleast_1d(step)))
    assert len(steps) == 1                                     # one lattice for every input
