"""The S-GBDT estimators' parameters: the section both docstrings share (numpydoc) and
their validation into the engine's configuration."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...accounting import ACCOUNTANTS
from ..encoding import check_input_policy
from ..params import check_integer, check_real, check_small_delta
from .sgbdt_engine import SGBDTConfig

__all__ = ["CLASS_DEFAULTS", "PARAMS_DOC", "resolved", "validate_config"]

#: the classifier's defaults of the parameters it leaves ``None``, as (binary, three or more
#: classes): binary streams were tuned on river's Agrawal streams, K classes on its Waveform,
#: LED and RandomRBF streams (docs/sgbdt.md, "Multi-class S-GBDT")
CLASS_DEFAULTS = {"round_size": (32, 16), "split_levels": (1, 0),
                  "min_leaf_records": (10.0, 10.0), "warmup_rounds": (400, 0)}


def resolved(est: Any, name: str) -> Any:
    """Parameter ``name`` of ``est``, a classifier's ``None`` replaced by its default for
    the schema's class count (:data:`CLASS_DEFAULTS`)."""
    value = getattr(est, name)
    if value is None and name in CLASS_DEFAULTS:
        binary, multi = CLASS_DEFAULTS[name]
        return multi if len(est._encoder.classes or ()) > 2 else binary
    return value

