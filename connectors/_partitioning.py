"""Kafka's default partition of a keyed message, compiled: ``murmur2(key) & 0x7fffffff`` modulo
the topic's partition count, as the Java client and kafka-python choose it.

The sink passes this partition to ``send``, sparing kafka-python's pure-Python hash; a
consumer sees no difference. See docs/connectors.md#key-partitioning.

Examples
--------
>>> murmur2(b"21")                      # the Java client's test vectors
-973932308
>>> murmur2(b"foobar")
-790332482
>>> key_partition(b'{"partition":"records:0","offset":17,"id":42}', 6)
2
"""

from __future__ import annotations

import numpy as np
from numba import njit

_MASK = 0xFFFFFFFF
_M = 0x5BD1E995


@njit(cache=True)
def _murmur2(data: np.ndarray) -> int:   # pragma: no cover - compiled
    # 32-bit MurmurHash2 (seed 0x9747b28c), unsigned; products fit in int64 before masking
    n = data.shape[0]
    h = (0x9747B28C ^ n) & _MASK
    for i in range(n // 4):
        b = 4 * i
        k = (np.int64(data[b]) | (np.int64(data[b + 1]) << 8) | (np.int64(data[b + 2]) << 16)
             | (np.int64(data[b + 3]) << 24))
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = n & ~3
    extra = n % 4
    if extra >= 3:
        h ^= np.int64(data[tail + 2]) << 16
    if extra >= 2:
        h ^= np.int64(data[tail + 1]) << 8
    if extra >= 1:
        h ^= np.int64(data[tail])
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def murmur2(key: bytes) -> int:
    """The Java client's ``Utils.murmur2`` of ``key``: a signed 32-bit integer."""
    h = int(_murmur2(np.frombuffer(key, dtype=np.uint8)))
    return h - (1 << 32) if h >= 1 << 31 else h


def key_partition(key: bytes, partitions: int) -> int:
    """The partition (of ``partitions``, numbered from 0) Kafka's default partitioner gives a
    message with this key."""
    return (int(_murmur2(np.frombuffer(key, dtype=np.uint8))) & 0x7FFFFFFF) % partitions
