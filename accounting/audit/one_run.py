"""Auditing DP in one training run (Steinke, Nasr and Jagielski, NeurIPS 2023): from an
attack's guesses about ``m`` canaries, each included with probability 1/2, a lower bound on
epsilon with a stated confidence (:func:`p_value`, :func:`epsilon_lower_bound`). Pure
arithmetic on counts and scores; how ``dpstream audit`` uses it: docs/privacy.md#auditing
(design: docs/accounting.md#auditing-in-one-run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["p_value", "epsilon_lower_bound", "guess", "GuessRule", "DEFAULT_RULES",
           "AuditBound", "audit_scores"]


def _log_pmf(r: int, q: float) -> np.ndarray:
    """``log P[Binomial(r, q) = k]`` for ``k = 0..r`` (log factorials by cumulative sums, so
    no special function is needed)."""
    logfact = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, r + 1, dtype=np.float64)))))
    k = np.arange(r + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        lq, l1q = math.log(q) if q > 0 else -np.inf, math.log1p(-q) if q < 1 else -np.inf
        out = logfact[r] - logfact - logfact[::-1]
        # 0 * log(0) is 0: a term with no factor of q (or of 1 - q) keeps its coefficient
        out = out + np.where(k > 0, k * lq, 0.0) + np.where(k < r, (r - k) * l1q, 0.0)
    return out


def _sum_exp(logs: np.ndarray) -> float:
    if logs.size == 0:
        return 0.0
    top = float(np.max(logs))
    if top == -np.inf:
        return 0.0
    return float(math.exp(top) * np.sum(np.exp(logs - top)))


def p_value(*, m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """The probability, under an (epsilon, delta)-DP mechanism, that an attack making ``r``
    guesses about ``m`` canaries gets ``v`` or more right (Steinke et al. 2023, Theorem 3.1
    and its delta form): ``P[Binomial(r, q) >= v] + 2 m delta alpha`` with
    ``q = e^epsilon / (1 + e^epsilon)`` and
    ``alpha = max_{1 <= i <= v} P[v - i <= Binomial(r, q) < v] / i``. Capped at 1.

    >>> round(p_value(m=10, r=10, v=10, epsilon=0.0), 6) == round(0.5 ** 10, 6)
    True
    """
    _check_counts(m, r, v)
    if epsilon < 0 or not math.isfinite(epsilon):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-epsilon))
    logs = _log_pmf(r, q)
    beta = _sum_exp(logs[v:])
    alpha = 0.0
    if delta > 0:
        below = np.cumsum(np.exp(logs[:v][::-1]))       # P[v - i <= B < v], i = 1..v
        alpha = float(np.max(below / np.arange(1, v + 1)))
    return min(1.0, beta + 2.0 * m * delta * alpha)


def epsilon_lower_bound(*, m: int, r: int, v: int, confidence: float = 0.95,
                        delta: float = 0.0, tol: float = 1e-6) -> float:
    """The largest epsilon that ``v`` right out of ``r`` guesses on ``m`` canaries refutes at
    ``confidence``: ``sup {epsilon : p_value(epsilon) < 1 - confidence}`` (the p-value falls
    as epsilon rises, so bisection finds it), or 0.0 when even epsilon = 0 is not refuted.

    A **lower** bound: with probability at least ``confidence`` over the canaries' coins and
    the mechanism's noise, a mechanism that is (epsilon, delta)-DP gives a bound below its
    epsilon. Passing proves nothing about privacy; a bound above the promise proves a bug.

    >>> epsilon_lower_bound(m=1000, r=1000, v=600) > epsilon_lower_bound(m=1000, r=1000, v=560)
    True

    Examples
    --------
    Perfect guesses on 100 of 1,000 canaries refute epsilon = 1 at 95% confidence:

    >>> p_value(m=1000, r=100, v=100, epsilon=1.0) < 1e-13
    True
    >>> round(epsilon_lower_bound(m=1000, r=100, v=100, confidence=0.95), 2)
    3.49

    Half right is what a coin does: no evidence at all.

    >>> epsilon_lower_bound(m=1000, r=200, v=100)
    0.0
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    _check_counts(m, r, v)
    level = 1.0 - confidence
    if p_value(m=m, r=r, v=v, epsilon=0.0, delta=delta) >= level:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m=m, r=r, v=v, epsilon=hi, delta=delta) < level:
        lo, hi = hi, 2.0 * hi
        if hi > 1e4:     # only possible with delta = 0 and v = r: the bound is astronomical
            return float(lo)
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if p_value(m=m, r=r, v=v, epsilon=mid, delta=delta) < level:
            lo = mid
        else:
            hi = mid
    return float(lo)


