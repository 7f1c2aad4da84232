"""``python -m dpstream.stream.distributed keygen``: a party's signing key for the board.

Writes a new Ed25519 signing key for one party of distributed S-GBDT (never overwrites an
existing file) and prints its public key; ``--roster`` adds the key to that roster file,
creating it if absent (see :mod:`.roster` and docs/distributed.md).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .roster import keygen_command


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags and run the command (returns the exit status)."""
    ap = argparse.ArgumentParser(prog="python -m dpstream.stream.distributed",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    kg = sub.add_parser("keygen", help="write a party's signing key, print its public key",
                        description=__doc__.split("\n\n")[1].replace("\n", " "))
    kg.add_argument("--party", required=True, metavar="NAME", help="the party's name")
    kg.add_argument("--key-file", required=True, metavar="PATH", help="private key to write")
    kg.add_argument("--roster", metavar="PATH", help="add the public key to this roster file")
    kg.add_argument("--threshold", type=int, metavar="T",
                    help="shares that recover a dropped party's masks (default: a majority)")
    kg.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    return keygen_command(args.party, args.key_file, args.roster, args.threshold, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
