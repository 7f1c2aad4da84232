"""``dpstream audit`` (issue 69): the one-run estimator against independent computations, the
canaries' coins and slots, the attacks on real models, negative controls that must fail, and
the command end to end with its exit statuses."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from dpstream.accounting.audit import (
    DEFAULT_RULES,
    GuessRule,
    audit_scores,
    epsilon_lower_bound,
    guess,
    p_value,
)
from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.stream.audit.attacks import model_scores, schedule
from dpstream.stream.audit.audit_cli import MODEL_NAMES
from dpstream.stream.audit.audit_run import AUDIT_MODELS, build_audited_model, run_audit
from dpstream.stream.audit.canaries import (
    BLANK,
    SYNTHETIC_SCHEMA,
    build_stream,
    coin_flips,
    design_canaries,
    place_canaries,
    rule_label,
    synthetic_records,
)
from dpstream.stream.runner import Runner


# ------------------------------------------------------------- the estimator
def _reference_p(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Steinke et al.'s p-value computed with scipy's binomial (their published algorithm)."""
    q = math.exp(eps) / (1 + math.exp(eps))
    beta = binom.sf(v - 1, r, q)
    alpha, total = 0.0, 0.0
    for i in range(1, v + 1):
        total += binom.pmf(v - i, r, q)
        alpha = max(alpha, total / i)
    return min(1.0, beta + alpha * delta * 2 * m)


def _exact_tail(r: int, v: int, eps: Fraction) -> Fraction:
    """``P[Binomial(r, q) >= v]`` by exact enumeration, q a rational number."""
    q = eps
    return sum((Fraction(math.comb(r, k)) * q ** k * (1 - q) ** (r - k)
                for k in range(v, r + 1)), Fraction(0))


@pytest.mark.parametrize("m,r,v", [(1000, 100, 80), (1000, 1000, 560), (50, 20, 20),
                                   (200, 200, 100), (1000, 10, 9)])
@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0, 4.0])
@pytest.mark.parametrize("delta", [0.0, 1e-5])
def test_the_p_value_matches_scipy(m, r, v, eps, delta):
    assert p_value(m=m, r=r, v=v, epsilon=eps, delta=delta) == pytest.approx(
        _reference_p(m, r, v, eps, delta), rel=1e-9, abs=1e-300)


def test_the_pure_dp_tail_matches_exact_enumeration():
    for r, v in ((12, 9), (20, 20), (15, 8)):
        q = Fraction(3, 4)                      # epsilon = log 3
        exact = float(_exact_tail(r, v, q))
        assert p_value(m=100, r=r, v=v, epsilon=math.log(3)) == pytest.approx(exact, rel=1e-12)


def test_the_lower_bound_is_where_the_p_value_crosses_the_level():
    m, r, v, c = 1000, 300, 240, 0.95
    eps = epsilon_lower_bound(m=m, r=r, v=v, confidence=c)
    assert _reference_p(m, r, v, eps - 1e-4, 0.0) < 1 - c <= _reference_p(m, r, v, eps + 1e-4,
                                                                            0.0)
    # perfect guesses: q^r = 1 - c exactly
    eps = epsilon_lower_bound(m=1000, r=100, v=100, confidence=c)
    q = (1 - c) ** (1 / 100)
    assert eps == pytest.approx(math.log(q / (1 - q)), abs=1e-5)


@settings(max_examples=60, deadline=None)
@given(r=st.integers(1, 400), frac=st.floats(0.0, 0.5))
def test_half_right_or_worse_is_no_evidence(r, frac):
    assert epsilon_lower_bound(m=400, r=r, v=int(frac * r)) == 0.0


@settings(max_examples=40, deadline=None)
@given(r=st.integers(2, 300), v=st.integers(1, 300), delta=st.sampled_from([1e-8, 1e-5, 1e-3]),
       c=st.sampled_from([0.9, 0.95, 0.99]))
