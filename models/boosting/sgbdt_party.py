"""One party of distributed S-GBDT (Kirschte et al., 2023, Algorithm 9): local data, local filter,
shared trees.

:class:`SGBDTParty` wraps an S-GBDT estimator whose hyper-parameters every party shares; its
records never leave it. Rounds are driven from outside (:mod:`dpstream.stream.distributed`):
:meth:`SGBDTParty.contribute` runs the local filter, subsample and DPLeaf on the round's
public tree and returns the released leaf statistics, the parties' vectors are summed by
secure aggregation, and :meth:`SGBDTParty.apply` sets the global leaves from the sum. Both
aggregations are post-processing of per-party DP releases, so each party's records keep
exactly the single-process guarantee whatever the other parties do.

Design: docs/sgbdt_internals.md#one-party-of-distributed-s-gbdt (brokers: docs/distributed.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .random_splits import RandomTree, random_complete_tree
from .scores import init_score_from_stats, noisy_label_stats
from .sgbdt import _SGBDTBase
from .sgbdt_multi import init_scores_from_counts, noisy_class_counts

__all__ = ["SGBDTParty", "AGGREGATIONS"]

AGGREGATIONS = ("sums", "values")


class SGBDTParty:
    """A party of distributed S-GBDT (see docs/sgbdt_internals.md#one-party-of-distributed-s-gbdt).

    Parameters
    ----------
    model
        A fresh S-GBDT estimator with the hyper-parameters all parties share (its ``seed``
        seeds this party's own noise and subsampling only; use ``None`` in production).
    aggregation
        ``"values"`` (local leaf values are averaged, Alg. 9; default) or ``"sums"`` (noisy
        leaf counts and sums are summed, the leaf is their ratio).

    Notes
    -----
    Round 0 is the DP initial score (:meth:`init_contribution`: the noisy label sum and count,
    or a K-class model's noisy class counts). A round's vector holds the leaf values
    (``"values"``) or the noisy leaf counts then sums (``"sums"``); K-vectors for K classes.
    :meth:`abandon` ends a round that did not complete: no tree, and the filter's charge is
    kept (the party's vector was posted and may yet be summed).

    Examples
    --------
    >>> import numpy as np
    >>> from dpstream.models import SGBDTClassifier
    >>> from dpstream.stream import load_adult
    >>> X, y, schema = load_adult("train")
    >>> parties = [SGBDTParty(SGBDTClassifier(schema=schema, epsilon=1.0, seed=s))
    ...            for s in range(3)]
    >>> for p, part in zip(parties, np.array_split(np.arange(15000), 3)):
    ...     p.learn_many([X[i] for i in part], [y[i] for i in part])
    >>> init = sum(p.init_contribution() for p in parties)
    >>> for p in parties:
    ...     p.apply_init(init)
    >>> for r in range(20):
    ...     tree = parties[0].draw_tree(np.random.default_rng(r))    # a public seed per round
    ...     total = sum(p.contribute(tree) for p in parties)         # secure aggregation's sum
    ...     for p in parties:
    ...         _ = p.apply(tree, total, members=3)
    >>> errors = np.mean(np.array(parties[0].predict_many(X[15000:20000]))
    ...                  != np.array(y[15000:20000]))
    >>> bool(errors < 0.24), len(parties[1].model.engine.forest)
    (True, 20)
    """

    def __init__(self, model: _SGBDTBase, *, aggregation: str = "values"):
        if not isinstance(model, _SGBDTBase):
            raise TypeError(f"a party wraps an SGBDTRegressor or SGBDTClassifier, "
                            f"got {type(model).__name__}")
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
        self.model = model
        self.aggregation = aggregation
        self.pending: dict | None = None   # the contributed, not yet resolved round
        self.rounds_contributed = 0
        self.rounds_abandoned = 0
        self.rounds_followed = 0           # trees applied without a contribution
        self.rounds_excluded = 0           # contributed, but the vector missed the cut
        self.init_contributed = False
        self.new_records = 0               # arrivals not yet paid for by a round
        self._buffer_X: list[list[float]] = []
        self._buffer_y: list[float] = []

    # --------------------------------------------------------- river-like API
    @property
    def epsilon(self) -> float:
        return self.model.epsilon

    @property
    def _encoder(self):
        return self.model._encoder

    @property
    def training_rounds(self) -> int:
        return self.engine.rounds

    @property
    def engine(self):
        return self.model.engine

    def learn_one(self, x: Mapping, y: Any, **kwargs) -> None:
        """Add one record to the local pool (rounds are run by the coordinator). A bad record
        raises :class:`~dpstream.models.encoding.InvalidRecordError` and changes nothing."""
        m = self.model
        row = m._encoder._row(x)
        target = m._encoder.encode_target_one(y)
        self._buffer_X.append(row)
        self._buffer_y.append(target)
        m.records_seen += 1
        self.new_records += 1

    def advance(self, n: int = 1) -> None:
        """``n`` messages this party does not learn (invalid, duplicates, unlabeled): they
        count toward its next round as records do (``new_records`` counts messages), so when
        it asks for a round depends on message counts only."""
        self.new_records += int(n)

    def learn_many(self, X: Any, y: Any) -> None:
        """Add a batch to the local pool (all records validated first)."""
        m = self.model
        Xe = m._encoder.encode_many(X)
        ye = m._encoder.encode_targets(list(y))
        if Xe.shape[0] != ye.size:
            raise ValueError(f"X has {Xe.shape[0]} rows but y has {ye.size} labels")
        self._buffer_X.extend(Xe.tolist())
        self._buffer_y.extend(ye.tolist())
        m.records_seen += int(ye.size)
        self.new_records += int(ye.size)

    def _flush(self) -> None:
        """Buffered records join the pool — never while a round is pending (its per-record
        arrays index the pool as it was)."""
        if self._buffer_y and self.pending is None:
            X = np.array(self._buffer_X, dtype=np.float64)
            y = np.array(self._buffer_y, dtype=np.float64)
            self._buffer_X, self._buffer_y = [], []
            self.engine.add(X, y)
            self.engine.evict_oldest(self.model.max_active)

    @property
    def pool_size(self) -> int:
        """Records in the local pool, buffered ones included."""
        return len(self.engine) + len(self._buffer_y)

    def predict_one(self, x: Mapping, **kwargs) -> Any:
        return self.model.predict_one(x)

    def predict_many(self, X: Any) -> Any:
        return self.model.predict_many(X)

    def predict_proba_one(self, x: Mapping, **kwargs) -> dict:
        return self.model.predict_proba_one(x)

    # --------------------------------------------------------------- rounds
    def draw_tree(self, rng: np.random.Generator) -> RandomTree:
        """The round's complete random tree from a PUBLIC generator (the agreed seed)."""
        c = self.model._config
        only = self.engine.rounds % self.engine.n_features if c.cyclical_features else None
        return random_complete_tree(self.model._encoder, depth=c.depth, rng=rng,
                                    numeric_weight=c.numeric_weight, only_feature=only)

    def init_contribution(self) -> np.ndarray:
        """This party's DPInitScore release ``[noisy label sum, noisy count]`` (once)."""
        e, c = self.engine, self.model._config
        if self.init_contributed:
            raise RuntimeError("this party already released its initial-score statistics")
        self._flush()
        self.init_contributed = True
        k = self._classes
        if c.epsilon_init <= 0:
            return np.zeros(k if k > 2 else 2)
        take = e.charge_init(np.ones(len(e), dtype=bool))
        e.init_records = int(take.sum())
        if k > 2:   # K classes: the noisy class counts (L1 sensitivity 1), summed by the union
            return noisy_class_counts(e.y[take], k, epsilon=c.epsilon_init, rng=e.rng)
        s, n = noisy_label_stats(e.y[take], loss=c.loss, epsilon=c.epsilon_init,
                                 label_clip=c.label_clip, rng=e.rng)
        return np.array([s, n])

    def apply_init(self, total: np.ndarray | None) -> None:
        """Set the global initial score from the summed statistics (``None``: the round did
        not complete; the score stays the public 0)."""
        e, c = self.engine, self.model._config
        if e.init_score is not None:
            raise RuntimeError("the initial score is already set")
        if total is None or c.epsilon_init <= 0:
            e.init_score = e.base_score   # the public default (0; a zero K-vector)
        elif self._classes > 2:
            e.init_score = init_scores_from_counts(np.asarray(total, dtype=np.float64),
                                                   label_clip=c.label_clip)
        else:
            e.init_score = init_score_from_stats(float(total[0]), float(total[1]), loss=c.loss,
                                                 label_clip=c.label_clip)
        e.score = e.score + e.init_score
        self._flush()

    def contribute(self, tree: RandomTree) -> np.ndarray:
        """Filter, subsample and DPLeaf on the local pool for ``tree``; returns ``W_u``."""
        if self.pending is not None:
            raise RuntimeError("the previous round is not resolved yet")
        self._flush()
        e = self.engine
        if e.init_score is None:
            e.init_score = e.base_score   # no initial-score round happened: the public default
        prep = e.begin_round()
        noisy_n, noisy_s = e.noisy_leaf_stats(tree, prep)
        if self.aggregation == "values":
            vector = e.leaf_values(noisy_n, noisy_s).ravel()
        elif noisy_n is None:
            vector = noisy_s.ravel()
        else:   # (K classes: each leaf's K-vector sum, leaf by leaf, after the counts)
            vector = np.concatenate([noisy_n, noisy_s.ravel()])
        self.pending = prep
        self.rounds_contributed += 1
        # one round is owed per round_size arrivals, as in the single-process stream
        self.new_records = max(0, self.new_records - self.model._round_size)
        return vector

    def global_leaves(self, total: np.ndarray, members: int) -> np.ndarray:
        """Leaf values from the aggregate ``A`` of ``members`` vectors (post-processing)."""
        e, c = self.engine, self.model._config
        total = np.asarray(total, dtype=np.float64)
        n_leaves = e.leaves.size
        shape = (n_leaves, self._classes) if self._classes > 2 else (n_leaves,)
        if self.aggregation == "values":
            return total.reshape(shape) / members
        if c.dynamic_leaf_noise:
            return e.leaf_values(total[:n_leaves], total[n_leaves:].reshape(shape))
        # static leaf noise: s~ / lambda per party, so the union's leaf is sum s~ / (k lambda)
        return e.leaf_values(None, total.reshape(shape) / members)

    def vector_size(self) -> int:
        n_leaves = self.engine.leaves.size
        c = self.model._config
        width = self._classes if self._classes > 2 else 1   # values per leaf
        return n_leaves * width if (self.aggregation == "values" or not c.dynamic_leaf_noise) \
            else n_leaves * (1 + width)

    @property
    def _classes(self) -> int:
        """The model's class count (0 for a regressor)."""
        return len(self.model._encoder.classes or ())

    def apply(self, tree: RandomTree, total: np.ndarray, *, members: int,
              included: bool = True) -> dict:
        """Add the round's tree with the global leaves ``total`` of ``members`` vectors; ends
        this party's pending round. ``included=False``: this party's vector was computed but
        left out of the sum (it came after the round's cut); its charge stands."""
        e = self.engine
        if e.init_score is None:
            e.init_score = e.base_score
        if self.pending is None:
            self.rounds_followed += 1
        elif not included:
            self.rounds_excluded = getattr(self, "rounds_excluded", 0) + 1
        e.retire_if_full()
        out = e.end_round(tree, self.global_leaves(total, members), self.pending)
        self.pending = None
        self._flush()
        return out

    def abandon(self) -> dict:
        """End a round that did not complete: no tree; the filter's charge stands."""
        out = self.engine.end_round(None, None, self.pending)
        if self.pending is not None:
            self.rounds_abandoned += 1
        self.pending = None
        self._flush()
        return out

    # --------------------------------------------------------------- report
    def privacy_report(self) -> dict:
        """The wrapped model's report (this party's records only) plus the protocol's counts."""
        report = self.model.privacy_report()
        report.update({
            "mechanism": report["mechanism"] + "; distributed (Kirschte et al. 2023, Alg. 9): "
                         "this party's "
                         "records, local filter and noise, leaves by secure aggregation",
            "scope": "this party's records; every party's vector is DP on its own",
            "aggregation": self.aggregation,
            "rounds_contributed": self.rounds_contributed,
            "rounds_abandoned": self.rounds_abandoned,
            "rounds_followed": self.rounds_followed,
            "rounds_excluded": getattr(self, "rounds_excluded", 0),
            "init_contributed": self.init_contributed,
            "records_pending": len(self._buffer_y),
        })
        return report
