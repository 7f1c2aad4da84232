"""Window-forest checkpoints written before buckets (issue 47) still load, predict exactly as
they did, and keep training: new windows release through buckets beside the old ones.

``tests/data/pre_buckets/`` holds three small checkpoints (Adult, windows of 300 records,
seed 0) and the class probabilities each model gave for records 1000-1019, all written by the
code of main a639bb4, the last before buckets.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dpstream.connectors.checkpoint import CheckpointStore
from dpstream.stream import load_adult

DATA = Path(__file__).parent / "data" / "pre_buckets"
EXPECTED = json.loads((DATA / "expected.json").read_text())


@pytest.mark.parametrize("name", ["random-forest", "rdt", "greedy-forest"])
def test_a_pre_bucket_checkpoint_loads_predicts_alike_and_keeps_training(name, tmp_path):
    shutil.copy(DATA / f"{name}.dpck", tmp_path / "checkpoint.dpck")
    model = CheckpointStore.read(tmp_path)["model"]
    X, y, _ = load_adult("train")
    lo, hi = EXPECTED["records"]
    proba = [list(model.predict_proba_one(x).values()) for x in X[lo:hi]]
    np.testing.assert_allclose(proba, EXPECTED["proba"][name], rtol=0, atol=1e-12)
    old = len(model._windows)
    assert old and all("buckets" not in w.extra for w in model._windows)
    model.learn_many(X[2000:2600], y[2000:2600])
    new = [w for w in model._windows if "buckets" in w.extra]
    assert new and len(model._windows) <= old + len(new)
    accuracy = np.mean([model.predict_one(x) == t for x, t in zip(X[3000:3400], y[3000:3400],
                                                                  strict=True)])
    assert accuracy > 0.7, accuracy   # old and new windows vote together
