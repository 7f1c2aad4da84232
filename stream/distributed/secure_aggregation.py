"""Secure aggregation with drop-out recovery (Bonawitz et al., 2017): double masks in fixed point,
mask seeds secret-shared t-of-k.

Each party masks its vector ``W_u`` as ``y_u`` (:func:`mask_vector`: fixed point mod 2**64,
a self mask from a seed ``b_u`` plus pairwise masks from X25519 agreements of the round's mask
keys); both secrets (:class:`RoundSecrets`) are Shamir-shared t-of-k and each share sealed to
its holder (:func:`seal_share`). For each member a survivor reveals one share, never both, and
:func:`recover_sum` removes the masks to give the survivors' exact sum; one ``y_u`` alone is
uniform whatever the plaintext.

The masking formula, the reveal rule and why the sum is exact:
docs/distributed.md#secure-aggregation-the-arithmetic.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from . import shamir

__all__ = ["FRACTION_BITS", "KeyPair", "RoundSecrets", "encode", "decode", "pair_mask",
           "self_mask", "mask_vector", "unmask_sum", "recover_sum", "round_context",
           "seal_share", "open_share", "int_to_secret"]

#: fractional bits of the fixed-point encoding: resolution 2**-24 (6e-8); a summand and the
#: total must stay below 2**(63 - 24) = 5.5e11 in magnitude
FRACTION_BITS = 24
_LIMIT = 2.0 ** (63 - FRACTION_BITS)
_RAW = (serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class KeyPair:
    """An X25519 key pair (32-byte private and public halves)."""

    private: bytes
    public: bytes

    @classmethod
    def generate(cls) -> KeyPair:
        return cls.from_private(os.urandom(32))

    @classmethod
    def from_private(cls, private: bytes) -> KeyPair:
        key = X25519PrivateKey.from_private_bytes(bytes(private))
        return cls(bytes(private), key.public_key().public_bytes(*_RAW))

    def shared_key(self, other_public: bytes, label: bytes = b"mask") -> bytes:
        """The 32-byte key this party shares with the owner of ``other_public`` for
        ``label``'s purpose (``mask``: pairwise masks; ``share``: share encryption)."""
        try:
            other = X25519PublicKey.from_public_bytes(bytes(other_public))
            secret = X25519PrivateKey.from_private_bytes(self.private).exchange(other)
        except ValueError as exc:   # wrong length, or a low-order point (all-zero secret)
            raise ValueError(f"invalid X25519 public key: {exc}") from None
        return hashlib.sha256(b"dpstream-x25519-v1|" + label + b"|" + secret).digest()


def int_to_secret(value: int) -> bytes:
    """A reconstructed secret back to its 32 bytes."""
    if not 0 <= value < 2 ** 256:
        raise ValueError("a reconstructed secret does not fit 32 bytes (wrong shares?)")
    return value.to_bytes(32, "big")


@dataclass(frozen=True)
class RoundSecrets:
    """One party's secrets for one round: its mask key ``s_u`` and self-mask seed ``b_u``."""

    mask_private: bytes
    self_seed: bytes

    @classmethod
    def generate(cls) -> RoundSecrets:
        return cls(os.urandom(32), os.urandom(32))

    @property
    def mask(self) -> KeyPair:
        return KeyPair.from_private(self.mask_private)

    @property
    def mask_public(self) -> bytes:
        return self.mask.public

    @property
    def self_seed_int(self) -> int:
        return int.from_bytes(self.self_seed, "big")

    def pair_keys(self, mask_publics: Mapping[str, bytes], me: str) -> dict[str, bytes]:
        """The pairwise mask keys of party ``me`` with every other member (``mask_publics``:
        ``{member: its mask public key}``)."""
        mine = self.mask
        return {p: mine.shared_key(pub) for p, pub in mask_publics.items() if p != me}

    def shares(self, holders: Sequence[int], threshold: int) -> dict[int, bytes]:
        """``{holder: share of b_u || share of s_u}`` (each :data:`shamir.SHARE_BYTES`)."""
        b = shamir.split(self.self_seed_int, holders=holders, threshold=threshold)
        s = shamir.split(int.from_bytes(self.mask_private, "big"), holders=holders,
                         threshold=threshold)
        return {x: shamir.share_to_bytes(b[x]) + shamir.share_to_bytes(s[x]) for x in holders}


def seal_share(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """Encrypt one share (random 96-bit nonce, prepended)."""
    nonce = os.urandom(12)
    return nonce + ChaCha20Poly1305(key).encrypt(nonce, plaintext, aad)


def open_share(key: bytes, token: bytes, aad: bytes) -> tuple[int, int]:
    """Decrypt a share sealed by :func:`seal_share`: ``(share of b_u, share of s_u)``;
    raises :class:`ValueError` if it was not sealed for this key and ``aad``."""
    try:
        plain = ChaCha20Poly1305(key).decrypt(token[:12], token[12:], aad)
    except InvalidTag:
        raise ValueError("share does not decrypt: not sealed for this party, round and "
                         "sender") from None
    n = shamir.SHARE_BYTES
    if len(plain) != 2 * n:
        raise ValueError("a sealed share has the wrong length")
    return shamir.share_from_bytes(plain[:n]), shamir.share_from_bytes(plain[n:])


def encode(values: np.ndarray) -> np.ndarray:
    """Floats -> fixed point words (uint64, two's complement)."""
    v = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(v)) or np.any(np.abs(v) >= _LIMIT):
        raise ValueError(f"values must be finite and below {_LIMIT:.3g} in magnitude "
                         f"for {FRACTION_BITS}-bit fixed point")
    return np.rint(v * 2.0 ** FRACTION_BITS).astype(np.int64).view(np.uint64)


