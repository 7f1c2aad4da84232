"""Checkpoints cannot run code, are checked before use, and survive faults (docs/reliability.md).

* every model the library ships round-trips through a real checkpoint file with its whole
  state (predictions, ledger, RNG) and keeps training identically;
* a tampered, truncated, foreign or pickled file is refused by ``dpstream status``,
  ``dpstream replay --checkpoint-dir`` and ``dpstream serve`` (real CLI, subprocess) with an
  error naming the file, and the code a malicious payload carries never runs;
* HMAC: a missing or wrong MAC is refused when a key is configured;
* a pickled checkpoint of the old format converts only on an explicit opt-in.

Faults (full or read-only directory, writers killed mid-write): tests/test_checkpoint_faults.py.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import pickle
import shutil
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from checkpoint_cli import (  # noqa: F401 - fixtures are found by name
    DPSTREAM,
    _cli,
    _no_key_from_the_environment,
    adult,
)

from dpstream.connectors import CheckpointError, CheckpointStore, SourceRecord, read_checkpoint
from dpstream.connectors.checkpoint import FILENAME
from dpstream.connectors.safe_state import StateError, decode, encode
from dpstream.models import DPBoostClassifier, DPBoostRegressor, SGBDTClassifier
from dpstream.models.boosting.sgbdt_party import SGBDTParty
from dpstream.stream import ABALONE_SCHEMA, ADULT_SCHEMA, load_abalone
from dpstream.stream.runner import SERVICE_MODELS, Runner, build_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def abalone():
    X, y, _ = load_abalone()
    return X, y


def _canonical(obj) -> str:
    """The whole state as text: the encoded tree with sets sorted and arrays spelled out."""
    tree, arrays = encode(obj)

    def walk(node):
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        if node.get("@") == "a":
            a = arrays[node["k"]]
            return ["array", a.dtype.str, list(a.shape), hashlib.sha256(a.tobytes()).hexdigest()]
        out = {k: walk(v) for k, v in node.items()}
        if node.get("@") in ("set", "fset"):
            out["v"] = sorted(out["v"], key=json.dumps)
        return out
    return json.dumps(walk(tree), sort_keys=True)


# ------------------------------------------------------------------ every model round-trips
def _window(name):
    return lambda: build_model(name, ADULT_SCHEMA, epsilon=1.0, seed=0,
                               params={"window_size": 250, "n_trees": 3})


def _party():
    return SGBDTParty(SGBDTClassifier(schema=ADULT_SCHEMA, epsilon=1.0, seed=0))


MODELS = {
    "sgbdt-classifier": (lambda: build_model("sgbdt", ADULT_SCHEMA, epsilon=1.0, seed=0,
                                             params={"round_size": 100}), "adult"),
    "sgbdt-regressor": (lambda: build_model("sgbdt", ABALONE_SCHEMA, epsilon=1.0, seed=0,
                                            params={"round_size": 100}), "abalone"),
    "median-forest": (_window("median-forest"), "adult"),
    "random-forest": (_window("random-forest"), "adult"),
    "rdt": (_window("rdt"), "adult"),
    "greedy-forest": (_window("greedy-forest"), "adult"),
    "dpboost-classifier": (lambda: DPBoostClassifier(schema=ADULT_SCHEMA, epsilon=1.0, seed=0,
                                                     window_size=250, trees_per_ensemble=3),
                           "adult"),
    "dpboost-regressor": (lambda: DPBoostRegressor(schema=ABALONE_SCHEMA, epsilon=1.0, seed=0,
                                                   window_size=250, trees_per_ensemble=3),
                          "abalone"),
    "sgbdt-party": (_party, "adult"),
}


def _train(model, X, y, lo, hi):
    if isinstance(model, SGBDTParty):
        model.learn_many(X[lo:hi], y[lo:hi])
        if model.engine.init_score is None:
            model.apply_init(model.init_contribution())
        for r in range(3):   # three distributed rounds, one party (public seeds per round)
            tree = model.draw_tree(np.random.default_rng(hi + r))
            model.apply(tree, model.contribute(tree), members=1)
        return
    unlabeled = getattr(model, "learns_unlabeled", False)
    for i in range(lo, hi):
        model.learn_one(X[i], None if unlabeled and i % 5 == 0 else y[i])


def _rounds(model) -> int:
    return len(model.engine.forest) if isinstance(model, SGBDTParty) else model.training_rounds


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_resumes_from_a_checkpoint_file_exactly(name, tmp_path, adult, abalone):
    make, data = MODELS[name]
    X, y = adult if data == "adult" else abalone
    model = make()
    _train(model, X, y, 0, 600)
    with CheckpointStore(tmp_path) as store:
        store.save({"model": model})
    resumed = CheckpointStore.read(tmp_path)["model"]
    assert type(resumed) is type(model) and resumed is not model
    # the whole state — trees, buffers, the privacy ledger / accountant, every RNG's state —
    # is what a pickle round trip (the old checkpoint format) gives, to the bit
    pickled = pickle.loads(pickle.dumps(model))
    assert _canonical(resumed) == _canonical(pickled)
    rounds = _rounds(model)
    assert rounds > 0
    probe = [X[i] for i in range(2000, 2200)]
    trio = (model, pickled, resumed)   # predicting may touch state (caches): all three do
    predictions = [[m.predict_one(x) for x in probe] for m in trio]
    assert predictions[2] == predictions[1] == predictions[0]
    assert resumed.privacy_report() == model.privacy_report()
    for m in trio:   # all keep training: the noise draws must stay in step
        _train(m, X, y, 600, 1400)
    assert _rounds(model) > rounds and _rounds(resumed) == _rounds(model)
    predictions = [[m.predict_one(x) for x in probe] for m in trio]
    assert predictions[2] == predictions[1] == predictions[0]
    assert resumed.privacy_report() == model.privacy_report()
    assert _canonical(resumed) == _canonical(pickled)


@pytest.mark.parametrize("model", sorted(SERVICE_MODELS))
def test_a_runner_resumed_midway_ends_where_an_uninterrupted_one_does(model, tmp_path, adult):
    X, y = adult
    params = ({"round_size": 100} if model == "sgbdt" else {"window_size": 200, "n_trees": 2})

    def records(lo, hi):
        return (SourceRecord({"id": i % 700, "x": X[i], "y": None if i % 7 == 0 else y[i]},
                             "f", i) for i in range(lo, hi))   # ids repeat: duplicates

    whole = Runner.create(model, ADULT_SCHEMA, store=CheckpointStore(tmp_path / "one"),
                          epsilon=1.0, seed=3, params=params)
    for rec in records(0, 900):
        whole.process(rec)
    first = Runner.create(model, ADULT_SCHEMA, store=CheckpointStore(tmp_path / "two"),
                          epsilon=1.0, seed=3, params=params)
    for rec in records(0, 450):
        first.process(rec)
    first.checkpoint()
    first.store.close()
    second = Runner.create(model, ADULT_SCHEMA, store=CheckpointStore(tmp_path / "two"),
                           epsilon=1.0, seed=None, params=params)   # the seed comes from disk
    assert second.positions == {"f": 450} and second.counters == first.counters
    for rec in records(450, 900):
        second.process(rec)
    assert second.counters["duplicates"] == whole.counters["duplicates"] == 200
    assert {k: v for k, v in second.counters.items() if k != "checkpoints"} == \
        {k: v for k, v in whole.counters.items() if k != "checkpoints"}
    assert list(second.ids) == list(whole.ids)
    # (through a pickle round trip: __setstate__ fills defaults a fresh model never set)
    assert _canonical(second.model) == _canonical(pickle.loads(pickle.dumps(whole.model)))
    probe = [X[i] for i in range(3000, 3100)]
    assert [second.model.predict_one(x) for x in probe] == \
        [whole.model.predict_one(x) for x in probe]
    whole.store.close()
    second.store.close()


def test_shared_references_cycles_and_rng_state_survive():
    rng = np.random.default_rng(11)
    rng.random(5)
    shared = np.arange(4.0)
    loop: dict = {"name": "loop"}
    loop["self"] = loop
    state = {"a": shared, "b": shared, "rng": rng, "loop": loop, "big": 2 ** 200,
             "odd": {(1, "x"): float("nan"), 3: -0.0, "inf": float("-inf")},
             "f": np.asfortranarray(np.ones((3, 2), dtype=np.float32)), "s": np.int16(-7),
             "empty": np.zeros((0, 3)), "ids": [("int", 1), ("str", "a")]}
    state["rows"] = [[1.0, float("nan")], [2.0, -0.0]]   # buffered records: one float array
    state["row"] = state["rows"][0]
    back = decode(*encode(state))
    assert back["row"] is back["rows"][0] and back["rows"][1] == [2.0, -0.0]
    assert type(back["rows"][1][0]) is float and np.isnan(back["row"][1])
    assert back["a"] is back["b"] and back["loop"]["self"] is back["loop"]
    assert back["big"] == 2 ** 200 and back["s"] == np.int16(-7) and back["s"].dtype == np.int16
    assert back["f"].flags.f_contiguous and back["f"].dtype == np.float32
    assert np.isnan(back["odd"][(1, "x")]) and str(back["odd"][3]) == "-0.0"
    assert back["ids"] == [("int", 1), ("str", "a")] and back["empty"].shape == (0, 3)
    assert back["rng"].random() == rng.random()
    with pytest.raises(StateError, match="array of Python objects"):
        encode({"x": np.array([object()])})
    with pytest.raises(StateError, match="not an allow-listed class.*at \\['f'\\]"):
        encode({"f": lambda: 1})


def test_record_id_tuples_encode_in_one_pass_and_the_gc_state_is_restored():
    """Id tuples become one "lt" node (floats included, tuple by tuple); encoding pauses the
    cyclic GC and leaves it as it found it, also after an error."""
    import gc

    ids = [("int", i) for i in range(1000)] + [("str", "a")]
    state = {"ids": ids, "pairs": [(1, 2.5), (3, 4.0)], "odd": [("x", float("nan"))]}
    tree, arrays = encode(state)
    m = tree["m"]
    assert m["ids"]["@"] == "lt" and m["ids"]["v"][-1] == ["str", "a"]
    assert m["pairs"] == {"@": "lt", "v": [[1, 2.5], [3, 4.0]]}   # finite floats: tuple by tuple
    assert all(node["@"] == "t" for node in m["odd"])   # a NaN is no JSON scalar: tuple nodes
    back = decode(json.loads(json.dumps(tree)), arrays)
    assert back["ids"] == ids and back["pairs"] == state["pairs"]
    runs: list = []
    threshold = gc.get_threshold()
    gc.set_threshold(10)   # a collection every 10 allocations unless encoding pauses the GC
    gc.callbacks.append(lambda phase, info: runs.append(phase))
    try:
        encode({"ids": ids})
    finally:
        gc.callbacks.pop()
        gc.set_threshold(*threshold)
    assert runs == [] and gc.isenabled()
    gc.disable()
    try:
        encode({"ids": ids})
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(StateError):
        encode({"f": lambda: 1})
    assert gc.isenabled()


def test_the_load_path_never_imports_pickle():
    """Checkpoints, the safe encoding, the runner and the service read no pickle: only the
    explicit migration module imports it."""
    for rel in ("connectors/checkpoint.py", "connectors/safe_state.py", "stream/runner.py",
                "stream/service.py", "stream/cli.py"):
        tree = ast.parse((ROOT / rel).read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {"pickle", "_pickle", "dill", "cloudpickle", "joblib"} & names, rel


# ------------------------------------------------------------------ tampering is refused
def _evil_pickle(marker: Path) -> bytes:
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    return pickle.dumps({"model": Evil(), "positions": {}, "counters": {}, "ids": []})


def _rewrite(path: Path, manifest: dict, data: bytes = b"") -> None:
    """A checkpoint file with this manifest and data and a header whose checksum matches."""
    body = json.dumps(manifest).encode() + data
    header = {"format": "dpstream-checkpoint/2", "written": time.time(),
              "manifest_bytes": len(body) - len(data), "data_bytes": len(data)}
    signed = json.dumps(header, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    header["sha256"] = hashlib.sha256(signed + body).hexdigest()
    path.write_bytes(json.dumps(header).encode() + b"\n" + body)


@pytest.fixture(scope="module")
def real_checkpoint(tmp_path_factory):
    """A real service checkpoint (S-GBDT over abalone), made by the CLI."""
    d = tmp_path_factory.mktemp("real")
    out = _cli("replay", "--source", "abalone", "--epsilon", "1", "--checkpoint-dir", str(d),
               "--seed", "0", "--json", "--set", "n_trees=20")
    assert out.returncode == 0, out.stderr
    return d


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / FILENAME, dst / FILENAME)
    return dst


def _tampered(kind: str, real: Path, d: Path, marker: Path) -> str:
    """Make ``d``'s checkpoint malicious in one way; returns what the error must say."""
    if kind == "pickle-replaces-the-file":
        (d / FILENAME).write_bytes(_evil_pickle(marker))
        return "not a dpstream checkpoint"
    if kind == "v1-header-with-evil-pickle":
        payload = _evil_pickle(marker)
        header = {"format": "dpstream-checkpoint/1", "crc32": zlib.crc32(payload),
                  "bytes": len(payload), "written": time.time()}
        (d / FILENAME).unlink()
        (d / "checkpoint.pkl").write_bytes(json.dumps(header).encode() + b"\n" + payload)
        return "migrate-checkpoint"
    data = (real / FILENAME).read_bytes()
    head, _, body = data.partition(b"\n")
    header = json.loads(head)
    manifest = json.loads(body[:header["manifest_bytes"]])
    arrays = body[header["manifest_bytes"]:]
    if kind == "manifest-names-os-system":
        manifest["state"]["m"]["model"] = {"@": "obj", "cls": "posix:system",
                                           "state": f"touch {marker}"}
        _rewrite(d / FILENAME, manifest, arrays)
        return "'posix:system' is not allowed"
    if kind == "class-reached-through-a-module-attribute":
        cls = manifest["state"]["m"]["model"]["cls"]
        manifest["state"]["m"]["model"]["cls"] = cls.split(":")[0] + ":np.ndarray"
        _rewrite(d / FILENAME, manifest, arrays)
        return "not allowed"
    if kind == "object-array-holding-a-pickle":
        evil = _evil_pickle(marker)
        manifest["arrays"].append({"dtype": "|O", "shape": [1], "order": "C",
                                   "offset": len(arrays), "nbytes": len(evil)})
        manifest["state"]["m"]["positions"] = {"@": "a", "k": len(manifest["arrays"]) - 1}
        _rewrite(d / FILENAME, manifest, arrays + evil)
        return "holds Python objects"
    if kind == "one-byte-flipped":
        flipped = bytearray(data)
        flipped[len(head) + 1 + header["manifest_bytes"] + 100] ^= 1
        (d / FILENAME).write_bytes(bytes(flipped))
        return "SHA-256 mismatch"
    raise AssertionError(kind)