#: the parameter section both estimators' docstrings share
PARAMS_DOC = """
    Parameters
    ----------
    schema
        The public schema (a ``Schema``, the equivalent dict, or a schema file path): feature
        domains and the label's range or classes. Nothing is read from the data.
    epsilon
        Total privacy budget (epsilon_init + epsilon_trees), > 0.
    delta
        delta of the (epsilon, delta) guarantee (the paper's delta_trees), in (0, 1) and below
        1e-3 (a larger delta raises ``ValueError`` unless ``allow_large_delta``).
    n_trees
        T_regular: the rounds a worst-case record can afford; sets sigma and alpha-hat (Alg. 7).
    extra_trees
        T_extra: further rounds of batch training (``learn_many``) for records with budget left.
    depth
        Depth d of each random complete tree (2**d leaves).
    learning_rate
        Shrinkage of each tree's leaf values.
    subsample
        gamma, the Poisson subsampling rate of each round.
    grad_clip
        g*, the clipping bound of the gradients (squared loss: on labels scaled to [-1, 1]).
    label_clip
        m*, the clipping bound of DPInitScore (regression: on scaled labels; classification:
        the largest |initial log-odds|). ``None``: 1.0 for regression, 3.0 for classification.
    init_share
        Share of epsilon spent on the initial score (epsilon_init = init_share * epsilon). It
        is charged in the individual filter: records that take part in no initial-score
        release spend it on rounds instead.
    leaf_noise_split
        r1, the share of the leaf noise on the leaf count (r2 = 1 - r1 on the gradient sum).
    l2
        lambda: the noisy leaf count is floored at lambda (value = s~ / max(lambda, n~)).
    round_size
        Streaming: one round (one tree) per this many new records (a public count). The
        default 32 spends the budget on streams from a few thousand records up: with the
        individual filter a well-fitted record pays little per round, so frequent rounds are
        what uses its budget before it leaves (measured in ``docs/sgbdt.md``). With
        ``pool_rounds`` this is the shortest interval. The classifier's ``None``: 32 for two
        classes, 16 for three or more (:data:`CLASS_DEFAULTS`).
    warmup_rounds
        Streaming: the rounds of a young generation. While ``ceil(a / warmup_rounds)`` is
        below ``round_size`` (``a``: this generation's arrivals, a public count) a round comes
        every ``ceil(a / warmup_rounds)`` arrivals — every arrival at first — so the first
        hundred records already train a model and each doubling of the stream gets about
        ``warmup_rounds`` rounds until the regular schedule takes over (at ``round_size *
        warmup_rounds`` arrivals). The filter charges each round as any other, so a young
        record spends its budget where it helps most: on the young model. The same schedule
        restarts with each drift generation. ``0``: ``round_size`` from the first arrival
        (the schedule before young streams were measured, ``docs/sgbdt.md``, "Young
        streams"). The classifier's ``None``: 400 for two classes, 0 for three or more (the
        multi-class streams lost up to 3 pp with it); the regressor's default is 50.
    warmup_records
        Streaming, with ``warmup_rounds``: a generation's first this-many arrivals are its
        young phase. Its rounds follow ``warmup_rounds``; once it has passed, the trees grown
        in it retire over the next 6,400 arrivals (post-processing), oldest first: a young
        pool's trees are noisy, and kept they cost a long stream 2-4 pp.
    pool_rounds
        Streaming: rounds space out as the pool can grow. A round comes every
        ``max(round_size, ceil(min(a, max_active) / pool_rounds))`` arrivals, ``a`` being the
        arrivals of this generation (public counts): every ``round_size`` on a young stream
        (up to 12,800 arrivals at the defaults), then sparser, until a full pool gets one
        every ``max_active / pool_rounds`` arrivals (250 at the defaults). So a record that
        stays until it is evicted takes part in about ``pool_rounds`` rounds, and the rounds'
        work per arrival (a round works on the whole pool) stays bounded on an endless
        stream. ``None``: one round every ``round_size`` arrivals however long the stream
        (the two are measured against each other in ``docs/sgbdt.md``).
    drift
        ``True``: adapt to concept drift under DP. Each record's prequential loss (before it is
        learned) enters one window of ``drift_window`` records; each window's loss sum is
        released with Laplace noise (:class:`~dpstream.models.drift.DPDriftSignal`, epsilon
        ``drift_share * epsilon`` per record by parallel composition), a Page-Hinkley test on
        the noisy rates (post-processing) detects a rise, and a detected change starts a new
        generation: every tree retires, records older than the last window leave the pool, and
        a fresh DP initial score is fitted on records that took part in none.
        ``learn_many`` (batch training) does not feed the signal.
    drift_share
        Share of epsilon spent on the drift signal (only when ``drift``).
    drift_window
        Records per released window of the drift signal. ``None`` (default): ``max(200,
        ceil(30 / epsilon_drift))`` — 600 at epsilon 1 — so the noisy error rate keeps a
        standard deviation near 0.07 whatever the budget (smaller windows at a small budget
        raise false alarms; larger ones react later).
    min_leaf_records
        Streaming: while few records have arrived, trees are shallower — the largest depth
        (at most ``depth``) whose leaves expect this many Poisson-sampled records of this
        generation's arrivals (messages). ``0`` turns it off (always ``depth``). The
        classifier's ``None``: 10 (it was 20 for two classes before the young phase).
    max_active
        Streaming: records that arrived more than this many arrivals ago leave the active
        pool (an age, a public count — not the pool's size, which depends on how many other
        records spent their budgets; see ``docs/sgbdt.md``), so the pool never holds more.
        With the individual filter a well-fitted record pays little per round and may stay
        for thousands of rounds, so this cap is what bounds memory on an endless stream
        (default 100,000 records; about 0.9 KB each for Adult's 107 encoded columns).
    max_trees
        Streaming: the most trees kept; a round beyond it first retires the oldest tree (the
        pool's scores drop its contribution, so later rounds fit what it carried). Retiring is
        post-processing and costs no privacy; it keeps prediction and round time flat on an
        endless stream. ``None``: unbounded. Must be at least ``n_trees + extra_trees``.
    retire_block
        With ``max_trees``: trees retire in blocks of this many, the oldest block when
        ``max_trees`` are kept, so the forest holds ``max_trees - retire_block + 1`` to
        ``max_trees`` trees. Each pool record keeps one sum of tree values per block, so a
        block leaves the pool's scores by a subtraction, not a route of the pool through each
        retired tree (docs/sgbdt.md, "Trees retire in blocks"). ``None`` (default):
        ``max_trees // 10`` (at least 1); 1 retires one tree per round, as before.
    accountant
        ``"tight"`` (exact subsampled-Gaussian RDP, default) or ``"zhu-wang"`` (the paper's).
    dynamic_leaf_noise
        ``True``: DLNS (noisy count and sum); ``False``: static leaf noise (sum / lambda).
    individual_filter
        ``True``: each record pays its own round cost (Theorem 23) and keeps training until its
        budget is spent; ``False``: every record pays the worst case and trains n_trees rounds.
    numeric_weight
        r: the weight of a numeric feature when a split feature is drawn (categorical: 1).
    cyclical_features
        ``True``: tree t splits only on feature t mod (number of features), so the ensemble is
        an additive model of one-feature step functions (public, data-independent choice).
    split_levels
        ``0`` (regressor default): every split is drawn at random from the public domains, as
        in the paper. ``L > 0`` (the classifier's ``None``: 1 for two classes, 0 for three or
        more): the top ``L`` levels of each tree are
        chosen from noisy gradient histograms over public candidate grids
        (:mod:`~dpstream.models.boosting.hist_splits`), paid from the same per-record round cost as
        the leaves — the calibration and the guarantee are unchanged; the leaves get less of
        the noise budget.
    split_after
        With ``split_levels``: a generation's rounds draw the paper's random trees until it
        has this many arrivals (a public count), then select splits; a young pool's noisy
        histograms cost the leaves more than they find.
    split_share
        With ``split_levels``: the share of the gradient noise budget (``1 - r1``) spent on
        the split histograms; the leaf sums keep the rest.
    split_bins
        With ``split_levels``: candidate thresholds per numeric feature and node (equal-width
        cells of the node's public interval).
    split_decay
        With ``split_levels``: the root is chosen from the fresh noisy root histogram plus
        ``split_decay`` times the running sum of the earlier ones (post-processing of
        released histograms: it averages their noise away while the residual structure
        persists; 0 uses each round's histogram alone). A new generation starts the sum
        afresh. The distributed party (``SGBDTParty``) always draws the paper's random
        trees.
    seed
        ``None`` for OS entropy (use this in production); an int for tests and benchmarks.
    on_out_of_domain, on_unknown
        The input policy (:mod:`~dpstream.models.encoding`): ``"clip"`` and ``"ignore"`` by
        default; ``"error"`` raises on an out-of-domain value or an undeclared feature.
    allow_large_delta
        ``True`` accepts a ``delta`` of 1e-3 or more (refused by default: such a delta is
        almost always a slip).
    leaf_lambda
        How ``l2`` enters a leaf value (post-processing of the noisy count ``n~`` and sum
        ``s~``): ``"max"`` (default) ``s~ / max(l2, n~)``; ``"add"`` ``s~ / (n~ + l2)``, and 0
        where ``n~ < 0``, as in the authors' code (``docs/sgbdt.md``, "Differences from the
        authors' code").
    grid_share
        Streaming: once 2,000 records have arrived, release a DP feature grid (one Laplace
        histogram per numeric feature, pure ``grid_share * epsilon``-DP) and grow every later
        tree's thresholds on its quantile map
        (:mod:`~dpstream.models.boosting.sgbdt_grid`). Its cost is charged in the individual
        filter to the records in the release, from the same bound: the guarantee and sigma
        do not change; those records afford fewer rounds. ``0`` releases none; batch
        training (``learn_many``) never does.
"""


