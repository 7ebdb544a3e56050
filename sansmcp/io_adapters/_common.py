"""What every runtime adapter shares: the public ``Client`` / ``Conn`` faces, runtime-free.

Theory of operation
-------------------
The protocol lives in :class:`~sansmcp.core.driver.ClientDriver`.  An adapter
subclasses :class:`ClientBase` and :class:`ConnBase` and adds only its runtime, what
:class:`Runtime` and :class:`AsyncRuntime` name on the Client -- ``_setup()`` (its
state), ``_now()`` (its clock), ``_pump()`` (the one loop executing the driver's
commands), ``aclose()``, ``_within(deadline, awaitable)`` (a bounded await) -- and
:class:`Mailbox` on the Conn: ``_post(command)`` / ``_next()`` (the caller's
mailbox).  The faces subclass those protocols, so an adapter that leaves one member
out is a class mypy refuses to instantiate ("abstract attribute").  The coroutines
here await nothing but those, so they run on asyncio and trio alike; the blocking
adapter subclasses :class:`ClientFace` / :class:`ConnFace` (:class:`Runtime` only).

An operation is written once, runtime-free, as a generator
(:meth:`ConnFace._operation`): start it on the driver, then take the caller's
commands -- for a :class:`Deliver`, a :class:`Call` of the input handler, the
authorization step or an observation's callback; return or raise on
:class:`Finished`.  It yields only what a runtime must do (wait for the next
command, call the embedder's callable): :class:`Steps` hands them to a runtime's
loop, ``ConnBase._run`` performing them with ``await`` in the caller's task, the
blocking adapter in the caller's thread.  A
cancellation or an exception from the caller's own callback abandons the Conn
and propagates unchanged.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar, assert_never, cast

from ..core.config import Config
from ..core.driver import ClientDriver, Deliver, Finished, Resolve, StoreOp
from ..core.errors import CallerError
from ..core.limits import Limits
from ..core.mcp import (
    InputRequired,
    LogMessage,
    McpMachine,
    Notification,
    Observation,
    Progress,
    RequestEnded,
    RequestStarted,
    TaskUpdated,
)
from ..core.net.pool import Pool
from ..core.oauth.store import AuthorizationNeeded
from ..core.results import CallResult
from ..core.store import StoreAnswer, StoreFailed
from ..core.tools import SkippedTool, Tool
from ..core.view import ConnView
from ._tasks import TaskHandle, handle_of

if TYPE_CHECKING:
    from ..stores import SharedStore

__all__ = [
    "AsyncRuntime",
    "ClientBase",
    "ClientFace",
    "ConnBase",
    "ConnFace",
    "Mailbox",
    "ProgressCallback",
    "Runtime",
    "Steps",
    "TaskCallback",
    "TelemetryHook",
    "numeric_socket",
    "perform_store",
    "perform_store_blocking",
    "resolve",
    "resolve_blocking",
    "store_answer_blocking",
]

Resolver = Callable[[str, int], Awaitable[object]]
InputHandler = Callable[[Mapping[str, Mapping[str, Any]]], Awaitable[Mapping[str, Any] | None]]
ProgressCallback = Callable[[float, float | None, str | None], object]
TaskCallback = Callable[[str, str, str | None], object]  # (task id, status, status message)
T = TypeVar("T")
ConnT = TypeVar("ConnT", bound="ConnFace")
AsyncConnT = TypeVar("AsyncConnT", bound="ConnBase")
READ_SIZE = 65536
LATE = object()  # what a runtime sends back for an input handler its deadline cut short


@dataclass(frozen=True, slots=True)
class Call:
    """A step of an operation only its runtime can take: call the embedder's ``fn(*args)``
    outside the driver (``awaited``: an async runtime awaits what it returns, bounded by
    ``deadline``; an observation's callback is a plain call on every runtime)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    deadline: float = math.inf
    awaited: bool = True


class Steps:
    """The steps of an operation (a generator, :meth:`ConnFace._operation`) as an
    iterator, for a runtime's loop to perform one by one: what performing a step gave
    goes in ``reply`` (sent at the next step), what it raised in :meth:`fail` (thrown
    in instead); once the iteration ends, ``value`` is what the operation returned
    (what it raised propagates from the iteration).  Every runtime's loop is this one;
    it costs ~0.2 us per step over a loop written inline."""

    __slots__ = ("_error", "_steps", "reply", "value")

    def __init__(self, steps: Generator[Any, object, object]) -> None:
        self._steps: Generator[Any, object, object] = steps
        self._error: BaseException | None = None
        self.reply: object = None
        self.value: object = None

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Any:
        reply: object
        error: BaseException | None
        try:
            if self._error is None:
                reply, self.reply = self.reply, None  # sent once, not kept (a body, say)
                return self._steps.send(reply)
            error, self._error = self._error, None
            return self._steps.throw(error)
        except StopIteration as stop:
            self.value = stop.value
            raise
        finally:  # what raises out of here has this frame: it keeps no reply nor error
            reply = error = None

    def fail(self, error: BaseException) -> None:
        self._error = error


class TelemetryHook(Protocol):
    """What ``Client(telemetry=)`` takes (``sansmcp.otel.Telemetry`` is one): all three
    are called in the caller's task or thread."""

    def carrier(self, conn: object, tool: str | None) -> Mapping[str, str] | None:
        """The trace context for ``conn``'s next operation's ``_meta`` (None: none);
        ``tool`` names the tool of a ``tools/call`` operation (None for the others)."""

    def observe(self, conn: object, item: RequestStarted | RequestEnded, now: float) -> None:
        """A request of ``conn`` started or ended (``item.at`` on the clock ``now`` reads)."""

    def abandon(self, conn: object, error: BaseException) -> None:
        """``conn``'s operation was abandoned by ``error``: end what is still open."""


MAX_CARRIER = 16_384  # characters of a telemetry carrier's keys and values (W3C: 8,192 of baggage)


def checked_carrier(value: object) -> Mapping[str, str] | None:
    """A telemetry hook's carrier, checked: None or a mapping of str to str of at most
    ``MAX_CARRIER`` characters.  Its items are read once and that copy is what is checked
    and kept (a mapping may answer ``items()`` and ``[]`` differently)."""
    if value is None:
        return None
    items = list(value.items()) if isinstance(value, Mapping) else None
    if items is None or not all(isinstance(k, str) and isinstance(v, str) for k, v in items):
        raise CallerError("the telemetry carrier must be None or a mapping of str to str")
    if sum(len(k) + len(v) for k, v in items) > MAX_CARRIER:
        raise CallerError(f"the telemetry carrier is over {MAX_CARRIER:,} characters")
    return dict(items) or None


class Runtime(Protocol):
    """What every adapter's ``Client`` provides the runtime-free face (:class:`ClientFace`,
    :func:`report_resolve`): a member left out, mypy refuses to instantiate the Client."""

    def _setup(self) -> None:
        """The runtime's own state (called at the end of ``ClientFace.__init__``)."""

    def _now(self) -> float:
        """The runtime's clock (seconds, monotonic): every ``now=`` given to the driver."""

    def _pump(self) -> None:
        """Execute the driver's commands (``next_command()`` until None: one arm per
        command type, ``assert_never`` after the last) and keep the runtime's timer at or
        before ``next_deadline()``; called after every call into the driver."""


class AsyncRuntime(Runtime, Protocol):
    """What an async adapter's ``Client`` provides besides :class:`Runtime`
    (:class:`ClientBase`)."""

    async def aclose(self) -> None:
        """Close every socket; in-flight work fails ``ConnectionFailed``."""

    async def _within(self, deadline: float, awaitable: Awaitable[T]) -> tuple[bool, T | None]:
        """``(True, what awaitable gave)``, or ``(False, None)`` once ``deadline`` (on the
        runtime's clock; ``inf``: none) passed first."""


class Mailbox(Protocol):
    """What an async adapter's ``Conn`` provides (:class:`ConnBase`): the caller's mailbox."""

    def _post(self, command: Deliver | Finished) -> None:
        """Mail for the Conn (in the pumping task): wake its caller if it waits."""

    async def _next(self) -> Deliver | Finished:
        """The Conn's next mail (what is there already: without a checkpoint)."""


class ClientFace(Runtime, Generic[ConnT]):
    """Owns the connection pool and its sockets; hands out ``Conn``\\ s.

    ``limits`` bounds everything (:class:`~sansmcp.core.limits.Limits`);
    ``allow_loopback`` / ``allow_private`` widen the address guard.
    ``ssl_context`` verifies every server; by default sansmcp's own (the system's trust
    store, TLS >= 1.2, ALPN ``h2`` and ``http/1.1``).  A caller's context is used as
    given and never changed: HTTP/2 over TLS needs ``h2`` in the ALPN protocols set on it
    (``set_alpn_protocols(["h2", "http/1.1"])``); without ALPN the server speaks HTTP/1.1.
    ``http2_prior_knowledge`` speaks h2c to ``http://`` origins (tests).
    ``resolver(host, port)`` replaces DNS (tests); every address it returns is still
    vetted by the guard.  ``input_handler`` answers what servers ask for
    (``{key: {"method", "params"}}`` -> ``{key: result}``, or None to decline) and
    ``capabilities`` is what is declared for it; without a handler nothing is
    declared and every ask is refused.  ``client_info`` replaces sansmcp's own
    ``clientInfo``.  ``telemetry`` (e.g. ``sansmcp.otel.Telemetry()``) turns on a
    span and a duration point per MCP request and trace context propagation.
    ``proxy`` (an ``http://`` or -- asyncio, trio -- ``https://`` URL, optional
    ``user:password``; never taken from the environment) sends every request through that egress proxy's ``CONNECT`` tunnels;
    ``guard`` says who vets the destination: ``"local"`` (the default: sansmcp resolves
    and vets, and tunnels to the vetted address) or ``"proxy"`` (the proxy resolves).
    ``store`` (a :class:`~sansmcp.stores.SharedStore`, e.g. ``sansmcp.stores.RedisStore``)
    shares era hints and tool listings with the other processes of a fleet.
    """

    _conn_type: type[ConnT]  # the runtime's Conn

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        allow_loopback: bool = False,
        allow_private: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        http2_prior_knowledge: bool = False,
        resolver: Resolver | Callable[[str, int], Any] | None = None,
        input_handler: InputHandler | Callable[..., Any] | None = None,
        capabilities: Mapping[str, Any] | None = None,
        client_info: Mapping[str, Any] | None = None,
        telemetry: TelemetryHook | None = None,
        proxy: str | None = None,
        guard: str = "local",
        store: SharedStore | None = None,
    ) -> None:
        self.telemetry = telemetry
        self._store = store
        self._driver = ClientDriver(
            proxy=proxy,
            guard=guard,
            limits=limits,
            allow_loopback=allow_loopback,
            allow_private=allow_private,
            http2_prior_knowledge=http2_prior_knowledge,
            answers_input=input_handler is not None,
            capabilities=capabilities,
            client_info=client_info,
            cache_salt=os.urandom(16),
            observe=telemetry is not None,
            random_bytes=os.urandom,  # what secrets.token_bytes calls, without importing secrets
            wall_clock=time.time,
            shared_store=store is not None,
            fleet_secret=getattr(store, "fleet_secret", None),  # (keys private listings)
        )
        self._ssl = ssl_context  # the caller's: used as given, never changed
        self._own_tls: dict[tuple[str, ...], ssl.SSLContext] = {}  # ours, by ALPN offer
        self._resolver = resolver
        self.input_handler = input_handler
        self._conns: dict[int, ConnT] = {}  # their mailboxes, by conn id (of _conn_type)
        self._setup()

    @property
    def limits(self) -> Limits:
        """The ``Limits`` this client was made with (the defaults when none was given)."""
        return self._driver.limits

    @property
    def pool(self) -> Pool:
        """The core's connection pool (its sockets and figures), for inspection only."""
        return self._driver.pool

    def tls_context(self, alpn: tuple[str, ...]) -> ssl.SSLContext:
        """The SSL context of a dial whose ALPN offer is ``alpn``: the caller's
        ``ssl_context`` as given -- never changed, so what it offers is what its owner
        set on it (a context may be shared, and ALPN, once set, cannot be read back nor
        restored) -- else sansmcp's own, built once per offer (loading the system CA
        store costs ~35 ms) with its ALPN set then, once."""
        if self._ssl is not None:
            return self._ssl
        context = self._own_tls.get(alpn)
        if context is None:
            context = ssl.create_default_context()
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.set_alpn_protocols(list(alpn))
            self._own_tls[alpn] = context
        return context

    def _shut(self) -> None:
        """The driver closed (every Conn's work fails ``ConnectionFailed``), what it emits
        executed: the start of every runtime's close."""
        self._driver.close(now=self._now())
        self._pump()

    def _open(self, config: Config) -> ConnT:
        """A new Conn for ``config``, registered for its mail (not connected yet)."""
        conn = self._conn_type(self, self._driver.open(config, now=self._now()))
        self._conns[conn.view.conn_id] = conn
        return conn


