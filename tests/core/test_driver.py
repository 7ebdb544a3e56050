"""The pure ClientDriver against a scripted fake network.

``Net`` plays the adapter: it executes the driver's commands -- resolves from a
table, connects by a plan per address, serves the bytes each socket is written
with an h11 server in front of a ``FakeServer`` -- and reports back, as an
adapter's tasks would, in the order the tests choose (``settle`` runs every
reaction; a test may also step them one by one).  Time moves only when the
tests move it, to the driver's ``next_deadline()``.
"""

from __future__ import annotations

import gc
import json
import weakref
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import h11
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sansmcp import CallerError, Config, ConnectionFailed, McpError, UsageError
from sansmcp.core.driver import (
    ClientDriver,
    CloseSocket,
    Command,
    Connect,
    ConnView,
    Deliver,
    Finished,
    Resolve,
    Write,
)
from sansmcp.core.http import HttpRequest
from sansmcp.core.limits import Limits
from sansmcp.core.mcp.notifications import OBSERVATIONS
from sansmcp.core.net import dial as dialing
from sansmcp.core.results import CallResult
from sansmcp.core.tools import Tool
from sansmcp.core.url import parse_endpoint
from tests.tiers import examples

from .fakemcp import MODERN, FakeServer, Response, result, sse_response

URL = "http://127.0.0.1:8000/mcp"
NAMED = "http://mcp.test:8000/mcp"
TLS_URL = "https://mcp.test/mcp"
Handler = Callable[[HttpRequest], Response | None]


# ---------------------------------------------------------------- the fake network


class ServerSocket:
    """The server's end of one socket: h11 parses what the client wrote."""

    def __init__(self, handler: Handler, scheme: bytes) -> None:
        self.handler = handler
        self.scheme = scheme
        self.h11 = h11.Connection(h11.SERVER)
        self.request: h11.Request | None = None
        self.body = bytearray()
        self.open_stream = False

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """(the bytes the server answers, whether it then closes)."""
        self.h11.receive_data(data)
        out = bytearray()
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return bytes(out), False
            if isinstance(event, h11.Request):
                self.request, self.body = event, bytearray()
            elif isinstance(event, h11.Data):
                self.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert self.request is not None
                headers = tuple((name.lower(), value) for name, value in self.request.headers)
                request = HttpRequest(
                    method=self.request.method,
                    scheme=self.scheme,
                    authority=dict(headers)[b"host"],
                    target=self.request.target,
                    headers=headers,
                    body=bytes(self.body),
                )
                response = self.handler(request)
                if response is None:
                    return bytes(out), False  # never answered
                data, closes = self.respond(response)
                out += data
                if closes or self.open_stream:
                    return bytes(out), closes
            elif isinstance(
                event, h11.ConnectionClosed
            ):  # pragma: no cover - the client never half-closes
                return bytes(out), True

    def respond(self, response: Response) -> tuple[bytes, bool]:
        if not response.head:
            return b"", True
        out = bytearray(
            self.h11.send(
                h11.Response(status_code=response.status, headers=response.headers, reason=b"")
            )
            or b""
        )
        for chunk in response.chunks:
            out += self.h11.send(h11.Data(data=chunk)) or b""
        if response.fail is not None:
            return bytes(out), True
        if not response.end:
            self.open_stream = True
            return bytes(out), False
        out += self.h11.send(h11.EndOfMessage()) or b""
        if self.h11.our_state is h11.MUST_CLOSE:
            return bytes(out), True
        self.h11.start_next_cycle()
        return bytes(out), False

    def push(self, data: bytes) -> bytes:
        """More of the open stream's body."""
        return self.h11.send(h11.Data(data=data)) or b""


class H2ServerSocket:
    """The server's end of an h2c socket (prior knowledge): the h2 library parses it."""

    def __init__(self, handler: Handler, scheme: bytes) -> None:
        self.handler = handler
        self.scheme = scheme
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.h2.initiate_connection()
        self.streams: dict[int, tuple[list[tuple[bytes, bytes]], bytearray]] = {}

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self.streams[event.stream_id] = (list(event.headers), bytearray())
            elif isinstance(event, h2.events.DataReceived):
                self.streams[event.stream_id][1].extend(event.data)
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.answer(event.stream_id)
        return self.h2.data_to_send(), False

    def answer(self, stream_id: int) -> None:
        raw, body = self.streams.pop(stream_id)
        fields = dict(raw)
        request = HttpRequest(
            method=fields[b":method"],
            scheme=self.scheme,
            authority=fields[b":authority"],
            target=fields[b":path"],
            headers=tuple((k, v) for k, v in raw if not k.startswith(b":")),
            body=bytes(body),
        )
        response = self.handler(request)
        if response is None:
            return
        status = [(b":status", str(response.status).encode())]
        self.h2.send_headers(stream_id, status + list(response.headers))
        for chunk in response.chunks:
            self.h2.send_data(stream_id, chunk)
        if response.end:
            self.h2.end_stream(stream_id)