TAMPERING = ["pickle-replaces-the-file", "v1-header-with-evil-pickle",
             "manifest-names-os-system", "class-reached-through-a-module-attribute",
             "object-array-holding-a-pickle", "one-byte-flipped"]


@pytest.mark.parametrize("kind", TAMPERING)
def test_a_tampered_checkpoint_is_refused_by_status_replay_and_serve(kind, real_checkpoint,
                                                                      tmp_path):
    marker = tmp_path / "pwned"
    d = _copy(real_checkpoint, tmp_path / "ck")
    must_say = _tampered(kind, real_checkpoint, d, marker)
    schema = tmp_path / "schema.json"
    ABALONE_SCHEMA.dump(schema)
    runs = {
        "status": _cli("status", "--checkpoint-dir", str(d)),
        "replay": _cli("replay", "--source", "abalone", "--epsilon", "1", "--checkpoint-dir",
                       str(d)),
        "serve": _cli("serve", "--bootstrap", "127.0.0.1:9", "--topic", "t", "--schema",
                      str(schema), "--epsilon", "1", "--checkpoint-dir", str(d),
                      "--metrics-port", "0"),
    }
    for command, out in runs.items():
        assert out.returncode == 2, (command, out.stdout, out.stderr[-2000:])
        assert f"dpstream {command}: error: {d}" in out.stderr, (command, out.stderr[-2000:])
        assert must_say in out.stderr, (command, out.stderr[-2000:])
    assert not marker.exists(), "the payload ran"
    if kind == "v1-header-with-evil-pickle":   # the migration needs the explicit opt-in
        out = _cli("migrate-checkpoint", "--checkpoint-dir", str(d))
        assert out.returncode == 2 and "without --trust-pickle" in out.stderr
        assert not marker.exists()
        # control: the payload is live — trusting the file (wrongly) runs it
        _cli("migrate-checkpoint", "--checkpoint-dir", str(d), "--trust-pickle")
        assert marker.exists()


