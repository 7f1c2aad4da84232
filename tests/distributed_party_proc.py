"""One party of distributed S-GBDT in its own OS process (tests/test_distributed.py starts three).

    python tests/distributed_party_proc.py --bootstrap HOST:PORT --topic T --name NAME \
        --keys DIR --shard I --rounds N --out FILE [--stop-after-masked R | --stop-before-masked R]

The party trains on its shard of Adult (3,000 records), signs with ``DIR/NAME.key`` against
``DIR/roster.json`` and runs rounds 0..N. It appends JSON lines to ``FILE``: ``{"plain": t,
"words": [...]}`` with the fixed-point words of its vector, written before the vector is posted
(the test's ground truth for the exact sum), and ``{"round": t, "status": ..., "survivors":
[...], "reason": ..., "words": [...]}`` for every round it resolves. ``--stop-after-masked R``
freezes the process (SIGSTOP to itself) right after its masked vector of round R is on the
board, ``--stop-before-masked R`` right before posting it; the test then kills it with SIGKILL.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
from pathlib import Path

import numpy as np

from dpstream.connectors.bulletin import KafkaBoard
from dpstream.models import SGBDTClassifier
from dpstream.models.boosting.sgbdt_party import SGBDTParty
from dpstream.stream import load_adult
from dpstream.stream.distributed import DistributedParty, Roster, SigningKey
from dpstream.stream.distributed.secure_aggregation import encode


class _Freezing:
    """The Kafka board, but the process stops itself around its masked vector of one round."""

    def __init__(self, board: KafkaBoard, round_number: int | None, when: str):
        self.board, self.round_number, self.when = board, round_number, when

    def _is_target(self, message: dict) -> bool:
        env = json.loads(message["msg"])
        return env["type"] == "masked" and env["round"] == self.round_number

    def post(self, message: dict) -> None:
        target = self.round_number is not None and self._is_target(message)
        if target and self.when == "before":
            os.kill(os.getpid(), signal.SIGSTOP)
        self.board.post(message)
        if target and self.when == "after":
            os.kill(os.getpid(), signal.SIGSTOP)

    def read(self, timeout_ms: int = 20):
        return self.board.read(timeout_ms)

    def caught_up(self) -> bool:
        return self.board.caught_up()


def main() -> None:
    ap = argparse.ArgumentParser()
    for flag in ("--bootstrap", "--topic", "--name", "--keys", "--out"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--shard", type=int, required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--stop-after-masked", type=int)
    ap.add_argument("--stop-before-masked", type=int)
    args = ap.parse_args()
    out = open(args.out, "a", buffering=1)

    def emit(record: dict) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()
        os.fsync(out.fileno())

    X, y, schema = load_adult("train")
    rows = range(3000 * args.shard, 3000 * (args.shard + 1))
    party = SGBDTParty(SGBDTClassifier(schema=schema, epsilon=1.0, seed=args.shard,
                                       learning_rate=0.5, drift=False))
    party.learn_many([X[i] for i in rows], [y[i] for i in rows])
    board = KafkaBoard(args.bootstrap, args.topic)
    assert board.connect()
    when = "after" if args.stop_after_masked is not None else "before"
    target = args.stop_after_masked if when == "after" else args.stop_before_masked
    keys = Path(args.keys)
    dist = None

    def before_post() -> None:
        emit({"plain": dist.proto["post"]["round"],
              "words": [int(w) for w in encode(dist.last_plaintext)]})

    dist = DistributedParty(party, _Freezing(board, target, when), name=args.name,
                            session=args.topic, roster=Roster.load(keys / "roster.json"),
                            key=SigningKey.load(keys / f"{args.name}.key"), params={"k": 3},
                            expected=3, join_timeout=1.5, round_timeout=3.0,
                            before_post=before_post)
    dist.start(catch_up_s=0.2)
    for _ in range(args.rounds + 1):
        s = dist.run_round()
        words = None if dist.last_words is None else [int(w) for w in dist.last_words]
        emit({"round": s["round"], "status": s["status"], "survivors": s["survivors"],
              "reason": s["reason"], "words": words})
    emit({"report": {k: v for k, v in party.privacy_report().items()
                     if k.startswith("rounds_") or k == "trees"},
          "counters": dist.counters,
          "forest": hashlib.sha256(np.asarray(party.engine.forest.value).tobytes()).hexdigest()})
    board.close()


if __name__ == "__main__":
    main()
