"""The typed tools/list decoder (sansmcp.core.listing) against the strict path it stands in for.

* a property: for any listing body, ``parse_page`` + ``validate_entry`` give what
  ``parse_message`` + ``validate_tool`` give (the same refusal, or the same tools and
  skips; schemas equal as JSON values);
* each reason the typed pass declines a body (so the untyped decode decides), checked by
  what only the untyped decode does: its exact error (a lone surrogate is refused by both);
* a tool member sansmcp never reads is bounded like the rest; a key the spec does not
  define declines the body;
* the machine parses a tools/list answer with it (JSON and SSE bodies).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core import listing
from sansmcp.core.errors import ConnectionFailed
from sansmcp.core.jsonvalue import JsonError, parse_json
from sansmcp.core.limits import Limits
from sansmcp.core.listing import _Entry, _typed, parse_page, validate_entry
from sansmcp.core.mcp import ToolsListed
from sansmcp.core.messages import parse_message
from sansmcp.core.tools import HeaderParam, SkippedTool, Tool, validate_tool
from tests.tiers import examples

from .fakemcp import Driver, FakeServer, Response

LIMITS = Limits()


@pytest.fixture(autouse=True)
def _small_bodies_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The typed pass is not tried on a body under 4 KiB without ``"result"``; these tests
    try it on every body (test_a_small_body_without_a_result_... checks the threshold)."""
    monkeypatch.setattr(listing, "_TYPED_FROM", 0)


def body_of(tools: Any, *, rpc_id: Any = 1, **result: Any) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": rpc_id, "result": {"tools": tools, **result}}
    ).encode()


def outcome(value: Tool | SkippedTool) -> Any:
    if isinstance(value, SkippedTool):
        # the sizes in a reason count the kept bytes: the server's (escapes as sent) or
        # re-serialised ones; the rule broken is the same
        return ("skipped", value.index, value.name, value.reason.split(" bytes")[0][:30])
    return (
        "tool",
        value.name,
        value.description,
        value.title,
        value.annotations,
        json.loads(value.input_schema),
        None if value.output_schema is None else json.loads(value.output_schema),
        value.header_params,
    )


def run(data: bytes, parse: Any, validate: Any, limits: Limits, modern: bool) -> Any:
    try:
        message = parse(bytearray(data), limits)
    except (JsonError, ConnectionFailed) as exc:
        return ("raised", type(exc).__name__, str(exc))
    result = message.get("result") if isinstance(message, dict) else None
    tools = result.get("tools") if isinstance(result, dict) else None
    if not isinstance(tools, list):
        return ("message", message)
    envelope = {k: message[k] for k in ("jsonrpc", "id") if k in message}
    rest = {k: v for k, v in result.items() if k != "tools"}
    outcomes = [
        outcome(validate(i, raw, modern=modern, max_tool_bytes=limits.max_tool_bytes))
        for i, raw in enumerate(tools)
    ]
    return ("listed", envelope, rest, outcomes)


def same(data: bytes, *, limits: Limits = LIMITS, modern: bool = True) -> Any:
    fast = run(data, parse_page, validate_entry, limits, modern)
    strict = run(data, parse_message, validate_tool, limits, modern)
    assert fast == strict
    return fast


def typed(data: bytes, limits: Limits = LIMITS) -> bool:
    """Whether the typed pass accepted ``data`` (else the strict parser decided)."""
    return _typed(data, limits) is not None


# --------------------------------------------------------------------------- the property

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)
schema_keys = st.sampled_from(["type", "properties", "required", "x-mcp-header", "items", "k"])
schemas = st.one_of(
    values,
    st.dictionaries(schema_keys, values, max_size=4),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["object", "string", 1])},
        optional={
            "properties": st.dictionaries(
                st.sampled_from(["a", "b"]),
                st.fixed_dictionaries(
                    {"type": st.sampled_from(["string", "integer", "number"])},
                    optional={"x-mcp-header": st.sampled_from(["Region", "A b", "", 3])},
                ),
                max_size=2,
            ),
            "extra": values,
        },
    ),
)
texts = st.one_of(st.text(max_size=12), values)
entries = st.one_of(
    values,
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.one_of(st.sampled_from(["a", "b", "", "é", "a"]), texts),
            "description": texts,
            "title": texts,
            "inputSchema": schemas,
            "outputSchema": schemas,
            "annotations": st.one_of(
                values, st.dictionaries(st.sampled_from(["idempotentHint"]), values)
            ),
            "execution": st.one_of(
                values,
                st.fixed_dictionaries({"taskSupport": st.sampled_from(["required", "no", 1])}),
            ),
            "icons": values,
            "_meta": values,
        },
    ),
)
encodings = st.sampled_from(
    [
        {},
        {"ensure_ascii": False},
        {"indent": 1},
        {"separators": (",", ":")},
        {"separators": (", ", ":")},  # not seen as spaced: the schemas keep the spaces
        {"separators": (" ,", " : "), "ensure_ascii": False},
    ]
)


