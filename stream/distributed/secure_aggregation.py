"""Secure aggregation by pairwise additive masks in fixed point (Bonawitz et al. 2017, §4).

Every pair of parties ``(u, v)`` shares a secret key from a Diffie-Hellman exchange on the
bulletin board (RFC 3526 group 14, 2048-bit MODP; keys hashed with SHA-256). For a round with
context ``c`` (session, round number and member list) the pair expands its key into a mask
``m_uv = SHAKE-256(key_uv || c)`` of 64-bit words. Party ``u`` posts

    y_u = encode(W_u) + sum_{v > u} m_uv - sum_{v < u} m_uv   (mod 2**64)

where ``encode`` is fixed point with :data:`FRACTION_BITS` fractional bits in two's complement.
In the sum over all members every mask appears once with each sign, so ``sum_u y_u =
encode(sum_u W_u)`` exactly (mod 2**64) and :func:`unmask_sum` decodes it. A single ``y_u`` —
or any sum over fewer than all members — still carries at least one mask shared with an honest
party whose key the observer does not hold, and a uniform mask makes the word uniform whatever
the plaintext: the broker and the other parties learn nothing but the total.

Not covered (documented in ``docs/distributed.md``): Bonawitz's secret-shared mask recovery
(a round whose member drops out is abandoned instead), and authentication of the public keys
(use Kafka ACLs/TLS so only the parties can write the board topic).

Examples
--------
>>> import numpy as np
>>> keys = {p: KeyPair.generate() for p in ("a", "b", "c")}
>>> shared = {p: {q: keys[p].shared_key(keys[q].public) for q in keys if q != p} for p in keys}
>>> W = {"a": np.array([1.5, -2.0]), "b": np.array([0.25, 4.0]), "c": np.array([-1.0, 0.5])}
>>> masked = [mask_vector(W[p], me=p, keys=shared[p], members=["a", "b", "c"], context=b"r1")
...           for p in ("a", "b", "c")]
>>> unmask_sum(masked).tolist()
[0.75, 2.5]
>>> decode(masked[0]).tolist() == W["a"].tolist()    # one masked vector alone: noise
False
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["FRACTION_BITS", "MODP_PRIME", "KeyPair", "encode", "decode", "pair_mask",
           "mask_vector", "unmask_sum", "round_context"]

#: fractional bits of the fixed-point encoding: resolution 2**-24 (6e-8); a summand and the
#: total must stay below 2**(63 - 24) = 5.5e11 in magnitude
FRACTION_BITS = 24
_LIMIT = 2.0 ** (63 - FRACTION_BITS)

#: RFC 3526 group 14 (2048-bit MODP), generator 2
MODP_PRIME = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A0879"
    "8E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B"
    "0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA4836"
    "1C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804"
    "F1746C08CA18217C32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6"
    "955817183995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF", 16)
_GENERATOR = 2


@dataclass(frozen=True)
class KeyPair:
    """A Diffie-Hellman key pair in :data:`MODP_PRIME`'s group (the private part never leaves
    the party; it lives in the party's checkpoint so a restart keeps its pairwise keys)."""

    private: int
    public: int

    @classmethod
    def generate(cls) -> KeyPair:
        private = secrets.randbits(256) | (1 << 255)   # 256-bit exponent (OS entropy)
        return cls(private, pow(_GENERATOR, private, MODP_PRIME))

    def shared_key(self, other_public: int) -> bytes:
        """The 32-byte key this party shares with the owner of ``other_public``."""
        if not 1 < other_public < MODP_PRIME - 1:
            raise ValueError("invalid Diffie-Hellman public key (out of range)")
        secret = pow(other_public, self.private, MODP_PRIME)
        return hashlib.sha256(secret.to_bytes(256, "big")).digest()


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


def round_context(session: str, round_number: int, members: Sequence[str]) -> bytes:
    """The bytes that make a round's masks fresh: masks are never reused across rounds or
    member sets (re-using one would reveal the difference of two plaintexts)."""
    return f"{session}|{round_number}|{','.join(sorted(members))}".encode()


def mask_vector(values: np.ndarray, *, me: str, keys: Mapping[str, bytes],
                members: Sequence[str], context: bytes) -> np.ndarray:
    """``y_u``: this party's fixed-point vector plus its pairwise masks (see the module doc)."""
    words = encode(values)
    for other in members:
        if other == me:
            continue
        if other not in keys:
            raise KeyError(f"no shared key with party {other!r}")
        mask = pair_mask(keys[other], context, words.size)
        words = words + mask if me < other else words - mask   # wraps mod 2**64
    return words


def unmask_sum(masked: Sequence[np.ndarray]) -> np.ndarray:
    """The decoded total of every member's masked vector (masks cancel)."""
    total = np.zeros_like(np.asarray(masked[0], dtype=np.uint64))
    for words in masked:
        total = total + np.asarray(words, dtype=np.uint64)
    return decode(total)
