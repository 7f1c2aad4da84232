"""One audit run: build the stream with its canaries, train the model as ``dpstream replay``
does, export the public model file, attack it, and turn the scores into an epsilon lower
bound (docs/privacy.md, "Auditing").

Examples
--------
>>> res = run_audit(schema="synthetic", model="median-forest", epsilon=1.0, records=2000,
...                 canaries=100, seed=0)
>>> res.m, res.attack, res.epsilon_lower <= res.promised_epsilon
(100, 'window', True)
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...accounting.audit import DEFAULT_RULES, audit_scores, epsilon_lower_bound, guess
from ...connectors import CheckpointStore
from ...models import DPBoostClassifier, DPBoostRegressor
from ...models.public import public_model
from ..run import replay
from ..runner import SERVICE_MODELS, build_model
from .attacks import ATTACKS, attack, schedule
from .canaries import (
    build_stream,
    coin_flips,
    design_canaries,
    place_canaries,
    resolve_schema,
    source_records,
    synthetic_records,
    write_stream,
)

__all__ = ["AUDIT_MODELS", "AuditResult", "run_audit", "build_audited_model"]

#: the models ``dpstream audit`` takes: the service's, and DPBoost (not a service model:
#: trained record by record with ``learn_one``, as the library does)
AUDIT_MODELS = (*SERVICE_MODELS, "dpboost")


@dataclass
class AuditResult:
    """What an audit found. ``epsilon_lower`` is a lower bound on the privacy loss at
    ``confidence``: above ``promised_epsilon`` it proves the guarantee false; at or below,
    it proves nothing (``passed`` only says that the audit found no violation)."""
    model: str
    schema: str
    source: str
    promised_epsilon: float
    trained_epsilon: float
    delta: float
    confidence: float
    epsilon_lower: float
    ceiling: float            #: the largest bound any attack could show with these canaries
    passed: bool
    m: int
    records: int
    included: int
    r: int
    v: int
    attack: str
    attack_description: str
    rule: dict
    rules: list[dict]
    seconds: dict
    scores: list[float] = field(repr=False)
    secrets: list[bool] = field(repr=False)
    guesses: list[int] = field(repr=False)
    slots: list[int] = field(repr=False)

    def summary(self) -> dict:
        """Everything but the per-canary lists (for ``--json``)."""
        out = asdict(self)
        for key in ("scores", "secrets", "guesses", "slots"):
            out.pop(key)
        return out


def build_audited_model(name: str, schema: Any, *, epsilon: float, seed: int | None = None,
                        params: Mapping | None = None) -> Any:
    """The model ``name`` as the service builds it (:func:`~dpstream.stream.runner.build_model`),
    or DPBoost for the schema's target."""
    if name == "dpboost":
        cls = DPBoostRegressor if schema.target.type == "numeric" else DPBoostClassifier
        return cls(schema=schema, epsilon=epsilon, seed=seed, **dict(params or {}))
    if name not in SERVICE_MODELS:
        raise ValueError(f"unknown model {name!r}; the audit runs {', '.join(AUDIT_MODELS)}")
    return build_model(name, schema, epsilon=epsilon, seed=seed, params=dict(params or {}))


def _say(progress: Callable[[str], None] | None, text: str) -> None:
    if progress is not None:
        progress(text)


