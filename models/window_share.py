"""What a window forest's base class draws on for two jobs: a member's share of the stream
(:class:`MemberShare`) and the attribute-relevance evidence its trees draw split attributes
from (:class:`RelevanceEvidence`). Mixins of
:class:`~dpstream.models.window_forest.WindowForestBase`; they read its attributes
(``n_trees``, ``_rng``, ``_encoder``, ``epsilon_trees``, ...).

Examples
--------
>>> from dpstream.models import MedianForestClassifier
>>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
...           "target": {"type": "binary", "values": [False, True]}}
>>> model = MedianForestClassifier(schema=schema, n_trees=4, window_size=900)
>>> model.set_share(0.5)
>>> model.share, model._tree_cap()
(0.5, 2)
"""

from __future__ import annotations

import math

import numpy as np

from ._params import check_real
from .relevance import AttributeRelevance
from .window_trees import split_exact

__all__ = ["ATTRIBUTE_RULES", "MemberShare", "RelevanceEvidence"]

#: how a forest's nodes draw split attributes: from a DP relevance release, or uniformly
ATTRIBUTE_RULES = ("relevance", "uniform")


class MemberShare:
    """A member's share of the stream: window sizes and tree counts scale with it."""

    #: a member's share scales its windows and their trees (:meth:`set_share`): the forests
    #: that deal each window's records into trees of its own. RDT fills the same fixed random
    #: trees in every window, and smaller windows of it measured no better (benchmark notes)
    share_scales = True

    @property
    def share(self) -> float:
        """This process's share of the stream (1: all of it, or a model whose windows it
        does not scale); see :meth:`set_share`."""
        return self.__dict__.get("_share", 1.0) if self.share_scales else 1.0

    def set_share(self, share: float) -> None:
        """Train as one of several members that each read ``share`` of the stream.

        A consumer-group member that owns ``p`` of a topic's ``P`` partitions reads about
        ``p / P`` of the records (a public fraction: the group's assignment, not the
        records, decides it). With ``share = p / P`` its windows close at ``share`` times
        the window size (warm-up included) and train ``share`` times the trees (rounded,
        at least one), so every tree still holds about ``window_size / n_trees`` records
        and the members' windows together close when one process's window would: the
        union of every member's windows (:class:`~dpstream.models.window_exchange.
        WindowEnsemble`, which counts each window as its share of a whole one) is then the
        single-process ensemble, not ``1 / share`` times as many records waiting in open
        windows. Privacy is unchanged: window sizes and tree counts are functions of public
        counts, and every record is still in one window and one tree's part. Takes effect
        for the open window (a member sets it on an assignment, when its open window was
        just closed); ``1`` restores the single-process policy exactly. A model whose
        windows it does not scale (``share_scales`` false: RDT) keeps whole windows, and
        its windows count as whole ones in the union.

        >>> from dpstream.models import MedianForestClassifier
        >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
        ...           "target": {"type": "binary", "values": [False, True]}}
        >>> model = MedianForestClassifier(schema=schema, n_trees=5, window_size=10_000)
        >>> model.set_share(1 / 3)
        >>> model.current_window_size, model.trees_for(3_333)
        (333, 2)
        """
        self._share = check_real("share", share, 0, 1, hi_open=False)

    def _scaled(self, n: int) -> int:
        """``n`` times the share, rounded half up, at least 1."""
        return max(1, math.floor(n * self.share + 0.5))

    def _tree_cap(self) -> int:
        """The most trees a window trains: ``n_trees`` times the share."""
        return self._scaled(self.n_trees)


class RelevanceEvidence:
    """The DP attribute-relevance evidence (setup, releases, budget split, report)."""

    def _setup_relevance(self) -> None:
        """Check ``attributes`` / ``relevance_share`` (set by a subclass that offers them)
        and create the accumulated relevance evidence
        (:class:`~dpstream.models.relevance.AttributeRelevance`)."""
        if self.attributes not in ATTRIBUTE_RULES:
            raise ValueError(f"attributes must be one of {ATTRIBUTE_RULES}, "
                             f"got {self.attributes!r}")
        check_real("relevance_share", self.relevance_share, 0, 1)
        floor = getattr(self, "relevance_floor", 0.3)
        check_real("relevance_floor", floor, 0, 1, lo_open=False)
        enc = self._encoder
        self._relevance = AttributeRelevance(enc.numeric_columns(), enc.categorical_columns(),
                                             len(enc.classes), floor=floor) \
            if self.attributes == "relevance" else None

    def _release_relevance(self, X: np.ndarray, y: np.ndarray, epsilon: float) -> None:
        """Release the relevance histograms of a closed window's labeled rows ``X``, ``y``
        (``epsilon`` per record, charged with the window), or with a :attr:`share` below 1
        hold them until ``round(1 / share)`` windows are pending and release those together.

        The noise of each release adds up in the accumulated evidence, so a member that
        released every one of its ``1 / share`` times smaller windows would bring ``1 /
        share`` times the single process's noise into the group's evidence for the same
        records (measured on Agrawal: split attributes drawn worse, 3 pp less accurate).
        Held this way, each release covers about a whole window of records, as in one
        process. Every record is still in exactly one release (parallel composition); a
        joint release uses the smallest epsilon its windows were charged; pending rows live
        in the model (and its checkpoint) until released, and a drift reset drops them
        unreleased (spent, never used)."""
        every = 1 if self.share >= 1.0 else max(1, math.floor(1.0 / self.share + 0.5))
        pending = self.__dict__.get("_relevance_pending")
        if every <= 1 and not pending:
            self._relevance.release(X, y, epsilon=epsilon, rng=self._rng)
            return
        pending = self.__dict__.setdefault("_relevance_pending", [])
        pending.append([np.array(X, dtype=np.float64), np.array(y, dtype=np.int64),
                        float(epsilon)])
        if len(pending) >= every:
            Xs = np.concatenate([p[0] for p in pending])
            ys = np.concatenate([p[1] for p in pending])
            eps = min(p[2] for p in pending)
            pending.clear()
            self._relevance.release(Xs, ys, epsilon=eps, rng=self._rng)

    def _relevance_split(self) -> tuple[float, float]:
        """``(rest, relevance)``: ``epsilon_trees`` less the attribute-relevance release's
        share (0 without relevance), split exactly in the ledger's decimals."""
        if getattr(self, "_relevance", None) is None:
            return self.epsilon_trees, 0.0
        return split_exact(self.epsilon_trees, self.relevance_share)

    def _attributes_report(self) -> dict:
        """How split attributes are drawn; with relevance, the current probabilities
        (post-processing of the released histograms)."""
        rel = getattr(self, "_relevance", None)
        if rel is None:
            return {"rule": "uniform", "guarantee": "the paper's rule: no data read"}
        enc = self._encoder
        return {"rule": "relevance", "share": float(self.relevance_share),
                "epsilon": self._relevance_split()[1], "releases": rel.releases,
                "names": [*enc._numeric, *enc._categorical],
                "weights": [round(float(w), 4) for w in rel.weights()],
                "guarantee": "each labeled record enters one attribute's (bin, class) "
                             "histogram once, Laplace noise of scale 1/epsilon per cell "
                             "(sensitivity 1); the probabilities are post-processing"}
