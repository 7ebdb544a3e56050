"""Parsed size is bounded, not only bytes (issue 10 C), in the pure core.

* ``value_bound`` bounds the values of any JSON text from above; ``max_values`` refuses a
  text over it before decoding (the count comes first: an over-limit text with invalid
  UTF-8 fails as "values", not "utf8");
* the level-by-level depth walk agrees with a plain recursive depth on any value, for a
  text given as ``str`` or as UTF-8 bytes (whose bracket count is taken once, on the bytes);
* the listing path's encoder (one C encoder built once) writes what ``json.dumps`` writes;
* the MCP machine turns the refusal into ``ConnectionFailed(bound="max_json_values")``
  for a JSON body (whatever the status) and for an SSE event;
* a listing's entries are bounded by ``max_tools`` (refused before the page is validated)
  and at most ``max_recorded_skips`` skipped entries are recorded, the rest counted.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import ConnectionFailed, ServerAnswered
from sansmcp.core.http import HttpRequest
from sansmcp.core.jsonvalue import (
    JsonError,
    decoded_size,
    dumps_compact,
    parse_json,
    value_bound,
)
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import ToolsListed
from tests.tiers import examples

from .fakemcp import Driver, FakeServer, Response, json_response, result, sse_response, tool

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet='ab,[]{}:"\\é\U0001f600', max_size=6),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=40,
)


def count_values(value: Any) -> int:
    if isinstance(value, list):
        return 1 + sum(count_values(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(count_values(v) for v in value.values())
    return 1


def depth_of(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    return 0


# -- value_bound / max_values ---------------------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(json_values, st.booleans())
def test_value_bound_is_an_upper_bound_on_the_values(value: Any, spaced: bool) -> None:
    separators = (", ", ": ") if spaced else (",", ":")
    text = json.dumps(value, separators=separators, ensure_ascii=False)
    bound = value_bound(text)
    assert bound == value_bound(text.encode()) == value_bound(bytearray(text.encode()))
    assert count_values(value) <= bound
    assert parse_json(text.encode(), max_depth=10_000, max_values=bound) == value
    if bound > 1:
        with pytest.raises(JsonError) as info:
            parse_json(text.encode(), max_depth=10_000, max_values=bound - 1)
        assert (info.value.reason, info.value.observed) == ("values", bound)


@pytest.mark.parametrize(
    ("text", "bound"),
    [(b"1", 1), (b"[]", 2), (b"[{},{},{}]", 7), (b'{"a":[1,2]}', 4), (b'"[{,"', 4)],
)
def test_value_bound_counts_brackets_braces_and_commas(text: bytes, bound: int) -> None:
    assert value_bound(text) == bound


def test_over_the_bound_is_refused_before_decoding() -> None:
    body = b"[" + b"{}," * 1000 + b"\xff]"  # invalid UTF-8 and invalid JSON after the count
    with pytest.raises(JsonError) as info:
        parse_json(body, max_depth=512, max_values=1000)
    assert (info.value.reason, info.value.limit, info.value.observed) == ("values", 1000, 2002)
    assert "max_json_values" in str(info.value)
    with pytest.raises(JsonError) as info:  # under the bound, decoding finds the bad byte
        parse_json(body, max_depth=512, max_values=2002)
    assert info.value.reason == "utf8"


def test_a_refused_bytearray_is_left_alone_and_an_accepted_one_is_consumed() -> None:
    refused = bytearray(b"[1,2,3]")
    with pytest.raises(JsonError):
        parse_json(refused, max_depth=4, max_values=3)
    assert refused == b"[1,2,3]"
    accepted = bytearray(b"[1,2,3]")
    assert parse_json(accepted, max_depth=4, max_values=4) == [1, 2, 3]
    assert accepted == b""


def test_max_values_below_one_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="max_values"):
        parse_json(b"1", max_depth=4, max_values=0)


# -- the depth walk -------------------------------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(json_values, st.integers(min_value=0, max_value=6))
def test_depth_walk_agrees_with_recursive_depth(value: Any, max_depth: int) -> None:
    text = json.dumps(value)
    depth = depth_of(value)
    if depth <= max_depth:
        assert parse_json(text, max_depth=max_depth) == value
    else:
        with pytest.raises(JsonError) as info:
            parse_json(text, max_depth=max_depth)
        assert (info.value.reason, info.value.limit, info.value.observed) == (
            "depth",
            max_depth,
            max_depth + 1,
        )


@settings(max_examples=examples(300, 100), deadline=None)
@given(json_values, st.integers(min_value=0, max_value=6))
def test_utf8_bytes_and_text_get_the_same_depth_verdict(value: Any, max_depth: int) -> None:
    text = json.dumps(value, ensure_ascii=False)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form; escaped instead
        data = json.dumps(value).encode("ascii")
    try:
        expected: Any = parse_json(text, max_depth=max_depth)
    except JsonError as exc:
        expected = (exc.reason, exc.limit, exc.observed)
    try:
        got: Any = parse_json(data, max_depth=max_depth, max_values=10**6)
    except JsonError as exc:
        got = (exc.reason, exc.limit, exc.observed)
    assert got == expected


def test_a_buffer_other_than_bytes_is_counted_too() -> None:
    with pytest.raises(JsonError) as info:
        parse_json(memoryview(b"[1,2,3]"), max_depth=4, max_values=3)  # type: ignore[arg-type]
    assert (info.value.reason, info.value.limit, info.value.observed) == ("values", 3, 4)
    assert parse_json(memoryview(b"[1,2,3]"), max_depth=4, max_values=4) == [1, 2, 3]  # type: ignore[arg-type]


# -- the encoder of the listing path ---------------------------------------------------


@settings(max_examples=examples(300, 100), deadline=None)
@given(json_values)
def test_dumps_compact_writes_what_json_dumps_writes(value: Any) -> None:
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        assert dumps_compact(value) == expected.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the ASCII-escaped form instead
        assert dumps_compact(value) == json.dumps(value, separators=(",", ":")).encode()


def test_dumps_compact_refuses_what_json_dumps_refuses() -> None:
    for value in ({"a": float("nan")}, {"a": object()}, [1, {2, 3}], {(1, 2): 3}):
        with pytest.raises(JsonError) as info:
            dumps_compact(value)
        assert info.value.reason == "encode"
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(JsonError, match="holds a cycle") as info:
        dumps_compact(cyclic)
    assert info.value.reason == "encode"
    assert dumps_compact({"a": [1, 2]}) == b'{"a":[1,2]}'  # the encoder is reusable after errors


def test_empty_containers_count_for_depth_but_are_not_walked_into() -> None:
    assert parse_json(b"[{},[],[[]]]", max_depth=3) == [{}, [], [[]]]
    with pytest.raises(JsonError) as info:
        parse_json(b"[{},[],[[]]]", max_depth=2)
    assert info.value.observed == 3
    with pytest.raises(JsonError) as info:
        parse_json(b"[]", max_depth=0)
    assert info.value.observed == 1


# -- the MCP machine: max_json_values -------------------------------------------------


def connected(server: FakeServer, **kwargs: Any) -> Driver:
    driver = Driver(server, **kwargs)
    driver.ok(driver.connect())
    return driver


def flat_listing(entries: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"result":{"resultType":"complete","tools":[' + (
        b",".join([b"{}"] * entries) + b"]}}"
    )


@settings(max_examples=examples(300))
@given(text=st.text(max_size=200))
def test_decoded_size_bounds_what_the_decoded_text_occupies(text: str) -> None:
    """decoded_size, taken on the bytes, is at least what CPython stores for the text
    (its characters times 1, 2 or 4 bytes), so a bound on it binds before decoding."""
    data = text.encode()
    top = max(map(ord, text), default=0)
    width = 1 if top <= 0xFF else 2 if top <= 0xFFFF else 4  # CPython's str kinds
    assert decoded_size(data) >= width * len(text)
    assert decoded_size(bytearray(data)) == decoded_size(data)


def test_wide_text_over_its_bound_is_refused_before_decoding() -> None:
    """One character beyond U+FFFF makes the whole decoded text 4 bytes a character: a
    body of it is refused when that would exceed max_text_bytes; without one, the same
    size passes (2 bytes a character at most is within any budget-sized bound)."""
    astral = "\U0001f600".encode()
    wide = b'"' + astral + b"a" * 1000 + b'"'
    with pytest.raises(JsonError) as refused:
        parse_json(wide, max_depth=8, max_text_bytes=3000)
    assert refused.value.reason == "text"
    assert (refused.value.limit, refused.value.observed) == (3000, 4 * 1003)  # characters
    assert parse_json(wide, max_depth=8, max_text_bytes=4 * 1003) == "\U0001f600" + "a" * 1000
    narrow = b'"' + "é".encode() * 500 + b"a" * 4 + b'"'
    assert parse_json(narrow, max_depth=8, max_text_bytes=3000) == "é" * 500 + "aaaa"
    escaped = b'"\\ud83d\\ude00' + b"a" * 1000 + b'"'  # ASCII text: decoded 1 byte a char
    assert len(parse_json(escaped, max_depth=8, max_text_bytes=3000)) == 1001


def test_a_wide_json_body_over_three_budgets_fails_as_max_response_bytes() -> None:
    """The decoded text and the value built from it stay within 6 x max_response_bytes:
    a body whose text would take more than 3 x fails as that budget, before decoding."""
    server = FakeServer()
    limits = Limits(max_response_bytes=4000)
    text = "\U0001f600" + "a" * 3100

    def answer(request: HttpRequest, body: Any) -> Response:
        message = result(body["id"], {"tools": [tool("w", description=text)]})
        raw = json.dumps(message, ensure_ascii=False).encode()  # the astral character raw
        return Response(headers=[(b"content-type", b"application/json")], chunks=[raw])

    server.overrides["tools/list"] = answer
    driver = connected(server, limits=limits)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound, failure.limit) == ("budget", "max_response_bytes", 12000)
    assert failure.observed is not None and failure.observed > 12000
    assert "3 x Limits.max_response_bytes" in failure.message


def test_a_wide_sse_event_over_three_budgets_fails_as_max_response_bytes() -> None:
    server = FakeServer()
    text = "\U0001f600" + "a" * 3100

    def answer(request: HttpRequest, body: Any) -> Response:
        message = result(body["id"], {"tools": [tool("w", description=text)]})
        raw = json.dumps(message, ensure_ascii=False).encode()
        return sse_response(b"data: " + raw + b"\n\n")

    server.overrides["tools/list"] = answer
    driver = connected(server, limits=Limits(max_response_bytes=4000))
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound, failure.limit) == ("budget", "max_response_bytes", 12000)
    assert failure.observed is not None and failure.observed > 12000


@pytest.mark.parametrize("status", [200, 500])
def test_a_json_body_over_max_json_values_fails_as_a_budget(status: int) -> None:
    server = FakeServer()
    limits = Limits(max_json_values=1000)

    def answer(request: HttpRequest, body: Any) -> Response:
        return Response(
            status=status,
            headers=[(b"content-type", b"application/json")],
            chunks=[flat_listing(600) % body["id"]],
        )

    server.overrides["tools/list"] = answer
    driver = connected(server, limits=limits)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound, failure.limit) == ("budget", "max_json_values", 1000)
    # the envelope: 2 `{`, 1 `[`, 3 `,`; the entries: 600 `{`, 599 `,`; plus the top level
    assert failure.observed == 2 + 1 + 3 + 600 + 599 + 1 == 1206
    assert "Limits.max_json_values" in failure.message


def test_a_json_body_at_max_json_values_is_parsed() -> None:
    server = FakeServer()
    server.overrides["tools/list"] = lambda request, body: Response(
        headers=[(b"content-type", b"application/json")],
        chunks=[flat_listing(600) % body["id"]],
    )
    driver = connected(server, limits=Limits(max_json_values=1206))
    outcome = driver.ok(driver.list_tools())
    assert isinstance(outcome, ToolsListed)
    assert outcome.tools == () and outcome.skipped_count == 600


def test_an_sse_event_over_max_json_values_fails_as_a_budget() -> None:
    server = FakeServer(sse=True)
    server.overrides["tools/list"] = lambda request, body: sse_response(
        b"data: " + flat_listing(600) % body["id"] + b"\n\n"
    )
    driver = connected(server, limits=Limits(max_json_values=1000))
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed)
    assert (failure.bound, failure.limit, failure.observed) == ("max_json_values", 1000, 1206)


def test_events_after_the_answer_are_not_parsed() -> None:
    server = FakeServer(sse=True)

    def answer(request: HttpRequest, body: Any) -> Response:
        listing = result(body["id"], {"resultType": "complete", "tools": [tool("a")]})
        junk = b"data: " + b"[" * 5000 + b"\n\n"  # over both bounds, and not JSON
        return sse_response(listing, junk, junk)

    server.overrides["tools/list"] = answer
    driver = connected(server, limits=Limits(max_json_values=1000))
    outcome = driver.ok(driver.list_tools())
    assert isinstance(outcome, ToolsListed) and [t.name for t in outcome.tools] == ["a"]


# -- the listing's bookkeeping --------------------------------------------------------


def paged(server: FakeServer, page_entries: list[list[Any]]) -> None:
    def answer(request: HttpRequest, body: Any) -> Response:
        cursor = (body.get("params") or {}).get("cursor")
        page = int(cursor or 0)
        value: dict[str, Any] = {"resultType": "complete", "tools": page_entries[page]}
        if page + 1 < len(page_entries):
            value["nextCursor"] = str(page + 1)
        return json_response(result(body["id"], value))

    server.overrides["tools/list"] = answer


@pytest.mark.parametrize("limit", [1, 7, 10])
def test_max_tools_counts_every_entry_across_pages(limit: int) -> None:
    server = FakeServer()
    entries = [
        [tool(f"a{i}") for i in range(4)],
        [{"bad": 1}] * 3,
        [tool(f"c{i}") for i in range(4)],
    ]
    paged(server, entries)
    driver = connected(server, limits=Limits(max_tools=limit))
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ServerAnswered)
    assert (failure.reason, failure.bound, failure.limit) == ("max_tools", "max_tools", limit)
    assert "Limits.max_tools" in failure.message


def test_a_listing_of_exactly_max_tools_entries_is_fine() -> None:
    server = FakeServer()
    paged(server, [[tool(f"a{i}") for i in range(4)], [{"bad": 1}] * 3])
    driver = connected(server, limits=Limits(max_tools=7))
    outcome = driver.ok(driver.list_tools())
    assert isinstance(outcome, ToolsListed)
    assert len(outcome.tools) == 4 and outcome.skipped_count == 3


@pytest.mark.parametrize(("bad", "cap"), [(0, 3), (2, 3), (3, 3), (50, 3), (50, 1)])
def test_recorded_skips_are_capped_and_the_rest_counted(bad: int, cap: int) -> None:
    server = FakeServer()
    first = [{"name": 1}] * (bad // 2) + [tool("x")]
    second = [{"name": 2}] * (bad - bad // 2) + [tool("y")]
    paged(server, [first, second])
    driver = connected(server, limits=Limits(max_recorded_skips=cap))
    outcome = driver.ok(driver.list_tools())
    assert isinstance(outcome, ToolsListed)
    assert [t.name for t in outcome.tools] == ["x", "y"]
    assert outcome.skipped_count == bad
    assert len(outcome.skipped) == min(bad, cap)
    # the recorded ones are the first skipped, in order
    expected = [i for i in range(bad // 2)] + [bad // 2 + 1 + i for i in range(bad - bad // 2)]
    assert [s.index for s in outcome.skipped] == expected[:cap]
