"""Attacks for the red-team block at the end of ``cases.CASES`` (issue 10, adversarial review).

Written by someone who did not write the code under attack, against promises the
earlier cases did not try: each builder here is one server behaviour; the expectations
live with the cases in ``cases.py``.
"""

from __future__ import annotations

from typing import Any

from .answers import Request, list_result, result, sse_event, tool
from .server_h1 import H1Reply, head

SSE_CHUNKED = [("content-type", "text/event-stream"), ("transfer-encoding", "chunked")]


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _listing_event(request: Request) -> bytes:
    return sse_event(result(request.rpc_id, list_result([tool("echo")])))


def sse_id_then_blank_lines(id_bytes: int, blank_lines: int) -> Any:
    """One ``id:`` line of ``id_bytes`` visible bytes, then ``blank_lines`` empty lines (each
    one dispatches an empty event), then the listing: every dispatch may not re-decode the id."""

    async def attack(request: Request, reply: H1Reply, state: dict[str, Any]) -> None:
        body = b"id: " + b"x" * id_bytes + b"\n" + b"\n" * blank_lines + _listing_event(request)
        await reply.send(head(200, SSE_CHUNKED) + _chunk(body) + b"0\r\n\r\n")

    return attack


def sse_id_then_tiny_chunks(id_bytes: int, chunks: int) -> Any:
    """One ``id:`` line of ``id_bytes`` visible bytes, then ``chunks`` one-byte chunks (each a
    separate body event: a comment byte), then the listing: the id may not be judged again per
    chunk."""

    async def attack(request: Request, reply: H1Reply, state: dict[str, Any]) -> None:
        first = b"id: " + b"x" * id_bytes + b"\n\n:"
        tiny = b"1\r\nx\r\n" * chunks
        last = _chunk(b"\n" + _listing_event(request)) + b"0\r\n\r\n"
        await reply.send(head(200, SSE_CHUNKED) + _chunk(first) + tiny + last)

    return attack


def tiny_chunks_forever(content_type: str) -> Any:
    """A chunked 200 of one-byte chunks (``:`` for an event stream, a space for JSON), forever:
    the HTTP/1.1 twin of ``h2_tiny_data``."""

    async def attack(request: Request, reply: H1Reply, state: dict[str, Any]) -> None:
        byte = b":" if content_type == "text/event-stream" else b" "
        headers = [("content-type", content_type), ("transfer-encoding", "chunked")]
        await reply.send(head(200, headers))
        burst = b"1\r\n%s\r\n" % byte * 10_000
        while True:
            await reply.send(burst)

    return attack


async def listen_stays_open(request: Request, reply: H1Reply, state: dict[str, Any]) -> None:
    """A legacy server's standalone GET stream as the spec has it: accepted, kept open."""
    await reply.send(head(200, [("content-type", "text/event-stream")]))
    await reply.hang()
