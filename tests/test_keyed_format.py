"""The keyed window forests' file format (issue 67): a reader written from
docs/model_format.md, "Keyed window forests", alone - plain Python integers and floats, no
dpstream code - predicts what ``dpstream.load_model`` and the live model predict, for the random
decision forest, the greedy forest and RDT (with RDT# centers), with a feature grid, with
relevance slots, on a three-class stream and for a member's union."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from dpstream.models import GreedyForestClassifier, RandomDecisionForestClassifier, RDTClassifier
from dpstream.models.public import load_model, public_model
from dpstream.models.windows.window_exchange import WindowEnsemble
from dpstream.stream import load_abalone, load_adult

M64 = (1 << 64) - 1


# ------------------------------------------------------- the page's integer functions
def mix(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def root(secret: int, tree_id: int) -> int:
    return mix((secret & ((1 << 63) - 1)) ^ mix(tree_id))


def child(key: int, branch: int) -> int:
    return mix(key ^ (((branch + 1) * 0xD6E8FEB86659FD93) & M64))


def draw(key: int, n: int) -> tuple[int, float]:
    z = mix(key ^ mix(0xA7))
    return ((z >> 32) * n) >> 32, (z & 0xFFFFFFFF) * 2.0 ** -32


def bucket(key: int, b: int) -> int:
    return mix(key ^ 0x5851F42D4C957F2D) & (b - 1)


def uniform(key: int, salt: int) -> float:
    return (mix(key ^ mix(salt)) >> 11) * 2.0 ** -53


# ------------------------------------------------------- reading the plain JSON
class Array:
    def __init__(self, dtype: str, shape: list[int], data: list):
        self.dtype, self.shape = dtype, shape
        self.data = [float(v) if isinstance(v, str) else v for v in data]

    def row(self, i: int) -> list:
        w = self.shape[1]
        return self.data[i * w:(i + 1) * w]


def decode(v, memo: dict):
    if isinstance(v, list):
        return [decode(x, memo) for x in v]
    if not isinstance(v, dict):
        return v
    if "@array" in v:
        return Array(v["@array"], v["shape"], v["data"])
    if "@tuple" in v:
        return [decode(x, memo) for x in v["@tuple"]]
    if "@float" in v:
        return float(v["@float"])
    if "@dict" in v:
        return {decode(a, memo): decode(b, memo) for a, b in v["@dict"]}
    if "@ref" in v:
        return memo[v["@ref"]]
    if "@object" in v:
        obj = {"@class": v["@object"]}
        memo[v["@id"]] = obj
        obj.update(decode(v["state"], memo))
        return obj
    return {a: decode(b, memo) for a, b in v.items()}


# ------------------------------------------------------- a record, the routing row
def encode(schema: dict, record: dict) -> list[float]:
    row = [0.0]
    for name, f in schema["features"].items():
        v = record.get(name)
        if f["type"] == "numeric":
            row.append(math.nan if v is None else min(max(float(v), f["min"]), f["max"]))
        else:
            row += [math.nan if v is None else (0.0 if v == c else 1.0) for c in f["values"]]
    return row


def grid_map(grid: dict | None, row: list[float]) -> list[float]:
    if grid is None:
        return row
    row = list(row)
    for k, (c, lo, hi) in enumerate(grid["columns"]):
        v = row[c]
        if not lo < hi or math.isnan(v):
            continue
        q = grid["cdf"].row(k)
        cells = len(q) - 1
        u = min(max((v - lo) / (hi - lo), 0.0), 1.0)
        i = min(int(u * cells), cells - 1)
        e0, e1 = i / cells, (i + 1) / cells
        g = q[i] + (u - e0) * (q[i + 1] - q[i]) / (e1 - e0)
        row[c] = lo + (hi - lo) * g
    return row


def routing_row(router: dict, row: list[float]) -> list[float]:
    w = [0.0] + [row[c] for c in router["_num_cols"].data]
    for cols in router["_cat_groups"]:
        vals = [row[c] for c in cols.data]
        w.append(math.nan if math.isnan(vals[0]) else float(vals.index(0.0)))
    return w


def walk(router: dict, w: list[float], tree_id: int, depth: int) -> int:
    s, r = router["s"], router["r"]
    key = root(router["secret"], tree_id)
    lo, hi = list(router["_lo"].data), list(router["_hi"].data)
    free = [True] * r
    for _ in range(depth):
        n = s + sum(free)
        if n == 0:
            break
        rank, u = draw(key, n)
        if rank < s:
            t = lo[rank] + u * (hi[rank] - lo[rank])
            x = w[1 + rank]
            x = math.inf if math.isnan(x) else x
            if x > t:
                branch, lo[rank] = 1, t
            else:
                branch, hi[rank] = 0, t
        else:
            c = [j for j in range(r) if free[j]][rank - s]
            x = w[1 + s + c]
            branch = int(min(math.inf if math.isnan(x) else x, router["_last"].data[c]))
            free[c] = False
        key = child(key, branch)
    return key


def table_row(table: dict, tree_root: int, key: int, level: int, k: int) -> list[float]:
    """The row a tree releases for node ``key`` at ``level``; None where a table of reached
    nodes (``LeafTable``: windows trained before buckets) does not hold the key."""
    if table["@class"] == "LeafTable":
        keys = table["keys"].data
        return table["values"].row(keys.index(key)) if key in keys else None
    start = 0
    roots = table["roots"].data
    for b, lev in table["blocks"]:
        if lev == level:
            i = start + roots.index(tree_root) * b + bucket(key, b)
            break
        start += len(roots) * b
    if "labels" in table:
        return [1.0 if c == table["labels"].data[i] else 0.0 for c in range(table["width"])]
    if "codes" in table:
        return [float(table["codes"].data[i])]
    return (table["values32"] if "values32" in table else table["values"]).row(i)


def zero_label(key: int, k: int) -> list[float]:
    label = min(int(uniform(key, 0xC5) * k), k - 1)
    return [1.0 if c == label else 0.0 for c in range(k)]


def laplace_zero(key: int, k: int, scale: float) -> list[float]:
    out = []
    for c in range(k):
        e = ((mix(key ^ mix(0x1A9 + c)) >> 11) + 0.5) * 2.0 ** -53 - 0.5
        out.append(-scale * math.copysign(1.0, e) * math.log(1.0 - 2.0 * abs(e)))
    return out


def clip(v: list[float]) -> list[float]:
    c = [max(x, 0.0) for x in v]
    total = sum(c)
    return [x / total for x in c] if total > 0 else [0.0] * len(v)


# ------------------------------------------------------- the three models
def rf_scores(model: dict, windows: list[dict], routing: dict, row: list[float],
              k: int) -> list[float]:
    out = [0.0] * k
    for win in windows:
        router = win["extra"].get("router") or routing["_trees"]
        w = routing_row(router, row)
        for tree in win["trees"]:
            key = walk(router, w, tree["id"], tree["depth"])
            tree_root = root(router["secret"], tree["id"])
            vote = table_row(win["extra"]["table"], tree_root, key, 0, k)
            vote = zero_label(key, k) if vote is None else vote
            out = [a + win["weight"] * b for a, b in zip(out, vote, strict=True)]
    return out


def codes(schema: dict, row: list[float], n_bins: int) -> list[int]:
    num, cat, col = [], [], 1
    for f in schema["features"].values():
        if f["type"] == "numeric":
            v, lo, hi = row[col], f["min"], f["max"]
            if math.isnan(v):
                num.append(n_bins - 1)
            else:
                b = math.floor((v - lo) / (hi - lo) * n_bins) if hi > lo else 0
                num.append(min(max(b, 0), n_bins - 1))
            col += 1
        else:
            vals = row[col:col + len(f["values"])]
            cat.append(len(vals) - 1 if math.isnan(vals[0]) else vals.index(0.0))
            col += len(vals)
    return num + cat


def greedy_scores(model: dict, windows: list[dict], routing: dict, row: list[float],
                  k: int) -> list[float]:
    out = [0.0] * k
    c = codes(model["schema"], row, model["params"]["n_bins"])
    for win in windows:
        levels = win["extra"]["levels"]
        for tree in win["trees"]:
            tree_root = key = root(routing["_secret"], tree["id"])
            free = [True] * len(c)
            for lev in range(levels):
                a = table_row(win["extra"]["nodes"], tree_root, key, lev, 1)
                if a is None:   # zero counts: uniform among the attributes not yet taken
                    rank, _ = draw(key, sum(free))
                    a = [j for j in range(len(c)) if free[j]][rank]
                else:
                    a = int(a[0])
                free[a] = False
                key = child(key, c[a])
            vote = table_row(win["extra"]["leaves"], tree_root, key, levels, k)
            vote = zero_label(key, k) if vote is None else vote
            out = [a + win["weight"] * b for a, b in zip(out, vote, strict=True)]
    return out


def rdt_scores(model: dict, windows: list[dict], routing: dict, row: list[float],
               k: int) -> list[float]:
    base = routing["_trees"]
    q = routing_row(base, row)[1:]
    s = base["s"]
    widths = [f["max"] - f["min"] for f in model["schema"]["features"].values()
              if f["type"] == "numeric"]
    ensembles = {True: [0.0] * k, False: [0.0] * k}
    has = {True: False, False: False}
    for win in windows:
        centers = win["extra"]["centers"]
        for tree in win["trees"]:
            router = tree.get("router") or base
            key = walk(router, routing_row(router, row), tree["id"], tree["depth"])
            best, best_d = None, math.inf
            for i, ck in enumerate(centers["keys"].data):
                if ck != key:
                    continue
                p = centers["points"].row(centers["point"].data[i])
                d = 0.0
                for j in range(s):
                    diff = q[j] - p[j]
                    d += 1.0 if math.isnan(diff) else diff * diff / (widths[j] or 1.0) ** 2
                d += sum(1 for j in range(s, len(q)) if not q[j] == p[j])
                if d < best_d:
                    best, best_d = i, d
            if best is not None:
                value = centers["values"].row(best)
            elif tree["primary"]:
                value = table_row(win["extra"]["cells"], root(router["secret"], tree["id"]),
                                  key, 0, k)
                value = laplace_zero(key, k, tree["scale"]) if value is None else value
            else:
                value = [0.0] * k
            if model["params"]["combine"] == "average":
                value = clip(value)
            has[tree["primary"]] = True
            acc = ensembles[tree["primary"]]
            ensembles[tree["primary"]] = [a + win["weight"] * b
                                          for a, b in zip(acc, value, strict=True)]
    parts = [clip(ensembles[e]) for e in (True, False) if has[e]]
    return [sum(p[c] for p in parts) / len(parts) for c in range(k)] if parts else [0.0] * k


SCORES = {"RandomDecisionForestClassifier": rf_scores, "GreedyForestClassifier": greedy_scores,
          "RDTClassifier": rdt_scores}


def page_proba(model: dict, record: dict) -> list[float]:
    """The page's prediction of one record: class probabilities in the schema's order."""
    classes = model["schema"]["target"]["values"]
    k = len(classes)
    state = decode(model["windows"], {})
    if model["combine"] == "model":
        n = [max(1, w["labeled"]) for w in state["windows"]]
        last, decay = len(n) - 1, model["params"]["window_decay"]
        for i, w in enumerate(state["windows"]):
            w["weight"] = n[i] / max(n) * decay ** (last - i)
        parts = [(1.0, state["windows"], state["routing"])]
    else:   # each window alone, weight 1 inside it, its own routing
        parts = [(w["weight"], [{**w, "weight": 1.0}], w["routing"]) for w in state["windows"]]
    raw = [0.0] * k
    for weight, windows, routing in parts:
        row = grid_map(routing["_grid"], encode(model["schema"], record))
        assert len(row) == len(model["columns"])
        scores = SCORES[model["model"]](model, windows, routing, row, k)
        raw = [a + weight * b for a, b in zip(raw, scores, strict=True)]
    s = [max(v, 0.0) for v in raw]
    return [v / sum(s) for v in s] if sum(s) > 0 else [1.0 / k] * k


# ------------------------------------------------------- the checks
@pytest.fixture(scope="module")
def adult():
    return load_adult("train")


def _records(X, start=20_000, n=40):
    rows = [dict(x) for x in X[start:start + n]]
    for i, row in enumerate(rows[:12]):          # some numeric and categorical values missing
        row.pop(sorted(row)[i % len(row)], None)
    return rows


def _check(live, obj: dict, records: list[dict]) -> None:
    """The page's reader, ``load_model`` and the live model agree on every record."""
    obj = json.loads(json.dumps(obj, allow_nan=False))   # as a reader of the file gets it
    public = load_model(obj)
    classes = obj["schema"]["target"]["values"]
    agree = 0
    for x in records:
        page = page_proba(obj, x)
        loaded = public.predict_proba_one(x)
        assert loaded == live.predict_proba_one(x)
        assert np.allclose(page, [loaded[c] for c in classes], rtol=0, atol=1e-12), (x, page)
        top = sorted(page, reverse=True)
        if len(top) < 2 or top[0] - top[1] > 1e-9:   # (a tie to 1e-12 may go either way)
            agree += classes[int(np.argmax(page))] == public.predict_one(x)
        else:
            agree += 1
    assert agree == len(records)


