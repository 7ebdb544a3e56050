"""The adapters' shared pure parts: routing exchanges to machines, and Conn state."""

from __future__ import annotations

from typing import Any

import pytest

from sansmcp.core.driving import ConnCore, Router, dial_failure
from sansmcp.core.errors import ConnectionFailed, LocalProtocolError, ServerAnswered
from sansmcp.core.http import (
    DataReceived,
    ExchangeEvent,
    ExchangeFailed,
    HttpRequest,
    ResponseEnded,
    ResponseReceived,
)
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import (
    Connected,
    ConnSettings,
    McpMachine,
    OperationFailed,
    StartExchange,
    ToolCalled,
    ToolsListed,
)
from sansmcp.core.net.pool import DialNeeded, MustWait, Pool, UseConnection
from sansmcp.core.tools import CallResult, SkippedTool, Tool
from sansmcp.core.url import parse_endpoint

ENDPOINT = parse_endpoint("http://127.0.0.1:8000/mcp")
REQUEST = HttpRequest(
    method=b"POST", scheme=b"http", authority=b"127.0.0.1:8000", target=b"/mcp", body=b"{}"
)
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class Owner:
    def __init__(self) -> None:
        self.exchanges: set[int] = set()
        self.events: list[ExchangeEvent] = []

    def feed(self, event: ExchangeEvent) -> None:
        self.events.append(event)


def leased(pool: Pool) -> tuple[int, Any]:
    checkout = pool.checkout(ENDPOINT.origin, now=0.0)
    assert isinstance(checkout, DialNeeded)
    return checkout.conn_id, pool.dial_succeeded(checkout.conn_id, alpn=None, now=0.0)


def start(exchange_id: int) -> StartExchange:
    return StartExchange(exchange_id=exchange_id, request=REQUEST, deadline=30.0)


def test_begin_tells_the_pool_the_exchange_started() -> None:
    """An HTTP/2 connection is handed to the next exchange only once the last one began on
    its wire (the pool's ``started``), which Router.begin reports."""
    pool = Pool(limits=Limits(), http2_prior_knowledge=True)
    router = Router(pool)
    first = pool.checkout(ENDPOINT.origin, now=0.0)
    assert isinstance(first, DialNeeded)
    waiting = pool.checkout(ENDPOINT.origin, now=0.0)
    assert isinstance(waiting, MustWait)
    wire = pool.dial_succeeded(first.conn_id, alpn=None, now=0.0)
    assert pool.take_grants() == []  # the dialer's exchange has not begun
    with pytest.raises(LocalProtocolError, match="no started exchange"):
        pool.release(first.conn_id, now=0.0)
    router.begin(Owner(), start(1), first.conn_id, wire, now=0.0)
    assert pool.take_grants() == [(waiting.ticket, UseConnection(conn_id=first.conn_id))]


def test_events_reach_their_owner_and_the_lease_ends_with_the_response() -> None:
    pool = Pool(limits=Limits())
    router = Router(pool)
    owner = Owner()
    conn_id, wire = leased(pool)
    router.begin(owner, start(7), conn_id, wire, now=0.0)
    assert owner.exchanges == {7}
    assert wire.data_to_send().startswith(b"POST /mcp HTTP/1.1\r\n")
    wire.receive_data(RESPONSE, now=0.1)
    assert router.deliver(conn_id, wire, now=0.1) == []
    kinds = [type(e) for e in owner.events]
    assert kinds[0] is ResponseReceived and kinds[-1] is ResponseEnded
    assert DataReceived in kinds and owner.exchanges == set()
    assert pool.idle_count(ENDPOINT.origin) == 1
    assert isinstance(pool.checkout(ENDPOINT.origin, now=0.2), UseConnection)


def test_cancelling_an_http1_exchange_closes_its_socket() -> None:
    pool = Pool(limits=Limits())
    router = Router(pool)
    owner = Owner()
    conn_id, wire = leased(pool)
    router.begin(owner, start(1), conn_id, wire, now=0.0)
    assert router.cancel(1, {conn_id: wire}.get, now=0.5) == (conn_id, [conn_id])
    assert owner.exchanges == set() and owner.events == []
    assert router.cancel(1, {conn_id: wire}.get, now=0.5) == (None, [])  # already gone
    wire.receive_data(RESPONSE, now=0.6)
    assert router.deliver(conn_id, wire, now=0.6) == [] and owner.events == []


def test_cancel_after_the_socket_is_gone_only_ends_the_lease() -> None:
    pool = Pool(limits=Limits())
    router = Router(pool)
    owner = Owner()
    conn_id, wire = leased(pool)
    router.begin(owner, start(1), conn_id, wire, now=0.0)
    flush, doomed = router.cancel(1, lambda conn_id: None, now=0.5)
    assert flush is None and doomed == [conn_id] and owner.exchanges == set()


