"""Distributed S-GBDT: several parties train one model over a Kafka bulletin board.

The party's local model (:class:`~dpstream.models.boosting.sgbdt_party.SGBDTParty`) is a model and
lives in :mod:`dpstream.models`; this package holds what sits above it: the board protocol
(:mod:`.board`, a deterministic reading of the log), the party process (:mod:`.party`), the
signed message envelope (:mod:`.signed_board`) with its roster of keys (:mod:`.roster`), and
secure aggregation with drop-out recovery (:mod:`.secure_aggregation`, :mod:`.shamir`). The
board's Kafka transport is a connector (:mod:`dpstream.connectors.bulletin`). See
docs/distributed.md and docs/architecture.md.
"""

from __future__ import annotations

from .board import BoardRound, BoardState
from .party import (
    DistributedParty,
    DivergenceError,
    RollbackError,
    RoundTimeout,
    SeedCollisionError,
)
from .roster import Roster, SigningKey, keygen
from .signed_board import SignedBoard

__all__ = ["BoardRound", "BoardState", "DistributedParty", "DivergenceError", "RollbackError",
           "RoundTimeout", "Roster", "SeedCollisionError", "SignedBoard", "SigningKey", "keygen"]
