"""sansmcp.core.jsonvalue: bounded parsing of server JSON and strict caller arguments."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.jsonvalue import (
    JsonError,
    dumps_compact,
    parse_json,
    parse_json_object_strict,
)
from tests.tiers import examples

DEPTH = 512


# -- parse_json: accepted ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b'{"a":1}', {"a": 1}),
        (b"  [1, 2.5, -3e2, true, false, null]\n", [1, 2.5, -300.0, True, False, None]),
        (b'"caf\xc3\xa9"', "café"),
        ('{"x":"\u00e9"}', {"x": "é"}),  # str input
        (b"1e308", 1e308),
        (b"1e-400", 0.0),  # underflow to zero is fine
        (b'{"k":1,"k":2}', {"k": 2}),  # duplicate keys from a server: last wins
        (b'"\\ud83d\\ude00"', "\U0001f600"),  # an escaped surrogate pair: one character
        (b"0", 0),
        (b"[]", []),
    ],
)
def test_parse_json_accepts(text: bytes | str, expected: Any) -> None:
    assert parse_json(text, max_depth=DEPTH) == expected


# -- parse_json: rejected ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason", "fragment"),
    [
        (b"", "syntax", "ends before its value"),
        (b"   ", "syntax", "ends before its value"),
        (b'{"a":1', "syntax", "(6 bytes)"),
        (b"[1,]", "syntax", "trailing comma in array at line 1 column 4 (byte 3)"),
        (b"[1,\n2,\n]", "syntax", "at line 3 column 1 (byte 7)"),
        (b'{"a":1} x', "syntax", "trailing characters"),
        (b"NaN", "constant", "NaN"),
        (b"[Infinity]", "constant", "Infinity"),
        (b'{"a":-Infinity}', "constant", "-Infinity"),
        (b"1e400", "number", "overflows"),
        (b"-1" + b"0" * 400 + b".5", "number", "overflows"),
        (b'"\xff"', "utf8", "UTF-8"),
        (b'"\xed\xa0\x80"', "utf8", "UTF-8"),  # an encoded surrogate is invalid UTF-8
        (b'"\xc3"', "utf8", "byte offset 1"),  # truncated sequence
        (b"\xef\xbb\xbf{}", "syntax", "BOM"),
        (b'"a\x01b"', "syntax", "unescaped control character (0x01)"),
        (b"'a'", "syntax", "invalid character at line 1 column 1 (byte 0)"),
        (b"[1e400]", "number", "number at $[0] overflows"),
        (b"-" + b"9" * 4300, "number", "more than 4,300 digits"),  # the sign counts
        (b"\xff\xfe{\x00}\x00", "utf8", "UTF-8"),  # UTF-16 is not sniffed
    ],
)
def test_parse_json_rejects(text: bytes, reason: str, fragment: str) -> None:
    with pytest.raises(JsonError) as info:
        parse_json(text, max_depth=DEPTH)
    assert info.value.reason == reason
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_long_number_is_not_repeated_in_the_message() -> None:
    with pytest.raises(JsonError) as info:
        parse_json(b'{"a":[' + b"9" * 500 + b".0]}", max_depth=DEPTH)
    assert info.value.reason == "number"
    assert "999" not in str(info.value)
    assert len(str(info.value)) < 200


def test_megabyte_integer_is_rejected_quickly() -> None:
    with pytest.raises(JsonError) as info:
        parse_json(b'{"n":' + b"7" * (1 << 20) + b"}", max_depth=DEPTH)
    assert info.value.reason == "number"
    assert "digits" in str(info.value)


def test_integer_at_the_digit_limit_is_fine() -> None:
    assert parse_json(b"9" * 4300, max_depth=DEPTH) == int("9" * 4300)


# -- depth ---------------------------------------------------------------------


def nested(depth: int, *, obj: bool = False) -> bytes:
    if obj:
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("obj", [False, True])
def test_depth_exactly_at_the_limit_is_accepted(obj: bool) -> None:
    value = parse_json(nested(10, obj=obj), max_depth=10)
    for _ in range(10):
        assert isinstance(value, (list, dict))
        value = value["a"] if obj else (value[0] if value else None)
    assert value in (1, None)


@pytest.mark.parametrize("obj", [False, True])
def test_depth_one_past_the_limit_is_rejected(obj: bool) -> None:
    with pytest.raises(JsonError) as info:
        parse_json(nested(11, obj=obj), max_depth=10)
    assert info.value.reason == "depth"
    assert info.value.limit == 10
    assert info.value.observed == 11
    assert "max_json_depth" in str(info.value)


def test_depth_counts_containers_not_brackets_in_strings() -> None:
    # 600 brackets inside a string, depth 2: the cheap count says "maybe", the walk says fine.
    text = b'[{"s":"' + b"[{" * 300 + b'"}]'
    assert parse_json(text, max_depth=2) == [{"s": "[{" * 300}]
    with pytest.raises(JsonError):
        parse_json(text, max_depth=1)


def test_wide_shallow_document_with_many_brackets_passes() -> None:
    text = json.dumps([[{"a": [i]}] for i in range(2000)]).encode()
    assert len(parse_json(text, max_depth=4)) == 2000
    with pytest.raises(JsonError) as info:
        parse_json(text, max_depth=3)
    assert info.value.observed == 4


def test_scalar_has_depth_zero() -> None:
    assert parse_json(b"[]", max_depth=1) == []
    assert parse_json(b'"[[["', max_depth=0) == "[[["
    with pytest.raises(JsonError):
        parse_json(b"[]", max_depth=0)


@pytest.mark.parametrize("obj", [False, True])
def test_hundred_thousand_deep_nesting_fails_fast(obj: bool) -> None:
    with pytest.raises(JsonError) as info:
        parse_json(nested(100_000, obj=obj), max_depth=DEPTH)
    assert info.value.reason == "depth"
    assert info.value.limit == DEPTH


def test_deep_nesting_under_a_huge_max_depth_is_still_a_json_error() -> None:
    with pytest.raises(JsonError) as info:
        parse_json(nested(100_000), max_depth=10**9)
    assert info.value.reason == "depth"
    assert info.value.observed is None
    assert "recursion limit" in str(info.value)


def test_negative_max_depth_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="max_depth"):
        parse_json(b"1", max_depth=-1)


def test_eight_mebibyte_body_parses() -> None:
    tool = {
        "name": "t",
        "description": 'brackets [in] {strings} and "quotes" ' * 4,
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "array", "items": {"type": "number"}}},
        },
    }
    tools = [dict(tool, name=f"t{i}") for i in range(30_000)]
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}).encode()
    assert len(body) > 8 << 20
    value = parse_json(body, max_depth=DEPTH)
    assert len(value["result"]["tools"]) == 30_000
    assert value["result"]["tools"][-1]["name"] == "t29999"


# -- parse_json_object_strict ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"{}", {}),
        (b' { "a" : [1, {"b": null}] } ', {"a": [1, {"b": None}]}),
        (b'{"a":{"x":1},"b":{"x":2}}', {"a": {"x": 1}, "b": {"x": 2}}),  # same key, other objects
        (b'{"\xc3\xa9":"\xe2\x82\xac"}', {"é": "€"}),
    ],
)
def test_strict_object_accepts(text: bytes, expected: dict[str, Any]) -> None:
    assert parse_json_object_strict(text, max_depth=DEPTH) == expected


@pytest.mark.parametrize(
    ("text", "reason", "fragment"),
    [
        (b"", "syntax", "ends before its value"),
        (b" \n\t ", "syntax", "ends before its value"),
        (b"[]", "not_object", "not an array"),
        (b'"x"', "not_object", "not a string"),
        (b"1", "not_object", "not a number"),
        (b"1.5", "not_object", "not a number"),
        (b"true", "not_object", "not a boolean"),
        (b"null", "not_object", "not null"),
        (b'{"a":1,"a":1}', "duplicate_key", '"a"'),
        (b'{"x":{"b":1,"c":2,"b":3}}', "duplicate_key", '"b"'),
        (b'{"x":[{"\xc3\xa9":1,"\\u00e9":2}]}', "duplicate_key", "more than once"),
        (b'{"a":NaN}', "constant", "NaN"),
        (b'{"a":Infinity}', "constant", "Infinity"),
        (b'{"a":1e999}', "number", "overflows"),
        (b'{"a":"\xff"}', "utf8", "UTF-8"),
        (b'{"a":1} {}', "syntax", "trailing characters"),
        (b"\xef\xbb\xbf{}", "syntax", "BOM"),
    ],
)
def test_strict_object_rejects(text: bytes, reason: str, fragment: str) -> None:
    with pytest.raises(JsonError) as info:
        parse_json_object_strict(text, max_depth=DEPTH)
    assert info.value.reason == reason
    assert fragment in str(info.value)


def test_strict_object_depth() -> None:
    assert parse_json_object_strict(nested(5, obj=True), max_depth=5)
    with pytest.raises(JsonError) as info:
        parse_json_object_strict(nested(6, obj=True), max_depth=5)
    assert info.value.reason == "depth"
    with pytest.raises(JsonError) as info:
        parse_json_object_strict(b'{"a":' + nested(100_000) + b"}", max_depth=DEPTH)
    assert info.value.reason == "depth"


# -- dumps_compact -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": [1, 2.5, None, True]}, b'{"a":[1,2.5,null,true]}'),
        ({"é": "€"}, '{"é":"€"}'.encode()),
        ("line\nbreak\u2028", b'"line\\nbreak\xe2\x80\xa8"'),
        ([], b"[]"),
        ("\ud800x", b'"\\ud800x"'),  # lone surrogate: ASCII escapes, still valid UTF-8
        ({"é": "\udfff"}, b'{"\\u00e9":"\\udfff"}'),
    ],
)
def test_dumps_compact(value: Any, expected: bytes) -> None:
    out = dumps_compact(value)
    assert out == expected
    out.decode("utf-8")  # always valid UTF-8


@pytest.mark.parametrize(
    "value",
    [math.nan, [math.inf], {"a": -math.inf}, {1j: 1}, object(), {b"k": 1}],
)
def test_dumps_compact_rejects(value: Any) -> None:
    with pytest.raises(JsonError) as info:
        dumps_compact(value)
    assert info.value.reason == "encode"


def test_dumps_compact_rejects_cycles_and_runaway_nesting() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(JsonError, match="cannot be encoded"):
        dumps_compact(cyclic)
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(JsonError, match="nested too deeply"):
        dumps_compact(deep)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=examples(150), deadline=None)
@given(json_values)
def test_round_trip(value: Any) -> None:
    encoded = dumps_compact(value)
    assert parse_json(encoded, max_depth=DEPTH) == value
    if isinstance(value, dict):
        assert parse_json_object_strict(encoded, max_depth=DEPTH) == value


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_give_a_value_or_json_error(data: bytes) -> None:
    try:
        value = parse_json(data, max_depth=3)
    except JsonError:
        value = JsonError
    else:  # whatever parses re-encodes to valid UTF-8 JSON that parses back the same
        assert parse_json(dumps_compact(value), max_depth=3) == value
    try:
        strict = parse_json_object_strict(data, max_depth=3)
    except JsonError:
        pass
    else:
        assert isinstance(strict, dict)
        assert strict == value  # no duplicate keys, so the lenient parse agrees


def test_buffers_other_than_bytes_are_accepted() -> None:
    assert parse_json(bytearray(b'{"a":[1]}'), max_depth=DEPTH) == {"a": [1]}  # type: ignore[arg-type]
    assert parse_json(memoryview(b"[2]"), max_depth=DEPTH) == [2]  # type: ignore[arg-type]
    with pytest.raises(JsonError):
        parse_json(bytearray(b'"\xff"'), max_depth=DEPTH)  # type: ignore[arg-type]
