"""The S-GBDT estimators' parameters: their tables (:data:`SGBDT_PARAMS`, the classifier's
:data:`SGBDT_CLASSIFIER_PARAMS`), the classifier's class-count defaults and the checks across
parameters that build the engine's configuration (docs/sgbdt_parameters.md#the-estimators)."""

from __future__ import annotations

from typing import Any

from ...accounting import ACCOUNTANTS
from ..param_table import INPUT_POLICY, SCHEMA_DOC, Param, ParamTable, seed_param
from ..params import check_real, check_small_delta
from .sgbdt_engine import SGBDTConfig

__all__ = ["CLASS_DEFAULTS", "POOL_ROUNDS", "SGBDT_CLASSIFIER_PARAMS", "SGBDT_PARAMS",
           "resolved", "validate_config"]

#: the default ``pool_rounds`` (chosen on river's Agrawal streams)
POOL_ROUNDS = 400

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


_MORE = "docs/sgbdt_parameters.md#"
#: the regressor's parameters in signature order (the classifier's:
#: :data:`SGBDT_CLASSIFIER_PARAMS`); ``legacy``: what a checkpoint written before the
#: parameter existed restores with
SGBDT_PARAMS = ParamTable([
    Param("epsilon", 1.0, "Total privacy budget (epsilon_init + epsilon_trees, plus "
          "epsilon_drift with ``drift``).", "real", lo=0, lo_open=True),
    Param("delta", 5e-8, "delta of the (epsilon, delta) guarantee; 1e-3 or more is refused "
          f"unless ``allow_large_delta`` ({_MORE}delta).", "real", lo=0, hi=1, lo_open=True,
          hi_open=True),
    Param("n_trees", 75, "T_regular: the rounds a worst-case record can afford; sets sigma and "
          "alpha-hat (Alg. 7).", "integer", lo=1),
    Param("extra_trees", 0, "T_extra: further rounds of batch training (``learn_many``) for "
          "records with budget left.", "integer", lo=0),
    Param("depth", 3, "Depth d of each random complete tree (2**d leaves).", "integer", lo=1,
          hi=12),
    Param("learning_rate", 0.1, "Shrinkage of each tree's leaf values.", "real", lo=0,
          lo_open=True),
    Param("subsample", 0.1, "gamma, the Poisson subsampling rate of each round.", "real",
          lo=0, hi=1, lo_open=True),
    Param("grad_clip", 0.3, "g*, the clipping bound of the gradients (squared loss: on labels "
          "scaled to [-1, 1]).", "real", lo=0, lo_open=True),
    Param("label_clip", None, "m*, the clipping bound of the initial score. ``None``: 1.0 for "
          "regression (scaled labels), 3.0 for classification (log-odds).", "real", lo=0,
          lo_open=True, none_ok=True),
    Param("init_share", 0.2, "Share of epsilon spent on the initial score, charged in the "
          f"individual filter ({_MORE}init_share).", "real", lo=0, hi=1, hi_open=True),
    Param("leaf_noise_split", 0.037, "r1, the share of the leaf noise on the leaf count "
          "(r2 = 1 - r1 on the gradient sum).", "real", lo=0, hi=1, lo_open=True,
          hi_open=True),
    Param("l2", 15.0, "lambda: the noisy leaf count is floored at lambda (see "
          "``leaf_lambda``).", "real", lo=0, lo_open=True),
    Param("round_size", 32, "Streaming: one round (one tree) per this many arrivals, the "
          "shortest interval with ``pool_rounds``. ``None``: 32, 16 for three or more classes "
          f"({_MORE}round_size).", "integer", lo=1, none_ok=True),
    Param("warmup_rounds", 50, "Streaming: a young generation gets a round every "
          "``ceil(a / warmup_rounds)`` arrivals while that is below ``round_size``; 0: no "
          f"young phase. ``None``: 400, 0 for three or more classes ({_MORE}warmup_rounds).",
          "integer", lo=0, none_ok=True, legacy=0),
    Param("warmup_records", 2000, "Streaming, with ``warmup_rounds``: a generation's first "
          "this-many arrivals are its young phase; its trees retire after it "
          f"({_MORE}warmup_records).", "integer", lo=1, legacy=0),
    Param("pool_rounds", POOL_ROUNDS, "Streaming: a round every ``max(round_size, "
          "ceil(min(a, max_active) / pool_rounds))`` arrivals, so a record takes part in "
          "about this many rounds. ``None``: every ``round_size`` arrivals "
          f"({_MORE}pool_rounds).", "integer", lo=1, none_ok=True, legacy=None),
    Param("max_active", 100_000, "Streaming: a record leaves the active pool once this many "
          "more have arrived (an age, a public count); it bounds memory.", "integer", lo=1),
    Param("max_trees", 1000, "The most trees kept; the oldest retire (post-processing). "
          "``None``: unbounded; else at least ``n_trees + extra_trees``.", "integer", lo=1,
          none_ok=True),
    Param("retire_block", None, "With ``max_trees``: trees retire in blocks of this many (at "
          f"most ``max_trees``). ``None``: ``max_trees // 10`` ({_MORE}retire_block).",
          "integer", lo=1, none_ok=True, legacy=1),
    Param("accountant", "tight", "``'tight'``: the exact subsampled-Gaussian RDP; "
          "``'zhu-wang'``: the paper's bound.", "choice", options=tuple(ACCOUNTANTS)),
    Param("dynamic_leaf_noise", True, "``True``: DLNS (noisy count and sum); ``False``: "
          "static leaf noise (sum / lambda).", "bool"),
    Param("individual_filter", True, "``True``: each record pays its own round cost (Theorem "
          "23) until its budget is spent; ``False``: every record pays the worst case for "
          "``n_trees`` rounds.", "bool"),
    Param("numeric_weight", 1.0, "r: the weight of a numeric feature when a split feature is "
          "drawn (categorical: 1).", "real", lo=0),
    Param("cyclical_features", False, "``True``: tree t splits only on feature t mod (number "
          "of features): an additive model (a public choice).", "bool"),
    Param("drift", True, "``True``: adapt to concept drift under DP: a noisy windowed loss "
          "signal and a Page-Hinkley test; a detected change starts a new generation "
          f"({_MORE}drift).", "bool", legacy=False),
    Param("drift_share", 0.05, "Share of epsilon spent on the drift signal (checked only with "
          "``drift``; ``init_share + drift_share < 1``).", "real", lo=0, hi=1, lo_open=True,
          hi_open=True, legacy=0.0),
    Param("drift_window", None, "Records per released window of the drift signal. ``None``: "
          f"``max(200, ceil(30 / epsilon_drift))`` ({_MORE}drift_window).", "integer", lo=1,
          none_ok=True, legacy=500),
    Param("min_leaf_records", 10.0, "Streaming: while few records have arrived, trees are "
          "shallower, so that each leaf expects this many sampled records; 0: always "
          f"``depth``. ``None``: 10 ({_MORE}min_leaf_records).", "real", lo=0, none_ok=True,
          legacy=0.0),
    Param("split_levels", 0, "``0``: random splits from the public domains, as in the paper; "
          "``L > 0``: the top L levels from noisy gradient histograms. ``None``: 1, 0 for "
          f"three or more classes ({_MORE}split_levels).", "integer", lo=0, none_ok=True,
          legacy=0),
    Param("split_after", 0, "With ``split_levels``: a generation's trees are random until it "
          "has this many arrivals.", "integer", lo=0, legacy=0),
    Param("split_share", 0.3, "With ``split_levels``: the share of the gradient noise budget "
          "spent on the split histograms, in (0, 1) (checked only with ``split_levels``)."),
    Param("split_bins", 8, "With ``split_levels``: candidate thresholds per numeric feature "
          "and node.", "integer", lo=2),
    Param("split_decay", 0.99, "With ``split_levels``: the weight of the running sum of the "
          "earlier root histograms (post-processing); 0: each round's alone.", "real", lo=0,
          hi=1, hi_open=True),
    seed_param(),
    *INPUT_POLICY,
    Param("allow_large_delta", False, "``True`` accepts a ``delta`` of 1e-3 or more (refused "
          "by default: almost always a slip).", "bool"),
    Param("leaf_lambda", "max", "How ``l2`` enters a leaf value: ``'max'`` ``s~ / max(l2, "
          "n~)``; ``'add'`` ``s~ / (n~ + l2)`` (0 where ``n~ < 0``), as in the authors' code.",
          "choice", options=("max", "add")),
    Param("grid_share", 0.0, "Streaming: the share of epsilon of a DP feature grid released "
          f"after 2,000 arrivals; 0: none ({_MORE}grid_share).", "real", lo=0, hi=1,
          hi_open=True, legacy=0.0)], schema_doc=SCHEMA_DOC)