@dataclass
class Net:
    """Plays the adapter (see the module docstring)."""

    driver: ClientDriver
    handlers: dict[int, Handler] = field(default_factory=dict)  # by port
    dns: dict[str, Any] = field(default_factory=dict)  # host -> answer, or an exception
    hook: bool = False  # resolve failures come from the resolver hook
    plan: dict[str, Any] = field(default_factory=dict)  # address -> "ok" | "hang" | (phase, exc)
    alpn: str | None = None
    input_handler: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None
    now: float = 0.0
    log: list[Command] = field(default_factory=list)
    reactions: deque[tuple[int | None, Callable[[], None]]] = field(default_factory=deque)
    servers: dict[int, Any] = field(default_factory=dict)
    h2c: bool = False
    unread: dict[int, bytearray] = field(default_factory=dict)
    closes: Counter[int] = field(default_factory=Counter)
    finished: dict[int, list[Finished]] = field(default_factory=dict)
    delivered: list[Deliver] = field(default_factory=list)
    auto_answer: bool = True

    # -- the adapter's loop

    def pump(self) -> None:
        while (command := self.driver.next_command()) is not None:
            self.log.append(command)
            self.execute(command)

    def execute(self, command: Command) -> None:
        match command:
            case Resolve(dial_id=dial_id, host=host):
                assert self.closes[dial_id] == 0
                answer = self.dns.get(host, ["127.0.0.1"])
                if answer == "hang":
                    return
                if isinstance(answer, BaseException):
                    self.react(
                        dial_id,
                        lambda: self.driver.resolve_failed(
                            dial_id, answer, from_hook=self.hook, now=self.now
                        ),
                    )
                else:
                    self.react(dial_id, lambda: self.driver.resolved(dial_id, answer, now=self.now))
            case Connect(socket_id=socket_id, address=address, port=port, tls=tls):
                outcome = self.plan.get(address, "ok")
                if outcome == "hang":
                    return
                if outcome == "ok":
                    scheme = b"https" if tls is not None else b"http"

                    def up() -> None:
                        kind = H2ServerSocket if self.h2c else ServerSocket
                        self.servers[socket_id] = kind(self.handlers[port], scheme)
                        self.driver.connected(socket_id, alpn=self.alpn, now=self.now)

                    self.react(socket_id, up)
                else:
                    phase, exc = outcome
                    self.react(
                        socket_id,
                        lambda: self.driver.connect_failed(socket_id, phase, exc, now=self.now),
                    )
            case Write(socket_id=socket_id, data=data):
                assert self.closes[socket_id] == 0, "a Write to a closed socket"
                answer, closes = self.servers[socket_id].feed(data)
                if answer and socket_id in self.unread:  # coalesced, as TCP may
                    self.unread[socket_id] += answer
                elif answer:
                    self.unread[socket_id] = bytearray(answer)

                    def read() -> None:
                        self.driver.received(
                            socket_id, bytes(self.unread.pop(socket_id)), now=self.now
                        )

                    self.react(socket_id, read)
                if closes:
                    self.react(socket_id, lambda: self.driver.eof(socket_id, now=self.now))
            case CloseSocket(socket_id=socket_id):
                self.closes[socket_id] += 1
                assert self.closes[socket_id] == 1, "a socket closed twice"
                self.servers.pop(socket_id, None)
            case Deliver():
                self.delivered.append(command)
                if self.auto_answer and not isinstance(command.item, OBSERVATIONS):
                    self.react(None, lambda: self.answer(command))
            case Finished(conn_id=conn_id):
                self.finished.setdefault(conn_id, []).append(command)
            case _:  # pragma: no cover - the union is exhaustive
                raise AssertionError(command)

    def answer(self, command: Deliver) -> None:
        handler = self.input_handler
        answers = handler(command.item.requests) if handler is not None else None
        self.driver.answer(command.conn_id, command.item.input_id, answers, now=self.now)

    def react(self, io_id: int | None, reaction: Callable[[], None]) -> None:
        self.reactions.append((io_id, reaction))

    def step(self) -> bool:
        """Run the oldest reaction (none for an id closed meanwhile); False when none."""
        if not self.reactions:
            return False
        io_id, reaction = self.reactions.popleft()
        if io_id is None or self.closes[io_id] == 0:
            reaction()
        self.pump()
        return True

    def settle(self) -> None:
        while self.step():
            pass

    def tick(self) -> bool:
        """Move time to the next deadline and fire it; False when there is none."""
        deadline = self.driver.next_deadline()
        if deadline is None:
            return False
        self.now = max(self.now, deadline)
        self.driver.handle_timer(now=self.now)
        self.pump()
        return True

    # -- operations, as a caller runs them

    def open(self, url: str = URL, **config: Any) -> ConnView:
        return self.driver.open(Config(url=url, **config), now=self.now)

    def start(self, op: str, view: ConnView, *args: Any) -> None:
        getattr(self.driver, op)(view.conn_id, *args, now=self.now)
        self.pump()

    def wait(self, view: ConnView, *, before: int | None = None, ticks: int = 1000) -> Finished:
        """The next Finished for ``view`` (after the ``before`` it had when it started)."""
        if before is None:
            before = len(self.finished.get(view.conn_id, [])) - 1
            if before >= 0 and not self.reactions:
                return self.finished[view.conn_id][-1]
            before = max(before, 0)
        for _ in range(ticks):
            self.settle()
            done = self.finished.get(view.conn_id, [])
            if len(done) > before:
                assert len(done) == before + 1
                return done[-1]
            assert self.tick(), "stuck: nothing to wait for"
        raise AssertionError("no Finished")  # pragma: no cover - a failing test's message

    def run(self, op: str, view: ConnView, *args: Any) -> Finished:
        before = len(self.finished.get(view.conn_id, []))
        self.start(op, view, *args)
        return self.wait(view, before=before)

    def ok(self, op: str, view: ConnView, *args: Any) -> Any:
        done = self.run(op, view, *args)
        if done.error is not None:
            raise done.error
        return done.value

    def failure(self, op: str, view: ConnView, *args: Any) -> McpError:
        done = self.run(op, view, *args)
        assert done.error is not None, done
        return done.error

    def sockets(self, kind: type[Command]) -> list[Any]:
        return [command for command in self.log if isinstance(command, kind)]


