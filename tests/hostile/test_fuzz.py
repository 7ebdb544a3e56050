"""Hypothesis at the public API: near-valid HTTP/1.1 and SSE answers from a real socket.

A raw loopback server answers one drawn kind of request (``server/discover``,
``tools/list``, ``tools/call`` or ``initialize``) with a generated response -- status
line, headers, framing (length exact / short / long, chunked, bad chunks, until EOF),
1xx heads, a JSON-RPC message or an event stream carrying one, byte mutations, split
writes -- and everything else correctly.  Whatever it sends, the real ``Client`` (drawn
backend, in this process) either succeeds or raises ``ConnectionFailed``,
``Unauthorized`` or ``ServerAnswered``, within its deadlines.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from dataclasses import dataclass
from typing import Any

import trio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sansmcp.io_adapters import asyncio as asyncio_adapter
from sansmcp.io_adapters import trio as trio_adapter
from tests.e2e import sync_shim

from ..timing import assert_span_within, span
from .answers import LEGACY, MODERN, Request, well_behaved
from .cases import LIMITS, SLACK
from .client_host import scenario
from .server_h1 import H1Reply, H1Server
from .serving import ServerThread

FULL = os.environ.get("SANSMCP_HOSTILE_FULL") == "1"
EXAMPLES = int(os.environ.get("SANSMCP_HOSTILE_FUZZ_EXAMPLES", 200 if FULL else 30))
ID = "$ID"  # replaced by the request's id when the answer is rendered
FUZZ_LIMITS = {
    **LIMITS,
    "dial_timeout": 0.5,
    "connect_timeout": 1.0,
    "list_timeout": 1.0,
    "call_timeout": 1.0,
    "close_timeout": 0.3,
    "max_call_attempts": 3,
}
# connect + list + call + close, each at most its deadline, plus scheduling slack
RUN_BOUND = 3 * 1.0 + 0.3 + 2 * SLACK

json_leaves = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=6)
json_values = st.recursive(
    json_leaves | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)
tools = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["echo", "a", "", 7, None])},
        optional={
            "inputSchema": st.sampled_from(
                [{"type": "object"}, {}, [], "x", {"type": "object", "properties": 1}]
            ),
            "description": st.text(max_size=8),
            "execution": st.sampled_from(
                [{"taskSupport": "required"}, {"taskSupport": "optional"}, 3]
            ),
            "annotations": st.sampled_from([{"idempotentHint": True}, 1]),
        },
    ),
    max_size=4,
)
blocks = st.lists(
    st.sampled_from(
        [
            {"type": "text", "text": "t"},
            {"type": "text"},
            {"type": "image", "data": "aGk=", "mimeType": "image/png"},
            {"type": "image", "data": "!!", "mimeType": "image/png"},
            {"type": "audio", "data": "aGk="},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "t"}},
            {"type": "resource_link", "uri": "file:///x", "name": "x"},
            {"type": "tool_use"},
            "text",
        ]
    ),
    max_size=3,
)
results = st.fixed_dictionaries(
    {},
    optional={
        "resultType": st.sampled_from(["complete", "input_required", "bogus", 1]),
        "supportedVersions": st.lists(
            st.sampled_from([MODERN, LEGACY, "2025-03-26", "1999-01-01", 5]), max_size=3
        ),
        "protocolVersion": st.sampled_from([MODERN, LEGACY, "2025-03-26", "2024-11-05", None]),
        "tools": tools,
        "nextCursor": st.sampled_from(["c", "d", "", 4, None]),
        "content": blocks,
        "isError": st.sampled_from([False, True, "no"]),
        "structuredContent": json_values,
        "inputRequests": st.sampled_from(
            [{}, {"k": {"method": "elicitation/create", "params": {}}}, [1]]
        ),
        "requestState": st.sampled_from(["s", 3, ""]),
        "ttlMs": json_values,
    },
)
errors = st.fixed_dictionaries(
    {
        "code": st.sampled_from([-32022, -32020, -32601, -32600, 7, "x"]),
        "message": st.sampled_from(["no", 5]),
    },
    optional={
        "data": st.sampled_from(
            [{"supported": [MODERN]}, {"supported": [LEGACY]}, {"supported": "x"}, None]
        )
    },
)
ids = st.sampled_from([ID, ID, ID, 999, "1", None])


@st.composite
def messages(draw: Any) -> Any:
    kind = draw(st.sampled_from(["result", "result", "error", "batch", "note_then_result", "any"]))
    rid = draw(ids)
    if kind == "result":
        return {"jsonrpc": "2.0", "id": rid, "result": draw(results | json_values)}
    if kind == "error":
        return {"jsonrpc": "2.0", "id": rid, "error": draw(errors | json_values)}
    if kind == "batch":
        return [{"jsonrpc": "2.0", "id": rid, "result": draw(results)}]
    if kind == "note_then_result":
        return {"jsonrpc": "2.0", "method": "notifications/message", "params": {}}
    return draw(json_values)


@dataclass(frozen=True)
class Shape:
    """One generated HTTP response (rendered with the request's id)."""

    target: str
    legacy: bool
    status: int
    version: bytes
    content_type: bytes | None
    extra: tuple[tuple[bytes, bytes], ...]
    informational: int
    sse: bool
    sse_prefix: bytes
    message: Any
    then: Any  # a second message (SSE only), e.g. the result after a notification
    framing: str
    mutation: tuple[float, bytes] | None
    splits: tuple[float, ...]


@st.composite
def shapes(draw: Any) -> Shape:
    sse = draw(st.booleans())
    return Shape(
        target=draw(st.sampled_from(["server/discover", "tools/list", "tools/call", "initialize"])),
        legacy=draw(st.booleans()),
        status=draw(st.sampled_from([200, 200, 200, 202, 204, 302, 400, 401, 403, 404, 405, 500])),
        version=draw(
            st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2", b"HTTX/1.1"])
        ),
        content_type=draw(
            st.sampled_from(
                [
                    b"text/event-stream" if sse else b"application/json",
                    b"application/json; charset=utf-8",
                    b"TEXT/EVENT-STREAM",
                    b"text/html",
                    None,
                ]
            )
        ),
        extra=tuple(
            draw(
                st.lists(
                    st.sampled_from(
                        [
                            (b"www-authenticate", b'Bearer realm="x", error="invalid_token"'),
                            (b"www-authenticate", b'Bearer ,,,="'),
                            (b"location", b"http://169.254.169.254/"),
                            (b"mcp-session-id", b"s-1"),
                            (b"mcp-session-id", b"bad id\x7f"),
                            (b"connection", b"close"),
                            (b"x-junk", b"\xff\xfe"),
                        ]
                    ),
                    max_size=3,
                )
            )
        ),
        informational=draw(st.sampled_from([0, 0, 0, 1, 3, 12])),
        sse=sse,
        sse_prefix=draw(
            st.sampled_from(
                [b"", b"id: 7\nretry: 0\n\n", b": hi\n\n", b"event: x\n", b"retry: x\n"]
            )
        ),
        message=draw(messages()),
        then=draw(st.none() | messages()),
        framing=draw(
            st.sampled_from(["length", "length", "short", "long", "chunked", "bad_chunk", "eof"])
        ),
        mutation=draw(st.none() | st.tuples(st.floats(0, 1), st.binary(min_size=1, max_size=3))),
        splits=tuple(draw(st.lists(st.floats(0, 1), max_size=3))),
    )


def _fill(value: Any, rid: Any) -> Any:
    if value == ID:
        return rid
    if isinstance(value, list):
        return [_fill(v, rid) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, rid) for k, v in value.items()}
    return value