@settings(max_examples=examples(400, 100), deadline=None)
@given(
    tools=st.lists(entries, max_size=5),
    extra=st.dictionaries(st.sampled_from(["nextCursor", "ttlMs", "x"]), values, max_size=2),
    encoding=encodings,
    modern=st.booleans(),
)
def test_the_typed_pass_agrees_with_the_strict_path(
    tools: list[Any], extra: dict[str, Any], encoding: dict[str, Any], modern: bool
) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools, **extra}}
    same(json.dumps(message, **encoding).encode("utf-8", "surrogatepass"), modern=modern)


def test_a_plain_listing_takes_the_typed_pass_and_keeps_compact_server_bytes() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string", "maximum": 1.50}}}
    data = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a", "inputSchema": schema}]}},
        indent=2,
    ).encode()
    data = data.replace(b"1.5", b"1.50E0")  # a spelling re-serialisation would not keep
    assert typed(data)
    tools = same(data)[3]
    assert tools[0][0] == "tool"
    message = parse_page(data, LIMITS)
    tool = validate_entry(0, message["result"]["tools"][0], modern=True, max_tool_bytes=1000)
    assert isinstance(tool, Tool)
    assert tool.input_schema == (
        b'{"type":"object","properties":{"q":{"type":"string","maximum":1.50E0}}}'
    )


def test_the_typed_pass_builds_what_validate_tool_builds() -> None:
    entry = {
        "name": "région",
        "title": "Rég",
        "description": "d\u00e9",
        "inputSchema": {
            "type": "object",
            "properties": {"r": {"type": "string", "x-mcp-header": "R"}},
        },
        "outputSchema": {"type": "object"},
        "annotations": {"idempotentHint": True},
        "execution": {"taskSupport": "optional"},
    }
    data = body_of([entry])
    assert typed(data)
    raw = parse_page(data, LIMITS)["result"]["tools"][0]
    assert type(raw) is _Entry
    fast = validate_entry(0, raw, modern=True, max_tool_bytes=10_000)
    strict = validate_tool(0, entry, modern=True, max_tool_bytes=10_000)
    assert fast == strict
    assert fast.header_params == (HeaderParam(header="R", path=("r",), type="string"),)  # type: ignore[union-attr]
    assert fast.idempotent  # type: ignore[union-attr]
    assert fast.task_support == "optional"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"name": ""}, "tool name is empty"),
        ({"name": "a"}, "inputSchema is missing"),
        ({"name": "a", "inputSchema": []}, "inputSchema is not a JSON object"),
        ({"name": "a", "inputSchema": {"type": "array"}}, 'inputSchema has a "type" other'),
        ({"name": "a", "inputSchema": {}, "outputSchema": 1}, "outputSchema is not a JSON object"),
        ({"name": "a", "inputSchema": {}, "annotations": []}, "annotations is not a JSON object"),
        (
            {"name": "a", "inputSchema": {}, "execution": {"taskSupport": "required"}},
            "execution.taskSupport is",
        ),
        ({"name": "a" * 300, "inputSchema": {}}, "tool definition is over 300 bytes"),
        ({"name": "a", "inputSchema": {"k": "v" * 300}}, "tool definition is 309 bytes"),
        (
            {"name": "a", "inputSchema": {"properties": {"p": {"x-mcp-header": 1}}}},
            "invalid x-mcp-header",
        ),
    ],
)
def test_each_rule_skips_the_entry_on_the_typed_pass(entry: dict[str, Any], reason: str) -> None:
    data = body_of([entry])
    assert typed(data)
    raw = parse_page(data, LIMITS)["result"]["tools"][0]
    got = validate_entry(3, raw, modern=True, max_tool_bytes=200)
    assert isinstance(got, SkippedTool) and got.reason.startswith(reason), got
    assert got == validate_tool(3, entry, modern=True, max_tool_bytes=200)


