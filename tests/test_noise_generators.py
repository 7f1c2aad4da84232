"""The noise generator (issue 65): AES-CTR from OS entropy in production, seeds only for
tests and benchmarks (refused by ``serve``), and checkpoints from before that resume with a
fresh cryptographic generator."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.accounting import as_generator, secure_generator
from dpstream.accounting.noise import is_secure
from dpstream.connectors import CheckpointStore
from dpstream.models import MedianForestClassifier, SGBDTClassifier
from dpstream.stream.runner import Runner, describe
from dpstream.stream.service import ServeSettings

SCHEMA = {"features": {"a": {"type": "numeric", "min": 0, "max": 1},
                       "b": {"type": "numeric", "min": 0, "max": 1}},
          "target": {"type": "binary", "values": [False, True]}}


def _generators(obj, seen=None) -> list[np.random.Generator]:
    """Every numpy Generator reachable from ``obj``'s attributes and containers."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, np.random.Generator):
        return [obj]
    out = []
    items = (obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple))
             else vars(obj).values() if hasattr(obj, "__dict__") else ())
    for v in items:
        if isinstance(v, (np.ndarray, str, bytes, int, float)):
            continue
        out += _generators(v, seen)
    return out


def test_production_noise_comes_from_aes_ctr_and_seeds_from_pcg64():
    assert is_secure(as_generator(None)) and is_secure(secure_generator())
    assert not is_secure(as_generator(3))
    a, b = secure_generator(), secure_generator()
    assert a.integers(2**62) != b.integers(2**62)     # keyed from OS entropy, independently


@pytest.mark.parametrize("cls", [SGBDTClassifier, MedianForestClassifier])
def test_a_model_without_a_seed_draws_only_from_aes_ctr(cls):
    rng = np.random.default_rng(0)
    model = cls(schema=SCHEMA, epsilon=1.0)
    for x in rng.random((600, 2)):
        model.learn_one({"a": float(x[0]), "b": float(x[1])}, bool(x[0] > x[1]))
    found = _generators(model)
    assert found and all(is_secure(g) for g in found), [type(g.bit_generator) for g in found]
    seeded = cls(schema=SCHEMA, epsilon=1.0, seed=1)
    seeded.learn_one({"a": 0.1, "b": 0.2}, True)
    assert not any(is_secure(g) for g in _generators(seeded))


def test_serve_refuses_a_seed_unless_allowed(monkeypatch):
    monkeypatch.delenv("DPSTREAM_ALLOW_SEED", raising=False)
    base = {"bootstrap": "localhost:1", "topic": "t", "group": "g", "model": "sgbdt",
            "schema_path": "s.json", "checkpoint_dir": "c", "epsilon": 1.0}
    with pytest.raises(ValueError, match="refuses --seed"):
        ServeSettings(**base, seed=1)
    assert ServeSettings(**base, seed=1, allow_seed=True).seed == 1
    assert ServeSettings(**base).seed is None
    monkeypatch.setenv("DPSTREAM_ALLOW_SEED", "1")
    assert ServeSettings(**base, seed=2).seed == 2


def _old_checkpoint(tmp_path, seed):
    """A runner whose model draws from PCG64, as every model did before issue 65."""
    runner = Runner.create("median-forest", SCHEMA, store=CheckpointStore(tmp_path),
                           epsilon=1.0, seed=seed, params={"window_size": 60, "warmup": None})
    model = runner.model
    model._rng = np.random.default_rng(7)           # what a checkpoint of before held
    runner.checkpoint()
    runner.store.close()
    return model


def test_an_old_production_checkpoint_resumes_with_a_fresh_aes_ctr_and_says_so(tmp_path):
    _old_checkpoint(tmp_path, seed=None)
    with CheckpointStore(tmp_path) as store:
        runner = Runner.create("median-forest", SCHEMA, store=store, epsilon=1.0)
        assert is_secure(runner.model._rng)
        note = describe(runner.state())["noise"]
        assert "replaced" in note and "PCG64" in note["replaced"], note
        assert note["generator"].startswith("AES-CTR")
        runner.checkpoint()                               # the note is kept
    with CheckpointStore(tmp_path) as store:
        again = Runner.create("median-forest", SCHEMA, store=store, epsilon=1.0)
        assert "replaced" in describe(again.state())["noise"]


def test_a_seeded_checkpoint_keeps_its_reproducible_generator(tmp_path):
    _old_checkpoint(tmp_path, seed=3)
    with CheckpointStore(tmp_path) as store:
        runner = Runner.create("median-forest", SCHEMA, store=store, epsilon=1.0, seed=3)
        assert not is_secure(runner.model._rng)
        assert runner.model._rng.bit_generator.state == np.random.default_rng(7) \
            .bit_generator.state                   # exactly the checkpoint's state
        assert "replaced" not in describe(runner.state())["noise"]