def make(
    server: Handler | None = None, *, port: int = 8000, limits: Limits | None = None, **kw: Any
) -> Net:
    options = {key: kw.pop(key) for key in list(kw) if key in DRIVER_OPTIONS}
    driver = ClientDriver(limits=limits, allow_loopback=True, **options)
    return Net(driver, handlers={port: server or FakeServer()}, **kw)


DRIVER_OPTIONS = {
    "answers_input",
    "capabilities",
    "client_info",
    "http2_prior_knowledge",
    "observe",
    "random_bytes",
}


def work_item(net: Net, url: str = URL) -> tuple[ConnView, list[Tool], CallResult]:
    view = net.open(url)
    assert net.ok("connect", view) is None
    tools = net.ok("list_tools", view)
    called = net.ok("call_tool", view, "echo", b'{"text": "hi"}')
    assert net.ok("close_conn", view) is None
    return view, tools, called


# ---------------------------------------------------------------- one work item


def test_a_work_item_runs_on_one_keep_alive_socket() -> None:
    net = make()
    view, tools, called = work_item(net)
    assert [t.name for t in tools] == ["echo"]
    assert json.loads(called.content[0].text) == {"text": "hi"}
    assert view.machine.protocol_version == MODERN and view.closed
    assert view.machine.ttl_ms == 1000 and view.machine.cache_scope == "private"
    assert view.skipped_tools == [] and view.skipped_count == 0
    (connect,) = net.sockets(Connect)
    assert (connect.address, connect.port, connect.tls) == ("127.0.0.1", 8000, None)
    assert net.sockets(Resolve) == []  # a literal host is not resolved
    assert (
        net.driver.pool.socket_count
        == net.driver.pool.idle_count(view.machine.settings.endpoint.origin)
        == 1
    )
    assert net.driver.pool.era_hint(URL) == MODERN
    # the idle socket expires at Limits.pool_idle_timeout, a driver deadline
    assert net.driver.next_deadline() == pytest.approx(net.now + Limits().pool_idle_timeout)
    assert net.tick() and net.driver.pool.socket_count == 0
    assert net.closes[connect.socket_id] == 1 and net.driver.next_deadline() is None


def test_the_next_work_item_reuses_the_socket_and_the_era() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25")
    net = make(server)
    for _ in range(3):
        work_item(net)
    methods = [body.get("method") if body else None for body in server.bodies]
    assert methods.count("server/discover") == 1  # the era learnt spares the next probes
    assert methods.count("initialize") == 3
    assert len(net.sockets(Connect)) == 1


def test_skipped_tools_are_recorded_on_the_view() -> None:
    server = FakeServer(tools=[{"name": "ok", "inputSchema": {"type": "object"}}, {"bad": 1}])
    net = make(server)
    view = net.open()
    net.ok("connect", view)
    assert [t.name for t in net.ok("list_tools", view)] == ["ok"]
    assert view.skipped_count == 1 and len(view.skipped_tools) == 1


def test_tls_parameters_and_alpn() -> None:
    net = make(port=443, alpn="http/1.1")
    view = net.open(TLS_URL, bearer_token="t")
    net.ok("connect", view)
    (resolve,) = net.sockets(Resolve)
    assert (resolve.host, resolve.port) == ("mcp.test", 443)
    (connect,) = net.sockets(Connect)
    assert connect.tls == ("mcp.test", ("h2", "http/1.1"))


# ---------------------------------------------------------------- resolving and dialling


def test_resolver_answers_are_vetted() -> None:
    net = make(dns={"mcp.test": ["10.0.0.1"]})
    error = net.failure("connect", net.open(NAMED))
    assert isinstance(error, ConnectionFailed) and error.cause == "refused_address"
    assert net.sockets(Connect) == [] and net.driver.pool.socket_count == 0


def test_a_resolver_hook_failure_is_dns_chained() -> None:
    boom = LookupError("no such host")
    net = make(dns={"mcp.test": boom}, hook=True)
    error = net.failure("connect", net.open(NAMED))
    assert isinstance(error, ConnectionFailed) and error.cause == "dns"
    assert "the resolver hook failed for mcp.test: LookupError: no such host" in error.message
    assert error.__cause__ is boom


def test_a_system_resolver_failure_is_dns() -> None:
    net = make(dns={"mcp.test": OSError("Name or service not known")})
    error = net.failure("connect", net.open(NAMED))
    assert isinstance(error, ConnectionFailed) and error.cause == "dns"
    assert error.message == "could not resolve mcp.test: Name or service not known"


def test_dialling_falls_back_over_the_vetted_addresses() -> None:
    net = make(
        dns={"mcp.test": ["::1", "127.0.0.2", "127.0.0.1"]},
        plan={"::1": ("tcp", ConnectionRefusedError("refused")), "127.0.0.2": ("tls", OSError())},
    )
    view = net.open(NAMED)
    net.ok("connect", view)
    assert [c.address for c in net.sockets(Connect)] == ["::1", "127.0.0.2", "127.0.0.1"]
    assert net.driver.pool.socket_count == 1


