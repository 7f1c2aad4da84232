"""Who may write the bulletin board: the roster of parties and their Ed25519 signing keys.

Every party holds its own :class:`SigningKey` (an Ed25519 private key in a PEM file, mode
0600, made by :func:`keygen` on the party's machine, never leaving it) and the same
:class:`Roster`: a public JSON file of every party's name and public key and the threshold
``t``, given to every party out of band. Its :attr:`Roster.fingerprint` goes into the job's
``config``; ``t`` must exceed half the parties (default ``k // 2 + 1``).

The roster's format, how keys travel and why ``2t > k``:
docs/distributed.md#keys-and-the-roster.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = ["ROSTER_FORMAT", "Roster", "SigningKey", "check_party_name", "keygen",
           "keygen_command"]

ROSTER_FORMAT = "dpstream-roster/1"


def check_party_name(name: str) -> str:
    """A party name: non-empty, at most 64 characters, without ``,`` or ``|`` (they delimit
    the round's context)."""
    if not isinstance(name, str) or not name or len(name) > 64 or "," in name or "|" in name:
        raise ValueError(f"party name must be 1-64 characters without ',' or '|', got {name!r}")
    return name


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class SigningKey:
    """One party's Ed25519 signing key.

    Examples
    --------
    >>> key = SigningKey.generate()
    >>> len(key.public), len(key.sign(b"message"))
    (32, 64)
    """

    def __init__(self, key: Ed25519PrivateKey):
        self._key = key
        self.public = key.public_key().public_bytes(serialization.Encoding.Raw,
                                                    serialization.PublicFormat.Raw)

    @classmethod
    def generate(cls) -> SigningKey:
        """A fresh key (OS entropy)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: str | Path) -> SigningKey:
        """Read a PEM (PKCS#8) private key written by :meth:`save`."""
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path} does not hold an Ed25519 private key")
        return cls(key)

    def save(self, path: str | Path) -> None:
        """Write the private key as PEM, readable by its owner only; never overwrites."""
        pem = self._key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise FileExistsError(f"{path} exists: a signing key is never overwritten "
                                  f"(remove it yourself if you mean to replace it)") from None
        with os.fdopen(fd, "wb") as f:
            f.write(pem)

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)


