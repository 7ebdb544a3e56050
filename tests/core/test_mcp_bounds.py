"""One test per row of DESIGN.md's error-boundary table, plus deadlines and budgets."""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import pytest

from sansmcp.core.errors import CallerError, ConnectionFailed, ServerAnswered, Unauthorized
from sansmcp.core.http import HttpRequest
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import CancelExchange, ToolCalled, ToolsListed

from .fakemcp import Driver, FakeServer, Response, error, json_response, result, sse_response


def make_server(era: str, **kwargs: Any) -> FakeServer:
    if era == "modern":
        return FakeServer(**kwargs)
    return FakeServer(modern=False, legacy=era, **kwargs)


def connected(server: FakeServer, **kwargs: Any) -> Driver:
    driver = Driver(server, **kwargs)
    driver.ok(driver.connect())
    return driver


def failing_list(server: FakeServer, response: Response, **kwargs: Any) -> Any:
    driver = connected(server, **kwargs)
    server.overrides["tools/list"] = lambda req, body: response
    return driver.failure(driver.list_tools())


# ---------------------------------------------------------------- transport failures


@pytest.mark.parametrize("cause", ["dns", "reset", "tls", "refused_address"])
def test_exchange_failure_keeps_its_cause(cause: str) -> None:
    server = FakeServer()
    server.overrides["server/discover"] = lambda req, body: Response(
        fail=ConnectionFailed(f"{cause} failed", cause=cause), head=False
    )
    driver = Driver(server)
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ConnectionFailed) and failure.cause == cause


@pytest.mark.parametrize("era", ["modern", "2025-11-25"])
def test_eof_mid_json_response(era: str) -> None:
    server = make_server(era)
    response = Response(
        headers=[(b"content-type", b"application/json")],
        chunks=[b'{"jsonrpc":"2.0","id":'],
        fail=ConnectionFailed("eof", cause="reset"),
    )
    failure = failing_list(server, response)
    assert isinstance(failure, ConnectionFailed) and failure.cause == "reset"


# ---------------------------------------------------------------- deadlines


def never(req: HttpRequest, body: Any) -> None:
    return None


def test_connect_timeout() -> None:
    server = FakeServer()
    server.overrides["server/discover"] = never
    driver = Driver(server, limits=Limits(connect_timeout=5.0))
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound, failure.limit) == ("timeout", "connect_timeout", 5.0)
    assert driver.now == 5.0
    assert driver.cancelled == {driver.started[0].exchange_id}


def test_connect_timeout_spans_the_whole_handshake() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["notifications/initialized"] = never
    driver = Driver(server, limits=Limits(connect_timeout=5.0, dial_timeout=4.0))
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ConnectionFailed) and failure.bound == "dial_timeout"
    assert driver.now == 4.0
    driver = Driver(server, limits=Limits(connect_timeout=5.0, dial_timeout=30.0))
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ConnectionFailed) and failure.bound == "connect_timeout"
    assert driver.now == 5.0


def test_list_timeout() -> None:
    server = FakeServer()
    driver = connected(server, limits=Limits(list_timeout=10.0))
    server.overrides["tools/list"] = never
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed)
    assert (failure.bound, failure.limit) == ("list_timeout", 10.0)
    assert driver.now == 10.0


def test_list_timeout_spans_all_pages() -> None:
    """Each page answers within dial_timeout, but the listing as a whole runs out."""
    server = FakeServer(tools=[{"name": f"t{i}", "inputSchema": {}} for i in range(5)], page_size=1)
    driver = connected(server, limits=Limits(list_timeout=10.0, dial_timeout=5.0))
    pages = {"n": 0}

    def slow_listing(req: HttpRequest, body: Any) -> Response | None:
        pages["n"] += 1
        if pages["n"] == 3:
            return None  # still working when the listing's budget ends
        driver.now += 4.0  # each page takes 4 s: under the 5 s per-request cap
        return server.default(req, body)

    server.overrides["tools/list"] = slow_listing
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound, failure.limit) == ("timeout", "list_timeout", 10.0)
    assert driver.now == 10.0 and pages["n"] == 3