def test_the_bound_is_monotone(r, v, delta, c):
    v = min(v, r - 1)
    m = 300
    lo = epsilon_lower_bound(m=m, r=r, v=v, confidence=c)
    hi = epsilon_lower_bound(m=m, r=r, v=v + 1, confidence=c)
    assert hi >= lo - 1e-6                                    # one more right guess
    assert epsilon_lower_bound(m=m, r=r, v=v + 1, confidence=c, delta=delta) <= hi + 1e-6
    assert epsilon_lower_bound(m=m, r=r, v=v + 1, confidence=0.999) <= hi + 1e-6


def test_the_bound_holds_for_an_exactly_epsilon_dp_mechanism():
    """Randomized response on each canary's coin is exactly eps-DP and the best attack on it
    guesses right with probability q: the 95% bound must exceed eps in at most about 5% of
    runs; the same at 3 eps claimed as eps must exceed it almost always."""
    rng = np.random.default_rng(0)
    eps, m, runs = 1.0, 1000, 200
    over, caught = 0, 0
    for _ in range(runs):
        secrets = rng.integers(0, 2, m)
        for true_eps, counter in ((eps, "over"), (3 * eps, "caught")):
            q = math.exp(true_eps) / (1 + math.exp(true_eps))
            said = np.where(rng.random(m) < q, secrets, 1 - secrets)
            bound = epsilon_lower_bound(m=m, r=m, v=int((said == secrets).sum()))
            if bound > eps:
                over += counter == "over"
                caught += counter == "caught"
    assert over <= 0.05 * runs + 3 * math.sqrt(0.05 * runs)   # a 5% event, with slack
    assert caught >= 0.95 * runs


def test_guesses_and_the_bonferroni_grid():
    assert guess([0.9, 0.1, 0.5, 0.7], 2, 1).tolist() == [1, -1, 0, 1]
    assert guess([1.0, 1.0, 1.0], 1, 1).tolist() == [1, 0, -1]      # ties: by position
    with pytest.raises(ValueError, match="k_in"):
        guess([1.0, 2.0], 2, 1)
    scores = np.arange(100, dtype=float)
    secrets = scores >= 50                                            # a perfect attack
    one = audit_scores(scores, secrets, rules=[GuessRule(0.5, 0.5)])
    assert one.epsilon_lower == pytest.approx(epsilon_lower_bound(m=100, r=100, v=100))
    grid = audit_scores(scores, secrets)
    assert len(grid.rules) == len(DEFAULT_RULES) == 10
    per_rule = 1 - 0.05 / len(DEFAULT_RULES)
    assert grid.epsilon_lower == pytest.approx(
        epsilon_lower_bound(m=100, r=100, v=100, confidence=per_rule))
    assert grid.epsilon_lower < one.epsilon_lower                   # the correction costs
    with pytest.raises(ValueError, match="one length"):
        audit_scores([1.0, 2.0], [True])


# ------------------------------------------------------------- the canaries
def test_the_coins_are_fair_and_the_stream_is_fixed_by_its_seed():
    coins = coin_flips(20_000, seed=3)
    assert abs(coins.mean() - 0.5) < 4 * math.sqrt(0.25 / 20_000)
    assert (coin_flips(50, seed=3) == coins[:50]).all()
    assert (coin_flips(200, seed=4) != coin_flips(200, seed=3)).any()
    a = run_stream(seed=7)
    b = run_stream(seed=7)
    assert a.messages == b.messages and (a.secrets == b.secrets).all()
    assert run_stream(seed=8).messages != a.messages


def run_stream(seed: int, m: int = 100):
    X, y = synthetic_records(SYNTHETIC_SCHEMA, 1000, seed=seed)
    points, labels = design_canaries(SYNTHETIC_SCHEMA, m, seed=seed)
    slots = place_canaries(np.arange(200, 1100), m, seed=seed)
    return build_stream(X, y, points, labels, slots, coin_flips(m, seed=seed))


