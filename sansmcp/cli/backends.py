"""The command line's runtimes: one table, one row per backend.

Owns :data:`BACKENDS` (``--backend NAME`` -> how to open a client and one ``Conn`` on
that runtime, run a job on it and close both, and how ``login`` waits for the browser
without blocking the runtime), the ``_Conn`` the jobs see, the shim that lets the
blocking adapter's ``Conn`` run the same jobs, and the two jobs themselves (list the
tools; call one).  A new runtime is one row: an ``EventLoop`` naming its adapter
module under :mod:`sansmcp.io_adapters`, its library, how that library runs a main
function and how it runs a blocking call in a thread.  Adapters and runtimes are
imported only when their row is used (the cold start pays for one).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, TypeVar, cast

from ..core.config import Config
from ..core.errors import CallerError
from ..core.results import CallResult
from ..core.tools import SkippedTool, Tool
from .render import ProgressLine, _Called, _Listing

T = TypeVar("T")
Wait = Callable[[], "str | None"]  # the loopback listener's blocking wait for the redirect


class _Conn(Protocol):
    @property
    def protocol_version(self) -> str | None: ...

    @property
    def skipped_tools(self) -> list[SkippedTool]: ...

    @property
    def skipped_count(self) -> int: ...

    async def list_tools(self) -> list[Tool]: ...

    async def call_tool(
        self,
        name: str,
        arguments: bytes = ...,
        *,
        on_progress: Callable[[float, float | None, str | None], object] | None = ...,
        on_task: Callable[[str, str, str | None], object] | None = ...,
    ) -> CallResult: ...


class Backend(Protocol):
    """What a row of :data:`BACKENDS` does."""

    def run(
        self,
        client_options: dict[str, Any],
        config: Config,
        job: Callable[[_Conn], Awaitable[T]],
    ) -> T:
        """Open a client and one ``Conn``, run ``job`` on it, close both."""
        ...

    def authorizer(self, announce: Callable[[str], None], wait: Wait) -> Callable[[str], Any]:
        """``OAuth.authorize`` for ``login``: ``announce`` the URL, then ``wait``."""
        ...


def _adapter(name: str) -> ModuleType:
    return importlib.import_module(f"{__package__.rpartition('.')[0]}.io_adapters.{name}")


@dataclass(frozen=True, slots=True)
class Blocking:
    """A blocking adapter: its ``Conn`` runs the jobs through :class:`_Blocking`."""

    adapter: str  # the module under sansmcp.io_adapters

    def run(
        self,
        client_options: dict[str, Any],
        config: Config,
        job: Callable[[_Conn], Awaitable[T]],
    ) -> T:
        client_class = _adapter(self.adapter).Client
        with client_class(**client_options) as client, client.connect(config) as conn:
            return _at_once(job(_Blocking(conn)))

    def authorizer(self, announce: Callable[[str], None], wait: Wait) -> Callable[[str], Any]:
        def authorize(url: str) -> str | None:
            announce(url)
            return wait()

        return authorize


@dataclass(frozen=True, slots=True)
class EventLoop:
    """An async adapter on its runtime's own event loop."""

    adapter: str  # the module under sansmcp.io_adapters
    library: str  # the runtime (also the name of the extra that installs it)
    start: Callable[[Any, Callable[[], Awaitable[Any]]], Any]  # (library, main) -> main's value
    to_thread: Callable[[Any, Wait], Awaitable[str | None]]  # (library, wait) -> wait's value

    def _library(self) -> ModuleType:
        try:
            return importlib.import_module(self.library)
        except ImportError:
            raise CallerError(
                f"the {self.library} backend needs {self.library}: "
                f"pip install 'sansmcp[{self.library}]'"
            ) from None

    def run(
        self,
        client_options: dict[str, Any],
        config: Config,
        job: Callable[[_Conn], Awaitable[T]],
    ) -> T:
        library = self._library()
        client_class = _adapter(self.adapter).Client

        async def main() -> T:
            async with client_class(**client_options) as client, client.connect(config) as conn:
                return await job(conn)

        return cast("T", self.start(library, main))

    def authorizer(self, announce: Callable[[str], None], wait: Wait) -> Callable[[str], Any]:
        async def authorize(url: str) -> str | None:
            announce(url)
            return await self.to_thread(self._library(), wait)

        return authorize


#: ``--backend NAME`` -> its runtime; the first is listed first in ``--help``.
BACKENDS: dict[str, Backend] = {
    "asyncio": EventLoop(
        "asyncio", "asyncio", lambda lib, main: lib.run(main()), lambda lib, w: lib.to_thread(w)
    ),
    "trio": EventLoop(
        "trio", "trio", lambda lib, main: lib.run(main), lambda lib, w: lib.to_thread.run_sync(w)
    ),
    "sync": Blocking("sync"),
}
# sync: the fastest cold start (bench/cold_start.py: median wall and CPU of 20 runs)
DEFAULT_BACKEND = "sync"


def _run(
    backend: str,
    client_options: dict[str, Any],
    config: Config,
    job: Callable[[_Conn], Awaitable[T]],
) -> T:
    """Open a client and one ``Conn`` on ``backend``, run ``job`` on it, close both."""
    return BACKENDS[backend].run(client_options, config, job)


class _Blocking:
    """A blocking ``Conn`` as a ``_Conn`` whose awaitables never suspend."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @property
    def protocol_version(self) -> str | None:
        return self.conn.protocol_version  # type: ignore[no-any-return]

    @property
    def skipped_tools(self) -> list[SkippedTool]:
        return list(self.conn.skipped_tools)

    @property
    def skipped_count(self) -> int:
        return int(self.conn.skipped_count)

    async def list_tools(self) -> list[Tool]:
        return list(self.conn.list_tools())

    async def call_tool(
        self,
        name: str,
        arguments: bytes = b"",
        *,
        on_progress: Callable[[float, float | None, str | None], object] | None = None,
        on_task: Callable[[str, str, str | None], object] | None = None,
    ) -> CallResult:
        result: CallResult = self.conn.call_tool(
            name, arguments, on_progress=on_progress, on_task=on_task
        )
        return result


def _at_once(awaitable: Awaitable[T]) -> T:
    """Run a coroutine that never suspends (a job on a :class:`_Blocking` conn)."""
    coroutine = cast("Coroutine[Any, Any, T]", awaitable)
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return cast("T", stop.value)
    coroutine.close()  # pragma: no cover - the jobs await nothing else
    raise AssertionError("a job on the sync backend suspended")  # pragma: no cover


async def _list(conn: _Conn) -> _Listing:
    tools = await conn.list_tools()
    # skipped_count counts the skips past Limits.max_recorded_skips too
    return _Listing(conn.protocol_version, tools, list(conn.skipped_tools), conn.skipped_count)


def _caller(
    name: str, arguments: bytes, line: ProgressLine | None
) -> Callable[[_Conn], Awaitable[_Called]]:
    task: list[str] = []  # the id of the task the call ran as (Config(tasks=True))

    def on_task(task_id: str, status: str, message: str | None) -> None:
        task[:] = [task_id]
        if line is not None:
            line.task(task_id, status, message)

    async def call(conn: _Conn) -> _Called:
        try:
            result = await conn.call_tool(
                name,
                arguments,
                on_progress=None if line is None else line.show,
                on_task=on_task,
            )
        finally:
            if line is not None:
                line.clear()
        return _Called(conn.protocol_version, result, task[0] if task else None)

    return call
