"""Event-stream responses: notifications, priming events, chunking invariance, legacy server
requests, modern re-issue, legacy resumption with Last-Event-ID."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import CallerError, ConnectionFailed, ServerAnswered
from sansmcp.core.fieldvalue import echoable
from sansmcp.core.http import DataReceived, HttpRequest, ResponseEnded, header_value
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import (
    CancelExchange,
    Closed,
    ConnSettings,
    InputRequired,
    StartExchange,
    ToolCalled,
    ToolsListed,
)
from sansmcp.core.url import parse_endpoint
from sansmcp.core.wire.h1 import H1Connection
from tests.tiers import examples

from .fakemcp import (
    HANDLER_RETURNS,
    URL,
    Driver,
    FakeServer,
    Response,
    json_response,
    result,
    sendable,
    sse_response,
    tool,
)

NOTE = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
LOG = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}


def conn_settings(**kwargs: Any) -> ConnSettings:
    return ConnSettings(endpoint=parse_endpoint(URL), **kwargs)


def make_server(era: str, **kwargs: Any) -> FakeServer:
    if era == "modern":
        return FakeServer(**kwargs)
    return FakeServer(modern=False, legacy=era, **kwargs)


def connected(server: FakeServer, **kwargs: Any) -> Driver:
    driver = Driver(server, **kwargs)
    driver.ok(driver.connect())
    return driver


def list_result(server: FakeServer, rid: Any, names: tuple[str, ...] = ("echo",)) -> Any:
    value: dict[str, Any] = {"tools": [tool(n) for n in names]}
    if server.modern:
        value["resultType"] = "complete"
    return result(rid, value)


def bodies_of(server: FakeServer, method: str) -> list[dict[str, Any]]:
    return [b for b in server.bodies if isinstance(b, dict) and b.get("method") == method]


# ---------------------------------------------------------------- SSE bodies


def noisy_listing(server: FakeServer) -> Callable[[HttpRequest, Any], Response]:
    def answer(request: HttpRequest, body: Any) -> Response:
        return sse_response(
            b": keep-alive comment\n\n",
            b"id: prime-1\ndata:\n\n",  # a priming event: id and empty data
            b"retry: 1000\n\n",
            NOTE,
            b"event: message\ndata: " + json.dumps(LOG).encode() + b"\n\n",
            b'data: {"jsonrpc":"2.0",\ndata: "id":' + str(body["id"]).encode() + b",\n"
            b'data: "result":' + json.dumps(list_result(server, 0)["result"]).encode() + b"}\n\n",
            NOTE,  # after the response: ignored
        )

    return answer


@pytest.mark.parametrize("era", ["modern", "2025-11-25", "2025-03-26"])
def test_sse_with_comments_priming_and_notifications_before_the_response(era: str) -> None:
    server = make_server(era)
    server.overrides["tools/list"] = noisy_listing(server)
    driver = connected(server)
    outcome = driver.ok(driver.list_tools())
    assert isinstance(outcome, ToolsListed) and [t.name for t in outcome.tools] == ["echo"]
    assert driver.machine.bytes_received == driver.fed


@pytest.mark.parametrize("era", ["modern", "2025-11-25"])
def test_sse_server_default_answers(era: str) -> None:
    driver = connected(make_server(era, sse=True))
    assert isinstance(driver.ok(driver.list_tools()), ToolsListed)
    assert isinstance(driver.ok(driver.call("echo", b'{"a":1}')), ToolCalled)


def transcript(era: str, chunk: Any) -> tuple[Any, list[bytes], int]:
    server = make_server(era, sse=True, tools=[tool(f"t{i}") for i in range(3)], page_size=2)
    server.overrides["tools/call"] = lambda req, body: sse_response(
        b": c\n\nid: 1\ndata:\n\n",
        NOTE,
        result(body["id"], {"content": [{"type": "text", "text": "\u00e9" * 50}]}),
    )
    driver = Driver(server, chunk=chunk)
    outcomes: list[Any] = [driver.connect(), driver.list_tools(), driver.call("echo")]
    return outcomes, [r.body for r in server.requests], driver.machine.bytes_received


@pytest.mark.parametrize("era", ["modern", "2025-06-18"])
def test_byte_by_byte_equals_whole(era: str) -> None:
    whole = transcript(era, None)
    assert transcript(era, 1) == whole
    assert transcript(era, 7) == whole
    assert isinstance(whole[0][2], ToolCalled)


@settings(max_examples=examples(25), deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30))
def test_random_chunking_is_invariant(cuts: list[int]) -> None:
    def split(data: bytes) -> list[bytes]:
        pieces, pos, i = [], 0, 0
        while pos < len(data):
            size = cuts[i % len(cuts)]
            pieces.append(data[pos : pos + size])
            pos += size
            i += 1
        return pieces

    assert transcript("modern", split) == transcript("modern", None)
    assert transcript("2025-11-25", split) == transcript("2025-11-25", None)


# ---------------------------------------------------------------- legacy server requests


@pytest.mark.parametrize("server_id", [7, "7", "abc", 0])
def test_legacy_ping_on_the_stream_is_answered(server_id: Any) -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["tools/list"] = lambda req, body: sse_response(
        {"jsonrpc": "2.0", "id": server_id, "method": "ping"}, list_result(server, body["id"])
    )
    driver = connected(server)
    driver.ok(driver.list_tools())
    assert server.answers == [{"jsonrpc": "2.0", "id": server_id, "result": {}}]
    answer = next(
        r for r, b in zip(server.requests, server.bodies, strict=True) if b in server.answers
    )
    assert answer.method == b"POST"
    assert header_value(answer.headers, b"mcp-session-id") == b"session-1"
    assert header_value(answer.headers, b"mcp-protocol-version") == b"2025-11-25"
    assert header_value(answer.headers, b"content-type") == b"application/json"


def test_legacy_elicitation_without_capabilities_gets_an_error() -> None:
    server = FakeServer(modern=False, legacy="2025-06-18")
    server.overrides["tools/call"] = lambda req, body: sse_response(
        {"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create", "params": {}},
        result(body["id"], {"content": []}),
    )
    driver = connected(server)
    driver.ok(driver.call("echo"))
    assert len(server.answers) == 1
    assert server.answers[0]["id"] == "e1" and server.answers[0]["error"]["code"] == -32601
    assert not any(isinstance(o, InputRequired) for o in driver.outputs)


def waiting_for_answer(driver: Driver, server: FakeServer, request: Any) -> None:
    """tools/call streams ``request``; the response follows once the client answered."""

    def call(req: HttpRequest, body: Any) -> Response:
        return sse_response(request, end=False)

    def answered(req: HttpRequest, body: Any) -> Response:
        server.answers.append(body)
        exchange = next(
            s.exchange_id for s in driver.started if b'"method":"tools/call"' in s.request.body
        )
        rid = json.loads(server.requests[-2].body)["id"]
        data = b"data: " + json.dumps(result(rid, {"content": []})).encode() + b"\n\n"
        driver.feed(DataReceived(exchange_id=exchange, data=data))
        driver.feed(ResponseEnded(exchange_id=exchange))
        return Response(status=202)

    server.overrides["tools/call"] = call
    server.overrides["None"] = answered


@pytest.mark.parametrize("decision", ["accept", "decline"])
def test_legacy_elicitation_with_capabilities_goes_to_the_handler(decision: str) -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    asked: list[Any] = []

    def handler(requests: Any) -> Any:
        asked.append(requests)
        return {"request": {"action": "accept"}} if decision == "accept" else None

    driver = connected(
        server, settings=conn_settings(capabilities={"elicitation": {}}), input_handler=handler
    )
    elicit = {"jsonrpc": "2.0", "id": 9, "method": "elicitation/create", "params": {"m": 1}}
    waiting_for_answer(driver, server, elicit)
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert asked == [{"request": {"method": "elicitation/create", "params": {"m": 1}}}]
    events = [o for o in driver.outputs if isinstance(o, InputRequired)]
    assert len(events) == 1 and events[0].server_request is True
    if decision == "accept":
        assert server.answers == [{"jsonrpc": "2.0", "id": 9, "result": {"action": "accept"}}]
    else:
        assert server.answers[0]["id"] == 9 and server.answers[0]["error"]["code"] == -32600


@pytest.mark.parametrize("era", ["2025-11-25", "modern"])
def test_more_than_max_server_requests_fails(era: str) -> None:
    server = make_server(era)
    pings = [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(4)]
    server.overrides["tools/list"] = lambda req, body: sse_response(
        *pings, list_result(server, body["id"])
    )
    driver = connected(server, limits=Limits(max_server_requests=3))
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.bound == "max_server_requests"
    assert (failure.limit, failure.observed) == (3, 4)
    assert len(server.answers) == (3 if era != "modern" else 0)
    server.overrides.pop("tools/list")  # a per-request bound: the connection stays usable
    assert driver.ok(driver.list_tools())


# ---------------------------------------------------------------- modern re-issue


def breaking(times: int, then: Callable[[Any], Response]) -> Callable[[HttpRequest, Any], Response]:
    count = {"n": 0}

    def answer(request: HttpRequest, body: Any) -> Response:
        count["n"] += 1
        if count["n"] <= times:
            return sse_response(b"id: 1\nretry: 10\ndata:\n\n")  # priming, then the end
        return then(body)

    return answer


def test_modern_listing_is_reissued_with_a_new_id() -> None:
    server = FakeServer()
    server.overrides["tools/list"] = breaking(
        3,
        lambda body: (
            server.default(
                HttpRequest(method=b"POST", scheme=b"https", authority=b"x", target=b"/"), body
            )
            or Response()
        ),
    )
    driver = connected(server)
    driver.ok(driver.list_tools())
    ids = [b["id"] for b in bodies_of(server, "tools/list")]
    assert len(ids) == 4 and len(set(ids)) == 4
    assert all(r.method == b"POST" for r in server.requests)
    assert driver.now == 0.0  # re-issue does not wait


@pytest.mark.parametrize("method", ["tools/list", "server/discover"])
def test_modern_reissue_is_bounded(method: str) -> None:
    server = FakeServer()
    server.overrides[method] = breaking(1000, lambda body: Response())
    driver = Driver(server, limits=Limits(max_stream_retries=2))
    outcome = driver.connect() if method == "server/discover" else connected_list(driver)
    failure = driver.failure(outcome)
    assert isinstance(failure, ConnectionFailed) and failure.bound == "max_stream_retries"
    assert failure.cause == "stream_broken" and failure.observed == 3
    assert len(bodies_of(server, method)) == 3


def connected_list(driver: Driver) -> Any:
    driver.ok(driver.connect())
    return driver.list_tools()


def test_modern_discover_is_reissued() -> None:
    server = FakeServer()
    server.overrides["server/discover"] = breaking(
        1,
        lambda body: (
            server.default(HttpRequest(method=b"POST", scheme=b"", authority=b"", target=b""), body)
            or Response()
        ),
    )
    driver = Driver(server)
    driver.ok(driver.connect())
    ids = [b["id"] for b in bodies_of(server, "server/discover")]
    assert len(ids) == 2 and ids[0] != ids[1]


def test_progress_resets_the_reissue_count() -> None:
    server = FakeServer()
    count = {"n": 0}

    def answer(request: HttpRequest, body: Any) -> Response:
        count["n"] += 1
        if count["n"] <= 5:
            return sse_response(NOTE)  # progress, then the stream ends
        return sse_response(list_result(server, body["id"]))

    server.overrides["tools/list"] = answer
    driver = connected(server, limits=Limits(max_stream_retries=1))
    driver.ok(driver.list_tools())
    assert count["n"] == 6


def test_a_broken_modern_call_is_not_reissued() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = breaking(1, lambda body: Response())
    driver = connected(server)
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ConnectionFailed) and failure.cause == "stream_broken"
    assert len(bodies_of(server, "tools/call")) == 1


def complete_call(body: Any) -> Response:
    return sse_response(result(body["id"], {"resultType": "complete", "content": []}))


def test_a_broken_call_to_an_idempotent_tool_is_reissued() -> None:
    server = FakeServer(tools=[tool("get", annotations={"idempotentHint": True}), tool("put")])
    server.overrides["tools/call"] = breaking(2, complete_call)
    driver = connected(server)
    driver.ok(driver.list_tools())
    assert isinstance(driver.ok(driver.call("get")), ToolCalled)
    ids = [b["id"] for b in bodies_of(server, "tools/call")]
    assert len(ids) == 3 and len(set(ids)) == 3
    server.overrides["tools/call"] = breaking(1, complete_call)
    failure = driver.failure(driver.call("put"))
    assert isinstance(failure, ConnectionFailed) and failure.cause == "stream_broken"


def test_reissue_calls_opt_in() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = breaking(1, complete_call)
    driver = connected(server, settings=conn_settings(reissue_calls=True))
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert len(bodies_of(server, "tools/call")) == 2


def test_a_reset_mid_stream_is_its_cause() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = lambda req, body: Response(
        headers=[(b"content-type", b"text/event-stream")],
        chunks=[b"data: " + json.dumps(NOTE).encode() + b"\n\n"],
        fail=ConnectionFailed("reset by peer", cause="reset"),
    )
    driver = connected(server)
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ConnectionFailed) and failure.cause == "reset"


# ---------------------------------------------------------------- legacy resumption


def legacy_breaking(
    server: FakeServer, first: bytes, gets: list[Callable[[Any], Response]]
) -> list[HttpRequest]:
    seen: list[HttpRequest] = []
    rid: dict[str, Any] = {}

    def listing(request: HttpRequest, body: Any) -> Response:
        rid["id"] = body["id"]
        return sse_response(first)

    def get(request: HttpRequest, body: Any) -> Response:
        seen.append(request)
        return gets[min(len(seen), len(gets)) - 1](rid["id"])

    server.overrides["tools/list"] = listing
    server.overrides["GET"] = get
    return seen


@pytest.mark.parametrize("era", ["2025-11-25", "2025-03-26"])
def test_legacy_stream_resumes_with_last_event_id_after_retry(era: str) -> None:
    server = FakeServer(modern=False, legacy=era)
    gets = legacy_breaking(
        server,
        b"id: ev-1\nretry: 250\ndata:\n\n" + b"data: " + json.dumps(NOTE).encode() + b"\n\n",
        [lambda rid: sse_response(list_result(server, rid, ("resumed",)))],
    )
    driver = connected(server)
    outcome = driver.ok(driver.list_tools())
    assert isinstance(outcome, ToolsListed) and outcome.tools[0].name == "resumed"
    assert len(gets) == 1
    get = gets[0]
    assert get.method == b"GET" and get.body == b""
    assert header_value(get.headers, b"last-event-id") == b"ev-1"
    assert header_value(get.headers, b"accept") == b"text/event-stream"
    assert header_value(get.headers, b"content-type") is None
    assert header_value(get.headers, b"mcp-session-id") == b"session-1"
    assert driver.now == pytest.approx(0.25)


def test_legacy_stream_without_an_id_is_broken() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    gets = legacy_breaking(
        server, b"retry: 10\n\n" + b"data: " + json.dumps(NOTE).encode() + b"\n\n", []
    )
    driver = connected(server)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.cause == "stream_broken"
    assert gets == []


@pytest.mark.parametrize("event_id", [b"caf\xc3\xa9", b"x" * 65])
def test_legacy_event_id_that_cannot_be_echoed_is_broken(event_id: bytes) -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    gets = legacy_breaking(server, b"id: " + event_id + b"\ndata:\n\n", [])
    driver = connected(server, limits=Limits(max_echo_bytes=64))
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.cause == "stream_broken"
    assert gets == []


def test_legacy_endless_breaks_are_bounded() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    gets = legacy_breaking(
        server, b"id: 5\nretry: 100\ndata:\n\n", [lambda rid: sse_response(b": nothing\n\n")]
    )
    driver = connected(server, limits=Limits(max_stream_retries=3))
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.bound == "max_stream_retries"
    assert len(gets) == 3
    assert all(header_value(g.headers, b"last-event-id") == b"5" for g in gets)
    assert driver.now == pytest.approx(0.3)  # retry (100 ms) carries over to every resumption


def test_legacy_resumed_stream_with_a_new_id_resumes_from_it() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    gets = legacy_breaking(
        server,
        b"id: 1\ndata:\n\n",
        [
            lambda rid: sse_response(b"id: 2\ndata: " + json.dumps(NOTE).encode() + b"\n\n"),
            lambda rid: sse_response(list_result(server, rid)),
        ],
    )
    driver = connected(server)
    driver.ok(driver.list_tools())
    assert [header_value(g.headers, b"last-event-id") for g in gets] == [b"1", b"2"]
    assert driver.now == 0.0  # no retry field: resume at once


def test_legacy_get_refused_is_http_status() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    legacy_breaking(server, b"id: 1\ndata:\n\n", [lambda rid: Response(status=405)])
    driver = connected(server)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.status == 405


# ---------------------------------------------------------------- legacy standalone GET stream


ELICIT = {"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {"m": 2}}
ACCEPT = {"request": {"action": "accept", "content": {"n": 1}}}


def listening(server: FakeServer, **kwargs: Any) -> Driver:
    """A legacy session whose embedder answers input; the GET stream stays open, silent."""
    server.overrides.setdefault("GET", lambda req, body: sse_response(end=False))
    return connected(
        server,
        settings=conn_settings(capabilities={"elicitation": {}}),
        input_handler=lambda requests: ACCEPT,
        **kwargs,
    )


def gets_of(driver: Driver) -> list[StartExchange]:
    return [s for s in driver.started if s.request.method == b"GET"]


def send_on(driver: Driver, exchange_id: int, *messages: Any) -> None:
    for message in messages:
        data = b"data: " + json.dumps(message).encode() + b"\n\n"
        driver.feed(DataReceived(exchange_id=exchange_id, data=data))


def call_answered_after_a_listen_request(server: FakeServer, driver: Driver, rid: int) -> None:
    """tools/call stays silent; the server asks on the GET stream; our answer completes it."""
    call_id: dict[str, Any] = {}

    def call(req: HttpRequest, body: Any) -> Response:
        call_id["id"] = body["id"]
        send_on(driver, gets_of(driver)[-1].exchange_id, {**ELICIT, "id": rid})
        return sse_response(end=False)

    def answered(req: HttpRequest, body: Any) -> Response:
        server.answers.append(body)
        exchange = [s for s in driver.started if b'"method":"tools/call"' in s.request.body][-1]
        send_on(driver, exchange.exchange_id, result(call_id["id"], {"content": []}))
        driver.feed(ResponseEnded(exchange_id=exchange.exchange_id))
        return Response(status=202)

    server.overrides["tools/call"] = call
    server.overrides["None"] = answered


def test_legacy_requests_on_the_standalone_stream_reach_the_handler() -> None:
    """A legacy server may send its requests only on the GET stream (TS SDK v1 does)."""
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server)
    assert driver.methods() == ["server/discover", "initialize", "notifications/initialized", "GET"]
    (get,) = gets_of(driver)
    assert header_value(get.request.headers, b"accept") == b"text/event-stream"
    assert header_value(get.request.headers, b"mcp-session-id") == b"session-1"
    assert header_value(get.request.headers, b"last-event-id") is None
    call_answered_after_a_listen_request(server, driver, 0)
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert server.answers == [{"jsonrpc": "2.0", "id": 0, "result": ACCEPT["request"]}]
    assert get.exchange_id not in driver.cancelled  # kept for the session's life


def test_one_standalone_stream_per_session_serves_every_call() -> None:
    """Issue 10 H.1: a request on the GET stream during the second call is answered."""
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server)
    for rid in (7, 8, 9):
        call_answered_after_a_listen_request(server, driver, rid)
        assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert [a["id"] for a in server.answers] == [7, 8, 9]
    (get,) = gets_of(driver)
    assert isinstance(driver.close(), Closed)
    assert get.exchange_id in driver.cancelled
    assert driver.methods()[-1] == "DELETE"


def test_a_standalone_stream_the_server_ends_is_reopened_a_bounded_number_of_times() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    opened: list[HttpRequest] = []

    def get(req: HttpRequest, body: Any) -> Response:
        opened.append(req)
        return sse_response(f"id: g{len(opened)}\ndata:\n\n".encode())  # ends at once

    server.overrides["GET"] = get
    driver = listening(server, limits=Limits(max_stream_retries=2))
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert len(opened) == 3  # the first and max_stream_retries re-opens, for the session
    assert [header_value(r.headers, b"last-event-id") for r in opened] == [None, b"g1", b"g2"]


@pytest.mark.parametrize("status", [405, 409])
def test_a_refused_standalone_stream_is_not_reopened(status: int) -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["GET"] = lambda req, body: Response(status=status)
    driver = listening(server)
    for _ in range(3):
        assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert len(gets_of(driver)) == 1


def test_a_standalone_stream_without_a_head_in_time_is_dropped() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["GET"] = lambda req, body: None  # never answered
    driver = listening(server, limits=Limits(dial_timeout=1.0, call_timeout=2.0))
    (get,) = gets_of(driver)
    server.overrides["tools/call"] = lambda req, body: None
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ConnectionFailed) and failure.bound == "call_timeout"
    assert get.exchange_id in driver.cancelled
    server.overrides.pop("tools/call")
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert len(gets_of(driver)) == 1


def test_session_expiry_replaces_the_standalone_stream() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server)
    (first,) = gets_of(driver)
    server.sessions.clear()
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    old, new = gets_of(driver)
    assert old is first and first.exchange_id in driver.cancelled
    assert new.exchange_id not in driver.cancelled


def test_a_request_on_the_standalone_stream_between_operations_is_answered() -> None:
    """Between operations the machine still answers: ping at once, others when asked."""
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server)
    (get,) = gets_of(driver)
    send_on(driver, get.exchange_id, {"jsonrpc": "2.0", "id": "p", "method": "ping"}, ELICIT)
    answer = driver.pending()
    assert isinstance(answer, StartExchange)
    assert json.loads(answer.request.body) == {"jsonrpc": "2.0", "id": "p", "result": {}}
    ask = driver.pending()
    assert isinstance(ask, InputRequired) and ask.server_request
    driver.machine.answer_input(ask.input_id, ACCEPT, now=driver.now)
    reply = driver.pending()
    assert isinstance(reply, StartExchange)
    assert json.loads(reply.request.body)["result"] == ACCEPT["request"]


def test_server_requests_on_the_standalone_stream_are_bounded_per_operation() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server, limits=Limits(max_server_requests=2))
    (get,) = gets_of(driver)
    pings = [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(2)]
    for _ in range(2):  # two per operation, twice: within the bound each time
        send_on(driver, get.exchange_id, *pings)
        assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert get.exchange_id not in driver.cancelled
    send_on(driver, get.exchange_id, *pings, *pings)  # over it: the stream is dropped
    assert get.exchange_id in driver.cancelled
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert len(gets_of(driver)) == 1


def test_pending_server_answers_are_sent_before_the_delete_at_close() -> None:
    """Issue 10 E: close never cancels answers already sent; they finish, then DELETE."""
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server)
    (get,) = gets_of(driver)
    send_on(
        driver, get.exchange_id, *[{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(5)]
    )
    server.overrides["None"] = lambda req, body: None  # the answers' replies come later
    driver.machine.close(now=driver.now)
    answers = []
    while (out := driver.pending()) is not None:
        if isinstance(out, StartExchange):
            answers.append(out)
        else:
            assert isinstance(out, CancelExchange) and out.exchange_id == get.exchange_id
    assert len(answers) == 5 and driver.machine.busy
    for answer in answers:
        driver.deliver(answer.exchange_id, Response(status=202))
    delete = driver.pending()
    assert isinstance(delete, StartExchange) and delete.request.method == b"DELETE"
    driver.deliver(delete.exchange_id, Response(status=200))
    assert isinstance(driver.pending(), Closed)


def test_close_waits_for_pending_answers_at_most_close_timeout() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server, limits=Limits(close_timeout=0.5))
    (get,) = gets_of(driver)
    send_on(driver, get.exchange_id, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    server.overrides["None"] = lambda req, body: None  # never answered
    server.overrides["DELETE"] = lambda req, body: None
    assert isinstance(driver.close(), Closed)
    assert driver.now == pytest.approx(0.5)
    assert "DELETE" not in driver.methods()  # the bound was spent waiting for the answer


def test_close_declines_a_server_request_still_waiting_for_the_embedder() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server)
    (get,) = gets_of(driver)
    send_on(driver, get.exchange_id, ELICIT)
    ask = driver.pending()
    assert isinstance(ask, InputRequired)
    assert isinstance(driver.close(), Closed)
    assert server.answers == [
        {
            "jsonrpc": "2.0",
            "id": 0,
            "error": {"code": -32600, "message": "the client closed the connection"},
        }
    ]
    driver.machine.answer_input(ask.input_id, ACCEPT, now=driver.now)  # too late: ignored
    assert driver.pending() is None


@pytest.mark.parametrize("era", ["2025-11-25", "modern"])
def test_no_standalone_stream_without_an_input_handler_or_modern(era: str) -> None:
    server = make_server(era)
    capabilities = {"elicitation": {}} if era == "modern" else None
    driver = connected(server, settings=conn_settings(capabilities=capabilities))
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert "GET" not in driver.methods()


def test_a_refused_or_garbled_standalone_stream_does_not_hurt_the_call() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["GET"] = lambda req, body: sse_response(b"data: {not json\n\n", end=False)
    driver = connected(server, settings=conn_settings(capabilities={"elicitation": {}}))
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    server.overrides["GET"] = lambda req, body: Response(status=405)
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)


# ---------------------------------------------------------------- socket reuse and refused streams


@pytest.mark.parametrize("ends", [True, False])
def test_an_answer_on_a_stream_waits_briefly_for_the_stream_to_end(ends: bool) -> None:
    """So an HTTP/1.1 socket is free again for the next request (Limits.stream_end_wait)."""
    server = FakeServer(sse=True)
    driver = connected(server)
    server.overrides["tools/list"] = lambda req, body: sse_response(
        list_result(server, body["id"]), end=ends
    )
    start = driver.now
    assert isinstance(driver.ok(driver.list_tools()), ToolsListed)
    assert driver.now - start == pytest.approx(0.0 if ends else Limits().stream_end_wait)
    listing = next(s for s in driver.started if b"tools/list" in s.request.body)
    assert (listing.exchange_id in driver.cancelled) is False  # still draining, within grace
    if not ends:  # the stream that never ended is dropped cancel_grace after its answer
        deadline = driver.machine.next_deadline()
        assert deadline == pytest.approx(start + Limits().cancel_grace)
        driver.machine.handle_timer(now=deadline)
        assert driver.machine.next_output() == CancelExchange(exchange_id=listing.exchange_id)
    assert driver.machine.next_deadline() is None


def test_a_bad_tail_after_the_answer_does_not_lose_the_answer() -> None:
    server = FakeServer(sse=True)
    driver = connected(server)
    server.overrides["tools/list"] = lambda req, body: sse_response(
        list_result(server, body["id"]), b"data: {broken\n\n", end=False
    )
    listed = driver.ok(driver.list_tools())
    assert isinstance(listed, ToolsListed) and listed.tools[0].name == "echo"


@pytest.mark.parametrize("era", ["2025-11-25", "modern"])
def test_a_refused_request_is_sent_again_at_most_max_stream_retries_times(era: str) -> None:
    server = make_server(era)
    driver = connected(server)
    refused = ConnectionFailed("GOAWAY before processing; a retry is safe", cause="refused")
    count = {"n": 0}

    def refusing(times: int) -> Callable[[HttpRequest, Any], Response]:
        def answer(request: HttpRequest, body: Any) -> Response | None:
            count["n"] += 1
            if count["n"] <= times:
                return Response(head=False, fail=refused)
            return server.default(request, body)

        return answer

    server.overrides["tools/list"] = refusing(2)
    assert isinstance(driver.ok(driver.list_tools()), ToolsListed)
    bodies = bodies_of(server, "tools/list")
    assert len(bodies) == 3 and len({b["id"] for b in bodies}) == 1  # never processed: same id
    count["n"] = 0
    server.overrides["tools/list"] = refusing(100)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.cause == "refused"
    assert count["n"] == Limits().max_stream_retries + 1


# ---------------------------------------------------------------- values sent back (issue 10 E)

_VISIBLE = bytes(range(0x21, 0x7F))


def _rule(raw: bytes, limit: int, spaces: bool) -> bool:
    """The rule of ``echoable``, written out independently."""
    inside = _VISIBLE + (b" \t" if spaces else b"")
    return (
        0 < len(raw) <= limit
        and raw[:1] in [bytes([b]) for b in _VISIBLE]
        and raw[-1:] in [bytes([b]) for b in _VISIBLE]
        and all(byte in inside for byte in raw)
    )


def h11_accepts(request: HttpRequest) -> None:
    """Raise unless h11 (directly and through the h1 wire machine) sends ``request``."""
    headers = [(b"host", request.authority), *request.headers]
    h11.Connection(h11.CLIENT).send(
        h11.Request(method=request.method, target=request.target, headers=headers)
    )
    wire = H1Connection(limits=Limits(), now=0.0)
    wire.start(1, request, now=0.0)
    assert wire.data_to_send()


@pytest.mark.parametrize(
    ("value", "spaces", "expected"),
    [
        (b"abc", True, b"abc"),
        ("abc", True, b"abc"),
        (b"a b\tc", True, b"a b\tc"),
        (b"a b", False, None),  # session ids: visible ASCII only (MCP spec)
        (b"abc ", True, None),  # the reported case: trailing space
        (b" abc", True, None),
        (b"a\tb\t", True, None),
        (b"a\r\nb", True, None),
        (b"a\x00b", True, None),
        (b"a\x7fb", True, None),
        (b"caf\xc3\xa9", True, None),  # obs-text refused
        ("café", True, None),
        (b"", True, None),
        (b"x" * 9, True, None),  # over the limit (8 here)
        (b"x" * 8, True, b"x" * 8),
    ],
)
def test_echoable_table(value: str | bytes, spaces: bool, expected: bytes | None) -> None:
    assert echoable(value, 8, spaces=spaces) == expected


@settings(max_examples=examples(500), deadline=None)
@given(raw=st.binary(max_size=40), spaces=st.booleans())
def test_echoable_binary_is_the_rule_and_h11_sends_what_it_keeps(raw: bytes, spaces: bool) -> None:
    kept = echoable(raw, 32, spaces=spaces)
    assert (kept is not None) == _rule(raw, 32, spaces)
    if kept is not None:
        assert kept == raw
        h11_accepts(
            HttpRequest(
                method=b"GET", scheme=b"http", authority=b"a", target=b"/", headers=((b"x", kept),)
            )
        )


@settings(max_examples=examples(500), deadline=None)
@given(text=st.text(max_size=40))
def test_echoable_text_is_the_rule_on_its_ascii_bytes(text: str) -> None:
    kept = echoable(text, 32)
    expected = text.isascii() and _rule(text.encode("ascii"), 32, True)
    assert (kept is not None) == expected
    if kept is not None:
        assert kept == text.encode("ascii")


def test_legacy_event_id_with_a_trailing_space_is_treated_as_absent() -> None:
    """The reported case: ``id: abc `` was echoed and h11 raised out of list_tools."""
    server = FakeServer(modern=False, legacy="2025-11-25")
    gets = legacy_breaking(
        server,
        b"id: 1\ndata: " + json.dumps(NOTE).encode() + b"\n\n",
        [
            lambda rid: sse_response(b"id: abc \ndata:\n\n"),
            lambda rid: sse_response(list_result(server, rid)),
        ],
    )
    # sse_response sends each event as one chunk: "id: 1" is kept, "abc " is not.
    driver = connected(server)
    assert isinstance(driver.ok(driver.list_tools()), ToolsListed)
    assert [header_value(g.headers, b"last-event-id") for g in gets] == [b"1", b"1"]
    for start in driver.started:
        h11_accepts(start.request)


def test_legacy_stream_whose_only_id_fails_is_broken() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    gets = legacy_breaking(server, b"id: abc \ndata:\n\n", [])
    driver = connected(server)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.cause == "stream_broken"
    assert gets == []


_TERMINAL_CLASSES = (ConnectionFailed, ServerAnswered)


@settings(max_examples=examples(200), deadline=None)
@given(ids=st.lists(st.binary(max_size=20), min_size=1, max_size=4))
def test_arbitrary_event_ids_never_make_an_invalid_request(ids: list[bytes]) -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    events = [b"id:" + raw + b"\ndata:\n\n" for raw in ids]
    gets = legacy_breaking(
        server,
        events[0],
        [(lambda rid, e=e: sse_response(e)) for e in events[1:]]
        + [lambda rid: sse_response(list_result(server, rid))],
    )
    driver = connected(server)
    outcome = driver.list_tools()
    if not isinstance(outcome, ToolsListed):
        assert isinstance(driver.failure(outcome), _TERMINAL_CLASSES)
    for start in driver.started:
        h11_accepts(start.request)
    for get in gets:
        sent = header_value(get.headers, b"last-event-id")
        assert sent is not None and echoable(sent, Limits().max_echo_bytes) == sent


@settings(max_examples=examples(200), deadline=None)
@given(session=st.binary(min_size=1, max_size=40))
def test_arbitrary_session_ids_never_make_an_invalid_request(session: bytes) -> None:
    server = FakeServer(modern=False, legacy="2025-11-25", session=None)

    def initialize(request: HttpRequest, body: Any) -> Response:
        response = server.default(request, body)
        assert response is not None
        response.headers.append((b"mcp-session-id", session))
        return response

    server.overrides["initialize"] = initialize
    driver = Driver(server)
    outcome = driver.connect()
    if echoable(session, Limits().max_echo_bytes, spaces=False) is None:
        failure = driver.failure(outcome)
        assert isinstance(failure, ServerAnswered) and failure.reason == "bad_session_id"
    else:
        driver.ok(outcome)
        driver.close()
        assert header_value(driver.started[-1].request.headers, b"mcp-session-id") == session
    for start in driver.started:
        h11_accepts(start.request)


def test_a_standalone_stream_that_breaks_is_reopened_one_that_never_started_is_not() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    heads: list[bool] = [True, False]

    def get(req: HttpRequest, body: Any) -> Response:
        head = heads.pop(0) if heads else True
        return Response(
            headers=[(b"content-type", b"text/event-stream")],
            fail=ConnectionFailed("reset by peer", cause="reset"),
            head=head,
        )

    server.overrides["GET"] = get
    driver = listening(server)
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert len(gets_of(driver)) == 2  # broke after its head: re-opened; then no head: dropped


def test_a_second_close_while_closing_changes_nothing() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["DELETE"] = lambda req, body: None
    driver = listening(server)
    driver.machine.close(now=driver.now)
    driver.machine.close(now=driver.now)
    assert isinstance(driver.pump(), Closed)
    assert driver.methods().count("DELETE") == 1


def test_an_answer_past_its_own_deadline_lets_the_close_go_on() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server, limits=Limits(dial_timeout=0.2, close_timeout=1.0))
    (get,) = gets_of(driver)
    send_on(driver, get.exchange_id, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    server.overrides["None"] = lambda req, body: None  # the answer is never acknowledged
    assert isinstance(driver.close(), Closed)
    assert driver.methods()[-1] == "DELETE"
    assert driver.now == pytest.approx(0.2)


def test_close_with_a_multi_round_trip_ask_pending_sends_no_answer() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = lambda req, body: json_response(
        result(
            body["id"],
            {
                "resultType": "input_required",
                "inputRequests": {"a": {"method": "elicitation/create", "params": {}}},
            },
        )
    )
    driver = connected(server, settings=conn_settings(capabilities={"elicitation": {}}))
    driver.machine.call_tool("echo", b"{}", now=driver.now)
    while not isinstance(out := driver.pending(), InputRequired):
        assert isinstance(out, StartExchange)
        response = server(out.request)
        assert response is not None
        driver.deliver(out.exchange_id, response)
    assert not out.server_request
    assert isinstance(driver.close(), Closed)
    assert server.answers == []


def test_outputs_set_aside_are_wanted_only_while_their_exchange_or_ask_lives() -> None:
    """A driver that deferred outputs (no operation ran) asks before acting on them."""
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server)
    (get,) = gets_of(driver)
    send_on(driver, get.exchange_id, {"jsonrpc": "2.0", "id": "p", "method": "ping"}, ELICIT)
    answer, ask = driver.pending(), driver.pending()
    assert isinstance(answer, StartExchange) and isinstance(ask, InputRequired)
    machine = driver.machine
    assert machine.wanted(answer) and machine.wanted(ask) and machine.wanted(get)
    machine.close(now=driver.now)
    assert machine.wanted(answer)  # an answer is still sent at close
    assert not machine.wanted(ask)  # declined by the close
    assert not machine.wanted(get)  # the standalone stream ends with the connection
    assert machine.wanted(CancelExchange(exchange_id=get.exchange_id))


@settings(max_examples=examples(150), deadline=None)
@given(answer=HANDLER_RETURNS)
def test_any_value_answering_a_server_request_is_sent_declined_or_a_caller_error(
    answer: Any,
) -> None:
    """A legacy server request's answer: the ``request`` result when it is a JSON object,
    a decline when it is missing or not an object, a CallerError when unsendable."""
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = listening(server)
    (get,) = gets_of(driver)
    send_on(driver, get.exchange_id, ELICIT)
    ask = driver.pending()
    assert isinstance(ask, InputRequired) and ask.server_request
    if not sendable(answer):
        with pytest.raises(CallerError):
            driver.machine.answer_input(ask.input_id, answer, now=driver.now)
        return
    driver.machine.answer_input(ask.input_id, answer, now=driver.now)
    reply = driver.pending()
    assert isinstance(reply, StartExchange)
    sent = json.loads(reply.request.body)
    if answer is not None and isinstance(answer.get("request"), dict):
        assert sent["result"] == json.loads(json.dumps(answer["request"]))
    else:
        assert sent["error"]["message"] == "declined by the user"
