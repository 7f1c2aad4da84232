"""Accuracy floors on real data at epsilon = 0.5 (seeded; honest margins below the measured
means in docs/benchmarks.md, which come from `dpstream bench` with 5 repeats)."""

from __future__ import annotations

from dpstream.stream.bench import run_bench


def test_abalone_r2_floor_at_epsilon_half():
    res = run_bench("sgbdt", "abalone", 0.5, repeats=1, folds=5, seed=0)
    assert res["mean"] >= ABALONE_FLOOR, res


def test_adult_error_floor_at_epsilon_half():
    res = run_bench("sgbdt", "adult", 0.5, repeats=1, folds=5, seed=0)
    assert res["mean"] <= ADULT_CEILING, res


ABALONE_FLOOR = 0.25
ADULT_CEILING = 0.175
