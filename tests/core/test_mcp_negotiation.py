"""Negotiation transcripts: modern probe, -32022, legacy detection and handshake, hints."""

from __future__ import annotations

import json

import pytest

from sansmcp.core.errors import CallerError, ConnectionFailed, ServerAnswered, Unauthorized
from sansmcp.core.http import header_value
from sansmcp.core.mcp import Closed, Connected, ConnSettings, ToolsListed
from sansmcp.core.url import parse_endpoint

from .fakemcp import URL, Driver, FakeServer, Response, error, json_response, result

LEGACY = ("2025-11-25", "2025-06-18", "2025-03-26")


def settings(**kwargs: object) -> ConnSettings:
    return ConnSettings(endpoint=parse_endpoint(URL), **kwargs)  # type: ignore[arg-type]


def test_modern_probe_carries_meta_and_modern_headers() -> None:
    server = FakeServer()
    driver = Driver(server, settings=settings(bearer_token="tok", meta={"traceparent": "00-ab"}))
    outcome = driver.ok(driver.connect())
    assert outcome == Connected(protocol_version="2026-07-28")
    assert driver.machine.era == "modern"
    request = server.requests[0]
    headers = dict(request.headers)
    assert headers[b"accept"] == b"application/json, text/event-stream"
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"mcp-protocol-version"] == b"2026-07-28"
    assert headers[b"mcp-method"] == b"server/discover"
    assert headers[b"authorization"] == b"Bearer tok"
    assert headers[b"user-agent"].startswith(b"sansmcp/")
    assert b"mcp-session-id" not in headers
    meta = server.bodies[0]["params"]["_meta"]
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
    assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "sansmcp"
    assert meta["traceparent"] == "00-ab"
    assert request.method == b"POST" and request.target == b"/mcp"
    assert request.authority == b"mcp.example.com"


@pytest.mark.parametrize("version", LEGACY)
def test_legacy_server_gets_initialize_then_initialized(version: str) -> None:
    server = FakeServer(modern=False, legacy=version)
    driver = Driver(server)
    assert driver.ok(driver.connect()) == Connected(protocol_version=version)
    assert driver.methods() == ["server/discover", "initialize", "notifications/initialized"]
    init = server.requests[1]
    assert header_value(init.headers, b"mcp-protocol-version") is None
    assert header_value(init.headers, b"mcp-method") is None
    params = server.bodies[1]["params"]
    assert params["protocolVersion"] == "2025-11-25"
    assert params["capabilities"] == {}
    assert "_meta" not in params
    initialized = server.requests[2]
    assert header_value(initialized.headers, b"mcp-session-id") == b"session-1"
    expected = None if version == "2025-03-26" else version.encode()
    assert header_value(initialized.headers, b"mcp-protocol-version") == expected
    listed = driver.ok(driver.list_tools())
    assert isinstance(listed, ToolsListed) and [t.name for t in listed.tools] == ["echo"]
    assert header_value(server.requests[3].headers, b"mcp-session-id") == b"session-1"


def test_unsupported_version_with_legacy_only_overlap_goes_legacy() -> None:
    server = FakeServer(modern=False, legacy="2025-06-18")
    server.overrides["server/discover"] = lambda req, body: json_response(
        error(
            body["id"],
            -32022,
            "unsupported",
            {"supported": ["2025-06-18"], "requested": "2026-07-28"},
        ),
        400,
    )
    driver = Driver(server)
    assert driver.ok(driver.connect()) == Connected(protocol_version="2025-06-18")
    assert server.bodies[1]["params"]["protocolVersion"] == "2025-06-18"


def test_unsupported_version_with_no_overlap_is_server_answered() -> None:
    server = FakeServer()
    server.overrides["server/discover"] = lambda req, body: json_response(
        error(body["id"], -32022, "unsupported", {"supported": ["2099-01-01"], "requested": "x"}),
        400,
    )
    driver = Driver(server)
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ServerAnswered) and failure.reason == "unsupported_version"
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "response",
    [
        Response(status=400),
        Response(status=405),
        Response(status=404, headers=[(b"content-type", b"text/plain")], chunks=[b"nope"]),
        json_response(error(1, -32601, "no such method"), 404),
        json_response(error(None, -32000, "No valid session ID"), 400),
        json_response(result(1, {"tools": []})),
        json_response(error(1, -32602, "bad params")),
    ],
    ids=["400", "405", "404-text", "404-32601", "400-session", "200-no-resultType", "200-error"],
)
def test_legacy_detection_table(response: Response) -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["server/discover"] = lambda req, body: response
    driver = Driver(server)
    assert driver.ok(driver.connect()) == Connected(protocol_version="2025-11-25")


@pytest.mark.parametrize("code", [-32020, -32021])
def test_modern_errors_do_not_fall_back(code: int) -> None:
    server = FakeServer(legacy="2025-11-25")
    server.overrides["server/discover"] = lambda req, body: json_response(
        error(body["id"], code, "x"), 400
    )
    driver = Driver(server)
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ServerAnswered) and failure.code == code


