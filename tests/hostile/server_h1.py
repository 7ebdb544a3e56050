"""A raw HTTP/1.1 server on asyncio sockets, for byte-exact misbehaviour.

The server parses just enough of each request (request line, headers, a
``Content-Length`` body) to count it and hand it to a *handler*, which writes whatever
bytes it likes through an :class:`H1Reply` -- a well-formed answer, a malformed one,
an endless one, or nothing at all.  Keep-alive: after the handler returns, the next
request is read from the same connection unless the handler closed it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .answers import Answer, Request, parse_body, well_behaved
from .serving import MAX_SERVER_BYTES, HostileServer, Stats

REASONS = {
    100: "Continue",
    102: "Processing",
    103: "Early Hints",
    200: "OK",
    202: "Accepted",
    204: "No Content",
    302: "Found",
    307: "Temporary Redirect",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}


class H1Reply:
    """The write side of one request's answer."""

    def __init__(self, writer: asyncio.StreamWriter, stats: Stats) -> None:
        self.writer = writer
        self.stats = stats
        self.closed = False

    async def send(self, data: bytes) -> None:
        """Write ``data`` and wait until the kernel took it (``ConnectionError`` once the
        client is gone, or past the server's byte ceiling)."""
        if self.stats.bytes_sent + len(data) > MAX_SERVER_BYTES:
            raise ConnectionError("hostile server reached its own byte ceiling")
        self.stats.bytes_sent += len(data)
        self.writer.write(data)
        await self.writer.drain()

    async def answer(self, answer: Answer) -> None:
        await self.send(serialise(answer))

    def close(self) -> None:
        """Close after what was written (the client sees EOF)."""
        self.closed = True
        self.writer.close()

    async def hang(self) -> None:
        """Send nothing more, keep the socket open, until the test stops the server."""
        await asyncio.Event().wait()


def head(status: int, headers: list[tuple[str, str]], reason: str | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason or REASONS.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def serialise(answer: Answer) -> bytes:
    headers = [*answer.headers, ("content-length", str(len(answer.body)))]
    return head(answer.status, headers) + answer.body


Handler = Callable[[Request, H1Reply], Awaitable[None]]


async def default_handler(request: Request, reply: H1Reply) -> None:
    await reply.answer(well_behaved(request))


class H1Server(HostileServer):
    """Hands every request to ``handler``."""

    def __init__(self, handler: Handler = default_handler) -> None:
        super().__init__()
        self.handler = handler

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                raw = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            request_line, *lines = raw[:-4].decode("latin-1").split("\r\n")
            parts = request_line.split(" ", 2)
            if len(parts) != 3:
                return  # not HTTP/1.1 (e.g. the rest of an HTTP/2 preface): hang up
            method, target, _ = parts
            headers: dict[str, str] = {}
            for line in lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            request = Request(method, target, headers, body, parse_body(body))
            self.stats.requests.append(request)
            reply = H1Reply(writer, self.stats)
            await self.handler(request, reply)
            if reply.closed:
                return