#: the classifier's defaults where they differ (tuned on Adult and river's classification
#: streams; ``None``: :data:`CLASS_DEFAULTS`)
SGBDT_CLASSIFIER_PARAMS = SGBDT_PARAMS.with_defaults(
    n_trees=100, extra_trees=100, depth=6, learning_rate=0.3, grad_clip=1.0, init_share=0.1,
    leaf_noise_split=0.05, round_size=None, warmup_rounds=None, min_leaf_records=None,
    split_levels=None, split_after=4000, grid_share=0.2)


def validate_config(est: Any) -> SGBDTConfig:
    """The estimator's parameters checked (``ValueError`` naming the first bad one: each by
    its table row, then the checks across parameters) as the engine's
    :class:`~dpstream.models.boosting.sgbdt_engine.SGBDTConfig`."""
    table = est.PARAMETERS
    # drift_share, warmup_records and split_share matter (and are checked) only with the
    # parameter they serve; a classifier's None resolves to its class-count default
    warmup, split_levels = resolved(est, "warmup_rounds"), resolved(est, "split_levels")
    table.check(est, skip=[name for name, on in (("drift_share", est.drift),
                                                 ("warmup_records", warmup)) if not on])

    def num(name: str) -> Any:   # a checked value as its row's type (int or float)
        return table[name].check(resolved(est, name))

    label_clip = est.label_clip
    if label_clip is None:
        label_clip = 1.0 if est._loss == "squared" else 3.0
    drift_share = num("drift_share") if est.drift else 0.0
    if est.init_share + drift_share >= 1:
        raise ValueError(f"init_share + drift_share must be < 1, got {est.init_share} + "
                         f"{drift_share}")
    max_trees = est.max_trees
    if max_trees is not None:
        max_trees = num("max_trees")
        if max_trees < est.n_trees + est.extra_trees:
            raise ValueError(f"max_trees ({max_trees}) must be >= n_trees + extra_trees "
                             f"({est.n_trees + est.extra_trees}), or None")
    retire_block = 1
    if max_trees is not None:
        if est.retire_block is None:
            retire_block = max(1, max_trees // 10)
        else:
            retire_block = num("retire_block")
            if retire_block > max_trees:
                raise ValueError(f"retire_block ({retire_block}) must be <= max_trees "
                                 f"({max_trees})")
    return SGBDTConfig(
        loss=est._loss, epsilon=num("epsilon"),
        delta=check_small_delta(est.delta, allow_large=est.allow_large_delta),
        n_trees=num("n_trees"), extra_trees=num("extra_trees"),
        depth=num("depth"), learning_rate=num("learning_rate"),
        subsample=num("subsample"), grad_clip=num("grad_clip"), label_clip=float(label_clip),
        init_share=num("init_share"), leaf_noise_split=num("leaf_noise_split"), l2=num("l2"),
        accountant=est.accountant, dynamic_leaf_noise=bool(est.dynamic_leaf_noise),
        individual_filter=bool(est.individual_filter), numeric_weight=num("numeric_weight"),
        cyclical_features=bool(est.cyclical_features), max_trees=max_trees,
        retire_block=retire_block, drift_share=drift_share,
        min_leaf_records=num("min_leaf_records"), split_levels=num("split_levels"),
        split_share=check_real("split_share", est.split_share, 0, 1) if split_levels else 0.0,
        split_bins=num("split_bins"), split_decay=num("split_decay"),
        leaf_lambda=est.leaf_lambda, grid_share=num("grid_share"),
        split_after=num("split_after"), warmup_records=num("warmup_records") if warmup else 0)
