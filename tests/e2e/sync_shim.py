"""The blocking adapter behind the async facade the e2e and hostile suites are written in.

Every blocking call of :mod:`sansmcp.io_adapters.sync` runs in a thread of its own
while the test's asyncio loop awaits its outcome, so a test body written once for
asyncio and trio runs unchanged on "sync".  Async hooks the tests pass (resolvers,
input handlers) become plain callables that run the coroutine on the test's loop and
wait for it from the calling thread -- an input handler no longer than
``sync.input_deadline()`` allows, as the async adapters bound it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from sansmcp import Config
from sansmcp.io_adapters import sync


async def blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a new daemon thread, in a copy of the awaiting task's context (so
    the caller's active span is the thread's, as a blocking caller's would be); its result
    or exception, awaited here."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if not future.done():
            if exc is None:
                future.set_result(result)
            else:
                future.set_exception(exc)

    def run() -> None:
        try:
            result, exc = context.run(fn, *args), None
        except BaseException as caught:
            result, exc = None, caught
        with contextlib.suppress(RuntimeError):  # the loop has ended: nobody awaits it
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=run, name="sync-shim", daemon=True).start()
    return await future


def _plain(hook: Any, loop: asyncio.AbstractEventLoop, *, bounded: bool) -> Any:
    """``hook`` as a plain callable: what it returns, awaited on ``loop`` when awaitable
    (an ``async def``, or a plain function returning a coroutine)."""
    if hook is None:
        return None

    async def wait(awaitable: Any) -> Any:
        return await awaitable

    def plain(*args: Any) -> Any:
        answer = hook(*args)
        if not inspect.isawaitable(answer):
            return answer
        future = asyncio.run_coroutine_threadsafe(wait(answer), loop)
        timeout = max(sync.input_deadline() - time.monotonic(), 0.0) if bounded else None
        try:
            return future.result(timeout=None if timeout == float("inf") else timeout)
        except TimeoutError:
            future.cancel()
            return None  # past the deadline: the adapter ignores it

    return plain


class Conn:
    """A ``sync.Conn`` used from one thread at a time: a blocking call whose awaiting task
    was cancelled still runs in its thread, and the next one (the close) waits for it."""

    def __init__(self, conn: sync.Conn) -> None:
        self.conn = conn
        self._turn = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def _serial(self, fn: Callable[..., Any], *args: Any) -> Any:
        with self._turn:
            return fn(*args)

    async def list_tools(self, **options: Any) -> Any:
        return await blocking(self._serial, functools.partial(self.conn.list_tools, **options))

    async def call_tool(self, name: str, arguments: bytes = b"", **options: Any) -> Any:
        call = functools.partial(self.conn.call_tool, name, arguments, **options)
        return await blocking(self._serial, call)

    async def start_tool(self, name: str, arguments: bytes = b"") -> TaskHandle:
        call = functools.partial(self.conn.start_tool, name, arguments)
        return TaskHandle(self, await blocking(self._serial, call))

    def resume_task(self, task_id: str) -> TaskHandle:
        return TaskHandle(self, self.conn.resume_task(task_id))

    async def aclose(self) -> None:
        await blocking(self._serial, self.conn.close)


class TaskHandle:
    """A ``sync`` task handle behind the async facade: its operations on its Conn's turn."""

    def __init__(self, conn: Conn, handle: Any) -> None:
        self.conn = conn
        self.handle = handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    async def poll(self) -> Any:
        return await blocking(self.conn._serial, self.handle.poll)

    async def result(self) -> Any:
        return await blocking(self.conn._serial, self.handle.result)

    async def cancel(self) -> Any:
        return await blocking(self.conn._serial, self.handle.cancel)


@contextlib.asynccontextmanager
async def _connected(manager: contextlib.AbstractContextManager[sync.Conn]) -> AsyncIterator[Conn]:
    conn = Conn(await blocking(manager.__enter__))
    try:
        yield conn
    finally:
        await blocking(conn._serial, manager.__exit__, None, None, None)


class Client:
    def __init__(self, **kwargs: Any) -> None:
        loop = asyncio.get_running_loop()
        kwargs["resolver"] = _plain(kwargs.get("resolver"), loop, bounded=False)
        kwargs["input_handler"] = _plain(kwargs.get("input_handler"), loop, bounded=True)
        self.client = sync.Client(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await blocking(self.client.close)

    def connect(self, config: Config) -> contextlib.AbstractAsyncContextManager[Conn]:
        return _connected(self.client.connect(_plain_oauth(config)))

    async def complete_authorization(self, config: Config, redirect: str) -> None:
        await blocking(self.client.complete_authorization, _plain_oauth(config), redirect)


def _plain_oauth(config: Config) -> Config:
    """``config`` with its OAuth authorization step (async in the tests) a plain callable."""
    oauth = config.oauth
    if oauth is None or oauth.authorize is None:
        return config
    step = _plain(oauth.authorize, asyncio.get_running_loop(), bounded=False)
    return dataclasses.replace(config, oauth=dataclasses.replace(oauth, authorize=step))


def connect(config: Config) -> contextlib.AbstractAsyncContextManager[Conn]:
    """``sync.connect`` (the process-wide default client) behind the async facade."""
    return _connected(sync.connect(config))