@pytest.mark.parametrize(
    ("phase", "exc", "cause", "text"),
    [
        ("tcp", ConnectionRefusedError("refused"), "dial", "at 127.0.0.1: ConnectionRefusedError"),
        ("tcp", OSError("illegal IP address string"), "dial", "OSError: illegal IP address"),
        ("tls", OSError("eof"), "tls", "the TLS library gave no reason"),
    ],
)
def test_every_address_failing_fails_with_the_last(
    phase: str, exc: BaseException, cause: str, text: str
) -> None:
    net = make(
        dns={"mcp.test": ["127.0.0.2", "127.0.0.1"]},
        plan={"127.0.0.2": ("tcp", OSError("first")), "127.0.0.1": (phase, exc)},
    )
    error = net.failure("connect", net.open(NAMED))
    assert isinstance(error, ConnectionFailed) and error.cause == cause
    assert text in error.message and "first" not in error.message
    assert net.driver.pool.socket_count == 0


def test_a_tls_failure_is_worded_from_its_cause() -> None:
    """A runtime that wraps the TLS library's error (trio) is read through the cause."""

    class Verify(Exception):
        verify_message = "certificate has expired"

    wrapper = RuntimeError("broken")
    wrapper.__cause__ = Verify("verify failed")
    net = make(plan={"127.0.0.1": ("tls", wrapper)})
    error = net.failure("connect", net.open())
    assert isinstance(error, ConnectionFailed) and error.cause == "tls"
    assert "certificate has expired" in error.message and "Verify" in error.message


def test_the_dial_deadline_closes_the_pending_connect() -> None:
    net = make(limits=Limits(dial_timeout=2.0), plan={"127.0.0.1": "hang"})
    view = net.open()
    error = net.failure("connect", view)
    assert isinstance(error, ConnectionFailed) and error.bound == "dial_timeout"
    assert net.now == pytest.approx(2.0)
    (connect,) = net.sockets(Connect)
    assert net.closes[connect.socket_id] == 1
    net.driver.connected(connect.socket_id, alpn=None, now=net.now)  # too late: ignored
    net.pump()
    assert net.driver.pool.socket_count == 0 and net.sockets(Write) == []


def test_a_tighter_exchange_deadline_is_named_by_the_machine() -> None:
    net = make(limits=Limits(connect_timeout=1.0), dns={"mcp.test": "hang"})
    error = net.failure("connect", net.open(NAMED))
    assert isinstance(error, ConnectionFailed) and error.bound == "connect_timeout"
    (resolve,) = net.sockets(Resolve)
    assert net.closes[resolve.dial_id] == 1  # the resolve in progress is abandoned
    net.driver.resolved(resolve.dial_id, ["127.0.0.1"], now=net.now)  # too late: ignored
    net.driver.resolve_failed(resolve.dial_id, OSError(), from_hook=False, now=net.now)
    net.pump()
    assert net.sockets(Connect) == [] and net.driver.pool.socket_count == 0


def test_a_dial_timeout_equal_to_the_exchange_deadline_is_the_dials() -> None:
    net = make(limits=Limits(connect_timeout=2.0, dial_timeout=2.0), dns={"mcp.test": "hang"})
    error = net.failure("connect", net.open(NAMED))
    assert isinstance(error, ConnectionFailed) and error.bound == "dial_timeout"


def test_stale_reports_are_ignored() -> None:
    net = make()
    driver = net.driver
    driver.received(99, b"HTTP/1.1 200 OK\r\n\r\n", now=0.0)
    driver.eof(99, now=0.0)
    driver.reader_failed(99, RuntimeError(), now=0.0)
    driver.connected(99, alpn=None, now=0.0)
    driver.connect_failed(99, "tcp", OSError(), now=0.0)
    driver.resolved(99, [], now=0.0)
    driver.answer(99, 1, None, now=0.0)
    driver.abandon(99, now=0.0)
    assert driver.next_command() is None and driver.next_deadline() is None


# ---------------------------------------------------------------- sockets


def test_eof_mid_response_fails_the_exchange_reset() -> None:
    server = FakeServer()
    net = make(server)
    view = net.open()
    net.ok("connect", view)
    server.overrides["tools/list"] = lambda request, body: Response(
        headers=[(b"content-type", b"application/json")],
        chunks=[b'{"jsonrpc"'],
        fail=ConnectionFailed("x", cause="reset"),
    )
    error = net.failure("list_tools", view)
    assert isinstance(error, ConnectionFailed) and error.cause in ("reset", "framing")
    assert net.driver.pool.socket_count == 0


def test_a_reader_fault_fails_the_sockets_exchanges_classified() -> None:
    server = FakeServer()
    server.overrides["tools/list"] = lambda request, body: None  # never answered
    net = make(server)
    view = net.open()
    net.ok("connect", view)
    net.start("list_tools", view)
    net.settle()
    (connect,) = net.sockets(Connect)
    net.driver.reader_failed(connect.socket_id, RuntimeError("injected"), now=net.now)
    net.pump()
    done = net.wait(view)
    assert isinstance(done.error, ConnectionFailed) and done.error.cause == "framing"
    assert "RuntimeError: injected" in done.error.message
    assert net.closes[connect.socket_id] == 1


def test_data_on_an_idle_socket_breaks_and_closes_it() -> None:
    net = make()
    view = net.open()
    net.ok("connect", view)
    (connect,) = net.sockets(Connect)
    net.driver.received(connect.socket_id, b"garbage\r\n\r\n", now=net.now)
    net.pump()
    assert net.closes[connect.socket_id] == 1 and net.driver.pool.socket_count == 0
    net.ok("list_tools", view)  # a new socket
    assert len(net.sockets(Connect)) == 2