def test_legacy_output_schemas_must_be_objects_on_the_typed_pass() -> None:
    entry = {"name": "a", "inputSchema": {}, "outputSchema": {"type": "array"}}
    raw = parse_page(body_of([entry]), LIMITS)["result"]["tools"][0]
    legacy = validate_entry(0, raw, modern=False, max_tool_bytes=200)
    assert isinstance(legacy, SkippedTool) and "legacy revisions" in legacy.reason
    assert isinstance(validate_entry(0, raw, modern=True, max_tool_bytes=200), Tool)
    loose = {"name": "a", "inputSchema": {}, "execution": 7, "title": None}
    raw = parse_page(body_of([loose]), LIMITS)["result"]["tools"][0]
    assert validate_entry(0, raw, modern=True, max_tool_bytes=200) == validate_tool(
        0, loose, modern=True, max_tool_bytes=200
    )


# ------------------------------------------------------------ declined: the strict path decides


@pytest.mark.parametrize(
    "data",
    [
        body_of([{"name": "a", "description": "\ud800", "inputSchema": {}}]),  # lone surrogate
        body_of([{"name": "\udc00", "inputSchema": {}}]),
        body_of([{"name": "a", "inputSchema": {"d": "x\ud800"}}]),
        body_of(["not an object", {"name": "a", "inputSchema": {}}]),
        body_of([{"name": 7, "inputSchema": {}}]),
        body_of([{"description": "no name", "inputSchema": {}}]),
        body_of([{"name": "a", "title": 1, "inputSchema": {}}]),
        body_of([{"name": "a", "description": None, "inputSchema": {}}]),
        body_of({"not": "a list"}),
        body_of([], rpc_id=[1]),
        json.dumps({"jsonrpc": {}, "id": 1, "result": {"tools": []}}).encode(),
        json.dumps({"jsonrpc": "2.0", "id": 1, "result": []}).encode(),
        json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "m"}}).encode(),
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x", "result": {"tools": []}}).encode(),
        json.dumps([{"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}]).encode(),
        body_of([{"name": "a", "inputSchema": {"maximum": 10**250}}]),  # a long digit run
        body_of([{"name": "a", "inputSchema": {"maximum": 1e300}}]),  # a 3-digit exponent
        body_of([{"name": "a", "inputSchema": {}, "description": "see e-100"}]),  # only text
    ],
)
def test_declined_bodies_get_the_strict_answer(data: bytes) -> None:
    assert not typed(data)
    same(data)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (body_of([{"name": "a", "inputSchema": {"m": 1}}]).replace(b"1}", b"1e400}"), "number"),
        (
            body_of([{"name": "a", "inputSchema": {"m": 1}}]).replace(b"1}", b"1" * 5000 + b"}"),
            "number",
        ),
        (body_of([{"name": "a", "inputSchema": {"m": 1}}]).replace(b"1}", b"NaN}"), "constant"),
        (
            body_of([{"name": "a", "inputSchema": {"m": 1}}]).replace(b"1}", b"-Infinity}"),
            "constant",
        ),
        (body_of([{"name": "a", "inputSchema": {}}]).replace(b'"a"', b'"\xff"'), "utf8"),
        (
            body_of([{"name": "a", "inputSchema": {"m": "x"}}]).replace(b'"x"', b'"\xc0\x80"'),
            "utf8",
        ),
        (body_of([{"name": "a", "inputSchema": {}}]).replace(b"{}", b"{,}"), "syntax"),
        (b"\xef\xbb\xbf" + body_of([]), "syntax"),
        (body_of([{"name": "a", "inputSchema": {"d": "x"}}]).replace(b'"x"', b'"\x01"'), "syntax"),
        (
            body_of([{"name": "a", "icons": [1], "inputSchema": {}}]).replace(b"[1]", b"[1e400]"),
            "number",
        ),
    ],
)
def test_what_the_strict_parser_refuses_the_listing_refuses(data: bytes, reason: str) -> None:
    with pytest.raises(JsonError) as fast:
        parse_page(bytearray(data), LIMITS)
    with pytest.raises(JsonError) as strict:
        parse_message(bytearray(data), LIMITS)
    assert fast.value.reason == strict.value.reason == reason
    assert str(fast.value) == str(strict.value)