def decode(words: np.ndarray) -> np.ndarray:
    """Fixed point words -> floats (inverse of :func:`encode`, for sums too)."""
    return np.asarray(words, dtype=np.uint64).view(np.int64).astype(np.float64) \
        / 2.0 ** FRACTION_BITS


def pair_mask(key: bytes, context: bytes, size: int) -> np.ndarray:
    """``size`` uniform 64-bit words from the pair's key and the round's context."""
    stream = hashlib.shake_256(b"dpstream-secagg-v1|" + key + b"|" + context).digest(8 * size)
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64)


def self_mask(seed: bytes, context: bytes, size: int) -> np.ndarray:
    """``PRG(b_u)``: ``size`` uniform 64-bit words from a self-mask seed and the context."""
    stream = hashlib.shake_256(b"dpstream-selfmask-v1|" + seed + b"|" + context).digest(8 * size)
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64)


def round_context(session: str, round_number: int, members: Sequence[str]) -> bytes:
    """The bytes that make a round's masks fresh: masks are never reused across rounds or
    member sets (re-using one would reveal the difference of two plaintexts)."""
    return f"{session}|{round_number}|{','.join(sorted(members))}".encode()


def mask_vector(values: np.ndarray, *, me: str, keys: Mapping[str, bytes],
                members: Sequence[str], context: bytes,
                self_seed: bytes | None = None) -> np.ndarray:
    """``y_u``: this party's fixed-point vector plus its pairwise masks (``keys``: the pair
    keys with every other member) and, given ``self_seed``, its self mask."""
    words = encode(values)
    if self_seed is not None:
        words = words + self_mask(self_seed, context, words.size)
    for other in members:
        if other == me:
            continue
        if other not in keys:
            raise KeyError(f"no shared key with party {other!r}")
        mask = pair_mask(keys[other], context, words.size)
        words = words + mask if me < other else words - mask   # wraps mod 2**64
    return words


def unmask_sum(masked: Sequence[np.ndarray]) -> np.ndarray:
    """The decoded total of every member's vector masked with pairwise masks only (no self
    masks, nobody missing: the masks cancel)."""
    total = np.zeros_like(np.asarray(masked[0], dtype=np.uint64))
    for words in masked:
        total = total + np.asarray(words, dtype=np.uint64)
    return decode(total)


def recover_sum(masked: Mapping[str, np.ndarray], *, self_seeds: Mapping[str, bytes],
                dropped: Mapping[str, bytes], mask_publics: Mapping[str, bytes],
                context: bytes) -> np.ndarray:
    """``encode(sum of the survivors' W_u)`` as uint64 words (exact, mod 2**64).

    Parameters
    ----------
    masked
        ``{survivor: y_u}``.
    self_seeds
        ``{survivor: b_u}`` (reconstructed from the survivors' reveals).
    dropped
        ``{dropped member: s_u's private half}`` (reconstructed likewise).
    mask_publics
        Every member's mask public key (from the joins).
    context
        The round's :func:`round_context`.

    Examples
    --------
    Three parties; ``c`` sends its masked vector and dies before revealing anything:

    >>> import numpy as np
    >>> from dpstream.stream.distributed import shamir
    >>> members = ["a", "b", "c"]
    >>> secrets = {p: RoundSecrets.generate() for p in members}
    >>> pubs = {p: s.mask_public for p, s in secrets.items()}
    >>> W = {"a": np.array([1.5, -2.0]), "b": np.array([0.25, 4.0]), "c": np.array([-1.0, 0.5])}
    >>> ctx = round_context("job", 1, members)
    >>> y = {p: mask_vector(W[p], me=p, keys=secrets[p].pair_keys(pubs, p), members=members,
    ...                     context=ctx, self_seed=secrets[p].self_seed) for p in members}
    >>> decode(y["a"]).tolist() == W["a"].tolist()       # one masked vector alone: noise
    False
    >>> shares = {p: shamir.split(secrets[p].self_seed_int, holders=[1, 2, 3], threshold=2)
    ...           for p in members}                 # (encrypted to holders in the protocol)
    >>> seeds = {p: int_to_secret(shamir.reconstruct({x: shares[p][x] for x in (1, 2)}, 2))
    ...          for p in members}                  # a and b reveal their shares
    >>> decode(recover_sum(y, self_seeds=seeds, dropped={}, mask_publics=pubs,
    ...                    context=ctx)).tolist()
    [0.75, 2.5]
    """
    names = sorted(masked)
    if set(self_seeds) != set(names):
        raise ValueError("a self-mask seed is needed for every survivor, and only for them")
    size = np.asarray(masked[names[0]]).size
    total = np.zeros(size, dtype=np.uint64)
    for u in names:
        total = total + np.asarray(masked[u], dtype=np.uint64) \
            - self_mask(self_seeds[u], context, size)
    for d, private in dropped.items():
        gone = KeyPair.from_private(private)
        for u in names:   # u added +m_ud when u < d, -m_ud otherwise: take it back out
            mask = pair_mask(gone.shared_key(mask_publics[u]), context, size)
            total = total - mask if u < d else total + mask
    return total
