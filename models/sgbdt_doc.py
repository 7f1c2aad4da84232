"""The parameter section of the S-GBDT estimators' docstrings (shared by
:class:`~dpstream.models.SGBDTRegressor` and :class:`~dpstream.models.SGBDTClassifier`)."""

from __future__ import annotations

__all__ = ["PARAMS_DOC"]

PARAMS_DOC = """
    Parameters
    ----------
    schema
        The public schema (a ``Schema``, the equivalent dict, or a schema file path): feature
        domains and the label's range or classes. Nothing is read from the data.
    epsilon
        Total privacy budget (epsilon_init + epsilon_trees), > 0.
    delta
        delta of the (epsilon, delta) guarantee (the paper's delta_trees), in (0, 1).
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
        ``pool_rounds`` this is the shortest interval.
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
        generation's arrivals. ``0`` turns it off (always ``depth``).
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
        in the paper. ``L > 0`` (classifier default 1): the top ``L`` levels of each tree are
        chosen from noisy gradient histograms over public candidate grids
        (:mod:`~dpstream.models.hist_splits`), paid from the same per-record round cost as
        the leaves — the calibration and the guarantee are unchanged; the leaves get less of
        the noise budget.
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
"""
