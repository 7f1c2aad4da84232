"""Multi-class S-GBDT: softmax gradient boosting with K-vector leaves at the binary model's
per-record privacy cost.

:class:`SGBDTMultiEngine` is the engine :class:`~dpstream.models.SGBDTClassifier` runs when
its schema declares three or more classes (two keep the binary engine, bit for bit). Scores,
gradients, leaf sums and leaf values are K-vectors; a gradient is clipped to L2 norm ``g*``,
and since one record moves one leaf's count by 1 and its sum by its ``g``, its round cost is
the binary round's at ``|g| = ||g||_2``. The initial score is a Laplace histogram of class
counts (pure ``epsilon_init``-DP), charged in the filter like the binary one.

Design and privacy argument: docs/sgbdt_internals.md#multi-class-s-gbdt.
"""

from __future__ import annotations

import math

import numpy as np

from ...accounting import LaplaceMechanism, noise
from ..encoding import RecordEncoder
from ..forest import Forest
from .scores import softmax
from .sgbdt_engine import SGBDTConfig, SGBDTEngine

__all__ = ["SGBDTMultiEngine", "clip_rows", "init_scores_from_counts", "noisy_class_counts"]


def clip_rows(v: np.ndarray, bound: float) -> np.ndarray:
    """Each row of ``v`` scaled down to L2 norm ``bound`` if it is longer (in place)."""
    norm = np.sqrt(np.einsum("ij,ij->i", v, v))
    v *= np.minimum(1.0, bound / np.maximum(norm, 1e-300))[:, None]
    return v