def test_dial_timeout_caps_one_listing_page() -> None:
    server = FakeServer(tools=[{"name": f"t{i}", "inputSchema": {}} for i in range(2)], page_size=1)
    driver = connected(server, limits=Limits(dial_timeout=3.0))
    pages = {"n": 0}

    def listing(req: HttpRequest, body: Any) -> Response | None:
        pages["n"] += 1
        return server.default(req, body) if pages["n"] == 1 else None

    server.overrides["tools/list"] = listing
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound, failure.limit) == ("timeout", "dial_timeout", 3.0)
    assert driver.now == 3.0 and pages["n"] == 2


def test_call_timeout_is_the_call_request_cap() -> None:
    server = FakeServer()
    driver = connected(server, limits=Limits(call_timeout=50.0, dial_timeout=3.0))
    server.overrides["tools/call"] = never
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ConnectionFailed)
    assert (failure.bound, failure.limit) == ("call_timeout", 50.0)
    assert driver.now == 50.0
    assert driver.started[-1].deadline == 50.0


@pytest.mark.parametrize(
    ("timeout", "limit"), [(2.5, 2.5), (7, 7.0), (50.0, 50.0), (1e9, 50.0), (10**400, 50.0)]
)
def test_a_call_s_own_timeout_shortens_call_timeout_never_past_it(
    timeout: float, limit: float
) -> None:
    server = FakeServer()
    driver = connected(server, limits=Limits(call_timeout=50.0, dial_timeout=3.0))
    server.overrides["tools/call"] = never
    call = functools.partial(driver.machine.call_tool, timeout=timeout)
    failure = driver.failure(driver.run(call, "echo", b"{}"))
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound, failure.limit) == ("timeout", "call_timeout", limit)
    assert driver.now == limit and driver.started[-1].deadline == limit


def test_a_listing_s_own_timeout_shortens_list_timeout() -> None:
    server = FakeServer()
    driver = connected(server, limits=Limits(list_timeout=10.0, dial_timeout=30.0))
    server.overrides["tools/list"] = never
    failure = driver.failure(driver.run(functools.partial(driver.machine.list_tools, timeout=0.25)))
    assert isinstance(failure, ConnectionFailed)
    assert (failure.bound, failure.limit) == ("list_timeout", 0.25)
    assert driver.now == 0.25


@pytest.mark.parametrize("timeout", [0, -1.0, math.nan, math.inf, True, "5", None.__class__])
def test_an_unusable_own_timeout_is_a_caller_error_before_any_request(timeout: object) -> None:
    server = FakeServer()
    driver = connected(server)
    sent = len(server.requests)
    with pytest.raises(CallerError, match=r"^timeout must be a number of seconds > 0"):
        driver.machine.call_tool("echo", b"{}", now=driver.now, timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(CallerError, match=r"^timeout must be a number of seconds > 0"):
        driver.machine.list_tools(now=driver.now, timeout=timeout)  # type: ignore[arg-type]
    assert len(server.requests) == sent and not driver.machine.busy


def test_legacy_timeout_sends_cancelled_for_the_request() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = connected(server, limits=Limits(call_timeout=7.0))
    server.overrides["tools/call"] = never
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ConnectionFailed) and failure.bound == "call_timeout"
    call_id = server.bodies[-2]["id"]
    cancel = server.bodies[-1]
    assert cancel["method"] == "notifications/cancelled" and "id" not in cancel
    assert cancel["params"]["requestId"] == call_id
    start = driver.started[-1]
    assert start.deadline == pytest.approx(7.0 + Limits().cancel_grace)
    assert dict(server.requests[-1].headers)[b"mcp-session-id"] == b"session-1"


def test_a_cancel_that_never_ends_is_abandoned_after_cancel_grace() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = connected(server, limits=Limits(call_timeout=7.0, cancel_grace=0.5))
    server.overrides["tools/call"] = never
    server.overrides["notifications/cancelled"] = never
    driver.failure(driver.call("echo"))
    driver.pump_side()
    assert driver.machine.next_deadline() == 7.5
    driver.now = 7.5
    driver.machine.handle_timer(now=7.5)
    assert isinstance(driver.pending(), CancelExchange)
    assert driver.machine.next_deadline() is None


def test_no_cancelled_for_initialize_or_modern() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["initialize"] = never
    driver = Driver(server, limits=Limits(connect_timeout=2.0))
    assert isinstance(driver.failure(driver.connect()), ConnectionFailed)
    driver.pump_side()
    assert "notifications/cancelled" not in driver.methods()
    modern = FakeServer()
    driver = connected(modern, limits=Limits(call_timeout=2.0))
    modern.overrides["tools/call"] = never
    assert isinstance(driver.failure(driver.call("echo")), ConnectionFailed)
    driver.pump_side()
    assert "notifications/cancelled" not in driver.methods()


