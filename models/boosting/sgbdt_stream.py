"""Stream batches for S-GBDT: many records learned exactly as one at a time.

:func:`learn_stream` learns a batch as if ``learn_one`` had seen its records one by one (the
same rounds after the same arrivals, the same drift releases and random draws), with the
encoding and scoring vectorised between rounds; :func:`reuse` hands it the rows and raw
scores of the batch's ``predict_many`` when they are still valid. Privacy is unchanged by
construction: the state after ``learn_stream`` is the state after the same records one at a
time, bit for bit.

Design: docs/sgbdt_internals.md#stream-batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..encoding import EncodedRows

__all__ = ["learn_stream", "reuse"]


def learn_stream(model: Any, X: Sequence, y: Sequence) -> None:
    """``model.learn_one(X[i], y[i])`` for every ``i`` in order, with the same result (see
    docs/sgbdt_internals.md#stream-batches); ``model`` is an S-GBDT estimator.

    The batch is encoded in one call (a bad record raises before anything is learned) and cut
    into segments that end where the next round is due, or at a record whose drift release
    detects a change; within a segment the forest cannot change, so each record's raw score
    comes from one call.

    Examples
    --------
    >>> from dpstream.models import SGBDTClassifier
    >>> from dpstream.stream import load_adult
    >>> X, y, schema = load_adult("train")
    >>> a = SGBDTClassifier(schema=schema, epsilon=1.0, seed=0)
    >>> b = SGBDTClassifier(schema=schema, epsilon=1.0, seed=0)
    >>> for xi, yi in zip(X[:3000], y[:3000]):
    ...     a.learn_one(xi, yi)
    >>> b.learn_stream(X[:1000], y[:1000]); b.learn_stream(X[1000:3000], y[1000:3000])
    >>> a.training_rounds == b.training_rounds, a.privacy_report() == b.privacy_report()
    (True, True)
    >>> all(a.predict_proba_one(xi) == b.predict_proba_one(xi) for xi in X[3000:3500])
    True
    """
    n = len(y)
    if len(X) != n:
        raise ValueError(f"X has {len(X)} records but y has {n} labels")
    encoded = type(X) is EncodedRows   # validated and encoded by the stream service
    if n <= 1 and not encoded:
        for i in range(n):
            model.learn_one(X[i], y[i])
        return
    known = reuse(model, X)
    sums = None
    if known is None:
        rows = model._encoder.encode_many(X if isinstance(X, list) or encoded else list(X))
        scores = parts = None
    else:   # predict_many encoded and scored these records
        rows, scores, parts, sums = known
        if sums is not None:   # its tree sums: each round's tree is added to them (_advance)
            sums, parts = sums.copy(), None if parts is None else parts.copy()
    targets = model._encoder.encode_targets(list(y))
    model._last = None
    drift = model._drift
    i = 0
    while i < n:
        end = min(n, i + model._arrivals_to_round())
        if sums is not None:   # (raw_scores_parts: the initial score plus the tree sums)
            raw = model._engine.base_score + sums[i:end]
        else:
            raw = None if scores is None else scores[i:end]
        part = None if raw is None or parts is None else parts[i:end]
        if drift is not None:
            e = model._engine
            if raw is None:
                if e is None:
                    raw = np.zeros(end - i)
                else:   # with block retirement, the per-block sums come with the scores
                    raw, part = e.raw_scores_parts(rows[i:end])
            k = drift.update_many(_losses(model, raw, targets[i:end]))
            if k is not None:   # the k-th record's release starts a new generation
                _append(model, rows[i:i + k], targets[i:i + k], raw[:k],
                        None if part is None else part[:k])
                model._new_generation()
                scores = parts = sums = None   # the trees they were scored by are retired
                _append(model, rows[i + k:i + k + 1], targets[i + k:i + k + 1], None, None)
                i += k + 1
                if _round_if_due(model):
                    scores = parts = sums = None
                continue
        _append(model, rows[i:end], targets[i:end], raw, part)
        i = end
        key = _forest_key(model)
        if _round_if_due(model):   # a new tree: the rest of the batch moves by it, or is
            scores = None          # scored afresh
            sums, parts = _advance(model, rows, i, sums, parts, key)


def _forest_key(model: Any) -> tuple | None:
    e = model._engine
    return None if e is None else (id(e), len(e.forest), e.trees_retired, e.generation)


def _advance(model: Any, rows: np.ndarray, i: int, sums: np.ndarray | None,
             parts: np.ndarray | None,
             key: tuple | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """After a round: the tree sums (and per-block sums) of the batch's records from ``i`` on
    with the round's one new tree's values added, in place — the same bits as scoring them
    afresh, which adds every live tree's value in tree order from 0.0. ``(None, None)`` when
    the forest changed otherwise (trees retired: the sums would start at another tree)."""
    e = model._engine
    if sums is None or key is None or i >= sums.size or key != (
            id(e), len(e.forest) - 1, e.trees_retired, e.generation):
        return None, None
    t = len(e.forest) - 1
    nodes = e.forest.apply(t, rows[i:])
    e.forest.add_tree_values(sums[i:], t, nodes)
    if parts is not None:   # (the tree's block slot: a column of the per-block sums)
        slot = e.blocks.slot_of(e.trees_retired + t)
        column = np.ascontiguousarray(parts[i:, slot])
        e.forest.add_tree_values(column, t, nodes)
        parts[i:, slot] = column
    return sums, parts


def _losses(model: Any, raw: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``model._loss_of`` of each record, vectorised with the same floating-point steps."""
    if model._loss == "squared":
        return np.abs(np.minimum(np.maximum(raw, -1.0), 1.0) - target) / 2.0
    if raw.ndim == 2:   # K classes: the arg-max class against the label
        return (np.argmax(raw, axis=1) != target.astype(np.int64)).astype(np.float64)
    return ((raw > 0.0) != (target > 0.5)).astype(np.float64)


def _append(model: Any, rows: np.ndarray, targets: np.ndarray, raw: np.ndarray | None,
            parts: np.ndarray | None) -> None:
    model._buffer_X.extend(rows)   # row views: a checkpoint stores them as lists
    model._buffer_y.extend(targets.tolist())
    model._buffer_raw.extend([None] * len(targets) if raw is None else raw.tolist())
    model._buffer_parts.extend([None] * len(targets) if parts is None else parts)
    model.records_seen += len(targets)


def _round_if_due(model: Any) -> bool:
    if model._buffer_y and len(model._buffer_y) + model._buffer_blank >= model._round_interval():
        model._flush()
        model.engine.round()
        return True
    return False


def reuse(model: Any, X: Any) -> tuple | None:
    """The encoded rows, raw scores, per-block sums (``None`` without block retirement) and
    tree sums (the raw scores less the initial score; ``None`` for a K-class model) of ``X``
    from the model's last ``predict_many`` (the service predicts a batch, then learns it or
    part of it), or ``None``.

    They are reused only if ``X`` is a list of the very records predicted, in their order
    (any subset of them), each still equal to the copy taken when it was predicted — or the
    very :class:`~dpstream.models.encoding.EncodedRows` predicted, or rows taken from them
    (read-only) — and the forest has not changed since (:meth:`_score_state`): then they are
    exactly what encoding and scoring ``X`` again would give. The memo is used once.
    """
    last = getattr(model, "_last_many", None)
    model._last_many = None
    if last is None or last[4] != model._score_state():
        return None
    seen, copies, rows, raw, _, parts, sums = last
    if type(X) is EncodedRows and type(seen) is EncodedRows:
        if X is seen:
            return rows, raw, parts, sums
        if X.parent is not seen:
            return None
        return _pick(X.index, rows, raw, parts, sums)
    if type(X) is not list or type(seen) is not list:
        return None
    idx, j, m = [], 0, len(seen)
    for x in X:
        while j < m and seen[j] is not x:
            j += 1
        if j == m or copies[j] != x:
            return None
        idx.append(j)
        j += 1
    if len(idx) == m:
        return rows, raw, parts, sums
    return _pick(np.array(idx, dtype=np.intp), rows, raw, parts, sums)


def _pick(pick: np.ndarray, rows: np.ndarray, raw: np.ndarray, parts: np.ndarray | None,
          sums: np.ndarray | None) -> tuple:
    return (rows[pick], raw[pick], None if parts is None else parts[pick],
            None if sums is None else sums[pick])