def test_work_items_multiplex_over_one_h2c_connection() -> None:
    server = FakeServer()
    net = make(server, http2_prior_knowledge=True, h2c=True)
    views = [net.open() for _ in range(3)]
    net.ok("connect", views[0])
    for view in views[1:]:
        net.ok("connect", view)
    for view in views:
        net.start("call_tool", view, "echo", b'{"n": 1}')
    net.settle()
    assert [net.finished[v.conn_id][-1].error for v in views] == [None, None, None]
    assert len(net.sockets(Connect)) == 1 and net.driver.pool.socket_count == 1
    writes = [w for w in net.sockets(Write)]
    assert writes[0].data.startswith(b"PRI * HTTP/2.0")


def test_cancelling_an_http1_exchange_closes_its_socket() -> None:
    server = FakeServer()
    net = make(server, limits=Limits(call_timeout=1.0))
    view = net.open()
    net.ok("connect", view)
    server.overrides["tools/call"] = lambda request, body: None
    error = net.failure("call_tool", view, "echo", b"{}")
    assert isinstance(error, ConnectionFailed) and error.bound == "call_timeout"
    (connect,) = net.sockets(Connect)
    assert net.closes[connect.socket_id] == 1


# ---------------------------------------------------------------- the queue


def test_the_fifo_queue_serves_waiting_exchanges_in_order() -> None:
    server = FakeServer()
    held: list[HttpRequest] = []
    net = make(server, limits=Limits(pool_max_sockets_per_origin=1))
    views = [net.open() for _ in range(3)]
    for view in views:
        net.start("connect", view)
    net.settle()
    assert len(net.sockets(Connect)) == 1  # one socket, the others wait in order
    assert sorted(net.finished) == [v.conn_id for v in views]
    order = [net.finished[v.conn_id][0] for v in views]
    assert all(done.error is None for done in order)
    assert [c.conn_id for c in net.log if isinstance(c, Finished)] == [v.conn_id for v in views]
    assert held == [] and net.driver.pool.waiting() == []


def connected_pair(net: Net) -> tuple[ConnView, ConnView]:
    """Two connected Conns (the second without a round trip: the era is known)."""
    first, second = net.open(), net.open()
    net.ok("connect", first)
    net.ok("connect", second)
    return first, second


def test_a_waiting_exchange_times_out_by_its_own_bound() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = lambda request, body: None
    net = make(server, limits=Limits(pool_max_sockets_per_origin=1, list_timeout=1.0))
    first, second = connected_pair(net)
    net.start("call_tool", first, "echo", b"{}")  # holds the only socket
    error = net.failure("list_tools", second)
    assert isinstance(error, ConnectionFailed) and error.bound == "list_timeout"
    assert net.driver.pool.waiting() == [] and net.now == pytest.approx(1.0)


def busy_and_waiting(**kw: Any) -> tuple[Net, ConnView, ConnView]:
    """One Conn's listing holds the only socket of the origin; another's waits for it."""
    server = FakeServer()
    server.overrides["tools/list"] = lambda request, body: None
    net = make(server, limits=Limits(pool_max_sockets_per_origin=1), **kw)
    busy, waiting = connected_pair(net)
    net.start("list_tools", busy)
    net.start("list_tools", waiting)
    net.settle()
    assert len(net.driver.pool.waiting()) == 1
    return net, busy, waiting


def test_client_close_fails_in_flight_waiting_and_dialling_work() -> None:
    net, busy, waiting = busy_and_waiting(dns={"slow.test": "hang"})
    dialling = net.open("http://slow.test:8000/mcp")
    net.start("connect", dialling)
    net.settle()
    assert len(net.driver.pool.waiting()) == 1
    net.driver.close(now=net.now)
    net.pump()
    for view in (busy, waiting, dialling):  # in flight on a socket, waiting, dialling
        done = net.wait(view)
        assert isinstance(done.error, ConnectionFailed), done
        assert done.error.cause == "client_closed", done.error  # not "reset": no server fault
    assert net.driver.pool.socket_count == 0 and net.driver.pool.waiting() == []
    with pytest.raises(UsageError, match="this Client is closed"):
        net.open()
    error = net.failure("list_tools", busy)  # an old Conn: no new socket
    assert isinstance(error, ConnectionFailed) and error.cause == "client_closed"
    assert error.message == "the Client was closed while this work was in flight"
    assert len(net.sockets(Connect)) == 1
    assert net.ok("close_conn", busy) is None


# ---------------------------------------------------------------- the caller


def listing_unanswered() -> tuple[Net, ConnView]:
    server = FakeServer()
    server.overrides["tools/list"] = lambda request, body: None
    net = make(server)
    view = net.open()
    net.ok("connect", view)
    net.start("list_tools", view)
    return net, view


def test_usage_errors() -> None:
    assert issubclass(UsageError, RuntimeError)
    assert not issubclass(UsageError, McpError | CallerError)
    net, view = listing_unanswered()
    with pytest.raises(UsageError, match="a Conn runs one operation at a time"):
        net.start("call_tool", view, "echo", b"{}")
    with pytest.raises(UsageError, match="a Conn runs one operation at a time"):
        net.start("close_conn", view)
    assert not view.closed  # a refused close changes nothing
    with pytest.raises(CallerError):
        net.open("ftp://nowhere")
    net.driver.abandon(view.conn_id, now=net.now)
    net.pump()
    assert view.closed and net.driver.pool.socket_count == 0
    with pytest.raises(UsageError, match=r"this Conn is closed \(closed, or an operation"):
        net.start("list_tools", view)
    assert net.ok("close_conn", view) is None  # closing again is a no-op