# ---------------------------------------------------------------- budgets


@pytest.mark.parametrize("sse", [False, True])
def test_max_response_bytes_body_bomb(sse: bool) -> None:
    limit = 20_000
    server = FakeServer()
    driver = connected(server, limits=Limits(max_response_bytes=limit))
    before = driver.machine.bytes_received
    piece = b"data: " + b"x" * 994 + b"\n" if sse else b" " * 1001
    kind = b"text/event-stream" if sse else b"application/json"
    server.overrides["tools/list"] = lambda req, body: Response(
        headers=[(b"content-type", kind)], chunks=[piece] * 1000, end=False
    )
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound, failure.limit) == ("budget", "max_response_bytes", limit)
    assert failure.observed == driver.machine.bytes_received == driver.fed
    assert limit < failure.observed <= limit + 1001
    assert failure.observed == before + 100 + 1001 * ((limit - before - 100) // 1001 + 1)
    assert driver.now == 0.0
    # exhausted: every later operation fails at once with the same error
    n = len(server.requests)
    assert driver.failure(driver.call("echo")) is failure
    assert driver.failure(driver.list_tools()) is failure
    assert driver.failure(driver.connect()) is failure
    assert len(server.requests) == n


def test_head_blocks_are_charged() -> None:
    server = FakeServer()
    server.overrides["server/discover"] = lambda req, body: Response(status=200, raw_size=5000)
    driver = Driver(server, limits=Limits(max_response_bytes=4999))
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ConnectionFailed) and failure.bound == "max_response_bytes"
    assert failure.observed == 5000


def test_max_responses() -> None:
    server = FakeServer()
    driver = connected(server, limits=Limits(max_responses=3))
    driver.ok(driver.list_tools())
    driver.ok(driver.call("echo"))
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ConnectionFailed)
    assert (failure.bound, failure.limit, failure.observed) == ("max_responses", 3, 4)
    assert driver.failure(driver.list_tools()) is failure


# ---------------------------------------------------------------- HTTP statuses


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirects_are_never_followed(status: int) -> None:
    response = Response(status=status, headers=[(b"location", b"https://evil.example/x")])
    failure = failing_list(FakeServer(), response)
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.status, failure.location) == (
        "redirect",
        status,
        "https://evil.example/x",
    )


@pytest.mark.parametrize("era", ["modern", "2025-06-18"])
@pytest.mark.parametrize("status", [401, 403])
def test_unauthorized(era: str, status: int) -> None:
    response = json_response(error(1, -32001, "nope"), status)
    response.headers.append((b"www-authenticate", b'Bearer error="invalid_token"'))
    failure = failing_list(make_server(era), response)
    assert isinstance(failure, Unauthorized) and not isinstance(failure, ConnectionFailed)
    assert failure.status == status
    assert failure.challenges == [("bearer", {"error": "invalid_token"})]
    bare = failing_list(make_server(era), Response(status=status))
    assert isinstance(bare, Unauthorized) and bare.challenges == []


@pytest.mark.parametrize("era", ["modern", "2025-11-25"])
@pytest.mark.parametrize(
    "response",
    [
        Response(status=500),
        Response(status=502, headers=[(b"content-type", b"text/html")], chunks=[b"<h1>x</h1>"]),
        Response(status=500, headers=[(b"content-type", b"application/json")], chunks=[b"{"]),
        json_response(error(999, -32000, "someone else's"), 500),
    ],
    ids=["empty", "html", "bad-json", "other-id"],
)
def test_error_status_without_jsonrpc_error_for_us(era: str, response: Response) -> None:
    failure = failing_list(make_server(era), response)
    assert isinstance(failure, ConnectionFailed)
    assert failure.cause == "http_status" and failure.status == response.status


@pytest.mark.parametrize("era", ["modern", "2025-11-25"])
@pytest.mark.parametrize("status", [200, 400, 500])
def test_jsonrpc_error_for_our_id_is_server_answered(era: str, status: int) -> None:
    server = make_server(era)
    driver = connected(server)
    server.overrides["tools/list"] = lambda req, body: json_response(
        error(body["id"], -32603, "internal", {"why": "db"}), status
    )
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ServerAnswered)
    assert (failure.code, failure.rpc_message, failure.data) == (-32603, "internal", {"why": "db"})