@pytest.mark.parametrize("tail", [b"", b"\xa9"])
def test_utf8_is_checked_across_the_chunks_it_is_decoded_in(tail: bytes) -> None:
    # "\u00e9" (2 bytes) straddles the first 64 KiB boundary; a lone lead byte at the end
    head = b'{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","description":"'
    pad = b"x" * ((64 << 10) - len(head) - 1)
    data = head + pad + "\u00e9".encode() + b'","inputSchema":{}}]}}'
    if tail:
        data = data.replace(b"\xc3\xa9", b"\xc3")  # a lead byte without its continuation
    assert typed(data) is not bool(tail)
    same(data)


@pytest.mark.parametrize(
    ("entry", "escape"),
    [
        ({"name": "a", "description": "x\ud800", "inputSchema": {}}, "\\ud800"),
        ({"name": "a", "inputSchema": {"d": "\udc00"}}, "\\udc00"),  # in a kept schema
        ({"name": "a", "inputSchema": {}, "_meta": {"k": "\udbff"}}, "\\udbff"),  # skipped
        ({"name": "\ud800\ud800", "inputSchema": {}}, "\\ud800"),  # two highs: no pair
    ],
)
def test_a_lone_surrogate_is_refused_on_either_pass(entry: dict[str, Any], escape: str) -> None:
    """It was kept (the strict parser accepted what msgspec cannot build); now the one
    decoder refuses it, naming the escape, typed pass or not."""
    data = body_of([entry])
    assert not typed(data)
    with pytest.raises(JsonError) as info:
        parse_page(bytearray(data), LIMITS)
    assert info.value.reason == "syntax"
    assert f"the escape {escape} at line 1 column " in str(info.value)
    assert "is a lone UTF-16 surrogate" in str(info.value)
    same(data)


def depth_body(depth: int, where: str) -> bytes:
    nested = b"[" * depth + b"]" * depth
    entry = b'{"name":"a","inputSchema":{}}'
    if where == "schema":
        entry = b'{"name":"a","inputSchema":{"x":' + nested + b"}}"
    elif where == "annotations":
        entry = b'{"name":"a","inputSchema":{},"annotations":{"x":' + nested + b"}}"
    elif where == "execution":
        entry = b'{"name":"a","inputSchema":{},"execution":{"x":' + nested + b"}}"
    elif where == "output":
        entry = b'{"name":"a","inputSchema":{},"outputSchema":{"x":' + nested + b"}}"
    head = b'{"jsonrpc":"2.0","id":1,"result":{'
    if where == "result":
        return head + b'"x":' + nested + b',"tools":[' + entry + b"]}}"
    return head + b'"tools":[' + entry + b"]}}"


@pytest.mark.parametrize("where", ["schema", "output", "annotations", "execution", "result"])
def test_depth_near_the_limit_is_the_strict_parsers_to_judge(where: str) -> None:
    # a part at depth d (its root at level 5, or 3 under the result) reaches 4 + d or 2 + d
    limit = LIMITS.max_json_depth
    left = limit - (2 if where == "result" else 5)
    assert typed(depth_body(left - 30, where))
    same(depth_body(left - 30, where))
    accepted, refused = depth_body(left, where), depth_body(left + 1, where)
    assert typed(accepted)  # exactly max_json_depth deep: its brackets prove it
    assert same(accepted)[0] == "listed"
    assert not typed(refused)
    with pytest.raises(JsonError) as caught:
        parse_page(bytearray(refused), LIMITS)
    assert (caught.value.reason, caught.value.observed) == ("depth", limit + 1)


def test_a_part_is_declined_for_its_brackets_not_its_length() -> None:
    long = body_of([{"name": "a", "inputSchema": {"enum": ["x" * 5000]}}])
    assert typed(long)
    same(long)
    wide = body_of([{"name": "a", "inputSchema": {"enum": [[] for _ in range(2000)]}}])
    assert not typed(wide)  # 2,002 brackets, 3 levels: the strict parser walks it
    assert same(wide)[3][0][0] == "tool"


