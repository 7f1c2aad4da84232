"""Statistical privacy testing: a lower confidence bound on the privacy loss of a black box.

For neighbouring inputs D, D' we sample the mechanism ``n`` times on each and, for every event E
in a fixed family, bound ``(P[M(D) in E] - delta) / P[M(D') in E]`` from below with exact
Clopper–Pearson intervals (Bonferroni over events and both directions). If the lower bound exceeds
``e^epsilon`` the mechanism is *not* (epsilon, delta)-DP, with confidence ``1 - alpha``. A correct
mechanism passes except with probability ``alpha``; each test also runs a negative control — a
broken mechanism that must be caught — to show the test has power (Ding et al. 2018, "Detecting
violations of differential privacy", in spirit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

Event = Callable[[np.ndarray], np.ndarray]


def _cp_lower(k: int, n: int, a: float) -> float:
    return 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))


def _cp_upper(k: int, n: int, a: float) -> float:
    return 1.0 if k == n else float(stats.beta.ppf(1 - a, k + 1, n - k))


def privacy_loss_lower_bound(a: np.ndarray, b: np.ndarray, events: Sequence[Event], *,
                             delta: float = 0.0, alpha: float = 1e-6) -> float:
    """Largest lower confidence bound on ``log((P_a(E) - delta) / P_b(E))`` over events and both
    directions. Returns ``-inf`` when no event gives evidence."""
    per = alpha / (2 * 2 * len(events))  # two one-sided bounds, two directions, each event
    best = -math.inf
    for ev in events:
        ka, kb = int(np.count_nonzero(ev(a))), int(np.count_nonzero(ev(b)))
        for (k1, n1), (k2, n2) in (((ka, a.shape[0]), (kb, b.shape[0])),
                                   ((kb, b.shape[0]), (ka, a.shape[0]))):
            num = _cp_lower(k1, n1, per) - delta
            den = _cp_upper(k2, n2, per)
            if num > 0 and den > 0:
                best = max(best, math.log(num / den))
    return best


def outcome_events(k: int) -> list[Event]:
    """Each single outcome of a discrete mechanism with outcomes ``0..k-1``."""
    return [lambda x, i=i: x == i for i in range(k)]


def halfline_events(thresholds: Sequence[float]) -> list[Event]:
    """``{x <= t}`` and ``{x > t}`` for each threshold."""
    out: list[Event] = []
    for t in thresholds:
        out.append(lambda x, t=t: x <= t)
        out.append(lambda x, t=t: x > t)
    return out


def bin_events(edges: Sequence[float]) -> list[Event]:
    """``{lo <= x < hi}`` for consecutive edges."""
    pairs = zip(edges[:-1], edges[1:], strict=True)
    return [lambda x, lo=lo, hi=hi: (x >= lo) & (x < hi) for lo, hi in pairs]
