"""tools/list through the MCP machine: pagination, cursors, bounds, validation, cache hints."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from sansmcp.core.errors import ConnectionFailed, ServerAnswered
from sansmcp.core.http import HttpRequest
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import ConnSettings, ToolsListed
from sansmcp.core.url import parse_endpoint

from .fakemcp import URL, Driver, FakeServer, Response, result, tool

ERAS = ["modern", "2025-11-25", "2025-03-26"]


def make_server(era: str, **kwargs: Any) -> FakeServer:
    if era == "modern":
        return FakeServer(**kwargs)
    return FakeServer(modern=False, legacy=era, **kwargs)


def connected(server: FakeServer, **kwargs: Any) -> Driver:
    driver = Driver(server, **kwargs)
    driver.ok(driver.connect())
    return driver


def listed(driver: Driver) -> ToolsListed:
    outcome = driver.ok(driver.list_tools())
    assert isinstance(outcome, ToolsListed)
    return outcome


def list_bodies(server: FakeServer) -> list[dict[str, Any]]:
    return [b for b in server.bodies if isinstance(b, dict) and b.get("method") == "tools/list"]


def pages(server: FakeServer, make: Callable[[Any], dict[str, Any]]) -> None:
    """Answer tools/list with ``make(cursor)`` (the result, era-appropriate)."""
    modern = server.modern

    def answer(request: HttpRequest, body: Any) -> Response:
        value = make((body.get("params") or {}).get("cursor"))
        if modern:
            value.setdefault("resultType", "complete")
        return server.wrap(result(body["id"], value))

    server.overrides["tools/list"] = answer


@pytest.mark.parametrize("era", ERAS)
def test_pagination_follows_next_cursor_to_the_end(era: str) -> None:
    server = make_server(era, tools=[tool(f"t{i}") for i in range(5)], page_size=2)
    driver = connected(server)
    outcome = listed(driver)
    assert [t.name for t in outcome.tools] == ["t0", "t1", "t2", "t3", "t4"]
    assert outcome.skipped == ()
    cursors = [(b.get("params") or {}).get("cursor") for b in list_bodies(server)]
    assert cursors == [None, "2", "4"]
    assert set(driver.machine.tools) == {"t0", "t1", "t2", "t3", "t4"}
    assert outcome.tools[0].to_dict() == {
        "name": "t0",
        "description": "the t0 tool",
        "input_schema": {"type": "object"},
    }


@pytest.mark.parametrize("era", ERAS)
def test_empty_string_cursor_is_a_cursor_and_null_ends(era: str) -> None:
    server = make_server(era)

    def make(cursor: Any) -> dict[str, Any]:
        if cursor is None:
            return {"tools": [tool("a")], "nextCursor": ""}
        assert cursor == ""
        return {"tools": [tool("b")], "nextCursor": None}

    pages(server, make)
    outcome = listed(connected(server))
    assert [t.name for t in outcome.tools] == ["a", "b"]
    assert [(b["params"] or {}).get("cursor") for b in list_bodies(server)] == [None, ""]


@pytest.mark.parametrize("era", ["modern", "2025-06-18"])
@pytest.mark.parametrize(
    ("graph", "requests"),
    [({None: "A", "A": "B", "B": "A"}, 3), ({None: "A", "A": "A"}, 2)],
    ids=["A-B-A", "A-forever"],
)
def test_a_repeated_cursor_is_a_cycle(era: str, graph: dict[Any, str], requests: int) -> None:
    server = make_server(era)
    pages(server, lambda cursor: {"tools": [], "nextCursor": graph[cursor]})
    driver = connected(server)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ServerAnswered) and failure.reason == "cursor_cycle"
    assert len(list_bodies(server)) == requests


@pytest.mark.parametrize("era", ["modern", "2025-11-25"])
@pytest.mark.parametrize("limit", [1, 5, 100])
def test_endless_unique_cursors_stop_at_max_tool_pages(era: str, limit: int) -> None:
    server = make_server(era)
    pages(server, lambda cursor: {"tools": [], "nextCursor": f"{int(cursor or 0) + 1}"})
    driver = connected(server, limits=Limits(max_tool_pages=limit))
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ServerAnswered) and failure.reason == "max_tool_pages"
    assert failure.bound == "max_tool_pages" and failure.limit == limit
    assert len(list_bodies(server)) == limit


def test_a_listing_of_exactly_max_tool_pages_is_fine() -> None:
    server = FakeServer(tools=[tool(f"t{i}") for i in range(3)], page_size=1)
    driver = connected(server, limits=Limits(max_tool_pages=3))
    assert len(listed(driver).tools) == 3


@pytest.mark.parametrize("era", ["modern", "2025-11-25"])
def test_oversize_cursor_is_refused_in_utf8_bytes(era: str) -> None:
    for cursor, ok in [("x" * 16, True), ("x" * 17, False), ("é" * 9, False), ("é" * 8, True)]:
        server = make_server(era)
        pages(server, lambda c, cursor=cursor: {"tools": [], "nextCursor": None if c else cursor})
        driver = connected(server, limits=Limits(max_echo_bytes=16))
        outcome = driver.list_tools()
        if ok:
            driver.ok(outcome)
            assert list_bodies(server)[1]["params"]["cursor"] == cursor
        else:
            failure = driver.failure(outcome)
            assert isinstance(failure, ServerAnswered) and failure.reason == "oversized_cursor"
            assert failure.bound == "max_echo_bytes" and failure.limit == 16
            assert len(list_bodies(server)) == 1


def test_a_cursor_with_a_lone_surrogate_is_refused() -> None:
    """A lone surrogate escape is not I-JSON (RFC 7493 s2.1): the page is refused as invalid
    JSON, naming the escape, and nothing is echoed (it used to be echoed back exactly)."""
    server = FakeServer()
    server.overrides["tools/list"] = lambda req, body: Response(
        headers=[(b"content-type", b"application/json")],
        chunks=[
            b'{"jsonrpc":"2.0","id":%d,"result":{"resultType":"complete","tools":[],'
            b'"nextCursor":%s}}'
            % (body["id"], b"null" if body["params"].get("cursor") else b'"\\ud800x"')
        ],
    )
    driver = connected(server)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.cause == "not_jsonrpc"
    assert "the escape \\ud800 at line 1 column 84 (byte 83) is a lone UTF-16 surrogate" in str(
        failure
    )
    assert [r for r in server.requests if b'"cursor"' in r.body] == []


@pytest.mark.parametrize("era", ERAS)
def test_malformed_tools_are_skipped_and_recorded_across_pages(era: str) -> None:
    server = make_server(era)
    first = [tool("good"), {"name": 7}, "not an object", tool("bad", inputSchema=[])]
    second = [tool("good"), tool("other"), {"description": "no name"}]

    def make(cursor: Any) -> dict[str, Any]:
        return {"tools": first, "nextCursor": "p2"} if cursor is None else {"tools": second}

    pages(server, make)
    outcome = listed(connected(server))
    assert [t.name for t in outcome.tools] == ["good", "other"]
    skipped = [(s.index, s.name) for s in outcome.skipped]
    assert skipped == [(1, None), (2, None), (3, "bad"), (4, "good"), (6, None)]
    assert outcome.skipped[3].reason == "duplicate tool name"
    assert all(s.reason for s in outcome.skipped)


def test_oversized_and_task_required_tools_are_skipped() -> None:
    server = FakeServer(
        tools=[
            tool("big", description="x" * 2000),
            tool("task", execution={"taskSupport": "required"}),
            tool("fine"),
        ]
    )
    outcome = listed(connected(server, limits=Limits(max_tool_bytes=1000)))
    assert [t.name for t in outcome.tools] == ["fine"]
    assert [(s.index, s.name) for s in outcome.skipped] == [(0, "big"), (1, "task")]


def test_ttl_and_cache_scope_are_exposed_modern() -> None:
    server = FakeServer()
    scopes = {None: ("public", 5000, "p2"), "p2": ("private", 2000, "p3"), "p3": (None, 3000, None)}

    def make(cursor: Any) -> dict[str, Any]:
        scope, ttl, following = scopes[cursor]
        value: dict[str, Any] = {"tools": [tool(f"t{cursor}")], "ttlMs": ttl}
        if scope is not None:
            value["cacheScope"] = scope
        if following is not None:
            value["nextCursor"] = following
        return value

    pages(server, make)
    driver = connected(server)
    outcome = listed(driver)
    assert (outcome.ttl_ms, outcome.cache_scope) == (2000, "private")
    assert (driver.machine.ttl_ms, driver.machine.cache_scope) == (2000, "private")


def test_default_fake_server_ttl() -> None:
    driver = connected(FakeServer())
    outcome = listed(driver)
    assert (outcome.ttl_ms, outcome.cache_scope) == (1000, "private")


@pytest.mark.parametrize("ttl", [-5, 0, 1.5, "100", True, None])
def test_unusable_ttl_is_zero(ttl: Any) -> None:
    server = FakeServer()
    pages(server, lambda cursor: {"tools": [], "ttlMs": ttl, "cacheScope": 3})
    outcome = listed(connected(server))
    assert (outcome.ttl_ms, outcome.cache_scope) == (0, None)


@pytest.mark.parametrize("era", ["2025-11-25", "2025-06-18", "2025-03-26"])
def test_legacy_listing_without_cache_hints(era: str) -> None:
    driver = connected(make_server(era))
    outcome = listed(driver)
    assert (outcome.ttl_ms, outcome.cache_scope) == (0, None)
    assert (driver.machine.ttl_ms, driver.machine.cache_scope) == (0, None)


@pytest.mark.parametrize("era", ERAS)
def test_an_empty_listing_is_fine(era: str) -> None:
    outcome = listed(connected(make_server(era, tools=[])))
    assert outcome.tools == () and outcome.skipped == ()


HEADERED = {
    "type": "object",
    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
}
BAD_HEADER = {
    "type": "object",
    "properties": {"region": {"type": "number", "x-mcp-header": "Region"}},
}


def test_invalid_x_mcp_header_is_dropped_in_modern() -> None:
    server = FakeServer(
        tools=[tool("ok", inputSchema=HEADERED), tool("bad", inputSchema=BAD_HEADER)]
    )
    outcome = listed(connected(server))
    assert [t.name for t in outcome.tools] == ["ok"]
    assert outcome.tools[0].header_params[0].header == "Region"
    assert outcome.skipped[0].name == "bad"
    assert outcome.skipped[0].reason.startswith("invalid x-mcp-header")


@pytest.mark.parametrize("era", ["2025-11-25", "2025-03-26"])
def test_x_mcp_header_is_ignored_in_legacy(era: str) -> None:
    server = make_server(
        era, tools=[tool("ok", inputSchema=HEADERED), tool("bad", inputSchema=BAD_HEADER)]
    )
    outcome = listed(connected(server))
    assert [t.name for t in outcome.tools] == ["ok", "bad"]
    assert all(t.header_params == () for t in outcome.tools)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"tools": {}}, "malformed_result"),
        ({}, "malformed_result"),
        ({"tools": [], "nextCursor": 3}, "malformed_result"),
        ({"tools": [], "resultType": "input_required"}, "unknown_result_type"),
        ({"tools": [], "resultType": "later"}, "unknown_result_type"),
    ],
)
def test_malformed_listing_results(value: dict[str, Any], reason: str) -> None:
    server = FakeServer()
    pages(server, lambda cursor: dict(value))
    driver = connected(server)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ServerAnswered) and failure.reason == reason


def test_a_result_that_is_not_an_object() -> None:
    server = FakeServer()
    server.overrides["tools/list"] = lambda req, body: server.wrap(result(body["id"], [1]))
    driver = connected(server)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ServerAnswered) and failure.reason == "malformed_result"


def test_listing_replaces_the_known_tools_and_the_machine_stays_usable() -> None:
    server = FakeServer(tools=[tool("a"), tool("b")])
    driver = connected(server)
    assert [t.name for t in listed(driver).tools] == ["a", "b"]
    pages(server, lambda cursor: {"tools": [], "nextCursor": 5})
    assert isinstance(driver.failure(driver.list_tools()), ServerAnswered)
    assert set(driver.machine.tools) == {"a", "b"}  # a failed listing changes nothing
    server.overrides.clear()
    server.tools = [tool("c")]
    assert [t.name for t in listed(driver).tools] == ["c"]
    assert set(driver.machine.tools) == {"c"}
    modern = json.loads(server.requests[-1].body)["params"]["_meta"]
    assert modern["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"


def test_list_before_connect_is_a_driver_bug() -> None:
    from sansmcp.core.errors import LocalProtocolError

    driver = Driver(FakeServer(), settings=ConnSettings(endpoint=parse_endpoint(URL)))
    with pytest.raises(LocalProtocolError):
        driver.machine.list_tools(now=0.0)
    driver.ok(driver.connect())
    driver.machine.list_tools(now=0.0)
    with pytest.raises(LocalProtocolError):
        driver.machine.list_tools(now=0.0)  # one operation at a time
