"""Window forests: tumbling disjoint windows under parallel composition (shared base).

:class:`WindowForestBase` cuts a stream into tumbling windows (by size or time, with warm-up
windows and a DP drift signal), deals each closed window's records into disjoint parts, one
per tree, and keeps the trees of the newest windows; subclasses implement
:meth:`WindowForestBase._train_window`. A consumer-group member reads a share of the stream
(:meth:`WindowForestBase.set_share`) and may hold a closed window until the other members'
releases arrive. :data:`WINDOW_PARAMS` holds the parameters the forests share;
:func:`window_params` builds each forest's table from it.

Why every record is epsilon-DP however many windows close, how predictions combine the trees,
drift generations, shares and held windows:
docs/window_forests.md#windows-and-parallel-composition.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from river import base

from ...accounting import BudgetLedger, as_generator, child_seed, noise
from ..drift import DPDriftSignal
from ..encoding import RecordEncoder, is_frame
from ..forest import Forest
from ..grid import FeatureGrid
from ..param_table import INPUT_POLICY, SCHEMA_DOC, Param, ParamTable, seed_param
from ..params import PrivateState, ShortRepr, check_real, warn_small_stream
from ..schema import require_schema
from .relevance import AttributeRelevance, owned_attributes
from .window_hold import HeldWindowMixin
from .window_stream import BLANK, UNLABELED, learn_stream, rows_from_state, rows_state
from .window_trees import WindowTree, leaf_proba, pack_trees, split_exact

__all__ = ["WindowForestBase", "WindowTree", "UNLABELED", "BLANK", "ATTRIBUTE_RULES",
           "leaf_proba", "pack_trees", "split_exact"]


# UNLABELED (from window_stream): the label code of an unlabeled record inside a window buffer

#: how a forest's nodes draw split attributes: from a DP relevance release, or uniformly
ATTRIBUTE_RULES = ("relevance", "uniform")

#: the rows the window forests share; each forest takes its own order and defaults
#: (:func:`window_params`). ``legacy``: what a checkpoint from before the row restores with
WINDOW_PARAMS = ParamTable([
    Param("epsilon", 1.0, "Budget of every (window, tree) part; every record lies in one, so by "
          "parallel composition it is the stream's epsilon.", "real", lo=0, lo_open=True),
    Param("n_trees", 2, "Trees per window, each on its own disjoint part of the window's "
          "records.", "integer", lo=1),
    Param("window_size", 2_000, "Records (labeled or not) per tumbling window, at least "
          "``n_trees``; ``None`` only with ``window_seconds``.", "integer", lo=1, none_ok=True),
    Param("max_windows", 10, "Windows whose trees are kept (older ones retire); ``None``: all.",
          "integer", lo=1, none_ok=True),
    seed_param(),
    Param("window_seconds", None, "Also close a window once a record arrives this many seconds "
          "after its first one.", "real", lo=0, lo_open=True, none_ok=True),
    Param("warmup", 250, "The k-th window of a drift generation closes at ``min(window_size, "
          "warmup * 2**k)`` records (at least ``n_trees``); ``None``: no warm-up.", "integer",
          lo=1, none_ok=True, legacy=None),
    Param("drift", True, "Watch a DP drift signal; a detected change starts a new generation "
          "whose first trained window retires the older ones.", "bool", legacy=False),
    Param("drift_share", 0.05, "With ``drift``: share of each record's epsilon spent on the "
          "drift signal.", "real", lo=0, hi=1, lo_open=True, hi_open=True, legacy=0.0),
    Param("drift_window", None, "With ``drift``: records per released window of the drift "
          "signal; ``None``: ``max(200, ceil(30 / epsilon_drift))``.", "integer", lo=1,
          none_ok=True),
    Param("min_tree_records", None, "A window trains at most as many trees as give each this "
          "many labeled records (at least one); ``None``: always ``n_trees``.", "integer",
          lo=1, none_ok=True, legacy=None),
    Param("attributes", "relevance", "How a node draws its split attribute: ``'uniform'`` (the "
          "paper) or ``'relevance'``, from a DP attribute-relevance release accumulated over "
          "the current concept's windows.", "choice", options=ATTRIBUTE_RULES, legacy="uniform"),
    Param("relevance_share", 0.2, "Share of each labeled record's tree budget spent on the "
          "relevance release.", "real", lo=0, hi=1, lo_open=True, hi_open=True, legacy=0.0),
    Param("relevance_floor", 0.3, "Share of the attribute draw kept uniform: every attribute "
          "keeps ``relevance_floor / F``.", "real", lo=0, hi=1, hi_open=True, legacy=0.3),
    Param("range_share", 0.1, "Share of a window's budget spent on a DP range of each numeric "
          "attribute, inside which the trees draw their split points; ``0``: the public "
          "domain.", "real", lo=0, hi=1, hi_open=True, legacy=0.0),
    Param("range_bins", 16, "Equal-width bins of a numeric attribute's public domain that the "
          "private range is made of.", "integer", lo=1, legacy=16),
    *INPUT_POLICY,
    Param("window_decay", 1.0, "Each kept window's vote weight is multiplied by this per window "
          "of age (public counts: post-processing); ``1``: every window alike.", "real", lo=0,
          hi=1, lo_open=True, legacy=1.0),
    Param("grid_share", 0.0, "Share of the first labeled window's tree budget spent on the DP "
          "feature grid (a released quantile map of each numeric feature); ``0``: no grid.",
          "real", lo=0, hi=1, hi_open=True, legacy=0.0),
    Param("grid_refresh", None, "Windows between grid releases (each window's own records); "
          "``None``: the first grid stays.", "integer", lo=1, none_ok=True, legacy=None),
], schema_doc=SCHEMA_DOC)


def window_params(names: str, *own: Param, **defaults: Any) -> ParamTable:
    """A forest's table: the rows ``names`` (space-separated, signature order) taken from
    ``own`` or else :data:`WINDOW_PARAMS`, with the forest's ``defaults``."""
    rows = {**{p.name: p for p in WINDOW_PARAMS}, **{p.name: p for p in own}}
    return ParamTable([rows[n] for n in names.split()],
                      schema_doc=SCHEMA_DOC).with_defaults(**defaults)


