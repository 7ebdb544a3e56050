"""One JSON decoder (msgspec) for every server body: ``parse_json`` against ``json.loads``.

``json.loads`` is the oracle here only (dev side): for generated JSON texts -- escapes,
big and small numbers, nesting near the depth bound, duplicate keys, whitespace, and one
fault at most (a non-JSON literal, a number out of range, a lone surrogate escape, bad
UTF-8, a syntax error) -- ``parse_json`` returns what ``json.loads`` returns, or refuses
with the classified error exactly where the rules say.  Also: the lone-surrogate refusal
(and that the official SDK refuses the same bodies), the duplicate-key count of
``parse_json_object_strict``, and that msgspec loads on the first parse, not at import.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sansmcp.core.jsonvalue import JsonError, parse_json, parse_json_object_strict
from tests.tiers import examples

DEPTH = 64


@dataclass(frozen=True)
class Text:
    """A generated JSON text and the reasons it must be refused for (empty: accepted)."""

    data: bytes
    faults: frozenset[str] = frozenset()


def _join(parts: list[Text], data: bytes) -> Text:
    return Text(data, frozenset().union(*(part.faults for part in parts)))


spaces = st.sampled_from([b"", b"", b"", b" ", b"\n", b"\t", b"\r\n  "])


def _escaped(text: str, style: int) -> bytes:
    """``text`` as a JSON string: raw UTF-8, ASCII escapes, or some characters as \\uXXXX."""
    if style == 0:
        return json.dumps(text, ensure_ascii=False).encode()
    if style == 1:
        return json.dumps(text).encode()
    out = ['"']
    for index, char in enumerate(text):
        if char in '"\\' or ord(char) < 0x20 or index % 2:
            out.append(json.dumps(char)[1:-1] if ord(char) > 0xFFFF else f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return ("".join(out) + '"').encode()


strings = st.builds(
    lambda text, style: Text(_escaped(text, style)),
    st.text(st.characters(codec="utf-8"), max_size=6) | st.sampled_from(["", ":", '":', "\\"]),
    st.integers(0, 2),
)
integers = st.one_of(
    st.integers(-(2**80), 2**80).map(lambda n: Text(str(n).encode())),
    st.sampled_from(
        [
            Text(b"9" * 4300),  # the digit limit: accepted
            Text(b"-" + b"9" * 4299),  # the sign counts
            Text(b"-0"),
            Text(b"9" * 4301, frozenset({"number"})),
            Text(b"-" + b"9" * 4300, frozenset({"number"})),
        ]
    ),
)


def _float(mantissa: int, fraction: int, exponent: int, upper: bool) -> Text:
    data = b"%d.%d%s%d" % (mantissa, fraction, b"E" if upper else b"e", exponent)
    return Text(data, frozenset({"number"}) if math.isinf(float(data)) else frozenset())


floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: Text(repr(x).encode())),
    st.builds(
        _float, st.integers(0, 10**20), st.integers(0, 99), st.integers(-400, 400), st.booleans()
    ),
    st.sampled_from(
        [
            Text(b"1e-400"),
            Text(b"0e400"),
            Text(b"1.7976931348623157e308"),
            Text(b"4.9e-324"),
            Text(b"1" * 400 + b".5e-100"),
            Text(b"1e400", frozenset({"number"})),
            Text(b"-1.8e308", frozenset({"number"})),
            Text(b"9" * 310 + b".0", frozenset({"number"})),
        ]
    ),
)
faulty = st.sampled_from(
    [
        Text(b"NaN", frozenset({"constant"})),
        Text(b"Infinity", frozenset({"constant"})),
        Text(b"-Infinity", frozenset({"constant"})),
        Text(b'"\\ud800"', frozenset({"syntax"})),  # lone surrogates: I-JSON
        Text(b'"a\\udc00b"', frozenset({"syntax"})),
        Text(b'"\\ud800\\u0041"', frozenset({"syntax"})),
        Text(b'"\\udbff\\ud800xxxxxxxx"', frozenset({"syntax"})),
        Text(b'"\\\\\\ud800"', frozenset({"syntax"})),
        Text(b'"\x01"', frozenset({"syntax"})),
        Text(b'"\\x"', frozenset({"syntax"})),
        Text(b"01", frozenset({"syntax"})),
        Text(b"tru", frozenset({"syntax"})),
        Text(b'"\xff"', frozenset({"utf8"})),
        Text(b'"\xed\xa0\x80"', frozenset({"utf8"})),  # an encoded surrogate
        Text(b'"\xc3"', frozenset({"utf8"})),
        Text(b'"\xf4\x90\x80\x80"', frozenset({"utf8"})),  # beyond U+10FFFF
    ]
)
good_scalars = st.one_of(
    st.sampled_from([Text(b"true"), Text(b"false"), Text(b"null"), Text(b'"\\ud83d\\ude00"')]),
    strings,
    integers,
    floats,
)
keys = st.one_of(st.sampled_from(["a", "b", "a"]).map(lambda k: Text(_escaped(k, 0))), strings)


def _array(items: list[Text], gaps: list[bytes]) -> Text:
    body = b",".join(gap + item.data for gap, item in zip(gaps, items, strict=False))
    return _join(items, b"[" + body + gaps[-1] + b"]")


def _object(members: list[tuple[Text, Text]], gaps: list[bytes]) -> Text:
    body = b",".join(
        gap + key.data + gap + b":" + value.data
        for gap, (key, value) in zip(gaps, members, strict=False)
    )
    return _join([part for pair in members for part in pair], b"{" + body + gaps[-1] + b"}")


values = st.recursive(
    st.one_of(good_scalars, good_scalars, faulty),
    lambda inner: st.one_of(
        st.builds(_array, st.lists(inner, max_size=4), st.lists(spaces, min_size=5, max_size=5)),
        st.builds(
            _object,
            st.lists(st.tuples(keys, inner), max_size=4),
            st.lists(spaces, min_size=5, max_size=5),
        ),
    ),
    max_leaves=10,
)


def _nested(value: Text, depth: int, as_object: bool) -> Text:
    head, tail = (b'{"k":', b"}") if as_object else (b"[", b"]")
    return Text(head * depth + value.data + tail * depth, value.faults)


texts = st.builds(
    lambda value, depth, as_object, before, after: Text(
        before + _nested(value, depth, as_object).data + after, value.faults
    ),
    values,
    st.integers(0, DEPTH + 2) | st.just(0),
    st.booleans(),
    spaces,
    spaces,
)


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


def typed(value: Any) -> Any:
    """``value`` with its types and key order made explicit, for an exact comparison
    (``1 == 1.0 == True`` in Python; ``-0.0 == 0.0``)."""
    if isinstance(value, dict):
        return ("object", [(key, typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("array", [typed(item) for item in value])
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, value)


@settings(max_examples=examples(500), deadline=None)
@given(texts)
@example(Text(b'{"a":1,"a":2," a":3}'))
@example(Text(b"[" * DEPTH + b"]" * DEPTH))
@example(Text(b"[" * (DEPTH + 1) + b"]" * (DEPTH + 1)))
@example(Text(b'["\\ud800"]', frozenset({"syntax"})))
def test_parse_json_returns_what_json_loads_returns_or_refuses_by_the_rules(text: Text) -> None:
    try:
        got: Any = parse_json(text.data, max_depth=DEPTH)
    except JsonError as exc:
        got = exc
    if text.faults:
        assert isinstance(got, JsonError), text
        assert got.reason in text.faults, (text, got)
        return
    expected = json.loads(text.data)  # the oracle: every generated text is JSON here
    if depth_of(expected) > DEPTH:
        assert isinstance(got, JsonError) and got.reason == "depth", (text, got)
        assert (got.limit, got.observed) == (DEPTH, DEPTH + 1)
        return
    assert not isinstance(got, JsonError), (text, got)
    assert typed(got) == typed(expected)


@settings(max_examples=examples(200), deadline=None)
@given(texts)
def test_the_strict_object_refuses_exactly_the_repeated_keys(text: Text) -> None:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({key for key, _ in pairs}) != len(pairs):
            raise KeyError("repeated")
        return dict(pairs)

    data = b'{"x":' + text.data + b"}"
    try:
        got: Any = parse_json_object_strict(data, max_depth=DEPTH + 2)
    except JsonError as exc:
        got = exc
    if text.faults:
        assert isinstance(got, JsonError) and got.reason in text.faults, (text, got)
        return
    try:
        expected = json.loads(data, object_pairs_hook=unique)
    except KeyError:
        assert isinstance(got, JsonError) and got.reason == "duplicate_key", (text, got)
        assert "more than once" in str(got)
        return
    if depth_of(expected) > DEPTH + 2:
        assert isinstance(got, JsonError) and got.reason == "depth", (text, got)
        return
    assert not isinstance(got, JsonError), (text, got)
    assert typed(got) == typed(expected)


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (b'{"a":1,"a":2}', '"a"'),
        (b'{ "a" : 1 , "b" : { "c" : 1 , "c" : 2 } }', '"c"'),
        (b'{"k:":1,"k:":2}', '"k:"'),
        (b'{"\\"":1,"\\"":2}', '"\\""'),  # a key of one escaped quote
        (b'{"\\u003a":1,":":2}', None),  # the same key, spelled two ways: not named
        (b'{"\\u0061":1,"a":2}', None),
    ],
)
def test_a_repeated_key_is_refused_and_named_when_it_can_be(data: bytes, named: str | None) -> None:
    with pytest.raises(JsonError) as info:
        parse_json_object_strict(data, max_depth=DEPTH)
    assert info.value.reason == "duplicate_key"
    assert "more than once" in str(info.value)
    if named is not None:
        assert f"the key {named} more than once" in str(info.value)


@pytest.mark.parametrize(
    "data",
    [
        b"{" + b",".join(b'"k%d":1' % n for n in range(keys)) + b',"k0":2}'
        for keys in (1, 256, 257, 20_000)  # (once named only up to 256 distinct keys)
    ]
    + [
        b'{"x":[' + b",".join([b'{"k0":1}'] * 20_000) + b'],"k0":1,"k0":2}',  # one-key objects
        b'{"x":[' + b",".join([b"{}"] * 100_000) + b'],"k0":1,"k0":2}',
    ],
)
def test_a_repeated_key_among_many_is_named(data: bytes) -> None:
    """Naming the key is one pass over the text's tokens, whatever the number of keys or
    objects (a server's OAuth document can hold 20,000 in 240 KB)."""
    with pytest.raises(JsonError) as info:
        parse_json_object_strict(data, max_depth=DEPTH)
    assert info.value.reason == "duplicate_key"
    assert 'the key "k0" more than once' in str(info.value)


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (b'{"v":{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]},"a":5,"a":6}', '"a"'),
        (b'{"v":["a:","a:"],"a:":1,"a:":2}', '"a:"'),  # strings that are not keys
        (b'{"v":{"a":{"b":"x"},"b":1},"b":2,"b":3}', '"b"'),
        (b'{"v":[{"k":1,"k":2}],"v":3}', '"k"'),  # the first one repeated in the text
    ],
)
def test_the_repeated_key_named_is_the_first_one_an_object_has_twice(
    data: bytes, named: str
) -> None:
    """The same key in many objects, or in strings that are not keys, is no repeat."""
    with pytest.raises(JsonError) as info:
        parse_json_object_strict(data, max_depth=DEPTH)
    assert f"has the key {named} more than once" in str(info.value)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":"x:y","b":["::",{"c":":"}]}',  # colons in strings are not members
        b'{"\\u003a":"\\u003A","b":":"}',  # nor are escaped ones
        b'{"\\\\u003a":1}',  # an escaped backslash, then the text "u003a"
        b'{"a\\":":1,"b":"\\":"}',  # an escaped quote before a colon, in a key and a value
        b'{"x":[{"a":1},{"a":2}]}',  # the same key in two objects
    ],
)
def test_colons_and_quotes_in_strings_are_not_repeated_keys(data: bytes) -> None:
    assert parse_json_object_strict(data, max_depth=DEPTH) == json.loads(data)


