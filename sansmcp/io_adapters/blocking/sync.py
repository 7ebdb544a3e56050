"""The blocking adapter: the pure driver's commands executed by threads taking turns.

Theory of operation
-------------------
The driver decides and is not thread-safe: every call into it, and :meth:`Client._pump`
executing its commands on a :class:`~._selectloop.SelectLoop` (non-blocking sockets,
sans-I/O TLS, buffered writes), runs under the Client's one lock, where nothing blocks.
Reading is **turn-taking** (:mod:`._turns`, a :class:`~._turns.Turns` the Client
holds), not a reader thread per socket: the
threads waiting for their Conn's mail take turns to run :meth:`Client._poll` (``select``
until ``next_deadline()``, feed the driver, pump, fire the timers if that deadline or a
sooner one armed meanwhile passed, pump), so a sequential caller reads its own socket
with no thread switch, where a reader thread would cost two per response; a watcher
thread polls between work items (a server's EOF, idle expiry).
Resolves (``getaddrinfo`` and the hook cannot be interrupted) run on at most
``RESOLVERS`` threads; the dial deadline binds regardless.  Every thread is a daemon
and ends with :meth:`Client.close`.  A ``KeyboardInterrupt``, wherever it lands,
abandons the Conn it interrupts (its socket closed, not reused) and escapes alone.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Self, assert_never, cast

from ...core.config import Config
from ...core.driver import CloseSocket, Connect, Deliver, Finished, Resolve, StoreOp, Write
from ...core.results import CallResult
from ...core.tools import Tool
from ...core.view import ConnView
from .._common import (
    Call,
    ClientFace,
    ConnFace,
    ProgressCallback,
    TaskCallback,
    perform_store_blocking,
    resolve_blocking,
)
from .._tasks import BlockingTaskHandle, handle_of
from ._selectloop import Bell, SelectLoop, Workers
from ._turns import Turns

__all__ = ["Client", "Conn", "connect", "input_deadline"]

RESOLVERS = 4  # resolver threads at most


class Client(ClientFace["Conn"]):
    __doc__ = ClientFace.__doc__
    _conn_type: type[Conn]
    _now = staticmethod(time.monotonic)

    def _setup(self) -> None:
        self._lock = threading.RLock()  # held once at most (see _selectloop.hold)
        self._loop = SelectLoop(self._driver, self._now)
        self._turns = Turns(
            self._lock,
            now=self._now,
            poll=self._poll,
            wake=self._loop.wake,
            release=self._loop.release,
            name="sansmcp-watcher",
        )
        self._resolvers = Workers(RESOLVERS, "sansmcp-resolver")
        self._store_jobs: set[threading.Event] = set()  # store ops in flight (close waits)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every socket; in-flight work (in any thread) fails ``ConnectionFailed``.
        Writes to a shared store already under way (a listing, its lease's release) are
        waited for, at most ``Limits.store_timeout`` in all: a process that exits after
        ``close`` has shared what it learned."""
        with self._lock:
            self._shut()
            self._resolvers.close()
            self._turns._end_turns()
            pending = list(self._store_jobs)
        end = time.monotonic() + self._driver.limits.store_timeout
        for done in pending:
            done.wait(max(0.0, end - time.monotonic()))

    def connect(self, config: Config) -> contextlib.AbstractContextManager[Conn]:
        """Connect (negotiate) to ``config.url``; the ``Conn`` closes on exit."""
        return _Connecting(self, config)

    def complete_authorization(self, config: Config, redirect: str) -> None:
        """Finish an authorization a person made after
        ``Unauthorized(cause="authorization_required")``: ``redirect`` is the URL they came
        back with.  The tokens go to ``config.oauth.store``; the next ``connect`` uses them."""
        with self._lock:
            conn = self._open(config)
        with conn:
            conn._run(conn._completing(redirect))

    def _pump(self) -> None:
        """Execute the driver's commands (under the lock); wake the leader's ``select`` if due."""
        turns = self._turns
        while (command := self._driver.next_command()) is not None:
            match command:
                case Write(socket_id=socket_id, data=data):
                    self._loop.send(socket_id, data)
                case Deliver() | Finished():
                    if (conn := self._conns.get(command.conn_id)) is None:
                        continue  # closed by another thread while it ran: misuse
                    conn._mail.append(command)
                    turns._post(conn)
                case Connect(socket_id=key, address=address, port=port, tls=tls):
                    context = None if tls is None else (self.tls_context(tls[1]), tls[0])
                    proxy = command.proxy_tls  # an https:// proxy: TLS with it first
                    outer = None if proxy is None else (self.tls_context(("http/1.1",)), proxy)
                    self._loop.dial(key, address, port, context, command.tunnel, outer)
                    turns._start_watching()
                case Resolve():
                    self._resolvers.submit(resolve_blocking, self, command, self._lock)
                case StoreOp():
                    done = threading.Event()
                    self._store_jobs.add(done)
                    self._resolvers.submit(_store_job, self, command, done)
                case CloseSocket(socket_id=socket_id):
                    self._loop.close(socket_id)
                case _:
                    assert_never(command)
        if turns._selecting:
            turns._nudge(self._driver.next_deadline(), self._loop.stirred)

    def _poll(self) -> None:
        """One turn's step: ``select`` until the next deadline, feed the driver, pump; fire the
        timers (only here) if it, or a sooner one armed meanwhile (``_armed``), passed.  A
        deadline further than the loop's ``MAX_WAIT`` takes more than one step."""
        driver, turns = self._driver, self._turns
        deadline = driver.next_deadline()
        events = turns._select(self._loop.wait, deadline)
        now = self._loop.handle(events)
        if not events and deadline is not None and not self._loop.cut:
            now = max(now, deadline)  # select may return a clock tick early
        self._pump()
        if (deadline is not None and deadline <= now) or turns._armed <= now:
            driver.handle_timer(now=now)
            self._pump()