def test_legacy_only_versions_skip_the_probe() -> None:
    server = FakeServer(modern=False, legacy="2025-03-26")
    driver = Driver(server, settings=settings(protocol_versions=("2025-03-26",)))
    assert driver.ok(driver.connect()) == Connected(protocol_version="2025-03-26")
    assert driver.methods() == ["initialize", "notifications/initialized"]


def test_modern_only_versions_refuse_a_legacy_server() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = Driver(server, settings=settings(protocol_versions=("2026-07-28",)))
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ServerAnswered) and failure.reason == "unsupported_version"


def test_initialize_answer_with_an_unknown_version_is_server_answered() -> None:
    server = FakeServer(modern=False, legacy="2024-11-05")
    driver = Driver(server)
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ServerAnswered) and failure.reason == "unsupported_version"


def test_initialize_error_naming_supported_versions_is_retried_once() -> None:
    server = FakeServer(modern=False, legacy="2025-06-18")
    calls = []

    def init(req: object, body: dict) -> Response | None:
        calls.append(body["params"]["protocolVersion"])
        if body["params"]["protocolVersion"] != "2025-06-18":
            return json_response(error(body["id"], -32602, "bad", {"supported": ["2025-06-18"]}))
        return server.default(req, body)  # type: ignore[arg-type]

    server.overrides["initialize"] = init
    driver = Driver(server, settings=settings(protocol_versions=LEGACY))
    assert driver.ok(driver.connect()) == Connected(protocol_version="2025-06-18")
    assert calls == ["2025-11-25", "2025-06-18"]


def test_modern_era_hint_skips_the_probe() -> None:
    server = FakeServer()
    driver = Driver(server, settings=settings(era_hint="2026-07-28"))
    assert driver.ok(driver.connect()) == Connected(protocol_version="2026-07-28")
    assert server.requests == []
    driver.ok(driver.list_tools())
    assert driver.methods() == ["tools/list"]


def test_wrong_modern_hint_falls_back_and_restarts_the_operation() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = Driver(server, settings=settings(era_hint="2026-07-28"))
    driver.ok(driver.connect())
    listed = driver.ok(driver.list_tools())
    assert isinstance(listed, ToolsListed) and listed.tools[0].name == "echo"
    assert driver.machine.protocol_version == "2025-11-25"
    assert driver.methods() == [
        "tools/list",
        "server/discover",
        "initialize",
        "notifications/initialized",
        "tools/list",
    ]


def test_legacy_hint_goes_straight_to_initialize() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = Driver(server, settings=settings(era_hint="2025-11-25", protocol_versions=LEGACY))
    driver.ok(driver.connect())
    assert driver.methods() == ["initialize", "notifications/initialized"]


@pytest.mark.parametrize("answers_input", [False, True])
def test_a_remembered_legacy_era_skips_the_probe(answers_input: bool) -> None:
    """Issue 10 H.2: initialize, initialized, the operation, (the GET,) the DELETE."""
    server = FakeServer(modern=False, legacy="2025-11-25")
    capabilities = {"elicitation": {}} if answers_input else None
    driver = Driver(server, settings=settings(era_hint="2025-11-25", capabilities=capabilities))
    assert driver.ok(driver.connect()) == Connected(protocol_version="2025-11-25")
    driver.ok(driver.list_tools())
    assert isinstance(driver.close(), Closed)
    expected = ["initialize", "notifications/initialized"]
    expected += ["GET"] if answers_input else []
    assert driver.methods() == [*expected, "tools/list", "DELETE"]


def test_a_wrong_legacy_hint_reprobes() -> None:
    server = FakeServer()  # modern only: initialize is answered -32022 with HTTP 400
    driver = Driver(server, settings=settings(era_hint="2025-11-25"))
    assert driver.ok(driver.connect()) == Connected(protocol_version="2026-07-28")
    assert driver.methods() == ["initialize", "server/discover"]
    driver.ok(driver.list_tools())


@pytest.mark.parametrize(
    "answer",
    [
        Response(status=400),
        json_response(error(1, -32601, "method not found"), 404),
        json_response(result(1, {"protocolVersion": "2024-11-05"})),
    ],
)
def test_any_unusable_answer_to_a_hinted_initialize_reprobes(answer: Response) -> None:
    server = FakeServer(modern=False, legacy="2025-06-18")
    server.overrides["initialize"] = lambda req, body: answer
    driver = Driver(server, settings=settings(era_hint="2025-11-25"))
    failure = driver.failure(driver.connect())  # the probe says legacy; initialize fails again
    assert driver.methods() == ["initialize", "server/discover", "initialize"]
    assert isinstance(failure, ConnectionFailed | ServerAnswered)


