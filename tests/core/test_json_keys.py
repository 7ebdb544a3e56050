"""Object keys as a server may spell them: properties of the decoder and of the listing.

A key written with any mix of escapes (``\\u0061`` or ``\\u0041``-style, a surrogate pair
for a character beyond U+FFFF, the short escapes, or plain UTF-8) is the same key:

* ``parse_json`` builds the same value whatever the spelling, and the last of repeated
  keys wins (as documented), escaped or not;
* ``parse_json_object_strict`` refuses a text exactly when an object repeats a key, the
  repeats spelled alike or not (``reason "duplicate_key"``), and a key it names is one
  that is repeated;
* the typed listing pass (``listing.parse_page`` + ``validate_entry``) reads an escaped
  known key of a tool entry (``"n\\u0061me"``) as that key, declines a body with a key
  the spec does not define (escaped or not: the untyped decode then ignores it in an
  entry and keeps it in the result, as ``validate_tool`` documents), and lists exactly
  what the untyped path lists.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core import jsonvalue
from sansmcp.core.jsonvalue import JsonError, parse_json, parse_json_object_strict
from sansmcp.core.limits import Limits
from tests.tiers import examples

from .test_listing import same, typed

DEPTH = 16
SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
SHORT.update({"\r": "\\r", "\t": "\\t"})


def units(char: str) -> list[int]:
    """The UTF-16 code units of ``char`` (a surrogate pair beyond U+FFFF)."""
    code = ord(char)
    if code < 0x10000:
        return [code]
    code -= 0x10000
    return [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]


@st.composite
def spelled(draw: st.DrawFn, key: str) -> str:
    """``key`` as a JSON string literal, each character spelled one of the ways it may be."""
    out = []
    for char in key:
        ways = [
            "".join(f"\\u{unit:04x}" for unit in units(char)),
            "".join(f"\\u{unit:04X}" for unit in units(char)),
        ]
        if char in SHORT:
            ways.append(SHORT[char])
        if char not in '"\\' and ord(char) >= 0x20:
            ways.append(char)
        out.append(draw(st.sampled_from(ways)))
    return '"' + "".join(out) + '"'


# keys from a small alphabet (so repeats are common), with characters that need escapes,
# non-ASCII and one beyond U+FFFF
keys = st.text(alphabet='ab:"\\/\n\té\u2028\U0001f600', max_size=4)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3))


class Members(list[tuple[str, Any]]):
    """An object as its members in order (a key may repeat); any other value is JSON."""


@st.composite
def members(draw: st.DrawFn, depth: int = 2) -> Members:
    """An object whose keys may repeat; values are scalars or (``depth`` permitting)
    objects of the same kind."""
    values = scalars if depth == 0 else st.one_of(scalars, members(depth - 1))
    return Members(draw(st.lists(st.tuples(keys, values), max_size=5)))


@st.composite
def written(draw: st.DrawFn, value: Any) -> str:
    """The JSON text of ``value`` (a members list is an object), every key spelled anew."""
    if not isinstance(value, Members):
        return json.dumps(value)
    parts = [f"{draw(spelled(key))}:{draw(written(inner))}" for key, inner in value]
    return "{" + ",".join(parts) + "}"


def last_wins(value: Any) -> Any:
    if not isinstance(value, Members):
        return value
    return {key: last_wins(inner) for key, inner in value}


def repeats(value: Any) -> set[str]:
    """The keys some object of ``value`` has more than once."""
    if not isinstance(value, Members):
        return set()
    names = [key for key, _ in value]
    found = {key for key in names if names.count(key) > 1}
    for _, inner in value:
        found |= repeats(inner)
    return found


def first_repeat(value: Any) -> str | None:
    """The first key, in the text's order, that its object already had."""
    if not isinstance(value, Members):
        return None
    seen: set[str] = set()
    for key, inner in value:
        if key in seen:
            return key
        seen.add(key)
        found = first_repeat(inner)
        if found is not None:
            return found
    return None


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data(), value=members())
def test_a_key_means_the_same_however_it_is_escaped(data: st.DataObject, value: Any) -> None:
    plain = json.dumps(last_wins(value), ensure_ascii=False).encode()
    text = data.draw(written(value)).encode()
    assert parse_json(text, max_depth=DEPTH) == last_wins(value) == json.loads(plain)
    # (the oracle: json.loads reads the escapes the same way and keeps the last repeat)
    assert parse_json(text, max_depth=DEPTH) == json.loads(text)


