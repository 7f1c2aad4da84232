"""Warming a service up on made-up records before it reads its topic.

A fresh process pays on its first records for what Python and numba do once per process: lazy
imports, loading the compiled kernels from numba's cache, setting up their dispatch. Measured
in a new process (a median forest at a share of 1/4, Agrawal records): the first 2,000 records
took 317 µs each to predict and learn, the next ones 30-70 µs, so about half a second of the
process's first records goes to set-up. A member that joins a consumer group to help drain a
backlog would spend that half second on its new partitions, while they wait; in the 16-core
scale-out runs that was about a tenth of a member's CPU at four members
(docs/benchmark_notes.md).

So ``dpstream serve`` first runs a throwaway runner of the same model, with the same
parameters (a window forest's first windows smaller), on records drawn from the schema's
public domains (:func:`public_records`:
uniform over each numeric feature's declared range, each categorical feature's declared values
and the target's classes or range) until a window or a round has closed, predicting each
batch as the service does; a member also exports a window and encodes it as a model-topic
message. Then it joins the group. **No private record is read:** the made-up records come from
public knowledge only, and the throwaway model, its temporary checkpoint directory and its
predictions (sent to a sink that drops them) are discarded — nothing is released, so nothing
is charged. ``DPSTREAM_WARM_UP=false`` skips it.

Examples
--------
>>> from dpstream.stream import ADULT_SCHEMA
>>> X, y = public_records(ADULT_SCHEMA, 3, seed=0)
>>> sorted(X[0]) == sorted(ADULT_SCHEMA.features), set(y) <= {False, True}
(True, True)
>>> stats = warm_up("median-forest", ADULT_SCHEMA, epsilon=1.0, member=True)
>>> stats["records"], stats["windows"]
(600, 2)
"""

from __future__ import annotations

import json
import tempfile
import time
from typing import Any

import numpy as np

from ..connectors.checkpoint import CheckpointStore
from ..connectors.records import SourceRecord
from ..models.schema import Schema
from .runner import Runner, build_model

__all__ = ["public_records", "warm_up"]

#: made-up records a warm-up feeds (a window forest's throwaway copy closes its first windows
#: at 200 and 600 records, :data:`WARM_UP_WINDOW`; S-GBDT's first round comes after 32)
WARM_UP_RECORDS = 600

#: the first window of a window forest's throwaway copy (its ``warmup``; the model's own
#: windows are not changed)
WARM_UP_WINDOW = 200


def public_records(schema: Schema, n: int, *, seed: int = 0) -> tuple[list[dict], list]:
    """``n`` made-up records and labels drawn from the schema's public domains only."""
    rng = np.random.default_rng(seed)
    cols: dict[Any, list] = {}
    for name, feat in schema.features.items():
        if feat.type == "numeric":
            cols[name] = rng.uniform(feat.min, feat.max, n).tolist()
        else:
            cols[name] = [feat.values[i] for i in rng.integers(0, len(feat.values), n)]
    t = schema.target
    y = (rng.uniform(t.min, t.max, n).tolist() if t.type == "numeric"
         else [t.values[i] for i in rng.integers(0, len(t.values), n)])
    return [{name: cols[name][i] for name in cols} for i in range(n)], y


class _Drop:
    """A predictions sink that drops what it is sent."""

    def send_json(self, msg: Any, key: Any = None) -> None:
        pass

    def flush(self) -> None:
        pass


def warm_up(model_name: str, schema: Schema, *, epsilon: float, params: dict | None = None,
            records: int = WARM_UP_RECORDS, member: bool = False) -> dict:
    """Run a throwaway runner of ``model_name`` on :func:`public_records` (module docstring);
    returns ``{"records", "windows", "rounds", "seconds"}``. With ``member``, predict with a
    window ensemble and encode an exported window as the model topic does."""
    from ..connectors.model_topic import encode_message
    from ..models.windows.window_exchange import WindowEnsemble
    from ..models.windows.window_forest import WindowForestBase

    start = time.perf_counter()
    X, y = public_records(schema, records)
    values = [json.dumps({"id": f"warm-up-{i}", "x": x, "y": label}).encode()
              for i, (x, label) in enumerate(zip(X, y, strict=True))]
    with tempfile.TemporaryDirectory(prefix="dpstream-warm-up-") as tmp:
        store = CheckpointStore(tmp)
        try:
            model = build_model(model_name, schema, epsilon=epsilon, seed=0, params=params)
            if isinstance(model, WindowForestBase):   # close windows within the warm-up
                model = build_model(model_name, schema, epsilon=epsilon, seed=0, params={
                    **(params or {}), "warmup": max(WARM_UP_WINDOW, model.n_trees)})
            runner = Runner(model, store=store, model_name=model_name, predictions=_Drop(),
                            hold_predictions=True, checkpoint_interval=float("inf"))
            ensemble = None
            if member and isinstance(model, WindowForestBase):
                ensemble = WindowEnsemble(model, "warm-up")
                runner.predictor = ensemble
            for i in range(0, records, 256):
                runner.process_many([SourceRecord(value=v, partition="warm-up:0", offset=i + j)
                                     for j, v in enumerate(values[i:i + 256])])
                if ensemble is not None:
                    for state in ensemble.local_updates().values():
                        if state is not None:
                            encode_message(state)
            runner.checkpoint()
        finally:
            store.close()
    return {"records": records, "windows": int(getattr(model, "windows_closed", 0)),
            "rounds": int(getattr(model, "training_rounds", 0)),
            "seconds": round(time.perf_counter() - start, 3)}
