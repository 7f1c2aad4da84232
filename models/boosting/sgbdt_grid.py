"""The DP feature grid in S-GBDT: split thresholds where the records are.

Once ``GRID_RECORDS`` records have arrived (a public count), S-GBDT releases one Laplace
histogram per numeric feature (:func:`release_grid`, pure ``grid_share * epsilon``-DP),
charged in the individual Rényi filter at its exact RDP (:func:`grid_rdp`) from the same bound:
the guarantee does not change. Trees are grown on the mapped rows and stored with raw
thresholds (:func:`raw_tree`), so nothing else sees the grid. Its exact counts of private
data are curator-only report keys (:data:`CURATOR_NAMES`).

Design and privacy argument: docs/sgbdt_internals.md#the-dp-feature-grid-in-s-gbdt.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...accounting.noise import laplace_lattice_rdp
from ..grid import FeatureGrid
from .random_splits import RandomTree
from .round_kernels import grid_map_finish, grid_map_start

__all__ = ["CURATOR_NAMES", "GRID_RECORDS", "grid_pending", "grid_rdp", "grid_report",
           "map_grid_columns", "raw_tree", "release_grid"]

#: arrivals (messages, a public count: records learned plus messages advanced over) after
#: which the grid is released
GRID_RECORDS = 2000
#: cells of each numeric feature's histogram
GRID_CELLS = 32
#: ``engine.grid_info`` keys that are exact counts of private data -> their names in the
#: report, which are curator-only keys (a checkpoint's ``grid_info`` keeps the old names)
CURATOR_NAMES = {"records": "records_in_release", "arrivals": "records_learned_at_release"}


def grid_pending(engine: Any) -> bool:
    """Whether the engine's next round releases the grid first."""
    c = engine.config
    return (c.grid_share > 0 and engine.grid is None and not engine.grid_blocked
            and engine.records_added + getattr(engine, "blanks", 0) >= GRID_RECORDS
            and len(engine) > 0
            and bool(engine.encoder.numeric_columns()))


def grid_rdp(epsilon: float, n_numeric: int, order: float) -> float:
    """The grid's RDP at ``order`` for one record: ``F`` Laplace histograms, each of L1
    sensitivity 1 with noise scale ``F / epsilon`` (so ``epsilon / F``-DP), composed — each
    the exact discrete Laplace's of the release's lattice
    (:func:`~dpstream.accounting.noise.laplace_lattice_rdp`), below the pure ``epsilon`` at
    every order.

    >>> round(grid_rdp(0.3, 8, 31.0), 4), round(grid_rdp(0.3, 1, 31.0), 4)
    (0.1445, 0.2774)
    """
    F = max(int(n_numeric), 1)
    # the histograms are counts, lattice points already: rounding adds no step
    return n_numeric * float(laplace_lattice_rdp([order], epsilon=epsilon, sensitivity=F,
                                                 shift=1.0, rounding=0)[0])


def release_grid(engine: Any) -> None:
    """Release the grid from the pool records that can afford ``grid_share * epsilon`` of
    RDP (charged in the filter); the split histograms' running sum starts afresh (its cells
    now mean other values)."""
    c = engine.config
    columns = engine.encoder.numeric_columns()
    epsilon = c.grid_share * c.epsilon
    cost = grid_rdp(epsilon, len(columns), engine.calibration.order)
    if cost >= engine.filter.bound:   # no record could afford it: release nothing
        engine.grid_blocked = True
        engine.grid_info = {"skipped": f"its RDP ({cost:.4g}) is not below the filter's "
                                       f"bound ({engine.filter.bound:.4g})"}
        return
    took = engine.filter.charge(np.full(len(engine), cost))
    engine.grid = FeatureGrid.release(engine.X[took], columns, epsilon=epsilon,
                                      cells=GRID_CELLS, rng=engine.rng)
    engine.grid_info = {"records": int(took.sum()), "epsilon": epsilon, "rdp": cost,
                        "arrivals": int(engine.records_added), "round": int(engine.rounds)}
    engine.split_memory = {}