def test_canaries_are_distinct_extremes_labelled_against_the_rule():
    s = run_stream(seed=1, m=300)
    keys = {json.dumps(p, sort_keys=True) for p in s.points}
    assert len(keys) == 300
    for p, label in zip(s.points, s.labels, strict=True):
        assert all(p[f"x{i}"] in (0.0, 100.0) for i in range(6))
        assert label != rule_label(SYNTHETIC_SCHEMA, p)
    # an included canary is its record in its slot; an excluded one a blank there
    for i, slot in enumerate(s.slots):
        msg = s.messages[slot]
        assert msg["id"] == f"canary-{i}"
        assert (msg["x"] == s.points[i]) if s.secrets[i] else (msg["x"] is BLANK["x"])
    assert len(s.messages) == 1300 and 200 <= s.slots.min() and s.slots.max() < 1100


def test_an_excluded_canary_is_a_dead_letter_that_keeps_its_slot(tmp_path):
    runner = Runner.create("sgbdt", SYNTHETIC_SCHEMA, store=CheckpointStore(tmp_path),
                           epsilon=1.0, seed=0)
    for i in range(5):
        runner.process(SourceRecord(json.dumps({"id": f"canary-{i}", **BLANK}).encode(),
                                    "t:0", i))
    assert runner.counters["dead_letters"] == 5 and runner.counters["learned"] == 0
    dry = build_audited_model("sgbdt", SYNTHETIC_SCHEMA, epsilon=1.0, seed=0)
    dry.advance(5)                        # the public schedule moved on over the five slots
    assert runner.model.training_rounds == dry.training_rounds > 0


def test_a_real_source_labels_canaries_against_their_orthant(tmp_path):
    schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 10},
                           "k": {"type": "categorical", "values": ["u", "v"]}},
              "target": {"type": "binary", "values": ["no", "yes"]}}
    rows = [{"a": a, "k": "u"} for a in range(11)] * 10
    labels = ["yes" if r["a"] > 5 else "no" for r in rows]
    path = tmp_path / "records.csv"
    path.write_text("a,k,label\n" + "".join(f"{r['a']},{r['k']},{lab}\n"
                                             for r, lab in zip(rows, labels, strict=True)))
    from dpstream.stream.audit.canaries import resolve_schema, source_records
    schema = resolve_schema(schema)
    X, y = source_records(str(path), schema, 50, label="label")
    assert len(X) == 50 and X[7] == {"a": 7.0, "k": "u"} and y[7] == "yes"
    jsonl = tmp_path / "records.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i, "x": x, "y": lab}) + "\n"
                             for i, (x, lab) in enumerate(zip(X, y, strict=True))))
    assert source_records(str(jsonl), schema, 10)[0] == X[:10]
    points, out = design_canaries(schema, 4, seed=0, background=(rows, labels))
    for p, lab in zip(points, out, strict=True):     # high a says yes there: canaries say no
        assert lab == ("no" if p["a"] == 10.0 else "yes")
    with pytest.raises(ValueError, match="only 4 distinct canaries"):
        design_canaries(schema, 5, seed=0, background=(rows, labels))


def test_the_window_schedule_is_what_the_model_keeps():
    model = build_audited_model("random-forest", SYNTHETIC_SCHEMA, epsilon=1.0, seed=0)
    sched = schedule("random-forest", model, 21_000)
    # windows of 250, 500, ..., 8,000: the newest two closed ones, 3,750-7,750-15,750
    assert sched.detail == {"starts": [3750, 7750], "ends": [7750, 15750]}
    assert sched.eligible[0] == 3750 and sched.eligible[-1] == 15749
    assert set(MODEL_NAMES) == set(AUDIT_MODELS)


# ------------------------------------------------------------- negative controls
class ExactCounts:
    """A deliberately broken 'model': its release is the exact count of each label at each
    point it learned (no noise) - what a model publishing an exact count leaks."""

    def __init__(self, schema):
        self.classes = list(schema.target.values)
        self.counts: dict[str, dict] = {}

    def learn_one(self, x, y):
        c = self.counts.setdefault(json.dumps(x, sort_keys=True), dict.fromkeys(self.classes, 0))
        c[y] += 1

    def predict_proba_one(self, x):
        c = self.counts.get(json.dumps(x, sort_keys=True))
        total = sum(c.values()) if c else 0
        if not total:
            return {k: 1 / len(self.classes) for k in self.classes}
        return {k: v / total for k, v in c.items()}