def test_abandon_while_waiting_or_dialling_leaves_the_pool_consistent() -> None:
    net, busy, waiting = busy_and_waiting()
    net.driver.abandon(waiting.conn_id, now=net.now)
    assert net.driver.pool.waiting() == []
    net.plan["127.0.0.1"] = "hang"
    net.driver.abandon(busy.conn_id, now=net.now)
    net.pump()
    dialling = net.open("http://127.0.0.1:8000/other")  # no era hint: connect dials
    net.start("connect", dialling)
    net.settle()
    net.driver.abandon(dialling.conn_id, now=net.now)
    net.pump()
    connects = net.sockets(Connect)
    assert len(connects) == 2 and all(net.closes[c.socket_id] == 1 for c in connects)
    assert net.driver.pool.socket_count == 0 and net.driver.next_deadline() is None


ELICIT = {"confirm": {"method": "elicitation/create", "params": {"message": "sure?"}}}


def test_an_input_request_is_delivered_and_answered() -> None:
    server = FakeServer()
    calls: list[Any] = []

    def call(request: HttpRequest, body: Any) -> Response:
        calls.append(body)
        if len(calls) == 1:
            value: dict[str, Any] = {"resultType": "input_required", "inputRequests": ELICIT}
        else:
            value = {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}
        return server.wrap(result(body["id"], value))

    server.overrides["tools/call"] = call
    net = make(server, answers_input=True, capabilities={"elicitation": {}})
    net.input_handler = lambda requests: {"confirm": {"action": "accept"}}
    view = net.open()
    net.ok("connect", view)
    assert net.ok("call_tool", view, "echo", b"{}").content[0].text == "done"
    (deliver,) = net.delivered
    assert deliver.item.requests == ELICIT and deliver.deadline < float("inf")
    assert calls[1]["params"]["inputResponses"] == {"confirm": {"action": "accept"}}


def test_an_answer_after_its_deadline_is_dropped_and_the_bound_reported() -> None:
    """Time comes first: a blocking handler that answers past the request's deadline (no
    timer has fired yet) finds the call failed with ``call_timeout``; nothing is sent."""
    server = FakeServer()
    calls: list[Any] = []

    def call(request: HttpRequest, body: Any) -> Response:
        calls.append(body)
        value = {"resultType": "input_required", "inputRequests": ELICIT}
        return server.wrap(result(body["id"], value))

    server.overrides["tools/call"] = call
    net = make(
        server,
        answers_input=True,
        capabilities={"elicitation": {}},
        limits=Limits(call_timeout=2.0),
        auto_answer=False,
    )
    view = net.open()
    net.ok("connect", view)
    net.start("call_tool", view, "echo", b"{}")
    net.settle()
    (deliver,) = net.delivered
    net.now = deliver.deadline  # the handler returns just as the deadline passes
    net.driver.answer(view.conn_id, deliver.item.input_id, {"confirm": {}}, now=net.now)
    net.pump()
    error = net.finished[view.conn_id][-1].error
    assert isinstance(error, ConnectionFailed) and error.bound == "call_timeout"
    assert len(calls) == 1  # the late answer was not sent


def test_an_answer_a_moment_before_its_deadline_is_taken() -> None:
    """The other side of the rule: a millisecond before the deadline the answer goes out
    and the call completes."""
    server = FakeServer()
    calls: list[Any] = []

    def call(request: HttpRequest, body: Any) -> Response:
        calls.append(body)
        if len(calls) == 1:
            value: dict[str, Any] = {"resultType": "input_required", "inputRequests": ELICIT}
        else:
            value = {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}
        return server.wrap(result(body["id"], value))

    server.overrides["tools/call"] = call
    net = make(server, answers_input=True, capabilities={"elicitation": {}}, auto_answer=False)
    view = net.open()
    net.ok("connect", view)
    net.start("call_tool", view, "echo", b"{}")
    net.settle()
    (deliver,) = net.delivered
    net.now = deliver.deadline - 0.001
    net.driver.answer(view.conn_id, deliver.item.input_id, {"confirm": {}}, now=net.now)
    net.pump()
    net.settle()
    assert net.finished[view.conn_id][-1].value.content[0].text == "done"


def legacy_listening() -> tuple[FakeServer, list[Any]]:
    server = FakeServer(modern=False, legacy="2025-11-25")
    server.overrides["GET"] = lambda request, body: sse_response(end=False)
    return server, server.answers


def test_a_server_request_between_operations_waits_for_the_next_one() -> None:
    server, answers = legacy_listening()
    net = make(server, answers_input=True, capabilities={"elicitation": {}})
    net.input_handler = lambda requests: {"request": {"action": "accept"}}
    view = net.open()
    net.ok("connect", view)
    get = next(c for c in net.log if isinstance(c, Write) and c.data.startswith(b"GET"))
    listen = net.servers[get.socket_id]
    ask = {"jsonrpc": "2.0", "id": 7, "method": "elicitation/create", "params": {}}
    net.driver.received(
        get.socket_id, listen.push(b"data: " + json.dumps(ask).encode() + b"\n\n"), now=net.now
    )
    net.pump()
    assert net.delivered == []  # no operation runs: held
    net.ok("list_tools", view)
    (deliver,) = net.delivered
    assert deliver.item.server_request
    assert answers == [{"jsonrpc": "2.0", "id": 7, "result": {"action": "accept"}}]


