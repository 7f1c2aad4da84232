"""k window-forest members against one process, in process and seeded (no broker).

:func:`prequential` deals a stream to partitions and the partitions to ``k`` members as a Kafka
consumer group does, and returns, per record, whether its member predicted it right before
learning it (median forests predicting with every member's windows). Used by
``benchmarks/members_sim.py`` and the accuracy test of member shares.

How the members are dealt and share windows:
docs/bench_internals.md#window-forest-members-in-one-process.
"""

from __future__ import annotations

import inspect
from collections import deque
from typing import Any

import numpy as np

from ...models import MedianForestClassifier
from ...models.windows.window_exchange import WindowEnsemble

__all__ = ["SERVICE_POLICY", "prequential"]

#: the median forest's own window policy and feature grid (its defaults: what ``dpstream
#: serve`` and ``examples/scale_out.py`` run), to pass over the policy :func:`prequential`
#: pins (its figures' since issue 23)
SERVICE_POLICY: dict[str, Any] = {
    name: inspect.signature(MedianForestClassifier).parameters[name].default
    for name in ("window_size", "max_windows", "window_decay", "grid_share", "grid_refresh")}


def prequential(X: list, y: list, schema: Any, *, k: int, seed: int, whole: bool = False,
                partitions: int = 6, delay: int = 0, relevance_delay: int | None = None,
                hold: bool = False, lags: tuple[int, ...] | None = None,
                assignment: str = "range", lag_after: int = 0, **params: Any) -> np.ndarray:
    """Per record, whether its member predicted it right before learning it (median forests,
    epsilon 1, ``n_trees=5`` with windows of 10,000, five kept, unless ``params`` say
    otherwise; member ``m``'s seed is
    ``100 * seed + m``). With ``delay``, the other members adopt a window ``delay`` records
    of the stream after it closed (the model topic's delay, and members that progress
    unevenly). With ``relevance_delay`` as well, a window's trees join the others' unions
    after ``delay`` records and its released relevance histograms their evidence after
    ``relevance_delay``: which of the two matters when it comes late. With ``hold``, each
    member holds its closed windows (:mod:`~dpstream.models.windows.window_forest`, held windows):
    their releases go out at the close, their trees grow once
    :meth:`~dpstream.models.windows.window_exchange.WindowEnsemble.hold_ready` (the record number is
    the stream time), at the latest at the member's next close. With ``lags``, member
    ``m`` reads stream record ``i`` at step ``i + lags[m]`` (members apart in the stream, as
    when they drain a backlog at different speeds; delays count in steps), from stream
    record ``lag_after`` on (before it the members are in step: a group that waits for
    its members through the warm-up). ``assignment``:
    how the group deals the partitions, ``"range"`` (contiguous blocks, as kafka-python's
    default assignor, and so ``dpstream serve``, deals them) or ``"roundrobin"`` (partition
    ``p`` to member ``p mod k``).

    Examples
    --------
    >>> from dpstream.stream import load_adult
    >>> X, y, schema = load_adult("train")
    >>> hits = prequential(X[:3000], y[:3000], schema, k=2, seed=0, window_size=500)
    >>> hits.shape, bool(0.6 < hits.mean() < 0.95)
    ((3000,), True)
    """
    # the window policy the members' figures were measured with (docs/service.md), kept
    # when the library's defaults moved to small decaying windows (docs/median_forest.md)
    # and gained the feature grid (docs/drift.md); SERVICE_POLICY restores the defaults
    params = {"epsilon": 1.0, "n_trees": 5, "window_size": 10_000, "max_windows": 5,
              "window_decay": 1.0, "grid_share": 0.0, **params}
    models = [MedianForestClassifier(schema=schema, seed=100 * seed + m, **params)
              for m in range(k)]
    if assignment == "range":
        owner = [m for m, block in enumerate(np.array_split(np.arange(partitions), k))
                 for _ in block]
    elif assignment == "roundrobin":
        owner = [p % k for p in range(partitions)]
    else:
        raise ValueError(f"assignment is 'range' or 'roundrobin', got {assignment!r}")
    if not whole:
        for m, model in enumerate(models):
            mine = [p for p in range(partitions) if owner[p] == m]
            model.set_share(len(mine) / partitions, mine, partitions)
    for model in models:
        model.hold = hold and k > 1
    ens = [WindowEnsemble(model, f"m{m}") for m, model in enumerate(models)]
    hits = np.zeros(len(y), dtype=bool)
    arriving: deque = deque()      # (stream position, member, key, state, what arrives)
    split = relevance_delay is not None

    def send(i: int, m: int) -> None:
        for key, state in ens[m].local_updates().items():
            if "/relevance-" in key:
                arriving.append((i + 1 + (relevance_delay if split else delay), m, key, state,
                                 "both"))
            elif split:
                arriving.append((i + 1 + delay, m, key, state, "trees"))
                arriving.append((i + 1 + relevance_delay, m, key, state, "relevance"))
            else:
                arriving.append((i + 1 + delay, m, key, state, "both"))

    lag = tuple(lags) if lags is not None else (0,) * k
    if len(lag) != k:
        raise ValueError(f"lags: one per member ({k}), got {lag}")
    def shift(i: int) -> int:
        return lag[owner[i % partitions]] if i >= lag_after else 0

    order = sorted(range(len(y)), key=lambda i: (i + shift(i), i))
    for i in order:
        x, label = X[i], y[i]
        m = owner[i % partitions]
        step = i + shift(i)
        adopted = False
        while arriving and arriving[0][0] <= step:
            _, src, key, state, part = arriving.popleft()
            adopted = True
            for other in ens:
                if other is ens[src]:
                    continue
                if part == "both":
                    other.adopt(key, state)
                elif part == "trees":   # the window votes; its relevance comes separately
                    other._apply(key, state, relevance=False)
                else:
                    other._note_reach(state)
                    other._share_relevance(key, state)
        if adopted and hold:
            for o, other in enumerate(ens):
                if models[o].held is not None and other.hold_ready():
                    models[o].grow_held()
                    send(step - 1, o)
        hits[i] = ens[m].predict_one(x) == label
        rounds = models[m].training_rounds
        models[m].learn_one(x, label)
        ens[m].observe(i)
        if models[m].held is not None and ens[m].hold_ready():   # the others are ahead
            models[m].grow_held()
        if models[m].training_rounds != rounds:
            send(step, m)
        if split or hold or lags:   # sends out of turn: keep the queue in order
            arriving = deque(sorted(arriving, key=lambda e: e[0]))
    return hits
