"""Exceptions raised by the accounting core."""

from __future__ import annotations

__all__ = ["BudgetExceededError"]


class BudgetExceededError(RuntimeError):
    """A charge was refused because it would spend more than the promised budget.

    Attributes
    ----------
    requested
        The epsilon the caller asked to spend.
    remaining
        The epsilon that was still available where the charge would have landed.
    partition
        The partition (window) the charge was for, or ``None`` for a sequential charge.
    """

    def __init__(self, requested: float, remaining: float, partition: str | None = None):
        self.requested = float(requested)
        self.remaining = float(remaining)
        self.partition = partition
        where = f" in partition {partition!r}" if partition is not None else ""
        super().__init__(
            f"privacy budget exceeded{where}: requested epsilon={self.requested:.6g}, "
            f"remaining epsilon={self.remaining:.6g}; nothing was charged"
        )

    def __reduce__(self):  # keep the attributes through pickling (multiprocessing, checkpoints)
        return (type(self), (self.requested, self.remaining, self.partition))
