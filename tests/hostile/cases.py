"""The hostile cases: what each server does, and what the client must make of it.

Every :class:`Case` names a misbehaving server (built fresh per run), the client's
operations and scaled-down ``Limits``, and an :class:`Expect`: the exact error class
and attributes per DESIGN.md's boundary table, the deadline it must hit (within
``SLACK``) or else ``QUICK``, and how many requests of each kind the server may see.
``fast=True`` cases run in ``make test``; all run under ``make hostile``
(``SANSMCP_HOSTILE_FULL=1``).  ``python -m tests.hostile.cases`` prints the README table.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sansmcp.core.limits import Limits

from ..timing import WALL, assert_within
from . import red_attacks as red
from .answers import (
    LEGACY,
    MODERN,
    PARSED_SIZE,
    Answer,
    Request,
    astral_tool,
    call_result,
    dumps,
    error,
    json_answer,
    list_result,
    listing_body,
    minimal_tools,
    repeated_entries,
    result,
    sse_answer,
    sse_event,
    tiny_events,
    tool,
    well_behaved,
)
from .server_h1 import H1Reply, H1Server, head, serialise
from .server_h2 import (
    CONTINUATION,
    END_HEADERS,
    HEADERS,
    PING,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    H2Reply,
    H2Server,
    frame,
)
from .serving import HostileServer

BACKENDS = ("asyncio", "trio", "sync")  # sync: tests/e2e/sync_shim.py behind asyncio

LIMITS: dict[str, Any] = {
    "dial_timeout": 1.0,
    "connect_timeout": 2.0,
    "list_timeout": 2.0,
    "call_timeout": 2.0,
    "close_timeout": 0.5,
    "cancel_grace": 0.5,
    "max_response_bytes": 1 << 20,
    "max_header_bytes": 16 << 10,
    "max_responses": 32,
    "max_tool_pages": 20,
    "max_stream_retries": 3,
    "max_call_attempts": 5,
    "max_tool_bytes": 8 << 10,
    "max_echo_bytes": 4 << 10,
    "max_server_requests": 16,
    "max_informational": 8,
    "h2_max_control_frames": 1000,
    "h2_max_small_data_frames": 2000,
    "h2_max_header_frames": 32,
    "task_timeout": 2.0,
    "max_task_polls": 10,
}
SLACK = 1.0  # how long past its deadline a case may take to end (scheduling, not speed)
QUICK = 3.0  # a case stopped by a budget or a rule (no deadline involved) ends within this
RSS_MARGIN_KIB = 16 * 1024  # peak RSS over the well-behaved run's, at most
HARD_TIMEOUT = 60.0  # the client host kills a child that has not reported by then (a safety
# net, not an assertion: generous enough for a 2-core machine at load 8)


@dataclass(frozen=True)
class Expect:
    """What the client must make of a case.

    ``requests`` maps a request kind (JSON-RPC method, ``"response"``, or the HTTP
    method of a GET/DELETE) to an exact count or an inclusive range; a kind not listed
    must not occur.  ``deadline`` is the limit that must end the failing op: its elapsed
    time lies in ``[deadline - 0.05, deadline + SLACK]``; without one it is at most
    ``QUICK``.  ``close_deadline`` bounds the Conn's close the same way.
    """

    outcome: str  # "ok", "ConnectionFailed", "Unauthorized" or "ServerAnswered"
    failed_op: str | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    over_limit: bool = False  # error.observed > error.limit
    deadline: float | None = None
    close_deadline: float | None = None
    requests: Mapping[str, int | tuple[int, int]] = field(default_factory=dict)
    connections: tuple[int, int] | None = None
    second_ok: bool = False  # a second Conn on the same Client must then succeed
    check: Callable[[dict[str, Any], Any, int], None] | None = None  # (report, stats, port)


@dataclass(frozen=True)
class Case:
    name: str
    attack: str  # for the README: what the server does
    bound: str  # for the README: what stops it
    server: Callable[[], HostileServer]
    expect: Expect
    proto: str = "h1"
    ops: tuple[str, ...] = ("list", "call")
    limits: Mapping[str, Any] = field(default_factory=dict)
    client: Mapping[str, Any] = field(default_factory=dict)
    url: str = "http://127.0.0.1:{port}/mcp"
    fast: bool = False
    xfail: str | None = None

    def make_server(self) -> HostileServer:
        return self.server()


# `make test` on a loaded machine (load 8 on 2 cores: a quarter of a core each) would see
# a 1 s per-request cap fire before a bounded but CPU-heavy answer is read, a 0.7 s-late
# answer pass the 1 s per-request cap, or a 0.5 s close_timeout end the close before its
# DELETE is sent: the outcome flips.  There every deadline a case does not test (all of
# them but ``Expect.deadline``'s bound, and close_timeout unless ``close_deadline`` is set)
# is raised to these; `make hostile` (quiet machine) keeps the calibrated ones.
UNTESTED_DEADLINES = {
    "dial_timeout": 15.0,
    "connect_timeout": 15.0,
    "list_timeout": 15.0,
    "call_timeout": 15.0,
    "auth_timeout": 15.0,
    "task_timeout": 15.0,
    "close_timeout": 5.0,
}


def case_limits(case: Case) -> dict[str, Any]:
    limits = {**LIMITS, **case.limits}
    if WALL:
        return limits
    tested = set()
    if case.expect.deadline is not None:
        tested.add(case.expect.attrs.get("bound"))
    if case.expect.close_deadline is not None:
        tested.add("close_timeout")
    for name, raised in UNTESTED_DEADLINES.items():
        if name not in tested:
            limits[name] = max(limits.get(name, raised), raised)
    return limits


def client_spec(case: Case, backend: str, port: int) -> dict[str, Any]:
    return {
        "backend": backend,
        "url": case.url.format(port=port),
        "ops": list(case.ops),
        "limits": case_limits(case),
        "h2": case.proto == "h2",
        "reconnect": case.expect.second_ok,
        "hard_timeout": HARD_TIMEOUT,
        **case.client,
    }


# ---------------------------------------------------------------- server builders

State = dict[str, Any]
H1Attack = Callable[[Request, H1Reply, State], Awaitable[None]]
H2Attack = Callable[[Request, H2Reply, State], Awaitable[None]]


def h1(
    attacks: Mapping[str, H1Attack], *, legacy: bool = False, once: bool = False
) -> Callable[[], H1Server]:
    """An HTTP/1.1 server that answers well except for the request kinds in ``attacks``
    (with ``once``, only the first request of each such kind is attacked)."""

    def make() -> H1Server:
        state: State = {}
        attacked: set[str] = set()

        async def handler(request: Request, reply: H1Reply) -> None:
            attack = attacks.get(request.key)
            if once and request.key in attacked:
                attack = None
            attacked.add(request.key)
            if attack is not None:
                state["stats"] = server.stats
                await attack(request, reply, state)
            else:
                await reply.answer(well_behaved(request, legacy=legacy))

        server = H1Server(handler)
        return server

    return make


def h2s(
    attacks: Mapping[str, H2Attack], *, max_streams: int | None = None, once: bool = False
) -> Callable[[], H2Server]:
    """An HTTP/2 server that answers well except for the request kinds in ``attacks``
    (with ``once``, only the first request of each such kind is attacked)."""

    def make() -> H2Server:
        state: State = {}
        attacked: set[str] = set()

        async def handler(request: Request, reply: H2Reply) -> None:
            attack = attacks.get(request.key)
            if once and request.key in attacked:
                attack = None
            attacked.add(request.key)
            if attack is not None:
                await attack(request, reply, state)
            else:
                await reply.answer(well_behaved(request))

        return H2Server(handler, max_streams=max_streams)

    return make


def answer(make: Callable[[Request], Answer], *, delay: float = 0.0) -> H1Attack:
    """An attack that is just a (possibly late) complete answer."""

    async def attack(request: Request, reply: H1Reply, state: State) -> None:
        if delay:
            await asyncio.sleep(delay)
        await reply.answer(make(request))

    return attack


async def hang(request: Request, reply: H1Reply | H2Reply, state: State) -> None:
    await reply.hang()


JSON_HEAD = [("content-type", "application/json")]
SSE_HEAD = [("content-type", "text/event-stream")]


# ---------------------------------------------------------------- HTTP/1.1 attacks


async def chunked_bomb(request: Request, reply: H1Reply, state: State) -> None:
    await reply.send(head(200, [*JSON_HEAD, ("transfer-encoding", "chunked")]))
    chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
    while True:
        await reply.send(chunk)


async def late_chunked_bomb(request: Request, reply: H1Reply, state: State) -> None:
    """The endless chunked body, after 0.5 s: a legacy session's standalone stream opens
    right after initialize, so this lets the listing finish and the bomb hit the call."""
    await asyncio.sleep(0.5)
    await chunked_bomb(request, reply, state)


async def length_bomb(request: Request, reply: H1Reply, state: State) -> None:
    await reply.send(head(200, [*JSON_HEAD, ("content-length", str(5 << 30))]))
    chunk = b" " * 0x10000
    while True:
        await reply.send(chunk)


async def length_lie(request: Request, reply: H1Reply, state: State) -> None:
    await reply.send(head(200, [*JSON_HEAD, ("content-length", "1000")]) + b'{"jsonrpc":"2.0",')
    await reply.hang()


async def header_padding(request: Request, reply: H1Reply, state: State) -> None:
    await reply.send(
        b"HTTP/1.1 200 OK\r\nX-Pad: a"
        + b" " * 200_000
        + b"\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    )
    await reply.hang()


async def header_fields(request: Request, reply: H1Reply, state: State) -> None:
    fields = b"".join(b"X-Field-%d: v\r\n" % i for i in range(20_000))
    await reply.send(b"HTTP/1.1 200 OK\r\n" + fields + b"content-length: 2\r\n\r\n{}")
    await reply.hang()


async def header_never_ends(request: Request, reply: H1Reply, state: State) -> None:
    await reply.send(b"HTTP/1.1 200 OK\r\n")
    while True:
        await reply.send(b"X-More: yes\r\n" * 64)


def chunked_then(data: bytes, forever: bytes = b"") -> H1Attack:
    """A chunked 200 whose body bytes are ``data`` then ``forever`` repeated forever."""

    async def attack(request: Request, reply: H1Reply, state: State) -> None:
        await reply.send(head(200, [*JSON_HEAD, ("transfer-encoding", "chunked")]) + data)
        if not forever:
            await reply.hang()
        while True:
            await reply.send(forever)

    return attack


def raw_answer(data: bytes) -> H1Attack:
    """Exactly ``data`` (a whole response, byte for byte), then silence."""

    async def attack(request: Request, reply: H1Reply, state: State) -> None:
        await reply.send(data)
        await reply.hang()

    return attack


CHUNKED_EMPTY_OBJECT = b"2\r\n{}\r\n0\r\n\r\n"


async def informational_flood(request: Request, reply: H1Reply, state: State) -> None:
    while True:
        await reply.send(b"HTTP/1.1 100 Continue\r\n\r\n" * 16)


async def slowloris(request: Request, reply: H1Reply, state: State) -> None:
    for byte in serialise(well_behaved(request)):
        await reply.send(bytes([byte]))
        await asyncio.sleep(1.0)


def cursor_graph(
    next_of: Callable[[str | None, State], str | None], *, delay: float = 0.0
) -> H1Attack:
    async def attack(request: Request, reply: H1Reply, state: State) -> None:
        if delay:
            await asyncio.sleep(delay)
        cursor = request.params.get("cursor")
        state["page"] = state.get("page", 0) + 1
        value = list_result([tool(f"t{state['page']}")], next_of(cursor, state))
        await reply.answer(json_answer(result(request.rpc_id, value)))

    return attack


def _unique(cursor: str | None, state: State) -> str:
    state["n"] = state.get("n", 0) + 1
    return f"page-{state['n']}"


async def sse_no_response(request: Request, reply: H1Reply, state: State) -> None:
    await reply.answer(sse_answer(b"id: 7\nretry: 0\n\n: no response in this stream\n\n"))


async def sse_progress_only(request: Request, reply: H1Reply, state: State) -> None:
    state["n"] = state.get("n", 0) + 1
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": 1, "progress": state["n"]},
    }
    await reply.answer(sse_answer(sse_event(note)))


async def sse_keepalive(request: Request, reply: H1Reply, state: State) -> None:
    await reply.send(head(200, SSE_HEAD))  # no length: the body runs until EOF
    while True:
        await reply.send(b": keep-alive\n\n")
        await asyncio.sleep(0.05)


async def sse_line_endless(request: Request, reply: H1Reply, state: State) -> None:
    await reply.send(head(200, SSE_HEAD) + b"data: ")
    while True:
        await reply.send(b"x" * 65536)


async def sse_comment_flood(request: Request, reply: H1Reply, state: State) -> None:
    await reply.send(head(200, SSE_HEAD))
    comment = b":" + b"x" * 65_000 + b"\n"
    while True:
        await reply.send(comment)


async def sse_then_endless(request: Request, reply: H1Reply, state: State) -> None:
    """Answer at once in an event stream, then keep the stream open with keep-alives."""
    value = list_result([tool("echo")])
    await reply.send(head(200, SSE_HEAD) + sse_event(result(request.rpc_id, value)))
    sent = time.monotonic()
    try:
        while True:
            await reply.send(b": still here\n\n")
            await asyncio.sleep(0.05)
    finally:
        state["stats"].notes["drained_for"] = time.monotonic() - sent


def sse_payload(payload: bytes) -> H1Attack:
    async def attack(request: Request, reply: H1Reply, state: State) -> None:
        await reply.answer(sse_answer(payload))

    return attack


async def pings_then_answer(request: Request, reply: H1Reply, state: State) -> None:
    pings = b"".join(
        sse_event({"jsonrpc": "2.0", "id": f"p{i}", "method": "ping"}) for i in range(5)
    )
    answer = sse_event(result(request.rpc_id, list_result([tool("echo")], modern=False)))
    await reply.answer(sse_answer(pings + answer))


async def listen_request_flood(request: Request, reply: H1Reply, state: State) -> None:
    asks = b"".join(
        sse_event({"jsonrpc": "2.0", "id": f"e{i}", "method": "elicitation/create", "params": {}})
        for i in range(40)
    )
    await reply.send(head(200, SSE_HEAD) + asks)
    await reply.hang()


async def server_request_flood(request: Request, reply: H1Reply, state: State) -> None:
    pings = b"".join(
        sse_event({"jsonrpc": "2.0", "id": f"p{i}", "method": "ping"}) for i in range(17)
    )
    await reply.send(head(200, SSE_HEAD) + pings)
    await reply.hang()


def redirect(location: str | None, status: int) -> H1Attack:
    async def attack(request: Request, reply: H1Reply, state: State) -> None:
        where = location
        if where is None:
            port = reply.writer.get_extra_info("sockname")[1]
            where = f"http://127.0.0.1:{port}/elsewhere"
        await reply.answer(Answer(status, [("location", where)], b""))

    return attack


def deep_nesting(request: Request) -> Answer:
    depth = 100_000
    body = b'{"jsonrpc":"2.0","id":%d,"result":{"tools":[],"x":' % request.rpc_id
    return json_answer(body + b"[" * depth + b"]" * depth + b"}}")


def huge_number(request: Request) -> Answer:
    body = b'{"jsonrpc":"2.0","id":%d,"result":{"tools":[],"x":' % request.rpc_id
    return json_answer(body + b"7" * 1_000_000 + b"}}")


def listing_of(entry: bytes) -> Callable[[Request], Answer]:
    """A modern listing of one tool entry given as raw JSON bytes."""

    def make(request: Request) -> Answer:
        body = b'{"jsonrpc":"2.0","id":%d,"result":{"resultType":"complete","tools":[%s]}}'
        return json_answer(body % (request.rpc_id, entry))

    return make


def _listed_a(report: dict[str, Any], stats: Any, port: int) -> None:
    listing = next(entry for entry in report["ops"] if entry["op"] == "list")
    assert listing["tools"] == ["a"], listing


def call_answer(content: list[Any], **extra: Any) -> Callable[[Request], Answer]:
    def make(request: Request) -> Answer:
        return json_answer(result(request.rpc_id, {**call_result(content), **extra}))

    return make


def mrtr(value: Mapping[str, Any]) -> H1Attack:
    return answer(
        lambda request: json_answer(
            result(request.rpc_id, {"resultType": "input_required", **value})
        )
    )


ELICIT = {
    "q": {
        "method": "elicitation/create",
        "params": {"message": "who?", "requestedSchema": {"type": "object"}},
    }
}
BIG_TOOL = tool("big", description="x" * (10 << 10))
MIXED_TOOLS = [
    tool("echo"),
    {"description": "no name", "inputSchema": {"type": "object"}},
    {"name": 42, "inputSchema": {"type": "object"}},
    {"name": "bad_schema", "inputSchema": "not an object"},
    BIG_TOOL,
    tool("needs_tasks", execution={"taskSupport": "required"}),
    tool("echo"),
    tool("second"),
]


def version_error(supported: list[str]) -> Callable[[Request], Answer]:
    def make(request: Request) -> Answer:
        data = {"supported": supported, "requested": MODERN}
        return json_answer(error(request.rpc_id, -32022, "unsupported protocol version", data), 400)

    return make


def auth(status: int, challenge: str) -> Callable[[Request], Answer]:
    def make(request: Request) -> Answer:
        return Answer(
            status, [("www-authenticate", challenge), ("content-type", "text/plain")], b"no"
        )

    return make


# ---------------------------------------------------------------- HTTP/2 attacks


async def h2_hpack_bomb(request: Request, reply: H2Reply, state: State) -> None:
    # One 4,000-byte field enters the HPACK table (index 62), then 8,000 one-byte
    # references to it: a 12 KB block that decodes to 32 MB.
    block = reply.h2.encoder.encode(
        [(b":status", b"200"), (b"content-type", b"application/json"), (b"x-bomb", b"a" * 4000)],
        huffman=False,
    )
    await reply.raw(frame(HEADERS, END_HEADERS, reply.stream_id, block + b"\xbe" * 8000))
    await reply.hang()


async def h2_continuation_flood(request: Request, reply: H2Reply, state: State) -> None:
    await reply.raw(frame(HEADERS, 0, reply.stream_id, b"\x88"))
    empty = frame(CONTINUATION, 0, reply.stream_id) * 100
    while True:
        await reply.raw(empty)


def h2_flood(one: bytes) -> H2Attack:
    async def attack(request: Request, reply: H2Reply, state: State) -> None:
        batch = one * 100
        while True:
            await reply.raw(batch)

    return attack


async def h2_informational_flood(request: Request, reply: H2Reply, state: State) -> None:
    encode = reply.h2.encoder.encode
    while True:
        fields = [(b":status", b"103"), (b"link", b"</style.css>; rel=preload")]
        await reply.raw(
            b"".join(
                frame(HEADERS, END_HEADERS, reply.stream_id, encode(fields)) for _ in range(16)
            )
        )


async def h2_oversized_frame(request: Request, reply: H2Reply, state: State) -> None:
    await reply.raw(b"\xff\xff\xff" + bytes([0, 0]) + reply.stream_id.to_bytes(4, "big"))
    while True:
        await reply.raw(b" " * 65536)


async def h2_tiny_data(request: Request, reply: H2Reply, state: State) -> None:
    await reply.headers(200, JSON_HEAD)
    while True:
        for _ in range(50):
            reply.h2.send_data(reply.stream_id, b" ")
        await reply.connection.flush()


async def h2_body_bomb(request: Request, reply: H2Reply, state: State) -> None:
    await reply.headers(200, JSON_HEAD)
    chunk = b" " * (1 << 20)
    while True:
        await reply.data(chunk)


def legacy_init(**changes: Any) -> Callable[[Request], Answer]:
    """A legacy initialize answer with ``changes`` to its result (or headers)."""

    def make(request: Request) -> Answer:
        good = well_behaved(request, legacy=True)
        value = json.loads(good.body)
        value["result"].update(changes.get("result", {}))
        headers = changes.get("headers", good.headers)
        return json_answer(value, headers=[h for h in headers if h[0] != "content-type"])

    return make


def status_answer(status: int, body: Any = None) -> Callable[[Request], Answer]:
    def make(request: Request) -> Answer:
        if body is None:
            return Answer(status, [("content-type", "text/plain")], b"oops")
        return json_answer(error(request.rpc_id, -32603, body), status)

    return make


def listing_idempotent_echo(request: Request) -> Answer:
    echo = tool("echo", annotations={"idempotentHint": True})
    return json_answer(result(request.rpc_id, list_result([echo])))


# ---------------------------------------------------------------- checks beyond the table


def _target_is_mcp(report: dict[str, Any], stats: Any, port: int) -> None:
    assert all(r.target == "/mcp" for r in stats.requests), [r.target for r in stats.requests]


def _redirect_to_self(report: dict[str, Any], stats: Any, port: int) -> None:
    _target_is_mcp(report, stats, port)
    assert report["error"]["location"] == f"http://127.0.0.1:{port}/elsewhere"


def _resumed_with_last_id(report: dict[str, Any], stats: Any, port: int) -> None:
    gets = [r for r in stats.requests if r.method == "GET"]
    assert gets and all(r.headers.get("last-event-id") == "7" for r in gets)


def _mixed_tools(report: dict[str, Any], stats: Any, port: int) -> None:
    listing = report["ops"][1]
    assert listing["tools"] == ["echo", "second"], listing
    assert [entry[0] for entry in listing["skipped"]] == [1, 2, 3, 4, 5, 6], listing
    assert listing["skipped"][3][1] == "big" and listing["skipped"][5][1] == "echo", listing


def _one_text_block(report: dict[str, Any], stats: Any, port: int) -> None:
    assert report["ops"][-1]["content"] == [["text", "kept"]], report["ops"]


def _drained_within_grace(report: dict[str, Any], stats: Any, port: int) -> None:
    grace = LIMITS["cancel_grace"]
    drained = stats.notes.get("drained_for")
    assert drained is not None and grace - 0.05 <= drained, drained
    if WALL:  # wall-clock upper bounds: `make hostile` only (tests/timing.py)
        assert drained <= grace + SLACK, drained
    listing = report["ops"][1]
    assert_within(listing["elapsed"], listing["cpu"], QUICK, "the listing")


def _mrtr_backoff(report: dict[str, Any], stats: Any, port: int) -> None:
    calls = [r for r in stats.requests if r.key == "tools/call"]
    assert all(r.params.get("requestState") == "again" for r in calls[1:]), [
        r.params for r in calls
    ]
    assert len({r.rpc_id for r in calls}) == len(calls), "each retry needs a new id"


def _answered_inputs(report: dict[str, Any], stats: Any, port: int) -> None:
    calls = [r for r in stats.requests if r.key == "tools/call"]
    assert all("inputResponses" in r.params for r in calls[1:]), [r.params for r in calls]


# ---------------------------------------------------------------- the table


def _failed(cls: str, op: str, **attrs: Any) -> dict[str, Any]:
    return {"outcome": cls, "failed_op": op, "attrs": attrs}


def budget(op: str, bound: str, **extra: Any) -> Expect:
    limit = LIMITS.get(bound)
    return Expect(
        **_failed(
            "ConnectionFailed", op, cause="budget", bound=bound, limit=extra.pop("limit", limit)
        ),
        over_limit=True,
        **extra,
    )


def timeout(op: str, bound: str, **extra: Any) -> Expect:
    limit = extra.pop("limit", LIMITS[bound])
    return Expect(
        **_failed("ConnectionFailed", op, cause="timeout", bound=bound, limit=limit),
        deadline=limit,
        **extra,
    )


def failed(op: str, cause: str, **extra: Any) -> Expect:
    attrs = {"cause": cause, "bound": None}
    attrs.update(extra.pop("attrs", {}))
    return Expect(**_failed("ConnectionFailed", op, **attrs), **extra)


def answered(op: str, reason: str, **extra: Any) -> Expect:
    attrs = {"reason": reason}
    attrs.update(extra.pop("attrs", {}))
    return Expect(**_failed("ServerAnswered", op, **attrs), **extra)


# ---- parsed size (issue 10 C): builders for the block at the end of CASES ----

PARSED_VALUES = Limits().max_json_values
PARSED_TOOLS = Limits().max_tools


def parsed_answer(entries: Callable[[], bytes]) -> Callable[[Request, Any, State], Awaitable[None]]:
    """A JSON listing whose tools array is ``entries()`` (built once, per server)."""
    built: list[bytes] = []

    async def attack(request: Request, reply: Any, state: State) -> None:
        if not built:
            built.append(entries())
        await reply.answer(json_answer(listing_body(request.rpc_id, built[0])))

    return attack


async def tiny_events_then_listing(request: Request, reply: H1Reply, state: State) -> None:
    listing = result(request.rpc_id, {"resultType": "complete", "tools": [tool("a")]})
    await reply.answer(sse_answer(tiny_events(15_000) + sse_event(listing)))


def _skips_capped(report: dict[str, Any], stats: Any, port: int) -> None:
    listing = next(entry for entry in report["ops"] if entry["op"] == "list")
    assert listing["skipped_count"] == 5000, listing["skipped_count"]
    assert len(listing["skipped"]) == Limits().max_recorded_skips, len(listing["skipped"])
    assert listing["tools"] == ["a"], listing["tools"]


def replace_expect(expect: Expect, **changes: Any) -> Expect:
    return dataclasses.replace(expect, **changes)


D = "server/discover"
L = "tools/list"
C = "tools/call"
LEGACY_HANDSHAKE = {D: 1, "initialize": 1, "notifications/initialized": 1}

CASES: list[Case] = [
    Case(
        "well_behaved",
        "a correct 2026-07-28 server (the RSS baseline)",
        "-",
        h1({}),
        Expect("ok", requests={D: 1, L: 1, C: 1}),
        fast=True,
    ),
    Case(
        "well_behaved_legacy",
        "a correct 2025-06-18 server with a session",
        "-",
        h1({}, legacy=True),
        Expect("ok", requests={**LEGACY_HANDSHAKE, L: 1, C: 1, "DELETE": 1}),
    ),
    # ---- bodies
    Case(
        "body_bomb_chunked",
        "endless chunked body",
        "max_response_bytes",
        h1({L: chunked_bomb}),
        budget("list", "max_response_bytes", requests={D: 1, L: 1}),
        fast=True,
    ),
    Case(
        "body_bomb_length",
        "Content-Length: 5 GiB, then bytes as fast as they go",
        "max_response_bytes",
        h1({L: length_bomb}),
        budget("list", "max_response_bytes", requests={D: 1, L: 1}),
    ),
    Case(
        "length_lie_silence",
        "Content-Length: 1000, 17 bytes, then silence",
        "dial_timeout (the per-request cap)",
        h1({L: length_lie}),
        timeout("list", "dial_timeout", requests={D: 1, L: 1}),
    ),
    # ---- header blocks
    Case(
        "header_padding",
        "one header of 1 char + 200,000 spaces",
        "max_header_bytes (raw, before parsing)",
        h1({L: header_padding}),
        budget("list", "max_header_bytes", requests={D: 1, L: 1}),
        fast=True,
    ),
    Case(
        "header_fields_20000",
        "20,000 header fields",
        "max_header_bytes",
        h1({L: header_fields}),
        budget("list", "max_header_bytes", requests={D: 1, L: 1}),
    ),
    Case(
        "header_never_ends",
        "a header block that never ends (fields forever)",
        "max_header_bytes",
        h1({D: header_never_ends}),
        budget("connect", "max_header_bytes", requests={D: 1}),
    ),
    Case(
        "chunk_size_overflow",
        "a chunk-size line of 22 hex digits",
        "boundary: malformed framing",
        h1({L: chunked_then(b"f" * 22 + b"\r\n")}),
        failed("list", "framing", requests={D: 1, L: 1}),
    ),
    Case(
        "smuggling_length_and_chunked",
        "Content-Length and Transfer-Encoding: chunked in one head (request smuggling's shape)",
        "boundary: malformed framing (llhttp refuses it; h11 let chunked win)",
        h1(
            {
                L: raw_answer(
                    head(
                        200,
                        [*JSON_HEAD, ("content-length", "13"), ("transfer-encoding", "chunked")],
                    )
                    + CHUNKED_EMPTY_OBJECT
                )
            }
        ),
        failed("list", "framing", requests={D: 1, L: 1}),
    ),
    Case(
        "transfer_coding_list",
        "Transfer-Encoding: gzip, chunked",
        "boundary: malformed framing (only one 'chunked' is taken, as h11 took it)",
        h1(
            {
                L: raw_answer(
                    head(200, [*JSON_HEAD, ("transfer-encoding", "gzip, chunked")])
                    + CHUNKED_EMPTY_OBJECT
                )
            }
        ),
        failed("list", "framing", requests={D: 1, L: 1}),
    ),
    Case(
        "status_line_rtsp",
        "an RTSP/1.0 status line on an otherwise correct answer",
        "boundary: malformed framing (the status line's grammar)",
        h1({L: raw_answer(b"RTSP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n{}")}),
        failed("list", "framing", requests={D: 1, L: 1}),
    ),
    Case(
        "chunk_line_endless",
        "a chunk-size line whose extension never ends",
        "max_header_bytes (chunk-size lines are bounded too)",
        h1({L: chunked_then(b"1;ext=", b"x" * 4096)}),
        budget("list", "max_header_bytes", requests={D: 1, L: 1}),
    ),
    Case(
        "trailer_flood",
        "a chunked body, then a trailer block that never ends",
        "max_header_bytes (trailers are a header block)",
        h1({L: chunked_then(b"2\r\n{}\r\n0\r\n", b"X-Trailer: yes\r\n" * 64)}),
        budget("list", "max_header_bytes", requests={D: 1, L: 1}),
    ),
    Case(
        "informational_flood",
        "100 Continue heads forever",
        "max_informational",
        h1({L: informational_flood}),
        budget("list", "max_informational", requests={D: 1, L: 1}),
        fast=True,
    ),
    # ---- listings
    Case(
        "cursor_cycle_ab",
        "nextCursor A -> B -> A",
        "cursor seen before",
        h1({L: cursor_graph(lambda c, s: {None: "A", "A": "B", "B": "A"}[c])}),
        answered("list", "cursor_cycle", requests={D: 1, L: 3}),
        fast=True,
    ),
    Case(
        "cursor_same_forever",
        "the same nextCursor forever",
        "cursor seen before",
        h1({L: cursor_graph(lambda c, s: "same")}),
        answered("list", "cursor_cycle", requests={D: 1, L: 2}),
    ),
    Case(
        "cursor_unique_endless",
        "a new nextCursor on every page, at once",
        "max_tool_pages",
        h1({L: cursor_graph(_unique)}),
        answered(
            "list",
            "max_tool_pages",
            attrs={"bound": "max_tool_pages", "limit": LIMITS["max_tool_pages"]},
            requests={D: 1, L: LIMITS["max_tool_pages"]},
        ),
        fast=True,
    ),
    Case(
        "cursor_unique_slow",
        "a new nextCursor on every page, 0.25 s per page",
        "list_timeout",
        h1({L: cursor_graph(_unique, delay=0.25)}),
        timeout("list", "list_timeout", requests={D: 1, L: (2, 10)}),
        fast=True,
    ),
    Case(
        "cursor_oversized",
        "an 8 KiB nextCursor",
        "max_echo_bytes",
        h1({L: cursor_graph(lambda c, s: "x" * 8192)}),
        answered(
            "list",
            "oversized_cursor",
            attrs={"bound": "max_echo_bytes", "limit": LIMITS["max_echo_bytes"]},
            requests={D: 1, L: 1},
        ),
        fast=True,
    ),
    Case(
        "tools_mixed",
        "good tools among a nameless one, a numeric name, a string schema, a 10 KiB one, "
        "a tasks-only one and a duplicate",
        "each skipped and recorded (max_tool_bytes for the big one)",
        h1({L: answer(lambda r: json_answer(result(r.rpc_id, list_result(MIXED_TOOLS))))}),
        Expect("ok", requests={D: 1, L: 1, C: 1}, check=_mixed_tools),
        fast=True,
    ),
    # ---- event streams
    Case(
        "sse_no_response",
        "an event stream with `id:` and `retry: 0` that ends without a response, every time",
        "max_stream_retries (re-issued with a new id)",
        h1({L: sse_no_response}),
        Expect(
            **_failed(
                "ConnectionFailed",
                "list",
                cause="stream_broken",
                bound="max_stream_retries",
                limit=3,
            ),
            over_limit=True,
            requests={D: 1, L: 4},
        ),
        fast=True,
    ),
    Case(
        "sse_no_response_legacy",
        "the same on a 2025-06-18 server: resumed by GET with Last-Event-ID, every time",
        "max_stream_retries (GET resumptions)",
        h1({L: sse_no_response, "GET": sse_no_response}, legacy=True),
        Expect(
            **_failed(
                "ConnectionFailed",
                "list",
                cause="stream_broken",
                bound="max_stream_retries",
                limit=3,
            ),
            over_limit=True,
            requests={**LEGACY_HANDSHAKE, L: 1, "GET": 3, "DELETE": 1},
            check=_resumed_with_last_id,
        ),
    ),
    Case(
        "sse_progress_forever",
        "an event stream with one progress notification, then the end, every time",
        "max_responses",
        h1({L: sse_progress_only}),
        budget("list", "max_responses", requests={D: 1, L: LIMITS["max_responses"]}),
        fast=True,
    ),
    Case(
        "sse_keepalive_forever",
        "an event stream of `: keep-alive` comments every 50 ms, forever",
        "dial_timeout (the per-request cap)",
        h1({L: sse_keepalive}),
        timeout("list", "dial_timeout", requests={D: 1, L: 1}),
    ),
    Case(
        "sse_data_line_endless",
        "an event stream whose one `data:` line never ends",
        "max_response_bytes (the pending line is bounded by the budget)",
        h1({L: sse_line_endless}),
        budget("list", "max_response_bytes", requests={D: 1, L: 1}),
    ),
    Case(
        "sse_comment_flood",
        "an event stream of 64 KB comments as fast as they go",
        "max_response_bytes",
        h1({L: sse_comment_flood}),
        budget("list", "max_response_bytes", requests={D: 1, L: 1}),
    ),
    Case(
        "sse_response_then_endless",
        "the response in an event stream that then stays open with keep-alives "
        "(the next call is answered 1.2 s late)",
        "cancel_grace (the stream is dropped 0.5 s after the response)",
        h1({L: sse_then_endless, C: answer(well_behaved, delay=1.2)}),
        Expect("ok", requests={D: 1, L: 1, C: 1}, check=_drained_within_grace),
        fast=True,
    ),
    Case(
        "sse_response_then_endless_idle",
        "the same, while the caller waits 1.5 s between list and call",
        "cancel_grace",
        h1({L: sse_then_endless}),
        Expect("ok", requests={D: 1, L: 1, C: 1}, check=_drained_within_grace),
        ops=("list", "sleep:1.5", "call"),
    ),
    Case(
        "server_request_flood",
        "17 `ping` requests inside one legacy response stream",
        "max_server_requests",
        h1({L: server_request_flood}, legacy=True),
        budget(
            "list",
            "max_server_requests",
            requests={**LEGACY_HANDSHAKE, L: 1, "response": (0, 16), "DELETE": 1},
        ),
        fast=True,
    ),
    Case(
        "sse_call_breaks",
        "tools/call answered by an event stream that ends without a response",
        "no blind re-issue of a call (one request, stream_broken)",
        h1({C: sse_no_response}),
        failed("call", "stream_broken", requests={D: 1, L: 1, C: 1}),
        fast=True,
    ),
    Case(
        "sse_call_breaks_idempotent",
        "the same for a tool whose listing says idempotentHint: true",
        "max_stream_retries (re-issued with a new id)",
        h1({L: answer(listing_idempotent_echo), C: sse_no_response}),
        Expect(
            **_failed(
                "ConnectionFailed",
                "call",
                cause="stream_broken",
                bound="max_stream_retries",
                limit=3,
            ),
            over_limit=True,
            requests={D: 1, L: 1, C: 4},
        ),
    ),
    Case(
        "sse_retry_huge_legacy",
        "a legacy stream that breaks with `id:` and `retry: 3600000` (an hour)",
        "list_timeout (the resumption wait counts against the listing)",
        h1({L: sse_payload(b"id: 7\nretry: 3600000\n\n")}, legacy=True),
        timeout("list", "list_timeout", requests={**LEGACY_HANDSHAKE, L: 1, "DELETE": 1}),
    ),
    Case(
        "legacy_listen_request_flood",
        "during a legacy call (input handler set), the standalone GET stream carries 40 "
        "elicitation requests; the call is answered 0.5 s late",
        "max_server_requests (per stream; the call itself completes)",
        h1(
            {
                "GET": listen_request_flood,
                C: answer(lambda r: well_behaved(r, legacy=True), delay=0.5),
            },
            legacy=True,
        ),
        Expect(
            "ok",
            requests={**LEGACY_HANDSHAKE, L: 1, C: 1, "GET": 1, "response": (1, 16), "DELETE": 1},
        ),
        client={"input": "answer"},
    ),
    Case(
        "legacy_listen_body_bomb",
        "during a legacy call (input handler set), the session's standalone GET stream turns "
        "into an endless chunked body (0.5 s after it opened); the call is answered 1 s late",
        "max_response_bytes (the cumulative budget fails the call)",
        h1(
            {
                "GET": late_chunked_bomb,
                C: answer(lambda r: well_behaved(r, legacy=True), delay=1.0),
            },
            legacy=True,
        ),
        budget(
            "call",
            "max_response_bytes",
            requests={**LEGACY_HANDSHAKE, L: 1, C: 1, "GET": 1, "DELETE": (0, 1)},
        ),
        client={"input": "answer"},
    ),
    Case(
        "server_pings_then_answer",
        "5 `ping` requests in a legacy response stream, then the response",
        "each ping answered (max_server_requests not reached)",
        h1({L: pings_then_answer}, legacy=True),
        Expect(
            "ok",
            requests={**LEGACY_HANDSHAKE, L: 1, C: 1, "response": (0, 5), "DELETE": 1},
        ),
    ),
    # ---- time
    Case(
        "slowloris",
        "a valid answer at one byte per second",
        "dial_timeout (the per-request cap)",
        h1({L: slowloris}),
        timeout("list", "dial_timeout", requests={D: 1, L: 1}),
    ),
    Case(
        "never_answers",
        "accepts, reads the request, never answers",
        "dial_timeout (the per-request cap)",
        h1({D: hang}),
        timeout("connect", "dial_timeout", requests={D: 1}),
        fast=True,
    ),
    Case(
        "never_answers_call",
        "answers everything but tools/call",
        "call_timeout",
        h1({C: hang}),
        timeout("call", "call_timeout", requests={D: 1, L: 1, C: 1}),
        fast=True,
    ),
    Case(
        "slow_negotiation",
        "-32022 then initialize then initialized, each 0.7 s late",
        "connect_timeout",
        h1(
            {
                D: answer(version_error([LEGACY]), delay=0.7),
                "initialize": answer(lambda r: well_behaved(r, legacy=True), delay=0.7),
                "notifications/initialized": answer(lambda r: Answer(202), delay=0.7),
            }
        ),
        timeout(
            "connect",
            "connect_timeout",
            # on a loaded machine the initialize answer can come after the deadline, and
            # then no initialized is sent: a count that follows wall time (make hostile only)
            requests={
                **LEGACY_HANDSHAKE,
                "notifications/initialized": 1 if WALL else (0, 1),
                "DELETE": (0, 1),
            },
        ),
        fast=True,
    ),
    Case(
        "delete_never_answers",
        "a legacy server whose session DELETE never answers",
        "close_timeout",
        h1({"DELETE": hang}, legacy=True),
        Expect(
            "ok",
            close_deadline=LIMITS["close_timeout"],
            requests={**LEGACY_HANDSHAKE, L: 1, C: 1, "DELETE": 1},
        ),
        fast=True,
    ),
    Case(
        "tls_handshake_never_answers",
        "accepts TCP on an https:// URL, never answers the TLS ClientHello",
        "dial_timeout (TCP connect + TLS handshake)",
        h1({}),
        timeout("connect", "dial_timeout", requests={}, connections=(1, 1)),
        url="https://127.0.0.1:{port}/mcp",
    ),
    Case(
        "delete_body_bomb",
        "a legacy server whose session DELETE answers an endless chunked body",
        "max_response_bytes / close_timeout (close ignores the failure)",
        h1({"DELETE": chunked_bomb}, legacy=True),
        Expect("ok", requests={**LEGACY_HANDSHAKE, L: 1, C: 1, "DELETE": 1}),
    ),
    Case(
        "h2_to_http1_server",
        "prior-knowledge h2c to a server that speaks only HTTP/1.1",
        "boundary: malformed framing (no SETTINGS first)",
        h1({}),
        failed("connect", "framing", requests={"PRI": (0, 1)}),
        proto="h2",
    ),
    # ---- redirects and addresses
    Case(
        "redirect_307_loopback",
        "307 to another path on the same loopback server",
        "redirects are never followed",
        h1({D: redirect(None, 307)}),
        failed(
            "connect", "redirect", attrs={"status": 307}, requests={D: 1}, check=_redirect_to_self
        ),
    ),
    Case(
        "redirect_302_metadata",
        "302 to http://169.254.169.254/latest/meta-data/",
        "redirects are never followed",
        h1({D: redirect("http://169.254.169.254/latest/meta-data/", 302)}),
        failed(
            "connect",
            "redirect",
            attrs={"status": 302, "location": "http://169.254.169.254/latest/meta-data/"},
            requests={D: 1},
            check=_target_is_mcp,
        ),
        fast=True,
    ),
    Case(
        "guard_metadata_address",
        "the endpoint URL itself is http://169.254.169.254:PORT/mcp",
        "dial guard (metadata addresses always refused)",
        h1({}),
        failed("connect", "refused_address", requests={}, connections=(0, 0)),
        url="http://169.254.169.254:{port}/mcp",
        fast=True,
    ),
    Case(
        "guard_loopback_refused",
        "a loopback endpoint with allow_loopback=False",
        "dial guard",
        h1({}),
        failed("connect", "refused_address", requests={}, connections=(0, 0)),
        client={"allow_loopback": False},
    ),
    Case(
        "guard_dns_all_refused",
        "DNS answers only link-local, private, loopback and unspecified addresses",
        "dial guard (every address vetted)",
        h1({}),
        failed("connect", "refused_address", requests={}, connections=(0, 0)),
        url="http://mcp.invalid:{port}/mcp",
        client={
            "allow_loopback": False,
            "resolver": ["169.254.169.254", "10.0.0.1", "127.0.0.1", "0.0.0.0"],
        },
    ),
    Case(
        "guard_dns_mixed",
        "DNS answers the metadata address first, loopback second",
        "dial guard (only the allowed address is dialled)",
        h1({}),
        Expect("ok", requests={D: 1, L: 1, C: 1}, connections=(1, 1)),
        url="http://mcp.invalid:{port}/mcp",
        client={"resolver": ["169.254.169.254", "127.0.0.1"]},
    ),
    # ---- JSON-RPC
    Case(
        "invalid_json",
        "200 application/json, body not JSON",
        "boundary: not JSON-RPC",
        h1({L: answer(lambda r: json_answer(b'{"jsonrpc":"2.0","id":2,"result":{'))}),
        failed("list", "not_jsonrpc", requests={D: 1, L: 1}),
    ),
    Case(
        "wrong_id",
        "a response for another request id",
        "boundary: wrong id",
        h1({L: answer(lambda r: json_answer(result(r.rpc_id + 1000, list_result([]))))}),
        failed("list", "not_jsonrpc", requests={D: 1, L: 1}),
    ),
    Case(
        "batch_not_allowed",
        "a JSON-RPC batch on 2026-07-28",
        "boundary: batch where none is allowed",
        h1(
            {
                L: answer(
                    lambda r: json_answer(b"[" + dumps(result(r.rpc_id, list_result([]))) + b"]")
                )
            }
        ),
        failed("list", "not_jsonrpc", requests={D: 1, L: 1}),
    ),
    Case(
        "deep_nesting",
        "a result nested 100,000 arrays deep",
        "max_json_depth / recursion limit",
        h1({L: answer(deep_nesting)}),
        failed("list", "not_jsonrpc", requests={D: 1, L: 1}),
        fast=True,
    ),
    Case(
        "huge_number",
        "a 1,000,000-digit JSON number",
        "Python's integer-digit limit",
        h1({L: answer(huge_number)}),
        failed("list", "not_jsonrpc", requests={D: 1, L: 1}),
    ),
    Case(
        "listing_lone_surrogates",
        'a tool whose description and schema hold lone surrogate escapes ("\\ud800")',
        "I-JSON (RFC 7493 s2.1): a lone surrogate escape is invalid JSON (was: accepted)",
        h1(
            {
                L: answer(
                    listing_of(
                        b'{"name":"a","description":"x\\ud800","inputSchema":{"d":"\\udc00"}}'
                    )
                )
            }
        ),
        failed("list", "not_jsonrpc", requests={D: 1, L: 1}),
    ),
    Case(
        "listing_schema_overflow",
        "a tool schema holding 1e400 (overflows a double)",
        "finite numbers only, in the schemas the typed pass keeps as bytes too",
        h1({L: answer(listing_of(b'{"name":"a","inputSchema":{"maximum":1e400}}'))}),
        failed("list", "not_jsonrpc", requests={D: 1, L: 1}),
    ),
    Case(
        "listing_schema_long_numbers",
        "a tool schema holding 1e-400 and a 300-digit integer",
        "none: accepted (the number screen sends it to the untyped decode, which accepts it)",
        h1(
            {
                L: answer(
                    listing_of(b'{"name":"a","inputSchema":{"m":1e-400,"n":' + b"9" * 300 + b"}}")
                )
            }
        ),
        Expect("ok", requests={D: 1, L: 1, C: 1}, check=_listed_a),
    ),
    Case(
        "html_200",
        "200 text/html to server/discover",
        "boundary: not JSON or an event stream",
        h1({D: answer(lambda r: Answer(200, [("content-type", "text/html")], b"<html>hi</html>"))}),
        failed("connect", "not_jsonrpc", attrs={"status": 200}, requests={D: 1}),
    ),
    Case(
        "http_500_plain",
        "500 text/plain to tools/list",
        "boundary: 5xx without a JSON-RPC error",
        h1({L: answer(status_answer(500))}),
        failed("list", "http_status", attrs={"status": 500}, requests={D: 1, L: 1}),
    ),
    Case(
        "http_500_jsonrpc_error",
        "500 with a JSON-RPC error for our id",
        "boundary: a JSON-RPC error, whatever the status",
        h1({L: answer(status_answer(500, "internal"))}),
        Expect(
            **_failed("ServerAnswered", "list", reason="jsonrpc_error", code=-32603),
            requests={D: 1, L: 1},
        ),
    ),
    Case(
        "session_expired_forever",
        "a legacy server answering 404 to every request with a session id",
        "one re-initialize, then session_expired",
        h1({L: answer(lambda r: Answer(404))}, legacy=True),
        failed(
            "list",
            "session_expired",
            attrs={"status": 404},
            requests={D: 1, "initialize": 2, "notifications/initialized": 2, L: 2, "DELETE": 1},
        ),
    ),
    Case(
        "bad_session_id",
        "initialize assigns an 8 KiB Mcp-Session-Id",
        "max_echo_bytes (an unusable session id)",
        h1(
            {"initialize": answer(legacy_init(headers=[("mcp-session-id", "s" * 8192)]))},
            legacy=True,
        ),
        answered("connect", "bad_session_id", requests={D: 1, "initialize": 1}),
    ),
    Case(
        "initialize_old_version",
        "initialize answers protocolVersion 2024-11-05",
        "unsupported version",
        h1(
            {"initialize": answer(legacy_init(result={"protocolVersion": "2024-11-05"}))},
            legacy=True,
        ),
        answered("connect", "unsupported_version", requests={D: 1, "initialize": 1}),
    ),
    # ---- results
    Case(
        "content_unknown_types",
        "tools/call content of unknown types only",
        "no usable content",
        h1(
            {
                C: answer(
                    call_answer(
                        [{"type": "tool_use", "id": "x"}, {"type": "video", "data": "AA=="}]
                    )
                )
            }
        ),
        answered("call", "no_usable_content", requests={D: 1, L: 1, C: 1}),
    ),
    Case(
        "content_bad_base64",
        "tools/call image and audio blocks with invalid base64",
        "no usable content",
        h1(
            {
                C: answer(
                    call_answer(
                        [
                            {"type": "image", "data": "!!!not base64", "mimeType": "image/png"},
                            {"type": "audio", "data": "A", "mimeType": "audio/wav"},
                        ]
                    )
                )
            }
        ),
        answered("call", "no_usable_content", requests={D: 1, L: 1, C: 1}),
    ),
    Case(
        "content_mixed",
        "one text block among unknown and undecodable ones",
        "bad blocks dropped",
        h1(
            {
                C: answer(
                    call_answer(
                        [
                            {"type": "weird"},
                            {"type": "text", "text": "kept"},
                            {"type": "image", "data": "%%%", "mimeType": "image/png"},
                        ]
                    )
                )
            }
        ),
        Expect("ok", requests={D: 1, L: 1, C: 1}, check=_one_text_block),
    ),
    # ---- multi round-trip
    Case(
        "mrtr_input_no_handler",
        "input_required with inputRequests, no input handler configured",
        "input we cannot supply",
        h1({C: mrtr({"inputRequests": ELICIT})}),
        answered("call", "input_required", requests={D: 1, L: 1, C: 1}),
    ),
    Case(
        "mrtr_asks_forever",
        "input_required with inputRequests on every attempt (the handler answers)",
        "max_call_attempts",
        h1({C: mrtr({"inputRequests": ELICIT})}),
        answered(
            "call",
            "max_call_attempts",
            attrs={"bound": "max_call_attempts", "limit": LIMITS["max_call_attempts"]},
            requests={D: 1, L: 1, C: LIMITS["max_call_attempts"]},
            check=_answered_inputs,
        ),
        client={"input": "answer"},
        fast=True,
    ),
    Case(
        "mrtr_shed_forever",
        "input_required with `inputRequests: {}` and a requestState, forever",
        "max_call_attempts (after backoff)",
        h1({C: mrtr({"inputRequests": {}, "requestState": "again"})}),
        answered(
            "call",
            "max_call_attempts",
            attrs={"bound": "max_call_attempts", "limit": LIMITS["max_call_attempts"]},
            requests={D: 1, L: 1, C: LIMITS["max_call_attempts"]},
            check=_mrtr_backoff,
        ),
    ),
    Case(
        "mrtr_state_forever",
        "input_required with only a requestState, forever (attempt bound raised to 50)",
        "call_timeout (backoff 50 ms doubling to 500 ms)",
        h1({C: mrtr({"requestState": "again"})}),
        timeout("call", "call_timeout", requests={D: 1, L: 1, C: (4, 9)}, check=_mrtr_backoff),
        limits={"max_call_attempts": 50},
    ),
    Case(
        "mrtr_neither",
        "input_required with neither inputRequests nor requestState",
        "boundary: malformed result",
        h1({C: mrtr({})}),
        answered("call", "malformed_result", requests={D: 1, L: 1, C: 1}),
    ),
    Case(
        "mrtr_declined",
        "input_required the input handler declines",
        "input declined",
        h1({C: mrtr({"inputRequests": ELICIT})}),
        answered("call", "input_declined", requests={D: 1, L: 1, C: 1}),
        client={"input": "decline"},
    ),
    Case(
        "mrtr_oversized_state",
        "input_required with an 8 KiB requestState",
        "max_echo_bytes",
        h1({C: mrtr({"requestState": "s" * 8192})}),
        answered(
            "call",
            "bad_request_state",
            attrs={"bound": "max_echo_bytes", "limit": LIMITS["max_echo_bytes"]},
            requests={D: 1, L: 1, C: 1},
        ),
    ),
    Case(
        "unknown_result_type",
        'resultType "eventually"',
        "boundary: unknown resultType",
        h1({C: answer(call_answer([], resultType="eventually"))}),
        answered("call", "unknown_result_type", requests={D: 1, L: 1, C: 1}),
    ),
    # ---- auth and versions
    Case(
        "auth_401",
        "401 with WWW-Authenticate: Bearer (resource_metadata, error)",
        "Unauthorized (status, parsed challenge)",
        h1(
            {
                D: answer(
                    auth(
                        401,
                        'Bearer realm="mcp", error="invalid_token", '
                        'resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource"',
                    )
                )
            }
        ),
        Expect(
            **_failed("Unauthorized", "connect", status=401),
            requests={D: 1},
            check=lambda report, stats, port: _challenge(report, "invalid_token"),
        ),
        fast=True,
    ),
    Case(
        "auth_403_on_call",
        "403 with WWW-Authenticate: Bearer error=insufficient_scope on tools/call",
        "Unauthorized (status, parsed challenge)",
        h1({C: answer(auth(403, 'Bearer error="insufficient_scope", scope="tools:call"'))}),
        Expect(
            **_failed("Unauthorized", "call", status=403),
            requests={D: 1, L: 1, C: 1},
            check=lambda report, stats, port: _challenge(report, "insufficient_scope"),
        ),
    ),
    Case(
        "version_retry_same",
        "-32022 naming only 2026-07-28 (the version just refused), every time",
        "one -32022 retry per negotiation",
        h1({D: answer(version_error([MODERN]))}),
        answered("connect", "unsupported_version", requests={D: 2}),
    ),
    Case(
        "version_unknown_only",
        "-32022 naming only versions sansmcp does not speak",
        "unsupported version",
        h1({D: answer(version_error(["1999-01-01", "2024-11-05"]))}),
        answered("connect", "unsupported_version", requests={D: 1}),
    ),
    Case(
        "version_ping_pong",
        "-32022 -> 2025-06-18, then initialize answers -32022 -> 2025-03-26, then again",
        "one initialize retry",
        h1(
            {
                D: answer(version_error([LEGACY])),
                "initialize": answer(version_error(["2025-03-26"])),
            }
        ),
        Expect(
            **_failed("ServerAnswered", "connect", reason="jsonrpc_error", code=-32022),
            requests={D: 1, "initialize": 2},
        ),
    ),
    # ---- the pool after an attack: a second Conn on the same Client works
    Case(
        "reuse_after_body_bomb",
        "an endless chunked body on the first listing only, then a second Conn",
        "the broken socket never returns to the pool",
        h1({L: chunked_bomb}, once=True),
        replace_expect(
            budget("list", "max_response_bytes"), requests={D: (1, 2), L: 2}, second_ok=True
        ),
    ),
    Case(
        "reuse_after_timeout",
        "the first listing is never answered, then a second Conn",
        "the abandoned socket never returns to the pool",
        h1({L: hang}, once=True),
        replace_expect(timeout("list", "dial_timeout"), requests={D: (1, 2), L: 2}, second_ok=True),
    ),
    Case(
        "reuse_after_sse_drain",
        "the first listing's stream stays open after its answer, then a second Conn",
        "the draining socket is not handed out while busy",
        h1({L: sse_then_endless}, once=True),
        Expect("ok", requests={D: (1, 2), L: 2, C: 1}, second_ok=True),
    ),
    Case(
        "reuse_after_h2_ping_flood",
        "a PING flood on the first listing only, then a second Conn (h2c)",
        "the failed HTTP/2 connection is not reused",
        h2s({L: h2_flood(frame(PING, 0, 0, b"\0" * 8))}, once=True),
        replace_expect(
            budget("list", "h2_max_control_frames"),
            requests={D: (1, 2), L: 2},
            connections=(2, 2),
            second_ok=True,
        ),
        proto="h2",
    ),
    Case(
        "reuse_after_h2_reset",
        "the first listing is never answered (the stream is reset at the deadline), "
        "then a second Conn shares the same HTTP/2 connection",
        "only the stream is reset; the connection stays usable",
        h2s({L: hang}, once=True),
        replace_expect(
            timeout("list", "dial_timeout"),
            requests={D: (1, 2), L: 2},
            connections=(1, 1),
            second_ok=True,
        ),
        proto="h2",
    ),
    # ---- HTTP/2
    Case(
        "h2_well_behaved",
        "a correct server over h2c (the h2 RSS baseline)",
        "-",
        h2s({}),
        Expect("ok", requests={D: 1, L: 1, C: 1}),
        proto="h2",
        fast=True,
    ),
    Case(
        "h2_hpack_bomb",
        "a 12 KB header block that decodes to 32 MB (one indexed 4 KB field, 8,000 references)",
        "max_header_bytes (decoded size, as HPACK counts it)",
        h2s({D: h2_hpack_bomb}),
        budget("connect", "max_header_bytes", requests={D: 1}),
        proto="h2",
        fast=True,
    ),
    Case(
        "h2_continuation_flood",
        "HEADERS without END_HEADERS, then empty CONTINUATION frames forever",
        "h2_max_header_frames",
        h2s({D: h2_continuation_flood}),
        budget("connect", "h2_max_header_frames", requests={D: 1}),
        proto="h2",
        fast=True,
    ),
    Case(
        "h2_ping_flood",
        "PING frames forever",
        "h2_max_control_frames",
        h2s({L: h2_flood(frame(PING, 0, 0, b"\0" * 8))}),
        budget("list", "h2_max_control_frames", requests={D: 1, L: 1}),
        proto="h2",
        fast=True,
    ),
    Case(
        "h2_settings_flood",
        "empty SETTINGS frames forever",
        "h2_max_control_frames",
        h2s({L: h2_flood(frame(SETTINGS, 0, 0))}),
        budget("list", "h2_max_control_frames", requests={D: 1, L: 1}),
        proto="h2",
    ),
    Case(
        "h2_window_update_flood",
        "WINDOW_UPDATE (+1) frames forever",
        "h2_max_control_frames",
        h2s({L: h2_flood(frame(WINDOW_UPDATE, 0, 0, (1).to_bytes(4, "big")))}),
        budget("list", "h2_max_control_frames", requests={D: 1, L: 1}),
        proto="h2",
    ),
    Case(
        "h2_rst_flood",
        "RST_STREAM frames for a finished stream, forever",
        "h2_max_control_frames",
        h2s({L: h2_flood(frame(RST_STREAM, 0, 1, (0).to_bytes(4, "big")))}),
        budget("list", "h2_max_control_frames", requests={D: 1, L: 1}),
        proto="h2",
    ),
    Case(
        "h2_informational_flood",
        "103 Early Hints heads forever, over HTTP/2",
        "max_informational",
        h2s({L: h2_informational_flood}),
        budget("list", "max_informational", requests={D: 1, L: 1}),
        proto="h2",
    ),
    Case(
        "h2_oversized_frame",
        "a DATA frame header announcing 16 MiB, then bytes",
        "SETTINGS_MAX_FRAME_SIZE (checked before buffering)",
        h2s({L: h2_oversized_frame}),
        failed("list", "framing", requests={D: 1, L: 1}),
        proto="h2",
    ),
    Case(
        "h2_zero_streams",
        "SETTINGS_MAX_CONCURRENT_STREAMS = 0, otherwise correct",
        "one connection per request, no dial storm",
        h2s({}, max_streams=0),
        Expect("ok", requests={D: 1, L: 1, C: 1}, connections=(1, 3)),
        proto="h2",
    ),
    Case(
        "h2_tiny_data",
        "1-byte DATA frames forever",
        "h2_max_small_data_frames",
        h2s({L: h2_tiny_data}),
        budget("list", "h2_max_small_data_frames", requests={D: 1, L: 1}),
        proto="h2",
        fast=True,
    ),
    Case(
        "h2_body_bomb",
        "an endless body within the flow-control windows",
        "max_response_bytes",
        h2s({L: h2_body_bomb}),
        budget("list", "max_response_bytes", requests={D: 1, L: 1}),
        proto="h2",
    ),
    # ---- parsed size (issue 10 C): small in bytes, large once parsed -------------------
    # The suite's limits leave max_json_values, max_tools and max_recorded_skips at their
    # defaults: these cases check that the defaults hold the RSS rule at a 1 MiB budget.
    Case(
        "parsed_empty_objects",
        "a ~1 MiB listing of `[{},{},...]` (350,000 empty entries)",
        "max_json_values (counted before decoding)",
        h1({L: parsed_answer(lambda: repeated_entries(b"{}"))}),
        budget("list", "max_json_values", limit=PARSED_VALUES, requests={D: 1, L: 1}),
        ops=("list",),
        fast=True,
    ),
    Case(
        "parsed_empty_objects_h2",
        "the same over h2c",
        "max_json_values (counted before decoding)",
        h2s({L: parsed_answer(lambda: repeated_entries(b"{}"))}),
        budget("list", "max_json_values", limit=PARSED_VALUES, requests={D: 1, L: 1}),
        ops=("list",),
        proto="h2",
    ),
    Case(
        "parsed_empty_arrays",
        "a ~1 MiB listing of `[[],[],...]`",
        "max_json_values (counted before decoding)",
        h1({L: parsed_answer(lambda: repeated_entries(b"[]"))}),
        budget("list", "max_json_values", limit=PARSED_VALUES, requests={D: 1, L: 1}),
        ops=("list",),
    ),
    Case(
        "parsed_floats",
        "a ~1 MiB listing of `[0.1,0.1,...]`",
        "max_json_values (counted before decoding)",
        h1({L: parsed_answer(lambda: repeated_entries(b"0.1"))}),
        budget("list", "max_json_values", limit=PARSED_VALUES, requests={D: 1, L: 1}),
        ops=("list",),
    ),
    Case(
        "parsed_minimal_tools",
        "a ~1 MiB listing of 20,000 minimal valid tools",
        "max_tools (before the page is validated)",
        h1({L: parsed_answer(lambda: minimal_tools(20_000))}),
        answered(
            "list",
            "max_tools",
            attrs={"bound": "max_tools", "limit": PARSED_TOOLS},
            requests={D: 1, L: 1},
        ),
        ops=("list",),
        fast=True,
    ),
    Case(
        "parsed_minimal_tools_at_max",
        "a listing of exactly max_tools (10,000) minimal valid tools",
        "max_tools (at the bound: listed)",
        h1({L: parsed_answer(lambda: minimal_tools(PARSED_TOOLS))}),
        Expect("ok", requests={D: 1, L: 1}),
        ops=("list",),
    ),
    Case(
        "parsed_skipped_flood",
        "a listing of 5,000 unusable entries among 2 good tools",
        "max_recorded_skips (100 recorded, the rest counted)",
        h1(
            {
                L: parsed_answer(
                    lambda: b",".join([b'{"name":1}'] * 5000 + [b'{"name":"a","inputSchema":{}}'])
                )
            }
        ),
        Expect("ok", requests={D: 1, L: 1}, check=_skips_capped),
        ops=("list",),
    ),
    Case(
        "parsed_astral_string",
        "one tool whose description is ~1 MiB of astral-plane characters",
        "max_tool_bytes (skipped; the string costs its size, once)",
        h1({L: parsed_answer(astral_tool)}),
        Expect("ok", requests={D: 1, L: 1}),
        ops=("list",),
        fast=True,
    ),
    Case(
        "parsed_tiny_sse_events",
        "an event stream of 15,000 small notifications, then the listing",
        "max_response_bytes (each event costs its bytes; events are parsed one at a time)",
        h1({L: tiny_events_then_listing}),
        Expect("ok", requests={D: 1, L: 1}),
        ops=("list",),
        fast=True,
    ),
    Case(
        "parsed_sse_short_data_lines",
        "one ~1 MiB event of 2-byte `data:` lines (not JSON once joined)",
        "max_response_bytes (the data buffer holds bytes, not a string per line)",
        h1({L: sse_payload(b"data:ab\n" * (PARSED_SIZE // 8) + b"\n")}),
        failed("list", "not_jsonrpc", requests={D: 1, L: 1}),
        ops=("list",),
    ),
    # ---- red team (issue 10, adversarial review): shapes the earlier cases did not try ----
    # Each case is a promise tried from outside by someone who did not write the code; the
    # builders are in red_attacks.py.  See tests/hostile/test_red.py for the ones that do
    # not fit a Case (resolver hooks, Limits edge values, call results at the default budget).
    Case(
        "red_sse_big_id_blank_lines",
        "a 400 KB `id:` line, then 500,000 empty lines (each an empty dispatch), then the listing",
        "max_response_bytes (the id is decoded once, not per dispatch)",
        h1({L: red.sse_id_then_blank_lines(400_000, 500_000)}),
        Expect("ok", requests={D: 1, L: 1}),
        ops=("list",),
        fast=True,
    ),
    Case(
        "red_sse_echo_sized_id_tiny_chunks",
        "a 16 KiB `id:` line (max_echo_bytes, so kept), then 10,000 one-byte chunks, then the"
        " listing",
        "max_response_bytes (the kept id is judged once, not per body chunk; was ~6.5 s)",
        h1({L: red.sse_id_then_tiny_chunks(16 << 10, 10_000)}),
        Expect("ok", requests={D: 1, L: 1}),
        ops=("list",),
        # h1_max_small_chunks raised past the 10,000 chunks: this case measures the id's cost
        limits={
            "max_echo_bytes": 16 << 10,
            "dial_timeout": 10.0,
            "list_timeout": 10.0,
            "h1_max_small_chunks": 10_000,
        },
        fast=True,
    ),
    Case(
        "red_drain_holds_the_only_socket",
        "the listing's event stream stays open after its response (keep-alives), with"
        " pool_max_sockets=1; the call is answered at once",
        "cancel_grace (the drained stream is dropped 0.5 s after the response, freeing the"
        " socket the call waits for)",
        h1({L: sse_then_endless}),
        Expect("ok", requests={D: 1, L: 1, C: 1}),
        limits={"pool_max_sockets": 1, "pool_max_sockets_per_origin": 1},
        fast=True,
    ),
    Case(
        "red_legacy_listen_takes_the_only_socket",
        "a legacy server that keeps the standalone GET stream open (as it should), with an"
        " input handler and pool_max_sockets=1",
        "the stream yields its socket to the waiting listing (issue 14) and is not re-opened"
        " while no socket is to spare",
        h1({"GET": red.listen_stays_open}, legacy=True),
        Expect("ok", requests={**LEGACY_HANDSHAKE, "GET": 1, L: 1, C: 1, "DELETE": 1}),
        limits={"pool_max_sockets": 1, "pool_max_sockets_per_origin": 1},
        client={"input": "answer"},
        fast=True,
    ),
]


# ---------------------------------------------------------------- issue 10 B and D (wire)
# Bytes no live exchange owns are bounded per socket (Limits.max_unowned_bytes_per_socket),
# and a :status that is not three digits is a framing failure, never an exception in a
# reader task (on trio that was a TrioInternalError, on asyncio "Task exception was never
# retrieved": either prints a traceback, which test_hostile's stderr check refuses).

_DATA_FRAME, _UNKNOWN_FRAME = 0x0, 0xEE  # DATA; a frame type no extension defines


async def h2_listing_left_open(request: Request, reply: H2Reply, state: State) -> None:
    """Answer the listing on an event stream left open; once the client has given up on
    the stream (it drains it for cancel_grace, 0.5 s, then resets it) and its call has
    arrived on the same connection, flood DATA frames on the stream it reset."""
    await reply.headers(200, SSE_HEAD)
    await reply.data(b"data: " + well_behaved(request).body + b"\n\n")
    called = state.setdefault("called", asyncio.Event())
    await called.wait()
    await asyncio.sleep(1.0)  # by now the client has reset the listing's stream
    flood = frame(_DATA_FRAME, 0, reply.stream_id, b"\0" * 16_000) * 16
    while True:
        await reply.raw(flood)


async def h2_call_arrives(request: Request, reply: H2Reply, state: State) -> None:
    state.setdefault("called", asyncio.Event()).set()
    await reply.hang()


async def h2_unknown_frames_after_head(request: Request, reply: H2Reply, state: State) -> None:
    await reply.headers(200, JSON_HEAD)
    flood = frame(_UNKNOWN_FRAME, 0, reply.stream_id, b"\0" * 16_000) * 16
    while True:
        await reply.raw(flood)


def h2_status(value: bytes) -> H2Attack:
    async def attack(request: Request, reply: H2Reply, state: State) -> None:
        fields = [(b":status", value), (b"content-type", b"application/json")]
        block = reply.h2.encoder.encode(fields)
        await reply.raw(frame(HEADERS, END_HEADERS, reply.stream_id, block))
        await reply.hang()

    return attack


_UNOWNED = {"max_unowned_bytes_per_socket": 1 << 20}
CASES += [
    Case(
        "h2_reset_stream_data_flood",
        "the listing on an event stream; after the client reset it, DATA on it forever",
        "max_unowned_bytes_per_socket (DATA on a stream the client reset)",
        h2s({L: h2_listing_left_open, C: h2_call_arrives}),
        budget("call", "max_unowned_bytes_per_socket", limit=1 << 20, requests={D: 1, L: 1, C: 1}),
        proto="h2",
        limits=_UNOWNED,
        fast=True,
    ),
    Case(
        "h2_unknown_frame_flood",
        "16 KB frames of an unknown type on stream 0, forever",
        "max_unowned_bytes_per_socket (frames no exchange owns)",
        h2s({L: h2_flood(frame(_UNKNOWN_FRAME, 0, 0, b"\0" * 16_000))}),
        budget("list", "max_unowned_bytes_per_socket", limit=1 << 20, requests={D: 1, L: 1}),
        proto="h2",
        limits=_UNOWNED,
        fast=True,
    ),
    Case(
        "h2_unknown_frames_after_head",
        "a head, then 16 KB frames of an unknown type on the response's stream, forever",
        "max_response_bytes (framing on a live exchange is charged to it)",
        h2s({L: h2_unknown_frames_after_head}),
        budget("list", "max_response_bytes", requests={D: 1, L: 1}),
        proto="h2",
        limits=_UNOWNED,
    ),
    Case(
        "h2_status_abc",
        "`:status: abc` on the listing",
        "boundary: a status is three digits",
        h2s({L: h2_status(b"abc")}),
        failed("list", "framing", requests={D: 1, L: 1}),
        proto="h2",
        fast=True,
    ),
    Case(
        "h2_status_1zz",
        "`:status: 1zz` on the listing (h2 takes it for an informational head)",
        "boundary: a status is three digits",
        h2s({L: h2_status(b"1zz")}),
        failed("list", "framing", requests={D: 1, L: 1}),
        proto="h2",
    ),
]
# ------------------------------------------------------------ end of issue 10 B and D (wire)


# ---------------------------------------------------------------- issue 15: the listing cache
# A listing's ttlMs is the server's word: a 400-digit integer must not break the cache (its
# freshness is capped at a day), and an entry the cache keeps is served on the second list.


def cached_listing(**hints: Any) -> Callable[[Request], Answer]:
    def make(request: Request) -> Answer:
        return json_answer(result(request.rpc_id, {**list_result([tool("echo")]), **hints}))

    return make


CASES += [
    Case(
        "cache_ttl_400_digits",
        "a public listing whose ttlMs is a 400-digit integer; the client lists twice",
        "the cache caps freshness at a day: kept, and the second list sends nothing",
        h1({L: answer(cached_listing(ttlMs=10**400, cacheScope="public"))}),
        Expect("ok", requests={D: 1, L: 1, C: 1}),
        ops=("list", "list", "call"),
        fast=True,
    ),
    Case(
        "cache_private_without_credential",
        "a private listing with a long ttlMs, to a client with no credential; it lists twice",
        "no authorization context: a private result is not kept, the second list asks again",
        h1({L: answer(cached_listing(ttlMs=3_600_000, cacheScope="private"))}),
        Expect("ok", requests={D: 1, L: 2, C: 1}),
        ops=("list", "list", "call"),
        fast=True,
    ),
]
# ------------------------------------------------------------ end of issue 15
# ---- issue 15: structuredContent against a hostile outputSchema, ended by the budget ----
_STEPS = Limits().max_validation_steps
_DEPTH = Limits().max_validation_depth


def schema_listing(output_schema: Any) -> H1Attack:
    """The listing: one ``echo`` tool with ``output_schema``."""
    return answer(
        lambda request: json_answer(
            result(request.rpc_id, list_result([tool("echo", outputSchema=output_schema)]))
        )
    )


def _nested_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"n": schema}}
    return schema


_TEXT = [{"type": "text", "text": "t"}]
_WIDE_ANY_OF = {
    "type": "object",
    "properties": {"v": {"anyOf": [{"contains": {"const": f"z{i}"}} for i in range(200)]}},
}
CASES += [
    Case(
        "schema_catastrophic_pattern",
        "an outputSchema `pattern` of `(a+)+$` and a 64 KiB string of `a` then `!`",
        "max_validation_steps (a linear-time matcher; the threads it steps are counted)",
        h1(
            {
                L: schema_listing({"type": "object", "properties": {"s": {"pattern": "(a+)+$"}}}),
                C: answer(call_answer(_TEXT, structuredContent={"s": "a" * 65_536 + "!"})),
            }
        ),
        answered(
            "call",
            "validation_budget",
            attrs={"bound": "max_validation_steps", "limit": _STEPS},
            requests={D: 1, L: 1, C: 1},
        ),
        fast=True,
    ),
    Case(
        "schema_deep_nesting",
        f"an outputSchema nested {_DEPTH + 36} levels deep",
        "max_validation_depth (when the schema is compiled, before the call is sent)",
        h1({L: schema_listing(_nested_schema(_DEPTH + 36))}),
        answered(
            "call",
            "validation_budget",
            attrs={"bound": "max_validation_depth", "limit": _DEPTH},
            requests={D: 1, L: 1},
        ),
    ),
    Case(
        "schema_wide_any_of",
        "an outputSchema `anyOf` of 200 `contains` branches none of 20,000 items meets",
        "max_validation_steps (every branch, item and comparison is counted)",
        h1(
            {
                L: schema_listing(_WIDE_ANY_OF),
                C: answer(call_answer(_TEXT, structuredContent={"v": [0] * 20_000})),
            }
        ),
        answered(
            "call",
            "validation_budget",
            attrs={"bound": "max_validation_steps", "limit": _STEPS},
            requests={D: 1, L: 1, C: 1},
        ),
    ),
]


# ---------------------------------------------------------------- issue 14: notifications
# Progress and server notifications are bounded per request (Limits.max_notifications:
# past it dropped and counted, never fatal) and charged to the byte budget like any
# response byte; progress never extends call_timeout.


def progress_flood(count: int, *, logs: int = 0, pad: int = 0) -> H1Attack:
    """The call answered on an event stream: ``count`` progress notifications for its
    token and ``logs`` log messages (each padded by ``pad`` bytes), then the result."""

    async def attack(request: Request, reply: H1Reply, state: State) -> None:
        token = request.params.get("_meta", {}).get("progressToken")
        notes = b"".join(
            sse_event(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": i, "message": "x" * pad},
                }
            )
            for i in range(count)
        )
        logs_part = tiny_events(logs)
        answer = sse_event(
            result(request.rpc_id, {"resultType": "complete", "content": [], "isError": False})
        )
        await reply.answer(sse_answer(notes + logs_part + answer))

    return attack


async def progress_forever(request: Request, reply: H1Reply, state: State) -> None:
    """Progress for the call every 20 ms, and never the result."""
    token = request.params.get("_meta", {}).get("progressToken")
    await reply.send(head(200, SSE_HEAD))
    step = 0
    while True:
        step += 1
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": token, "progress": step},
        }
        await reply.send(sse_event(note))
        await asyncio.sleep(0.02)


def _counted(progress: int, dropped: int, notifications: int) -> Callable[..., None]:
    def check(report: dict[str, Any], stats: Any, port: int) -> None:
        call = report["ops"][-1]
        assert (call["progress"], call["dropped"]) == (progress, dropped), call
        assert report["notifications"] == notifications, report

    return check


CASES += [
    Case(
        "notifications_past_the_cap_are_dropped",
        "the call's event stream carries 3,000 progress notifications and 2,000 log"
        " messages before the result",
        "max_notifications (1,000 per request delivered, the rest dropped and counted)",
        h1({C: progress_flood(3000, logs=2000)}),
        Expect(
            "ok",
            requests={D: 1, L: 1, C: 1},
            check=_counted(progress=1000, dropped=4000, notifications=0),
        ),
        client={"observe": True},
        fast=True,
    ),
    Case(
        "notifications_count_against_the_byte_budget",
        "progress notifications of 1 KiB each, 9 MiB of them, before the result",
        "max_response_bytes (notifications are response bytes)",
        h1({C: progress_flood(9000, pad=1024)}),
        Expect(
            "ConnectionFailed",
            failed_op="call",
            attrs={"cause": "budget", "bound": "max_response_bytes"},
            over_limit=True,
            requests={D: 1, L: 1, C: 1},
        ),
        client={"observe": True},
        fast=True,
    ),
    Case(
        "progress_never_extends_call_timeout",
        "progress for the call every 20 ms, and never its result",
        "call_timeout (progress does not extend it)",
        h1({C: progress_forever}),
        Expect(
            "ConnectionFailed",
            failed_op="call",
            attrs={"cause": "timeout", "bound": "call_timeout"},
            deadline=LIMITS["call_timeout"],
            requests={D: 1, L: 1, C: 1},
        ),
        client={"observe": True},
    ),
]


def _challenge(report: dict[str, Any], error_code: str) -> None:
    challenges = report["error"]["challenges"]
    assert challenges and challenges[0][0].lower() == "bearer", challenges
    assert challenges[0][1].get("error") == error_code, challenges


def table() -> str:
    """The README table: case -> expected outcome -> bound that stops it."""
    rows = [
        "| case | attack | expected outcome | bound that stops it | fast set |",
        "|---|---|---|---|---|",
    ]
    for case in CASES:
        expect = case.expect
        if expect.outcome == "ok":
            outcome = "succeeds"
        else:
            shown = {k: v for k, v in expect.attrs.items() if v is not None}
            detail = ", ".join(f"{k}={json.dumps(v)}" for k, v in shown.items())
            outcome = f"`{expect.outcome}` ({detail}) in {expect.failed_op}"
        fast = "yes" if case.fast else ""
        if case.xfail:
            fast = (fast + " (xfail: known bug)").strip()
        rows.append(f"| `{case.name}` | {case.attack} | {outcome} | {case.bound} | {fast} |")
    return "\n".join(rows)


# ---------------------------------------------------------------- OAuth (Config.oauth)
# The MCP server and its authorization server share the loopback origin; the client's
# authorization step GETs /authorize (one more GET) and hands back the redirect.
from . import oauth as oa  # noqa: E402

_OAUTH = {"oauth": True}
_OAUTH_LIMITS = {"auth_timeout": 1.0, "max_auth_document_bytes": 16 << 10}
_FULL_FLOW = {D: 2, L: 1, C: 1, "GET": 3, "POST": 2}  # PRM, AS metadata, authorize; DCR, token
_AUTH_CF = "ConnectionFailed"
CASES += [
    Case(
        "oauth_well_behaved",
        "a correct server behind OAuth: 401, PRM, AS metadata, DCR, PKCE, token",
        "-",
        oa.oauth_h1(),
        Expect("ok", requests=_FULL_FLOW),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
        fast=True,
    ),
    Case(
        "oauth_prm_names_metadata_address",
        "the PRM names an authorization server on 169.254.169.254 (cloud metadata)",
        "the dial guard (refused before any packet to it)",
        oa.oauth_h1(prm={"authorization_servers": ["https://169.254.169.254"]}),
        Expect(
            _AUTH_CF,
            "connect",
            {"cause": "refused_address"},
            requests={D: 1, "GET": 1},
            connections=(1, 1),
        ),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
        fast=True,
    ),
    Case(
        "oauth_prm_names_private_address",
        "the PRM names an authorization server on 10.0.0.7",
        "the dial guard",
        oa.oauth_h1(prm={"authorization_servers": ["https://10.0.0.7"]}),
        Expect(_AUTH_CF, "connect", {"cause": "refused_address"}, requests={D: 1, "GET": 1}),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
    ),
    Case(
        "oauth_token_endpoint_link_local",
        "the AS metadata names a token endpoint on [fe80::1]",
        "the dial guard (the code never leaves)",
        oa.oauth_h1(metadata={"token_endpoint": "https://[fe80::1]/token"}),
        Expect(
            _AUTH_CF, "connect", {"cause": "refused_address"}, requests={D: 1, "GET": 3, "POST": 1}
        ),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
        fast=True,
    ),
    Case(
        "oauth_registration_endpoint_private",
        "the AS metadata names a registration endpoint on 192.168.1.1",
        "the dial guard",
        oa.oauth_h1(metadata={"registration_endpoint": "https://192.168.1.1/register"}),
        Expect(_AUTH_CF, "connect", {"cause": "refused_address"}, requests={D: 1, "GET": 2}),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
    ),
    Case(
        "oauth_http_endpoint_elsewhere",
        "the AS metadata names a plain-http token endpoint off loopback",
        "https required except on loopback",
        oa.oauth_h1(metadata={"token_endpoint": "http://auth.example.com/token"}),
        Expect(_AUTH_CF, "connect", {"cause": "bad_document"}, requests={D: 1, "GET": 2}),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
    ),
    Case(
        "oauth_oversized_metadata",
        "the AS metadata is 64 KiB",
        "max_auth_document_bytes",
        oa.oauth_h1(bends={"/.well-known/oauth-authorization-server": oa.oversized(64 << 10)}),
        Expect(
            _AUTH_CF,
            "connect",
            {"cause": "budget", "bound": "max_auth_document_bytes", "limit": 16 << 10},
            over_limit=True,
            requests={D: 1, "GET": 2},
        ),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
        fast=True,
    ),
    Case(
        "oauth_slow_token_endpoint",
        "the token endpoint never answers",
        "auth_timeout (all fetches of one authorization)",
        oa.oauth_h1(bends={"/token": oa.stall}),
        Expect(
            _AUTH_CF,
            "connect",
            {"cause": "timeout", "bound": "auth_timeout", "limit": 1.0},
            deadline=1.0,
            requests={D: 1, "GET": 3, "POST": 2},
        ),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
        fast=True,
    ),
    Case(
        "oauth_metadata_redirect",
        "the AS metadata answers 302 to another host",
        "redirects are never followed",
        oa.oauth_h1(
            bends={"/.well-known/oauth-authorization-server": oa.redirect_to("https://evil.test/")}
        ),
        Expect(
            _AUTH_CF,
            "connect",
            {"cause": "redirect", "status": 302, "location": "https://evil.test/"},
            requests={D: 1, "GET": 2},
        ),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
        fast=True,
    ),
    Case(
        "oauth_endless_step_up",
        "every token is answered 403 insufficient_scope",
        "max_auth_attempts (3 authorizations per operation)",
        oa.oauth_h1(forbid=True),
        Expect(
            "Unauthorized",
            "connect",
            {"cause": "insufficient_scope", "status": 403},
            requests={D: 4, "GET": 9, "POST": 4},
        ),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
        fast=True,
    ),
    Case(
        "oauth_state_mismatch",
        "the redirect carries another state",
        "state checked (no token request)",
        oa.oauth_h1(redirect={"state": "forged"}),
        Expect(
            "Unauthorized",
            "connect",
            {"cause": "state_mismatch", "status": 401},
            requests={D: 1, "GET": 3, "POST": 1},
        ),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
        fast=True,
    ),
    Case(
        "oauth_iss_mismatch",
        "the redirect's iss is the issuer with a trailing slash",
        "RFC 9207 iss compared exactly (no token request)",
        oa.oauth_h1(redirect={"iss": "{base}/"}),
        Expect(
            "Unauthorized",
            "connect",
            {"cause": "iss_mismatch", "status": 401},
            requests={D: 1, "GET": 3, "POST": 1},
        ),
        client=_OAUTH,
        limits=_OAUTH_LIMITS,
        fast=True,
    ),
]


# ---- issue 30: a tools/call the server runs as a task (Config(tasks=True)) ----

TG, TU, TC = "tasks/get", "tasks/update", "tasks/cancel"
_TASKS = {"tasks": True}


def task_value(**more: Any) -> dict[str, Any]:
    return {
        "taskId": "t-1",
        "status": "working",
        "createdAt": "2026-12-04T10:00:00Z",
        "lastUpdatedAt": "2026-12-04T10:00:00Z",
        "ttlMs": None,
        "pollIntervalMs": 100,
        **more,
    }


def task_call(**more: Any) -> H1Attack:
    """``tools/call`` answered with a task handle."""
    return answer(
        lambda request: json_answer(
            result(request.rpc_id, {"resultType": "task", **task_value(**more)})
        )
    )


def task_polls(*answers: dict[str, Any]) -> H1Attack:
    """``tasks/get`` answered with ``answers`` in turn, the last one forever."""

    async def attack(request: Request, reply: H1Reply, state: State) -> None:
        seen = state["polls"] = state.get("polls", 0) + 1
        value = answers[min(seen, len(answers)) - 1]
        await reply.answer(json_answer(result(request.rpc_id, {"resultType": "complete", **value})))

    return attack


async def new_key_each_poll(request: Request, reply: H1Reply, state: State) -> None:
    seen = state["polls"] = state.get("polls", 0) + 1
    asks = {f"q{seen}": ELICIT["q"]}
    value = {"resultType": "complete", **task_value(status="input_required", inputRequests=asks)}
    await reply.answer(json_answer(result(request.rpc_id, value)))


ACK = answer(lambda request: json_answer(result(request.rpc_id, {"resultType": "complete"})))
TASK_DONE = task_value(status="completed", result=call_result([{"type": "text", "text": "done"}]))


def _task_routed(report: dict[str, Any], stats: Any, port: int) -> None:
    tasks = [r for r in stats.requests if r.key.startswith("tasks/")]
    assert tasks and all(r.headers.get("mcp-name") == "t-1" for r in tasks), tasks


CASES += [
    Case(
        "task_well_behaved",
        "a call run as a task: working, then completed (Config(tasks=True))",
        "succeeds; every task request routed by Mcp-Name",
        h1({C: task_call(), TG: task_polls(task_value(), TASK_DONE)}),
        Expect("ok", requests={D: 1, L: 1, C: 1, TG: 2}, check=_task_routed),
        client=_TASKS,
        fast=True,
    ),
    Case(
        "task_unasked",
        "a task handle to a client that did not declare the tasks extension",
        "boundary: a task where none may come",
        h1({C: task_call()}),
        answered("call", "unexpected_task", requests={D: 1, L: 1, C: 1}),
        fast=True,
    ),
    Case(
        "task_poll_zero_forever",
        "working forever, pollIntervalMs 0",
        "max_task_polls (each pause the min_task_poll_interval floor, never a spin)",
        h1({C: task_call(pollIntervalMs=0), TG: task_polls(task_value(pollIntervalMs=0))}),
        answered(
            "call",
            "max_task_polls",
            attrs={"bound": "max_task_polls", "limit": LIMITS["max_task_polls"]},
            requests={D: 1, L: 1, C: 1, TG: LIMITS["max_task_polls"]},
        ),
        client=_TASKS,
        fast=True,
    ),
    Case(
        "task_poll_interval_huge",
        "pollIntervalMs 10**12: the server parks the client",
        "task_timeout (the pause clamped; the task cancelled when the call gives up)",
        h1({C: task_call(pollIntervalMs=10**12), TC: ACK}),
        timeout("call", "task_timeout", requests={D: 1, L: 1, C: 1, TC: 1}),
        client=_TASKS,
    ),
    Case(
        "task_id_changes",
        "tasks/get answers about another taskId",
        "boundary: the task's id is stable",
        h1({C: task_call(), TG: task_polls(task_value(taskId="t-2"))}),
        answered("call", "task_id_changed", requests={D: 1, L: 1, C: 1, TG: 1}),
        client=_TASKS,
    ),
    Case(
        "task_status_unknown",
        "tasks/get answers status 'running'",
        "boundary: a status outside the table",
        h1({C: task_call(), TG: task_polls(task_value(status="running"))}),
        answered("call", "malformed_task", requests={D: 1, L: 1, C: 1, TG: 1}),
        client=_TASKS,
    ),
    Case(
        "task_lost",
        "tasks/get answers -32602 for the task it just created",
        "boundary: the server lost its task",
        h1({C: task_call(), TG: answer(lambda r: json_answer(error(r.rpc_id, -32602, "no task")))}),
        answered("call", "task_lost", attrs={"code": -32602}, requests={D: 1, L: 1, C: 1, TG: 1}),
        client=_TASKS,
        fast=True,
    ),
    Case(
        "task_asks_forever",
        "input_required with a new key on every poll (the handler answers each)",
        "max_call_attempts (input rounds of one call)",
        h1({C: task_call(), TG: new_key_each_poll, TU: ACK}),
        answered(
            "call",
            "max_call_attempts",
            attrs={"bound": "max_call_attempts", "limit": LIMITS["max_call_attempts"]},
            requests={
                D: 1,
                L: 1,
                C: 1,
                TG: LIMITS["max_call_attempts"] + 1,
                TU: LIMITS["max_call_attempts"],
            },
        ),
        client={**_TASKS, "input": "answer"},
    ),
    Case(
        "task_asks_again_after_working",
        "input_required, answered; working; then the answered key again",
        "boundary: a task that flaps back to asking what it was given",
        h1(
            {
                C: task_call(),
                TG: task_polls(
                    task_value(status="input_required", inputRequests=ELICIT),
                    task_value(),
                    task_value(status="input_required", inputRequests=ELICIT),
                ),
                TU: ACK,
            }
        ),
        answered("call", "task_transition", requests={D: 1, L: 1, C: 1, TG: 3, TU: 1}),
        client={**_TASKS, "input": "answer"},
    ),
]


if __name__ == "__main__":
    print(table())
