"""The individual Rényi filter (Feldman and Zrnic 2021; Kirschte et al. (2023) Algorithm 1 / 8,
Theorems 7-8).

Each record in the active pool carries its cumulative individual RDP at one fixed order
alpha-hat. Before every round the caller computes each record's cost for that round (Kirschte et al.
2023, Theorem 23); a record takes part (CONT) only if its spend *including* this round's cost stays
within the bound ``rho(alpha-hat)``; otherwise it sits the round out (HALT for this round, cost 0).
By Theorem 8 the whole adaptive sequence of rounds is then (alpha-hat, rho)-RDP however many rounds
run — which is what lets late records keep training new trees without extra budget.

A record whose remaining budget is below the cheapest possible round (``min_cost``) can never take
part again; :meth:`exhausted` finds those so the model can free their memory. The state is two
numpy arrays (spend and bound check) and serialises to plain lists for checkpoints.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._validate import check_finite_array, check_integer, check_orders, check_positive

__all__ = ["IndividualRenyiFilter"]


class IndividualRenyiFilter:
    """Per-record RDP spend at order ``order``, with CONT/HALT decisions against ``bound``.

    Parameters
    ----------
    order
        The Rényi order alpha-hat at which all costs are measured.
    bound
        ``rho(alpha-hat)``: no record's cumulative spend ever exceeds it.

    Examples
    --------
    >>> f = IndividualRenyiFilter(order=8.0, bound=1.0)
    >>> f.add(3)
    array([0, 1, 2])
    >>> f.step(np.array([0.4, 0.6, 0.9]))       # everyone can afford round 1
    array([ True,  True,  True])
    >>> f.step(np.array([0.4, 0.6, 0.05]))      # record 1 would reach 1.2 > 1: it sits out
    array([ True, False,  True])
    >>> f.spent
    array([0.8 , 0.6 , 0.95])
    >>> f.exhausted(min_cost=0.1)               # record 2 can never afford another round
    array([False, False,  True])
    >>> f.remove(f.exhausted(min_cost=0.1)); len(f)
    2
    """

    def __init__(self, *, order: float, bound: float):
        self.order = float(check_orders([order])[0])
        self.bound = check_positive("bound", bound)
        self.spent = np.zeros(0, dtype=np.float64)
        self.rounds = 0

    def __len__(self) -> int:
        return int(self.spent.size)

    def add(self, n: int) -> np.ndarray:
        """Append ``n`` records with a full budget; returns their positions in the pool."""
        n = check_integer("n", n, 0)
        start = self.spent.size
        self.spent = np.concatenate((self.spent, np.zeros(n)))
        return np.arange(start, start + n)

    def step(self, costs) -> np.ndarray:
        """Decide one round: returns the CONT mask and charges exactly the CONT records.

        ``costs`` holds each pool record's individual RDP for this round (one per record, >= 0).
        """
        cont = self.charge(costs)
        self.rounds += 1
        return cont

    def charge(self, costs) -> np.ndarray:
        """:meth:`step` for a release that is not a round (not counted in ``rounds``): any
        mechanism whose per-record RDP at ``order`` is known can be filtered the same way —
        a pure epsilon-DP release costs at most epsilon at every order. A record with cost 0
        is not charged and is always CONT (it takes no part).

        >>> f = IndividualRenyiFilter(order=8.0, bound=1.0)
        >>> _ = f.add(3); f.spent[:] = [0.1, 0.95, 0.5]
        >>> f.charge(np.array([0.1, 0.1, 0.0])), f.rounds
        (array([ True, False,  True]), 0)
        """
        c = check_finite_array("costs", costs, ndim=1, allow_empty=True)
        if c.size != self.spent.size:
            raise ValueError(f"costs must hold one value per pool record ({self.spent.size}), "
                             f"got {c.size}")
        if np.any(c < 0):
            raise ValueError("costs must be >= 0")
        after = self.spent + c
        cont = after <= self.bound
        self.spent = np.where(cont, after, self.spent)
        return cont

    def step_sample(self, costs, u, rate: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`step` and then the Poisson subsample of the CONT records, ``cont & (u <
        rate)``: returns ``(cont, sampled, rows)``, ``rows`` the sampled positions in pool
        order. One compiled pass over the pool (the same
        comparisons and additions as :meth:`charge`); ``costs`` are checked as there, before
        anything is charged.

        >>> f = IndividualRenyiFilter(order=8.0, bound=1.0)
        >>> _ = f.add(3); f.spent[:] = [0.1, 0.95, 0.5]
        >>> cont, sampled, rows = f.step_sample(np.array([0.1, 0.1, 0.2]),
        ...                                     np.array([0.5, 0.0, 0.01]), 0.1)
        >>> cont, rows, f.spent, f.rounds
        (array([ True, False,  True]), array([2]), array([0.2 , 0.95, 0.7 ]), 1)
        """
        c = np.asarray(costs, dtype=np.float64)
        u = np.asarray(u, dtype=np.float64)
        if c.ndim != 1 or c.size != self.spent.size or u.shape != c.shape:
            raise ValueError(f"costs and u must hold one value per pool record "
                             f"({self.spent.size}), got {c.shape} and {u.shape}")
        kernels = _kernels()
        if kernels is None:   # the numpy form (tests compare the two)
            cont = self.step(c)
            sampled = cont & (u < rate)
            return cont, sampled, np.flatnonzero(sampled)
        cont, sampled, rows, bad = kernels[0](c, self.spent, self.bound, u, float(rate))
        if bad:   # nothing was charged: the error charge() gives
            check_finite_array("costs", c, ndim=1, allow_empty=True)
            raise ValueError("costs must be >= 0")
        self.rounds += 1
        return cont, sampled, rows

    def count_exhausted(self, *, min_cost: float) -> int:
        """How many records :meth:`exhausted` marks, without building the mask."""
        m = check_positive("min_cost", min_cost)
        kernels = _kernels()
        if kernels is None:   # the numpy form (tests compare the two)
            return int(self.exhausted(min_cost=m).sum())
        return int(kernels[1](self.spent, self.bound, m))

    def remaining(self) -> np.ndarray:
        """Budget left per record."""
        return self.bound - self.spent

    def exhausted(self, *, min_cost: float) -> np.ndarray:
        """Mask of records that cannot afford even the cheapest round any more."""
        m = check_positive("min_cost", min_cost)
        return self.remaining() < m

    def remove(self, mask) -> None:
        """Drop the records selected by ``mask`` (they leave memory; their spend is final)."""
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != self.spent.shape:
            raise ValueError(f"mask must have one entry per pool record ({self.spent.size})")
        self.spent = self.spent[~mask]

    def select(self, index) -> None:
        """Keep only the records at positions ``index`` (distinct), in that order; the others
        leave memory like :meth:`remove`'s. Lets a pool reorder its records as it compacts."""
        index = np.asarray(index, dtype=np.int64)
        if index.ndim != 1 or (index.size and (index.min() < 0 or index.max() >= self.spent.size)):
            raise ValueError(f"index must be 1-d positions in [0, {self.spent.size})")
        hit = np.zeros(self.spent.size, dtype=bool)
        hit[index] = True
        if int(hit.sum()) != index.size:
            raise ValueError("index must not repeat a record")
        self.spent = self.spent[index]

    def compact(self, holes, movers, keep: int) -> None:
        """Keep the records at positions ``[0, keep)``, those at ``holes`` replaced by the
        ones at ``movers`` (positions ``>= keep``); every other record leaves memory like
        :meth:`remove`'s. The O(removed) form of :meth:`select` a pool uses as it compacts.

        >>> f = IndividualRenyiFilter(order=8.0, bound=1.0)
        >>> _ = f.add(5); f.spent[:] = [0.1, 0.2, 0.3, 0.4, 0.5]
        >>> f.compact([1], [4], keep=3); f.spent      # records 1 and 3 leave
        array([0.1, 0.5, 0.3])
        """
        holes = np.asarray(holes, dtype=np.int64)
        movers = np.asarray(movers, dtype=np.int64)
        keep = check_integer("keep", keep, 0)
        n = self.spent.size
        if holes.ndim != 1 or holes.shape != movers.shape or keep > n:
            raise ValueError("holes and movers must be 1-d and of one length, keep <= pool")
        if holes.size and (holes.min() < 0 or holes.max() >= keep or movers.min() < keep
                           or movers.max() >= n or np.unique(holes).size != holes.size
                           or np.unique(movers).size != movers.size):
            raise ValueError(f"holes must be distinct positions in [0, {keep}) and movers "
                             f"distinct positions in [{keep}, {n})")
        self.spent[holes] = self.spent[movers]
        self.spent = self.spent[:keep]

    def spend_summary(self) -> dict:
        """Min, median and max spend as a fraction of the bound (empty pool: zeros)."""
        if self.spent.size == 0:
            return {"min": 0.0, "median": 0.0, "max": 0.0, "records": 0}
        frac = self.spent / self.bound
        return {"min": float(frac.min()), "median": float(np.median(frac)),
                "max": float(frac.max()), "records": int(frac.size)}

    def to_dict(self) -> dict:
        return {"order": self.order, "bound": self.bound, "rounds": self.rounds,
                "spent": self.spent.tolist()}

    @classmethod
    def from_dict(cls, state: dict) -> IndividualRenyiFilter:
        f = cls(order=state["order"], bound=state["bound"])
        spent = check_finite_array("spent", state["spent"], ndim=1, allow_empty=True)
        if np.any(spent < 0) or np.any(spent > f.bound):
            raise ValueError("corrupt filter state: a spend lies outside [0, bound]")
        f.spent = spent
        f.rounds = check_integer("rounds", state.get("rounds", 0), 0)
        return f


