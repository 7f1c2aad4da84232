"""An RDP accountant that composes mechanisms, and the calibrators built on it.

* :class:`RDPAccountant` composes (subsampled) Gaussian, Laplace and arbitrary RDP curves and
  converts to (epsilon, delta) (Balle et al. 2020). ``accountant="tight"`` uses the exact
  subsampled-Gaussian RDP (Mironov, Talwar, Zhang 2019), ``"zhu-wang"`` the general bound of
  Kirschte et al. (2023) Theorem 9 at integer orders.
* :func:`calibrate_noise_multiplier`: the smallest noise multiplier z such that ``steps``
  Poisson-subsampled Gaussian releases are (epsilon, delta)-DP.
* :func:`calibrate_sgbdt`: Kirschte et al. (2023) Algorithm 7 (Initialization): sigma_leaf, the
order alpha-hat
  and the individual bound rho(alpha-hat) for T rounds of DPLeaf with clip g* and split (r1, r2).
* :class:`RoundCostTable`: the per-record round cost of Kirschte et al. (2023) Theorem 23 at
alpha-hat,
  tabulated over |g| in [0, g*] and read with the next grid point up (never below the exact cost).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from numba import njit

from . import _sgm
from ._validate import (
    check_delta,
    check_epsilon,
    check_finite_array,
    check_integer,
    check_orders,
    check_positive,
    check_sample_rate,
)
from .rdp import (
    DEFAULT_ORDERS,
    gaussian_rdp,
    laplace_rdp,
    rdp_to_delta,
    rdp_to_epsilon,
    subsampled_gaussian_rdp,
    zhu_wang_subsampled_rdp,
)

__all__ = [
    "ACCOUNTANTS",
    "RDPAccountant",
    "Calibration",
    "SGBDTCalibration",
    "RoundCostTable",
    "calibrate_noise_multiplier",
    "calibrate_sgbdt",
    "subsampled_rdp",
    "default_orders",
]

Accountant = Literal["tight", "zhu-wang"]
ACCOUNTANTS = ("tight", "zhu-wang")

#: Integer orders for the Zhu–Wang bound (it is defined for integer alpha >= 2 only).
ZHU_WANG_ORDERS: np.ndarray = np.array(list(range(2, 65)) + [80, 96, 128, 192, 256, 512],
                                       dtype=np.float64)


def _check_accountant(accountant: str) -> str:
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be 'tight' or 'zhu-wang', got {accountant!r}")
    return accountant


def default_orders(accountant: str = "tight") -> np.ndarray:
    """The order grid searched by each accountant."""
    return (DEFAULT_ORDERS if _check_accountant(accountant) == "tight" else ZHU_WANG_ORDERS).copy()


def subsampled_rdp(orders, *, sample_rate: float, noise_multiplier: float,
                   accountant: str = "tight") -> np.ndarray:
    """RDP of one Poisson-subsampled Gaussian release under the chosen accountant.

    >>> a = np.array([2.0, 8.0])
    >>> t = subsampled_rdp(a, sample_rate=0.1, noise_multiplier=2.0)
    >>> zw = subsampled_rdp(a, sample_rate=0.1, noise_multiplier=2.0, accountant="zhu-wang")
    >>> bool(np.all(zw >= t))
    True
    """
    if _check_accountant(accountant) == "tight":
        return subsampled_gaussian_rdp(orders, sample_rate=sample_rate,
                                       noise_multiplier=noise_multiplier)
    q = check_sample_rate(sample_rate)
    z = check_positive("noise_multiplier", noise_multiplier, allow_inf=True)
    if q == 1.0 or math.isinf(z):  # no amplification to claim: the base curve itself
        return gaussian_rdp(check_orders(orders, integer=True), z)
    return zhu_wang_subsampled_rdp(orders, sample_rate=q,
                                   base_rdp=lambda a: gaussian_rdp(a, z))


class RDPAccountant:
    """Compose mechanisms in RDP and report (epsilon, delta).

    Examples
    --------
    >>> acc = RDPAccountant()
    >>> acc.compose_subsampled_gaussian(noise_multiplier=5.0, sample_rate=0.1, steps=150)
    >>> eps, order = acc.get_epsilon(delta=1e-6)
    >>> round(eps, 4), order
    (1.1713, 19.0)
    >>> acc.compose_laplace(epsilon=0.05)   # e.g. a DP initial score
    >>> round(acc.get_epsilon(delta=1e-6)[0], 4)
    1.1916
    >>> RDPAccountant(accountant="zhu-wang").orders[:3]
    array([2., 3., 4.])
    """

    def __init__(self, *, orders=None, accountant: str = "tight"):
        self.accountant = _check_accountant(accountant)
        self.orders = (default_orders(accountant) if orders is None
                       else check_orders(orders, integer=accountant == "zhu-wang"))
        self.rdp = np.zeros_like(self.orders)
        self.events: list[dict] = []

    def _add(self, curve: np.ndarray, event: dict) -> None:
        curve = np.asarray(curve, dtype=np.float64)
        if curve.shape != self.orders.shape or not np.all(np.isfinite(curve)) or np.any(curve < 0):
            raise ValueError("an RDP curve must be finite, >= 0, one value per order")
        self.rdp = self.rdp + curve
        self.events.append(event)

    def compose_subsampled_gaussian(self, *, noise_multiplier: float, sample_rate: float = 1.0,
                                    steps: int = 1) -> None:
        """Add ``steps`` Poisson-subsampled Gaussian releases."""
        t = check_integer("steps", steps, 0)
        curve = subsampled_rdp(self.orders, sample_rate=sample_rate,
                               noise_multiplier=noise_multiplier, accountant=self.accountant)
        self._add(t * curve, {"mechanism": "subsampled_gaussian", "noise_multiplier":
                              float(noise_multiplier), "sample_rate": float(sample_rate),
                              "steps": t})

    def compose_gaussian(self, *, noise_multiplier: float, steps: int = 1) -> None:
        """Add ``steps`` Gaussian releases without subsampling."""
        t = check_integer("steps", steps, 0)
        self._add(t * gaussian_rdp(self.orders, noise_multiplier),
                  {"mechanism": "gaussian", "noise_multiplier": float(noise_multiplier),
                   "steps": t})

    def compose_laplace(self, *, epsilon: float, steps: int = 1) -> None:
        """Add ``steps`` releases of the continuous Laplace mechanism, each epsilon-DP
        (dpstream's :class:`~dpstream.accounting.LaplaceMechanism` samples discrete Laplace
        noise: compose its own curve, ``compose_rdp(mech.rdp(accountant.orders))``)."""
        t = check_integer("steps", steps, 0)
        self._add(t * laplace_rdp(self.orders, check_epsilon(epsilon)),
                  {"mechanism": "laplace", "epsilon": float(epsilon), "steps": t})

    def compose_rdp(self, curve, *, label: str = "custom") -> None:
        """Add an arbitrary RDP curve given at :attr:`orders`."""
        self._add(check_finite_array("curve", curve, ndim=1), {"mechanism": label})

    def get_epsilon(self, *, delta: float) -> tuple[float, float]:
        """``(epsilon, order)``: the best epsilon over the orders for this delta."""
        return rdp_to_epsilon(self.orders, self.rdp, delta)

    def get_delta(self, *, epsilon: float) -> tuple[float, float]:
        """``(delta, order)``: the best delta over the orders for this epsilon."""
        return rdp_to_delta(self.orders, self.rdp, epsilon)

    def to_dict(self) -> dict:
        return {"accountant": self.accountant, "orders": self.orders.tolist(),
                "rdp": self.rdp.tolist(), "events": list(self.events)}

    @classmethod
    def from_dict(cls, state: dict) -> RDPAccountant:
        acc = cls(orders=state["orders"], accountant=state["accountant"])
        acc.rdp = np.asarray(state["rdp"], dtype=np.float64)
        acc.events = list(state.get("events", []))
        return acc


@dataclass(frozen=True)
class Calibration:
    """Result of :func:`calibrate_noise_multiplier`."""

    noise_multiplier: float
    order: float
    epsilon: float
    delta: float
    sample_rate: float
    steps: int
    accountant: str

    def to_dict(self) -> dict:
        return asdict(self)


def _epsilon_of(z: float, *, q: float, steps: int, delta: float, orders: np.ndarray,
                accountant: str) -> tuple[float, float]:
    curve = steps * subsampled_rdp(orders, sample_rate=q, noise_multiplier=z,
                                   accountant=accountant)
    return rdp_to_epsilon(orders, curve, delta)


def calibrate_noise_multiplier(*, epsilon: float, delta: float, sample_rate: float, steps: int,
                               accountant: str = "tight", orders=None,
                               rtol: float = 1e-6) -> Calibration:
    """Smallest noise multiplier (to ``rtol``) for ``steps`` subsampled Gaussian releases.

    The returned z always satisfies the target: the search keeps the upper end of the bracket.

    Examples
    --------
    >>> cal = calibrate_noise_multiplier(epsilon=1.0, delta=1e-6, sample_rate=0.1, steps=150)
    >>> round(cal.noise_multiplier, 3), cal.epsilon <= 1.0
    (5.754, True)
    >>> calibrate_noise_multiplier(epsilon=1.0, delta=2.0, sample_rate=0.1, steps=10)
    Traceback (most recent call last):
    ...
    ValueError: delta must lie in (0, 1), got 2.0
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    q = check_sample_rate(sample_rate)
    t = check_integer("steps", steps, 1)
    acc = _check_accountant(accountant)
    a = default_orders(acc) if orders is None else check_orders(orders, integer=acc == "zhu-wang")

    def f(z: float) -> float:
        return _epsilon_of(z, q=q, steps=t, delta=d, orders=a, accountant=acc)[0]

    lo, hi = 0.05, 1.0
    while f(hi) > eps:
        lo, hi = hi, hi * 2.0
        if hi > 1e7:
            raise ValueError("epsilon is too small to reach with any reasonable noise multiplier")
    if f(lo) <= eps:  # even tiny noise suffices: search down
        while lo > 1e-4 and f(lo) <= eps:
            hi, lo = lo, lo / 2.0
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi)
        if f(mid) <= eps:
            hi = mid
        else:
            lo = mid
    e, order = _epsilon_of(hi, q=q, steps=t, delta=d, orders=a, accountant=acc)
    return Calibration(noise_multiplier=hi, order=order, epsilon=e, delta=d, sample_rate=q,
                       steps=t, accountant=acc)