@settings(max_examples=examples(300, 100), deadline=None)
@given(data=st.data(), value=members())
def test_a_repeated_key_is_found_escaped_or_not(data: st.DataObject, value: Any) -> None:
    text = data.draw(written(value)).encode()
    repeated = repeats(value)
    try:
        parsed = parse_json_object_strict(text, max_depth=DEPTH)
    except JsonError as exc:
        assert repeated, (text, str(exc))
        assert exc.reason == "duplicate_key"
        message = str(exc)
        # named (a few distinct keys): the first repeat in the text, however spelled
        assert (
            message == f"JSON object has the key {json.dumps(first_repeat(value))} more than once"
        )
        return
    assert not repeated, text
    assert parsed == last_wins(value)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (b'{"name":1,"n\\u0061me":2}', "name"),
        (b'{"x":{"\\u006e\\u0061me":1,"name":2}}', "name"),
        (b'{"\\u003a":null,"\\u003a":null}', ":"),
        (b'{"a":{"b":"x"},"b":1,"a":2}', "a"),  # an object's keys end with it
        (b'{"":{":":null},":":1,"":2}', ""),  # a lost member's keys are not repeats
        (b'{"k":[{"k":"v"},{"k":1}],"k":1}', "k"),
        (b'{"a\\"":1,"a\\u0022":2}', 'a"'),
    ],
)
def test_the_first_repeat_is_named_however_it_is_spelled(text: bytes, named: str) -> None:
    with pytest.raises(JsonError) as caught:
        parse_json_object_strict(text, max_depth=DEPTH)
    assert caught.value.reason == "duplicate_key"
    assert str(caught.value) == f"JSON object has the key {json.dumps(named)} more than once"
    assert parse_json(text, max_depth=DEPTH) == json.loads(text)  # the last one wins


# -- the typed listing pass ------------------------------------------------------------------

ENTRY_KEYS = ["name", "description", "title", "inputSchema", "outputSchema", "annotations"]
ENTRY_KEYS += ["execution", "icons", "_meta"]
entry_values = {
    "name": st.sampled_from(["a", "b", "é"]),
    "description": st.text(max_size=3),
    "title": st.one_of(st.none(), st.text(max_size=3)),
    "inputSchema": st.sampled_from([{}, {"type": "object"}, {"type": "string"}]),
    "outputSchema": st.sampled_from([{}, {"type": "object", "properties": {"n": {}}}]),
    "annotations": st.sampled_from([{}, {"readOnlyHint": True}, 3]),
    "execution": st.sampled_from([{}, {"taskSupport": "required"}, {"taskSupport": "no"}]),
    "icons": st.sampled_from([[], [{"src": "https://x/i.png"}]]),
    "_meta": st.sampled_from([{}, {"k": [1]}]),
    "tags": st.sampled_from([[], ["t"]]),  # a key the spec does not define
    "namex": st.just("n"),  # ... and one that an escaped "name" is not
}


@st.composite
def entry(draw: st.DrawFn) -> Members:
    """A tool entry's members, known keys mostly, repeats and unknown keys sometimes."""
    chosen = draw(st.lists(st.sampled_from([*ENTRY_KEYS, "tags", "namex"]), max_size=6))
    members = [("name", draw(entry_values["name"]))] if draw(st.booleans()) else []
    members += [(key, draw(entry_values[key])) for key in chosen]
    return Members(members)


@settings(max_examples=examples(300, 100), deadline=None)
@given(data=st.data(), entries=st.lists(entry(), max_size=3), unknown=st.booleans())
def test_the_typed_pass_reads_escaped_known_keys_and_declines_unknown_ones(
    data: st.DataObject, entries: list[Any], unknown: bool
) -> None:
    tools = "[" + ",".join(data.draw(written(members)) for members in entries) + "]"
    result = f"{data.draw(spelled('tools'))}:{tools}"
    if unknown:  # a result member besides tools: kept by both paths
        result += f',{data.draw(spelled("nextCursor"))}:"c",{data.draw(spelled("x"))}:[1]'
    body = ('{"jsonrpc":"2.0","id":1,"result":{' + result + "}}").encode()
    outcome = same(body)  # the typed pass, or its decline, lists what the untyped path lists
    spec_keys = {key for members in entries for key, _ in members}
    named = all("name" in last_wins(members) for members in entries)
    # declined for a key the spec does not define (or a missing name), and only so: an
    # escaped known key is that key to the typed pass too
    assert typed(body, Limits()) is (named and not spec_keys & {"tags", "namex"})
    assert outcome[0] == "listed"
    if unknown:
        assert outcome[2] == {"nextCursor": "c", "x": [1]}
    assert len(outcome[3]) == len(entries)
    for members, listed in zip(entries, outcome[3], strict=True):
        name = last_wins(members).get("name")
        if listed[0] == "tool":
            assert listed[1] == name  # an escaped "name" is the name, the last one wins


@pytest.mark.parametrize(
    "compact",
    [
        b'{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}',  # the same key in many objects
        b'["a:","a:"]',  # strings that are not keys
    ],
)
def test_the_key_reader_finds_no_repeat_where_there_is_none(compact: bytes) -> None:
    """(The public cases are in test_json_decoder; this one is not reachable from
    ``parse_json_object_strict``, which reads the keys only once the colon counts show a
    repeat.)"""
    parse_json(b"1", max_depth=DEPTH)  # msgspec's decoder bound
    assert jsonvalue._repeated_key(compact) is None