def _step_sample_kernel(cost, spent, bound, u, rate):   # pragma: no cover - compiled
    # IndividualRenyiFilter.step_sample: every cost checked first (finite, >= 0: else
    # nothing is charged), then charge's comparison and addition per record, and the sample
    n = cost.size
    cont = np.empty(n, np.bool_)
    sampled = np.empty(n, np.bool_)
    rows = np.empty(n, np.int64)
    for k in range(n):
        if not (cost[k] >= 0.0 and cost[k] < np.inf):
            return cont, sampled, rows[:0].copy(), True
    m = 0
    for k in range(n):
        after = spent[k] + cost[k]
        ok = after <= bound
        if ok:
            spent[k] = after
        cont[k] = ok
        take = ok and u[k] < rate
        sampled[k] = take
        if take:
            rows[m] = k
            m += 1
    return cont, sampled, rows[:m].copy(), False


def _count_below_kernel(spent, bound, floor):   # pragma: no cover - compiled
    # IndividualRenyiFilter.count_exhausted: (bound - spent < floor).sum()
    m = 0
    for k in range(spent.size):
        if bound - spent[k] < floor:
            m += 1
    return m


_COMPILED: list = []   # the compiled kernels, built on first use ([None]: the numpy forms)


def _kernels():
    """The filter's kernels compiled by numba, or ``None`` where a test sets ``_COMPILED``
    to ``[None]`` to run the numpy forms."""
    if not _COMPILED:
        _COMPILED.append((njit(cache=True, nogil=True)(_step_sample_kernel),
                          njit(cache=True, nogil=True)(_count_below_kernel)))
    return _COMPILED[0]
