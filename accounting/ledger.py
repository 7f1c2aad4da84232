"""A pure epsilon-DP budget ledger with sequential and parallel composition.

:class:`BudgetLedger` accepts a charge only while ``sequential + max over partitions`` stays
within the total; a refused charge raises
:class:`~dpstream.accounting.errors.BudgetExceededError` and changes nothing. Amounts are exact
fractions of the decimals passed. Design: docs/accounting.md#the-pure-dp-budget-ledger.
"""

from __future__ import annotations

from collections import deque
from fractions import Fraction

from ._validate import check_epsilon, check_nonnegative
from .errors import BudgetExceededError

__all__ = ["BudgetLedger"]


def _exact(name: str, value: float) -> Fraction:
    v = check_nonnegative(name, value)
    return Fraction(repr(v))


class BudgetLedger:
    """Track pure-DP spending against a total epsilon.

    Parameters
    ----------
    total_epsilon
        The promised budget.
    history
        How many recent charges to keep for reports (totals are always exact and complete).

    Examples
    --------
    >>> ledger = BudgetLedger(total_epsilon=1.0)
    >>> ledger.charge(0.2, label="init score")             # sequential: all records
    >>> ledger.charge(0.8, partition="window-0", label="trees")
    >>> ledger.charge(0.8, partition="window-1", label="trees")   # disjoint window: parallel
    >>> ledger.spent                                       # 0.2 + max(0.8, 0.8)
    1.0
    >>> ledger.remaining(partition="window-2")
    0.8
    >>> ledger.charge(0.1, partition="window-0")
    Traceback (most recent call last):
    ...
    dpstream.accounting.errors.BudgetExceededError: privacy budget exceeded in partition 'window-0': requested epsilon=0.1, remaining epsilon=0; nothing was charged
    >>> ledger.charge(0.7, partition="window-2"); ledger.charge(0.1, partition="window-2")
    >>> ledger.spent
    1.0
    """

    def __init__(self, *, total_epsilon: float, history: int = 1000):
        self._total = Fraction(repr(check_epsilon(total_epsilon, "total_epsilon")))
        self._sequential = Fraction(0)
        self._partitions: dict[str, Fraction] = {}
        self._closed_max = Fraction(0)
        self._closed_count = 0
        self.history: deque = deque(maxlen=int(history))

    # ------------------------------------------------------------------ queries
    @property
    def total_epsilon(self) -> float:
        return float(self._total)

    def _parallel_max(self) -> Fraction:
        return max([self._closed_max, *self._partitions.values()])

    @property
    def spent(self) -> float:
        """The epsilon of everything released so far: sequential + max partition."""
        return float(self._sequential + self._parallel_max())

    @property
    def open_partitions(self) -> list[str]:
        """Names of the partitions charged and not closed (:meth:`close`)."""
        return list(self._partitions)

    def partition_spent(self, partition: str) -> float:
        return float(self._partitions.get(str(partition), Fraction(0)))

    def remaining(self, *, partition: str | None = None) -> float:
        """What one more charge could spend, sequentially or in the given partition."""
        return float(self._remaining(partition))

    def _remaining(self, partition: str | None) -> Fraction:
        if partition is None:
            return self._total - self._sequential - self._parallel_max()
        return self._total - self._sequential - self._partitions.get(str(partition), Fraction(0))

    # ------------------------------------------------------------------ charges
    def can_charge(self, epsilon: float, *, partition: str | None = None) -> bool:
        return _exact("epsilon", epsilon) <= self._remaining(partition)

    def charge(self, epsilon: float, *, partition: str | None = None, label: str = "") -> None:
        """Record a release of ``epsilon``; raises ``BudgetExceededError`` if it does not fit."""
        if partition is not None and not isinstance(partition, str):
            raise TypeError(f"partition must be a string or None, got {type(partition).__name__}")
        amount = _exact("epsilon", epsilon)
        left = self._remaining(partition)
        if amount > left:
            raise BudgetExceededError(float(amount), float(left), partition)
        if partition is None:
            self._sequential += amount
        else:
            self._partitions[partition] = self._partitions.get(partition, Fraction(0)) + amount
        self.history.append({"epsilon": float(amount), "partition": partition, "label": label})

    def charge_parallel(self, charges: dict[str, float], *, label: str = "") -> None:
        """Charge several disjoint partitions at once: all or nothing."""
        amounts = {str(p): _exact(f"charges[{p!r}]", e) for p, e in charges.items()}
        for p, a in amounts.items():
            left = self._remaining(p)
            if a > left:
                raise BudgetExceededError(float(a), float(left), p)
        for p, a in amounts.items():
            self.charge(float(a), partition=p, label=label)

    def close(self, partition: str) -> None:
        """Forget a finished partition's name but keep its spend in the maximum (bounded memory).

        The caller must never charge that name again: a closed name charged anew starts from
        zero (a stream's windows are numbered, and a number is never reused).

        Examples
        --------
        >>> ledger = BudgetLedger(total_epsilon=1.0)
        >>> ledger.charge(0.5, partition="window-0"); ledger.charge(0.3, partition="window-1")
        >>> ledger.close("window-0")
        >>> ledger.open_partitions, ledger.spent, ledger.report()["closed_partitions"]
        (['window-1'], 0.5, 1)
        """
        spend = self._partitions.pop(str(partition), None)
        if spend is not None:
            self._closed_max = max(self._closed_max, spend)
            self._closed_count += 1

    def close_prefix(self, prefix: str) -> int:
        """:meth:`close` every open partition whose name starts with ``prefix``; returns how
        many. Only for partitions whose records will never be charged under those names again
        except as the caller's privacy argument allows (a window dropped untrained whose
        number the next window takes).

        >>> ledger = BudgetLedger(total_epsilon=1.0)
        >>> ledger.charge(0.5, partition="window-3/tree-0")
        >>> ledger.close_prefix("window-3/"), ledger.open_partitions, ledger.spent
        (1, [], 0.5)
        """
        names = [name for name in self._partitions if name.startswith(prefix)]
        for name in names:
            self.close(name)
        return len(names)

    # ------------------------------------------------------------------ reports & state
    def report(self) -> dict:
        return {
            "mechanism_family": "pure epsilon-DP (sequential + parallel composition)",
            "total_epsilon": self.total_epsilon,
            "spent_epsilon": self.spent,
            "sequential_epsilon": float(self._sequential),
            "max_partition_epsilon": float(self._parallel_max()),
            "open_partitions": len(self._partitions),
            "closed_partitions": self._closed_count,
        }

    def to_dict(self) -> dict:
        return {
            "total": str(self._total),
            "sequential": str(self._sequential),
            "partitions": {p: str(v) for p, v in self._partitions.items()},
            "closed_max": str(self._closed_max),
            "closed_count": self._closed_count,
            "history": list(self.history),
            "history_len": self.history.maxlen,
        }

    @classmethod
    def from_dict(cls, state: dict) -> BudgetLedger:
        ledger = cls(total_epsilon=float(Fraction(state["total"])),
                     history=state.get("history_len") or 1000)
        ledger._total = Fraction(state["total"])
        ledger._sequential = Fraction(state["sequential"])
        ledger._partitions = {p: Fraction(v) for p, v in state["partitions"].items()}
        ledger._closed_max = Fraction(state["closed_max"])
        ledger._closed_count = int(state["closed_count"])
        ledger.history.extend(state.get("history", []))
        if ledger._sequential + ledger._parallel_max() > ledger._total:
            raise ValueError("corrupt ledger state: spend exceeds the total budget")
        return ledger