def test_a_held_server_request_is_declined_at_close_not_delivered() -> None:
    server, answers = legacy_listening()
    net = make(server, answers_input=True, capabilities={"elicitation": {}})
    view = net.open()
    net.ok("connect", view)
    get = next(c for c in net.log if isinstance(c, Write) and c.data.startswith(b"GET"))
    ask = {"jsonrpc": "2.0", "id": 8, "method": "elicitation/create", "params": {}}
    data = net.servers[get.socket_id].push(b"data: " + json.dumps(ask).encode() + b"\n\n")
    net.driver.received(get.socket_id, data, now=net.now)
    net.pump()
    net.ok("close_conn", view)
    assert net.delivered == []
    assert answers[0]["id"] == 8 and "error" in answers[0]
    assert [c for c in server.requests if c.method == b"DELETE"]


# ---------------------------------------------------------------- deadlines


def test_next_deadline_is_the_earliest_of_conns_dials_and_the_pool() -> None:
    server = FakeServer()
    server.overrides["tools/list"] = lambda request, body: None
    net = make(server, limits=Limits(list_timeout=100.0, pool_idle_timeout=5.0))
    net.handlers[8001] = server
    a, b = net.open(), net.open("http://127.0.0.1:8001/mcp")
    net.ok("connect", a)
    net.ok("connect", b)
    idle_at = net.driver.next_deadline()
    assert idle_at == pytest.approx(net.now + 5.0)  # two idle sockets
    net.start("list_tools", a)
    net.settle()
    assert net.driver.next_deadline() == idle_at  # the pool's is earlier than the op's
    assert net.tick()  # one idle socket expires
    assert net.driver.pool.socket_count == 1
    assert net.driver.next_deadline() == a.machine.next_deadline()


def test_a_deadline_not_acted_on_fires_again_at_the_next_call_not_in_a_loop() -> None:
    net, view = listing_unanswered()
    net.settle()
    due = net.driver.next_deadline()
    assert due is not None
    calls: list[float] = []
    view.machine.handle_timer = lambda *, now: calls.append(now)  # type: ignore[method-assign]
    net.now = due
    net.driver.handle_timer(now=due)
    assert calls == [due] and net.driver.next_deadline() == due
    net.driver.handle_timer(now=due)
    assert calls == [due, due]


def test_a_full_pool_evicts_another_origins_idle_socket() -> None:
    net = make(limits=Limits(pool_max_sockets=1))
    net.handlers[8001] = FakeServer()
    net.ok("connect", net.open())
    net.ok("connect", net.open("http://127.0.0.1:8001/mcp"))
    first, second = net.sockets(Connect)
    assert net.closes == Counter({first.socket_id: 1}) and second.port == 8001
    assert net.driver.pool.socket_count == 1


def test_next_deadline_does_not_ask_the_machines_with_a_thousand_conns_in_flight() -> None:
    server = FakeServer()
    server.overrides["tools/list"] = lambda request, body: None
    net = make(server)
    first = net.open()
    net.ok("connect", first)  # the era is known: the others connect without a round trip
    views = [net.open() for _ in range(1000)]
    asked: Counter[int] = Counter()
    for view in views:
        net.ok("connect", view)
        net.start("list_tools", view)
        original = view.machine.next_deadline

        def counted(
            original: Callable[[], float | None] = original, key: int = view.conn_id
        ) -> float | None:
            asked[key] += 1
            return original()

        view.machine.next_deadline = counted  # type: ignore[method-assign]
    net.settle()
    pool = net.driver.pool
    assert pool.socket_count == pool.max_sockets_per_origin  # the rest wait in the queue
    assert len(pool.waiting()) == 1000 - pool.max_sockets_per_origin
    deadline = net.driver.next_deadline()
    for _ in range(1000):
        assert net.driver.next_deadline() == deadline
    net.driver.handle_timer(now=net.now)  # nothing due yet
    assert sum(asked.values()) == 0


def test_the_heap_stays_bounded_while_deadlines_move() -> None:
    net = make()
    view = net.open()
    net.ok("connect", view)
    for _ in range(200):
        net.ok("list_tools", view)
    assert len(net.driver._heap) <= 64 + 2 * 2


def test_a_dropped_driver_is_freed_without_the_collector() -> None:
    """The driver holds its :class:`~sansmcp.core.sockets.Sockets`, which call it back
    through a weak reference: no reference cycle, so a dropped ``Client``'s driver (and
    what it holds) goes by reference counting alone, with sockets still open."""
    net = make()
    view = net.open()
    net.ok("connect", view)
    assert net.ok("list_tools", view)
    driver = weakref.ref(net.driver)
    sockets = weakref.ref(net.driver._sockets)
    assert net.driver._sockets.by_id  # an idle socket kept open
    gc.collect()
    gc.disable()
    try:
        del net, view
        assert driver() is None and sockets() is None
    finally:
        gc.enable()


def test_a_fault_in_the_dispatch_reaches_the_reader() -> None:
    """Whatever raises on the way from a socket's bytes: the adapter's reader catches it and
    reports ``reader_failed`` (as :class:`sansmcp.core.wire.h1.H1Connection` would be)."""
    net = make()
    view = net.open()
    net.ok("connect", view)
    (connect,) = net.sockets(Connect)
    sock = net.driver._sockets.by_id[connect.socket_id]

    def broken(data: bytes, *, now: float) -> None:
        raise RuntimeError("injected")

    sock.wire.receive_data = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        net.driver.received(connect.socket_id, b"x", now=net.now)
    net.driver.reader_failed(connect.socket_id, RuntimeError("injected"), now=net.now)
    net.pump()
    assert net.closes[connect.socket_id] == 1


