"""tools/call through the MCP machine: headers, -32020, results, multi round-trip (MRTR)."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from sansmcp.core.errors import CallerError, ConnectionFailed, ServerAnswered
from sansmcp.core.http import HttpRequest, header_value
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import (
    ConnSettings,
    InputRequired,
    OperationFailed,
    StartExchange,
    ToolCalled,
    ToolsListed,
)
from sansmcp.core.results import CallResult, Content
from sansmcp.core.url import parse_endpoint
from tests.tiers import examples

from .fakemcp import (
    HANDLER_RETURNS,
    URL,
    Driver,
    FakeServer,
    Response,
    error,
    result,
    sendable,
    tool,
)
from .test_mcp_streams import h11_accepts

HEADERED = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "n": {"type": "integer", "x-mcp-header": "Count"},
    },
}


def settings(**kwargs: Any) -> ConnSettings:
    return ConnSettings(endpoint=parse_endpoint(URL), **kwargs)


def connected(server: FakeServer, **kwargs: Any) -> Driver:
    driver = Driver(server, **kwargs)
    driver.ok(driver.connect())
    return driver


def called(driver: Driver, name: str = "echo", arguments: bytes = b"") -> CallResult:
    outcome = driver.ok(driver.call(name, arguments))
    assert isinstance(outcome, ToolCalled)
    return outcome.result


def call_requests(server: FakeServer) -> list[tuple[HttpRequest, dict[str, Any]]]:
    return [
        (r, b)
        for r, b in zip(server.requests, server.bodies, strict=True)
        if isinstance(b, dict) and b.get("method") == "tools/call"
    ]


def answer_calls(server: FakeServer, results: Iterator[dict[str, Any]]) -> None:
    """Answer successive tools/call requests with the given result values."""
    server.overrides["tools/call"] = lambda req, body: server.wrap(
        result(body["id"], next(results))
    )


COMPLETE = {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}


# ---------------------------------------------------------------- request headers


@pytest.mark.parametrize(
    ("name", "header"),
    [
        ("echo", b"echo"),
        ("na\u00efve", b"=?base64?" + base64.b64encode("na\u00efve".encode()) + b"?="),
        (" padded", b"=?base64?" + base64.b64encode(b" padded") + b"?="),
    ],
)
def test_mcp_name_on_every_modern_call(name: str, header: bytes) -> None:
    server = FakeServer()
    driver = connected(server)
    called(driver, name)
    called(driver, name)
    calls = call_requests(server)
    assert len(calls) == 2
    for request, body in calls:
        assert header_value(request.headers, b"mcp-name") == header
        assert header_value(request.headers, b"mcp-method") == b"tools/call"
        assert body["params"]["name"] == name


def test_mcp_param_headers_from_a_listing_on_this_conn() -> None:
    server = FakeServer(tools=[tool("geo", inputSchema=HEADERED)])
    driver = connected(server)
    called(driver, "geo", b'{"region":"us-west1","n":3}')
    assert header_value(call_requests(server)[0][0].headers, b"mcp-param-region") is None
    driver.ok(driver.list_tools())
    called(driver, "geo", b'{"region":"us-west1","n":3}')
    headers = call_requests(server)[1][0].headers
    assert header_value(headers, b"mcp-param-region") == b"us-west1"
    assert header_value(headers, b"mcp-param-count") == b"3"


def test_mcp_param_headers_from_caller_schemas_without_a_listing() -> None:
    server = FakeServer()
    driver = connected(server, settings=settings(tool_schemas={"geo": HEADERED}))
    called(driver, "geo", b'{"region":" eu "}')
    request = call_requests(server)[0][0]
    assert header_value(request.headers, b"mcp-param-region") == b"=?base64?IGV1IA==?="
    assert header_value(request.headers, b"mcp-param-count") is None
    assert server.bodies.count(None) == 0 and len(server.requests) == 2  # no listing


def test_an_unusable_caller_schema_is_a_caller_error_and_the_conn_stays_usable() -> None:
    bad = {"type": "object", "properties": {"r": {"type": "number", "x-mcp-header": "R"}}}
    server = FakeServer()
    driver = connected(server, settings=settings(tool_schemas={"geo": bad}))
    with pytest.raises(CallerError):
        driver.machine.call_tool("geo", b"{}", now=0.0)
    assert not driver.machine.busy
    assert len(server.requests) == 1  # no I/O for the refused call
    called(driver, "echo")


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2025-03-26"])
def test_no_modern_headers_on_legacy_calls(version: str) -> None:
    server = FakeServer(modern=False, legacy=version, tools=[tool("geo", inputSchema=HEADERED)])
    driver = connected(server, settings=settings(tool_schemas={"geo": HEADERED}))
    called(driver, "geo", b'{"region":"x"}')
    driver.ok(driver.list_tools())
    called(driver, "geo", b'{"region":"x"}')
    for request, body in call_requests(server):
        names = {k for k, _ in request.headers}
        assert not {b"mcp-name", b"mcp-method", b"mcp-param-region"} & names
        assert header_value(request.headers, b"mcp-session-id") == b"session-1"
        assert "_meta" not in body["params"]


def test_meta_extras_reach_legacy_calls() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = connected(server, settings=settings(meta={"traceparent": "00-1"}))
    called(driver)
    assert call_requests(server)[0][1]["params"]["_meta"] == {"traceparent": "00-1"}


# ---------------------------------------------------------------- -32020


def test_header_mismatch_relists_once_and_retries_once() -> None:
    server = FakeServer(tools=[tool("geo", inputSchema=HEADERED)])
    driver = connected(server)
    seen: list[Any] = []

    def call(request: HttpRequest, body: Any) -> Response | None:
        seen.append(header_value(request.headers, b"mcp-param-region"))
        if len(seen) == 1:
            return server.wrap(error(body["id"], -32020, "header mismatch"))
        return server.default(request, body)

    server.overrides["tools/call"] = call
    called(driver, "geo", b'{"region":"r1"}')
    assert driver.methods()[1:] == ["tools/call", "tools/list", "tools/call"]
    assert seen == [None, b"r1"]


def test_a_second_header_mismatch_is_server_answered() -> None:
    server = FakeServer()
    driver = connected(server)
    server.overrides["tools/call"] = lambda req, body: server.wrap(
        error(body["id"], -32020, "header mismatch")
    )
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ServerAnswered) and failure.code == -32020
    assert driver.methods()[1:] == ["tools/call", "tools/list", "tools/call"]


def test_legacy_header_mismatch_code_is_just_an_error() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = connected(server)
    server.overrides["tools/call"] = lambda req, body: server.wrap(error(body["id"], -32020, "x"))
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ServerAnswered) and failure.code == -32020
    assert driver.methods()[3:] == ["tools/call"]


# ---------------------------------------------------------------- results


@pytest.mark.parametrize("era", ["modern", "2025-11-25"])
def test_result_parsing(era: str) -> None:
    server = FakeServer() if era == "modern" else FakeServer(modern=False, legacy=era)
    driver = connected(server)
    png = base64.b64encode(b"\x89PNG").decode()
    value: dict[str, Any] = {
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "data": png, "mimeType": "image/png"},
            {"type": "tool_use", "id": "x"},
        ],
        "isError": True,
        "structuredContent": {"b": 1, "a": [1, 2]},
    }
    answer_calls(server, iter([value]))
    got = called(driver)
    assert got.is_error is True
    assert got.content[0] == Content(type="text", text="hi")
    assert got.content[1].data == b"\x89PNG" and got.content[1].mime_type == "image/png"
    assert len(got.content) == 2
    assert got.structured_content == b'{"b":1,"a":[1,2]}'


def test_result_type_absent_is_complete_and_unknown_is_refused() -> None:
    server = FakeServer()
    driver = connected(server)
    answer_calls(server, iter([{"content": []}, {"content": [], "resultType": "later"}]))
    assert called(driver) == CallResult(content=[], is_error=False, structured_content=None)
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "unknown_result_type"


def test_content_all_dropped_is_server_answered() -> None:
    server = FakeServer()
    driver = connected(server)
    answer_calls(server, iter([{"content": [{"type": "tool_use"}, {"type": "image"}]}]))
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "no_usable_content"


# ---------------------------------------------------------------- multi round-trip


def asking(state: Any = None, requests: Any = None) -> dict[str, Any]:
    value: dict[str, Any] = {"resultType": "input_required"}
    if state is not None:
        value["requestState"] = state
    if requests is not None:
        value["inputRequests"] = requests
    return value


@pytest.mark.parametrize("jitter", [0.0, 0.5, 0.9])
def test_request_state_only_is_retried_after_backoff(jitter: float) -> None:
    server = FakeServer()
    driver = connected(server, jitter=lambda: jitter)
    states = ["s\u00e91", "", "s3", "s4", "s5", "s6"]
    answer_calls(server, iter([*(asking(state=s) for s in states), COMPLETE]))
    start = driver.now
    assert called(driver).content[0].text == "done"
    delays = [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
    assert driver.now - start == pytest.approx(sum(delays) * (0.5 + jitter))
    calls = call_requests(server)
    assert len(calls) == 7
    assert "requestState" not in calls[0][1]["params"]
    assert [b["params"]["requestState"] for _, b in calls[1:]] == states
    ids = [b["id"] for _, b in calls]
    assert len(set(ids)) == len(ids)
    assert all("inputResponses" not in b["params"] for _, b in calls)


def test_each_backoff_waits_its_own_delay() -> None:
    server = FakeServer()
    driver = connected(server)
    times: list[float] = []

    def call(request: HttpRequest, body: Any) -> Response:
        times.append(driver.now)
        value = COMPLETE if len(times) == 4 else asking(state="s")
        return server.wrap(result(body["id"], value))

    server.overrides["tools/call"] = call
    called(driver)
    assert [round(b - a, 9) for a, b in itertools.pairwise(times)] == [0.05, 0.1, 0.2]


def test_empty_input_requests_is_load_shedding() -> None:
    server = FakeServer()
    driver = connected(server)
    answer_calls(server, iter([asking(requests={}), asking(requests={}, state="k"), COMPLETE]))
    called(driver)
    calls = call_requests(server)
    assert len(calls) == 3
    assert "requestState" not in calls[1][1]["params"]
    assert calls[2][1]["params"]["requestState"] == "k"
    assert driver.now == pytest.approx(0.15)


ELICIT = {"confirm": {"method": "elicitation/create", "params": {"message": "sure?"}}}


def test_input_requests_without_capabilities_fail_at_once() -> None:
    server = FakeServer()
    driver = connected(server)
    answer_calls(server, iter([asking(requests=ELICIT, state="s")]))
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "input_required"
    assert failure.data == ELICIT
    assert len(call_requests(server)) == 1
    assert not any(isinstance(o, InputRequired) for o in driver.outputs)


@pytest.mark.parametrize("state", [None, "opaque-\u2603"])
def test_input_requests_answered_by_the_handler(state: str | None) -> None:
    server = FakeServer()
    asked: list[Mapping[str, Any]] = []

    def handler(requests: Mapping[str, Any]) -> Mapping[str, Any]:
        asked.append(requests)
        return {"confirm": {"action": "accept", "content": {}}}

    driver = connected(
        server, settings=settings(capabilities={"elicitation": {}}), input_handler=handler
    )
    answer_calls(server, iter([asking(requests=ELICIT, state=state), COMPLETE]))
    called(driver)
    assert asked == [ELICIT]
    events = [o for o in driver.outputs if isinstance(o, InputRequired)]
    assert len(events) == 1 and events[0].server_request is False
    first, retry = (b for _, b in call_requests(server))
    assert first["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {
        "elicitation": {}
    }
    assert retry["params"]["inputResponses"] == {"confirm": {"action": "accept", "content": {}}}
    assert retry["params"].get("requestState") == state
    assert retry["id"] != first["id"]
    assert driver.now == 0.0  # an answered ask is retried at once


def test_input_declined_by_the_handler() -> None:
    server = FakeServer()
    driver = connected(
        server,
        settings=settings(capabilities={"elicitation": {}}),
        input_handler=lambda requests: None,
    )
    answer_calls(server, iter([asking(requests=ELICIT)]))
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "input_declined"


def test_an_unanswered_ask_times_out_with_the_call() -> None:
    server = FakeServer()
    driver = Driver(server, settings=settings(capabilities={"elicitation": {}}))
    driver.input_handler = None
    driver.ok(driver.connect())
    answer_calls(server, iter([asking(requests=ELICIT)]))
    driver.machine.call_tool("echo", b"", now=0.0)
    start = driver.machine.next_output()
    assert isinstance(start, StartExchange)
    driver.deliver(start.exchange_id, server(start.request) or Response())
    ask = driver.pending()
    assert isinstance(ask, InputRequired)
    assert driver.machine.next_deadline() == 120.0
    driver.machine.answer_input(999, {}, now=1.0)  # unknown id: ignored
    failure = driver.failure(driver.pump())
    assert isinstance(failure, ConnectionFailed) and failure.bound == "call_timeout"
    assert driver.now == 120.0
    driver.machine.answer_input(ask.input_id, {}, now=121.0)  # too late: ignored
    assert driver.machine.next_output() is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (asking(), "malformed_result"),
        (asking(state=5), "bad_request_state"),
        (asking(state="x" * 65), "bad_request_state"),
        (asking(requests=[1]), "malformed_result"),
        (asking(requests={"a": {"params": {}}}), "malformed_result"),
        (asking(requests={"a": 1}), "malformed_result"),
    ],
)
def test_malformed_input_required(value: dict[str, Any], reason: str) -> None:
    server = FakeServer()
    driver = connected(
        server,
        settings=settings(capabilities={"elicitation": {}}),
        input_handler=lambda r: {},
        limits=Limits(max_echo_bytes=64),
    )
    answer_calls(server, iter([value]))
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ServerAnswered) and failure.reason == reason
    assert len(call_requests(server)) == 1


@pytest.mark.parametrize("era", ["modern", "2025-11-25"])
def test_max_call_attempts(era: str) -> None:
    server = FakeServer() if era == "modern" else FakeServer(modern=False, legacy=era)
    driver = connected(server, limits=Limits(max_call_attempts=3))
    answer_calls(server, itertools.repeat(asking(state="again")))
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "max_call_attempts"
    assert failure.bound == "max_call_attempts" and failure.limit == 3
    assert len(call_requests(server)) == 3


def test_a_server_asking_forever_is_bounded_by_call_timeout() -> None:
    server = FakeServer()
    driver = connected(server, limits=Limits(call_timeout=2.0, max_call_attempts=10_000))
    answer_calls(server, itertools.repeat(asking(state="again")))
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound, failure.limit) == ("timeout", "call_timeout", 2.0)
    assert driver.now == 2.0
    # 0.05 + 0.1 + 0.2 + 0.4 + 0.5 + 0.5 = 1.75 s of backoff, then a 0.5 s sleep cut short
    assert len(call_requests(server)) == 7
    server.overrides.clear()
    called(driver)  # the connection is still usable


def test_arguments_go_verbatim_in_every_attempt() -> None:
    server = FakeServer()
    driver = connected(server)
    answer_calls(server, iter([asking(state="s"), COMPLETE]))
    raw = b'{"z": 1, "a":  [true]}'
    called(driver, "echo", raw)
    assert all(raw in r.body for r, _ in call_requests(server))
    assert json.loads(call_requests(server)[1][0].body)["params"]["arguments"] == {
        "z": 1,
        "a": [True],
    }


# ---------------------------------------------------------------- server data in headers (10 E)


@hsettings(max_examples=examples(150), deadline=None)
@given(
    names=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3, unique=True),
    header=st.text(max_size=12),
    value=st.text(max_size=12),
)
def test_tool_names_and_x_mcp_headers_never_make_an_invalid_request(
    names: list[str], header: str, value: str
) -> None:
    """Names and ``x-mcp-header`` annotations are server data that reach headers
    (``Mcp-Name``, ``Mcp-Param-*``): whatever they are, h11 sends every request."""
    schema = {
        "type": "object",
        "properties": {"p": {"type": "string", "x-mcp-header": header}},
    }
    server = FakeServer(tools=[tool(name, inputSchema=schema) for name in names])
    driver = connected(server)
    listed = driver.list_tools()
    assert isinstance(listed, ToolsListed)
    arguments = json.dumps({"p": value}).encode()
    for listed_tool in listed.tools:
        outcome = driver.call(listed_tool.name, arguments)
        assert isinstance(outcome, ToolCalled | OperationFailed)
    for start in driver.started:
        h11_accepts(start.request)


@hsettings(max_examples=examples(300), deadline=None)
@given(answer=HANDLER_RETURNS)
def test_any_value_an_input_handler_returns_is_sent_as_given_or_a_caller_error(
    answer: Any,
) -> None:
    server = FakeServer()
    driver = connected(
        server,
        settings=settings(capabilities={"elicitation": {}}),
        input_handler=lambda requests: answer,
    )
    answer_calls(server, iter([asking(requests=ELICIT, state="s"), COMPLETE]))
    if not sendable(answer):
        with pytest.raises(CallerError):
            driver.call("echo")
        return
    outcome = driver.call("echo")
    if answer is None:
        assert isinstance(driver.failure(outcome), ServerAnswered)
        return
    assert isinstance(outcome, ToolCalled)
    retry = call_requests(server)[1][1]
    assert retry["params"]["inputResponses"] == json.loads(json.dumps(answer))