def raw_tree(grid: FeatureGrid | None, tree: RandomTree) -> RandomTree:
    """``tree`` grown on mapped rows, with its thresholds in raw units:
    :meth:`~dpstream.models.grid.FeatureGrid.raw_thresholds`, the same float operations on
    the nodes it converts (a mapped column, a threshold inside the column's domain), the
    nodes picked in plain Python (a round's tree has a few dozen) and the inverse maps read
    in one ``np.interp``."""
    if grid is None:
        return tree
    if not grid.columns or tree.feature.size == 0:
        return tree._replace(threshold=grid.raw_thresholds(tree.feature, tree.threshold))
    threshold = np.array(tree.threshold, dtype=np.float64, copy=True)
    pos = {int(c): k for k, c in enumerate(grid._idx.tolist())}
    lo, span = grid._lo.tolist(), grid._span.tolist()
    nodes, ks, xs = [], [], []
    for node, (f, t) in enumerate(zip(tree.feature.tolist(), threshold.tolist(), strict=True)):
        k = pos.get(f)
        if k is None or not span[k] > 0:
            continue
        u = (t - lo[k]) / span[k]
        if math.isfinite(u) and 0.0 <= u <= 1.0:
            nodes.append(node)
            ks.append(k)
            xs.append(u + 2 * k)
    if nodes:
        kk = np.array(ks, dtype=np.int64)
        raw = np.interp(np.array(xs), grid._knots, grid._edges) - 2 * kk
        threshold[nodes] = grid._lo[kk] + grid._span[kk] * raw
    return tree._replace(threshold=threshold)


def map_grid_columns(grid: FeatureGrid, V: np.ndarray) -> np.ndarray:
    """:meth:`~dpstream.models.grid.FeatureGrid.map_columns` of ``V`` (2-d), the same float
    operations — its elementwise steps compiled around the same ``np.interp``: the pool maps
    every flush's new records (a few dozen rows: a dozen array calls cost more than the
    arithmetic)."""
    if V.ndim != 2 or V.shape[1] != len(grid.columns) or not grid.columns:
        return grid.map_columns(V)
    V = np.asarray(V, dtype=np.float64)
    x = grid_map_start(V, grid._lo, grid._span)
    r = np.interp(x.ravel(), grid._edges, grid._knots).reshape(x.shape)
    return grid_map_finish(V, grid._lo, grid._span, r)


def grid_report(engine: Any) -> dict:
    """``privacy_report()["feature_grid"]``: the release and its released quantiles (its
    exact counts under their curator-only names, :data:`CURATOR_NAMES`).

    Examples
    --------
    >>> from dpstream.models import SGBDTClassifier
    >>> from dpstream.stream import load_elec2
    >>> X, y, schema = load_elec2()
    >>> model = SGBDTClassifier(schema=schema, epsilon=1.0, seed=0)
    >>> for xi, yi in zip(X[:5000], y[:5000]):
    ...     model.learn_one(xi, yi)
    >>> grid = model.privacy_report()["feature_grid"]
    >>> grid["released"], grid["epsilon"], round(grid["rdp"], 3)
    (True, 0.2, 0.088)
    >>> grid["records_in_release"] > 1400   # curator-only; the young phase spent some
    True
    >>> grid["quantiles_10_50_90"]["nswprice"][1] < 0.15   # most prices sit low in [0, 1]
    True
    """
    info = {CURATOR_NAMES.get(k, k): v for k, v in engine.grid_info.items()}
    if engine.grid is None:
        return {"enabled": engine.config.grid_share > 0 and not engine.grid_blocked,
                "released": False, "after_arrivals": GRID_RECORDS, **info}
    return {"enabled": True, "released": True, **info,
            **engine.grid.report(list(engine.encoder._numeric)),
            "guarantee": "pure epsilon-DP: F Laplace histograms (one per numeric feature, "
                         "scale F / epsilon per cell) of the records in the release, charged "
                         "to each in the individual Renyi filter at their composed Laplace "
                         "RDP at the filter's order ('rdp'); trees use it as "
                         "post-processing"}