# -- lone surrogates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "escape", "at"),
    [
        (b'"\\ud800"', "\\ud800", "line 1 column 2 (byte 1)"),  # msgspec: "truncated"
        (b'["\\ud800", "abcdefgh"]', "\\ud800", "(byte 2)"),
        (b'["\\ud800\\u0041"]', "\\ud800", "(byte 2)"),  # a high one, then not a low one
        (b'["\\udc00x", 1, 2, 3]', "\\udc00", "(byte 2)"),  # a low one alone
        (b'["\\ud83d\\ude00\\udfff"]', "\\udfff", "(byte 14)"),  # after a good pair
        (b'{"a":\n "\\\\\\uDBFF"}', "\\uDBFF", "line 2 column 5 (byte 10)"),
    ],
)
def test_a_lone_surrogate_escape_is_refused_by_name(data: bytes, escape: str, at: str) -> None:
    with pytest.raises(JsonError) as info:
        parse_json(data, max_depth=DEPTH)
    assert info.value.reason == "syntax"
    message = str(info.value)
    assert message.startswith(f"invalid JSON: the escape {escape} at ")
    assert at in message and "lone UTF-16 surrogate" in message and "RFC 7493" in message


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'"\\ud83d\\ude00"', "\U0001f600"),
        (b'"\\uDBFF\\uDFFF"', "\U0010ffff"),
        (b'"\\\\ud800"', "\\ud800"),  # an escaped backslash: the text "\ud800", no escape
    ],
)
def test_paired_and_unescaped_surrogate_texts_are_accepted(data: bytes, expected: str) -> None:
    assert parse_json(data, max_depth=DEPTH) == expected