@pytest.mark.parametrize(
    ("spelling", "hinted"),
    [
        (b'"type":"string"', False),  # no annotation in the body: no schema is searched
        (b'"type":"string","x-mcp-header":"R"', True),
        (b'"type":"string","x\\u002dmcp-header":"R"', True),  # escaped: found all the same
        (b'"type":"string","d":"a\\\\u"', True),  # a backslash and "\\u": searched
        (b'"type":"string","d":"a\\n"', False),  # a backslash, no "\\u" anywhere
    ],
)
def test_schemas_are_searched_for_annotations_only_when_the_body_may_hold_one(
    spelling: bytes, hinted: bool
) -> None:
    data = body_of([{"name": "a", "inputSchema": {"properties": {"r": {}}}}]).replace(
        b'"r": {}', b'"r": {' + spelling + b"}"
    )
    assert typed(data)
    entry = parse_page(data, LIMITS)["result"]["tools"][0]
    assert (type(entry) is _Entry) is hinted
    tool = validate_entry(0, entry, modern=True, max_tool_bytes=1000)
    strict = validate_tool(
        0, json.loads(data)["result"]["tools"][0], modern=True, max_tool_bytes=1000
    )
    assert isinstance(tool, Tool) and isinstance(strict, Tool)
    assert tool.header_params == strict.header_params
    assert json.loads(tool.input_schema) == json.loads(strict.input_schema)
    assert bool(tool.header_params) is (b"mcp-header" in spelling)


def test_a_small_body_without_a_result_goes_straight_to_the_strict_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listing, "_TYPED_FROM", 4096)
    small = body_of([{"name": "a", "inputSchema": {}}])
    event = json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {}})
    large = json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"d": "result" * 1000}})
    assert typed(small) and isinstance(parse_page(small, LIMITS)["result"]["tools"][0], _Entry)
    for text in (event, large):
        assert not typed(text.encode()) and not typed(text)
        assert parse_page(text, LIMITS) == parse_message(text, LIMITS)


def test_a_tiny_max_json_depth_leaves_the_listing_to_the_strict_parser() -> None:
    limits = Limits(max_json_depth=4)
    data = body_of([{"name": "a", "inputSchema": {}}])
    assert not typed(data, limits)
    with pytest.raises(JsonError):
        parse_page(bytearray(data), limits)


@pytest.mark.parametrize("member", ["_meta", "icons"])
def test_an_unread_member_is_bounded_like_the_rest(member: str) -> None:
    """``_meta`` and ``icons`` of a tool entry are never built, but their brackets are counted
    against max_json_depth: nested past it, the body is declined and the untyped decode
    refuses it (it used to be accepted: the one difference between the two paths)."""
    shallow = body_of([{"name": "a", "inputSchema": {}, member: [[1], {"k": [2]}]}])
    assert typed(shallow)
    assert same(shallow)[3][0][0] == "tool"
    nested = b"[" * 600 + b"]" * 600
    data = body_of([{"name": "a", "inputSchema": {}, member: 0}]).replace(b"0}", nested + b"}")
    assert not typed(data)
    for deep in (data, data.replace(nested, b"[" * 100_000 + b"]" * 100_000)):
        with pytest.raises(JsonError) as caught:
            parse_page(bytearray(deep), LIMITS)
        assert caught.value.reason == "depth"
        same(deep)


@pytest.mark.parametrize(
    "data",
    [
        body_of([{"name": "a", "inputSchema": {}, "tags": [[[]]]}]),
        json.dumps({"jsonrpc": "2.0", "id": 1, "x": [[]], "result": {"tools": []}}).encode(),
    ],
)
def test_a_key_the_spec_does_not_define_declines_the_body(data: bytes) -> None:
    """msgspec would skip it unbuilt and unbounded: the untyped decode takes the body."""
    assert not typed(data)
    same(data)


@pytest.mark.parametrize("factor", [1.9, 2.1])
def test_the_text_bound_on_an_ascii_body_is_the_strict_parsers(factor: float) -> None:
    # decoded_size counts 2 bytes a character for an ASCII body: refused when 2 x len is
    # over 3 x max_response_bytes, accepted (and typed) between that and 4 x len
    data = body_of([{"name": "a", "description": "d" * 5000, "inputSchema": {}}])
    limits = Limits(max_response_bytes=int(len(data) * factor / 3))
    assert typed(data, limits) is (factor > 2)
    assert run(data, parse_page, validate_entry, limits, True) == run(
        data, parse_message, validate_tool, limits, True
    )


