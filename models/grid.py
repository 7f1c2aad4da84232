"""A DP feature grid: each numeric feature mapped onto its domain by a released quantile map.

:class:`FeatureGrid`: :meth:`FeatureGrid.release` spends ``epsilon`` on one noisy histogram
per numeric feature (Laplace noise of scale ``F / epsilon`` per cell, ``F`` numeric features);
the rest is post-processing into a strictly increasing map of each domain onto itself
(:meth:`FeatureGrid.forward`), so trees grown on mapped rows split where the records are, and
:meth:`FeatureGrid.raw_thresholds` takes their thresholds back to raw units.

The mechanism, its sensitivity and the post-processing: ``docs/encoding.md#the-dp-feature-grid``.
"""

from __future__ import annotations

import numpy as np

from ..accounting import LaplaceMechanism

__all__ = ["FeatureGrid"]


class FeatureGrid:
    """Monotone maps of numeric columns onto their domains (``docs/encoding.md``).

    Parameters
    ----------
    columns
        ``(column, min, max)`` of each mapped numeric column
        (:meth:`~dpstream.models.encoding.RecordEncoder.numeric_columns`).
    cdf
        Shape ``(len(columns), cells + 1)``: each column's CDF at the cell edges of its
        domain, 0 first, 1 last, strictly increasing.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = np.column_stack([np.zeros(2000), rng.beta(1, 30, 2000)])   # column 1: skewed
    >>> grid = FeatureGrid.release(X, [(1, 0.0, 1.0)], epsilon=1.0, rng=1)
    >>> mapped = grid.forward(X)[:, 1]
    >>> bool(np.median(X[:, 1]) < 0.05), bool(0.3 < np.median(mapped) < 0.7)
    (True, True)
    >>> t = np.array([0.5]); raw = grid.raw_thresholds(np.array([1]), t)
    >>> bool(((mapped <= 0.5) == (X[:, 1] <= raw[0])).all())
    True
    """

    def __init__(self, columns: list[tuple[int, float, float]], cdf: np.ndarray):
        self.columns = [(int(c), float(lo), float(hi)) for c, lo, hi in columns]
        self.cdf = np.asarray(cdf, dtype=np.float64)
        if self.cdf.shape[0] != len(self.columns) or self.cdf.shape[1] < 2:
            raise ValueError("cdf needs one row of at least two edges per column")
        cells = self.cdf.shape[1] - 1
        self._idx = np.array([c for c, _, _ in self.columns], dtype=np.int64)
        self._lo = np.array([lo for _, lo, _ in self.columns])
        self._span = np.array([hi - lo for _, lo, hi in self.columns])
        # one np.interp for every column: column k lives on [2k, 2k + 1]
        off = 2.0 * np.arange(len(self.columns))[:, None]
        self._edges = (np.linspace(0.0, 1.0, cells + 1)[None, :] + off).ravel()
        self._knots = (self.cdf + off).ravel()

    @staticmethod
    def counts(X: np.ndarray, columns: list[tuple[int, float, float]],
               cells: int) -> np.ndarray:
        """The exact histograms, shape ``(len(columns), cells)``: each row of ``X`` adds 1 to
        one cell of each column's histogram (none where its value is missing), so removing
        or adding a row changes the whole array by at most ``len(columns)`` in L1."""
        X = np.asarray(X, dtype=np.float64)
        out = np.zeros((len(columns), int(cells)))
        for k, (c, lo, hi) in enumerate(columns):
            v = X[:, c]
            v = v[~np.isnan(v)]
            if hi > lo:
                cell = np.clip(((v - lo) / (hi - lo) * cells).astype(np.int64), 0, cells - 1)
                out[k] = np.bincount(cell, minlength=cells)
        return out

    @classmethod
    def release(cls, X: np.ndarray, columns: list[tuple[int, float, float]], *,
                epsilon: float, cells: int = 32, smoothing: float = 0.03,
                rng: np.random.Generator | int | None = None) -> FeatureGrid:
        """Release the grid of the rows ``X`` (encoded, one record each): ``epsilon``-DP.

        The histograms (:meth:`counts`) get Laplace noise of scale ``F / epsilon`` per cell;
        :meth:`from_noisy` turns them into the maps (post-processing)."""
        F = max(len(columns), 1)
        noisy = LaplaceMechanism(epsilon=epsilon, sensitivity=F, rng=rng,
                                 integers=True).release(
            cls.counts(X, columns, cells)) if columns else np.zeros((0, int(cells)))
        return cls.from_noisy(columns, noisy, scale=F / epsilon, smoothing=smoothing)

    @classmethod
    def from_noisy(cls, columns: list[tuple[int, float, float]], noisy: np.ndarray, *,
                   scale: float, smoothing: float = 0.03) -> FeatureGrid:
        """The maps from released histograms with Laplace noise of ``scale`` per cell.

        Each histogram is shrunk toward the uniform one by the share of its spread that the
        noise explains (variance ``2 scale^2`` per cell against the released cells' own, at
        least ``smoothing``, which keeps the map strictly increasing): a feature spread evenly
        keeps about the identity map, a skewed one its quantiles."""
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing!r}")
        noisy = np.asarray(noisy, dtype=np.float64).reshape(len(columns), -1)
        cells = noisy.shape[1]
        spread = noisy.var(axis=1, keepdims=True)
        lam = np.clip(2.0 * scale ** 2 / np.maximum(spread, 1e-12), smoothing, 1.0)
        h = np.maximum(noisy, 0.0)
        total = h.sum(axis=1, keepdims=True)
        p = np.divide(h, total, out=np.full_like(h, 1.0 / cells), where=total > 0)
        p = (1.0 - lam) * p + lam / cells
        cdf = np.concatenate([np.zeros((len(columns), 1)), np.cumsum(p, axis=1)], axis=1)
        cdf /= cdf[:, -1:]
        return cls(columns, cdf)

    def forward(self, X: np.ndarray) -> np.ndarray:
        """``X`` (2-d, encoded rows) with each mapped column through its map; a copy.
        Missing values (NaN) stay missing; values outside a domain are clipped to it."""
        out = np.array(X, dtype=np.float64, copy=True)
        if not self.columns or out.size == 0:
            return out
        out[:, self._idx] = self.map_columns(out[:, self._idx])
        return out

    def map_columns(self, V: np.ndarray) -> np.ndarray:
        """The mapped columns alone: ``V`` holds each mapped column's values (shape ``(rows,
        len(columns))``, in :attr:`columns` order); a new array."""
        u = np.clip((V - self._lo) / np.where(self._span > 0, self._span, 1.0), 0.0, 1.0)
        off = 2.0 * np.arange(len(self.columns))
        mapped = np.interp(u + off, self._edges, self._knots) - off
        mapped = np.where(np.isnan(V), np.nan, self._lo + self._span * mapped)
        return np.where(self._span > 0, mapped, V)

    def raw_thresholds(self, feature: np.ndarray, threshold: np.ndarray) -> np.ndarray:
        """Thresholds of mapped space in raw units: ``g^-1(t)`` where ``feature`` (per node) is
        a mapped column; other nodes (categorical columns, leaves) keep theirs."""
        t = np.array(threshold, dtype=np.float64, copy=True)
        feature = np.asarray(feature)
        if not self.columns or t.size == 0:
            return t
        pos = np.full(max(int(self._idx.max()), int(feature.max(initial=0))) + 1, -1)
        pos[self._idx] = np.arange(len(self._idx))
        k = np.where(feature >= 0, pos[np.clip(feature, 0, None)], -1)
        kk = np.maximum(k, 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            u = (t - self._lo[kk]) / self._span[kk]
        inside = (k >= 0) & (self._span[kk] > 0) & np.isfinite(u) & (u >= 0.0) & (u <= 1.0)
        raw = np.interp(u[inside] + 2 * kk[inside], self._knots, self._edges) - 2 * kk[inside]
        t[inside] = self._lo[kk[inside]] + self._span[kk[inside]] * raw
        return t

    def quantiles(self, probs: tuple[float, ...] = (0.1, 0.5, 0.9)) -> dict:
        """Each column's released quantiles (raw units): post-processing, for reports."""
        out = {}
        edges = np.linspace(0.0, 1.0, self.cdf.shape[1])
        for k, (c, lo, hi) in enumerate(self.columns):
            q = np.interp(probs, self.cdf[k], edges)
            out[c] = [round(float(lo + (hi - lo) * v), 6) for v in q]
        return out

    def report(self, names: list) -> dict:
        """The grid's part of a privacy report (post-processing): its cells and each
        column's released 10/50/90% quantiles under ``names`` (one per column)."""
        q = self.quantiles()
        return {"cells": self.cdf.shape[1] - 1,
                "quantiles_10_50_90": {n: q[c] for n, (c, _, _) in
                                       zip(names, self.columns, strict=True)}}