def test_idless_error_on_an_error_status_is_ours() -> None:
    failure = failing_list(FakeServer(), json_response(error(None, -32000, "bad"), 400))
    assert isinstance(failure, ServerAnswered) and failure.code == -32000


# ---------------------------------------------------------------- not JSON-RPC


@pytest.mark.parametrize("era", ["modern", "2025-11-25"])
@pytest.mark.parametrize(
    "response",
    [
        Response(headers=[(b"content-type", b"text/html")], chunks=[b"<html>hi</html>"]),
        Response(chunks=[b"{}"]),
        Response(headers=[(b"content-type", b"application/json")], chunks=[b"<html>"]),
        Response(headers=[(b"content-type", b"application/json")]),
        Response(),
        json_response(result(12345, {"tools": []})),
        json_response({"jsonrpc": "2.0", "id": "1", "result": {"tools": []}}),
        json_response({"jsonrpc": "2.0", "method": "notifications/x"}),
        json_response({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}}),
        json_response([1, 2]),
        json_response(17),
        sse_response({"jsonrpc": "2.0", "id": 777, "result": {}}),
        sse_response(b"data: not json\n\n"),
    ],
    ids=[
        "html",
        "no-type",
        "json-type-html",
        "json-empty",
        "empty",
        "wrong-id",
        "string-id",
        "only-notification",
        "result-and-error",
        "batch-of-numbers",
        "number",
        "sse-wrong-id",
        "sse-not-json",
    ],
)
def test_not_jsonrpc(era: str, response: Response) -> None:
    failure = failing_list(make_server(era), response)
    assert isinstance(failure, ConnectionFailed) and failure.cause == "not_jsonrpc"


@pytest.mark.parametrize("era", ["modern", "2025-11-25", "2025-06-18"])
@pytest.mark.parametrize("sse", [False, True])
def test_batch_where_none_is_allowed(era: str, sse: bool) -> None:
    server = make_server(era)
    driver = connected(server)
    server.overrides["tools/list"] = lambda req, body: batch(body["id"], sse, server.modern)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.cause == "not_jsonrpc"


def batch(rid: int, sse: bool, modern: bool) -> Response:
    value: dict[str, Any] = {"tools": [{"name": "b", "inputSchema": {}}]}
    if modern:
        value["resultType"] = "complete"
    messages = [{"jsonrpc": "2.0", "method": "notifications/progress"}, result(rid, value)]
    if sse:
        return sse_response(b"data: " + json.dumps(messages).encode() + b"\n\n")
    return json_response(messages)


@pytest.mark.parametrize("sse", [False, True])
def test_batch_accepted_in_2025_03_26(sse: bool) -> None:
    server = make_server("2025-03-26")
    driver = connected(server)
    server.overrides["tools/list"] = lambda req, body: batch(body["id"], sse, False)
    outcome = driver.ok(driver.list_tools())
    assert isinstance(outcome, ToolsListed) and outcome.tools[0].name == "b"


@pytest.mark.parametrize("sse", [False, True])
def test_hundred_thousand_deep_nesting(sse: bool) -> None:
    body = b'{"jsonrpc":"2.0","id":2,"result":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = (
        sse_response(b"data: " + body + b"\n\n")
        if sse
        else Response(headers=[(b"content-type", b"application/json")], chunks=[body])
    )
    failure = failing_list(FakeServer(), response)
    assert isinstance(failure, ConnectionFailed) and failure.cause == "not_jsonrpc"


def test_a_one_megabyte_number() -> None:
    body = b'{"jsonrpc":"2.0","id":2,"result":{"tools":[],"ttlMs":' + b"9" * 1_000_000 + b"}}"
    response = Response(headers=[(b"content-type", b"application/json")], chunks=[body])
    failure = failing_list(FakeServer(), response)
    assert isinstance(failure, ConnectionFailed) and failure.cause == "not_jsonrpc"


def test_oversized_sse_event_is_framing() -> None:
    server = FakeServer()
    driver = connected(server, limits=Limits(max_response_bytes=5000))
    server.overrides["tools/list"] = lambda req, body: sse_response(b"data: " + b"x" * 4000)
    # the event outgrows what remains of the budget: the budget fails first
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.cause in ("budget", "framing")


