"""Per-epsilon S-GBDT settings of the batch benchmarks, in one place.

Kirschte et al.'s protocol picks the best hyper-parameter setting per epsilon, and so do the
result tables they released with their code (``../shared/anchors/sbdt``). The benchmark
(:func:`~dpstream.stream.bench.protocols.run_bench`) does the same where a setting was found
that beats the estimators' defaults; stream users never need this table — the defaults are
tuned for streams and need no per-epsilon choice.

How the table was chosen (2026-11-28, ``dpstream bench --model sgbdt --dataset D --epsilon E
--repeats 10`` (5 for the late arrivals) with each candidate as ``--set`` values):

* the candidates are the authors' best released rows per epsilon, translated into our
  parameters (their leaf-count share ``r`` is normalised by the sensitivities: ours is
  ``r g*^2 / (1 - r + r g*^2)``; docs/sgbdt.md, "Differences from the authors' code");
* a row is kept for an epsilon range only where it measured above our defaults:

  ========================  ==========  =====================  ==================
  Abalone R² at epsilon      defaults    authors' row (ours)    authors' released
  ========================  ==========  =====================  ==================
  0.05                       0.077       0.206                  0.180
  0.1                        0.209       0.254                  0.270
  0.15                       0.255       0.279                  —
  0.2                        0.291       0.299; 0.309 (*)       0.317
  0.3                        0.319       0.315 (not kept)       0.340
  0.5                        0.350       0.338 (not kept)       0.359
  late arrivals 0.1          -0.092      0.265                  0.275
  late arrivals 0.3          0.055       0.328; 0.335 (**)      0.342
  late arrivals 0.5          0.145       0.343; 0.348 (**)      0.364
  ========================  ==========  =====================  ==================

  (*) with the ``"add"`` leaf rule and a 5% initial-score share (20 repeats; each alone
  0.305 and 0.302 at 10). (**) 200 trees a phase instead of their 150 (20 repeats; 300: 0.347
  at 0.5). Above 0.5 the same row: 0.348 at 0.55 (the paper's epsilon; defaults 0.292).
  At 0.05 their 0.1 row is unstable (-0.26 +- 1.52: a fold's initial score swings to the
  clip); with a 30% initial score clipped at 0.5 it scores 0.199 (10 repeats; the
  authors' released: 0.191).

  ========================  ==========  =====================  ==================
  Adult late, error at eps   defaults    authors' row (ours)    authors' released
  ========================  ==========  =====================  ==================
  0.01                       28.5%       23.3%                  24.49%
  0.03                       —           20.7% (row 0.1)        24.04%
  0.1                        21.0%       17.4%                  17.97%
  0.5                        17.0%       15.0%                  16.25%
  1.0                        16.2%       14.8% (row 0.5)        —
  ========================  ==========  =====================  ==================

  ========================  ==========  =====================  ==================
  Abalone late, no filter    before      their no-filter row    authors' released
  ========================  ==========  =====================  ==================
  0.1                        —           0.166                  0.248
  0.3                        —           0.252                  0.292
  0.5                        0.048       0.259                  0.293
  ========================  ==========  =====================  ==================

  (10 repeats; "before": the late batch at the sigma of the first phase's rounds, 3
  repeats.) The no-filter rows need the late phase of the protocol
  (``NO_FILTER_LATE_ROUNDS``) and are chosen when the row turns the filter off.

  (2 repeats; 3 at 0.1.) Their late rows are the batch rows' count leaves with Poisson rate
  0.1: ``_ADULT_LATE``.

  ========================  ==========  =====================  ==================
  Adult error at epsilon     defaults    authors' row (ours)    authors' released
  ========================  ==========  =====================  ==================
  0.01                       24.7%       23.3%                  23.60%
  0.03                       20.9%       19.9%                  20.18%
  0.05                       20.1%       18.4% (row 0.1)        —
  0.1                        18.5%       16.9%                  17.29%
  0.15                       —           16.3% (row 0.1)        —
  0.2                        17.1%       15.9% (row 0.1)        —
  0.5                        16.1%       15.0% (row 0.1)        16.20%
  1.0                        15.5%       14.8% (row 0.1);       —
                                         14.5% (row 0.5)
  2                          15.3%       14.2% (row 0.5)        —
  5                          —           14.0% (row 0.5)        —
  ========================  ==========  =====================  ==================

  (3 repeats for Adult; 2 for the rows measured against their neighbours: the 0.1 row
  beats the 0.5 row up to epsilon 0.5 (their own 0.5 row: 15.4%), and the 0.5 row beats the
  defaults up to 10.) The Adult rows use Newton leaves in the authors' code; with their
  Hessian cap h* = 0.1 nearly every Hessian sits at the cap, so their leaf is a count leaf with
  learning rate lr / h* = 1.0 and l2 = lambda / h* = 100 (50 at 0.5): those are the values
  here, with the ``"add"`` leaf rule, no subsampling (Q = 1) and a 5% initial score (theirs
  has none). Their Adult is adult.data without "?" rows (30,162 records); ours, data and test
  (48,842), so our figures come from 1.62 times more training records.

  Choosing on the test folds is what the authors' protocol does; it makes every such figure
  optimistic, theirs and ours alike.

Examples
--------
>>> name, params = sgbdt_config("abalone", 0.1)
>>> name, params["depth"], params["cyclical_features"]
("abalone eps<=0.1 (authors' row 0.1)", 2, True)
>>> sgbdt_config("abalone", 1.0)
('defaults', {})
"""

