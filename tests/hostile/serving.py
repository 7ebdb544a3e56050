"""Run a hostile server in a thread with its own asyncio event loop, counting what it saw.

A :class:`HostileServer` subclass implements :meth:`HostileServer.connection` (one
accepted TCP connection); :class:`ServerThread` listens on ``127.0.0.1`` (port 0, so
the kernel picks a free one), runs the loop in a thread, and on :meth:`ServerThread.stop`
cancels every connection task, aborts every socket and joins the thread -- bounded, so a
server stuck writing to a client that stopped reading cannot hang the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .answers import Request

# Hard ceiling on what any hostile server writes on one connection: far beyond every
# client budget, so only a client that ignores its budget ever reaches it.
MAX_SERVER_BYTES = 256 << 20


@dataclass
class Stats:
    """What a server saw.  Appended to by the server thread, read after ``stop()``."""

    connections: int = 0
    requests: list[Request] = field(default_factory=list)
    bytes_sent: int = 0
    errors: list[str] = field(default_factory=list)  # bugs in the hostile server itself
    notes: dict[str, float] = field(default_factory=dict)  # figures a case measured

    def count(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for request in self.requests:
            counts[request.key] = counts.get(request.key, 0) + 1
        return counts


class HostileServer:
    """One listening server; subclasses serve each connection."""

    def __init__(self) -> None:
        self.stats = Stats()
        self.port = 0

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class ServerThread:
    """Runs ``server`` on 127.0.0.1 in a thread of its own (use as a context manager)."""

    def __init__(self, server: HostileServer) -> None:
        self.server = server
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="hostile-server", daemon=True)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def stats(self) -> Stats:
        return self.server.stats

    def __enter__(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("hostile server did not start within 10 s")
        if self._error is not None:
            raise RuntimeError("hostile server failed to start") from self._error
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop ended already
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(10)
        if self._thread.is_alive():
            raise RuntimeError("hostile server thread did not stop within 10 s")

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by __enter__ or ignored after the test
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()
        writers: set[asyncio.StreamWriter] = set()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            tasks.add(task)  # type: ignore[arg-type]
            writers.add(writer)
            self.server.stats.connections += 1
            try:
                await self.server.connection(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
                pass  # the client left: expected
            except asyncio.CancelledError:
                # stop() cancels us; end normally, since asyncio's start_server callback
                # (3.11) calls task.exception() on a cancelled task and logs the error.
                pass
            except Exception as exc:
                self.server.stats.errors.append(repr(exc))
            finally:
                writer.transport.abort()
                writers.discard(writer)
                tasks.discard(task)  # type: ignore[arg-type]

        listener = await asyncio.start_server(serve, "127.0.0.1", 0)
        self.server.port = listener.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            listener.close()
            for writer in list(writers):
                writer.transport.abort()
            for task in list(tasks):
                task.cancel()
            if tasks:
                await asyncio.wait(list(tasks), timeout=5)
            await listener.wait_closed()


def run_server(make: Callable[[], HostileServer]) -> ServerThread:
    """Start a server made by ``make`` (the caller stops it)."""
    return ServerThread(make()).__enter__()
