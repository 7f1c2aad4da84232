"""An epsilon-DP numeric range of a window's records: where random trees draw their split points.

Random decision trees (Fan et al. 2003; Fletcher & Islam 2017, Alg. 2, line 6) draw a numeric
split point uniformly within the attribute's *current domain*. The papers' code takes that
domain from the data (its min and max): a private quantity, released by the trees' thresholds
without any noise. Drawn instead over the schema's public domain, the split points miss the data
wherever that domain is much wider than the data — Fletcher & Islam's SynthF (domain ±11.5,
99% of the values within ±3.8) leaves most records in one leaf of most trees, and accuracy flat
in epsilon. :func:`private_ranges` is the sound middle: a share of a window's budget buys an
epsilon-DP range per numeric attribute, and the window's trees
(:class:`~dpstream.models.windows.random_trees.ImplicitRandomTrees` with ``domain=``) draw their
numeric split points inside it. The random decision forest and RDT use it
(:mod:`~dpstream.models.windows.random_forest`, :mod:`~dpstream.models.windows.rdt`).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> vals = rng.normal(0.0, 1.0, size=(4000, 2))
>>> lo, hi = private_ranges(vals, np.array([-20.0, -20.0]), np.array([20.0, 20.0]), 1.0, 20,
...                         rng)
>>> lo.tolist(), hi.tolist()          # 2 of the 20 bins of [-20, 20] each side of 0
([-4.0, -4.0], [4.0, 4.0])
"""

from __future__ import annotations

import math

import numpy as np

from ...accounting import LaplaceMechanism, noise

__all__ = ["private_ranges"]


def private_ranges(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, epsilon: float,
                   bins: int, rng: np.random.Generator,
                   public: np.ndarray | None = None,
                   coverage: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """An ``epsilon``-DP range ``[lo', hi']`` inside each numeric attribute's public domain
    ``[lo, hi]`` where the private ``values`` (rows: records, columns: attributes) lie.

    The records are dealt at random into one part per attribute (the dealing reads nothing but
    the row order); attribute ``j`` counts its part's values in ``bins`` equal-width bins of its
    public domain and releases the counts with ``Laplace(1 / epsilon)`` noise. A record adds one
    to one count of one attribute, so the whole release is ``epsilon``-DP (parallel
    composition over the parts). The range spans the bins whose noisy count reaches
    ``(ln(bins) + 2) / epsilon`` (an empty bin passes with probability ``1 / (2 e² bins)``)
    if its noisy counts add up to ``coverage`` of the part's records (a public count); else —
    too few records to tell, or bins passed by noise — the attribute keeps its public domain.
    Rows of ``public`` (records that need no privacy, optional) are counted in every
    attribute, without noise. Missing values count nowhere.

    Parameters
    ----------
    values
        The private records' numeric values, one column per attribute.
    lo, hi
        Each attribute's public domain.
    epsilon
        The release's budget per record (each record is counted in one attribute only).
    bins
        Equal-width bins of each public domain; the range is a span of whole bins.
    rng
        The private random source (dealing and noise).
    public
        Records that need no privacy (same columns), counted in every attribute.
    coverage
        Share of the part's records the span's noisy counts must add up to.

    Returns
    -------
    tuple of numpy.ndarray
        ``(lo', hi')``, each inside ``[lo, hi]``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> vals = rng.normal(0.0, 1.0, size=(4000, 2))
    >>> a, b = private_ranges(vals, np.array([-20.0, -20.0]), np.array([20.0, 20.0]), 1.0, 20,
    ...                       rng)
    >>> a.tolist(), b.tolist()
    ([-4.0, -4.0], [4.0, 4.0])
    >>> private_ranges(vals[:20], np.array([-20.0, -20.0]), np.array([20.0, 20.0]), 0.1, 20,
    ...                rng)[0].tolist()        # too few records to tell: the public domain
    [-20.0, -20.0]
    """
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    s = lo.size
    new_lo, new_hi = lo.copy(), hi.copy()
    if s == 0:
        return new_lo, new_hi
    values = np.asarray(values, dtype=np.float64).reshape(-1, s)
    part = noise.permutation(rng, values.shape[0]) % s
    mech = LaplaceMechanism(epsilon=epsilon, sensitivity=1.0, rng=rng, integers=True)
    tau = (math.log(bins) + 2.0) / epsilon
    for j in range(s):
        if not hi[j] > lo[j]:
            continue
        edges = np.linspace(lo[j], hi[j], bins + 1)
        v = values[part == j, j]
        counts = np.histogram(np.clip(v[~np.isnan(v)], lo[j], hi[j]), edges)[0]
        counts = mech.release(counts.astype(np.float64))
        if public is not None and public.size:
            p = np.asarray(public, dtype=np.float64)[:, j]
            counts += np.histogram(np.clip(p[~np.isnan(p)], lo[j], hi[j]), edges)[0]
        keep = np.flatnonzero(counts >= tau)
        # the span must hold most of the part (its size is public): else the bins that passed
        # are noise, or too few records to say where they lie
        total = (part == j).sum() + (0 if public is None else np.asarray(public).shape[0])
        if keep.size and counts[keep[0]:keep[-1] + 1].sum() >= coverage * total:
            new_lo[j], new_hi[j] = edges[keep[0]], edges[keep[-1] + 1]
    return new_lo, new_hi