class Roster:
    """The parties of a job and their public keys (docs/distributed.md#keys-and-the-roster).

    Parameters
    ----------
    parties
        ``{name: raw 32-byte Ed25519 public key}``.
    threshold
        Shares needed to recover a dropped party's masks (``None``: ``k // 2 + 1``). It must
        be more than half of the ``k`` parties (``2t > k``, so two parties need ``t = 2``: no
        drop-out is tolerated): every party's reveals then rest on signed attestations of the
        same survivors by ``t`` parties, and no two disjoint groups of ``t`` exist.

    Examples
    --------
    >>> roster, _ = Roster.generate(["a", "b", "c", "d"], threshold=2)
    >>> roster.threshold
    Traceback (most recent call last):
    ...
    ValueError: the roster lists k = 4 parties: its threshold must be in [3, 4], got t = 2; ...
    >>> roster, keys = Roster.generate(["alice", "bob", "carol"])
    >>> roster.threshold, roster.index("bob")
    (2, 2)
    >>> sig = keys["alice"].sign(b"hello")
    >>> roster.verify("alice", sig, b"hello"), roster.verify("bob", sig, b"hello")
    (True, False)
    """

    def __init__(self, parties: Mapping[str, bytes], threshold: int | None = None):
        self.parties = {check_party_name(n): bytes(k) for n, k in sorted(parties.items())}
        bad = [n for n, k in self.parties.items() if len(k) != 32]
        if bad:
            raise ValueError(f"Ed25519 public keys are 32 bytes; wrong for {bad}")
        self._keys = {n: Ed25519PublicKey.from_public_bytes(k) for n, k in self.parties.items()}
        self.explicit_threshold = threshold

    @property
    def names(self) -> list[str]:
        return list(self.parties)

    @property
    def threshold(self) -> int:
        """``t`` (raises :class:`ValueError` when the roster's threshold cannot work)."""
        k = len(self.parties)
        low = k // 2 + 1   # 2t > k: two disjoint groups of t parties cannot exist
        t = self.explicit_threshold if self.explicit_threshold is not None else low
        if not low <= t <= k:
            raise ValueError(
                f"the roster lists k = {k} parties: its threshold must be in [{low}, {k}], got "
                f"t = {t}; the smallest allowed is {low} (more than half of the parties, 2t > k: "
                f"with 2t <= k a board that shows two groups of t parties different logs could "
                f"collect both kinds of shares of one member and unmask its vector; "
                f"docs/distributed.md#threat-model-who-learns-what)")
        return t

    def index(self, name: str) -> int:
        """The party's 1-based place (its Shamir evaluation point)."""
        return self.names.index(name) + 1

    def verify(self, name: str, signature: bytes, data: bytes) -> bool:
        """Whether ``signature`` is ``name``'s signature of ``data`` (unknown name: False)."""
        key = self._keys.get(name)
        if key is None:
            return False
        try:
            key.verify(signature, data)
        except InvalidSignature:
            return False
        return True

    def to_dict(self) -> dict:
        return {"format": ROSTER_FORMAT, "threshold": self.explicit_threshold,
                "parties": {n: _b64(k) for n, k in self.parties.items()}}

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the roster's canonical JSON (the effective threshold included)."""
        body = {**self.to_dict(), "threshold": self.threshold}
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                              .encode()).hexdigest()

    @classmethod
    def from_dict(cls, data: Mapping) -> Roster:
        if data.get("format") != ROSTER_FORMAT:
            raise ValueError(f"not a {ROSTER_FORMAT} roster (format {data.get('format')!r})")
        parties = {n: base64.b64decode(k, validate=True) for n, k in data["parties"].items()}
        return cls(parties, data.get("threshold"))

    @classmethod
    def load(cls, path: str | Path) -> Roster:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def save(self, path: str | Path) -> None:
        """Write atomically (temporary file, then rename)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def generate(cls, names: Iterable[str], threshold: int | None = None
                 ) -> tuple[Roster, dict[str, SigningKey]]:
        """Fresh keys for ``names`` and their roster, in memory (tests and examples; a
        deployment generates each key on its own party with :func:`keygen`)."""
        keys = {n: SigningKey.generate() for n in names}
        return cls({n: k.public for n, k in keys.items()}, threshold), keys


def keygen(party: str, key_file: str | Path, roster: str | Path | None = None,
           threshold: int | None = None) -> dict:
    """Create ``party``'s signing key in ``key_file`` and (``roster``) add its public key to
    that roster file, creating it if absent; returns what :func:`keygen_command` prints.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("alice", "bob", "carol"):
    ...     _ = keygen(name, d / f"{name}.key", roster=d / "roster.json")
    >>> r = Roster.load(d / "roster.json")
    >>> r.names, r.threshold
    (['alice', 'bob', 'carol'], 2)
    >>> r.parties["bob"] == SigningKey.load(d / "bob.key").public
    True
    """
    check_party_name(party)
    key = SigningKey.generate()
    key.save(key_file)
    out = {"party": party, "public_key": _b64(key.public), "key_file": str(key_file)}
    if roster is not None:
        path = Path(roster)
        current = Roster.load(path) if path.exists() else Roster({})
        parties = {**current.parties, party: key.public}
        t = threshold if threshold is not None else current.explicit_threshold
        Roster(parties, t).save(path)
        out["roster"] = str(path)
    return out


def keygen_command(party: str, key_file: str, roster: str | None = None,
                   threshold: int | None = None, as_json: bool = False) -> int:
    """``python -m dpstream.stream.distributed keygen``: print the new public key (and the
    roster it joined); 1 with a message if the key file exists or a name is invalid."""
    try:
        out = keygen(party, key_file, roster, threshold)
    except (FileExistsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(out))
    else:
        print(f"{party}: signing key written to {key_file} (keep it private)\n"
              f"public key: {out['public_key']}"
              + (f"\nadded to roster {out['roster']}" if "roster" in out else
                 "\nsend the public key to whoever keeps the job's roster"))
    return 0
