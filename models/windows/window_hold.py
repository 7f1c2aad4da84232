"""Held windows: a group member's closed window waits for the other members' evidence.

A window-forest member (:mod:`~dpstream.stream.members`) holds each closed window: the window
is charged and its attribute relevance released at the close, and its trees grow later
(:meth:`HeldWindowMixin.grow_held`), once the other members' releases for the same stretch of
the stream have arrived. :class:`HeldWindowMixin` is that part of
:class:`~dpstream.models.windows.window_forest.WindowForestBase`; docs/distributed.md
describes the protocol.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .window_stream import BLANK, UNLABELED

__all__ = ["HeldWindowMixin"]


class HeldWindowMixin:
    """The held window of a window forest (module docstring); mixed into
    :class:`~dpstream.models.windows.window_forest.WindowForestBase`."""

    #: hold each closed window (a group member sets this; checkpointed with the model)
    hold: bool = False

    def _holds(self, y: np.ndarray) -> bool:
        """Whether a window closing with labels ``y`` is held rather than trained now."""
        return bool(self.hold) and getattr(self, "_relevance", None) is not None

    @property
    def held(self) -> dict | None:
        """The held window's public metadata (``index``, ``records``, ``labeled``,
        ``generation``, ``relevance``: its released histograms or ``None``), or ``None``."""
        h = self.__dict__.get("_held")
        if h is None:
            return None
        m = int(h.get("messages", h["y"].size))   # its public size: blanks included
        return {"index": h["index"], "records": m, "labeled": m, "generation": h["generation"],
                "relevance": h["relevance"]}

    @property
    def held_records(self) -> int:
        """Messages in the held window (0: none held): its records and blanks."""
        h = self.__dict__.get("_held")
        return 0 if h is None else int(h.get("messages", h["y"].size))

    def _hold_window(self, X: np.ndarray, y: np.ndarray, public: np.ndarray,
                     fed: bool, grid_rows: np.ndarray | None = None) -> None:
        """Charge the window, release its relevance (unless a member marked the window's
        records as released already: ``relevance_spent``) and hold it. With ``grid_rows``
        (its encoded rows, when the window is due to release the feature grid: charged now
        with the rest) the grid is released from them when its trees grow."""
        self._window_trees = self.trees_for(self._window_messages)
        self._charge_closed(fed)
        rel = self._relevance
        releases = rel.releases
        lab = y != UNLABELED
        self._release_relevance(X[lab], y[lab], self._relevance_split()[1])
        released = rel.last_release if rel.releases != releases else None
        self._held = {"X": X if grid_rows is None else grid_rows, "y": y, "public": public,
                      "fed": bool(fed), "messages": self._window_messages,
                      "epsilon": float(self.epsilon_trees), "relevance": released,
                      "index": int(self.windows_closed), "generation": int(self.generation),
                      **({"grid": float(self._grid_charge)} if grid_rows is not None else {})}
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
            X = h["X"]
            if h.get("grid"):   # its records release the feature grid first (raw rows held)
                self._release_grid(X[h["y"] != UNLABELED], h["grid"], h["index"],
                                   int(h.get("messages", h["y"].size)))
                X = self._gridded(X)
            self._train_closed(X, h["y"], h["public"], h["fed"], held=h)
        finally:
            self._training_epsilon = None
        return True

    def drop_held(self, published: bool) -> int:
        """Forget the held window untrained (a member restarting after a crash: another
        member may train its records); returns its records. Unless its release was
        ``published``, the release leaves this member's evidence too (the records' next
        owner releases their relevance; a release nobody saw must not count twice). The
        charge stays in the ledger's maximum (an upper bound), under closed names: the next
        window takes the dropped one's index (window numbers stay contiguous) and charges
        ``window-N/...`` afresh. That is sound because the dropped window grew no trees and
        its records are trained again only as a window that releases no relevance for them
        (``relevance_spent``), so no record's spend passes one window's. Counters go back as
        for the open window
        (:func:`~dpstream.models.windows.window_exchange.discard_open_window`)."""
        h = self.__dict__.pop("_held", None)
        if h is None:
            return 0
        self._ledger.close_prefix(f"window-{h['index']}/")
        if not published and h["relevance"] is not None:
            self._relevance.merge(h["relevance"], sign=-1.0)
            self._relevance.releases -= 1
        self._unsee(h["y"], h["public"], h["fed"])
        self.generation_windows = max(0, self.generation_windows - 1)
        return int(h["y"].size)   # its records (its blank messages were dropped at the close)

    def _unsee(self, y: Any, public: Any, fed: bool) -> None:
        """Take records dropped untrained (labels ``y``, flags ``public``) back out of the
        counters; if their losses ``fed`` the drift signal, it forgets its past (their next
        owner's drift read is their only one) and ``records_discarded_fed`` counts them."""
        y = np.asarray(y, dtype=np.int64)
        public = np.asarray(public, dtype=bool)[y != BLANK]
        y = y[y != BLANK]
        self.records_seen -= int(y.size)
        self.unlabeled_seen -= int((y == UNLABELED).sum())
        self.public_seen -= int(np.asarray(public, dtype=bool).sum())
        if fed:
            self.records_discarded_fed = (self.__dict__.get("records_discarded_fed", 0)
                                          + int((y != UNLABELED).sum()))
            if self._drift is not None:
                self._drift.forget()