def test_content_all_dropped_is_server_answered() -> None:
    server = FakeServer()
    driver = connected(server)
    server.overrides["tools/call"] = lambda req, body: json_response(
        result(body["id"], {"resultType": "complete", "content": [{"type": "video"}]})
    )
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "no_usable_content"
    server.overrides.clear()
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)


# ---------------------------------------------------------------- machine API edges


def test_era_property_and_caller_errors() -> None:
    from sansmcp.core.errors import CallerError

    driver = Driver(FakeServer(modern=False, legacy="2025-11-25"))
    assert driver.machine.era == "unknown"
    driver.ok(driver.connect())
    assert driver.machine.era == "legacy"
    with pytest.raises(CallerError):
        driver.machine.call_tool("", b"{}", now=0.0)
    assert not driver.machine.busy


def test_informational_heads_and_trailers_are_charged() -> None:
    from sansmcp.core.http import (
        DataReceived,
        InformationalReceived,
        ResponseEnded,
        ResponseReceived,
        TrailersReceived,
    )

    server = FakeServer()
    driver = connected(server)
    before = driver.machine.bytes_received
    driver.machine.list_tools(now=0.0)
    start = driver.pending()
    assert start is not None and hasattr(start, "exchange_id")
    xid = start.exchange_id  # type: ignore[union-attr]
    body = json.dumps(result(2, {"resultType": "complete", "tools": []})).encode()
    for event in (
        InformationalReceived(exchange_id=xid, status=103, headers=(), raw_size=40),
        ResponseReceived(
            exchange_id=xid,
            status=200,
            headers=((b"content-type", b"application/json"),),
            raw_size=60,
        ),
        DataReceived(exchange_id=xid, data=body),
        TrailersReceived(exchange_id=xid, headers=(), raw_size=7),
        ResponseEnded(exchange_id=xid),
    ):
        driver.machine.receive(event, now=0.0)
    assert isinstance(driver.pending(), ToolsListed)
    assert driver.machine.bytes_received == before + 40 + 60 + len(body) + 7


def test_close_abandons_a_running_operation() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = connected(server)
    server.overrides["tools/call"] = never
    driver.machine.call_tool("echo", b"", now=0.0)
    driver.pump_side()
    call = driver.started[-1].exchange_id
    assert driver.close().__class__.__name__ == "Closed"
    assert call in driver.cancelled
    assert server.requests[-1].method == b"DELETE"
    n = len(server.requests)
    assert driver.close().__class__.__name__ == "Closed"  # again: no second DELETE
    assert len(server.requests) == n


def test_close_while_delete_is_in_flight_and_its_failure() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["DELETE"] = lambda req, body: Response(
        status=302, headers=[(b"location", b"/x")]
    )
    driver = connected(server)
    assert driver.close().__class__.__name__ == "Closed"
    assert not driver.machine.busy


def test_custom_headers_and_user_agent() -> None:
    from sansmcp.core.mcp import ConnSettings
    from sansmcp.core.url import parse_endpoint

    from .fakemcp import URL

    server = FakeServer()
    custom = ConnSettings(
        endpoint=parse_endpoint(URL),
        headers=((b"User-Agent", b"agent/1"), (b"X-Tenant", b"t1"), (b"Mcp-Session-Id", b"no")),
    )
    driver = Driver(server, settings=custom)
    driver.ok(driver.connect())
    headers = server.requests[0].headers
    assert [v for k, v in headers if k == b"user-agent"] == [b"agent/1"]
    assert (b"x-tenant", b"t1") in headers
    assert not any(k == b"mcp-session-id" for k, _ in headers)


def test_initialized_refused_and_bad_session_id() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["notifications/initialized"] = lambda req, body: Response(status=400)
    failure = Driver(server).failure(Driver(server).connect())
    assert isinstance(failure, ConnectionFailed) and failure.status == 400
    bad = FakeServer(modern=False, legacy="2025-11-25", session="has space")
    failure = Driver(bad).failure(Driver(bad).connect())
    assert isinstance(failure, ServerAnswered) and failure.reason == "bad_session_id"


def test_version_retry_that_names_the_version_tried_again() -> None:
    server = FakeServer()
    server.overrides["server/discover"] = lambda req, body: json_response(
        error(body["id"], -32022, "x", {"supported": ["2026-07-28"]}), 400
    )
    failure = Driver(server).failure(Driver(server).connect())
    assert isinstance(failure, ServerAnswered) and failure.reason == "unsupported_version"