def _learn(model, X, y, n, public_every=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(n):
            model.learn_one(X[i], y[i], public=bool(public_every and i % public_every == 0))
    return model


def _make(cls, schema, **kw):
    params = {"schema": schema, "epsilon": 1.0, "seed": 5, "window_size": 400,
              "max_windows": 3, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**params)


@pytest.mark.parametrize("cls", [RandomDecisionForestClassifier, GreedyForestClassifier,
                                 RDTClassifier], ids=lambda c: c.__name__)
def test_the_page_predicts_a_keyed_forest(cls, adult):
    X, y, schema = adult
    model = _learn(_make(cls, schema), X, y, 1500)
    assert model.windows_closed >= 2 and public_model(model)["trees"] is None
    _check(model, public_model(model), _records(X))


@pytest.mark.parametrize("cls", [RandomDecisionForestClassifier, RDTClassifier],
                         ids=lambda c: c.__name__)
def test_the_page_predicts_through_a_released_feature_grid(cls, adult):
    X, y, schema = adult
    model = _learn(_make(cls, schema, window_size=1000, grid_share=0.2), X, y, 3200)
    obj = public_model(model)
    assert decode(obj["windows"], {})["routing"]["_grid"] is not None
    _check(model, obj, _records(X))


def test_the_page_predicts_rdt_sharp_with_centers(adult):
    X, y, schema = adult
    model = _learn(_make(RDTClassifier, schema, combine="sum"), X, y, 1500, public_every=3)
    windows = decode(public_model(model)["windows"], {})["windows"]
    assert any(w["extra"]["centers"]["keys"].shape[0] for w in windows)
    assert any(not t["primary"] for w in windows for t in w["trees"])
    _check(model, public_model(model), _records(X))


def test_the_page_predicts_a_three_class_stream():
    X, rings, _ = load_abalone()
    schema = {"features": {k: {"type": "numeric", "min": 0.0, "max": 3.0}
                           for k in X[0] if k != "sex"},
              "target": {"type": "categorical", "values": ["F", "I", "M"]}}
    y = [x["sex"] for x in X]
    X = [{k: v for k, v in x.items() if k != "sex"} for x in X]
    for cls in (RandomDecisionForestClassifier, GreedyForestClassifier, RDTClassifier):
        model = _learn(_make(cls, schema, window_size=500), X, y, 1800)
        _check(model, public_model(model), X[3000:3040])


def test_the_page_predicts_a_members_union(adult):
    X, y, schema = adult
    members = [_make(RandomDecisionForestClassifier, schema, seed=s, max_windows=None)
               for s in (1, 2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(2400):
            members[i % 2].learn_one(X[i], y[i])
    a, b = WindowEnsemble(members[0], "a"), WindowEnsemble(members[1], "b")
    for key, state in b.local_updates().items():
        a.adopt(key, state)
    for key, state in a.local_updates().items():
        b.adopt(key, state)
    obj = public_model(a)
    assert obj["combine"] == "union" and len(obj["windows"]["windows"]) >= 4
    _check(a, obj, _records(X, n=25))


def test_the_page_reads_exactly_the_released_tables(adult):
    """The reader is not vacuous: changing one released label in the file changes its vote."""
    X, y, schema = adult
    model = _learn(_make(RandomDecisionForestClassifier, schema, n_trees=3), X, y, 1300)
    obj = json.loads(json.dumps(public_model(model)))
    record = _records(X)[20]
    before = page_proba(obj, record)
    labels = obj["windows"]["windows"][-1]["extra"]["table"]["state"]["labels"]["data"]
    state = decode(obj["windows"], {})
    win = state["windows"][-1]
    router = win["extra"].get("router") or state["routing"]["_trees"]
    row = grid_map(state["routing"]["_grid"], encode(obj["schema"], record))
    tree = win["trees"][0]
    key = walk(router, routing_row(router, row), tree["id"], tree["depth"])
    b = len(labels) // len(win["trees"])
    labels[bucket(key, b)] ^= 1                       # tree 0's bucket of this record
    after = page_proba(obj, record)
    assert before != after


@pytest.mark.parametrize("name", ["random-forest", "rdt", "greedy-forest"])
def test_the_page_predicts_windows_trained_before_buckets(name, adult, tmp_path):
    """Checkpoints written before buckets (tests/data/pre_buckets, issue 47): tables of reached
    leaves and the zero-count draws, then beside them new windows that use buckets."""
    from pathlib import Path

    from dpstream.connectors.checkpoint import CheckpointStore
    data = Path(__file__).parent / "data" / "pre_buckets" / f"{name}.dpck"
    (tmp_path / "checkpoint.dpck").write_bytes(data.read_bytes())
    model = CheckpointStore.read(tmp_path)["model"]
    X, y, _ = adult
    assert all("buckets" not in w.extra for w in model._windows)
    _check(model, public_model(model), [dict(x) for x in X[1000:1020]])
    model.learn_many(X[2000:2600], y[2000:2600])
    assert any("buckets" in w.extra for w in model._windows)
    _check(model, public_model(model), _records(X, n=20))


def test_the_pages_functions_are_the_models():
    """Each integer function of the page, and the zero-count draws, equal the model's code
    (the Laplace draw on zero counts is not reached by the checkpoints above: every leaf of
    their shallow RDT trees holds a record)."""
    from dpstream.models.windows import buckets, random_trees
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, 300, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    for key in keys.tolist():
        assert root(key, 7) == int(random_trees.root_keys(key, [7])[0])
        one = np.array([key], dtype=np.uint64)
        assert child(key, 3) == int(random_trees.child_keys(one, np.array([3]))[0])
        rank, u = random_trees.keyed_rank(np.array([key], dtype=np.uint64), np.array([11]))
        assert draw(key, 11) == (int(rank[0]), float(u[0]))
        assert bucket(key, 256) == int(buckets.bucket_index(np.array([key], np.uint64), 256)[0])
        assert zero_label(key, 3) == random_trees.uniform_label(np.array([key], np.uint64),
                                                                3)[0].tolist()
        assert np.allclose(laplace_zero(key, 3, 2.5), random_trees.laplace_of(
            np.array([key], np.uint64), 3, 2.5)[0], rtol=1e-13, atol=0)