_HEADROOM = 1e-9


def _check_split(leaf_noise_split: float) -> float:
    # r1 in (0, 1): DPLeaf releases the leaf count with variance sigma^2 / (2 r1) and the
    # gradient sum with sigma^2 / (2 r2). r1 = 0 is static leaf noise: only the sum is released.
    r1 = float(leaf_noise_split)
    if not 0.0 <= r1 < 1.0:
        raise ValueError(f"leaf_noise_split must lie in [0, 1), got {leaf_noise_split!r}")
    return r1


def _leaf_scale(grad_clip: float, r1: float) -> float:
    # sigma_leaf = z * sqrt(2 (r1 + r2 g^2)) for the worst-case record (|g| = g*)
    return math.sqrt(2.0 * (r1 + (1.0 - r1) * grad_clip * grad_clip))


@dataclass(frozen=True)
class SGBDTCalibration:
    """Result of Kirschte et al. (2023) Algorithm 7 (Initialization)."""

    sigma_leaf: float
    noise_multiplier: float
    order: float
    rho_max: float
    epsilon: float
    delta: float
    sample_rate: float
    rounds: int
    grad_clip: float
    leaf_noise_split: float
    accountant: str

    def to_dict(self) -> dict:
        return asdict(self)


def calibrate_sgbdt(*, epsilon: float, delta: float, sample_rate: float, rounds: int,
                    grad_clip: float, leaf_noise_split: float,
                    accountant: str = "tight") -> SGBDTCalibration:
    """Kirschte et al. (2023) Algorithm 7: sigma_leaf, alpha-hat and rho(alpha-hat) for the tree
    rounds.

    One round (TrainSingleTree) of a worst-case record (|g| = g*) is a Poisson-subsampled
    Gaussian with noise multiplier ``z = sigma_leaf / sqrt(2 (r1 + r2 g*^2))`` (Corollary 24 via
    :func:`dpstream.accounting.rdp.effective_noise_multiplier`). The smallest sigma whose
    ``rounds``-fold composition is (epsilon, delta)-DP is found, alpha-hat is the order that
    attains it, and ``rho_max = rounds * a_gamma(alpha-hat)`` is the individual filter's bound.

    Examples
    --------
    >>> cal = calibrate_sgbdt(epsilon=0.5, delta=5e-8, sample_rate=0.1, rounds=150,
    ...                       grad_clip=0.1, leaf_noise_split=0.2)
    >>> cal.epsilon <= 0.5, cal.order > 1
    (True, True)
    >>> from dpstream.accounting import IndividualRenyiFilter
    >>> f = IndividualRenyiFilter(order=cal.order, bound=cal.rho_max); _ = f.add(1)
    >>> worst = RoundCostTable(order=cal.order, sigma_leaf=cal.sigma_leaf, leaf_noise_split=0.2,
    ...                        sample_rate=0.1, grad_clip=0.1).max_cost
    >>> sum(bool(f.step(np.array([worst]))[0]) for _ in range(151))   # exactly T rounds
    150
    >>> round(cal.sigma_leaf / cal.noise_multiplier, 4)   # sqrt(2 (0.2 + 0.8 * 0.01))
    0.645
    """
    g = check_positive("grad_clip", grad_clip)
    r1 = _check_split(leaf_noise_split)
    eps = check_epsilon(epsilon)
    # the checks of calibrate_noise_multiplier, in its order, so the errors are the same
    d = check_delta(delta)
    q = check_sample_rate(sample_rate)
    t = check_integer("steps", rounds, 1)
    acc = _check_accountant(accountant)
    return _calibrate_sgbdt(eps, d, q, t, g, r1, acc)