class ClientBase(ClientFace[AsyncConnT], AsyncRuntime):
    __doc__ = ClientFace.__doc__

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @contextlib.asynccontextmanager
    async def connect(self, config: Config) -> AsyncIterator[AsyncConnT]:
        """Connect (negotiate) to ``config.url``; the ``Conn`` closes on exit."""
        conn = self._open(config)
        try:
            await conn._run(self._driver.connect, traced=True)
            yield conn
        finally:
            await conn.aclose()

    async def complete_authorization(self, config: Config, redirect: str) -> None:
        """Finish an authorization a person made after
        ``Unauthorized(cause="authorization_required")``: ``redirect`` is the URL they came
        back with.  The tokens go to ``config.oauth.store``; the next ``connect`` uses them."""
        conn = self._open(config)
        try:
            await conn._run(conn._completing(redirect))
        finally:
            await conn.aclose()


class ConnFace:
    """One MCP connection (one work item): not safe for concurrent use."""

    _on_progress: ProgressCallback | None = None
    _on_task: TaskCallback | None = None

    def __init__(self, client: ClientFace[Any], view: ConnView) -> None:
        self.client = client
        self.view = view
        self._telemetry = client.telemetry

    @property
    def machine(self) -> McpMachine:
        """The driver's machine of this Conn, for inspection only (read ``view``)."""
        return self.view.machine

    @property
    def protocol_version(self) -> str | None:
        """The negotiated protocol revision."""
        return self.view.protocol_version

    @property
    def tools_ttl_ms(self) -> int:
        """The last listing's ``ttlMs`` (0 when absent or negative)."""
        return self.view.ttl_ms

    @property
    def tools_cache_scope(self) -> str | None:
        """The last listing's ``cacheScope`` (None for legacy servers)."""
        return self.view.cache_scope

    @property
    def tools_from_cache(self) -> bool:
        """This Conn's tools came from the Client's cache: its listing (or, on a Conn
        that only calls, the tools it sends headers for) cost no request."""
        return self.view.tools_from_cache

    @property
    def skipped_tools(self) -> list[SkippedTool]:
        """The first ``Limits.max_recorded_skips`` entries the last listing skipped."""
        return self.view.skipped_tools

    @property
    def skipped_count(self) -> int:
        """Every entry the last listing skipped, recorded or not."""
        return self.view.skipped_count

    @property
    def notifications_dropped(self) -> int:
        """Notifications dropped past ``Limits.max_notifications`` (per request)."""
        return self.view.notifications_dropped

    # what every runtime's operations share (runtime-free)

    def _listing(self, fresh: bool, timeout: float | None) -> Callable[..., None]:
        driver = self.client._driver

        def start(conn_id: int, *, now: float, trace: Mapping[str, str] | None = None) -> None:
            driver.list_tools(conn_id, now=now, fresh=fresh, trace=trace, timeout=timeout)

        return start

    def _calling(
        self,
        name: str,
        arguments: bytes,
        on_progress: ProgressCallback | None,
        timeout: float | None,
        on_task: TaskCallback | None = None,
    ) -> Callable[..., None]:
        if on_progress is not None and not callable(on_progress):
            raise CallerError("on_progress must be callable")
        if on_task is not None and not callable(on_task):
            raise CallerError("on_task must be callable")
        driver, progress = self.client._driver, on_progress is not None

        def start(conn_id: int, *, now: float, trace: Mapping[str, str] | None = None) -> None:
            driver.call_tool(
                conn_id,
                name,
                arguments,
                now=now,
                progress=progress,
                trace=trace,
                timeout=timeout,
            )
            self._on_progress = on_progress  # until the operation ends (_operation)
            self._on_task = on_task

        return start

    def _tasking(self, name: str, arguments: bytes) -> Callable[..., None]:
        driver = self.client._driver

        def start(conn_id: int, *, now: float, trace: Mapping[str, str] | None = None) -> None:
            driver.task(conn_id, "start", name, now=now, trace=trace, arguments=arguments)

        return start

    def _completing(self, redirect: str) -> Callable[..., None]:
        driver = self.client._driver

        def start(conn_id: int, *, now: float) -> None:
            driver.complete_authorization(conn_id, redirect, now=now)

        return start

    def _trace(self, traced: bool, tool: str | None = None) -> dict[str, Any]:
        """The ``trace=`` argument of an operation's start: the telemetry's carrier."""
        telemetry = self._telemetry
        if traced and telemetry is not None:
            return {"trace": checked_carrier(telemetry.carrier(self, tool))}
        return {}

    def _operation(
        self, start: Callable[..., None], trace: Mapping[str, Any]
    ) -> Generator[Call | None, object, object]:
        """An operation, runtime-free: start it on the driver, then take the Conn's mail
        until its :class:`Finished` (returned, or its error raised).  It yields what only
        the runtime can do: ``None``, "send me this Conn's next command", or a
        :class:`Call` of the embedder's callable (an input handler, the authorization
        step, an observation's callback), to run outside the driver and send back
        (``LATE``: an input handler its deadline cut short; the driver's timer reports
        the bound).  An exception the runtime throws in (a cancellation, a callable's
        own) abandons the Conn and propagates unchanged."""
        client, driver, conn_id = self.client, self.client._driver, self.view.conn_id
        try:
            start(conn_id, now=client._now(), **trace)
        except BaseException as exc:  # refused before anything was sent (CallerError, ...)
            if trace:
                self._abandoned(exc)  # what the telemetry opened for it ends
            raise
        try:
            client._pump()
            try:
                while isinstance(command := cast("Deliver | Finished", (yield None)), Deliver):
                    item = command.item
                    if isinstance(item, InputRequired):
                        handler, answers = client.input_handler, None
                        if handler is not None:
                            answers = yield Call(handler, (item.requests,), command.deadline)
                        if answers is not LATE:  # (a late one the driver drops: time first)
                            answers = cast("Mapping[str, Any] | None", answers)
                            driver.answer(conn_id, item.input_id, answers, now=client._now())
                    elif isinstance(item, AuthorizationNeeded):
                        step, answer = self.view.authorization_step(), None
                        if step is not None:
                            answer = yield Call(step, (item.url,))
                        driver.authorized(conn_id, item.auth_id, answer, now=client._now())
                    else:
                        yield Call(self.observe, (item, client._now()), awaited=False)
                        continue
                    client._pump()
            except BaseException as exc:
                self._abandoned(exc)
                driver.abandon(conn_id, now=client._now())
                client._pump()
                raise
            error, value = command.error, command.value
            del command  # (the frame a raise leaves in its traceback keeps neither)
            if error is not None:
                if trace:
                    self._abandoned(error)  # a span opened before any request was sent
                try:
                    raise error
                finally:
                    del error
            return value
        finally:
            self._on_progress = self._on_task = None  # (a call's: set once it started)

    def _abandoned(self, error: BaseException) -> None:
        if self._telemetry is not None:
            self._telemetry.abandon(self, error)

    def observe(self, item: Observation, now: float) -> None:
        """Hand an observation to its plain callable, in the caller's task or thread: a
        progress callback gets ``(progress, total, message)``, a task callback ``(task_id,
        status, status_message)``, ``Config.on_notification`` a ``LogMessage`` or a
        ``Notification``, telemetry the request reports.  Whatever a callback raises
        propagates unchanged (the caller abandons the Conn)."""
        match item:
            case Progress():
                on_progress = self._on_progress
                if on_progress is not None:
                    on_progress(item.progress, item.total, item.message)
            case TaskUpdated():
                on_task = self._on_task
                if on_task is not None:
                    on_task(item.task_id, item.status, item.status_message)
            case LogMessage() | Notification():
                on_notification = self.view.on_notification
                if on_notification is not None:
                    on_notification(item)
            case RequestStarted() | RequestEnded():
                telemetry = self._telemetry
                if telemetry is not None:
                    telemetry.observe(self, item, now)
            case _:
                assert_never(item)


