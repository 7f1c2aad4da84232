"""The compiled murmur2 partition of a keyed message is kafka-python's (the Java client's)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as reference

from dpstream.connectors._partitioning import key_partition, murmur2
from dpstream.connectors.records import sink_key


def _signed(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_murmur2_is_kafka_pythons_bit_for_bit(key):
    assert murmur2(key) == _signed(reference(key))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30), st.integers(0, 2**62), st.one_of(st.integers(), st.text()),
       st.integers(1, 64))
def test_a_sink_key_goes_to_the_default_partitioners_partition(topic, offset, record_id, n):
    key = sink_key(topic, offset, record_id)
    assert key_partition(key, n) == (reference(key) & 0x7FFFFFFF) % n


def test_every_tail_length():
    for size in range(0, 12):
        key = bytes(range(200, 200 + size))
        assert murmur2(key) == _signed(reference(key))


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=30), st.one_of(st.integers(), st.booleans()),
       st.one_of(st.none(), st.integers(), st.text(), st.booleans(), st.floats(allow_nan=False)))
def test_a_sink_key_is_the_compact_json_of_its_fields_byte_for_byte(partition, offset,
                                                                     record_id):
    """The direct formatting of the usual keys is ``json.dumps``'s output exactly (repeats
    after a crash are dropped by key, so a key must never change between versions): any
    text (quotes, control characters, non-ASCII, lone surrogates), big and negative ints,
    and the types that take the ``json.dumps`` path (booleans, floats)."""
    import json

    expected = json.dumps({"partition": partition, "offset": offset, "id": record_id},
                          separators=(",", ":")).encode("ascii")
    assert sink_key(partition, offset, record_id) == expected