@lru_cache(maxsize=64)
def _calibrate_sgbdt(epsilon: float, delta: float, sample_rate: float, rounds: int,
                     g: float, r1: float, accountant: str) -> SGBDTCalibration:
    # A pure function of validated floats: every model started with the same budget shares
    # one (frozen) result instead of repeating the search.
    target = epsilon
    for _ in range(8):
        cal = calibrate_noise_multiplier(epsilon=target, delta=delta, sample_rate=sample_rate,
                                         steps=rounds, accountant=accountant)
        per_round = subsampled_rdp(np.array([cal.order]), sample_rate=cal.sample_rate,
                                   noise_multiplier=cal.noise_multiplier,
                                   accountant=accountant)[0]
        # The filter compares running float sums against rho_max; a 1e-9 relative headroom keeps
        # T worst-case rounds inside the bound despite round-off. The guarantee is stated for this
        # rho_max itself (Theorem 8, then conversion at alpha-hat), so it must stay in budget.
        rho_max = float(cal.steps * per_round) * (1.0 + _HEADROOM)
        eps_guaranteed, _ = rdp_to_epsilon([cal.order], [rho_max], cal.delta)
        if eps_guaranteed <= epsilon:
            break
        target -= eps_guaranteed - epsilon
    else:  # pragma: no cover - one correction always suffices
        raise ArithmeticError("could not calibrate within the budget")
    return SGBDTCalibration(
        sigma_leaf=cal.noise_multiplier * _leaf_scale(g, r1),
        noise_multiplier=cal.noise_multiplier, order=cal.order,
        rho_max=rho_max, epsilon=eps_guaranteed, delta=cal.delta,
        sample_rate=cal.sample_rate, rounds=cal.steps, grad_clip=g, leaf_noise_split=r1,
        accountant=accountant)