class ConnBase(ConnFace, Mailbox):
    __doc__ = ConnFace.__doc__
    client: ClientBase[Any]

    async def list_tools(self, *, fresh: bool = False, timeout: float | None = None) -> list[Tool]:
        """The server's tools: from the Client's cache while the spec's ``ttlMs`` /
        ``cacheScope`` allow (no request), else listed; ``fresh=True`` always lists.
        ``timeout`` (seconds) shortens ``Limits.list_timeout`` for this listing."""
        return cast("list[Tool]", await self._run(self._listing(fresh, timeout), traced=True))

    async def call_tool(
        self,
        name: str,
        arguments: bytes = b"",
        *,
        on_progress: ProgressCallback | None = None,
        timeout: float | None = None,
        on_task: TaskCallback | None = None,
    ) -> CallResult:
        """Call ``name``; ``on_progress(progress, total, message)`` is called for each
        progress notification of this call, in order, in the caller's task; ``timeout``
        (seconds) shortens ``Limits.call_timeout`` for this call.  When the server runs
        the call as a task (``Config(tasks=True)``), ``on_task(task_id, status,
        status_message)`` is called once it answers with the task and whenever the
        status or message changes (the id is what a caller persists to resume it)."""
        start = self._calling(name, arguments, on_progress, timeout, on_task)
        return cast("CallResult", await self._run(start, traced=True, tool=name))

    async def start_tool(self, name: str, arguments: bytes = b"") -> TaskHandle:
        """Start ``name`` as a task (``Config(tasks=True)``): its :class:`TaskHandle` as
        soon as the server answers (one already completed if it answered with the
        result); ``await handle.result()`` follows it to its end."""
        value = await self._run(self._tasking(name, arguments), traced=True, tool=name)
        return cast("TaskHandle", handle_of(self, name, value, TaskHandle))

    def resume_task(self, task_id: str) -> TaskHandle:
        """The task ``task_id`` (started on another Conn, process or machine), taken up
        on this Conn: no request until its ``poll``, ``result`` or ``cancel``."""
        return TaskHandle(self, task_id)

    async def aclose(self) -> None:
        """Close: abandon what is in flight; a legacy session gets its DELETE (bounded)."""
        try:
            if not self.view.closed:  # else closed, or abandoned: what its mailbox holds is stale
                await self._run(self.client._driver.close_conn)
        finally:
            self.client._conns.pop(self.view.conn_id, None)

    async def _run(
        self, start: Callable[..., None], *, traced: bool = False, tool: str | None = None
    ) -> object:
        steps = Steps(self._operation(start, self._trace(traced, tool)))
        for step in steps:  # performed here, in the caller's task
            try:
                steps.reply = await self._perform(step)
            except BaseException as exc:  # cancelled, or the embedder's callable raised
                steps.fail(exc)
        return steps.value

    async def _perform(self, step: Call | None) -> object:
        if step is None:
            return await self._next()
        if not step.awaited:
            return step.fn(*step.args)
        pending = step.fn(*step.args)
        if not isinstance(pending, Awaitable):  # a plain function given to an async Client
            raise CallerError(
                f"{getattr(step.fn, '__name__', 'the callable')} must be async on this "
                f"adapter: it returned {type(pending).__name__}, not an awaitable"
            )
        done, value = await self.client._within(step.deadline, pending)  # (inf: unbounded)
        return value if done else LATE


