"""One noise source (issue 65): no module outside ``accounting/`` draws from a generator's
distributions itself. A model asks a mechanism of :mod:`dpstream.accounting` for noise.

The walk reads every module's syntax tree and counts calls ``<anything>.<distribution>(...)``.
:data:`REMAINING` lists the draws not yet moved behind a mechanism, per module, with the count:
the test fails when a module gains one (a new direct draw) and when it loses one without the
list being updated (so the list is always the true remainder).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the generator methods that draw noise or a mechanism's random choices
DISTRIBUTIONS = frozenset({
    "laplace", "normal", "standard_normal", "gumbel", "exponential", "standard_exponential",
    "uniform", "random", "integers", "choice", "permutation", "shuffle", "binomial", "poisson",
    "geometric", "multivariate_normal",
})
#: modules whose draws touch no private data: benchmark protocols (shuffling public data sets
#: into streams, folds), the schema's synthetic warm-up records (uniform over declared
#: domains), the public per-round seeds of distributed S-GBDT's shared tree shapes
NOT_RELEASES = frozenset({
    "stream/bench/throughput.py", "stream/bench/young_streams.py", "stream/bench/protocols.py",
    "stream/bench/baselines.py", "stream/run.py",
})
#: direct draws still to be moved behind accounting's mechanisms (none left)
REMAINING: dict[str, int] = {}


def _direct_draws() -> Counter:
    found: Counter = Counter()
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.split("/")[0] not in ("models", "stream", "connectors") or rel in NOT_RELEASES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in DISTRIBUTIONS
                    and not (isinstance(node.func.value, ast.Name)
                             and node.func.value.id == "noise")):   # accounting.noise's own
                found[rel] += 1
    return found


def test_no_module_outside_accounting_draws_noise_itself():
    found = _direct_draws()
    new = {m: n for m, n in found.items() if n > REMAINING.get(m, 0)}
    assert not new, f"direct draws from a generator outside accounting/: {new}; ask a " \
                    f"mechanism of dpstream.accounting for the noise instead"
    gone = {m: (REMAINING[m], found.get(m, 0)) for m in REMAINING if found.get(m, 0) < REMAINING[m]}
    assert not gone, f"fewer direct draws than REMAINING lists (listed, found): {gone}; " \
                     f"update REMAINING"


def test_the_walk_sees_a_direct_draw(tmp_path):
    """Control: the walker counts the textbook construction."""
    tree = ast.parse("noisy = v + self.rng.laplace(0.0, b)\nx = rng.normal(size=3)\n")
    calls = [n.func.attr for n in ast.walk(tree)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert {"laplace", "normal"} <= set(calls) and set(calls) <= DISTRIBUTIONS