from __future__ import annotations

__all__ = ["SGBDT_CONFIGS", "sgbdt_config"]

#: what every authors' row shares: cyclical one-feature trees, no extra rounds, learning rate
#: 0.1, Poisson rate 0.1, l2 15, a 10% initial-score share
_AUTHORS = {"extra_trees": 0, "learning_rate": 0.1, "subsample": 0.1, "l2": 15.0,
            "cyclical_features": True, "init_share": 0.1}
_BATCH = {**_AUTHORS, "label_clip": 0.5}
_LATE = {**_AUTHORS, "label_clip": 1.0, "depth": 2, "grad_clip": 0.1,
         "leaf_noise_split": 0.0025}
_ADULT = {"extra_trees": 0, "subsample": 1.0, "cyclical_features": True, "learning_rate": 1.0,
          "leaf_lambda": "add", "init_share": 0.05, "depth": 6, "l2": 100.0}
#: their late-arrival Adult rows: the same count leaves, with Poisson rate 0.1 (their rows
#: subsample in the late scenario at every epsilon)
_ADULT_LATE = {**_ADULT, "subsample": 0.1}

#: dataset -> [(largest epsilon, name, parameters)], the first whose bound covers epsilon wins;
#: above the last bound the estimator's defaults run
SGBDT_CONFIGS: dict[str, list[tuple[float, str, dict]]] = {
    "abalone": [
        (0.05, "authors' row 0.05", {**_BATCH, "n_trees": 100, "depth": 2, "grad_clip": 0.1,
                                     "leaf_noise_split": 0.0043}),
        (0.1, "authors' row 0.1", {**_BATCH, "n_trees": 50, "depth": 2, "grad_clip": 0.3,
                                   "leaf_noise_split": 0.037}),
        (0.2, "authors' row 0.2", {**_BATCH, "n_trees": 50, "depth": 3, "grad_clip": 0.3,
                                   "leaf_noise_split": 0.037, "leaf_lambda": "add",
                                   "init_share": 0.05}),
    ],
    "adult": [
        (0.01, "authors' row 0.01", {**_ADULT, "n_trees": 200, "depth": 5, "grad_clip": 0.5,
                                     "leaf_noise_split": 0.0103}),
        (0.03, "authors' row 0.03", {**_ADULT, "n_trees": 100, "grad_clip": 0.5,
                                     "leaf_noise_split": 0.0103}),
        (0.5, "authors' row 0.1", {**_ADULT, "n_trees": 400, "grad_clip": 0.3,
                                   "leaf_noise_split": 0.0037}),
        (10.0, "authors' row 0.5", {**_ADULT, "n_trees": 200, "grad_clip": 0.8,
                                    "leaf_noise_split": 0.026, "l2": 50.0}),
    ],
    "adult-late": [
        (0.01, "authors' late row 0.01", {**_ADULT_LATE, "n_trees": 50, "grad_clip": 0.5,
                                          "leaf_noise_split": 0.027}),
        (0.1, "authors' late row 0.1", {**_ADULT_LATE, "n_trees": 400, "grad_clip": 0.3,
                                        "leaf_noise_split": 0.0099}),
        (1.0, "authors' late row 0.5", {**_ADULT_LATE, "n_trees": 400, "grad_clip": 0.5,
                                        "leaf_noise_split": 0.027}),
    ],
    # their no-filter rows (nb 100, 25 late rounds at a re-calibrated sigma, depth 4-6) as
    # count leaves with the "add" rule, depth 4 at every size (min_leaf_records 0)
    "abalone-late-no-filter": [
        (1.0, "authors' no-filter late row 0.5", {**_LATE, "n_trees": 100, "depth": 4,
                                                  "min_leaf_records": 0.0,
                                                  "leaf_lambda": "add"}),
    ],
    "abalone-late": [
        # at 0.05 the 10% initial score's count noise (Laplace 400 on ~1,700 records) can
        # swing the score to the clip: R2 -0.26 +- 1.52; 30% clipped at 0.5 is stable
        (0.05, "authors' late row 0.1, 30% initial score", {**_LATE, "n_trees": 100,
                                                           "init_share": 0.3,
                                                           "label_clip": 0.5}),
        (0.1, "authors' late row 0.1", {**_LATE, "n_trees": 100}),
        (10.0, "authors' late row 0.3", {**_LATE, "n_trees": 200}),
    ],
}


def sgbdt_config(dataset: str, epsilon: float, params: dict | None = None) -> tuple[str, dict]:
    """The S-GBDT setting the benchmark runs on ``dataset`` at ``epsilon``: its name (what
    ``dpstream bench`` reports) and its parameters (``{}``: the estimator's defaults).
    ``params`` (the user's or the suite row's) choose the late-arrival scenarios' no-filter
    rows when they turn the individual filter off."""
    if dataset.endswith("-late") and (params or {}).get("individual_filter") is False:
        dataset += "-no-filter"
    for bound, name, params in SGBDT_CONFIGS.get(dataset, []):
        if epsilon <= bound * (1 + 1e-9):
            return f"{dataset} eps<={bound:g} ({name})", dict(params)
    return "defaults", {}