def _lookup_kernel(g, grid, table, grad_clip):   # pragma: no cover - compiled
    # RoundCostTable.cost per record: clip |g| to g*, guess the first grid point >= |g|
    # arithmetically, correct the guess one step up or down, read the table there
    last = grid.size - 1
    scale = last / grad_clip
    out = np.empty(g.size)
    for k in range(g.size):
        v = abs(g[k])
        if v > grad_clip:
            v = grad_clip
        i = min(int(np.ceil(v * scale)), last)
        if grid[i] < v and i < last:
            i += 1
        if i > 0 and grid[i - 1] >= v:
            i -= 1
        out[k] = table[i]
    return out


_COMPILED: list = []   # the compiled lookup, built on first use ([None]: the numpy form)


def _grid_lookup():
    """:func:`_lookup_kernel` compiled by numba, or ``None`` where a test sets ``_COMPILED``
    to ``[None]`` to run the numpy form."""
    if not _COMPILED:
        _COMPILED.append(njit(cache=True, nogil=True)(_lookup_kernel))
    return _COMPILED[0]


@lru_cache(maxsize=64)
def _round_costs(order: float, sigma_leaf: float, r1: float, q: float, grad_clip: float,
                 accountant: str, n: int) -> np.ndarray:
    """The cost table of :class:`RoundCostTable` (read-only): ``exact_cost`` at each grid point.

    For the tight accountant all grid points go through one vectorised series call; each entry
    is computed from its own terms only, so it is the very value ``exact_cost`` returns there.
    """
    grid = np.linspace(0.0, grad_clip, n)
    if accountant != "tight":
        table = np.array([_exact_cost(order, sigma_leaf, r1, q, grad_clip, accountant, g)
                          for g in grid])
    else:
        g = np.minimum(np.abs(grid), grad_clip)
        with np.errstate(divide="ignore"):
            z = sigma_leaf / np.sqrt(2.0 * (r1 + (1.0 - r1) * g * g))
        table = np.zeros(n)
        live = np.isfinite(z)
        if q == 1.0:
            table[live] = order / (2.0 * z[live] * z[live])
        elif live.any():
            log_a = _sgm.log_a(q, z[live], np.full(int(live.sum()), order))
            table[live] = np.maximum(log_a, 0.0) / (order - 1.0)
    table.setflags(write=False)
    return table


