"""Hold a closed window: release its attribute relevance at the close, grow its trees later.

A consumer-group member (:mod:`dpstream.stream.members`) releases the relevance histograms of
the attributes its partitions own, and the other members release the others'
(:func:`~dpstream.models.relevance.owned_attributes`). Trees grown at the very moment a window
closes draw split attributes from the group's evidence *as far as it has arrived* — and the
other members' releases for the same stretch of the stream arrive later, the later the further
the members are apart. Measured in process (``benchmarks/members_sim.py``, river's Agrawal,
three members): relevance evidence 1,500 records of the stream late costs 3 pp of accuracy,
trees that late 0.7 pp. So a member *holds* each closed window (``model.hold = True``):

1. at the close the window's relevance release is drawn and charged, with the window's
   ledger partitions, and the member publishes it at once;
2. the trees grow (:meth:`HeldWindow.grow_held`) when the member decides that the other
   members' releases for the same stretch have arrived, and at the latest when the next window
   closes, when the drift signal fires, or when the member hands its partitions off.

At most one window is held. Its index is the next one (``windows_closed``); it is not in the
ensemble until it grows. Privacy is unchanged: the release and the trees read the same records
with the same epsilons as a window trained at its close; only the order of the mechanisms
differs, and the attribute probabilities the trees draw with are post-processing of the
released evidence, now including more of it.

Examples
--------
>>> from dpstream.models import MedianForestClassifier
>>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
...           "target": {"type": "binary", "values": [False, True]}}
>>> model = MedianForestClassifier(schema=schema, n_trees=2, window_size=100, warmup=None,
...                                drift=False, seed=0)
>>> model.hold = True
>>> for i in range(100):
...     model.learn_one({"a": (i % 10) / 10}, i % 10 >= 5)
>>> model.held["index"], model.windows_closed, model._relevance.releases
(0, 0, 1)
>>> model.grow_held(), model.windows_closed, model.held
(True, 1, None)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .window_stream import UNLABELED

__all__ = ["HeldWindow"]


class HeldWindow:
    """The held window of a :class:`~dpstream.models.window_forest.WindowForestBase` (module
    docstring). A mixin: it reads the base's buffers, relevance and ``_train_closed``."""

    #: hold each closed window (a group member sets this; checkpointed with the model)
    hold: bool = False

    def _holds(self, y: np.ndarray) -> bool:
        """Whether a window closing with labels ``y`` is held rather than trained now."""
        return (bool(self.hold) and getattr(self, "_relevance", None) is not None
                and bool((y != UNLABELED).any()))

    @property
    def held(self) -> dict | None:
        """The held window's public metadata (``index``, ``records``, ``labeled``,
        ``generation``, ``relevance``: its released histograms or ``None``), or ``None``."""
        h = self.__dict__.get("_held")
        if h is None:
            return None
        return {"index": h["index"], "records": int(h["y"].size),
                "labeled": int((h["y"] != UNLABELED).sum()), "generation": h["generation"],
                "relevance": h["relevance"]}

    @property
    def held_records(self) -> int:
        """Records in the held window (0: none held)."""
        h = self.__dict__.get("_held")
        return 0 if h is None else int(h["y"].size)

    def _hold_window(self, X: np.ndarray, y: np.ndarray, public: np.ndarray,
                     fed: bool) -> None:
        """Charge the window, release its relevance (unless a member marked the window's
        records as released already: ``relevance_spent``) and hold it."""
        self._window_trees = self.trees_for(int((y != UNLABELED).sum()))
        self._charge_closed(fed)
        rel = self._relevance
        releases = rel.releases
        lab = y != UNLABELED
        self._release_relevance(X[lab], y[lab], self._relevance_split()[1])
        released = rel.last_release if rel.releases != releases else None
        self._held = {"X": X, "y": y, "public": public, "fed": bool(fed),
                      "epsilon": float(self.epsilon_trees), "relevance": released,
                      "index": int(self.windows_closed), "generation": int(self.generation)}
        self.generation_windows += 1   # the warm-up's next size
        self.windows_held = self.__dict__.get("windows_held", 0) + 1
        self._serving = None

    def grow_held(self) -> bool:
        """Grow the held window's trees now, with the evidence that has arrived; returns
        whether a window was held. Its relevance is not released again."""
        h = self.__dict__.pop("_held", None)
        if h is None:
            return False
        self._training_epsilon = h["epsilon"]
        try:
            self._train_closed(h["X"], h["y"], h["public"], h["fed"], held=h)
        finally:
            self._training_epsilon = None
        return True

    def drop_held(self, published: bool) -> int:
        """Forget the held window untrained (a member restarting after a crash: another
        member may train its records); returns its records. Unless its release was
        ``published``, the release leaves this member's evidence too (the records' next
        owner releases their relevance; a release nobody saw must not count twice). The
        charge stays in the ledger (an upper bound). Counters go back as for the open window
        (:func:`~dpstream.models.window_exchange.discard_open_window`)."""
        h = self.__dict__.pop("_held", None)
        if h is None:
            return 0
        if not published and h["relevance"] is not None:
            self._relevance.merge(h["relevance"], sign=-1.0)
            self._relevance.releases -= 1
        self._unsee(h["y"], h["public"], h["fed"])
        self.generation_windows = max(0, self.generation_windows - 1)
        return int(h["y"].size)

    def _unsee(self, y: Any, public: Any, fed: bool) -> None:
        """Take records dropped untrained (labels ``y``, flags ``public``) back out of the
        counters; if their losses ``fed`` the drift signal, it forgets its past (their next
        owner's drift read is their only one) and ``records_discarded_fed`` counts them."""
        y = np.asarray(y, dtype=np.int64)
        self.records_seen -= int(y.size)
        self.unlabeled_seen -= int((y == UNLABELED).sum())
        self.public_seen -= int(np.asarray(public, dtype=bool).sum())
        if fed:
            self.records_discarded_fed = (self.__dict__.get("records_discarded_fed", 0)
                                          + int((y != UNLABELED).sum()))
            if self._drift is not None:
                self._drift.forget()