@pytest.mark.parametrize("cut", ["header", "manifest", "data", "one-byte"])
def test_a_truncated_checkpoint_is_refused(cut, real_checkpoint, tmp_path):
    d = _copy(real_checkpoint, tmp_path / "ck")
    data = (d / FILENAME).read_bytes()
    head = data.index(b"\n")
    manifest = json.loads(data[:head])["manifest_bytes"]
    at = {"header": head // 2, "manifest": head + 1 + manifest // 2,
          "data": head + 1 + manifest + 10, "one-byte": len(data) - 1}[cut]
    (d / FILENAME).write_bytes(data[:at])
    out = _cli("status", "--checkpoint-dir", str(d))
    assert out.returncode == 2
    assert ("truncated" if cut != "header" else "not a dpstream checkpoint") in out.stderr
    assert str(d / FILENAME) in out.stderr


def test_hmac_is_required_and_checked_when_a_key_is_configured(real_checkpoint, tmp_path):
    d = _copy(real_checkpoint, tmp_path / "ck")   # written without a key
    out = _cli("status", "--checkpoint-dir", str(d), DPSTREAM_CHECKPOINT_KEY="k1")
    assert out.returncode == 2 and "carries no HMAC" in out.stderr and str(d) in out.stderr
    out = _cli("replay", "--source", "abalone", "--epsilon", "1", "--checkpoint-dir", str(d),
               DPSTREAM_CHECKPOINT_KEY="k1")
    assert out.returncode == 2 and "carries no HMAC" in out.stderr
    # the owner signs it once (decoded safely, never unpickled), then it loads under the key
    out = _cli("migrate-checkpoint", "--checkpoint-dir", str(d), "--trust-unsigned",
               DPSTREAM_CHECKPOINT_KEY="k1")
    assert out.returncode == 0, out.stderr
    out = _cli("status", "--checkpoint-dir", str(d), "--json", DPSTREAM_CHECKPOINT_KEY="k1")
    assert out.returncode == 0 and json.loads(out.stdout)["checkpoint_integrity"] == \
        "sha256+hmac"
    out = _cli("status", "--checkpoint-dir", str(d), DPSTREAM_CHECKPOINT_KEY="k2")
    assert out.returncode == 2 and "HMAC mismatch" in out.stderr
    # a forger without the key: valid SHA-256, MAC field copied from the genuine file
    data = (d / FILENAME).read_bytes()
    head, _, body = data.partition(b"\n")
    header = json.loads(head)
    manifest = json.loads(body[:header["manifest_bytes"]])
    manifest["state"]["m"]["counters"]["m"]["learned"] += 1
    _rewrite(d / FILENAME, manifest, body[header["manifest_bytes"]:])
    forged = json.loads((d / FILENAME).read_bytes().partition(b"\n")[0])
    assert forged["sha256"] != header["sha256"]
    forged["hmac_sha256"] = header["hmac_sha256"]
    rest = (d / FILENAME).read_bytes().partition(b"\n")[2]
    (d / FILENAME).write_bytes(json.dumps(forged).encode() + b"\n" + rest)
    out = _cli("status", "--checkpoint-dir", str(d), DPSTREAM_CHECKPOINT_KEY="k1")
    assert out.returncode == 2 and "HMAC mismatch" in out.stderr
    # without the key the forged file still passes its SHA-256: that is what the key is for
    assert CheckpointStore.read(d)["counters"]["learned"] == 4178
    with pytest.raises(CheckpointError, match="HMAC mismatch"):
        read_checkpoint(d, key="k1")