def _exact_cost(order: float, sigma_leaf: float, r1: float, q: float, grad_clip: float,
                accountant: str, grad_abs: float) -> float:
    g = min(abs(float(grad_abs)), grad_clip)
    if r1 == 0.0 and g == 0.0:  # static leaf noise: a zero gradient moves nothing released
        return 0.0
    z = sigma_leaf / math.sqrt(2.0 * (r1 + (1.0 - r1) * g * g))
    return float(subsampled_rdp([order], sample_rate=q, noise_multiplier=z,
                                accountant=accountant)[0])


class RoundCostTable:
    """Individual RDP cost of one subsampled DPLeaf round per record (Kirschte et al. 2023, Theorem
    23).

    A record with clipped gradient ``|g|`` costs ``a_gamma(alpha-hat; z(|g|))`` with
    ``z(|g|) = sigma_leaf / sqrt(2 (r1 + r2 g^2))``. The cost grows with ``|g|``, so it is
    tabulated on ``grid`` points of ``[0, g*]`` and each record is charged the value at the next
    grid point at or above its ``|g|``: never less than its exact cost, one vectorised lookup per
    round however large the pool.

    Examples
    --------
    >>> table = RoundCostTable(order=8.0, sigma_leaf=3.0, leaf_noise_split=0.2, sample_rate=0.1,
    ...                        grad_clip=0.1)
    >>> costs = table.cost(np.array([0.0, 0.05, 0.1, 7.0]))   # |g| above g* is clipped
    >>> bool(costs[0] < costs[1] < costs[2] == costs[3])
    True
    >>> bool(costs[1] >= table.exact_cost(0.05))
    True
    """

    def __init__(self, *, order: float, sigma_leaf: float, leaf_noise_split: float,
                 sample_rate: float, grad_clip: float, accountant: str = "tight",
                 grid: int = 513):
        self.order = float(check_orders([order])[0])
        self.sigma_leaf = check_positive("sigma_leaf", sigma_leaf)
        self.leaf_noise_split = _check_split(leaf_noise_split)
        self.sample_rate = check_sample_rate(sample_rate)
        self.grad_clip = check_positive("grad_clip", grad_clip)
        self.accountant = _check_accountant(accountant)
        n = check_integer("grid", grid, 2)
        self.grid = np.linspace(0.0, self.grad_clip, n)
        self.table = _round_costs(self.order, self.sigma_leaf, self.leaf_noise_split,
                                  self.sample_rate, self.grad_clip, self.accountant, n).copy()
        if np.any(np.diff(self.table) < 0):  # pragma: no cover - monotone by construction
            raise ArithmeticError("round cost is not monotone in |g|")

    def exact_cost(self, grad_abs: float) -> float:
        """Exact cost at one gradient magnitude (already clipped to ``[0, g*]``)."""
        return _exact_cost(self.order, self.sigma_leaf, self.leaf_noise_split, self.sample_rate,
                           self.grad_clip, self.accountant, grad_abs)

    @property
    def min_cost(self) -> float:
        """The cost of a record with zero gradient (it still moves the leaf count)."""
        return float(self.table[0])

    @property
    def max_cost(self) -> float:
        """The worst-case cost (|g| = g*), as used by the calibration."""
        return float(self.table[-1])

    def cost(self, grad_abs) -> np.ndarray:
        """Per-record costs for gradients, by magnitude (``|g|`` clipped to g*), rounded up to
        the grid: a signed gradient costs what its magnitude does."""
        g = check_finite_array("grad_abs", grad_abs, allow_empty=True)
        lookup = _grid_lookup()
        if lookup is not None:   # the same steps, compiled: one pass over the pool
            return lookup(g.ravel(), self.grid, self.table, self.grad_clip).reshape(g.shape)
        g = np.minimum(np.abs(g), self.grad_clip)
        # the grid is uniform: guess the first grid point >= g arithmetically, then correct
        # the guess by one step either way so float rounding can never charge less
        last = self.grid.size - 1
        idx = np.minimum(np.ceil(g * (last / self.grad_clip)).astype(np.int64), last)
        idx += self.grid.take(idx) < g
        np.minimum(idx, last, out=idx)
        lower = np.maximum(idx - 1, 0)
        idx -= (idx > 0) & (self.grid.take(lower) >= g)
        return self.table.take(idx)