def run_audit(*, schema: Any, model: str = "sgbdt", epsilon: float, records: int = 20_000,
              canaries: int = 1000, confidence: float = 0.95, source: str | None = None,
              label: str = "y", seed: int | None = None, params: Mapping | None = None,
              promised_epsilon: float | None = None,
              progress: Callable[[str], None] | None = None) -> AuditResult:
    """Audit ``model`` at ``epsilon`` on one run (module docstring).

    Parameters
    ----------
    schema
        A Schema, its dict, a schema file, or ``synthetic`` / ``adult`` / ``abalone``.
    model
        One of :data:`AUDIT_MODELS`; ``params`` override its defaults as ``--set`` does.
    epsilon
        The budget the model is trained with.
    records, canaries
        Background records and canaries (each canary included with probability 1/2).
    confidence
        The bound's confidence (each guess rule of the fixed grid at the Bonferroni level).
    source
        Background records from ``adult``, ``abalone`` or a ``.jsonl`` / ``.csv`` file
        (``label``: its label column) instead of synthetic ones.
    seed
        Seeds the stream, the coins and the model, for tests and benchmarks; ``None``: OS
        entropy.
    promised_epsilon
        What the bound is compared with (default ``epsilon``): a negative control trains at
        a large epsilon and audits a small promise.
    progress
        Called with a line of text at each stage.
    """
    t0 = time.perf_counter()
    name = schema if isinstance(schema, str) else "custom"
    schema = resolve_schema(schema)
    if canaries < 2 or records < 1:
        raise ValueError(f"need --canaries >= 2 and --records >= 1, got {canaries}, {records}")
    if not 0 < confidence < 1:
        raise ValueError(f"--confidence must lie in (0, 1), got {confidence!r}")
    seeds = np.random.SeedSequence(seed).spawn(5)
    model_seed = None if seed is None else int(seeds[4].generate_state(1)[0] >> 1)
    if source is not None:
        X, y = source_records(source, schema, records, label=label)
    else:
        X, y = synthetic_records(schema, records, seed=seeds[0])
    total = len(X) + canaries
    fresh = build_audited_model(model, schema, epsilon=epsilon, seed=0, params=params)
    sched = schedule(model, fresh, total, canaries)
    points, labels = design_canaries(schema, canaries, seed=seeds[1],
                                     background=(X, y) if source is not None else None)
    slots = place_canaries(sched.eligible, canaries, seed=seeds[2])
    secrets = coin_flips(canaries, seed=seeds[3])
    stream = build_stream(X, y, points, labels, slots, secrets)
    t1 = time.perf_counter()
    _say(progress, f"stream: {len(X)} records and {canaries} canaries ({int(secrets.sum())} "
                   f"included) in slots {int(slots.min())}-{int(slots.max())} of {total}")
    public = _train(model, schema, stream, epsilon=epsilon, seed=model_seed, params=params,
                    progress=progress)
    t2 = time.perf_counter()
    _say(progress, f"trained in {t2 - t1:.1f} s; attacking the released model")
    scores, kind = attack(public, stream, sched, schema)
    delta = float(public.get("privacy", {}).get("delta") or 0.0)
    bound = audit_scores(scores, secrets, confidence=confidence, delta=delta)
    rule = bound.rule
    k_in, k_out = rule.counts(canaries)
    t3 = time.perf_counter()
    promised = float(epsilon if promised_epsilon is None else promised_epsilon)
    each = 1.0 - (1.0 - confidence) / len(DEFAULT_RULES)
    ceiling = max(epsilon_lower_bound(m=canaries, r=r, v=r, confidence=each, delta=delta)
                  for r in {sum(rule.counts(canaries)) for rule in DEFAULT_RULES})
    return AuditResult(
        model=model, schema=str(name), source=source or "synthetic",
        promised_epsilon=promised, trained_epsilon=float(epsilon), delta=delta,
        confidence=confidence,
        epsilon_lower=round(bound.epsilon_lower, 4), ceiling=round(ceiling, 4),
        passed=bound.epsilon_lower <= promised,
        m=canaries, records=len(X), included=int(secrets.sum()), r=bound.r, v=bound.v,
        attack=kind, attack_description=ATTACKS[kind],
        rule={"share_in": rule.share_in, "share_out": rule.share_out},
        rules=[{**row, "epsilon_lower": round(row["epsilon_lower"], 4)} for row in bound.rules],
        seconds={"stream": round(t1 - t0, 2), "train": round(t2 - t1, 2),
                 "attack": round(t3 - t2, 2), "total": round(t3 - t0, 2)},
        scores=[float(s) for s in scores], secrets=[bool(s) for s in secrets],
        guesses=guess(scores, k_in, k_out).tolist(), slots=[int(s) for s in slots])


def _train(model: str, schema: Any, stream: Any, *, epsilon: float, seed: int | None,
           params: Mapping | None, progress: Callable[[str], None] | None) -> dict:
    """The public model file's object of the model trained on ``stream``: through the
    service's runner (``dpstream replay`` over the stream's JSONL file, then the
    checkpoint's model exported as ``dpstream export`` does), or DPBoost by ``learn_one``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # a short stream's warning: the audit knows
        if model == "dpboost":
            est = build_audited_model(model, schema, epsilon=epsilon, seed=seed,
                                      params=params)
            for msg in stream.messages:
                if msg["x"] is not None:
                    est.learn_one(msg["x"], msg["y"])
            return public_model(est)
        with tempfile.TemporaryDirectory(prefix="dpstream-audit-") as tmp:
            path = write_stream(stream, Path(tmp) / "stream.jsonl")
            shown = [0]

            def tick(done: int, total: int | None) -> None:
                if progress is not None and done // 10_000 != shown[0] // 10_000:
                    shown[0] = done
                    progress(f"  {done} messages")
            replay(str(path), schema=schema, model=model, epsilon=epsilon,
                   checkpoint_dir=str(Path(tmp) / "checkpoint"), seed=seed,
                   params=dict(params or {}), progress=tick, kafka_client=None,
                   checkpoint_interval=float("inf"))
            state = CheckpointStore.read(Path(tmp) / "checkpoint")
            if state is None:      # pragma: no cover - replay always checkpoints at its end
                raise RuntimeError("the replay left no checkpoint")
            return public_model(state["model"])


def stderr_progress(text: str) -> None:
    """Progress lines for long audits: on stderr, flushed."""
    print(f"dpstream audit: {text}", file=sys.stderr, flush=True)

