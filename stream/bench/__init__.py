"""The replay benchmark suite: everything ``dpstream bench`` and ``dpstream suite`` need.

Apart from the service's hot path; nothing in :mod:`dpstream.stream`'s record flow imports it.

* :mod:`.protocols` — ``dpstream bench``: a model's metric under its paper's protocol
  (repeated K-fold CV, 90/10 holdout, prequential), the shared split generator;
* :mod:`.scenarios` — benchmark datasets beyond the bundled Adult and Abalone (scikit-learn's
  Iris and Wine, the papers' synthetic sets, river's drifting Agrawal stream);
* :mod:`.baselines` — scikit-learn, diffprivlib and DP Mean on the same splits;
* :mod:`.throughput` — streams: progressive validation, rows/s and peak memory, river's models;
* :mod:`.suite` — the resumable matrix of cells into JSON lines;
* :mod:`.report` — docs/benchmarks.md and its plots from those lines;
* :mod:`.commands` — the two CLI commands.
"""

from __future__ import annotations

from .protocols import (
    BENCH_DATASETS,
    BENCH_MODELS,
    HOLDOUT_DATASETS,
    KFOLD_DATASETS,
    RESULT_FIELDS,
    Split,
    fold_indices,
    load_protocol_data,
    protocol_of,
    protocol_splits,
    run_bench,
    run_drift,
    score_model,
)

__all__ = ["BENCH_DATASETS", "BENCH_MODELS", "HOLDOUT_DATASETS", "KFOLD_DATASETS",
           "RESULT_FIELDS", "Split", "fold_indices", "load_protocol_data", "protocol_of",
           "protocol_splits", "run_bench", "run_drift", "score_model"]