def test_a_dead_socket_fails_its_exchanges() -> None:
    pool = Pool(limits=Limits())
    router = Router(pool)
    owner, other = Owner(), Owner()
    conn_id, wire = leased(pool)
    router.begin(owner, start(1), conn_id, wire, now=0.0)
    second_id, second = leased(pool)
    router.begin(other, start(2), second_id, second, now=0.0)
    router.socket_gone(conn_id, now=1.0)
    assert len(owner.events) == 1 and isinstance(owner.events[0], ExchangeFailed)
    assert owner.events[0].error.cause == "reset" and owner.exchanges == set()
    assert other.events == [] and other.exchanges == {2}
    assert pool.socket_count == 1


@pytest.mark.parametrize(
    ("failure", "dial_deadline", "exchange_deadline", "reported"),
    [
        (ConnectionFailed("x", cause="dns"), 30.0, 10.0, True),
        (ConnectionFailed("x", cause="timeout", bound="dial_timeout"), 30.0, 30.0, True),
        (ConnectionFailed("x", cause="timeout", bound="dial_timeout"), 20.0, 30.0, True),
        (ConnectionFailed("x", cause="timeout", bound="dial_timeout"), 30.0, 10.0, False),
    ],
)
def test_dial_failure_leaves_a_tighter_deadline_to_the_machine(
    failure: ConnectionFailed, dial_deadline: float, exchange_deadline: float, reported: bool
) -> None:
    checkout = DialNeeded(
        conn_id=1, origin=ENDPOINT.origin, alpn=(), deadline=dial_deadline, close_first=()
    )
    exchange = StartExchange(exchange_id=1, request=REQUEST, deadline=exchange_deadline)
    assert (dial_failure(exchange, checkout, failure) is failure) is reported


def test_conn_core_turns_outputs_into_results_and_learns_the_era() -> None:
    pool = Pool(limits=Limits())
    machine = McpMachine(ConnSettings(endpoint=ENDPOINT))
    core = ConnCore(pool, machine)
    assert core.protocol_version is None and core.tools_ttl_ms == 0
    assert core.tools_cache_scope is None
    error = ServerAnswered("no", reason="jsonrpc_error")
    with pytest.raises(ServerAnswered):
        core._finished(OperationFailed(error=error))
    machine.protocol_version = "2026-07-28"
    assert core._finished(Connected(protocol_version="2026-07-28")) is not None
    assert pool.era_hint(ENDPOINT.url) == "2026-07-28"
    tool = Tool(name="t", description="", input_schema=b"{}")
    skipped = SkippedTool(index=1, name=None, reason="bad")
    listed = ToolsListed(
        tools=(tool,), skipped=(skipped,), skipped_count=3, ttl_ms=0, cache_scope=None
    )
    assert core._tools(listed) == [tool] and core.skipped_tools == [skipped]
    assert core.skipped_count == 3
    result = CallResult(content=[], is_error=False, structured_content=None)
    assert core._result(ToolCalled(result=result)) is result
    core._begin(machine.list_tools, now=0.0)
    with pytest.raises(RuntimeError, match="one operation at a time"):
        core._begin(machine.list_tools, now=0.0)
    core.exchanges.add(5)
    assert core._abandoned() == [5]
    with pytest.raises(RuntimeError, match="closed"):
        core._check_open()


def test_client_core_configures_each_conn_with_the_era_hint() -> None:
    from sansmcp.core.config import Config
    from sansmcp.core.driving import ClientCore

    def core(answers_input: bool) -> ClientCore:
        return ClientCore(
            limits=None,
            allow_loopback=True,
            allow_private=False,
            http2_prior_knowledge=False,
            answers_input=answers_input,
            capabilities={"elicitation": {}},
            client_info=None,
        )

    client = core(answers_input=False)
    assert client.capabilities is None  # nothing declared without a handler
    assert core(answers_input=True).capabilities == {"elicitation": {}}
    config = Config(url=ENDPOINT.url)
    assert client._machine(config).settings.era_hint is None
    client.pool.remember_era(ENDPOINT.url, "2026-07-28")
    machine = client._machine(config)
    assert machine.settings.era_hint == "2026-07-28"
    assert machine.settings.endpoint == ENDPOINT
    client._closed = True
    with pytest.raises(RuntimeError, match="closed"):
        client._machine(config)


def test_a_queued_checkout_wakes_for_the_conns_own_deadlines() -> None:
    """While a checkout waits in the pool's queue, its Conn's machine deadline (a drained
    stream's cancel_grace) wakes it first; none, a later one, or one already acted on
    (no later than ``kept``) leaves the checkout's own deadline."""
    machine = McpMachine(ConnSettings(endpoint=ENDPOINT))
    core = ConnCore(Pool(limits=Limits()), machine)
    assert machine.next_deadline() is None
    assert core._queued_wake(10.0, kept=-1.0) == 10.0
    core._begin(machine.connect, now=0.0)  # the operation's deadlines are the machine's
    soon = machine.next_deadline()
    assert soon is not None
    assert core._queued_wake(soon + 1, kept=-1.0) == soon
    assert core._queued_wake(soon, kept=-1.0) == soon  # not before the checkout's own
    assert core._queued_wake(soon - 1, kept=-1.0) == soon - 1
    assert core._queued_wake(soon + 1, kept=soon) == soon + 1  # acted on, did not move
