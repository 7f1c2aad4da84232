"""Stream batches for window forests: many records learned exactly as one at a time.

:func:`learn_stream` learns a batch (a Kafka poll) as if ``learn_one`` had seen the records one
by one — the same window boundaries, drift releases and random draws — only faster: it encodes
the batch once and scores each segment up to the next window close in one call. Privacy is
unchanged by construction: the model's state afterwards is the state after the same records
one at a time (tests compare the two bit for bit). :func:`rows_state` and
:func:`rows_from_state` carry the open window's buffered rows through a checkpoint.

The design: ``docs/window_exchange.md#stream-batches``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..encoding import EncodedRows

__all__ = ["learn_stream", "rows_state", "rows_from_state", "BLANK"]

UNLABELED = -1   # (window_forest.UNLABELED: that module imports this one)
#: the label code of a blank row: a message the forest does not learn (``advance``), which
#: holds a place in the open window and is dropped before training
BLANK = -2


def learn_stream(forest: Any, X: Sequence, y: Sequence, public: Sequence | None = None,
                 t: Sequence | None = None) -> None:
    """``forest.learn_one(X[i], y[i], public=public[i], t=t[i])`` for every ``i`` in order,
    with the same result (``docs/window_exchange.md#stream-batches``).

    Examples
    --------
    >>> from dpstream.models import MedianForestClassifier
    >>> from dpstream.stream import load_adult
    >>> X, y, schema = load_adult("train")
    >>> a = MedianForestClassifier(schema=schema, epsilon=1.0, seed=0)
    >>> b = MedianForestClassifier(schema=schema, epsilon=1.0, seed=0)
    >>> for xi, yi in zip(X[:6000], y[:6000]):
    ...     a.learn_one(xi, yi)
    >>> b.learn_stream(X[:2500], y[:2500]); b.learn_stream(X[2500:6000], y[2500:6000])
    >>> a.windows_closed == b.windows_closed == 6, a.privacy_report() == b.privacy_report()
    (True, True)
    >>> all(a.predict_one(xi) == b.predict_one(xi) for xi in X[6000:6500])
    True
    """
    n = len(y)
    if len(X) != n:
        raise ValueError(f"X has {len(X)} records but y has {n} labels")
    flags = [False] * n if public is None else [bool(p) for p in public]
    if len(flags) != n or (t is not None and len(t) != n):
        raise ValueError(f"public and t need one value per record ({n})")
    encoded = type(X) is EncodedRows   # validated and encoded by the stream service
    if forest.window_seconds is not None or (n <= 1 and not encoded):
        for i in range(n):   # time windows close on each record's own arrival time
            forest.learn_one(X[i], y[i], public=flags[i], t=None if t is None else t[i])
        return
    rows = forest._encoder.encode_many(X if isinstance(X, list) or encoded else list(X))
    labels = _label_codes(forest._encoder, y)
    forest._last = None
    drift = forest._drift
    i = 0
    while i < n:
        size = forest.current_window_size
        end = min(n, i + max(1, size - len(forest._buffer_y)))
        stop, detected, fed = end, False, False
        if drift is not None:   # every record counts in the drift window (unlabeled: loss 0)
            seg = labels[i:end]
            losses = np.zeros(end - i)
            scored = np.flatnonzero(seg != UNLABELED)
            fed = True
            if scored.size:
                wrong = np.argmax(forest._scores(rows[i:end][scored]), axis=1) != seg[scored]
                losses[scored] = wrong
            k = drift.update_many(losses)
            if k is not None:
                stop, detected = i + int(k) + 1, True
        _append(forest, rows[i:stop], labels[i:stop], flags[i:stop])
        if fed:
            forest._buffer_fed = True
        if detected:
            forest._new_generation()
        elif len(forest._buffer_y) >= size:
            forest._close_window()
        i = stop


def _label_codes(encoder: Any, y: Sequence) -> np.ndarray:
    """Class codes (``UNLABELED`` for ``None``), as ``encode_target_one`` gives them."""
    classes = encoder.classes
    # first by (type, value): a label of a class's own type (most of them) is that class;
    # the rest (None, numpy scalars, other types) take the per-label path below
    exact = {(c.__class__, c): code for code, c in enumerate(classes)}
    bools = (exact.get((bool, False)), exact.get((bool, True)))
    if None not in bools and len(y) and y[0].__class__ is bool:   # [False, True] classes
        arr = np.asarray(y)
        if arr.dtype == np.bool_ and arr.ndim == 1:   # every label a bool: no None
            return np.array(bools, dtype=np.int64)[arr.view(np.uint8)]
    try:
        codes = [exact.get((v.__class__, v)) for v in y]
    except TypeError:   # an unhashable label: the per-label path raises with the reason
        codes = [None] * len(y)
    if None not in codes:
        return np.array(codes, dtype=np.int64)
    fast = {(isinstance(c, bool), c): code for code, c in enumerate(classes)}
    out = np.array([-2 if c is None else c for c in codes], dtype=np.int64)
    for j in np.flatnonzero(out == -2).tolist():
        v = y[j]
        if v is None:
            out[j] = UNLABELED
            continue
        try:
            code = fast.get((isinstance(v, (bool, np.bool_)), v))
        except TypeError:   # unhashable: the general path raises with the reason
            code = None
        out[j] = code if code is not None else int(encoder.encode_target_one(v))
    return out


def _append(forest: Any, rows: np.ndarray, labels: np.ndarray, flags: list) -> None:
    forest._buffer_X.extend(rows)   # row views: a checkpoint stores them as lists
    forest._buffer_y.extend(labels.tolist())
    forest._buffer_public.extend(flags)
    forest.records_seen += len(flags)
    forest.unlabeled_seen += int((labels == UNLABELED).sum())
    forest.public_seen += sum(flags)


def rows_state(rows: list) -> np.ndarray | list:
    """The open window's buffered rows (learn_one's lists, learn_stream's array views) for a
    checkpoint: one 2-D float64 array, which the checkpoint stores as raw bytes (a window of
    10,000 rows as lists cost a member's checkpoint tens of milliseconds to check and convert);
    an empty buffer stays a list."""
    if not rows:
        return []
    try:
        a = np.array(rows, dtype=np.float64)
    except ValueError:   # rows of different widths: not from one encoder
        a = None
    if a is None or a.ndim != 2 or a.shape[0] != len(rows):
        return [r.tolist() if type(r) is np.ndarray else r for r in rows]
    return a


def rows_from_state(rows: np.ndarray, n: int) -> list:
    """:func:`rows_state`'s array as the buffer learn_stream keeps: a list of row views (of
    a copy: the checkpoint's arrays may be read-only)."""
    if rows.ndim != 2 or rows.shape[0] != n:
        raise ValueError(f"a window's buffered rows: a 2-D array of {n} rows, got shape "
                         f"{rows.shape}")
    return list(np.array(rows, dtype=np.float64))