class SGBDTMultiEngine(SGBDTEngine):
    """:class:`~dpstream.models.boosting.sgbdt_engine.SGBDTEngine` for K >= 3 classes (see
    docs/sgbdt_internals.md#multi-class-s-gbdt): scores, gradients, leaf sums and tree values
    are K-vectors.

    Each leaf releases ``n + N(0, sigma^2 / (2 r1))`` and ``sum g + N(0, sigma^2 / (2 r2)
    I_K)``; a record's round cost is the binary round's at ``|g| = ||g||_2`` (Theorem 23).

    Examples
    --------
    >>> from river.datasets import synth
    >>> from dpstream.models import SGBDTClassifier
    >>> rows = list(synth.Waveform(seed=1).take(6000))
    >>> schema = {"features": {k: {"type": "numeric", "min": -6, "max": 9} for k in rows[0][0]},
    ...           "target": {"type": "categorical", "values": [0, 1, 2]}}
    >>> model = SGBDTClassifier(schema=schema, epsilon=1.0, seed=0)
    >>> right = 0
    >>> for x, y in rows:
    ...     right += model.predict_one(x) == y
    ...     model.learn_one(x, y)
    >>> right / len(rows) > 0.6
    True
    >>> sorted(model.predict_proba_one(rows[0][0]))
    [0, 1, 2]
    """

    def __init__(self, config: SGBDTConfig, encoder: RecordEncoder, rng: np.random.Generator):
        self.n_classes = len(encoder.classes)
        super().__init__(config, encoder, rng)
        self.forest = Forest(max_nodes=self.forest.max_nodes, max_depth=config.depth,
                             n_outputs=self.n_classes)
        self.blocks = None   # trees retire one at a time (a K-vector block sum: not built)
        self.score = np.empty((0, self.n_classes))
        self.init_stats = [np.zeros(self.n_classes), 0.0]

    # ------------------------------------------------------------------ scores
    @property
    def base_score(self) -> np.ndarray:
        """The initial score (a K-vector), or the public default 0 (uniform) before data."""
        return np.zeros(self.n_classes) if self.init_score is None else self.init_score

    def raw_scores(self, X: np.ndarray) -> np.ndarray:
        return self.base_score + self.forest.predict_vector_sum(X)

    def raw_scores_parts(self, X: np.ndarray) -> tuple[np.ndarray, None]:
        return self.raw_scores(X), None

    def raw_score_parts_one(self, row: np.ndarray) -> tuple[np.ndarray, None]:
        return self.base_score + self.forest.predict_vector_sum_one(row), None

    def add(self, X: np.ndarray, y: np.ndarray, raw: np.ndarray | None = None,
            parts: np.ndarray | None = None) -> None:
        """:meth:`SGBDTEngine.add`; scalar scores (records scored before this engine
        existed, at the public 0) are scored again as K-vectors."""
        super().add(X, y, raw=raw if raw is not None and np.ndim(raw) == 2 else None)

    # ------------------------------------------------------------- init score
    def fit_init_score(self) -> None:
        """The DP class frequencies (a Laplace histogram, L1 sensitivity 1) of the pool records
        that took part in no earlier release; the score is their log, centred, clamped to
        ``label_clip``."""
        if not self.init_pending:
            return
        c = self.config
        if self.refit_init:
            self.init_stats = [np.zeros(self.n_classes), 0.0]
        fresh = self.ids >= self.init_cut
        old = self.base_score
        new = old
        if c.epsilon_init > 0 and fresh.any():
            fresh = self.charge_init(fresh)
            noisy = noisy_class_counts(self.y[fresh], self.n_classes,
                                       epsilon=c.epsilon_init, rng=self.rng)
            total = self.init_stats[0] + noisy
            self.init_stats = [total, float(total.sum())]
            self.init_records += int(fresh.sum())
            new = init_scores_from_counts(total, label_clip=c.label_clip)
        self.init_cut = self.records_added
        self.init_score, self.refit_init = new, False
        self.score = self.score + (new - old)

    # ------------------------------------------------------------------ rounds
    def gradients(self) -> np.ndarray:
        """Each pool record's cross-entropy gradient ``softmax(F) - e_y``, shape (n, K)."""
        g = softmax(self.score)
        g[np.arange(len(self)), self.y.astype(np.int64)] -= 1.0
        return g

    def begin_round(self) -> dict:
        """Gradients clipped to L2 norm g*, per-record costs at their norms, the filter's
        step and the Poisson subsample."""
        c = self.config
        # clipped to L2 norm g* less half a lattice diagonal, then each component on the
        # public lattice: the rounded rows keep norm <= g* (accounting/noise.py)
        step = self.grad_step()
        g = clip_rows(self.gradients(), c.grad_clip - 0.5 * step * math.sqrt(self.n_classes))
        g = noise.on_lattice(g, step)
        if c.individual_filter:
            cost = self.costs.cost(np.sqrt(np.einsum("ij,ij->i", g, g)))
        else:
            cost = np.full(len(self), self.costs.max_cost)
        cont = self.filter.step(cost)
        sampled = cont & (noise.uniforms(self.rng, len(self))
                          < noise.sampling_threshold(c.subsample))
        return {"g": g, "cost": cost, "cont": cont, "sampled": sampled}

    def noisy_leaf_stats(self, tree, prep: dict) -> tuple[np.ndarray | None, np.ndarray]:
        """Each leaf's noisy count (dynamic leaf noise) and noisy K-vector gradient sum."""
        c = self.config
        leaves = self.leaves_of(tree)
        n_leaves = leaves.size
        sampled = prep["sampled"]
        leaf = self.pool_nodes(tree, prep)[sampled] - int(leaves[0])
        counts = np.bincount(leaf, minlength=n_leaves).astype(np.float64)
        g = prep["g"][sampled]
        sums = np.stack([np.bincount(leaf, weights=g[:, k], minlength=n_leaves)
                         for k in range(self.n_classes)], axis=1)
        r2 = 1.0 - c.r1 - prep.get("split_share", 0.0)
        return self.leaf_noise(counts if c.dynamic_leaf_noise else None, sums, r2)

    def leaf_values(self, noisy_n: np.ndarray | None, noisy_s: np.ndarray) -> np.ndarray:
        """``-lr s~ / max(lambda, n~)`` per leaf (``leaf_lambda="add"``: ``s~ / (n~ +
        lambda)``, 0 where ``n~ < 0``; static leaf noise: ``s~ / lambda``), each row clipped
        to L2 norm ``g*`` before the learning rate (post-processing)."""
        c = self.config
        if noisy_n is None:
            value = noisy_s / c.l2
        elif c.leaf_lambda == "add":
            value = np.where((noisy_n < 0)[:, None], 0.0,
                             noisy_s / np.maximum(noisy_n + c.l2, c.l2)[:, None])
        else:
            value = noisy_s / np.maximum(c.l2, noisy_n)[:, None]
        return -c.learning_rate * clip_rows(value, c.grad_clip)

    def add_round_tree(self, tree, value: np.ndarray, prep: dict | None) -> None:
        """Add the round's tree with its leaves' K-vectors; the pool's scores move by them."""
        t, nodes = self.store_round_tree(tree, value, prep)
        self.score += self.forest.tree_vectors(t)[nodes]

    def _retire_oldest(self) -> None:
        """Retire the oldest tree (``max_trees`` kept, or a young tree's turn): the pool's
        scores lose its values (post-processing)."""
        self.score -= self.forest.tree_vectors(0)[self.forest.apply(0, self.X)]
        self.forest.drop_oldest(1)
        self.trees_retired += 1


def noisy_class_counts(y: np.ndarray, k: int, *, epsilon: float,
                       rng: np.random.Generator) -> np.ndarray:
    """The class counts of the labels ``y`` (class indices) with Laplace noise of scale
    ``1 / epsilon`` each: one record is in one class (L1 sensitivity 1), so epsilon-DP."""
    counts = np.bincount(y.astype(np.int64), minlength=k).astype(np.float64)
    return LaplaceMechanism(epsilon=epsilon, sensitivity=1.0, rng=rng,
                            integers=True).release(counts)


def init_scores_from_counts(counts: np.ndarray, *, label_clip: float) -> np.ndarray:
    """Raw initial scores from (noisy) class counts: the log of the clipped frequencies,
    centred and clamped to ``[-label_clip, label_clip]`` (post-processing).

    >>> init_scores_from_counts(np.array([100.0, 300.0, -5.0]), label_clip=3.0).round(2).tolist()
    [1.17, 2.27, -3.0]
    """
    p = np.maximum(counts, 0.0) + 1.0          # a pseudo-count keeps every class possible
    logp = np.log(p / p.sum())
    return np.clip(logp - logp.mean(), -label_clip, label_clip)