@pytest.mark.parametrize("bound", ["max_json_values", "max_response_bytes"])
def test_the_pre_parse_bounds_raise_the_budget_error(bound: str) -> None:
    data = body_of([{"name": "a", "inputSchema": {}}] * 50)
    if bound == "max_json_values":
        limits = Limits(max_json_values=100)
    else:
        data = data.replace(b'"a"', "\U0001f600".encode())
        limits = Limits(max_response_bytes=len(data) // 3)
    with pytest.raises(ConnectionFailed) as fast:
        parse_page(bytearray(data), limits)
    with pytest.raises(ConnectionFailed) as strict:
        parse_message(bytearray(data), limits)
    assert fast.value.bound == strict.value.bound == bound
    assert str(fast.value) == str(strict.value)


def test_a_partly_spaced_body_keeps_its_spaces_and_a_spaced_one_is_compacted() -> None:
    entry = {"name": "a", "inputSchema": {"type": "object", "required": ["x", "y"]}}
    loose = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"tools": [entry]}}, separators=(", ", ":")
    )
    spaced = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": [entry]}})
    for data, schema in (
        (loose, b'{"type":"object", "required":["x", "y"]}'),
        (spaced, b'{"type":"object","required":["x","y"]}'),
        (loose.replace(":", ":\n", 1), b'{"type":"object","required":["x","y"]}'),
    ):
        raw = parse_page(data.encode(), LIMITS)["result"]["tools"][0]
        tool = validate_entry(0, raw, modern=True, max_tool_bytes=100)
        assert isinstance(tool, Tool) and tool.input_schema == schema


def test_text_input_and_consumed_bytes() -> None:
    data = body_of([{"name": "é", "inputSchema": {}}])
    assert typed(data)
    text = data.decode()
    assert same(data) == run(
        data, lambda d, lim: parse_page(d.decode(), lim), validate_entry, LIMITS, True
    )
    assert parse_page(text, LIMITS)["result"]["tools"][0].name == "é"
    for body in (data, data.replace(b": ", b":").replace(b", ", b",")):  # spaced, compact
        buffer = bytearray(body)
        assert typed(body) and parse_page(buffer, LIMITS)["result"]["tools"][0].name == "é"
        assert buffer == b""  # consumed (no view of it outlives the pass), as parse_message does
    envelope = json.dumps({"result": {"tools": []}}).encode()
    assert typed(envelope) and parse_page(envelope, LIMITS) == {"result": {"tools": []}}


# ------------------------------------------------------------------------- through the machine


@pytest.mark.parametrize("sse", [False, True])
def test_the_machine_lists_through_the_typed_pass(sse: bool) -> None:
    server = FakeServer()

    def answer(request: Any, body: Any) -> Response:
        data = (  # 1.50E0: only the typed pass keeps a number as the server spelled it
            b'{"jsonrpc":"2.0","id":%d,"result":{"resultType":"complete","tools":[{"name":"a",'
            b'"inputSchema":{"type":"object","maximum":1.50E0}}]}}' % body["id"]
        )
        if sse:
            return Response(
                headers=[(b"content-type", b"text/event-stream")],
                chunks=[b"data: " + data + b"\n\n"],
            )
        return Response(headers=[(b"content-type", b"application/json")], chunks=[data])

    server.overrides["tools/list"] = answer
    driver = Driver(server)
    driver.ok(driver.connect())
    listed = driver.ok(driver.list_tools())
    assert isinstance(listed, ToolsListed)
    assert [(t.name, t.input_schema) for t in listed.tools] == [
        ("a", b'{"type":"object","maximum":1.50E0}')
    ]


