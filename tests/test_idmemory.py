"""The runner's id memory (:mod:`dpstream.connectors.idmemory`): the newest keys in arrival
order, like the ``OrderedDict`` it replaced, and a saved form that a checkpoint stores as
arrays and reads back exactly."""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.connectors import CheckpointStore
from dpstream.connectors.idmemory import IdMemory, saved_keys
from dpstream.connectors.safe_state import decode, encode

KEYS = st.one_of(st.tuples(st.just("int"), st.integers(min_value=-10**30, max_value=10**30)),
                 st.tuples(st.just("str"), st.text(max_size=8)))
OPS = st.lists(st.one_of(KEYS, st.integers(min_value=0, max_value=4)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(min_value=1, max_value=8), ops=OPS)
def test_it_keeps_what_an_ordered_dict_of_the_newest_keys_keeps(size, ops):
    ids, ref = IdMemory(size), OrderedDict()
    for op in ops:
        if isinstance(op, tuple):          # remember a key, as the runner does
            if op not in ref:
                ref[op] = None
                if len(ref) > size:
                    ref.popitem(last=False)
            ids.add(op)
        else:                              # a member forgets its newest records' ids
            for _ in range(min(op, len(ref))):
                ref.popitem(last=True)
            ids.drop_newest(op)
        assert list(ids) == list(ref) and len(ids) == len(ref)
        assert all(k in ids for k in ref)
    tree, arrays = encode(ids.state())     # a checkpoint's round trip, through JSON
    back = IdMemory.from_state(decode(json.loads(json.dumps(tree)), arrays), size)
    assert list(back) == list(ref)


def test_a_checkpoint_holds_arrays_and_an_old_list_still_loads(tmp_path):
    ids = IdMemory(100_000)
    for i in range(100_000):
        ids.add(("int", i))
    ids.add(("str", "late"))
    store = CheckpointStore(tmp_path)
    store.save({"ids": ids.state()})
    saved = store.load()["ids"]
    assert saved["ints"].dtype == np.int64 and saved["strs"] == ["late"]
    assert list(IdMemory.from_state(saved, 100_000)) == list(ids)
    store.close()
    old = [("int", 3), ("str", "x"), ("int", 4)]          # a checkpoint before IdMemory
    assert list(IdMemory.from_state(old, 2)) == old[1:]   # the newest that fit


@pytest.mark.parametrize("bad", [
    {"kinds": np.array([0, 0], dtype=np.int8), "ints": np.array([1], dtype=np.int64),
     "strs": []},                                                  # an int short
    {"kinds": np.array([1], dtype=np.int8), "ints": np.zeros(0, dtype=np.int64),
     "strs": [5]},                                                 # not a string
    {"kinds": np.array([3], dtype=np.int8), "ints": np.zeros(0, dtype=np.int64),
     "strs": ["a"]},                                               # no such kind
    {"kinds": np.array([2], dtype=np.int8), "ints": np.zeros(0, dtype=np.int64),
     "strs": ["1_000"]},                                           # not a decimal integer
])
def test_a_malformed_saved_memory_is_refused(bad):
    with pytest.raises(ValueError, match="saved id memory"):
        list(saved_keys(bad))


def test_keys_are_int_or_str_ids_and_size_is_positive():
    with pytest.raises(ValueError, match="record key"):
        IdMemory(2).add(("bool", True))
    with pytest.raises(ValueError, match="record key"):
        IdMemory(2).add(("int", "7"))
    with pytest.raises(ValueError, match="size"):
        IdMemory(0)
