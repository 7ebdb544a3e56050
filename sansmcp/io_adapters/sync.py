"""The blocking adapter: the pure driver's commands executed by threads taking turns.

Theory of operation
-------------------
The driver (:mod:`sansmcp.core.driver`) decides; it is not thread-safe, so every call
into it, and :meth:`Client._pump` executing its commands, runs under the Client's one
lock, where nothing blocks: sockets are non-blocking, TLS is sans-I/O (``MemoryBIO`` +
``SSLObject``) and a ``Write`` the kernel does not take at once waits, in driver order,
in its socket's buffer.  Reading is **turn-taking** (leader/follower), not a reader
thread per socket: the threads waiting for their Conn's mail take turns to ``select``
over every socket (timeout from ``next_deadline()``; a socketpair wakes it when another
thread changes what must be watched), feed the driver, post the mail and hand the turn
on once their own has come.  A sequential caller thus reads its own socket, with no
thread switch; a reader thread would cost two per response (measured: the sync
adapter's CPU per work item is below asyncio's, whose tasks read the same way).  One
watcher thread per Client takes the turn once no caller has wanted it for ``GRACE`` s,
so a server's EOF and the idle expiry are seen between work items, and yields it to
the first caller.  Resolves (``getaddrinfo``, the hook: neither can be interrupted) run
on at most ``RESOLVERS`` threads; the dial deadline binds regardless.  Every thread is
a daemon and ends with :meth:`Client.close` (a resolver in ``getaddrinfo`` once it returns).

(Over the ~200 lines of the asyncio and trio adapters on purpose: it is its own event
loop -- non-blocking connect, sans-I/O TLS, partial writes, the turn, the watcher, the
resolver threads -- which those runtimes provide.)
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import queue
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self, assert_never, cast

from ..core.config import Config
from ..core.driver import CloseSocket, Connect, ConnView, Deliver, Finished, Phase, Resolve, Write
from ..core.mcp import InputRequired
from ..core.oauth.store import AuthorizationNeeded
from ..core.results import CallResult
from ..core.tools import Tool
from ._common import READ_SIZE, ClientFace, ConnFace, ProgressCallback, numeric_socket

__all__ = ["Client", "Conn", "connect", "input_deadline"]

RESOLVERS = 4  # resolver threads at most
GRACE = 0.05  # s the turn must have been free before the watcher takes it
_R, _W = selectors.EVENT_READ, selectors.EVENT_WRITE
_SSL_WANT = (ssl.SSLWantReadError, ssl.SSLWantWriteError)


class _Sock:
    """One socket: connecting (``tls`` None, write interest), handshaking, or ``open``."""

    __slots__ = ("command", "events", "inbox", "open", "out", "sock", "tls", "tls_out")

    def __init__(self, command: Connect, sock: socket.socket) -> None:
        self.command, self.sock, self.events, self.open = command, sock, _W, False
        self.out = bytearray()
        self.tls: ssl.SSLObject | None = None
        self.inbox = self.tls_out = ssl.MemoryBIO()


class Client(ClientFace["Conn"]):
    __doc__ = ClientFace.__doc__

    _now = staticmethod(time.monotonic)

    def _setup(self) -> None:
        self._lock = threading.Lock()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, _R, None)
        self._socks: dict[int, _Sock] = {}
        self._leader: Conn | Client | None = None  # who has the turn (the Client: the watcher)
        self._freed = 0.0  # when a caller last left the turn
        self._watching = threading.Condition(self._lock)
        self._watcher: threading.Thread | None = None
        self._followers: dict[Conn, None] = {}  # waiting for mail or for the turn, in order
        self._selecting = self._stir = False  # the leader is in select; it must look again
        self._until = math.inf  # when the leader's select times out
        self._jobs: queue.SimpleQueue[Resolve | None] = queue.SimpleQueue()
        self._resolvers: list[threading.Thread] = []
        self._resolving = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every socket; in-flight work (in any thread) fails ``ConnectionFailed``."""
        with self._lock:
            self._driver.close(now=self._now())
            self._pump()
            for _ in self._resolvers:
                self._jobs.put(None)
            self._resolvers = []
            self._watching.notify()
            if self._leader is None:
                self._release()
            else:
                self._wake()

    @contextlib.contextmanager
    def connect(self, config: Config) -> Iterator[Conn]:
        """Connect (negotiate) to ``config.url``; the ``Conn`` closes on exit."""
        with self._lock:
            conn = Conn(self, self._driver.open(config, now=self._now()))
            self._conns[conn.view.conn_id] = conn
        with conn:
            conn._run(self._driver.connect, traced=True)
            yield conn

    def complete_authorization(self, config: Config, redirect: str) -> None:
        """Finish an authorization a person made after
        ``Unauthorized(cause="authorization_required")``: ``redirect`` is the URL they came
        back with.  The tokens go to ``config.oauth.store``; the next ``connect`` uses them."""
        with self._lock:
            conn = Conn(self, self._driver.open(config, now=self._now()))
            self._conns[conn.view.conn_id] = conn
        with conn:
            conn._run(conn._completing(redirect))

    def _pump(self, now: float | None = None) -> None:
        """Execute the driver's commands, then fire its due timers once (under the lock)."""
        driver = self._driver
        self._drain()
        deadline, now = driver.next_deadline(), self._now() if now is None else now
        if deadline is not None and deadline <= now:
            driver.handle_timer(now=now)
            self._drain()
            deadline = driver.next_deadline()
        if self._selecting and (self._stir or (deadline or self._until) < self._until):
            self._wake()

    def _drain(self) -> None:
        while (command := self._driver.next_command()) is not None:
            match command:
                case Write(socket_id=socket_id, data=data):
                    if (entry := self._socks.get(socket_id)) is not None:
                        self._send(entry, data)
                case Deliver() | Finished():
                    if (conn := self._conns.get(command.conn_id)) is None:
                        continue  # closed by another thread while it ran: misuse
                    conn._mail.append(command)
                    conn._cond.notify()
                    self._stir |= conn is self._leader
                case Connect():
                    self._connect(command)
                case Resolve():
                    self._resolve(command)
                case CloseSocket(socket_id=socket_id):
                    if (entry := self._socks.pop(socket_id, None)) is not None:
                        self._sel.unregister(entry.sock)
                        entry.sock.close()
                case _:
                    assert_never(command)

    def _wake(self) -> None:
        self._stir = False
        with contextlib.suppress(OSError):  # full: it is awake already; closed: no one waits
            self._wake_w.send(b"w")

    def _release(self) -> None:
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def _next(self, conn: Conn) -> Deliver | Finished:
        """``conn``'s next mail: wait for it, or take the turn to read (under the lock)."""
        while not conn._mail:
            if self._leader is None:
                self._take_turn(conn)
            else:
                self._followers[conn] = None
                if self._leader is self:  # the watcher: it hands the turn on
                    self._wake()
                try:
                    conn._cond.wait()
                finally:
                    del self._followers[conn]
                    self._pass_turn()
        return conn._mail.popleft()

    def _take_turn(self, leader: Conn | Client) -> None:
        self._leader = leader
        try:
            self._lead(leader)
        finally:
            self._leader, self._freed = None, self._now()
            if self._driver.closed:
                self._release()
            self._pass_turn()

    def _pass_turn(self) -> None:
        if self._leader is None and self._followers:  # to the first waiting thread
            next(iter(self._followers))._cond.notify()

    def _watch(self) -> None:
        """The watcher thread: takes the turn once no caller has wanted it for ``GRACE`` s
        (so a server's EOF and the idle expiry are seen between work items) and hands it
        to the first caller that wants it."""
        with self._lock:
            while not self._driver.closed:
                free = self._leader is None and not self._followers
                calm = self._now() - self._freed
                if free and calm >= GRACE:
                    with contextlib.suppress(Exception):  # the watcher must not die of one
                        self._take_turn(self)
                else:
                    self._watching.wait(GRACE - calm if free else GRACE)

    def _lead(self, leader: Conn | Client) -> None:
        mail = leader._mail if isinstance(leader, Conn) else None
        while not mail if mail is not None else not (self._followers or self._driver.closed):
            deadline = self._driver.next_deadline()
            timeout = None if deadline is None else max(deadline - self._now(), 0.0)
            self._selecting, self._stir = True, False
            self._until = math.inf if deadline is None else deadline
            self._lock.release()
            try:
                events = self._sel.select(timeout)
            finally:
                self._lock.acquire()
                self._selecting = False
            now = self._now()  # once per wake-up: every socket's events carry it
            for key, mask in events:
                if key.data is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                elif (entry := self._socks.get(key.data)) is not None:
                    self._ready(key.data, entry, mask, now)
            # select may return a clock tick early: the deadline is due
            self._pump(now if events or deadline is None else max(now, deadline))

    def _connect(self, command: Connect) -> None:
        try:
            sock, sockaddr = numeric_socket(command.address, command.port)
        except OSError as exc:
            return self._driver.connect_failed(command.socket_id, "tcp", exc, now=self._now())
        sock.connect_ex(sockaddr)  # its outcome shows as writability, then SO_ERROR
        self._socks[command.socket_id] = _Sock(command, sock)
        self._sel.register(sock, _W, command.socket_id)
        self._stir = True
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="sansmcp-watcher")
            self._watcher.daemon = True
            self._watcher.start()

    def _ready(self, socket_id: int, entry: _Sock, mask: int, now: float) -> None:
        """A socket is readable or writable: connect, shake hands, read, flush."""
        driver = self._driver
        try:
            if entry.open:
                if mask & _R:
                    self._read(socket_id, entry, now)
                return self._flush(entry)
            if entry.tls is None:  # the TCP connect ended
                if error := entry.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    raise OSError(error, os.strerror(error))
                if entry.command.tls is None:
                    entry.open = True
                    driver.connected(socket_id, alpn=None, now=now)
                    return self._flush(entry)
                host, alpn = entry.command.tls
                entry.inbox, entry.tls_out = ssl.MemoryBIO(), ssl.MemoryBIO()
                context = self.tls_context(alpn)
                entry.tls = context.wrap_bio(entry.inbox, entry.tls_out, server_hostname=host)
            elif mask & _R:
                data = entry.sock.recv(READ_SIZE)
                if not data:
                    raise ConnectionResetError("the server closed during the TLS handshake")
                entry.inbox.write(data)
            with contextlib.suppress(*_SSL_WANT):
                entry.tls.do_handshake()
                entry.open = True
            self._flush(entry)
            if entry.open:
                driver.connected(socket_id, alpn=entry.tls.selected_alpn_protocol(), now=now)
                self._read(socket_id, entry, now, fresh=False)
        except BlockingIOError:
            pass
        except OSError as exc:  # SSLError included
            self._socks.pop(socket_id, None)
            self._sel.unregister(entry.sock)
            entry.sock.close()
            phase: Phase = "tls" if entry.tls is not None else "tcp"
            driver.connect_failed(socket_id, phase, exc, now=now)

    def _read(self, socket_id: int, entry: _Sock, now: float, *, fresh: bool = True) -> None:
        driver = self._driver
        try:
            data = b""
            try:
                data = entry.sock.recv(READ_SIZE) if fresh else b"\0"
            except BlockingIOError:
                return
            except OSError:
                pass
            if entry.tls is not None:
                if fresh and data:
                    entry.inbox.write(data)
                elif fresh:
                    entry.inbox.write_eof()
                while True:
                    try:
                        data = entry.tls.read(READ_SIZE)
                    except _SSL_WANT:
                        return
                    except (OSError, ValueError):
                        data = b""
                    if not data:
                        break
                    driver.received(socket_id, data, now=now)
            elif data:
                return driver.received(socket_id, data, now=now)
            driver.eof(socket_id, now=now)
        except Exception as exc:  # the reader must never die of one
            with contextlib.suppress(Exception):
                driver.reader_failed(socket_id, exc, now=now)

    def _send(self, entry: _Sock, data: bytes) -> None:
        try:
            if entry.tls is not None:
                entry.tls.write(data)
                data = entry.tls_out.read()
            if not entry.out:
                data = data[entry.sock.send(data) :]
        except BlockingIOError:
            pass
        except (OSError, ValueError):  # the reader sees the socket end
            return
        if data:
            entry.out += data
            self._flush(entry)

    def _flush(self, entry: _Sock) -> None:
        if entry.tls is not None and entry.tls_out.pending:
            entry.out += entry.tls_out.read()
        if entry.out:
            try:
                del entry.out[: entry.sock.send(entry.out)]
            except BlockingIOError:
                pass
            except OSError:  # the reader sees the socket end
                entry.out.clear()
        events = _R | (_W if entry.out else 0) if entry.open or entry.tls else _W
        if events != entry.events:
            entry.events = events
            self._sel.modify(entry.sock, events, entry.command.socket_id)
            self._stir = True

    def _resolve(self, command: Resolve) -> None:
        self._jobs.put(command)
        self._resolving += 1
        if self._resolving > len(self._resolvers) and len(self._resolvers) < RESOLVERS:
            thread = threading.Thread(target=self._resolver_loop, name="sansmcp-resolver")
            thread.daemon = True
            self._resolvers.append(thread)
            thread.start()

    def _resolver_loop(self) -> None:
        hook, driver = cast("Callable[[str, int], object] | None", self._resolver), self._driver
        while (command := self._jobs.get()) is not None:
            answers: object = None
            failure: BaseException | None = None
            try:
                if hook is not None:
                    answers = hook(command.host, command.port)
                else:
                    infos = socket.getaddrinfo(command.host, command.port, type=socket.SOCK_STREAM)
                    answers = [info[4][0] for info in infos]
            except Exception as exc:  # the hook's, any; the system resolver's, OSError
                failure = exc
            with self._lock, contextlib.suppress(Exception):  # a resolver must not die of one
                self._resolving -= 1
                if failure is None:
                    driver.resolved(command.dial_id, answers, now=self._now())
                else:
                    hooked = hook is not None or not isinstance(failure, OSError)
                    driver.resolve_failed(
                        command.dial_id, failure, from_hook=hooked, now=self._now()
                    )
                self._pump()


