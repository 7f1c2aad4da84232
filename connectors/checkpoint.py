"""Checkpoints: one file per service, written atomically, checked before use, never executed.

:class:`CheckpointStore` keeps the runner's whole state (model, source positions, counters,
record-id memory) in ``DIR/checkpoint.dpck`` (``dpstream-checkpoint/2``): a JSON header with
SHA-256 and optional HMAC-SHA256, a JSON manifest and raw array bytes, refused with
:class:`CheckpointError` before decoding if anything does not match; never unpickled. Writes
are atomic and one process holds a directory's lock. Format and guarantees:
docs/connectors.md#checkpoint-file-format and
docs/connectors.md#atomic-writes-and-the-directory-lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from .safe_state import StateError, array_from_bytes, array_meta, decode, encode

log = logging.getLogger(__name__)

__all__ = ["CheckpointStore", "CheckpointError", "CheckpointLocked", "read_checkpoint",
           "FORMAT", "FILENAME", "KEY_ENV"]

FORMAT = "dpstream-checkpoint/2"
FILENAME = "checkpoint.dpck"
KEY_ENV = "DPSTREAM_CHECKPOINT_KEY"
V1_FORMAT = "dpstream-checkpoint/1"
V1_FILENAME = "checkpoint.pkl"
_SIGNED = ("format", "written", "manifest_bytes", "data_bytes")
_MAX_HEADER = 4096


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be trusted or written (corrupt, tampered, foreign, unwritable)."""


class CheckpointLocked(RuntimeError):
    """Another process holds the checkpoint directory."""


def migrate_hint(directory: str | os.PathLike) -> str:
    """How to convert a trusted directory's pickled checkpoint (the error message's advice)."""
    return (f"if {directory} is yours and trusted, convert it once with `dpstream "
            f"migrate-checkpoint --checkpoint-dir {directory} --trust-pickle` (that one command "
            f"unpickles it, which runs code from the file)")


def _key(key: bytes | str | None) -> bytes | None:
    if key is None:
        key = os.environ.get(KEY_ENV)
        if key is None:
            return None
        if not key:
            raise CheckpointError(f"{KEY_ENV} is set but empty; unset it or give a secret")
    return key.encode() if isinstance(key, str) else bytes(key)


def _signed_bytes(header: dict) -> bytes:
    fields = {k: header[k] for k in _SIGNED}
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _digests(header: dict, pieces: list, key: bytes | None) -> tuple[str, str | None]:
    sha = hashlib.sha256(_signed_bytes(header))
    mac = hmac.new(key, _signed_bytes(header), hashlib.sha256) if key is not None else None
    for piece in pieces:
        sha.update(piece)
        if mac is not None:
            mac.update(piece)
    return sha.hexdigest(), (mac.hexdigest() if mac is not None else None)


def _raw_bytes(a: np.ndarray, order: str) -> memoryview:
    flat = np.ascontiguousarray(a.T if order == "F" else a).reshape(-1)
    return memoryview(flat.view(np.uint8))