def render(shape: Shape, request: Request) -> bytes:
    first = json.dumps(_fill(shape.message, request.rpc_id)).encode()
    if shape.sse:
        body = shape.sse_prefix + b"data: " + first + b"\n\n"
        if shape.then is not None:
            body += b"data: " + json.dumps(_fill(shape.then, request.rpc_id)).encode() + b"\n\n"
    else:
        body = first
    if shape.mutation is not None:
        at = int(shape.mutation[0] * len(body))
        body = body[:at] + shape.mutation[1] + body[at + len(shape.mutation[1]) :]
    head = b"HTTP/1.1 100 Continue\r\n\r\n" * shape.informational
    head += shape.version + b" %d Whatever\r\n" % shape.status
    if shape.content_type is not None:
        head += b"content-type: " + shape.content_type + b"\r\n"
    head += b"".join(name + b": " + value + b"\r\n" for name, value in shape.extra)
    if shape.framing in ("chunked", "bad_chunk"):
        head += b"transfer-encoding: chunked\r\n\r\n"
        size = b"%x" % len(body) if shape.framing == "chunked" else b"zz"
        return head + size + b"\r\n" + body + b"\r\n0\r\n\r\n"
    if shape.framing != "eof":
        declared = len(body) + {"length": 0, "short": -1, "long": 5}[shape.framing]
        head += b"content-length: %d\r\n" % max(declared, 0)
    return head + b"\r\n" + body


def fuzz_server(shape: Shape) -> H1Server:
    async def handler(request: Request, reply: H1Reply) -> None:
        if request.key == shape.target:
            data = render(shape, request)
            cuts = sorted({int(f * len(data)) for f in shape.splits} | {0, len(data)})
            for start, end in itertools.pairwise(cuts):
                await reply.send(data[start:end])
        else:
            good = well_behaved(request, legacy=shape.legacy)
            good.headers.append(("connection", "close"))
            await reply.answer(good)
        reply.close()  # one response per connection: nothing waits on a keep-alive

    return H1Server(handler)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(shape=shapes(), backend=st.sampled_from(["asyncio", "trio", "sync"]))
def test_generated_answers_end_classified(shape: Shape, backend: str) -> None:
    with ServerThread(fuzz_server(shape)) as server:
        spec = {
            "url": f"http://127.0.0.1:{server.port}/mcp",
            "ops": ["list", "call"],
            "limits": FUZZ_LIMITS,
            "input": "answer",
        }
        with span() as took:
            if backend == "trio":
                report = trio.run(scenario, trio_adapter.Client, trio.sleep, spec)
            else:  # asyncio, and the sync adapter behind the e2e suite's shim
                client_cls = sync_shim.Client if backend == "sync" else asyncio_adapter.Client
                report = asyncio.run(scenario(client_cls, asyncio.sleep, spec))
    # Anything but McpError would have propagated out of scenario() and failed the example.
    error = report.get("error") or {}
    event(f"{error.get('class', 'ok')} {error.get('cause') or error.get('reason') or ''}".strip())
    if not report["ok"]:
        assert report["error"]["class"] in ("ConnectionFailed", "Unauthorized", "ServerAnswered"), (
            report
        )
    # CPU time always (the server's thread counts too: generous); wall time under
    # `make hostile` only (tests/timing.py)
    assert_span_within(took, RUN_BOUND, f"the run ({report})")
    assert not server.stats.errors, server.stats.errors
