"""Checkpoints: one file per service, written atomically, guarded by a lock file.

A checkpoint holds everything the runner needs to resume exactly where the last one left off:
the model (with its privacy accounting and RNG), the source positions (Kafka next offsets or
file lines), the counters and the bounded record-id memory. It is written as

1. ``checkpoint.tmp``: a header line (format, CRC-32 and length of the payload) and the pickled
   payload; ``flush`` + ``fsync``;
2. ``os.replace`` onto ``checkpoint.pkl`` (atomic on POSIX);
3. ``fsync`` of the directory, so the rename itself survives a power cut.

A crash at any point leaves either the old or the new checkpoint, never a mix; a file that does
not match its checksum is reported, never loaded. One process at a time may use a directory:
:class:`CheckpointStore` takes an exclusive ``flock`` on ``DIR/lock`` (released by the kernel
when the process dies, even by ``kill -9``).

The payload is a pickle: load checkpoints only from directories you trust (the service's own).

Examples
--------
>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> with CheckpointStore(d) as store:
...     store.load() is None
...     store.save({"offsets": {"t:0": 42}})
...     store.load()["offsets"]
True
{'t:0': 42}
>>> CheckpointStore.read(d)["offsets"]          # read-only, no lock (``dpstream status``)
{'t:0': 42}
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import time
import zlib
from pathlib import Path
from typing import Any

__all__ = ["CheckpointStore", "CheckpointError", "CheckpointLocked"]

_FORMAT = "dpstream-checkpoint/1"
_NAME = "checkpoint.pkl"


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be trusted (truncated, corrupt, or of another format)."""


class CheckpointLocked(RuntimeError):
    """Another process holds the checkpoint directory."""


class CheckpointStore:
    """Atomic checkpoint file in ``directory`` with a single-writer lock.

    Parameters
    ----------
    directory
        Created if absent.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / _NAME
        self._lock_fd: int | None = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT,
                                            0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise CheckpointLocked(
                f"{self.directory} is in use by another dpstream process (lock file "
                f"{self.directory / 'lock'}); one writer per checkpoint directory") from None
        os.ftruncate(self._lock_fd, 0)
        os.write(self._lock_fd, f"{os.getpid()}\n".encode())
        self.saves = 0
        self.last_save: float | None = None

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the lock (the checkpoint stays)."""
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` atomically (see the module docstring)."""
        if self._lock_fd is None:
            raise CheckpointError("the store is closed")
        payload = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        header = json.dumps({"format": _FORMAT, "crc32": zlib.crc32(payload),
                             "bytes": len(payload), "written": time.time()})
        tmp = self.directory / "checkpoint.tmp"
        with open(tmp, "wb") as fh:
            fh.write(header.encode() + b"\n")
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self.saves += 1
        self.last_save = time.time()

    def load(self) -> dict[str, Any] | None:
        """The last checkpoint, or ``None`` when there is none yet."""
        return self.read(self.directory)

    @staticmethod
    def read(directory: str | os.PathLike) -> dict[str, Any] | None:
        """Read a directory's checkpoint without taking the lock (monitoring)."""
        path = Path(directory) / _NAME
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        head, sep, payload = data.partition(b"\n")
        try:
            header = json.loads(head)
        except ValueError:
            header = None
        if not sep or not isinstance(header, dict) or header.get("format") != _FORMAT:
            raise CheckpointError(f"{path} is not a dpstream checkpoint")
        if len(payload) != header["bytes"] or zlib.crc32(payload) != header["crc32"]:
            raise CheckpointError(f"{path} is corrupt (checksum mismatch); refusing to resume "
                                  f"from it")
        state = pickle.loads(payload)
        state.setdefault("written", header["written"])
        return state