def test_a_model_publishing_exact_counts_fails_far_above_its_claim():
    X, y = synthetic_records(SYNTHETIC_SCHEMA, 5000, seed=0)
    points, labels = design_canaries(SYNTHETIC_SCHEMA, 1000, seed=1)
    stream = build_stream(X, y, points, labels, place_canaries(np.arange(6000), 1000, seed=2),
                          coin_flips(1000, seed=3))
    leaky = ExactCounts(SYNTHETIC_SCHEMA)
    for msg in stream.messages:
        if msg["x"] is not None:
            leaky.learn_one(msg["x"], msg["y"])
    scores = model_scores(leaky, stream.points, stream.labels, SYNTHETIC_SCHEMA)
    bound = audit_scores(scores, stream.secrets)
    assert bound.epsilon_lower > 3 * 1.0, bound        # claimed epsilon 1
    assert bound.v == bound.r


def test_a_real_model_without_its_noise_is_caught_and_with_it_is_not():
    """RDT trained at epsilon 1000 (its noise practically off) against a promise of 1: the
    same audit that passes the model trained at 1 refutes the promise."""
    kw = dict(schema="synthetic", model="rdt", records=6000, canaries=400, seed=0)
    broken = run_audit(epsilon=1000.0, promised_epsilon=1.0, **kw)
    sound = run_audit(epsilon=1.0, **kw)
    assert broken.attack == sound.attack == "window"
    assert broken.epsilon_lower > 1.0 and not broken.passed, broken.summary()
    assert sound.epsilon_lower <= 1.0 and sound.passed, sound.summary()


def test_sgbdt_at_epsilon_one_stays_below_its_promise():
    res = run_audit(schema="synthetic", model="sgbdt", epsilon=1.0, records=12_000,
                    canaries=300, seed=0)
    assert res.attack == "trees"                 # the schedule matched the released trees
    assert res.passed and res.epsilon_lower <= 1.0, res.summary()
    assert res.delta == pytest.approx(5e-8)
    assert len(res.scores) == len(res.secrets) == len(res.guesses) == 300
    # what 300 canaries could prove at most: perfect guesses on all, Bonferroni over the grid
    assert res.ceiling == pytest.approx(epsilon_lower_bound(
        m=300, r=300, v=300, confidence=1 - 0.05 / len(DEFAULT_RULES), delta=5e-8), abs=1e-3)


# ------------------------------------------------------------- the command
def _cli(*args: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpstream.stream.cli", "audit", *args],
                          capture_output=True, text=True, cwd=cwd, env=dict(os.environ),
                          timeout=300)


def test_the_command_end_to_end():
    small = ["--schema", "synthetic", "--model", "rdt", "--records", "4000", "--canaries",
             "300", "--seed", "0"]
    with tempfile.TemporaryDirectory() as tmp:
        ok = _cli(*small, "--epsilon", "1", "--json", "--plot", "audit.png", "--guesses",
                  "g.csv", cwd=tmp)
        assert ok.returncode == 0, ok.stderr
        out = json.loads(ok.stdout)
        assert out["passed"] and out["epsilon_lower"] <= 1.0 and out["m"] == 300
        assert "dpstream audit: stream:" in ok.stderr                 # progress on stderr
        lines = open(os.path.join(tmp, "g.csv")).read().splitlines()
        assert lines[0] == "canary,slot,included,score,guess" and len(lines) == 301
        assert open(os.path.join(tmp, "audit.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
        bad = _cli(*small, "--epsilon", "0.5", "--train-epsilon", "1000", cwd=tmp)
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert "FAILED" in bad.stdout and "negative control" in bad.stdout
        usage = _cli("--schema", "synthetic", "--epsilon", "1", "--canaries", "1", cwd=tmp)
        assert usage.returncode == 2 and "canaries" in usage.stderr
        missing = _cli("--schema", "nowhere.json", "--epsilon", "1", cwd=tmp)
        assert missing.returncode == 2
