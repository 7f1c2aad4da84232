"""A concept-drift signal released with differential privacy.

:class:`DPDriftSignal` clips each record's prequential loss to ``[0, 1]``, sums it into
disjoint windows of ``window`` messages (public counts), and releases each window's sum with
Laplace noise of scale ``1 / epsilon`` (sensitivity 1): the whole series is ``epsilon``-DP
per record by parallel composition. A change detector (Page-Hinkley or ADWIN) reads only the
released rates (post-processing). The ``epsilon`` is part of the model's budget
(``drift_share``).

Why it is private: ``docs/drift.md#the-signal-dpdriftsignal`` and
``docs/drift.md#why-it-is-private-proof-sketch``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..accounting import LaplaceMechanism, as_generator

__all__ = ["DPDriftSignal"]

DETECTORS = ("adwin", "page-hinkley")

#: how many released rates (and reported changes) a signal keeps for reports; the counts
#: (``releases``, ``changes``) are complete
HISTORY = 1000


class DPDriftSignal:
    """Noisy prequential error rates over disjoint windows, and a change detector on them.

    Parameters
    ----------
    epsilon
        The per-record budget of the whole released series (parallel composition over the
        disjoint windows), > 0.
    window
        Messages per window (a public count: every message of the stream, whether it brought
        a loss or not), >= 1.
    detector
        ``"page-hinkley"`` (default: river ``drift.PageHinkley`` for upward changes of the
        noisy rate), ``"adwin"`` (river ``drift.ADWIN``, checked at every window; slower to
        react to the noise of small budgets), or any river drift detector (a fresh clone per
        restart).
    min_windows
        Releases needed after a (re)start before a change may be reported.
    seed
        ``None`` for OS entropy; an int for tests and benchmarks.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> signal = DPDriftSignal(epsilon=0.5, window=400, seed=0)
    >>> losses = np.r_[rng.random(6000) < 0.1, rng.random(4000) < 0.5]   # error 10% -> 50%
    >>> changes = [i for i, loss in enumerate(losses) if signal.update(float(loss))]
    >>> 6000 <= changes[0] < 8000      # seen within a few windows of the change
    True
    >>> signal.releases, round(signal.epsilon, 2)
    (25, 0.5)
    """

    _blank = 0        # (class defaults: checkpoints from before message-count windows)
    last_blank = 0

    def __init__(self, epsilon: float, window: int = 500, *, detector: Any = "page-hinkley",
                 min_windows: int = 4, seed: int | np.random.Generator | None = None):
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) \
                or not 0 < epsilon < math.inf:
            raise ValueError(f"drift epsilon must be a positive number, got {epsilon!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"drift window must be an integer >= 1, got {window!r}")
        if isinstance(detector, str) and detector not in DETECTORS:
            raise ValueError(f"detector must be one of {list(DETECTORS)} or a river drift "
                             f"detector, got {detector!r}")
        self.epsilon = float(epsilon)
        self.window = window
        self.detector_spec = detector
        self.min_windows = int(min_windows)
        self.rng = as_generator(seed)
        self._mechanism = LaplaceMechanism(epsilon=self.epsilon, sensitivity=1.0, rng=self.rng)
        self._sum = 0.0
        self._count = 0
        self._blank = 0            # messages of the open window that brought no loss
        self.last_blank = 0        # ... of the window released last
        self.releases = 0          # windows released so far
        self.changes = 0           # changes reported so far
        self.history: list[float] = []   # the last HISTORY released noisy rates (public)
        self.change_at: list[int] = []   # release index of each reported change (last HISTORY)
        self._since_restart = 0
        self.detector = self._new_detector()

    def _new_detector(self) -> Any:
        spec = self.detector_spec
        if not isinstance(spec, str):
            from river.base import DriftDetector  # a user's detector: a fresh copy per restart

            return spec.clone() if isinstance(spec, DriftDetector) else spec
        from river import drift

        if spec == "adwin":
            return drift.ADWIN(delta=0.002, clock=1, min_window_length=2, grace_period=2)
        return drift.PageHinkley(min_instances=2, delta=0.01, threshold=0.5, mode="up")

    @property
    def pending(self) -> int:
        """Messages in the open window (their losses are not released yet)."""
        return self._count

    def advance(self, n: int = 1) -> int | None:
        """``n`` messages that bring no loss (an unlabeled record, an invalid message or a
        duplicate): they count toward the open window and add nothing to its sum. Returns
        ``None``, or, when the window one of them closes releases a rate in which the
        detector sees a change, how many of the ``n`` were taken (the rest are *not*: the
        caller reacts first, as with :meth:`update_many`).

        Examples
        --------
        >>> s = DPDriftSignal(1.0, window=4, seed=0)
        >>> s.update(1.0), s.advance(2), s.pending
        (False, None, 3)
        >>> _ = s.update(0.0); s.releases, s.pending, s.last_blank
        (1, 0, 2)
        """
        taken = 0
        while taken < n:
            take = min(n - taken, self.window - self._count)
            self._count += take
            self._blank += take
            taken += take
            if self._count >= self.window and self._release():
                return taken
        return None

    def update(self, loss: float) -> bool:
        """Add one record's prequential loss (clipped to [0, 1]); ``True`` when the window it
        closes releases a rate in which the detector sees a change."""
        self._sum += min(max(float(loss), 0.0), 1.0) if loss == loss else 1.0
        self._count += 1
        if self._count < self.window:
            return False
        return self._release()

    def update_many(self, losses: Any) -> int | None:
        """:meth:`update` for each loss in order, stopping at the first detected change.

        Returns the index of the loss whose window release detected a change (the losses
        after it are *not* added: the caller reacts first, as it would one record at a
        time), or ``None``. The sums, releases and noise draws are exactly those of calling
        :meth:`update` one loss at a time.

        Examples
        --------
        >>> a, b = DPDriftSignal(1.0, window=100, seed=3), DPDriftSignal(1.0, window=100, seed=3)
        >>> losses = [0.0] * 900 + [1.0] * 600
        >>> a.update_many(losses) == next(i for i, v in enumerate(losses) if b.update(v))
        True
        >>> a.history == b.history
        True
        """
        values = np.asarray(losses, dtype=np.float64)
        # update's clamp (NaN counts as a loss of 1), elementwise: the same values
        values = np.where(values != values, 1.0, np.minimum(np.maximum(values, 0.0), 1.0))
        i, n = 0, values.size
        while i < n:
            take = min(n - i, self.window - self._count)
            # the same additions, in the same order, as update: add.accumulate is sequential
            run = np.empty(take + 1)
            run[0] = self._sum
            run[1:] = values[i:i + take]
            self._sum = float(np.add.accumulate(run)[-1])
            self._count += take
            i += take
            if self._count >= self.window and self._release():
                return i - 1
        return None

    def _release(self) -> bool:
        noisy = self._mechanism.release(self._sum)
        self._sum, self._count = 0.0, 0
        self.last_blank, self._blank = self._blank, 0
        rate = min(max(noisy / self.window, 0.0), 1.0)   # post-processing
        self.history.append(rate)
        if len(self.history) > HISTORY:   # bounded: a signal may run for months
            del self.history[:len(self.history) - HISTORY]
        self.releases += 1
        self._since_restart += 1
        self.detector.update(rate)
        if self.detector.drift_detected and self._since_restart >= self.min_windows:
            self.changes += 1
            self.change_at.append(self.releases)
            if len(self.change_at) > HISTORY:
                del self.change_at[:len(self.change_at) - HISTORY]
            self.restart()
            return True
        return False

    def restart(self) -> None:
        """Forget the detector's past (a new concept starts); the open window carries on."""
        self.detector = self._new_detector()
        self._since_restart = 0

    def forget(self) -> None:
        """Drop every trace of unpublished losses: the open window's sum and the detector's
        past (a fresh detector). A window-forest member restarting after a crash does this
        when it discards its open window untrained (those records go to another member,
        whose signal reads them): what this signal read of them then influences nothing this
        member publishes later. Losses of earlier records that were pending are simply never
        released (sound); the detector needs ``min_windows`` releases again."""
        self._sum, self._count, self._blank = 0.0, 0, 0
        self.restart()

    def report(self) -> dict:
        """The signal's part of a privacy report."""
        return {"mechanism": "Laplace on disjoint windows of clipped prequential losses",
                "epsilon": self.epsilon, "window": self.window, "releases": self.releases,
                "records_pending": self._count, "changes": self.changes,
                "change_at_release": list(self.change_at),
                "detector": self.detector_spec if isinstance(self.detector_spec, str)
                else type(self.detector_spec).__name__}
