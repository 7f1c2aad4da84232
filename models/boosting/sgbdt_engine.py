"""The S-GBDT training engine shared by :class:`~dpstream.models.SGBDTRegressor` and
:class:`~dpstream.models.SGBDTClassifier` (Kirschte et al., 2023, Algorithms 4-8).

State: the public encoder, the forest, the DP initial score, and the *active pool* (the encoded
records that still have individual Rényi budget). :meth:`SGBDTEngine.round` runs one training
round: clipped gradients, per-record costs, the individual Rényi filter, a Poisson subsample,
a random tree and DP leaves; :meth:`SGBDTEngine.retire_if_full` retires the oldest trees in
blocks (post-processing). Rounds are scheduled by public counts and each record's
participation depends only on its own spend, so no record's RDP ever passes the filter's
bound, ``rho_max + epsilon_init`` (the initial score is charged in the same filter).

Design and privacy argument: docs/sgbdt_internals.md#the-training-engine.
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass

import numpy as np

from ...accounting import IndividualRenyiFilter, RoundCostTable, calibrate_sgbdt, noise
from ..encoding import RecordEncoder
from ..forest import Forest, complete_tree_layout
from ..forest_kernels import sum_one, sum_one_parts
from ._block_sums import BlockSums
from .hist_splits import category_codes, grow_tree, histogram_sigma
from .random_splits import random_complete_tree, route_tree
from .round_kernels import (
    add_leaf_values,
    category_codes_into,
    clip_gradients,
    leaf_counts_sums_rows,
    move_rows,
)
from .scores import init_score_from_stats, noisy_label_stats, sigmoid
from .sgbdt_grid import grid_pending, map_grid_columns, raw_tree, release_grid

__all__ = ["SGBDTConfig", "SGBDTEngine"]

_NO_COLUMN = np.zeros(0)   # add_leaf_values without block sums

#: the arrivals over which a generation's young trees retire once its young phase has
#: passed (``SGBDTConfig.warmup_records``): a young pool's trees are noisy, and kept for good
#: they cost an endless stream 2-4 pp (docs/sgbdt.md, "Young streams"). Counted in
#: arrivals, not rounds: over 200 rounds of 256 (``dpstream run``) they outlived Adult and
#: cost it 2.6 pp (0.817 -> 0.791 at epsilon 0.5)
YOUNG_FADE = 6400

#: the released record count after which the initial score stops being refined
INIT_TARGET = 1000
#: an initial-score release waits for ceil(INIT_NOISE / epsilon_init) fresh arrivals (the
#: Laplace noise of the released count then has a standard deviation of at most 28% of it;
#: 10 beat 0, 20 and 40 on the Abalone stream, docs/sgbdt.md)
INIT_NOISE = 10.0


def _code_spans(encoder: RecordEncoder) -> tuple[np.ndarray, np.ndarray]:
    """Each categorical feature's first column and number of values (a public layout, built
    once per encoder)."""
    spans = _SPANS.get(encoder)
    if spans is None:
        cats = encoder.categorical_columns()
        spans = _SPANS[encoder] = (np.array([c[0] for c in cats], dtype=np.int64),
                                   np.array([len(c) for c in cats], dtype=np.int64))
    return spans


_SPANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class SGBDTConfig:
    """Validated hyper-parameters (names as in Kirschte et al. (2023); see the estimators'
    docstrings)."""

    loss: str
    epsilon: float
    delta: float
    n_trees: int
    extra_trees: int
    depth: int
    learning_rate: float
    subsample: float
    grad_clip: float
    label_clip: float
    init_share: float
    leaf_noise_split: float
    l2: float
    accountant: str
    dynamic_leaf_noise: bool
    individual_filter: bool
    numeric_weight: float
    cyclical_features: bool
    max_trees: int | None = None
    drift_share: float = 0.0
    min_leaf_records: float = 0.0
    split_levels: int = 0
    split_share: float = 0.0
    split_bins: int = 32
    split_decay: float = 0.0
    #: trees retire in blocks of this many once ``max_trees`` are kept (1: one at a time)
    retire_block: int = 1
    #: how ``l2`` enters a leaf: ``"max"`` (``s~ / max(l2, n~)``) or ``"add"`` (``s~ / (n~ +
    #: l2)``, and 0 where the noisy count is negative)
    leaf_lambda: str = "max"
    #: the feature grid's pure-DP cost, a share of epsilon charged in the filter to the
    #: records in its release (:mod:`~dpstream.models.boosting.sgbdt_grid`; 0: none)
    grid_share: float = 0.0
    #: a generation's rounds draw random trees until it has this many arrivals (a public
    #: count), then ``split_levels`` select splits: on a young pool the noisy histograms
    #: cost the leaves more than they find (docs/sgbdt.md, "Young streams")
    split_after: int = 0
    #: a generation's first this-many arrivals are its young phase (public counts; the
    #: estimators' ``warmup_rounds`` schedule its rounds); once it has passed, the young
    #: phase's trees retire over the next :data:`YOUNG_FADE` arrivals (0: no young phase)
    warmup_records: int = 0

    @property
    def epsilon_init(self) -> float:
        return self.epsilon * self.init_share

    @property
    def epsilon_drift(self) -> float:
        return self.epsilon * self.drift_share

    @property
    def epsilon_trees(self) -> float:
        return self.epsilon - self.epsilon_init - self.epsilon_drift

    @property
    def r1(self) -> float:
        return self.leaf_noise_split if self.dynamic_leaf_noise else 0.0

    @property
    def r_split(self) -> float:
        """r_s, the share of the gradient noise budget spent on split histograms."""
        return self.split_share * (1.0 - self.r1) if self.split_levels > 0 else 0.0


@functools.lru_cache(maxsize=256)
def _noise_sigmas(sigma: float, r1: float, r_split: float, split_levels: int,
                  n_features: int) -> tuple[float, ...]:
    out = [sigma / math.sqrt(2 * (1.0 - r1))]
    if split_levels > 0:
        out.append(sigma / math.sqrt(2 * (1.0 - r1 - r_split)))
        out += [histogram_sigma(sigma, levels=k, n_features=n_features, split_share=r_split)
                for k in range(1, split_levels + 1)]
    return tuple(out)


class SGBDTEngine:
    """Pool, filter, forest and rounds. Built lazily by the estimators; pickles as a whole."""

    def __init__(self, config: SGBDTConfig, encoder: RecordEncoder, rng: np.random.Generator):
        self.config = config
        self.encoder = encoder
        self.rng = rng
        c = config
        # the initial score's pure epsilon_init is charged in the filter (module docstring):
        # records that never take part in a release spend it on rounds
        self.init_in_filter = True
        self._n = 0              # pool rows (the pool is set up below; the filter sizes by it)
        self._calibrate(c.n_trees)
        self.phases = 1          # calibrations so far (new_phase)
        n_nodes, _, self.leaves = complete_tree_layout(c.depth)
        self.forest = Forest(max_nodes=n_nodes, max_depth=c.depth)
        self.n_features = len(encoder.schema.features)
        self.init_score: float | None = None
        self.init_records = 0
        self.init_cut = 0        # records with arrival number < init_cut took part in an init score
        self.refit_init = False  # a new generation fits a new init score at its first round
        self.init_stats = [0.0, 0.0]   # released noisy label sum and count of this generation
        self.generation = 0
        self.records_dropped = 0  # old-concept records that left the pool at a generation switch
        self.generation_start = 0   # arrival number where this generation's records begin
        self.gen_first = 0          # serial of this generation's first tree
        # [generation, first, end): serials of that generation's young trees, once its young
        # phase has passed (None before)
        self.young: list[int] | None = None
        width = encoder.n_columns
        # pool rows live in [:_n] (the tail is kept zeroed), stored column by column: a round
        # routes the whole pool through one tree, reading one column per node, so a column-major
        # pool streams through memory where a row-major one misses the cache on every row
        self._X = np.zeros((0, width), order="F")
        self.y = np.empty(0)
        self.score = np.empty(0)
        self.ids = np.empty(0, dtype=np.int64)   # arrival number of each pool record
        # each pool record's categorical value indices (split histograms read these)
        self.codes = np.zeros((0, len(encoder.schema.categorical_features)), dtype=np.int16)
        self._last_round: tuple | None = None   # (ids, cont, sampled, cost) of the last round
        self.rounds = 0
        self.records_added = 0
        self.records_exhausted = 0
        self.records_evicted = 0
        self.trees_retired = 0
        self.split_memory: dict = {}   # decayed sum of released root histograms
        # block retirement (module docstring): the pool's per-block sums of tree values
        # (tree s of all added is in block s // block; the live ones are s >= trees_retired)
        self.blocks = (BlockSums(block=c.retire_block, max_trees=c.max_trees)
                       if c.max_trees is not None and c.retire_block > 1 else None)
        self._keep: int | None = None   # the last age cut (evict_oldest): the pool's limit
        self.grid = None          # the released feature grid (sgbdt_grid), once
        self.grid_info: dict = {}
        self.grid_blocked = False   # batch training releases none
        self.gcols = None   # the pool's grid columns, mapped (rows as the pool's; derived)
        # the buffers (the pool's capacity in rows) that y, score, ids, codes, gcols and the
        # filter's spend view, so that add() writes new records in place (derived)
        self._bufs: dict = {}

    def _calibrate(self, rounds: int) -> None:
        """sigma for ``rounds`` worst-case rounds at epsilon_trees, the per-record round costs
        at that sigma, and a fresh filter for the pool: bound ``rho_max + epsilon_init`` when
        the initial score is charged in the filter, ``rho_max`` for a checkpoint from before
        (whose records paid it apart)."""
        c = self.config
        self.calibration = calibrate_sgbdt(
            epsilon=c.epsilon_trees, delta=c.delta, sample_rate=c.subsample, rounds=rounds,
            grad_clip=c.grad_clip, leaf_noise_split=c.r1, accountant=c.accountant)
        self.costs = RoundCostTable(
            order=self.calibration.order, sigma_leaf=self.calibration.sigma_leaf,
            leaf_noise_split=c.r1, sample_rate=c.subsample, grad_clip=c.grad_clip,
            accountant=c.accountant)
        init = c.epsilon_init if self.init_in_filter else 0.0
        self.filter = IndividualRenyiFilter(order=self.calibration.order,
                                            bound=self.calibration.rho_max + init)
        self.filter.add(self._n)

    def new_phase(self, rounds: int) -> int:
        """Start a new calibration phase of ``rounds`` rounds for the records that have spent
        nothing (the authors' no-filter late arm: "the ensemble must forget old data").

        Every pool record that has spent any budget (in a round or an initial-score release)
        leaves the pool; sigma is re-calibrated for ``rounds`` worst-case rounds at the same
        epsilon_trees and delta, with a fresh filter. This is sound by parallel composition:
        a record takes part in the releases of one phase only, and each phase is calibrated
        to the same guarantee for its records (the trees of earlier phases are released
        outputs; later rounds build on them as post-processing). Returns how many records
        left.
        """
        if rounds < 1:
            raise ValueError(f"a phase needs at least one round, got {rounds!r}")
        spent = self.filter.spent > 0.0
        left = int(np.count_nonzero(spent))
        if left:
            self._remove(spent)
            self.records_exhausted += left
        self._calibrate(int(rounds))
        self.phases += 1
        return left

    # ------------------------------------------------------------------ scores
    @property
    def base_score(self) -> float:
        """The initial score, or the public default before any data (0: the scaled mid-range
        for regression, probability 1/2 for classification)."""
        return 0.0 if self.init_score is None else self.init_score

    def raw_scores(self, X: np.ndarray) -> np.ndarray:
        return self.base_score + self.forest.predict_sum(X)

    def raw_scores_parts(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`raw_scores` (bit for bit) and, with block retirement, each row's per-block
        sums for :meth:`add` (``None`` without)."""
        total, parts = self.tree_sums_parts(X)
        return self.base_score + total, parts

    def tree_sums_parts(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Each row's sum of the live trees' values — :meth:`raw_scores_parts` is the initial
        score plus it, bit for bit — and its per-block sums (``None`` without)."""
        if self.blocks is None:
            return self.forest.predict_sum(X), None
        return self.forest.predict_sum_parts(X, self._slots(), self.blocks.n_slots)

    def raw_score_parts_one(self, row: np.ndarray) -> tuple[float, np.ndarray | None]:
        """:meth:`raw_scores_parts` of one encoded row (1-d)."""
        f = self.forest
        if f.n_trees and row.dtype == np.float64:   # the forest's kernels, called directly
            if self.blocks is None:
                return self.base_score + float(sum_one(
                    row, f.n_trees, f.max_nodes, f.depths, f.feature, f.threshold, f.left,
                    f.value, f.max_depth)), None
            total, parts = sum_one_parts(row, f.n_trees, f.max_nodes, f.depths, f.feature,
                                         f.threshold, f.left, f.value, f.max_depth,
                                         self._slots(), self.blocks.n_slots)
            return self.base_score + float(total), parts
        if self.blocks is None:
            return self.base_score + self.forest.predict_sum_one(row), None
        total, parts = self.forest.predict_sum_parts_one(row, self._slots(),
                                                         self.blocks.n_slots)
        return self.base_score + total, parts

    @property
    def retire_block(self) -> int:
        """Trees retire in blocks of this many (1: one at a time)."""
        return 1 if self.blocks is None else self.blocks.block

    def _slots(self) -> np.ndarray:
        """The block-sum slot of each live tree, oldest first."""
        return self.blocks.slots(first=self.trees_retired, n_trees=len(self.forest))

    def _ensure_blocks(self) -> None:
        """The pool's block sums, summed again after a restore."""
        if self.blocks is not None and not self.blocks.ready:
            self.blocks.ensure(self.forest, self.X, n=self._n, capacity=self._X.shape[0],
                               first=self.trees_retired)

    @property
    def parts(self) -> np.ndarray | None:
        """Each pool record's sum of each live block's tree values (a view, one column per
        slot; ``None`` without block retirement)."""
        if self.blocks is None:
            return None
        self._ensure_blocks()
        return self.blocks.view(self._n)

    # -------------------------------------------------------------------- pool
    def __len__(self) -> int:
        return self._n

    @property
    def X(self) -> np.ndarray:
        """The encoded records of the active pool (a view; arrival order)."""
        return self._X[:self._n]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        # the pool travels compactly (one code per categorical feature, not its one-hot
        # columns) and without spare capacity: checkpoints stay small and fast
        state["_X"] = self.encoder.compact(self._X[:self._n])
        state["gcols"] = None         # the pool's mapped columns: derived, mapped again on use
        state.pop("_bufs", None)      # the per-record arrays travel as views: their rows only
        state["_last_round"] = None   # a diagnostic of the round just run: not worth a pool's
        return state                  # size in every checkpoint

    @property
    def last_round(self) -> dict[str, np.ndarray]:
        """The arrival numbers of the records that took part in the last round (``cont``)
        and of those it sampled, and the costs it charged them (empty after a restore)."""
        if self._last_round is None:
            return {}
        ids, cont, sampled, cost = self._last_round
        return {"cont": ids[cont], "sampled": ids[sampled], "cost": cost[cont]}

    def __setstate__(self, state: dict) -> None:
        if isinstance(state["_X"], dict):
            state["_X"] = np.asfortranarray(state["encoder"].expand(state["_X"]))
        # checkpoints from before generations: every record then counts as having paid for
        # the initial score (the conservative reading)
        for name, default in (("init_cut", state["records_added"]), ("refit_init", False),
                              ("init_stats", [0.0, float(INIT_TARGET)]),
                              ("generation", 0), ("records_dropped", 0), ("phases", 1),
                              ("generation_start", 0), ("split_memory", {}),
                              # checkpoints from before young phases: no young trees
                              ("gen_first", 0), ("young", [state.get("generation", 0), 0, 0]),
                              # checkpoints from before block retirement: one tree at a time
                              ("blocks", None), ("_keep", None),
                              # checkpoints from before the initial score was charged in
                              # the filter: their bound is rho_max, the release paid apart
                              ("init_in_filter", False),
                              # checkpoints from before the feature grid
                              ("grid", None), ("grid_info", {}), ("grid_blocked", False),
                              ("gcols", None)):
            state.setdefault(name, default)
        state.pop("last_round", None)   # checkpoints that stored the diagnostic
        state["_bufs"] = {}   # the per-record arrays are standalone: add() buffers them again
        state.setdefault("_last_round", None)
        if "codes" not in state:   # checkpoints from before split selection
            state["codes"] = category_codes(state["encoder"], state["_X"][:state["_n"]])
        self.__dict__.update(state)

    def add(self, X: np.ndarray, y: np.ndarray, raw: np.ndarray | None = None,
            parts: np.ndarray | None = None) -> None:
        """Records enter the pool with a full individual budget. ``raw``: their current raw
        scores when the caller already has them (predict_one computed them on this forest);
        ``parts``: their per-block sums likewise (:meth:`raw_scores_parts`), with block
        retirement — else both are computed here."""
        if X.shape[0] == 0:
            return
        n, m = self._n, X.shape[0]
        if self.blocks is not None:
            self._ensure_blocks()
            if parts is None:
                total, parts = self.raw_scores_parts(X)
                raw = total if raw is None else raw
        if n + m > self._X.shape[0]:   # grow geometrically (amortised O(1) a record), past
            # the age cut by one flush at most: evict_oldest keeps no more
            cap = max(2 * self._X.shape[0], 1024)
            if self._keep is not None:
                cap = min(cap, self._keep + 4096)
            grown = np.zeros((max(cap, n + m), self._X.shape[1]), order="F")
            grown[:n] = self._X[:n]
            self._X = grown
        self._X[n:n + m] = X
        cap = self._X.shape[0]
        if self.blocks is not None:
            self.blocks.append(n, parts, cap)
        score = self.raw_scores(X) if raw is None else raw
        end = n + m
        self._n = end
        # the per-record arrays grow in place, in buffers of the pool's capacity
        self._buffer("y", self.y, n, cap)[n:end] = y
        self._buffer("score", self.score, n, cap)[n:end] = score
        self._buffer("ids", self.ids, n, cap)[n:end] = np.arange(
            self.records_added, self.records_added + m)
        codes = self._buffer("codes", self.codes, n, cap)
        starts, sizes = _code_spans(self.encoder)
        category_codes_into(X, starts, sizes, codes[n:end])   # (category_codes, compiled)
        names = ("y", "score", "ids", "codes")
        if self.grid is not None and self.gcols is not None:   # (each record mapped once)
            self._buffer("gcols", self.gcols, n, cap)[n:end] = map_grid_columns(
                self.grid, X[:, self.grid._idx])
            names += ("gcols",)
        for name in names:
            setattr(self, name, self._bufs[name][:end])
        spent = self._buffer("spent", self.filter.spent, n, cap)
        spent[n:end] = 0.0   # (the filter's add: a full budget)
        self.filter.spent = spent[:end]
        self.records_added += m

    def _buffer(self, name: str, values: np.ndarray, n: int, cap: int) -> np.ndarray:
        """The buffer of ``cap`` rows whose first ``n`` hold the pool's ``values`` of
        ``name``: the one ``values`` views, or a new one they are copied into (after a
        restore, a compaction that shrank the pool, or an assignment of a new array)."""
        buf = self._bufs.get(name)
        if (buf is None or values.base is not buf or buf.shape[0] != cap
                or buf.shape[1:] != values.shape[1:] or buf.dtype != values.dtype
                or values.ctypes.data != buf.ctypes.data):
            buf = np.zeros((cap, *values.shape[1:]), dtype=values.dtype)
            buf[:n] = values
            self._bufs[name] = buf
        return buf

    def evict_oldest(self, keep: int) -> int:
        """Records that arrived more than ``keep`` arrivals ago leave the pool
        (``max_active``); returns how many left.

        The cut is an age in arrivals, a public count — never the pool's size. The size
        counts how many *other* records have spent their budgets, so evicting down to a size
        would let one record's data (its budget spent early or late frees a slot or not)
        decide whether another record takes part in the next rounds, a change in the output
        that no per-record cost pays for. The pool still never holds more than ``keep``
        records: only ``keep`` arrivals are younger than the cut.
        """
        self._keep = int(keep)   # the pool's capacity need not grow past it (add)
        if self.records_added <= keep:
            return 0   # no record is that old yet (arrival numbers start at 0)
        old = self.ids < self.records_added - keep
        extra = int(np.count_nonzero(old))
        if extra:
            self._remove(old)
            self.records_evicted += extra
        return extra

    def _remove(self, mask: np.ndarray) -> None:
        """Drop the masked records; survivors from the tail fill the holes (O(removed) rows
        move, in place, so the pool is not kept in arrival order — ``ids`` records it)."""
        n = self._n
        keep = ~mask
        k = int(np.count_nonzero(keep))
        holes = np.flatnonzero(mask[:k])
        movers = np.flatnonzero(keep[k:n]) + k
        move_rows(self._X, holes, movers)   # self._X[holes] = self._X[movers]
        self._X[k:n] = 0.0   # removed records leave memory, not just the index range
        self._n = k
        shrink = k < self._X.shape[0] // 4 and self._X.shape[0] > 1024
        if shrink:
            self._X = self._X[:max(2 * k, 1024)].copy(order="F")
        if self.blocks is not None and self.blocks.ready:
            self.blocks.compact(holes, movers, k, n, self._X.shape[0])
        for name in ("y", "score", "ids", "codes") if self.gcols is None else \
                ("y", "score", "ids", "codes", "gcols"):
            values = getattr(self, name)
            values[holes] = values[movers]
            setattr(self, name, values[:k].copy() if shrink else values[:k])
        self.filter.compact(holes, movers, k)
        if shrink:   # the buffers follow the pool's capacity (add() makes new ones)
            self.filter.spent = self.filter.spent.copy()
            self._bufs = {}

    # ------------------------------------------------------------- init score
    def fit_init_score(self) -> None:
        """DPInitScore (Alg. 6) on the pool records that took part in no earlier release.

        |D| is not public in a stream, so the clipped label sum and the record count of those
        records are each released with Laplace noise at ``epsilon_init / 2`` (pure
        epsilon_init-DP together); the score is the clamped ratio of the released totals of
        this generation (see :attr:`init_pending` for when a round releases). Each record is
        in one release at most (``init_cut``). With ``init_share = 0`` the score stays the
        public 0.
        """
        if not self.init_pending:
            return
        c = self.config
        if self.refit_init:
            self.init_stats = [0.0, 0.0]
        fresh = self.ids >= self.init_cut   # each record takes part in one release at most
        old = 0.0 if self.init_score is None else self.init_score
        new = old
        if c.epsilon_init > 0 and fresh.any():
            fresh = self.charge_init(fresh)
            s, n = noisy_label_stats(self.y[fresh], loss=c.loss, epsilon=c.epsilon_init,
                                     label_clip=c.label_clip, rng=self.rng)
            self.init_stats = [self.init_stats[0] + s, self.init_stats[1] + n]
            self.init_records += int(fresh.sum())
            new = init_score_from_stats(*self.init_stats, loss=c.loss, label_clip=c.label_clip)
        self.init_cut = self.records_added
        self.init_score, self.refit_init = new, False
        self.score = self.score + (new - old)

    def charge_init(self, take: np.ndarray) -> np.ndarray:
        """Charge ``epsilon_init`` in the filter to the records in mask ``take`` that can
        still afford it; returns the mask of those that take part in the release (the
        others sit it out, as in a round). Engines restored from checkpoints that paid the
        release apart from the filter charge nothing."""
        if not self.init_in_filter:
            return take
        cost = np.where(take, self.config.epsilon_init, 0.0)
        return take & self.filter.charge(cost)

    @property
    def init_pending(self) -> bool:
        """Whether the next round releases initial-score statistics: before the first, after
        a generation switch, and while the released (noisy) count is below
        ``INIT_TARGET`` — disjoint groups of fresh records then refine the score (parallel
        composition: each record is in one group). A batch of ``INIT_TARGET`` or more records
        gets the paper's single release."""
        c = self.config
        if self.refit_init or c.epsilon_init <= 0:
            return self.refit_init or self.init_score is None
        if self.records_added - self.init_cut < self.init_group:
            return False    # too few fresh arrivals: their release would be mostly noise
        return self.init_score is None or self.init_stats[1] < INIT_TARGET

    @property
    def init_group(self) -> int:
        """The fewest fresh arrivals (a public count) one initial-score release covers:
        ``ceil(INIT_NOISE / epsilon_init)``, so the Laplace noise on the released count stays
        a small share of it."""
        return max(1, math.ceil(INIT_NOISE / self.config.epsilon_init))

    def new_generation(self, keep_from: int) -> dict:
        """A detected concept change (a DP release, so this is post-processing): every tree
        retires, records that arrived before ``keep_from`` (an arrival number) leave the pool,
        and the next round fits a fresh initial score on records that took part in none."""
        retired = len(self.forest)
        self.forest.drop_oldest(retired)
        self.trees_retired += retired
        if self.blocks is not None and self.blocks.ready:
            self.blocks.clear()   # no live tree: every block sum is empty
        old = self.ids < keep_from
        dropped = int(old.sum())
        if dropped:
            self._remove(old)
            self.records_dropped += dropped
        base = self.base_score   # (a K-vector for a multi-class engine)
        self.score = np.full((len(self), *np.shape(base)), base)
        self.split_memory = {}
        self.refit_init = True
        self.generation_start = keep_from
        self.gen_first = self.trees_retired
        self.generation += 1
        return {"generation": self.generation, "trees_retired": retired,
                "records_dropped": dropped}

    # ------------------------------------------------------------------ rounds
    def gradients(self) -> np.ndarray:
        """Each pool record's gradient, a new array (the caller may change it in place)."""
        if self.config.loss == "squared":
            return self.score - self.y
        g = sigmoid(self.score)
        g -= self.y
        return g

    def round(self) -> dict:
        """One TrainSingleTree round under the individual filter (Alg. 8, lines 5-9)."""
        if self.init_pending:
            self.fit_init_score()
        if grid_pending(self):
            release_grid(self)
        prep = self.begin_round()
        self.retire_young()
        self.retire_if_full()
        tree = self.draw_tree(prep)
        noisy_n, noisy_s = self.noisy_leaf_stats(tree, prep)
        return self.end_round(tree, self.leaf_values(noisy_n, noisy_s), prep)

    def draw_tree(self, prep: dict):
        """This round's tree: the paper's random complete tree, or with ``split_levels`` its
        top levels chosen from noisy gradient histograms of the round's sampled records
        (:mod:`~dpstream.models.boosting.hist_splits`; ``prep["split_share"]`` then tells
        :meth:`noisy_leaf_stats` how much of the gradient noise budget is left for the
        leaves)."""
        c = self.config
        only = self.rounds % self.n_features if c.cyclical_features else None
        depth = self.round_depth()
        if c.split_levels <= 0 or self.arrived < c.split_after:
            return raw_tree(self.grid, random_complete_tree(
                self.encoder, depth=depth, rng=self.rng, numeric_weight=c.numeric_weight,
                only_feature=only))
        levels = min(c.split_levels, depth)
        sigma = histogram_sigma(self.calibration.sigma_leaf, levels=levels,
                                n_features=self.n_features, split_share=c.r_split)
        sampled = prep["sampled"]
        prep["split_share"] = c.r_split
        rows = prep.get("rows")
        if rows is None:
            rows = np.flatnonzero(sampled)
        X, codes, g = self.X, self.codes, prep["g"].take(rows, axis=0)
        if self.grid is not None:   # grown on the mapped sample, stored in raw units
            X, rows, codes = self._mapped_sample(rows, levels), None, codes.take(rows, axis=0)
        return raw_tree(self.grid, grow_tree(
            self.encoder, depth=depth, rng=self.rng, X=X, rows=rows, codes=codes,
            g=g, levels=levels, bins=c.split_bins, sigma=sigma, step=self.grad_step(),
            numeric_weight=c.numeric_weight, only_feature=only, memory=self.split_memory,
            decay=c.split_decay))

    def _mapped_sample(self, rows: np.ndarray, levels: int) -> np.ndarray:
        """The sampled pool rows for split selection, the grid's columns mapped. Selection
        reads only the numeric columns (categorical ones come from ``codes``) unless a lower
        selected level routes rows by a categorical split (``levels`` > 1): only then are the
        other columns copied (Adult: 6 of 107 columns). Each pool record is mapped once
        (``gcols``, kept beside the pool), not in every round that samples it."""
        idx = self.grid._idx
        if self.gcols is None or self.gcols.shape[0] != self._n:   # after a release or restore
            self.gcols = self.grid.map_columns(self.X[:, idx])
        if levels > 1:
            out = self.X[rows]
        else:   # the columns selection never reads are left unset
            out = np.empty((rows.size, self._X.shape[1]), order="F")
        out[:, idx] = self.gcols.take(rows, axis=0)   # (take: twice as fast as [rows])
        return out

    def round_depth(self) -> int:
        """The depth of this round's tree, from public counts only: ``depth``, or with
        ``min_leaf_records`` the largest depth whose leaves expect that many sampled records
        of the records that arrived in this generation (a young stream grows shallow trees)."""
        c = self.config
        if c.min_leaf_records <= 0:
            return c.depth
        expected = c.subsample * self.arrived / c.min_leaf_records
        return int(min(c.depth, max(1, math.floor(math.log2(max(expected, 2.0))))))

    def pool_nodes(self, tree, prep: dict) -> np.ndarray:
        """The local node of every pool record in ``tree``, routed once per round (kept in
        ``prep`` while the pool is unchanged)."""
        key = (id(tree), self.records_added, self._n, self.rounds)
        if prep.get("nodes_key") != key:
            prep["nodes_key"], prep["nodes"] = key, route_tree(tree, self.X)
        return prep["nodes"]

    def leaves_of(self, tree) -> np.ndarray:
        """The local leaf indices of a complete tree (its depth read from its size)."""
        if tree.feature.size == self.forest.max_nodes:
            return self.leaves
        depth = int(np.log2(tree.feature.size + 1)) - 1
        return complete_tree_layout(depth)[2]

    # the steps of a round, shared with the distributed party (models/boosting/sgbdt_party.py)
    def begin_round(self) -> dict:
        """Clipped gradients, per-record costs, the individual filter's step (which charges
        the records that continue) and the Poisson subsample."""
        c = self.config
        # the gradients and clip in one compiled pass (round_kernels), the numpy steps bit
        # for bit; a NaN gradient takes the numpy steps, which raise before any charge
        # each gradient clipped, then rounded to the round's public lattice (exact noise:
        # accounting/noise.py), so every released sum is an exact multiple of the step; the
        # costs are charged on these
        step = self.grad_step()
        g = self.score.copy() if c.loss == "squared" else sigmoid(self.score)
        if clip_gradients(g, self.y, math.floor(c.grad_clip / step) * step, step):
            g = self.gradients()
            np.clip(g, -c.grad_clip, c.grad_clip, out=g)
            g = noise.on_lattice(g, step, c.grad_clip)
        cost = self.costs.cost(g) if c.individual_filter else \
            np.full(len(self), self.costs.max_cost)
        # the filter's step (it charges exactly the records that continue), then the
        # Poisson subsample of those (never likelier than the subsample rate)
        cont, sampled, rows = self.filter.step_sample(
            cost, noise.uniforms(self.rng, len(self)), noise.sampling_threshold(c.subsample))
        return {"g": g, "cost": cost, "cont": cont, "sampled": sampled, "rows": rows}

    def retire_if_full(self) -> None:
        """Retire the oldest tree when ``max_trees`` are kept (post-processing: the pool
        forgets its contribution) — with ``retire_block`` > 1 the oldest block of trees, whose
        values leave the pool's scores with its slot of ``parts``: the forest then holds
        between ``max_trees - retire_block + 1`` and ``max_trees`` trees."""
        c = self.config
        if c.max_trees is None or len(self.forest) < c.max_trees:
            return
        self._retire_oldest()

    @property
    def arrived(self) -> int:
        """This generation's messages handed in so far: its pool records and its blanks
        (unlabeled records and dead letters, ``gen_blanks``, kept by the estimator). A public
        count; the learned records alone are not (how many messages were dead letters is
        the curator's)."""
        return self.records_added - self.generation_start + getattr(self, "gen_blanks", 0)

    def retire_young(self) -> None:
        """Retire this generation's young trees (those grown in its first
        ``warmup_records`` arrivals) over the :data:`YOUNG_FADE` arrivals after its young
        phase, oldest first and evenly: ``r`` arrivals after it at most
        ``(1 - r / YOUNG_FADE)`` of them are left (with ``retire_block``, whole blocks, each
        once all of it may go; the last may hold a few regular trees). Post-processing of
        public counts, as any retirement: the pool forgets their values and later rounds fit
        what they carried."""
        c = self.config
        arrived = self.arrived
        if c.warmup_records <= 0 or arrived < c.warmup_records:
            return
        serial = self.trees_retired + len(self.forest)   # this round's tree
        if self.young is None or self.young[0] != self.generation:
            self.young = [self.generation, self.gen_first, serial]
        _, first, end = self.young
        past = arrived - c.warmup_records
        left = math.ceil((end - first) * max(0.0, 1.0 - past / YOUNG_FADE))
        while self.trees_retired < end - left and len(self.forest):
            if left and self._oldest_size() > end - left - self.trees_retired:
                break   # a whole block would retire too early: it waits
            self._retire_oldest()

    def _oldest_size(self) -> int:
        """The trees :meth:`_retire_oldest` would retire now."""
        if self.blocks is None:
            return 1
        self._ensure_blocks()
        return self.blocks.oldest_block(first=self.trees_retired, n_trees=len(self.forest))[0]

    def _retire_oldest(self) -> None:
        """Retire the oldest tree, or with block sums the oldest block."""
        if self.blocks is None:
            self.forest.add_tree_values(self.score, 0, self.forest.apply(0, self.X), -1.0)
            self.forest.drop_oldest(1)
            self.trees_retired += 1
            return
        self._ensure_blocks()
        k, slot = self.blocks.oldest_block(first=self.trees_retired, n_trees=len(self.forest))
        self.score -= self.blocks.column(slot, self._n)
        self.blocks.clear(slot)
        self.forest.drop_oldest(k)
        self.trees_retired += k

    def noise_sigmas(self) -> list[float]:
        """Every noise level a gradient sum may be released with (leaf sums with and without
        split histograms in the round; the histograms at each number of levels)."""
        c = self.config
        return list(_noise_sigmas(self.calibration.sigma_leaf, c.r1, c.r_split,
                                  c.split_levels, self.n_features))

    def grad_step(self) -> float:
        """The public lattice step of the gradients (a power of two about ``2^-14`` of the
        smallest gradient noise; :func:`~dpstream.accounting.noise.common_step`)."""
        c = self.config
        return noise.common_step(_noise_sigmas(self.calibration.sigma_leaf, c.r1, c.r_split,
                                               c.split_levels, self.n_features))

    def leaf_noise(self, counts: np.ndarray | None, sums: np.ndarray, r2: float
                   ) -> tuple[np.ndarray | None, np.ndarray]:
        """DPLeaf's noise, exact: the integer counts on the lattice of the count noise, the
        sums (exact multiples of :meth:`grad_step`) on the gradients' lattice, each with
        discrete Gaussian noise at least as large as the continuous mechanism's."""
        c, sigma = self.config, self.calibration.sigma_leaf
        noisy_n = None
        if counts is not None:
            sc = sigma / math.sqrt(2 * c.r1)
            step_c = min(1.0, noise.lattice_step(sc, noise.GAUSS_BITS))
            noisy_n = noise.gaussian_noise_on_lattice(
                self.rng, noise.snap(counts, step_c), step_c, sc)
        step = self.grad_step()
        noisy_s = noise.gaussian_noise_on_lattice(self.rng, noise.snap(sums, step), step,
                                                  sigma / math.sqrt(2 * r2))
        return noisy_n, noisy_s

    def noisy_leaf_stats(self, tree, prep: dict) -> tuple[np.ndarray | None, np.ndarray]:
        """DPLeaf's releases for every leaf of ``tree`` (Alg. 4): the noisy count (dynamic leaf
        noise only; else ``None``) and the noisy gradient sum of the subsampled records."""
        c = self.config
        leaves = self.leaves_of(tree)
        n_leaves = leaves.size
        sampled = prep["sampled"]
        rows = prep.get("rows")
        if rows is None:
            rows = np.flatnonzero(sampled)
        counts, sums = leaf_counts_sums_rows(self.pool_nodes(tree, prep), int(leaves[0]), rows,
                                        prep["g"], n_leaves)
        # r2: the gradient share left to the leaves (all of 1 - r1 unless split histograms
        # were released in this round)
        r2 = 1.0 - c.r1 - prep.get("split_share", 0.0)
        return self.leaf_noise(counts if c.dynamic_leaf_noise else None, sums, r2)

    def leaf_values(self, noisy_n: np.ndarray | None, noisy_s: np.ndarray) -> np.ndarray:
        """Leaf values from the released statistics (post-processing), clamped to ``[-lr g*,
        lr g*]``: ``-lr s~ / max(lambda, n~)`` with ``leaf_lambda="max"``; with ``"add"``,
        ``-lr s~ / (n~ + lambda)`` and 0 where the noisy count ``n~`` is negative (a leaf the
        noise swamps moves nothing instead of a full step of random sign; the authors' code
        does this). Static leaf noise: ``-lr s~ / lambda``."""
        c = self.config
        if noisy_n is None:
            value = noisy_s / c.l2
        elif getattr(c, "leaf_lambda", "max") == "add":
            value = np.where(noisy_n < 0, 0.0, noisy_s / np.maximum(noisy_n + c.l2, c.l2))
        else:
            value = noisy_s / np.maximum(c.l2, noisy_n)
        return -c.learning_rate * np.clip(value, -c.grad_clip, c.grad_clip)

    def add_round_tree(self, tree, value: np.ndarray, prep: dict | None) -> None:
        """Add the round's tree with leaf ``value`` and move the pool's scores by it."""
        self._ensure_blocks()
        t, nodes = self.store_round_tree(tree, value, prep)
        # the pool's routing through this tree, done once (the same bits as adding
        # predict_tree's values: Forest.add_tree_values), to the scores and to the block
        # sums of the tree's slot
        column = _NO_COLUMN
        if self.blocks is not None:
            column = self.blocks.column(self.blocks.slot_of(self.trees_retired + t), self._n)
        f = self.forest
        base = t * f.max_nodes   # (t: its place, live)
        add_leaf_values(self.score, column, f.value[base:base + f.max_nodes],
                        np.asarray(nodes, dtype=np.int64))

    def store_round_tree(self, tree, value: np.ndarray,
                         prep: dict | None) -> tuple[int, np.ndarray]:
        """Add the round's tree to the forest with its leaf ``value`` (scalars; K-vectors in
        the multi-class engine); returns its index and every pool record's local node."""
        t = self.forest.add_tree(feature=tree.feature, threshold=tree.threshold,
                                 left=tree.left, value=np.zeros(tree.feature.size))
        if np.ndim(value) == 2:
            self.forest.set_vectors(t, self.leaves_of(tree), value)
        else:
            self.forest.set_values(t, self.leaves_of(tree), value)
        nodes = self.pool_nodes(tree, prep) if prep is not None else None
        if nodes is None:
            nodes = self.forest.apply(t, self.X)
        return t, nodes

    def end_round(self, tree, value: np.ndarray | None, prep: dict | None) -> dict:
        """Add ``tree`` with leaf ``value`` (``None``: an abandoned round, no tree), move the
        pool's scores, and let records that cannot afford another round go."""
        c = self.config
        if value is not None:
            self.add_round_tree(tree, value, prep)
        n_done = 0
        if prep is not None:
            cont, sampled = prep["cont"], prep["sampled"]
            self._last_round = (self.ids.copy(), cont, sampled, prep["cost"])
            floor = self.costs.min_cost if c.individual_filter else self.costs.max_cost
            if floor <= 0:  # static leaf noise: a zero gradient is free; drop at the next cost
                floor = float(self.costs.table[1])
            n_done = self.filter.count_exhausted(min_cost=floor)
            # spent records leave in batches (removal moves O(pool) data): until then the
            # filter refuses them every round, so they are never charged, sampled or used
            if n_done >= max(64, self._n // 100):
                self._remove(self.filter.exhausted(min_cost=floor))
                self.records_exhausted += n_done
            else:
                n_done = 0
        self.rounds += 1
        active = sampled_n = 0
        if prep is not None:
            active = int(prep["cont"].sum())
            sampled_n = prep["rows"].size if "rows" in prep else int(prep["sampled"].sum())
        return {"round": self.rounds, "active": active, "sampled": sampled_n,
                "exhausted": n_done}