@pytest.mark.parametrize("header", ["Region", "bad name"])
@pytest.mark.parametrize("key", ["x\\u002dmcp-header", "\\u0078-mcp-header", "x-mcp-header"])
def test_an_escaped_annotation_key_is_found_on_both_paths(key: str, header: str) -> None:
    """The typed pass keeps the server's bytes: an ``x-mcp-header`` key written with JSON
    escapes must still be read (a valid one becomes a header parameter, a bad one skips
    the tool), as the strict path, which searches re-serialised bytes, does."""
    schema = {"type": "object", "properties": {"region": {"type": "string", "K": header}}}
    entry = json.dumps({"name": "t", "inputSchema": schema}).replace('"K"', f'"{key}"')
    data = ('{"jsonrpc":"2.0","id":1,"result":{"tools":[' + entry + "]}}").encode()
    assert typed(data)
    ((verdict,),) = [same(data)[3]]
    if header == "Region":
        assert verdict[0] == "tool" and verdict[7][0].header == "Region"
    else:
        assert verdict[0] == "skipped" and "invalid x-mcp-header" in verdict[3]


def nested_value(member: str, depth: int) -> bytes:
    """A value ``depth`` levels deep for ``member``: arrays for ``icons`` (an array in the
    spec), one-key objects for ``_meta`` (an object)."""
    if member == "icons":
        return b"[" * depth + b"]" * depth
    return b'{"k":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def depth_of(value: Any) -> int:
    """The nesting of ``value`` (``[]`` is 1 deep), level by level (any depth)."""
    depth, level = 0, [value]
    while level := [c for c in level if isinstance(c, (dict, list))]:
        depth += 1
        level = [m for c in level for m in (c.values() if isinstance(c, dict) else c)]
    return depth


@pytest.mark.parametrize("sse", [False, True])
@pytest.mark.parametrize("limit", [16, LIMITS.max_json_depth])
@pytest.mark.parametrize("member", ["icons", "_meta"])
def test_an_unread_member_at_the_depth_bound_and_one_past_it_through_the_machine(
    member: str, limit: int, sse: bool
) -> None:
    """``icons`` and ``_meta`` are counted like any other part: the entry is 4 levels deep
    in the message (message, result, tools, entry), so a member ``limit - 4`` deep makes
    the message exactly ``max_json_depth`` deep (listed), one more level is refused with
    the decoder's depth error, as for a schema (test_depth_near_the_limit_...)."""
    limits = Limits(max_json_depth=limit)
    bodies = {}
    for depth in (limit - 4, limit - 3):
        bodies[depth] = (
            b'{"jsonrpc":"2.0","id":%%d,"result":{"resultType":"complete","tools":[{"name":"a",'
            b'"inputSchema":{"type":"object"},"%s":%s}]}}'
            % (member.encode(), nested_value(member, depth))
        )
        assert depth_of(json.loads(bodies[depth] % 1)["result"]["tools"][0][member]) == depth
    at_bound, past = bodies[limit - 4] % 1, bodies[limit - 3] % 1
    assert typed(at_bound, limits) and not typed(past, limits)  # the bound, counted alike
    with pytest.raises(JsonError) as caught:
        parse_json(past, max_depth=limit)
    assert (caught.value.reason, caught.value.observed) == ("depth", limit + 1)
    assert parse_json(at_bound, max_depth=limit)["result"]["tools"][0]["name"] == "a"

    served: list[bytes] = []

    def answer(request: Any, body: Any) -> Response:
        data = served.pop(0) % body["id"]
        if sse:
            return Response(
                headers=[(b"content-type", b"text/event-stream")],
                chunks=[b"data: " + data + b"\n\n"],
            )
        return Response(headers=[(b"content-type", b"application/json")], chunks=[data])

    server = FakeServer()
    server.overrides["tools/list"] = answer
    driver = Driver(server, limits=limits)
    driver.ok(driver.connect())
    served.append(bodies[limit - 4])
    listed = driver.ok(driver.list_tools())
    assert isinstance(listed, ToolsListed)
    assert [(t.name, t.input_schema) for t in listed.tools] == [("a", b'{"type":"object"}')]
    served.append(bodies[limit - 3])
    error = driver.failure(driver.list_tools())
    assert isinstance(error, ConnectionFailed) and error.cause == "not_jsonrpc"
    what = " sent an event that is not JSON" if sse else "'s response is not a JSON-RPC response"
    assert str(error) == (
        f"the server{what}: JSON nesting is at least {limit + 1} levels deep; "
        f"the limit is {limit} levels (max_json_depth)"
    )