def test_a_syntax_error_before_a_lone_surrogate_is_reported_as_itself() -> None:
    with pytest.raises(JsonError) as info:
        parse_json(b'[1,,"\\ud800"]', max_depth=DEPTH)
    assert str(info.value) == "invalid JSON: invalid character at line 1 column 4 (byte 3)"
    with pytest.raises(JsonError) as info:  # an escape outside a string is not a surrogate
        parse_json(b'["\\\\udc00", \\ud800]', max_depth=DEPTH)
    assert "surrogate" not in str(info.value)


def test_a_str_holding_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(JsonError) as info:
        parse_json('["\ud800"]', max_depth=DEPTH)
    assert info.value.reason == "utf8"
    assert "lone surrogate at character 2" in str(info.value)


def test_the_official_sdk_refuses_a_lone_surrogate_too() -> None:
    """The decision's premise, checked on the installed SDK (pydantic-core's jiter)."""
    from mcp_types import jsonrpc_message_adapter  # what mcp.client.streamable_http calls

    lone = b'{"jsonrpc":"2.0","id":1,"result":{"x":"\\ud800"}}'
    with pytest.raises(ValueError, match="Invalid JSON"):
        jsonrpc_message_adapter.validate_json(lone)
    paired = lone.replace(b"\\ud800", b"\\ud83d\\ude00")
    assert jsonrpc_message_adapter.validate_json(paired).result == {"x": "\U0001f600"}  # type: ignore[union-attr]


