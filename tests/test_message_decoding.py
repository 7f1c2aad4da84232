"""The service's JSON parsing: orjson's fast path gives exactly the standard parser's result.

``stream.messages._fast_decode`` uses orjson's result only for a flat message and leaves
everything else (and everything orjson refuses) to the standard parser, whose result or error
is what the validator always used. These tests hold it to that: on generated JSON (big
integers, huge and negative-zero floats, nesting, escapes, lone surrogates, cut text), a fast
result must equal the standard one in type and value; and messages through
:meth:`RecordValidator.validate` are accepted or refused, with the same record or reason,
with orjson and without it.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.stream import messages
from dpstream.stream.messages import _DECODER, RecordValidator, RejectedRecord, _fast_decode

SCHEMA = {"features": {"age": {"type": "numeric", "min": 17, "max": 90},
                       "sex": {"type": "categorical", "values": ["F", "M"]},
                       "n": {"type": "categorical", "values": [1, 2, True]}},
          "target": {"type": "binary", "values": [False, True]}}


def same(a, b) -> bool:
    """Equal in type and value, recursively (1, 1.0 and True differ; so do 0.0 and -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a)
                                                       == math.copysign(1, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def standard(text):
    """The standard parser's value, or the type of its error."""
    try:
        raw = text.decode("utf-8") if isinstance(text, bytes) else text
        return _DECODER.decode(raw)
    except (ValueError, RecursionError) as exc:   # JSONDecodeError, UnicodeDecodeError
        return type(exc)


scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),   # past 64 bits: orjson floats them
    st.sampled_from([2 ** 63 - 1, 2 ** 63, -(2 ** 63), -(2 ** 63) - 1, 2 ** 64, 10 ** 19]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([-0.0, 9.2e18, 9.3e18, -1e300, 5e-324]),
    st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=12)
messages_ = st.fixed_dictionaries(
    {"id": scalars, "x": st.one_of(st.dictionaries(st.sampled_from(["age", "sex", "n", "z"]),
                                                   values, max_size=4), values)},
    optional={"y": values, "public": values})


def _texts(value, cut: int, splice: str) -> list[str]:
    text = json.dumps(value)
    out = [text, text[:cut], text[:cut] + splice + text[cut:]]
    return out + [json.dumps(value, ensure_ascii=False)]


@settings(max_examples=400, deadline=None)
@given(messages_, st.integers(min_value=0, max_value=40),
       st.sampled_from(["1e400", "NaN", "\\ud800", '"\\udc00"', "0", "[", "}", "\x00",
                        "-Infinity", "01", '"\\u0000"', " "]))
def test_a_fast_result_is_the_standard_parsers(value, cut, splice):
    for text in _texts(value, cut, splice):
        for form in (text, text.encode("utf-8", "surrogatepass")):
            fast = _fast_decode(form)
            if fast is not None:
                assert same(fast, standard(form)), form


def test_flat_messages_take_the_fast_path_and_the_rest_do_not():
    # so the comparison above is not vacuous: the common message is parsed by orjson ...
    flat = b'{"id": 7, "x": {"age": 40.5, "sex": "M", "n": 2}, "y": true, "public": false}'
    assert _fast_decode(flat) == json.loads(flat)
    assert _fast_decode(flat.decode()) == json.loads(flat)
    # ... and what orjson would change or refuses is left to the standard parser
    for text in ['{"id": 123456789012345678901234567890, "x": {}}',   # floated by orjson
                 '{"id": 1, "x": {"age": 18446744073709551616}}',
                 '{"id": 1, "x": {"age": [1]}}', '{"id": 1, "x": [1]}',
                 '{"id": 1, "x": {"age": 1e400}}', '{"id": 1, "x": {"age": NaN}}',
                 '{"id": "\\ud800", "x": {}}', '[1]', '{"id": 1, "x": {}', b'{"id": "\xff"}']:
        assert _fast_decode(text) is None, text


TRICKY = [
    b'{"id": 7, "x": {"age": 95, "sex": "M", "n": true}, "y": true}',
    b'{"id": 123456789012345678901234567890, "x": {"age": 30}, "y": false}',
    b'{"id": 1, "x": {"age": 18446744073709551616}, "y": false}',
    b'{"id": 1, "x": {"age": 9.3e18}, "y": false}',
    b'{"id": 1, "x": {"age": [123456789012345678901234567890]}, "y": false}',
    b'{"id": 1, "x": {"age": 1e400}, "y": false}',
    b'{"id": 1, "x": {"age": NaN}, "y": false}',
    b'{"id": "\\ud800", "x": {"age": 30}, "y": false}',
    b'{"id": "a", "x": {"age": 30, "sex": "\\udc00"}, "y": false}',
    b'{"id": 2, "x": {"age": 30}, "y": 1}',
    b'{"id": 2, "x": {"age": 30}, "y": 18446744073709551616}',
    b'{"id": 3, "x": {"n": 1.0}, "y": null}',
    b'{"id": 4, "x": {"age": 30}, "y": false, "extra": 1}',
    b'{"id": 5, "x": {"age": 30}',
    b'\xff\xfe{}',
    b'[{"id": 1}]',
    b'{"id": -0, "x": {"age": -0.0}, "y": false}',
]


def _outcome(validator, raw):
    try:
        return validator.validate(raw)
    except RejectedRecord as exc:
        return ("rejected", exc.reason)


@pytest.mark.parametrize("raw", TRICKY)
def test_the_validator_decides_the_same_with_and_without_orjson(raw, monkeypatch):
    v = RecordValidator(SCHEMA)
    for text in (raw, raw.decode("utf-8", "surrogateescape")):   # as bytes and as text
        fast = _outcome(v, text)
        with monkeypatch.context() as m:
            m.setattr(messages, "_fast_loads", None)
            slow = _outcome(v, text)
        assert repr(fast) == repr(slow)