def validate_config(est: Any) -> SGBDTConfig:
    """The estimator's parameters checked by name (``ValueError`` on the first bad one) as
    the engine's :class:`~dpstream.models.boosting.sgbdt_engine.SGBDTConfig`."""

    def real(name, lo=None, hi=None, lo_open=True, hi_open=True):
        return check_real(name, resolved(est, name), lo, hi, lo_open=lo_open,
                          hi_open=hi_open)

    def integer(name, lo):
        return check_integer(name, resolved(est, name), lo)

    check_input_policy(est.on_out_of_domain, est.on_unknown)
    if est.accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {list(ACCOUNTANTS)}, "
                         f"got {est.accountant!r}")
    if integer("depth", 1) > 12:
        raise ValueError(f"depth must be <= 12, got {est.depth!r}")
    label_clip = est.label_clip
    if label_clip is None:
        label_clip = 1.0 if est._loss == "squared" else 3.0
    elif isinstance(label_clip, bool) or not isinstance(label_clip, (int, float)) \
            or not 0 < label_clip < math.inf:
        raise ValueError(f"label_clip must be a positive number, got {label_clip!r}")
    for name in ("dynamic_leaf_noise", "individual_filter", "cyclical_features", "drift"):
        if not isinstance(getattr(est, name), (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {getattr(est, name)!r}")
    if est.seed is not None:
        integer("seed", 0)
    integer("round_size", 1)
    if integer("warmup_rounds", 0):
        integer("warmup_records", 1)
    if est.pool_rounds is not None:
        integer("pool_rounds", 1)
    integer("max_active", 1)
    if est.drift_window is not None:
        integer("drift_window", 1)
    drift_share = real("drift_share", 0, 1) if est.drift else 0.0
    if est.init_share + drift_share >= 1:
        raise ValueError(f"init_share + drift_share must be < 1, got {est.init_share} + "
                         f"{drift_share}")
    min_leaf = real("min_leaf_records", 0, lo_open=False)
    max_trees = est.max_trees
    if max_trees is not None:
        max_trees = integer("max_trees", 1)
        if max_trees < est.n_trees + est.extra_trees:
            raise ValueError(f"max_trees ({max_trees}) must be >= n_trees + extra_trees "
                             f"({est.n_trees + est.extra_trees}), or None")
    retire_block = 1
    if max_trees is not None:
        if est.retire_block is None:
            retire_block = max(1, max_trees // 10)
        else:
            retire_block = integer("retire_block", 1)
            if retire_block > max_trees:
                raise ValueError(f"retire_block ({retire_block}) must be <= max_trees "
                                 f"({max_trees})")
    elif est.retire_block is not None:
        integer("retire_block", 1)
    return SGBDTConfig(
        loss=est._loss, epsilon=real("epsilon", 0),
        delta=check_small_delta(est.delta, allow_large=est.allow_large_delta),
        n_trees=integer("n_trees", 1), extra_trees=integer("extra_trees", 0),
        depth=int(est.depth), learning_rate=real("learning_rate", 0),
        subsample=real("subsample", 0, 1, hi_open=False),
        grad_clip=real("grad_clip", 0), label_clip=float(label_clip),
        init_share=real("init_share", 0, 1, lo_open=False),
        leaf_noise_split=real("leaf_noise_split", 0, 1), l2=real("l2", 0),
        accountant=est.accountant, dynamic_leaf_noise=bool(est.dynamic_leaf_noise),
        individual_filter=bool(est.individual_filter),
        numeric_weight=real("numeric_weight", 0, lo_open=False),
        cyclical_features=bool(est.cyclical_features), max_trees=max_trees,
        retire_block=retire_block,
        drift_share=drift_share, min_leaf_records=min_leaf,
        split_levels=integer("split_levels", 0),
        split_share=real("split_share", 0, 1) if resolved(est, "split_levels") else 0.0,
        split_bins=integer("split_bins", 2),
        split_decay=real("split_decay", 0, 1, lo_open=False, hi_open=True),
        leaf_lambda=_leaf_lambda(est),
        grid_share=real("grid_share", 0, 1, lo_open=False),
        split_after=integer("split_after", 0),
        warmup_records=integer("warmup_records", 0) if resolved(est, "warmup_rounds") else 0)


def _leaf_lambda(est: Any) -> str:
    if est.leaf_lambda not in ("max", "add"):
        raise ValueError(f"leaf_lambda must be 'max' or 'add', got {est.leaf_lambda!r}")
    return est.leaf_lambda