class _Connecting:
    """What :meth:`Client.connect` returns (a class: ``contextlib``'s generator costs more)."""

    __slots__ = ("client", "config", "conn")

    def __init__(self, client: Client, config: Config) -> None:
        self.client, self.config = client, config

    def __enter__(self) -> Conn:
        with self.client._lock:
            self.conn = self.client._open(self.config)
        try:
            self.conn._run(self.client._driver.connect, traced=True)
        except BaseException:  # the connect failed: nothing is left open
            self.conn.close()
            raise
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


class Conn(ConnFace, contextlib.AbstractContextManager["Conn"]):
    """One MCP connection (one work item): one thread at a time."""

    client: Client

    def __init__(self, client: Client, view: ConnView) -> None:
        super().__init__(client, view)
        self._mail: deque[Deliver | Finished] = deque()
        self._bell = Bell()  # what it waits on as a follower

    def __exit__(self, *exc: object) -> None:
        self.close()

    def list_tools(self, *, fresh: bool = False, timeout: float | None = None) -> list[Tool]:
        """The server's tools: from the Client's cache while the spec's ``ttlMs`` /
        ``cacheScope`` allow (no request), else listed; ``fresh=True`` always lists.
        ``timeout`` (seconds) shortens ``Limits.list_timeout`` for this listing."""
        return cast("list[Tool]", self._run(self._listing(fresh, timeout), traced=True))

    def call_tool(
        self,
        name: str,
        arguments: bytes = b"",
        *,
        on_progress: ProgressCallback | None = None,
        timeout: float | None = None,
        on_task: TaskCallback | None = None,
    ) -> CallResult:
        """Call ``name``; ``on_progress(progress, total, message)`` is called for each
        progress notification of this call, in order, in the caller's thread; ``timeout``
        (seconds) shortens ``Limits.call_timeout`` for this call; ``on_task(task_id,
        status, status_message)`` is called when the server answers with a task and
        whenever its status or message changes (``Config(tasks=True)``)."""
        start = self._calling(name, arguments, on_progress, timeout, on_task)
        return cast("CallResult", self._run(start, traced=True, tool=name))

    def start_tool(self, name: str, arguments: bytes = b"") -> BlockingTaskHandle:
        """Start ``name`` as a task (``Config(tasks=True)``): its handle as soon as the
        server answers (one already completed if it answered with the result);
        ``handle.result()`` follows it to its end."""
        value = self._run(self._tasking(name, arguments), traced=True, tool=name)
        return cast("BlockingTaskHandle", handle_of(self, name, value, BlockingTaskHandle))

    def resume_task(self, task_id: str) -> BlockingTaskHandle:
        """The task ``task_id`` (started on another Conn, process or machine), taken up
        on this Conn: no request until its ``poll``, ``result`` or ``cancel``."""
        return BlockingTaskHandle(self, task_id)

    def close(self) -> None:
        """Close: abandon what is in flight; a legacy session gets its DELETE (bounded)."""
        try:
            if not self.view.closed:  # else closed, or abandoned: what its mailbox holds is stale
                self._run(self.client._driver.close_conn)
        finally:  # out of the registry (its only place), unless its own thread runs an operation
            with self.client._lock:  # (misuse: that thread takes the Finished first)
                if self.view.closed or not self.view.busy:  # (closed: no more mail)
                    self.client._conns.pop(self.view.conn_id, None)

    def _run(
        self, start: Callable[..., None], *, traced: bool = False, tool: str | None = None
    ) -> object:
        """The operation's steps under the lock, let go only to block (a callback, a turn)."""
        steps = self._operation(start, self._trace(traced, tool))
        return self.client._turns._perform(self, steps, self._call)

    def _call(self, step: Call) -> object:
        """The embedder's callable (an input handler's deadline: :func:`input_deadline`)."""
        _local.deadline = step.deadline
        try:
            return step.fn(*step.args)
        finally:
            _local.deadline = math.inf


_local = threading.local()


def input_deadline() -> float:
    """When the input handler running in this thread must have answered (``time.monotonic``
    time; ``inf`` outside a handler).  A blocking handler cannot be interrupted: one that
    answers later is ignored, and its operation fails with the deadline's bound."""
    return float(getattr(_local, "deadline", math.inf))


_default_lock = threading.Lock()
_default_client: Client | None = None


def connect(config: Config) -> contextlib.AbstractContextManager[Conn]:
    """``Client.connect`` on the process-wide default client (created on first use)."""
    global _default_client
    with _default_lock:
        if _default_client is None:
            _default_client = Client()
            atexit.register(_default_client.close)
    return _default_client.connect(config)


Client._conn_type = Conn


def _store_job(client: Client, command: StoreOp, done: threading.Event) -> None:
    """A store op on a worker thread; ``done`` tells :meth:`Client.close` it ended."""
    try:
        perform_store_blocking(client, command, client._lock)
    finally:
        client._store_jobs.discard(done)
        done.set()