@dataclass
class _Window:
    trees: list[WindowTree]
    records: int
    labeled: int
    kind: str
    extra: dict = field(default_factory=dict)
    generation: int = 0          # the drift generation the window closed in
    # the attribute-relevance histograms this window released (noisy), for other members
    relevance: list | None = None
    # when a member first published it (Unix time; the union's order): a re-export after a
    # restart keeps it, so an old window never comes back as the newest
    published: float | None = None
    # grid releases before its trees grew: a forest scoring every window through one grid
    # retires the windows trained before it (their trees saw raw rows)
    grid_release: int = 0


class WindowForestBase(PrivateState, HeldWindowMixin, ShortRepr, base.Classifier):
    """Classifier over tumbling windows; subclasses turn one closed window into trees.

    Every record lies in exactly one window and one tree's part: pure ``epsilon``-DP per
    record for the whole stream by parallel composition (with ``drift``, ``epsilon_trees =
    epsilon - epsilon_drift`` on the trees). The window policy every subclass shares —
    warm-up windows, drift generations, window weights, a member's share and held windows —
    is in docs/window_forests.md#warm-up-drift-generations-and-window-weights.

    Examples
    --------
    A consumer-group member holds a closed window until it grows its trees, and reads a
    share of the stream:

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
    >>> model.set_share(0.5)
    >>> model.share, model._tree_cap()
    (0.5, 1)
    """

    #: the runner hands unlabeled records (``y`` null) to the model
    learns_unlabeled = True
    #: the subclass's parameters (:func:`window_params`)
    PARAMETERS: ParamTable
    _batch_trained = False
    # the rows' legacy values, for a state that lacks them without passing through
    # __setstate__ (a member from before the parameter: window_exchange.window_config)
    window_decay = 1.0
    grid_share = 0.0
    grid_refresh: int | None = None   # (a forest without the parameter: released once)
    _grid: FeatureGrid | None = None
    _grid_charge = 0.0
    _window_messages = 0    # messages of the window being trained (blanks included)
    #: cells of each numeric feature's grid histogram
    grid_cells = 32
    #: the least weight of the uniform histogram in the grid's shrinkage (post-processing)
    grid_smoothing = 0.03
    #: a group member's warm-up starts at this many records at least (times its share): at
    #: 125 x 1/3, three members on Agrawal scored 2.5 pp below their 1,000 x 1/3 (issue 64)
    member_warmup = 1000
    #: the fewest messages a window needs to release the grid (times a member's share): a
    #: grid from a 125-record warm-up window is noise and, for forests that score every
    #: window through one grid, could never be refreshed (young streams, issue 64)
    grid_min_records = 1000


    def export(self, path: Any) -> dict:
        """Write this model's public model file to ``path`` (an ONNX graph for a ``.onnx``
        path: the onnx extra): its kept windows as released
        (no record, no generator, no curator count), which ``dpstream.load_model(path)``
        reads into a predict-only estimator with this model's predictions
        (:mod:`dpstream.models.windows.public_windows`, docs/model_format.md). Returns the
        file's JSON object."""
        from ..onnx_export import export_file

        return export_file(self, path)

    def __init__(self, schema: Any, **params: Any):
        """``params``: every parameter of the subclass's :attr:`PARAMETERS` (a forest without
        ``min_tree_records`` or ``grid_refresh`` has ``None``)."""
        self.schema = require_schema(schema, type(self).__name__)
        for name, value in {"min_tree_records": None, "grid_refresh": None, **params}.items():
            setattr(self, name, value)
        self._window_trees: int | None = None   # trees of the window being trained
        self._check_params()
        self._encoder = RecordEncoder(schema, on_out_of_domain=self.on_out_of_domain,
                                      on_unknown=self.on_unknown)
        if self._encoder.classes is None:
            raise ValueError("a window forest classifies: the schema needs target classes")
        self._rng = as_generator(self.seed)
        self._ledger = BudgetLedger(total_epsilon=float(self.epsilon))
        self._buffer_X: list[list[float]] = []
        self._buffer_y: list[int] = []           # class index, or UNLABELED
        self._buffer_public: list[bool] = []     # public=True: a record that needs no privacy
        self._window_start: float | None = None  # arrival time of the open window's first record
        self._windows: list[_Window] = []
        self._serving: tuple[Forest, np.ndarray] | None = None
        self._last: tuple | None = None          # (x, copy of x, row): predict_one's encoding
        self.windows_closed = 0
        self.ledger_partitions = 0
        self.last_depth: int | None = None
        self.records_seen = 0
        self.records_trained = 0
        self.unlabeled_seen = 0
        self.public_seen = 0
        self.generation = 0          # drift generations started (0: none detected)
        self.generation_windows = 0  # windows closed in this generation (the warm-up step)
        self.windows_retired_by_drift = 0
        self._buffer_fed = False     # a record of the open window fed the drift signal
        self._training_epsilon: float | None = None
        self._drift: DPDriftSignal | None = None
        if self.drift:
            eps_drift = self.epsilon_drift    # exactly what the ledger charges
            self._drift = DPDriftSignal(
                eps_drift, self.drift_window if self.drift_window is not None
                else max(200, math.ceil(30.0 / eps_drift)),
                detector="page-hinkley", seed=child_seed(self.seed, 0))

    # --------------------------------------------------------------- params
    def _check_params(self) -> None:
        """The table's checks (``drift_share`` and ``drift_window`` only with ``drift``), then
        the checks that read several parameters."""
        self.PARAMETERS.check(self, skip=() if self.drift else ("drift_share", "drift_window"))
        if self.window_size is None:
            if self.window_seconds is None:
                raise ValueError("window_size may be None only with window_seconds set")
        elif self.window_size < self.n_trees:
            raise ValueError(f"window_size ({self.window_size}) must be >= n_trees "
                             f"({self.n_trees}): each tree needs its own records")
        if self.grid_refresh is not None and not self.grid_raw_trees:
            raise ValueError(f"grid_refresh needs trees kept in raw units; "
                             f"{type(self).__name__} scores every window through one grid")
        if self.warmup is not None and self.window_size is not None \
                and self.warmup < self.n_trees:
            raise ValueError(f"warmup ({self.warmup}) must be >= n_trees ({self.n_trees}): "
                             "each tree of the first window needs its own records")

    @property
    def epsilon_drift(self) -> float:
        """The drift signal's share of the budget (0 without ``drift``)."""
        return self._budget_split()[1] if self.drift else 0.0

    def _epsilon_rest(self) -> float:
        """``epsilon - epsilon_drift``: the trees' share of a stream record's budget."""
        return self._budget_split()[0]

    def _budget_split(self) -> tuple[float, float]:
        """``(trees, drift)`` with ``drift`` about ``drift_share * epsilon`` and ``trees +
        drift <= epsilon`` exactly in the decimal values the ledger adds (so a budget of 1.5
        reads 1.5, never 1.5000000000000002)."""
        return split_exact(self.epsilon, self.drift_share)

    @property
    def epsilon_trees(self) -> float:
        """What a window's trees spend per record: ``epsilon - epsilon_drift``, or the whole
        ``epsilon`` for a window none of whose records fed the drift signal (``learn_many``
        batches: their records spend nothing on it)."""
        if self._training_epsilon is not None:
            return self._training_epsilon
        fed = self._drift is not None and (self._drift.releases or self._drift.pending)
        return self._epsilon_rest() if fed else float(self.epsilon)

    @property
    def current_window_size(self) -> int | None:
        """Records the open window closes at: ``window_size``, or during a warm-up the
        ``warmup * 2**k``-th of this generation's windows (a function of public counts),
        times the member's :attr:`share` (never fewer than the window's trees); a member's
        warm-up starts at :attr:`member_warmup` at least."""
        warmup = self.warmup
        if warmup is not None and self.share < 1.0:
            warmup = max(warmup, self.member_warmup)
        if self.window_size is None or warmup is None:
            size = self.window_size
        else:
            size = min(self.window_size, warmup * 2 ** min(self.generation_windows, 40))
        if size is None or self.share >= 1.0:
            return size
        return max(self._scaled(size), self._tree_cap())

    # --------------------------------------------------------------- learning
    def learn_one(self, x: Mapping, y: Any, *, public: bool = False, t: float | None = None,
                  **kwargs) -> None:
        """Add one record to the open window; a full (or expired) window trains its trees.

        Parameters
        ----------
        x
            The record's features.
        y
            Its label, or ``None`` for an unlabeled record.
        public
            A record that needs no privacy (Jagannathan et al.'s non-private data). The window keeps
            the flag; a forest that has no use for it protects such a record like any other, which
            is sound and only conservative.
        t
            Arrival time in seconds (event time) for time-based windows; default: now.

        A bad record raises :class:`~dpstream.models.encoding.InvalidRecordError` and changes
        nothing.
        """
        last, self._last = self._last, None
        scores = None
        if last is not None and last[0] is x and last[1] == x:
            row, scores = last[2], last[3]   # predict_one just validated and scored it
        else:
            row = self._encoder._row(x)
        label = UNLABELED if y is None else int(self._encoder.encode_target_one(y))
        loss = None
        if self._drift is not None:   # an unlabeled record counts in the drift window: loss 0
            loss = 0.0
            if label != UNLABELED:
                if scores is None:
                    scores = self._score_row(np.array(row))
                loss = float(int(scores.argmax()) != label)
        if self.window_seconds is not None:
            now = time.time() if t is None else float(t)
            if not math.isfinite(now):
                raise ValueError(f"t must be a finite time in seconds, got {t!r}")
            if self._buffer_y and now - self._window_start >= self.window_seconds:
                self._close_window()
            if not self._buffer_y:
                self._window_start = now
        self._buffer_X.append(row)
        self._buffer_y.append(label)
        self._buffer_public.append(bool(public))
        self.records_seen += 1
        self.unlabeled_seen += label == UNLABELED
        self.public_seen += bool(public)
        if loss is not None:
            # fed after the record joined the open window: a release that detects a change
            # closes a window holding every record whose loss it read (members hand off
            # exactly the records of closed windows, see ``window_exchange``)
            self._buffer_fed = True
            if self._drift.update(loss):
                self._new_generation()
                return
        size = self.current_window_size
        if size is not None and len(self._buffer_y) >= size:
            self._close_window()

    def advance(self, n: int = 1) -> None:
        """``n`` messages of the stream that this model does not learn (invalid, a duplicate,
        or for a forest that learns labeled records only, unlabeled): the public schedule
        advances over them as over records. Each takes a place in the open window (a blank
        row, dropped before training) and in the drift signal's window (no loss), so window
        closes, drift releases and every published count depend on message counts only.

        Examples
        --------
        >>> from dpstream.models import MedianForestClassifier
        >>> schema = {"features": {"x": {"type": "numeric", "min": 0, "max": 1}},
        ...           "target": {"type": "binary", "values": [False, True]}}
        >>> model = MedianForestClassifier(schema=schema, n_trees=2, window_size=10,
        ...                                warmup=None, drift=False, seed=0)
        >>> for i in range(7):
        ...     model.learn_one({"x": i / 10}, i % 2 == 0)
        >>> model.advance(3); model.windows_closed, model.privacy_report()["windows"][0]["records"]
        (1, 10)
        """
        if self.window_seconds is not None:   # time windows close on arrival times
            n = 0 if self._drift is None else n
        blank = [0.0] * self._encoder.n_columns
        while n > 0:
            size = self.current_window_size
            take = n if size is None else min(n, max(1, size - len(self._buffer_y)))
            if self._drift is not None:
                take = min(take, self._drift.window - self._drift.pending)
            n -= take
            if self.window_seconds is None:
                self._buffer_X.extend([blank] * take)
                self._buffer_y.extend([BLANK] * take)
                self._buffer_public.extend([False] * take)
            if self._drift is not None:
                self._buffer_fed = self._buffer_fed or self.window_seconds is None
                if self._drift.advance(take) is not None:
                    self._new_generation()
                    continue
            if size is not None and len(self._buffer_y) >= size:
                self._close_window()

    def learn_stream(self, X: Any, y: Any, *, public: Any = None, t: Any = None) -> None:
        """Many stream records, learned exactly as :meth:`learn_one` one at a time would
        learn them (same windows, drift releases and draws), with encoding and prequential
        scoring vectorised (:func:`~dpstream.models.windows.window_stream.learn_stream`). ``public``
        and ``t``: one value per record, or ``None``. Unlike a loop of ``learn_one``, a bad
        record raises before any record of the batch is learned."""
        learn_stream(self, X, y, public, t)

    def stream_room(self) -> tuple[int, int | None]:
        """Where the next round can happen: ``(records, labeled)`` — the records the open
        window still takes before it closes, and the labeled records the drift signal still
        takes before its next release (the only time it can detect a change; ``None``
        without drift). Until then the ensemble cannot change (public counts; for
        ``window_size`` windows, not time windows)."""
        room = max(1, (self.current_window_size or 1) - len(self._buffer_y))
        return room, None if self._drift is None else self._drift.window - self._drift.pending

    def learn_many(self, X: Any, y: Any, public: Any = False) -> None:
        """Batch mode: the batch (with anything buffered) is one window, trained now.

        ``y`` may hold ``None`` for unlabeled rows; ``public`` is one flag for the whole batch
        or one per row (see :meth:`learn_one`).
        """
        Xe = self._encoder.encode_many(X)
        labels = list(y)
        if Xe.shape[0] != len(labels):
            raise ValueError(f"X has {Xe.shape[0]} rows but y has {len(labels)} labels")
        flags = np.broadcast_to(np.asarray(public, dtype=bool), (len(labels),)) \
            if np.ndim(public) == 0 else np.asarray(public, dtype=bool)
        if flags.shape != (len(labels),):
            raise ValueError(f"public has {flags.size} flags but y has {len(labels)} labels")
        known = [v for v in labels if v is not None]
        codes = iter(int(c) for c in self._encoder.encode_targets(known)) if known else iter(())
        ye = [UNLABELED if v is None else next(codes) for v in labels]
        self._buffer_X.extend(Xe.tolist())
        self._buffer_y.extend(ye)
        self._buffer_public.extend(flags.tolist())
        self.records_seen += len(ye)
        self.unlabeled_seen += len(ye) - len(known)
        self.public_seen += int(flags.sum())
        self._batch_trained = True   # batch mode: no small-stream warning
        if self._buffer_y:
            self._close_window()
            self.grow_held()   # batch mode trains now, held or not

    def _close_window(self) -> None:
        X = np.array(self._buffer_X, dtype=np.float64).reshape(len(self._buffer_X), -1)
        y = np.array(self._buffer_y, dtype=np.int64)
        public = np.array(self._buffer_public, dtype=bool)
        self._buffer_X, self._buffer_y, self._buffer_public = [], [], []
        self._window_messages = int(y.size)   # the public size: blanks (advance) included
        if (y == BLANK).any():
            keep = y != BLANK
            X, y, public = X[keep], y[keep], public[keep]
        self._window_start = None
        fed, self._buffer_fed = self._buffer_fed, False
        self.grow_held()   # at most one window is held (held windows: window_forest)
        self._training_epsilon = self._epsilon_rest() if fed else float(self.epsilon)
        try:
            grid = 0.0
            if self._grid_due() and self.grid_share > 0 \
                    and not self._batch_trained \
                    and getattr(self, "privacy", None) != "labels_only":
                # a stream feature: a learn_many batch is one window at the paper's settings;
                # a group member releases its own from its first window (share x warm-up):
                # without one it scored 1-2 pp below one process (benchmark notes, issue 62);
                # label-only privacy: the features are public, its splits read them exactly
                self._training_epsilon, grid = split_exact(self._training_epsilon,
                                                           self.grid_share)
                self._grid_charge = grid
            if self._holds(y):
                # a held window releases its grid when its trees grow (grow_held): one
                # dropped untrained (drop_held) published none, and no earlier window's
                # export carries a grid from its records
                self._hold_window(self._gridded(X), y, public, fed,
                                  grid_rows=X if grid else None)
            else:
                if grid:
                    self._release_grid(X[y != UNLABELED], grid, int(self.windows_closed),
                                       self._window_messages)
                self._train_closed(self._gridded(X), y, public, fed)
        finally:
            self._training_epsilon = None
            self._grid_charge = 0.0

    def _grid_due(self) -> bool:
        """Whether this window releases the grid: the first window, and with
        ``grid_refresh`` again once that many windows have closed since the last release
        (public counts)."""
        if self._window_messages < self._grid_floor():
            return False
        if self._grid is None:
            return True
        return (self.grid_refresh is not None
                and self.windows_closed - self._grid_info["window"] >= self.grid_refresh)

    def _grid_floor(self) -> int:
        """:attr:`grid_min_records` for this model (times a member's :attr:`share`)."""
        floor = int(self.grid_min_records)
        return floor if self.share >= 1.0 else max(1, self._scaled(floor))

    def _grid_releases(self) -> int:
        return 0 if self._grid is None else int(self._grid_info.get("releases", 1))

    def _release_grid(self, X: np.ndarray, epsilon: float, window: int,
                      messages: int) -> None:
        """Release the feature grid (:class:`~dpstream.models.grid.FeatureGrid`) from the
        labeled rows ``X`` of window ``window`` (``messages``: its size, a public count),
        before its trees, at ``epsilon``: the window's ``grid_share`` of its tree budget,
        charged to each of its partitions (every labeled record is in one) when the window
        is charged; its trees get the rest."""
        grid = FeatureGrid.release(X, self._encoder.numeric_columns(), epsilon=epsilon,
                                   cells=self.grid_cells, smoothing=self.grid_smoothing,
                                   rng=self._rng)
        releases = self._grid_info.get("releases", 0) if self._grid is not None else 0
        self._grid = grid
        self._grid_info = {"epsilon": epsilon, "window": int(window),
                           "records": int(messages), "releases": releases + 1}

    #: trees with thresholds (WindowTree) take them back to raw units after training, so
    #: they score raw rows; other forests score rows through the grid (:meth:`_grid_rows`)
    grid_raw_trees = True

    def _grid_rows(self, X: np.ndarray) -> np.ndarray:
        """Rows to score: through the grid for a forest whose trees live on it."""
        if self._grid is None or self.grid_raw_trees:
            return X
        return self._grid.forward(X)

    def _gridded(self, X: np.ndarray) -> np.ndarray:
        """Encoded rows through the feature grid, if one was released (every window the
        model trains after it learns and scores mapped rows); ``X`` itself otherwise."""
        return X if self._grid is None else self._grid.forward(X)

    def _grid_report(self) -> dict:
        if self._grid is None:
            return {"enabled": self.grid_share > 0, "released": False}
        return {"enabled": True, "released": True, **self._grid_info,
                **self._grid.report(list(self._encoder._numeric)),
                "guarantee": "one histogram per numeric feature over the window's labeled "
                             "records, Laplace noise of scale F / epsilon per cell (each "
                             "record in one cell of each of the F histograms); the monotone "
                             "map and the quantiles are post-processing"}

    def _charge_closed(self, fed: bool) -> None:
        """Charge the closing window's ledger partitions (window ``windows_closed``)."""
        w = self.windows_closed
        charges = self._window_charges()
        for part, eps, label in charges:
            self._ledger.charge(eps, partition=f"window-{w}/{part}", label=label)
        if fed:   # its records' prequential errors fed the drift signal
            for part in dict.fromkeys(part for part, _, _ in charges):
                self._ledger.charge(self.epsilon_drift, partition=f"window-{w}/{part}",
                                    label="DPDriftSignal")
        if self._grid_charge:   # this window's labeled records released the grid
            for part in dict.fromkeys(part for part, _, _ in charges):
                self._ledger.charge(self._grid_charge, partition=f"window-{w}/{part}",
                                    label="FeatureGrid")
        self.ledger_partitions += len(dict.fromkeys(part for part, _, _ in charges))

    def _train_closed(self, X: np.ndarray, y: np.ndarray, public: np.ndarray,
                      fed: bool, held: dict | None = None) -> None:
        """Train a closed window; a ``held`` one (:mod:`~dpstream.models.windows.window_forest`,
        held windows) was charged and released its relevance when it closed."""
        # every window trains, with or without labels (whether it has any is content);
        # its size is its messages (blanks included): a public count
        messages = (self._window_messages if held is None
                    else int(held.get("messages", held["y"].size)))
        self._window_trees = self.trees_for(messages)
        if held is None:
            self._charge_closed(fed)
        rel = getattr(self, "_relevance", None)
        releases = None if rel is None else rel.releases
        if held is not None:
            self._prereleased = True   # (_release_relevance: released at the close)
        try:
            trees, kind, extra = self._train_window(X, y, public)
            if self._grid is not None and self.grid_raw_trees:
                for tr in trees:   # the grid is monotone: the same trees on raw rows
                    tr.threshold = self._grid.raw_thresholds(tr.feature, tr.threshold)
        finally:
            self.__dict__.pop("_prereleased", None)
        self.last_depth = max((tr.depth for tr in trees), default=None)
        released = (held["relevance"] if held is not None
                    else rel.last_release if rel is not None and rel.releases != releases
                    else None)
        if self.share < 1.0:   # the union counts the window as this share of a whole one
            extra = {**extra, "share": self.share}
        # records / labeled: the window's messages (public counts; the vote weight)
        self._windows.append(_Window(trees=trees, records=messages, labeled=messages, kind=kind,
                                     extra=extra, generation=self.generation,
                                     relevance=released, grid_release=self._grid_releases()))
        old = [win for win in self._windows if win.generation < self.generation]
        if old and trees:   # the new concept has a model: the old concept's windows retire
            self._windows = [win for win in self._windows if win.generation >= self.generation]
            self.windows_retired_by_drift += len(old)
        if not self.grid_raw_trees and trees and self._grid is not None:
            # windows grown before the grid scored raw rows; every window is now scored
            # through it, so they retire (post-processing, as any retirement)
            now = self._grid_releases()
            self._windows = [win for win in self._windows if win.grid_release == now]
        if self.max_windows is not None and len(self._windows) > self.max_windows:
            self._windows.pop(0)                 # retiring trees is post-processing
        if held is None:   # (a held window stepped the warm-up when it closed)
            self.generation_windows += 1
        self._serving = None
        self.windows_closed += 1
        self.records_trained += int(y.size)
        self._close_retired_partitions()

    def _close_retired_partitions(self) -> None:
        """Close the ledger partitions (``window-N/PART``) of windows that no longer vote:
        their spend stays in the ledger's maximum (the same guarantee), their names go (a
        stream runs for months). Window numbers are never reused; a held window's is open."""
        first = self.windows_closed - len(self._windows)
        for name in self._ledger.open_partitions:
            head = name.partition("/")[0]
            if head.startswith("window-") and head[7:].isdigit() and int(head[7:]) < first:
                self._ledger.close(name)

    def _window_charges(self) -> list[tuple[str, float, str]]:
        """``(partition, epsilon, label)`` charged when a window with labels closes.

        By default one partition per tree: each (window, tree) part's mechanisms spend
        ``epsilon`` on its own records only. A forest whose trees share records overrides this.
        """
        return [(f"tree-{t}", self.epsilon_trees, type(self).__name__)
                for t in range(self._window_trees or self.n_trees)]

    def _new_generation(self) -> None:
        """The drift signal saw the error rise (a DP release: what follows is
        post-processing). The open window closes now (its records are trained once, as
        always); the warm-up restarts, and the old concept's windows keep serving until the
        first window of the new generation has trees, then retire."""
        if self._buffer_y:
            self._close_window()
        self.grow_held()   # with the old concept's evidence, before it is reset
        self.generation += 1
        self.generation_windows = 0
        if getattr(self, "_relevance", None) is not None:   # the old concept's evidence
            self._relevance.reset()
            self.__dict__.pop("_foreign_relevance", None)    # (other members' included)
            self.__dict__.pop("_relevance_pending", None)    # unreleased: dropped

    def _train_window(self, X: np.ndarray, y: np.ndarray,
                      public: np.ndarray) -> tuple[list[WindowTree], str, dict]:
        """Trees for one closed window (``y == UNLABELED`` marks unlabeled rows, ``public``
        the records that need no privacy)."""
        raise NotImplementedError

    def trees_for(self, n_labeled: int) -> int:
        """Trees a window with ``n_labeled`` labeled records (a public count) trains:
        ``n_trees`` (times a member's :attr:`share`), or with ``min_tree_records`` as many
        as give each tree that many records (at least one, at most that): a small warm-up
        window trains a few trees worth having rather than ``n_trees`` starved ones."""
        cap = self._tree_cap()
        if self.min_tree_records is None:
            return cap
        return int(min(cap, max(1, n_labeled // self.min_tree_records)))

    def deal(self, n: int, parts: int | None = None) -> list[np.ndarray]:
        """A random partition of ``range(n)`` into ``parts`` (default: the window's trees)
        disjoint parts; data-independent."""
        k = parts or self._window_trees or self.n_trees
        return np.array_split(noise.permutation(self._rng, n), k)

    # ------------------------------------------------------------- predicting
    def _serve(self) -> tuple[Forest, np.ndarray]:
        """All kept trees in one Forest, plus their counts indexed by global node.

        ``_serving`` caches what prediction needs from the kept windows; it is dropped whenever
        a window closes or retires, and when pickling. Forests with other trees keep their own
        merged tables there."""
        if self._serving is None:
            self._serving = pack_trees([tr for win in self._windows for tr in win.trees],
                                       len(self._encoder.classes),
                                       [wt for win, wt in zip(self._windows,
                                                              self.window_weights(), strict=True)
                                        for _ in win.trees])
        return self._serving

    def window_weights(self) -> list[float]:
        """The vote weight of each kept window's trees: proportional to the window's
        labeled records (public: a count), so the small warm-up windows do not outvote the
        full ones, times ``window_decay`` to the power of the window's age in windows (0
        for the newest): recent windows count more on a drifting stream. Both are public
        counts, so the weights are post-processing."""
        sizes = [max(1, win.labeled) for win in self._windows]
        top = max(sizes, default=1)
        d, last = float(self.window_decay), len(sizes) - 1
        return [n / top * d ** (last - i) for i, n in enumerate(sizes)]

    def _scores(self, X: np.ndarray) -> np.ndarray:
        """Summed leaf class distributions over every kept tree, shape ``(rows, classes)``."""
        forest, counts = self._serve()
        if len(forest) == 0:
            return np.zeros((X.shape[0], counts.shape[1]))
        return counts[forest.nodes(X)].sum(axis=1)

    def _scores_one(self, x: Mapping) -> np.ndarray:
        """Scores of one record. The encoded row is kept as an array: :meth:`learn_one` of
        this record buffers it, and a closing window stacks arrays instead of converting
        lists (the same values; a checkpoint still stores lists)."""
        row = self._encoder._row(x)      # validates even with no trees: a bad record is an error
        arr = np.fromiter(row, np.float64, len(row))
        scores = self._score_row(arr)
        self._last = (x, dict(x), arr, scores)   # learn_one of this record reuses both
        return scores

    def _score_row(self, row: np.ndarray) -> np.ndarray:
        """:meth:`_scores` of one encoded row (subclasses with other trees override both)."""
        forest, counts = self._serve()
        if len(forest) == 0:
            return np.zeros(counts.shape[1])
        return counts.take(forest.nodes_one(row), axis=0).sum(axis=0)

    def predict_proba_one(self, x: Mapping, **kwargs) -> dict:
        s = np.maximum(self._scores_one(x), 0.0)
        classes = self._encoder.classes
        total = s.sum()
        if total <= 0:   # no trees yet (or nothing positive): the public uniform prior
            return {c: 1.0 / len(classes) for c in classes}
        return {c: float(v / total) for c, v in zip(classes, s, strict=True)}

    def predict_one(self, x: Mapping, **kwargs) -> Any:
        return self._encoder.classes[int(self._scores_one(x).argmax())]

    def predict_many(self, X: Any) -> Any:
        scores = self._scores(self._encoder.encode_many(X))
        out = np.array(self._encoder.classes, dtype=object).take(np.argmax(scores, axis=1))
        if is_frame(X):
            import pandas as pd
            return pd.Series(out, index=X.index)
        return out

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_serving"] = None          # rebuilt on demand from the windows
        state["_last"] = None
        state["_buffer_X"] = rows_state(self._buffer_X)
        return state

    def __setstate__(self, state: dict) -> None:
        if "_buffer_public" not in state:     # a checkpoint from before public flags were kept
            state["_buffer_public"] = [False] * len(state["_buffer_y"])
        if "drift" not in state:   # from before warm-up and drift: the old fixed windows
            state.update(_drift=None, generation=0, generation_windows=0,
                         windows_retired_by_drift=0)
        # older checkpoints: no drift signal (nothing fed), no small windows' tree counts
        # (min_tree_records: also where it is not a parameter)
        for name, default in (("_buffer_fed", False), ("_training_epsilon", None),
                              ("min_tree_records", None), ("_window_trees", None)):
            state.setdefault(name, default)
        if "attributes" not in state and "_relevance" not in state:
            state["_relevance"] = None   # from before relevance: the papers' uniform attributes
        # a parameter from after the checkpoint: the table's value (its row's ``legacy``)
        self.PARAMETERS.fill(state)
        if isinstance(state.get("_buffer_X"), np.ndarray):   # (older checkpoints: lists)
            state["_buffer_X"] = rows_from_state(state["_buffer_X"], len(state["_buffer_y"]))
        self.__dict__.update(state)
        for win in self._windows:   # from before grid stamps: grown on the grid they score by
            win.__dict__.setdefault("grid_release", self._grid_releases())

    # ----------------------------------------------------------------- report
    @property
    def n_trees_kept(self) -> int:
        return sum(len(w.trees) for w in self._windows)

    @property
    def training_rounds(self) -> int:
        """Closed windows, held ones included (the runner checkpoints after each when it
        publishes predictions; a member publishes a held window's relevance)."""
        return self.windows_closed + self.__dict__.get("windows_held", 0)

    def _window_policy(self) -> str:
        warm = (f"warm-up windows of {self.warmup}, {2 * self.warmup}, {4 * self.warmup}, ... "
                f"records up to {self.window_size} (restarted by each drift generation)"
                if self.warmup is not None and self.window_size is not None
                else f"windows of {self.window_size} records")
        member = (f"; as a member reading {self.share:.4g} of the stream, windows and trees "
                  f"of {self.share:.4g} times those sizes" if self.share < 1.0 else "")
        return (f"{warm}{member}; every record in exactly one window and one tree's part "
                f"(parallel composition: epsilon_trees per record); the newest "
                f"{self.max_windows} windows vote")

    def _drift_report(self) -> dict:
        out = {"enabled": self._drift is not None, "generation": self.generation,
               "windows_retired": self.windows_retired_by_drift}
        if self._drift is not None:
            out.update(self._drift.report())
            out["guarantee"] = (
                "each labeled record's prequential 0/1 error is in exactly one released window "
                "(Laplace, sensitivity 1): epsilon_drift-DP per record; detection, closing the "
                "open window and retiring the old concept's windows are post-processing")
        return out

    def _report_base(self) -> dict:
        if self.windows_closed and not self._batch_trained:   # a small stream warns
            warn_small_stream(self, self.records_seen, self.epsilon, stacklevel=4)
        drift_spent = self.epsilon_drift if (self._drift is not None
                                             and self._drift.releases) else 0.0
        return {
            # per record: its window's trees and (stream records) the drift signal, both in
            # the ledger's partition of its window; records of the open window have spent
            # on the drift signal only
            "epsilon": max(self._ledger.spent if self.ledger_partitions else 0.0, drift_spent),
            "epsilon_budget": float(self.epsilon),
            "epsilon_trees": self.epsilon_trees,
            "epsilon_drift": self.epsilon_drift,
            "delta": 0.0,
            "window_policy": self._window_policy(),
            **({"member_share": self.share} if self.share < 1.0 else {}),
            "drift": self._drift_report(),
            "attributes": self._attributes_report(),
            "feature_grid": self._grid_report(),
            "windows_closed": self.windows_closed,
            "windows_kept": len(self._windows),
            "trees": self.n_trees_kept,
            "records_seen": self.records_seen,
            "records_learned": self.records_trained,
            "records_pending": len(self._buffer_y),
            **({"records_held": self.held_records} if self.held_records else {}),
            "unlabeled_seen": self.unlabeled_seen,
            "public_seen": self.public_seen,
            "ledger_partitions": self.ledger_partitions,
        }


    # --------------------------------------------------- a member's share of the stream
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
        union of every member's windows (:class:`~dpstream.models.windows.window_exchange.
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
        partitions own (:func:`~dpstream.models.windows.relevance.owned_attributes`), so the group
        releases each attribute about once per window, as one process does; without them,
        every attribute (one process).

        >>> from dpstream.models import MedianForestClassifier
        >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
        ...           "target": {"type": "binary", "values": [False, True]}}
        >>> model = MedianForestClassifier(schema=schema, n_trees=5, window_size=10_000,
        ...                                warmup=1000)
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

    # ------------------------------------------------ attribute-relevance evidence
    def _setup_relevance(self) -> None:
        """Create the accumulated relevance evidence
        (:class:`~dpstream.models.windows.relevance.AttributeRelevance`) of a subclass that
        offers ``attributes`` (its table checked them with the other parameters)."""
        enc = self._encoder
        self._relevance = AttributeRelevance(enc.numeric_columns(), enc.categorical_columns(),
                                             len(enc.classes), floor=self.relevance_floor) \
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
