"""The model topic: finished windows of every consumer-group member, as data, on Kafka.

Each member publishes every finished window to a compacted topic keyed ``MEMBER/window-INDEX``
(a retired window as a tombstone) and reads the whole topic. A message value is encoded like a
safe checkpoint (:func:`encode_message`); :func:`decode_message` checks lengths, checksum and
MAC first and never runs code. Design: docs/connectors.md#the-model-topic.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from typing import Any

from .kafka import connect_with_backoff
from .safe_state import StateError, array_from_bytes, array_meta, decode, encode

__all__ = ["ModelTopic", "ModelTopicError", "encode_message", "decode_message", "MESSAGE_FORMAT"]

log = logging.getLogger("dpstream.model_topic")

MESSAGE_FORMAT = "dpstream-window-message/1"
_MAX_HEADER = 4096
#: a window message may be large (a random forest's leaf tables): producer and fetch limits
MAX_MESSAGE_BYTES = 64 * 2**20

#: how long the broker may hold the reader's fetch when the model topic has nothing new. A
#: member polls the topic between its records and never blocks on it, so the fetch wait is
#: pure delay: on the local tansu broker a window published while the reader's fetch waits
#: often reaches it only when the wait ends (a Kafka broker is meant to answer as soon as
#: data arrives). With kafka-python's default (500 ms) a window reached another member 89 ms
#: after its publish on average (p90 211 ms, at most 362 ms): about 600 records of a member
#: draining at 7k msgs/s, predicted without the window; with 10 ms, 7 ms on average
#: (``benchmarks/members_model_topic_latency.py``). The cost: an idle member asks the broker every
#: 10 ms.
FETCH_WAIT_MS = 10


class ModelTopicError(ValueError):
    """A model-topic message that is malformed, altered, unsigned under a key, or not allowed."""


def _mac(key: bytes | None, header: dict, body: bytes) -> str | None:
    if key is None:
        return None
    signed = json.dumps({k: header[k] for k in ("format", "manifest_bytes", "data_bytes")},
                        sort_keys=True).encode()
    return hmac.new(key, signed + b"\n" + body, hashlib.sha256).hexdigest()


def encode_message(state: Any, *, key: bytes | None = None) -> bytes:
    """``state`` (plain data and allow-listed objects) as one message value, MAC-ed under
    ``key`` if given."""
    tree, arrays = encode(state)
    metas, offset = [], 0
    for a in arrays:
        metas.append(array_meta(a, offset))
        offset += a.nbytes
    manifest = json.dumps({"tree": tree, "arrays": metas}, separators=(",", ":")).encode()
    body = manifest + b"".join(a.tobytes(order="A") for a in arrays)
    header = {"format": MESSAGE_FORMAT, "manifest_bytes": len(manifest), "data_bytes": offset,
              "sha256": hashlib.sha256(body).hexdigest()}
    mac = _mac(key, header, body)
    if mac is not None:
        header["hmac_sha256"] = mac
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


def decode_message(value: bytes, *, key: bytes | None = None) -> Any:
    """The state in a message value; :class:`ModelTopicError` before anything is decoded if
    the value is not intact (or carries no valid MAC while ``key`` is set).

    Examples
    --------
    >>> import numpy as np
    >>> value = encode_message({"index": 3, "counts": np.arange(4.0)}, key=b"k")
    >>> decode_message(value, key=b"k")["counts"]
    array([0., 1., 2., 3.])
    >>> decode_message(value[:-1], key=b"k")
    Traceback (most recent call last):
    ...
    dpstream.connectors.model_topic.ModelTopicError: a model-topic message of 164 bytes is truncated or padded (header says 165)
    """
    cut = value.find(b"\n", 0, _MAX_HEADER)
    if cut < 0:
        raise ModelTopicError("not a model-topic message (no header line)")
    try:
        header = json.loads(value[:cut])
        n_manifest, n_data = header["manifest_bytes"], header["data_bytes"]
        fmt = header["format"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelTopicError(f"bad model-topic header ({exc})") from None
    if fmt != MESSAGE_FORMAT:
        raise ModelTopicError(f"format {fmt!r} is not {MESSAGE_FORMAT}")
    body = memoryview(value)[cut + 1:]
    if type(n_manifest) is not int or type(n_data) is not int \
            or len(body) != n_manifest + n_data:
        raise ModelTopicError(f"a model-topic message of {len(body)} bytes is truncated or "
                              f"padded (header says {n_manifest + n_data})")
    if not hmac.compare_digest(str(header.get("sha256")), hashlib.sha256(body).hexdigest()):
        raise ModelTopicError("checksum mismatch: the message was altered")
    if key is not None:
        mac = header.get("hmac_sha256")
        if mac is None:
            raise ModelTopicError("unsigned message while a key is configured")
        if not hmac.compare_digest(str(mac), _mac(key, header, bytes(body))):
            raise ModelTopicError("HMAC mismatch: not signed with this key")
    try:
        manifest = json.loads(bytes(body[:n_manifest]))
        data = body[n_manifest:]
        arrays = [array_from_bytes(m, data) for m in manifest["arrays"]]
        return decode(manifest["tree"], arrays)
    except (StateError, ValueError, KeyError, TypeError) as exc:
        raise ModelTopicError(f"bad model-topic payload: {exc}") from None


class ModelTopic:
    """Publish this member's windows to the model topic and read every member's.

    Parameters
    ----------
    bootstrap
        ``HOST:PORT`` of a broker.
    topic
        The model topic (created compacted with one partition if it does not exist).
    stop
        Set to stop connection retries.
    key
        HMAC key every member signs and checks messages with (``None``: checksum only).
    """

    def __init__(self, bootstrap: str, topic: str, *, stop: threading.Event,
                 key: bytes | None = None):
        self.bootstrap, self.topic, self.stop, self.key = bootstrap, topic, stop, key
        self.producer: Any = None
        self.consumer: Any = None
        self.published = 0
        self.read = 0
        self.rejected = 0
        self.compacted: bool | None = None

    def connect(self) -> bool:
        """Create the topic if needed, the producer and the whole-topic reader."""
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        self.compacted = self._ensure_topic()
        self.producer = connect_with_backoff(
            lambda: KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=0,
                                  max_request_size=MAX_MESSAGE_BYTES,
                                  bootstrap_timeout_ms=5000),
            what=f"Kafka broker {self.bootstrap} (model topic {self.topic})", stop=self.stop)
        self.consumer = connect_with_backoff(
            lambda: KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                  group_id=None, auto_offset_reset="earliest",
                                  max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
                                  fetch_max_bytes=MAX_MESSAGE_BYTES,
                                  fetch_max_wait_ms=FETCH_WAIT_MS,
                                  bootstrap_timeout_ms=5000),
            what=f"Kafka broker {self.bootstrap} (model topic reader)", stop=self.stop)
        if self.producer is None or self.consumer is None:
            return False
        parts = self.consumer.partitions_for_topic(self.topic) or {0}
        self._tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
        self.consumer.assign(self._tps)
        self.consumer.seek_to_beginning(*self._tps)
        return True

    def _ensure_topic(self) -> bool | None:
        """Create the topic compacted; ``True`` if created so, ``None`` if it existed."""
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        from kafka.errors import KafkaError, TopicAlreadyExistsError

        admin = connect_with_backoff(
            lambda: KafkaAdminClient(bootstrap_servers=self.bootstrap,
                                     bootstrap_timeout_ms=5000),
            what=f"Kafka broker {self.bootstrap} (admin)", stop=self.stop)
        if admin is None:
            return None
        try:
            admin.create_topics([NewTopic(self.topic, 1, 1,
                                          topic_configs={"cleanup.policy": "compact"})])
            return True
        except TopicAlreadyExistsError:
            return None
        except KafkaError as exc:   # a broker without compaction: a plain topic still works
            log.warning("model topic %s not created compacted (%s); creating it plain",
                        self.topic, exc)
            try:
                admin.create_topics([NewTopic(self.topic, 1, 1)])
            except TopicAlreadyExistsError:
                return None
            return False
        finally:
            admin.close()

    def publish(self, updates: dict[str, Any | None]) -> None:
        """Send ``key -> state`` (``None``: a tombstone) and wait for the broker's acks; a
        send the producer gave up on raises (nothing may count as published unless it is)."""
        futures = []
        for k, state in updates.items():
            value = None if state is None else encode_message(state, key=self.key)
            futures.append(self.producer.send(self.topic, value, key=k.encode("utf-8")))
        if futures:
            self.producer.flush()
            for future in futures:
                future.get(timeout=0)   # already resolved by flush: raises its error, if any
        self.published += len(futures)

    def poll(self, timeout_ms: int = 0) -> dict[str, Any | None]:
        """What arrived since the last poll: ``key -> state`` (``None``: a tombstone), the
        latest per key. Messages that fail to decode are logged, counted and skipped."""
        out: dict[str, Any | None] = {}
        for _tp, messages in self.consumer.poll(timeout_ms=timeout_ms).items():
            for m in messages:
                if m.key is None:
                    self.rejected += 1
                    continue
                k = m.key.decode("utf-8", "replace")
                if m.value is None:
                    out[k] = None
                    continue
                try:
                    out[k] = decode_message(m.value, key=self.key)
                    self.read += 1
                except ModelTopicError as exc:
                    self.rejected += 1
                    log.warning("model topic %s offset %d (key %s) refused: %s", self.topic,
                                m.offset, k, exc)
        return out

    def catch_up(self, timeout: float = 30.0) -> dict[str, Any | None]:
        """Everything up to the topic's current end (polls until it is reached)."""
        import time

        ends = self.consumer.end_offsets(self._tps)
        out: dict[str, Any | None] = {}
        deadline = time.monotonic() + timeout
        while any(self.consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline or self.stop.is_set():
                raise TimeoutError(f"model topic {self.topic} not read to its end in {timeout} s")
            out.update(self.poll(timeout_ms=200))
        return out

    def close(self) -> None:
        for client in (self.producer, self.consumer):
            if client is not None:
                try:
                    client.close()
                except Exception as exc:   # a broker that is gone
                    log.warning("model topic close: %s", exc)
        self.producer = self.consumer = None