# -- numbers and the decoder's own guards -------------------------------------------------


def test_the_digit_limit_does_not_follow_the_interpreter_setting() -> None:
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # unlimited for int(): not for a server's JSON
    try:
        with pytest.raises(JsonError) as info:
            parse_json(b"[" + b"7" * 5000 + b"]", max_depth=DEPTH)
    finally:
        sys.set_int_max_str_digits(before)
    assert info.value.reason == "number"
    assert "more than 4,300 digits at $[0]" in str(info.value)


def test_a_depth_past_the_decoders_guard_is_our_depth_error() -> None:
    with pytest.raises(JsonError) as info:
        parse_json(b'{"a":' * 50_000 + b"1" + b"}" * 50_000, max_depth=10**6)
    assert (info.value.reason, info.value.limit, info.value.observed) == ("depth", 10**6, None)
    assert "the decoder's recursion limit" in str(info.value)


def test_msgspec_loads_on_the_first_parse_not_at_import() -> None:
    probe = (
        "import sys, sansmcp, sansmcp.core.jsonvalue as j; a = 'msgspec' in sys.modules; "
        "j.parse_json(b'[1]', max_depth=2); print(a, 'msgspec' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["False", "True"]


def test_a_recursion_error_while_counting_keys_is_our_depth_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The key count re-encodes the value from the stack depth it was decoded at, so it has
    the same headroom; were it ever short of it, the error is still ours."""
    from sansmcp.core import jsonvalue

    def no_headroom(value: Any) -> bytes:
        raise RecursionError

    parse_json(b"1", max_depth=1)  # binds the decoder (and the encoder)
    monkeypatch.setattr(jsonvalue, "_encode", no_headroom)
    with pytest.raises(JsonError) as info:
        parse_json_object_strict(b'{"a":"b:c"}', max_depth=7)
    assert (info.value.reason, info.value.limit, info.value.observed) == ("depth", 7, None)
