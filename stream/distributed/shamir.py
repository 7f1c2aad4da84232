"""Shamir's t-of-k secret sharing over the prime field of ``2**521 - 1``.

:func:`split` makes the shares ``{x: f(x)}`` of a secret below :data:`PRIME` (holder ``x``:
a party's 1-based place in the roster); any ``t`` of them give it back by Lagrange
interpolation (:func:`reconstruct`), and any ``t - 1`` say nothing about it. Distributed
S-GBDT uses it to share each round's mask seeds (Bonawitz et al., 2017), see
:mod:`.secure_aggregation`. The scheme: docs/distributed.md#shamir-secret-sharing.
"""

from __future__ import annotations

import secrets as _secrets
from collections.abc import Mapping, Sequence

__all__ = ["PRIME", "SHARE_BYTES", "split", "reconstruct", "share_to_bytes", "share_from_bytes"]

#: the field: the Mersenne prime 2**521 - 1 (larger than any 32-byte secret)
PRIME = 2 ** 521 - 1
#: bytes of one share's value (ceil(521 / 8))
SHARE_BYTES = 66


def _check_holders(holders: Sequence[int]) -> None:
    if len(set(holders)) != len(holders):
        raise ValueError(f"share holders must be distinct, got {list(holders)}")
    bad = [x for x in holders if not (isinstance(x, int) and 0 < x < PRIME)]
    if bad:
        raise ValueError(f"share holders must be integers in [1, PRIME), got {bad}")


def split(secret: int, *, holders: Sequence[int], threshold: int,
          rng: _secrets.SystemRandom | None = None) -> dict[int, int]:
    """The shares ``{x: f(x)}`` of ``secret`` for every holder ``x`` (any ``threshold`` of
    them reconstruct it).

    Parameters
    ----------
    secret
        An integer in ``[0, PRIME)``.
    holders
        Distinct evaluation points in ``[1, PRIME)``.
    threshold
        ``t``: ``1 <= t <= len(holders)``.
    rng
        Source of the polynomial's coefficients (OS entropy by default; pass a seeded
        ``random.Random`` only in tests).

    Examples
    --------
    >>> s = split(7, holders=[1, 2], threshold=1)    # t = 1: every share is the secret
    >>> s
    {1: 7, 2: 7}
    """
    if not 0 <= secret < PRIME:
        raise ValueError("the secret must be an integer in [0, PRIME)")
    _check_holders(holders)
    if not 1 <= threshold <= len(holders):
        raise ValueError(f"threshold must be in [1, {len(holders)}] for {len(holders)} "
                         f"holders, got {threshold}")
    rng = rng or _secrets.SystemRandom()
    coeffs = [secret] + [rng.randrange(PRIME) for _ in range(threshold - 1)]
    out = {}
    for x in holders:
        y = 0
        for c in reversed(coeffs):   # Horner
            y = (y * x + c) % PRIME
        out[x] = y
    return out


def reconstruct(shares: Mapping[int, int], threshold: int) -> int:
    """The secret from at least ``threshold`` shares ``{x: f(x)}`` (the first ``threshold``
    by holder are used; fewer raise :class:`ValueError`).

    Shares that do not come from one polynomial of degree ``< threshold`` give a wrong
    secret, not an error: the protocol assumes honest-but-curious share holders.

    Examples
    --------
    >>> shares = split(123456789, holders=[1, 2, 3, 4, 5], threshold=3)
    >>> reconstruct({x: shares[x] for x in (2, 4, 5)}, threshold=3)
    123456789
    >>> reconstruct({x: shares[x] for x in (1, 3)}, threshold=3)
    Traceback (most recent call last):
    ...
    ValueError: 2 shares cannot reconstruct a 3-of-k secret: at least 3 are needed
    """
    if threshold < 1:
        raise ValueError(f"threshold must be at least 1, got {threshold}")
    if len(shares) < threshold:
        raise ValueError(f"{len(shares)} shares cannot reconstruct a {threshold}-of-k secret: "
                         f"at least {threshold} are needed")
    xs = sorted(shares)[:threshold]
    _check_holders(xs)
    secret = 0
    for i in xs:
        num, den = 1, 1
        for j in xs:
            if j != i:
                num = num * (-j) % PRIME
                den = den * (i - j) % PRIME
        secret = (secret + shares[i] % PRIME * num * pow(den, -1, PRIME)) % PRIME
    return secret


def share_to_bytes(value: int) -> bytes:
    """A share's value as :data:`SHARE_BYTES` big-endian bytes."""
    if not 0 <= value < PRIME:
        raise ValueError("a share's value must be in [0, PRIME)")
    return value.to_bytes(SHARE_BYTES, "big")


def share_from_bytes(data: bytes) -> int:
    """Inverse of :func:`share_to_bytes` (raises on a wrong length or out-of-field value)."""
    if len(data) != SHARE_BYTES:
        raise ValueError(f"a share is {SHARE_BYTES} bytes, got {len(data)}")
    value = int.from_bytes(data, "big")
    if value >= PRIME:
        raise ValueError("a share's value must be below PRIME")
    return value