_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # (Linux)


def ack_at_once(sock: socket.socket) -> None:
    """Acknowledge what was just read from ``sock`` now, not at the delayed-ACK timer.

    Called after each read of a socket through an egress proxy's tunnel: a proxy that
    relays a response in two writes without ``TCP_NODELAY`` (tinyproxy does) holds the
    second until the first is acknowledged, and Linux delays that ACK by up to 40 ms --
    40 ms added to every proxied response (bench/README.md, "Egress proxy").  Linux only
    (elsewhere a no-op); the kernel leaves quick-ACK mode by itself, hence once per read.
    """
    if _QUICKACK is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)


def numeric_socket(address: str, port: int) -> tuple[socket.socket, tuple[Any, ...]]:
    """A non-blocking TCP socket for the IP literal ``address`` and its sockaddr.

    Numeric-host semantics, strictly: ``inet_pton``, not ``getaddrinfo``, whose
    ``AI_NUMERICHOST`` still takes inet_aton's ``127.1`` for 127.0.0.1.  Raises
    ``OSError`` (the tcp phase) for anything that is not an address literal.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    socket.inet_pton(family, address)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if family == socket.AF_INET6:
        return sock, (address, port, 0, 0)
    return sock, (address, port)


def _ask(
    client: ClientFace[Any], command: Resolve, getaddrinfo: Callable[..., T]
) -> tuple[T, bool]:
    """Ask the resolver hook, else ``getaddrinfo``, for ``command``'s addresses: what it
    returned (awaited by an async runtime) and whether it was the hook."""
    hook = client._resolver
    if hook is not None:
        return cast("T", hook(command.host, command.port)), True
    return getaddrinfo(command.host, command.port, type=socket.SOCK_STREAM), False


def _answers(value: Any, hooked: bool) -> object:
    """The addresses in what was asked (a hook's answer is the driver's to check)."""
    return value if hooked else [info[4][0] for info in value]


async def resolve(
    client: ClientBase[Any],
    command: Resolve,
    getaddrinfo: Callable[..., Awaitable[list[tuple[Any, ...]]]],
    cancelled: type[BaseException],
) -> None:
    """Run ``command`` (the resolver hook, else ``getaddrinfo``) and report to the driver.
    Whatever either raises is the failure reported -- but for ``cancelled`` (the runtime's
    cancellation), ``KeyboardInterrupt`` and ``GeneratorExit``, which propagate."""
    try:
        asked, hooked = _ask(client, command, getaddrinfo)
        answers, failure = _answers(await asked, hooked), None
    except (cancelled, KeyboardInterrupt, GeneratorExit):
        raise
    except BaseException as exc:  # the hook's, any (SystemExit too); the system's, OSError
        answers, failure = None, exc
    report_resolve(client, command, answers, failure)


def resolve_blocking(client: ClientFace[Any], command: Resolve, lock: Any) -> None:
    """:func:`resolve` without ``await``, the blocking adapter's: run on a resolver thread
    (the hook and ``getaddrinfo`` cannot be interrupted), reported holding ``lock``.  No
    cancellation or ``KeyboardInterrupt`` lands in a resolver thread: whatever the hook
    or ``getaddrinfo`` raises is the failure reported."""
    try:
        asked, hooked = _ask(client, command, socket.getaddrinfo)
        if isinstance(asked, Coroutine):  # an async hook: its coroutine is an unusable answer
            asked.close()  # (closed, so no "never awaited" warning)
        answers, failure = _answers(asked, hooked), None
    except BaseException as exc:  # the hook's, any; the system resolver's, OSError
        answers, failure = None, exc
    with lock:
        report_resolve(client, command, answers, failure)


def report_resolve(
    client: ClientFace[Any], command: Resolve, answers: object, failure: BaseException | None
) -> None:
    """Report one resolve to the driver and pump (every adapter's): a failure is the
    hook's when there is one, else the system resolver's (the driver classifies it)."""
    driver, now = client._driver, client._now()
    if failure is None:
        driver.resolved(command.dial_id, answers, now=now)
    else:
        hooked = client._resolver is not None
        driver.resolve_failed(command.dial_id, failure, from_hook=hooked, now=now)
    client._pump()


def _store_raised(exc: Exception) -> StoreFailed:
    return StoreFailed(reason="failed", detail=f"the store raised {type(exc).__name__}: {exc}")


async def perform_store(client: ClientFace[Any], command: StoreOp) -> None:
    """Perform ``command`` on the Client's store (asyncio) and report its answer."""
    assert client._store is not None
    try:
        answer: StoreAnswer = await client._store.aexecute(command.command)
    except Exception as exc:  # the embedder's store: any exception is a failure
        answer = _store_raised(exc)
    client._driver.store_answered(command.op_id, answer, now=client._now())
    client._pump()


def store_answer_blocking(client: ClientFace[Any], command: StoreOp) -> StoreAnswer:
    """The answer to ``command`` from the store's blocking API (on a worker thread)."""
    assert client._store is not None
    try:
        return client._store.execute(command.command)
    except Exception as exc:  # the embedder's store: any exception is a failure
        return _store_raised(exc)


def perform_store_blocking(client: ClientFace[Any], command: StoreOp, lock: Any) -> None:
    """Perform ``command`` (on a worker thread) and report its answer holding ``lock``."""
    answer = store_answer_blocking(client, command)
    with lock:
        client._driver.store_answered(command.op_id, answer, now=client._now())
        client._pump()