class Conn(ConnFace):
    """One MCP connection (one work item): one thread at a time."""

    client: Client

    def __init__(self, client: Client, view: ConnView) -> None:
        super().__init__(client, view)
        self._mail: deque[Deliver | Finished] = deque()
        self._cond = threading.Condition(client._lock)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def list_tools(self, *, fresh: bool = False) -> list[Tool]:
        """The server's tools: from the Client's cache while the spec's ``ttlMs`` /
        ``cacheScope`` allow (no request), else listed; ``fresh=True`` always lists."""
        return cast("list[Tool]", self._run(self._listing(fresh), traced=True))

    def call_tool(
        self, name: str, arguments: bytes = b"", *, on_progress: ProgressCallback | None = None
    ) -> CallResult:
        """Call ``name``; ``on_progress(progress, total, message)`` is called for each
        progress notification of this call, in order, in the caller's thread."""
        start = self._calling(name, arguments, on_progress)
        self._on_progress = on_progress
        try:
            return cast("CallResult", self._run(start, traced=True))
        finally:
            self._on_progress = None

    def close(self) -> None:
        """Close: abandon what is in flight; a legacy session gets its DELETE (bounded)."""
        try:
            if not self.view.closed:  # else closed, or abandoned: what its mailbox holds is stale
                self._run(self.client._driver.close_conn)
        finally:
            with self.client._lock:
                if not self.machine.busy:  # else its own thread takes the Finished first
                    self.client._conns.pop(self.view.conn_id, None)

    def _run(self, start: Callable[..., None], *, traced: bool = False) -> object:
        client, conn_id = self.client, self.view.conn_id
        trace = self._trace(traced)
        with client._lock:
            start(conn_id, now=client._now(), **trace)
            client._pump()
        try:
            while isinstance(command := self._take(), Deliver):
                if isinstance(item := command.item, InputRequired):
                    self._ask(command, item)
                elif isinstance(item, AuthorizationNeeded):
                    self._authorize(item)
                else:
                    self.observe(item, client._now())
        except BaseException as exc:
            self._abandoned(exc)
            with client._lock:
                client._driver.abandon(conn_id, now=client._now())
                client._pump()
            raise
        if command.error is not None:
            raise command.error
        return command.value

    def _take(self) -> Deliver | Finished:
        with self.client._lock:
            command = self.client._next(self)
            if self.view.closed and isinstance(command, Finished):
                self.client._conns.pop(self.view.conn_id, None)
            return command

    def _authorize(self, item: AuthorizationNeeded) -> None:
        """The embedder's authorization step (``Config.oauth.authorize``, a plain callable
        here), unbounded: a person may take minutes."""
        step = self._authorization_step()
        answer = None if step is None else step(item.url)
        with self.client._lock:
            self.client._driver.authorized(
                self.view.conn_id, item.auth_id, answer, now=self.client._now()
            )
            self.client._pump()

    def _ask(self, command: Deliver, item: InputRequired) -> None:
        client, handler = self.client, self.client.input_handler
        answers: Mapping[str, Any] | None = None
        if handler is not None:
            _local.deadline = command.deadline
            try:
                answers = cast("Mapping[str, Any] | None", handler(item.requests))
            finally:
                _local.deadline = math.inf
        with client._lock:
            if client._now() < command.deadline:  # else the driver's timer reports it
                client._driver.answer(self.view.conn_id, item.input_id, answers, now=client._now())
            client._pump()


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