def _check_counts(m: int, r: int, v: int) -> None:
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got m={m}, r={r}, v={v}")


class GuessRule(NamedTuple):
    """Guess "in" for the ``share_in`` of the ``m`` canaries with the highest scores and
    "out" for the ``share_out`` with the lowest; abstain on the rest. Fixed before the
    scores are seen (choosing it after looking at the outcome would void the bound)."""
    share_in: float
    share_out: float

    def counts(self, m: int) -> tuple[int, int]:
        k_in = min(m, int(round(self.share_in * m)))
        return k_in, min(m - k_in, int(round(self.share_out * m)))


#: the fixed grid ``dpstream audit`` tries (Bonferroni-corrected): "in" guesses on the top
#: 1%, 5%, 10%, 25% and 50%, alone and with as many "out" guesses on the bottom
DEFAULT_RULES: tuple[GuessRule, ...] = tuple(
    GuessRule(s, o) for s in (0.01, 0.05, 0.1, 0.25, 0.5) for o in (0.0, s))


def guess(scores: Sequence[float], k_in: int, k_out: int) -> np.ndarray:
    """+1 ("in") for the ``k_in`` highest scores, -1 ("out") for the ``k_out`` lowest, 0
    (abstain) otherwise. Ties are broken by position (a rule that ignores the secrets).

    >>> guess([0.9, 0.1, 0.5, 0.7], 1, 1).tolist()
    [1, -1, 0, 0]
    """
    s = np.asarray(scores, dtype=np.float64)
    if np.isnan(s).any():
        raise ValueError("a score is NaN")
    m = s.size
    if k_in < 0 or k_out < 0 or k_in + k_out > m:
        raise ValueError(f"need k_in, k_out >= 0 and k_in + k_out <= {m}, got {k_in}, {k_out}")
    order = np.argsort(-s, kind="stable")
    out = np.zeros(m, dtype=np.int8)
    out[order[:k_in]] = 1
    if k_out:
        out[order[m - k_out:]] = -1
    return out


class AuditBound(NamedTuple):
    """The result of :func:`audit_scores`: the best rule's counts and bound."""
    epsilon_lower: float      #: the largest bound over the rules, each at the corrected level
    confidence: float         #: the overall confidence (each rule at 1 - (1 - c) / rules)
    m: int
    r: int                    #: guesses of the rule that gave the bound
    v: int                    #: right guesses of that rule
    rule: GuessRule
    rules: list[dict]         #: every rule's ``share_in``, ``share_out``, ``r``, ``v``, bound


def audit_scores(scores: Sequence[float], secrets: Sequence[int | bool], *,
                 confidence: float = 0.95, delta: float = 0.0,
                 rules: Sequence[GuessRule] = DEFAULT_RULES) -> AuditBound:
    """Turn per-canary scores into an epsilon lower bound: each rule of the fixed grid
    ``rules`` makes its guesses, and each is tested at confidence ``1 - (1 - c) / len(rules)``
    (Bonferroni), so the largest bound holds at ``confidence`` overall. ``secrets``: 1 (or
    True) for a canary that was included, 0 / -1 / False for one that was not.

    >>> rng = np.random.default_rng(0)
    >>> secrets = rng.integers(0, 2, 1000)
    >>> audit_scores(secrets + 0.0, secrets).epsilon_lower > 4     # a leak: scores = secrets
    True
    >>> audit_scores(rng.random(1000), secrets).epsilon_lower       # scores ignore the secrets
    0.0
    """
    s = np.asarray(scores, dtype=np.float64)
    truth = np.where(np.asarray(secrets).astype(np.int64) > 0, 1, -1)
    if s.shape != truth.shape or s.ndim != 1:
        raise ValueError(f"scores and secrets must be two vectors of one length, got "
                         f"{s.shape} and {truth.shape}")
    if not rules:
        raise ValueError("give at least one guess rule")
    m = s.size
    each = 1.0 - (1.0 - confidence) / len(rules)
    table = []
    for rule in rules:
        k_in, k_out = rule.counts(m)
        g = guess(s, k_in, k_out)
        r = int(np.count_nonzero(g))
        v = int(np.count_nonzero(g == truth))
        bound = epsilon_lower_bound(m=m, r=r, v=v, confidence=each, delta=delta) if r else 0.0
        table.append({"share_in": rule.share_in, "share_out": rule.share_out, "r": r, "v": v,
                      "epsilon_lower": bound})
    best = max(range(len(table)), key=lambda i: (table[i]["epsilon_lower"], -i))
    top = table[best]
    return AuditBound(top["epsilon_lower"], confidence, m, top["r"], top["v"], rules[best],
                      table)
