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
from .relevance import AttributeRelevance, owned_attributes
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

    @property
    def partitions(self) -> tuple[list[int] | None, int | None]:
        """``(partitions, total)`` of the member's last assignment (:meth:`set_share`);
        ``(None, None)`` for one process."""
        held = self.__dict__.get("_partitions")
        return (None, None) if held is None else (list(held[0]), held[1])

    def set_share(self, share: float, partitions: list[int] | None = None,
                  total: int | None = None) -> None:
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

        With ``partitions`` (the ids of the ``total`` partitions the member holds), the
        member releases the attribute-relevance histograms of the attributes those
        partitions own (:func:`~dpstream.models.relevance.owned_attributes`), so the group
        releases each attribute about once per window, as one process does; without them,
        every attribute (one process).

        >>> from dpstream.models import MedianForestClassifier
        >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
        ...           "target": {"type": "binary", "values": [False, True]}}
        >>> model = MedianForestClassifier(schema=schema, n_trees=5, window_size=10_000)
        >>> model.set_share(1 / 3)
        >>> model.current_window_size, model.trees_for(3_333)
        (333, 2)
        """
        self._share = check_real("share", share, 0, 1, hi_open=False)
        if (partitions is None) != (total is None):
            raise ValueError("partitions and total come together (a member's assignment)")
        self._partitions = None if partitions is None else (sorted(map(int, partitions)),
                                                            int(total))
        rel = getattr(self, "_relevance", None)
        if rel is not None:
            rel.set_owned(None if partitions is None
                          else owned_attributes(partitions, int(total), rel.n_attributes))

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
        (``epsilon`` per record, charged with the window): of every attribute in one
        process, of the attributes its partitions own in a group member (:meth:`set_share`).

        Rows that a checkpoint from before attribute ownership still holds (such members
        held their windows' rows for ``round(1 / share)`` windows) are released with this
        window's, in the same release: every record is still in exactly one release, and a
        joint release uses the smallest epsilon its rows were charged."""
        if self.__dict__.get("_prereleased"):   # a held window: released when it closed
            return
        if self.__dict__.pop("relevance_spent", False):
            # a group member marked the window: some of its records are in a release a
            # crashed member published (stream.members); none of them is released again
            return
        pending = self.__dict__.pop("_relevance_pending", None)
        if pending:
            X = np.concatenate([*(p[0] for p in pending), X])
            y = np.concatenate([*(p[1] for p in pending), y])
            epsilon = min(epsilon, *(p[2] for p in pending))
        self._relevance.release(X, y, epsilon=epsilon, rng=self._rng)

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
        names = [*enc._numeric, *enc._categorical]
        report = {"rule": "relevance", "share": float(self.relevance_share),
                  "epsilon": self._relevance_split()[1], "releases": rel.releases,
                  "names": names, "weights": [round(float(w), 4) for w in rel.weights()],
                  "guarantee": "each labeled record enters one attribute's (bin, class) "
                               "histogram once, Laplace noise of scale 1/epsilon per cell "
                               "(sensitivity 1); the probabilities are post-processing"}
        if rel.owned is not None:   # a group member: the attributes its partitions own
            report["owned"] = [names[j] for j in rel.owned]
        return report