def read_checkpoint(directory: str | os.PathLike, *, key: bytes | str | None = None,
                    accept_unsigned: bool = False
                    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """A directory's checkpoint and how it was checked, without taking the lock.

    Parameters
    ----------
    directory
        The checkpoint directory.
    key
        The HMAC key; default ``DPSTREAM_CHECKPOINT_KEY`` from the environment. With a key, a
        checkpoint without a MAC or with another MAC is refused.
    accept_unsigned
        Accept a checkpoint without a MAC even under a key (``dpstream migrate-checkpoint
        --trust-unsigned``, which signs it); one with a wrong MAC is still refused.

    Returns
    -------
    state, info
        ``state`` is ``None`` when there is no checkpoint yet; ``info`` holds the ``path``,
        ``format``, ``written`` time, ``bytes`` and ``integrity`` (``"sha256+hmac"``,
        ``"sha256"``, or ``"sha256 (hmac not verified: no key)"``).

    Raises
    ------
    CheckpointError
        The file is truncated, corrupt, tampered, foreign, signed with another key, unsigned
        while a key is configured, or a pickled checkpoint of format ``/1``.
    """
    directory = Path(directory)
    path = directory / FILENAME
    secret = _key(key)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if (directory / V1_FILENAME).exists():
            raise CheckpointError(
                f"{directory / V1_FILENAME} is a pickled checkpoint ({V1_FORMAT}), which this "
                f"version refuses to load because unpickling can run code; "
                f"{migrate_hint(directory)}") from None
        return None, {"path": str(path)}
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    head, sep, body = data[:_MAX_HEADER].partition(b"\n")
    try:
        header = json.loads(head) if sep else None
    except ValueError:
        header = None
    fmt = header.get("format") if isinstance(header, dict) else None
    if fmt == V1_FORMAT:
        raise CheckpointError(f"{path} is a pickled checkpoint ({V1_FORMAT}), which this version "
                              f"refuses to load because unpickling can run code; "
                              f"{migrate_hint(directory)}")
    if fmt != FORMAT or not all(k in header for k in (*_SIGNED, "sha256")):
        raise CheckpointError(f"{path} is not a dpstream checkpoint ({FORMAT}); refusing it")
    body = memoryview(data)[len(head) + 1:]
    m, n = header["manifest_bytes"], header["data_bytes"]
    if type(m) is not int or type(n) is not int or m < 0 or n < 0:
        raise CheckpointError(f"{path} has a malformed header; refusing it")
    if len(body) != m + n:
        what = "truncated" if len(body) < m + n else "longer than its header says"
        raise CheckpointError(f"{path} is {what} ({len(body)} bytes after the header, "
                              f"{m + n} expected); refusing to resume from it")
    sha, mac = _digests(header, [body], secret)
    if not hmac.compare_digest(str(header["sha256"]), sha):
        raise CheckpointError(f"{path} is corrupt or was altered (SHA-256 mismatch); refusing "
                              f"to resume from it")
    if secret is not None:
        given = header.get("hmac_sha256")
        if given is None and accept_unsigned:
            integrity = "sha256 (unsigned, accepted)"
        elif not isinstance(given, str):
            raise CheckpointError(
                f"{path} carries no HMAC but a checkpoint key is configured ({KEY_ENV}); "
                f"refusing it (anyone who can write the directory could have made it). If it "
                f"is yours, sign it once: `dpstream migrate-checkpoint --checkpoint-dir "
                f"{directory} --trust-unsigned` with the key set")
        elif not hmac.compare_digest(given, mac):
            raise CheckpointError(f"{path}: HMAC mismatch (written with another key, or "
                                  f"altered); refusing it")
        else:
            integrity = "sha256+hmac"
    else:
        integrity = ("sha256 (hmac not verified: no key)" if "hmac_sha256" in header
                     else "sha256")
    try:
        manifest = json.loads(bytes(body[:m]))
        arrays = [array_from_bytes(meta, body[m:]) for meta in manifest["arrays"]]
        state = decode(manifest["state"], arrays)
    except (StateError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise CheckpointError(f"{path}: malformed or disallowed content ({exc}); refusing "
                              f"it") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: the state is not a mapping; refusing it")
    state.setdefault("written", header["written"])
    info = {"path": str(path), "format": FORMAT, "written": header["written"],
            "bytes": len(data), "integrity": integrity}
    return state, info


class CheckpointStore:
    """Atomic checkpoint file in ``directory`` with a single-writer lock.

    Parameters
    ----------
    directory
        Created if absent; must be writable (checked at once, so a read-only directory fails
        before any record is consumed).
    key
        HMAC key for signing and checking; default ``DPSTREAM_CHECKPOINT_KEY`` from the
        environment, ``None`` when unset (checksum only).

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> d = tempfile.mkdtemp()
    >>> with CheckpointStore(d) as store:
    ...     store.load() is None
    ...     store.save({"offsets": {"t:0": 42}, "rng": np.random.default_rng(1)})
    ...     store.load()["offsets"]
    True
    {'t:0': 42}
    >>> CheckpointStore.read(d)["offsets"]          # read-only, no lock (``dpstream status``)
    {'t:0': 42}
    >>> with CheckpointStore(d, key="s3cret") as store:   # signed from now on
    ...     store.save({"offsets": {"t:0": 43}})
    >>> read_checkpoint(d, key="s3cret")[1]["integrity"]
    'sha256+hmac'
    >>> CheckpointStore.read(d, key="another key")
    Traceback (most recent call last):
    ...
    dpstream.connectors.checkpoint.CheckpointError: .../checkpoint.dpck: HMAC mismatch ...
    """

    def __init__(self, directory: str | os.PathLike, *, key: bytes | str | None = None):
        self.directory = Path(directory)
        self.path = self.directory / FILENAME
        self.key = _key(key)
        self._lock_fd: int | None = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"cannot use checkpoint directory {self.directory}: "
                                  f"{exc.strerror or exc}") from None
        self._lock_fd = self._take_lock()
        tmp = self.directory / "checkpoint.tmp"
        try:   # a leftover of a crash mid-write goes; a read-only directory fails here
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            os.unlink(tmp)
        except OSError as exc:
            self.close()
            raise CheckpointError(f"checkpoint directory {self.directory} is not writable "
                                  f"({exc.strerror or exc})") from None
        self.saves = 0
        self.last_save: float | None = None

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take_lock(self) -> int:
        """Open and ``flock`` ``DIR/lock``, write our pid, return the descriptor.

        A lock file left by a process that ended without closing its store (``kill -9``, a
        power cut) is not locked any more - the kernel released its ``flock`` - and is taken
        over with a logged message naming the pid it held. A clean :meth:`close` removes the
        file; as another process may unlink it between our ``open`` and ``flock``, the lock is
        ours only once the locked file is still the one at ``DIR/lock`` (else we try again).
        """
        path = self.directory / "lock"
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:   # a read-only directory fails here, before any record
                raise CheckpointError(f"checkpoint directory {self.directory} is not writable "
                                      f"({exc.strerror or exc})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise CheckpointLocked(
                    f"{self.directory} is in use by another dpstream process (lock file "
                    f"{path}); one writer per checkpoint directory") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)   # unlinked by a closing owner after our open: take the new file
        held = os.read(fd, 64).decode("ascii", "replace").strip()
        if held:   # a previous writer did not close cleanly: its lock file is stale
            log.warning("checkpoint directory %s: taking over the lock of process %s, which "
                        "ended without releasing it (killed or crashed); its last checkpoint "
                        "is used as usual", self.directory, held)
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    def close(self) -> None:
        """Release the lock and remove the lock file (the checkpoint stays)."""
        if self._lock_fd is not None:
            try:   # unlinked while still locked: a process that opened it retries (_take_lock)
                os.unlink(self.directory / "lock")
            except OSError:
                pass
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` atomically (docs/connectors.md#atomic-writes-and-the-directory-lock).

        Raises
        ------
        CheckpointError
            The state holds something a checkpoint cannot encode, or the write failed (the
            previous checkpoint is kept).
        """
        if self._lock_fd is None:
            raise CheckpointError("the store is closed")
        try:
            tree, arrays = encode(state)
        except StateError as exc:
            raise CheckpointError(f"cannot checkpoint this state: {exc}") from None
        metas, pieces, offset = [], [], 0
        for a in arrays:
            meta = array_meta(a, offset)
            metas.append(meta)
            pieces.append(_raw_bytes(a, meta["order"]))
            offset += meta["nbytes"]
        manifest = json.dumps({"state": tree, "arrays": metas}, separators=(",", ":"),
                              allow_nan=False).encode()
        header: dict[str, Any] = {"format": FORMAT, "written": time.time(),
                                  "manifest_bytes": len(manifest), "data_bytes": offset}
        header["sha256"], mac = _digests(header, [manifest, *pieces], self.key)
        if mac is not None:
            header["hmac_sha256"] = mac
        tmp = self.directory / "checkpoint.tmp"
        replaced = False
        try:
            with open(tmp, "wb") as fh:
                fh.write(json.dumps(header).encode() + b"\n")
                fh.write(manifest)
                for piece in pieces:
                    fh.write(piece)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            replaced = True
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except BaseException as exc:
            if not replaced:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            if isinstance(exc, OSError):
                kept = ("the new checkpoint is in place but its directory entry may not "
                        "survive a power cut" if replaced
                        else "the previous checkpoint (if any) is kept")
                raise CheckpointError(f"cannot write the checkpoint {self.path}: "
                                      f"{exc.strerror or exc}; {kept}") from None
            raise
        self.saves += 1
        self.last_save = time.time()

    def load(self) -> dict[str, Any] | None:
        """The last checkpoint, or ``None`` when there is none yet."""
        return read_checkpoint(self.directory, key=self.key)[0]

    @staticmethod
    def read(directory: str | os.PathLike, *, key: bytes | str | None = None
             ) -> dict[str, Any] | None:
        """Read a directory's checkpoint without taking the lock (monitoring)."""
        return read_checkpoint(directory, key=key)[0]
