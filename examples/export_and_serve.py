"""Take the private model out: export its DP release, load it, serve it over HTTP, run it in ONNX.

Train S-GBDT on part of the bundled Adult data, write the public model file (the release only:
no record, no generator state), load it back as a predict-only estimator, serve it with
``dpstream serve-model`` and ask for a prediction over HTTP; with ``dpstream[onnx]`` installed,
run the same model in onnxruntime. docs/model_format.md has the format, docs/service.md the
HTTP endpoints.

    python examples/export_and_serve.py
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path

import dpstream
from dpstream.models import SGBDTClassifier
from dpstream.stream import load_adult


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3000, help="records to learn")
    args = parser.parse_args()
    X, y, schema = load_adult("train")
    model = SGBDTClassifier(schema=schema, epsilon=1.0, seed=0)   # (seeded: an example)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # a small stream on purpose
        for x, label in zip(X[:args.records], y[:args.records], strict=True):
            model.learn_one(x, label)

    folder = Path(tempfile.mkdtemp())
    obj = model.export(folder / "model.json")   # the DP release only
    print(f"exported {obj['model']}: {obj['trees']['n_trees']} trees, "
          f"epsilon {obj['privacy']['epsilon']:.3f}, {obj['digest'][:19]}...")
    public = dpstream.load_model(folder / "model.json")
    same = all(public.predict_one(x) == model.predict_one(x) for x in X[5000:5200])
    print(f"the loaded model predicts as the live one on 200 records: {same}")

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "dpstream.stream.cli", "serve-model",
                               str(folder / "model.json"), "--port", str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        print(server.stdout.readline().strip())   # where it listens
        record = {"age": 39, "education": "Bachelors", "hours-per-week": 50}
        request = urllib.request.Request(f"http://127.0.0.1:{port}/predict",
                                         data=json.dumps(record).encode(), method="POST")
        for _ in range(50):   # (the server may take a moment to accept)
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    print("POST /predict ->", answer.read().decode().strip())
                break
            except OSError:
                time.sleep(0.1)
        print("the same locally ->", public.predict_one(record),
              public.predict_proba_one(record))
    finally:
        server.terminate()
        server.wait(timeout=30)

    try:
        import onnxruntime as ort
    except ImportError:
        print("ONNX: pip install 'dpstream[onnx]' to run the model in onnxruntime")
        return
    from dpstream.models.onnx_export import encode

    model.export(folder / "model.onnx")
    session = ort.InferenceSession(str(folder / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    label, proba = session.run(["label", "probabilities"],
                               {"X": encode(folder / "model.onnx", [record])})
    print(f"ONNX: class index {int(label[0])}, probabilities {proba[0].round(4).tolist()}")


if __name__ == "__main__":
    main()
