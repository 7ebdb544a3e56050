"""Hypothesis: whatever a server answers, every operation ends in exactly one terminal event
whose error (if any) is one of the three documented classes, and the byte counter equals the
bytes fed; a stateful run against the fake server with cursor graphs, version answers,
oversized bodies and time jumps keeps those invariants."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sansmcp.core.errors import ConnectionFailed, ServerAnswered, Unauthorized
from sansmcp.core.http import HttpRequest
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import (
    Closed,
    Connected,
    ConnSettings,
    OperationFailed,
    ToolCalled,
    ToolsListed,
)
from sansmcp.core.url import parse_endpoint
from tests.tiers import examples

from .fakemcp import URL, Driver, FakeServer, Response, error, result, tool

TERMINAL = (Connected, ToolsListed, ToolCalled, OperationFailed, Closed)
DOCUMENTED = (ConnectionFailed, Unauthorized, ServerAnswered)
VERSIONS = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "bogus"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)

near_results = st.fixed_dictionaries(
    {},
    optional={
        "resultType": st.sampled_from(["complete", "input_required", "other", 3]),
        "tools": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["a", "b", "", 3])},
                optional={"inputSchema": st.sampled_from([{}, {"type": "object"}, [], None])},
            ),
            max_size=3,
        ),
        "nextCursor": st.sampled_from([None, "", "c1", "c2", 5]),
        "content": st.lists(
            st.sampled_from(
                [{"type": "text", "text": "t"}, {"type": "image", "data": "!!"}, {"type": "x"}, 1]
            ),
            max_size=3,
        ),
        "isError": st.sampled_from([True, False, "yes"]),
        "requestState": st.sampled_from(["s", "", 5]),
        "inputRequests": st.sampled_from([{}, {"k": {"method": "elicitation/create"}}, [1]]),
        "supportedVersions": st.lists(st.sampled_from(VERSIONS), max_size=3),
        "protocolVersion": st.sampled_from(VERSIONS),
        "structuredContent": json_values,
        "ttlMs": json_values,
    },
)


@st.composite
def messages(draw: Any, rid: Any) -> Any:
    """A JSON-RPC message for request id ``rid``: near-valid, or anything."""
    kind = draw(st.sampled_from(["result", "error", "other-id", "note", "request", "any"]))
    if kind == "result":
        return result(rid, draw(near_results | json_values))
    if kind == "error":
        code = draw(st.sampled_from([-32022, -32020, -32601, -32000, 1.5]))
        data = draw(
            st.none() | st.fixed_dictionaries({"supported": st.lists(st.sampled_from(VERSIONS))})
        )
        return error(rid, code, "e", data)  # type: ignore[arg-type]
    if kind == "other-id":
        return result(
            draw(st.sampled_from([None, "1", rid + 1 if isinstance(rid, int) else 0])), {}
        )
    if kind == "note":
        return {"jsonrpc": "2.0", "method": "notifications/progress"}
    if kind == "request":
        return {
            "jsonrpc": "2.0",
            "id": draw(json_values),
            "method": draw(st.sampled_from(["ping", "elicitation/create", "x"])),
        }
    return draw(json_values)


@st.composite
def responses(draw: Any, rid: Any) -> Response:
    status = draw(
        st.sampled_from([200, 200, 200, 202, 301, 400, 401, 404, 405, 500]) | st.integers(100, 599)
    )
    ctype = draw(
        st.sampled_from(
            [
                b"application/json",
                b"text/event-stream",
                b"text/html",
                None,
                b"application/ld+json; charset=utf-8",
            ]
        )
    )
    headers = [] if ctype is None else [(b"content-type", ctype)]
    if draw(st.booleans()):
        headers.append((b"mcp-session-id", draw(st.sampled_from([b"s1", b"", b"\x01bad"]))))
    shape = draw(st.sampled_from(["json", "sse", "bytes", "empty"]))
    if shape == "json":
        body = json.dumps(draw(messages(rid))).encode()
    elif shape == "sse":
        events = draw(st.lists(messages(rid), max_size=4))
        body = b"".join(
            draw(st.sampled_from([b"", b": c\n", b"id: 7\n", b"retry: 5\n"]))
            + b"data: "
            + json.dumps(e).encode()
            + b"\n\n"
            for e in events
        )
    elif shape == "bytes":
        body = draw(st.binary(max_size=64))
    else:
        body = b""
    cuts = draw(st.integers(0, 16))
    chunks = [body[i : i + cuts] for i in range(0, len(body), cuts)] if cuts else [body]
    ending = draw(st.sampled_from(["end", "end", "fail", "open"]))
    return Response(
        status=status,
        headers=headers,
        chunks=chunks,
        end=ending != "open",
        fail=ConnectionFailed("reset", cause="reset") if ending == "fail" else None,
        raw_size=draw(st.integers(0, 300)),
    )


class Scripted:
    """Answers each request with a drawn response, then (after ``budget``) as the fake does."""

    def __init__(self, data: Any, server: FakeServer, budget: int) -> None:
        self.data = data
        self.server = server
        self.budget = budget

    def __call__(self, request: HttpRequest) -> Response | None:
        if self.budget <= 0:
            return self.server(request)
        self.budget -= 1
        self.server.requests.append(request)
        try:
            rid = json.loads(request.body).get("id") if request.body else None
        except ValueError:
            rid = None
        if self.data.draw(st.integers(0, 9)) == 0:
            return None  # never answered
        return self.data.draw(responses(rid if rid is not None else 0))


def check(driver: Driver, outcome: Any) -> None:
    assert isinstance(outcome, TERMINAL)
    if isinstance(outcome, OperationFailed):
        assert isinstance(outcome.error, DOCUMENTED), repr(outcome.error)
    assert driver.machine.bytes_received == driver.fed


LIMITS = Limits(max_responses=40, max_tool_pages=5, max_call_attempts=4, max_response_bytes=4000)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), legacy=st.sampled_from([None, "2025-11-25", "2025-03-26"]))
def test_arbitrary_answers_end_in_documented_outcomes(data: Any, legacy: str | None) -> None:
    server = FakeServer(modern=legacy is None, legacy=legacy)
    handler = Scripted(data, server, data.draw(st.integers(0, 6)))
    caps = data.draw(st.sampled_from([None, {"elicitation": {}}]))
    driver = Driver(
        handler,
        settings=ConnSettings(endpoint=parse_endpoint(URL), capabilities=caps),
        limits=LIMITS,
        input_handler=lambda requests: data.draw(st.sampled_from([None, {}, {"request": {}}])),
    )
    outcome = driver.connect()
    check(driver, outcome)
    if isinstance(outcome, OperationFailed) and driver.machine.protocol_version is None:
        return
    for op in data.draw(
        st.lists(st.sampled_from(["list", "call", "close"]), min_size=1, max_size=3)
    ):
        if op == "list":
            check(driver, driver.list_tools())
        elif op == "call":
            check(driver, driver.call("a", b'{"x":1}'))
        else:
            check(driver, driver.close())
            return


# ---------------------------------------------------------------- stateful


class ConnMachine(RuleBasedStateMachine):
    """One Conn against a fake server whose listings follow a random cursor graph."""

    def __init__(self) -> None:
        super().__init__()
        self.server = FakeServer()
        self.driver = Driver(
            self.server, limits=Limits(max_tool_pages=6, max_response_bytes=60_000)
        )
        self.terminals = 0
        self.exhausted = False

    @initialize(
        version=st.sampled_from(["modern", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]),
        sse=st.booleans(),
    )
    def connect(self, version: str, sse: bool) -> None:
        self.server.modern = version == "modern"
        self.server.legacy = None if version == "modern" else version
        self.server.sse = sse
        self.run(self.driver.connect)

    def run(self, operation: Any, *args: Any) -> Any:
        connected = self.driver.machine.protocol_version is not None or self.exhausted
        if not connected and operation != self.driver.connect:
            return None
        before = self.list_requests()
        outcome = operation(*args)
        self.terminals += 1
        check(self.driver, outcome)
        assert sum(isinstance(o, TERMINAL) for o in self.driver.outputs) == self.terminals
        assert self.list_requests() - before <= 6  # Limits.max_tool_pages
        error = outcome.error if isinstance(outcome, OperationFailed) else None
        if isinstance(error, ConnectionFailed) and error.cause == "budget":
            self.exhausted = True
        return outcome

    def list_requests(self) -> int:
        return sum(
            1 for b in self.server.bodies if isinstance(b, dict) and b.get("method") == "tools/list"
        )

    @rule(
        graph=st.dictionaries(
            st.sampled_from(["", "a", "b", "c"]),
            st.sampled_from([None, "", "a", "b", "c"]),
            max_size=4,
        ),
        first=st.sampled_from([None, "", "a"]),
    )
    def list_with_cursor_graph(self, graph: dict[str, str | None], first: str | None) -> None:
        server = self.server

        def listing(request: HttpRequest, body: Any) -> Response:
            cursor = (body.get("params") or {}).get("cursor")
            following = first if cursor is None else graph.get(cursor)
            value: dict[str, Any] = {"tools": [tool(f"t{cursor}")]}
            if following is not None:
                value["nextCursor"] = following
            if server.modern:
                value["resultType"] = "complete"
            return server.wrap(result(body["id"], value))

        server.overrides["tools/list"] = listing
        outcome = self.run(self.driver.list_tools)
        if isinstance(outcome, OperationFailed) and isinstance(outcome.error, ServerAnswered):
            assert outcome.error.reason in ("cursor_cycle", "max_tool_pages")

    @rule(size=st.integers(0, 30_000))
    def oversized_call(self, size: int) -> None:
        server = self.server
        server.overrides["tools/call"] = lambda req, body: server.wrap(
            result(
                body["id"],
                {"resultType": "complete", "content": [{"type": "text", "text": "x" * size}]},
            )
        )
        self.run(self.driver.call, "echo", b"{}")

    @rule(seconds=st.floats(0, 1000))
    def time_jump(self, seconds: float) -> None:
        self.driver.now += seconds

    @rule()
    def plain_call(self) -> None:
        self.server.overrides.pop("tools/call", None)
        self.run(self.driver.call, "echo", b'{"k":"v"}')

    @invariant()
    def counters(self) -> None:
        assert self.driver.machine.bytes_received == self.driver.fed
        assert not self.driver.machine.busy


ConnMachine.TestCase.settings = settings(
    max_examples=examples(25),
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestConnMachine = ConnMachine.TestCase