def test_dial_errors_are_the_dial_modules() -> None:
    failure = dialing.timeout_error(Limits(dial_timeout=3.0))
    assert failure.bound == "dial_timeout" and failure.cause == "timeout"
    assert parse_endpoint(URL).origin.port == 8000


# ---------------------------------------------------------------- a state machine, two origins

ORIGINS = ("http://127.0.0.1:8001/mcp", "http://two.test:8002/mcp")


class Interleaved(RuleBasedStateMachine):
    """Random operations, network reactions, failures and time jumps for two origins."""

    def __init__(self) -> None:
        super().__init__()
        self.limits = Limits(
            pool_max_sockets=3,
            pool_max_sockets_per_origin=2,
            connect_timeout=5.0,
            list_timeout=5.0,
            call_timeout=5.0,
            dial_timeout=3.0,
            pool_idle_timeout=4.0,
        )
        self.server_one, self.server_two = FakeServer(), FakeServer(sse=True)
        self.net = make(self.server_one, port=8001, limits=self.limits)
        self.net.handlers[8002] = self.server_two
        self.views: list[ConnView] = []
        self.started: Counter[int] = Counter()
        self.client_closed = False

    def idle(self) -> list[ConnView]:
        return [v for v in self.views if not v.closed and not v.machine.busy]

    @rule(origin=st.sampled_from(ORIGINS))
    def open(self, origin: str) -> None:
        try:
            self.views.append(self.net.open(origin))
        except UsageError:
            assert self.client_closed

    @precondition(lambda self: self.idle())
    @rule(data=st.data(), op=st.sampled_from(["connect", "list_tools", "call_tool", "close_conn"]))
    def operate(self, data: st.DataObject, op: str) -> None:
        view = data.draw(st.sampled_from(self.idle()))
        if op != "close_conn" and view.machine.protocol_version is None:
            op = "connect"
        args = ("echo", b"{}") if op == "call_tool" else ()
        try:
            self.net.start(op, view, *args)
        except UsageError:
            raise AssertionError("an idle open Conn refused an operation") from None
        self.started[view.conn_id] += 1

    @precondition(lambda self: self.net.reactions)
    @rule(data=st.data())
    def react(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.net.reactions) - 1))
        self.net.reactions.rotate(-index)
        self.net.step()

    @rule(address=st.sampled_from(["127.0.0.1"]), outcome=st.sampled_from(["ok", "hang", "fail"]))
    def plan(self, address: str, outcome: str) -> None:
        self.net.plan[address] = ("tcp", OSError("down")) if outcome == "fail" else outcome

    @rule(hang=st.booleans())
    def dns(self, hang: bool) -> None:
        self.net.dns["two.test"] = "hang" if hang else ["127.0.0.1"]

    @rule()
    def tick(self) -> None:
        self.net.tick()

    @precondition(lambda self: [v for v in self.views if v.machine.busy and not v.closed])
    @rule(data=st.data())
    def abandon(self, data: st.DataObject) -> None:
        view = data.draw(
            st.sampled_from([v for v in self.views if v.machine.busy and not v.closed])
        )
        self.net.driver.abandon(view.conn_id, now=self.net.now)
        self.net.pump()
        self.started[view.conn_id] = len(self.net.finished.get(view.conn_id, []))

    @rule()
    def close_client(self) -> None:
        self.client_closed = True
        self.net.driver.close(now=self.net.now)
        self.net.pump()

    @invariant()
    def caps_hold(self) -> None:
        pool = self.net.driver.pool
        assert pool.socket_count <= self.limits.pool_max_sockets
        for origin in ORIGINS:
            assert pool.origin_socket_count(parse_endpoint(origin).origin) <= 2
        opened = {c.socket_id for c in self.net.log if isinstance(c, Connect)}
        opened |= {c.dial_id for c in self.net.log if isinstance(c, Resolve)}
        assert set(self.net.closes) <= opened
        assert all(count == 1 for count in self.net.closes.values())

    @invariant()
    def one_finished_per_operation(self) -> None:
        for view in self.views:
            done = len(self.net.finished.get(view.conn_id, []))
            assert done <= self.started[view.conn_id]
            if not view.machine.busy or view.closed:
                assert done == self.started[view.conn_id] or view.closed
        for done_list in self.net.finished.values():
            for done in done_list:
                assert done.error is None or isinstance(done.error, McpError)

    def teardown(self) -> None:
        """Everything ends: run every reaction and deadline until nothing is left."""
        for _ in range(10_000):
            self.net.settle()
            if not self.net.tick():
                break
        for view in self.views:
            if not view.closed:
                assert not view.machine.busy
                assert len(self.net.finished.get(view.conn_id, [])) == self.started[view.conn_id]


Interleaved.TestCase.settings = settings(
    max_examples=examples(150),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_interleaved_operations = Interleaved.TestCase


def test_the_core_package_presents_the_sans_io_face() -> None:
    import sansmcp.core as core
    from sansmcp.core import driver, mcp

    assert core.ClientDriver is driver.ClientDriver and core.McpMachine is mcp.McpMachine
    assert set(core.__all__) >= {"ClientDriver", "Command", "Connect", "Deliver", "Finished"}
    assert all(getattr(core, name) is not None for name in core.__all__)