def test_a_legacy_hint_with_only_legacy_versions_does_not_reprobe() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["initialize"] = lambda req, body: Response(status=400)
    driver = Driver(server, settings=settings(era_hint="2025-11-25", protocol_versions=LEGACY))
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ConnectionFailed) and failure.status == 400
    assert driver.methods() == ["initialize"]


def test_session_expiry_reinitializes_once_and_restarts_listing() -> None:
    server = FakeServer(
        modern=False,
        legacy="2025-11-25",
        tools=[{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(4)],
        page_size=2,
    )
    driver = Driver(server)
    driver.ok(driver.connect())
    expired = {"done": False}

    def tools_list(req: object, body: dict) -> Response | None:
        if body["params"] and body["params"].get("cursor") and not expired["done"]:
            expired["done"] = True
            server.sessions.clear()
        return server.default(req, body)  # type: ignore[arg-type]

    server.overrides["tools/list"] = tools_list
    listed = driver.ok(driver.list_tools())
    assert isinstance(listed, ToolsListed)
    assert [t.name for t in listed.tools] == ["t0", "t1", "t2", "t3"]
    assert driver.methods()[3:] == [
        "tools/list",
        "tools/list",
        "initialize",
        "notifications/initialized",
        "tools/list",
        "tools/list",
    ]


def test_second_session_expiry_is_connection_failed() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = Driver(server)
    driver.ok(driver.connect())
    server.overrides["tools/list"] = lambda req, body: Response(status=404)
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.cause == "session_expired"


def test_close_sends_delete_with_the_session_for_legacy_only() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    driver = Driver(server)
    driver.ok(driver.connect())
    assert driver.close() == Closed()
    delete = server.requests[-1]
    assert delete.method == b"DELETE" and delete.body == b""
    assert header_value(delete.headers, b"mcp-session-id") == b"session-1"
    assert header_value(delete.headers, b"content-type") is None
    modern = FakeServer()
    driver = Driver(modern)
    driver.ok(driver.connect())
    assert driver.close() == Closed()
    assert len(modern.requests) == 1


def test_close_ignores_a_failing_delete() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["DELETE"] = lambda req, body: None  # never answers
    driver = Driver(server)
    driver.ok(driver.connect())
    assert driver.close() == Closed()
    assert driver.now == pytest.approx(2.0)  # Limits.close_timeout


def test_unauthorized_on_probe_carries_the_challenge() -> None:
    server = FakeServer()
    server.overrides["server/discover"] = lambda req, body: Response(
        status=401,
        headers=[(b"www-authenticate", b'Bearer resource_metadata="https://a/b", scope="x"')],
    )
    driver = Driver(server)
    failure = driver.failure(driver.connect())
    assert isinstance(failure, Unauthorized) and failure.status == 401
    assert failure.challenges[0][0] == "bearer"
    assert failure.challenges[0][1]["resource_metadata"] == "https://a/b"


def test_caller_errors_are_value_errors_before_io() -> None:
    with pytest.raises(CallerError):
        Driver(FakeServer(), settings=settings(protocol_versions=("1999-01-01",)))
    driver = Driver(FakeServer())
    driver.ok(driver.connect())
    for bad in (b"[1]", b"{", b'{"a": NaN}', b'{"a":1,"a":2}', b"\xff"):
        with pytest.raises(ValueError):
            driver.machine.call_tool("echo", bad, now=0.0)
    assert driver.methods() == ["server/discover"]


def test_arguments_are_spliced_verbatim() -> None:
    server = FakeServer()
    driver = Driver(server)
    driver.ok(driver.connect())
    raw = b'{ "text" : "h\\u00e9",  "n": 1.50 }'
    driver.ok(driver.call("echo", raw))
    assert raw in server.requests[-1].body
    assert json.loads(server.requests[-1].body)["params"]["arguments"] == {"text": "hé", "n": 1.5}


def test_unsupported_version_naming_ours_is_retried_exactly_once() -> None:
    """A server mid-deploy may reject the version it then lists (conformance: request-metadata)."""
    server = FakeServer()
    rejected = {"n": 0}

    def discover(req: object, body: dict) -> Response | None:
        if rejected["n"] < 1:
            rejected["n"] += 1
            data = {"supported": ["2026-07-28"], "requested": "2026-07-28"}
            return json_response(error(body["id"], -32022, "unsupported", data), 400)
        return server.default(req, body)  # type: ignore[arg-type]

    server.overrides["server/discover"] = discover
    driver = Driver(server)
    assert driver.ok(driver.connect()) == Connected(protocol_version="2026-07-28")
    assert len(server.requests) == 2
    ids = [body["id"] for body in server.bodies]
    assert ids[0] != ids[1]
    rejected["n"] = -10  # now it rejects forever
    driver = Driver(server)
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ServerAnswered) and failure.reason == "unsupported_version"
    assert len(server.requests) == 4
