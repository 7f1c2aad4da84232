"""Converting a trusted directory's old checkpoint to what this version writes.

:func:`migrate_checkpoint` is the one place that may unpickle an old ``checkpoint.pkl``, and
only when asked (``trust_pickle=True``; ``dpstream migrate-checkpoint --trust-pickle``); it
also signs a trusted unsigned ``/2`` checkpoint and rewrites old module names. See
docs/connectors.md#migrating-old-checkpoints.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import zlib
from pathlib import Path
from typing import Any

from .checkpoint import (
    FILENAME,
    FORMAT,
    V1_FILENAME,
    V1_FORMAT,
    CheckpointError,
    CheckpointStore,
    read_checkpoint,
)
from .safe_state import MOVED_MODULES

__all__ = ["MIGRATE_HELP", "add_migrate_parser", "migrate_checkpoint",
           "migrate_checkpoint_command"]


def migrate_checkpoint(directory: str | os.PathLike, *, trust_pickle: bool = False,
                       trust_unsigned: bool = False,
                       key: bytes | str | None = None) -> dict[str, Any]:
    """Convert ``directory``'s pickled checkpoint to format ``/2``, sign an unsigned one, or
    rewrite one that names the modules of an older layout.

    Parameters
    ----------
    directory
        The checkpoint directory (its lock is taken: no service may be running on it).
    trust_pickle
        Must be ``True`` to unpickle ``checkpoint.pkl``; unpickling runs code named by the
        file, so say so only for a directory nobody else could write.
    trust_unsigned
        Sign an unsigned ``checkpoint.dpck`` with the configured key (``key`` or
        ``DPSTREAM_CHECKPOINT_KEY``).
    key
        HMAC key for the new file; default ``DPSTREAM_CHECKPOINT_KEY``.

    Returns
    -------
    dict
        ``directory``, ``converted`` (what was done), ``path`` (the new file) and, after a
        conversion, ``backup`` (the old file's new name).

    Examples
    --------
    >>> import pickle, tempfile, zlib, json
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> payload = pickle.dumps({"positions": {"t:0": 7}})
    >>> header = {"format": "dpstream-checkpoint/1", "crc32": zlib.crc32(payload),
    ...           "bytes": len(payload), "written": 0.0}
    >>> _ = (d / "checkpoint.pkl").write_bytes(json.dumps(header).encode() + b"\\n" + payload)
    >>> migrate_checkpoint(d)
    Traceback (most recent call last):
    ...
    dpstream.connectors.checkpoint.CheckpointError: refusing to unpickle ...
    >>> migrate_checkpoint(d, trust_pickle=True)["converted"]
    'dpstream-checkpoint/1 -> dpstream-checkpoint/2'
    >>> from dpstream.connectors import CheckpointStore
    >>> CheckpointStore.read(d)["positions"]
    {'t:0': 7}
    """
    directory = Path(directory)
    old = directory / V1_FILENAME
    with CheckpointStore(directory, key=key) as store:
        if not old.exists():
            if (directory / FILENAME).exists() and trust_unsigned:
                if store.key is None:
                    raise CheckpointError("--trust-unsigned signs with the checkpoint key; "
                                          "none is configured (set DPSTREAM_CHECKPOINT_KEY)")
                state, info = read_checkpoint(directory, key=store.key,
                                              accept_unsigned=True)
                if info["integrity"] == "sha256+hmac":
                    raise CheckpointError(f"{info['path']} is already signed")
                store.save(state)
                return {"directory": str(directory), "converted": "signed",
                        "path": str(store.path)}
            if (directory / FILENAME).exists() and _names_moved_modules(directory / FILENAME):
                state, _ = read_checkpoint(directory, key=store.key)
                store.save(state)
                return {"directory": str(directory), "converted": "module names -> current",
                        "path": str(store.path)}
            raise CheckpointError(f"no pickled checkpoint ({V1_FILENAME}) in {directory} and "
                                  f"no older module names in {FILENAME}: nothing to migrate")
        if not trust_pickle:
            raise CheckpointError(f"refusing to unpickle {old} without --trust-pickle: "
                                  f"unpickling runs code named by the file; convert only a "
                                  f"directory nobody else could write")
        data = old.read_bytes()
        head, sep, payload = data.partition(b"\n")
        try:
            header = json.loads(head)
        except ValueError:
            header = None
        if not sep or not isinstance(header, dict) or header.get("format") != V1_FORMAT:
            raise CheckpointError(f"{old} is not a {V1_FORMAT} checkpoint")
        if len(payload) != header.get("bytes") or zlib.crc32(payload) != header.get("crc32"):
            raise CheckpointError(f"{old} is corrupt (checksum mismatch); not converted")
        state = _MovedUnpickler(io.BytesIO(payload)).load()   # the one unpickling, asked for
        if not isinstance(state, dict):
            raise CheckpointError(f"{old} does not hold a checkpoint state")
        store.save(state)
        backup = old.with_name(V1_FILENAME + ".migrated")
        os.replace(old, backup)
        return {"directory": str(directory), "converted": f"{V1_FORMAT} -> {FORMAT}",
                "path": str(store.path), "backup": str(backup)}


class _MovedUnpickler(pickle.Unpickler):
    """An unpickler that finds a class of an older module layout where it lives now."""

    def find_class(self, module: str, name: str) -> object:
        return super().find_class(MOVED_MODULES.get(module, module), name)


def _names_moved_modules(path: Path) -> bool:
    """Whether a ``/2`` checkpoint's manifest names a class by a module that moved (a byte
    search for ``"MODULE:`` in the file; a class name is always written so)."""
    data = path.read_bytes()
    return any(f'"{old}:'.encode() in data for old in MOVED_MODULES)


#: ``dpstream migrate-checkpoint --help``
MIGRATE_HELP = """\
Checkpoints are written in format dpstream-checkpoint/2 (JSON and raw arrays, checksummed and,
with DPSTREAM_CHECKPOINT_KEY set, HMAC-signed; loading never runs code). Older versions wrote
DIR/checkpoint.pkl, a pickle, which serve, replay and status refuse to load. This command
converts one, once, for a directory you trust: it unpickles it (running any code the file
names), writes DIR/checkpoint.dpck and renames the old file to checkpoint.pkl.migrated. It
also rewrites a checkpoint.dpck naming an older layout's modules. DIR's lock is taken.

examples:
  dpstream migrate-checkpoint --checkpoint-dir /var/lib/dpstream/census --trust-pickle
  DPSTREAM_CHECKPOINT_KEY=... dpstream migrate-checkpoint --checkpoint-dir ck --trust-unsigned
"""


def migrate_checkpoint_command(checkpoint_dir: str, *, trust_pickle: bool = False,
                               trust_unsigned: bool = False, as_json: bool = False) -> int:
    """``dpstream migrate-checkpoint``: convert a trusted pickled checkpoint to format ``/2``,
    sign a trusted unsigned one, or rewrite one that names the modules of an older layout; see
    :mod:`dpstream.connectors.legacy_checkpoint`."""
    res = migrate_checkpoint(checkpoint_dir, trust_pickle=trust_pickle,
                             trust_unsigned=trust_unsigned)
    if as_json:
        print(json.dumps(res))
    elif res["converted"] == "signed":
        print(f"signed {res['path']}")
    elif "backup" not in res:
        print(f"rewrote {res['path']}: {res['converted']}")
    else:
        print(f"converted {res['converted']}: {res['path']} (old file kept as {res['backup']})")
    return 0


def add_migrate_parser(sub: Any) -> None:
    """Register ``dpstream migrate-checkpoint`` on the CLI's subparsers ``sub``."""
    mg = sub.add_parser("migrate-checkpoint",
                        help="convert a trusted pickled checkpoint (format /1) to format /2",
                        description=MIGRATE_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    mg.add_argument("--checkpoint-dir", required=True, metavar="DIR",
                    help="the checkpoint directory to convert or sign")
    mg.add_argument("--trust-pickle", action="store_true",
                    help="required to convert DIR/checkpoint.pkl: it is unpickled, which runs "
                         "code named by the file")
    mg.add_argument("--trust-unsigned", action="store_true",
                    help="sign DIR/checkpoint.dpck with DPSTREAM_CHECKPOINT_KEY (it was "
                         "written before a key was configured)")
    mg.add_argument("--json", action="store_true", help="print one JSON object")
    mg.set_defaults(func=lambda a: migrate_checkpoint_command(
        a.checkpoint_dir, trust_pickle=a.trust_pickle, trust_unsigned=a.trust_unsigned,
        as_json=a.json))
