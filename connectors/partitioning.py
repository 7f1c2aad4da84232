"""Kafka's default partition of a keyed message, compiled: ``murmur2(key) & 0x7fffffff`` modulo
the topic's partition count, as the Java client and kafka-python choose it.

:class:`~dpstream.connectors.kafka.KafkaSink` keys every prediction and dead letter
(:func:`~dpstream.connectors.records.sink_key`), so kafka-python hashes each key with its
pure-Python murmur2: about 8 µs a 45-byte key, the largest single cost of publishing a
prediction. The sink picks the same partition here (the compiled hash, bit for bit the Java
client's) and passes it to ``send``; a consumer that relies on a key's partition (the repeat
of a prediction after a crash lands where the first one did) sees no difference.

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

__all__ = ["murmur2", "key_partition"]

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