def test_a_pickled_v1_checkpoint_migrates_only_on_request(real_checkpoint, tmp_path):
    genuine = CheckpointStore.read(real_checkpoint)
    d = tmp_path / "old"
    d.mkdir()
    genuine.pop("written")
    payload = pickle.dumps(genuine)
    header = {"format": "dpstream-checkpoint/1", "crc32": zlib.crc32(payload),
              "bytes": len(payload), "written": time.time()}
    (d / "checkpoint.pkl").write_bytes(json.dumps(header).encode() + b"\n" + payload)
    out = _cli("status", "--checkpoint-dir", str(d))
    assert out.returncode == 2
    assert "pickled checkpoint" in out.stderr and "--trust-pickle" in out.stderr
    out = _cli("migrate-checkpoint", "--checkpoint-dir", str(d))
    assert out.returncode == 2 and "without --trust-pickle" in out.stderr
    out = _cli("migrate-checkpoint", "--checkpoint-dir", str(d), "--trust-pickle", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["converted"] == "dpstream-checkpoint/1 -> dpstream-checkpoint/2"
    assert (d / "checkpoint.pkl.migrated").exists() and not (d / "checkpoint.pkl").exists()
    before = json.loads(_cli("status", "--checkpoint-dir", str(real_checkpoint),
                             "--json", "--curator").stdout)
    after = _cli("status", "--checkpoint-dir", str(d), "--json", "--curator")
    assert after.returncode == 0, after.stderr
    after = json.loads(after.stdout)
    for k in ("records_learned", "offsets", "privacy"):
        assert after[k] == before[k]
    # and the converted directory resumes: nothing left to learn from the same source
    out = _cli("replay", "--source", "abalone", "--epsilon", "1", "--checkpoint-dir", str(d),
               "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["records_this_run"] == 0
