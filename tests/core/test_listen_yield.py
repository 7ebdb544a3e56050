"""A legacy session's standalone stream yields its socket to a waiting operation (issue 14).

The driver against ``test_driver``'s scripted network: with a per-origin cap the
stream would otherwise hold the only socket(s) for the session's life and every
operation would wait until ``dial_timeout``.
"""

from __future__ import annotations

from typing import Any

from sansmcp.core.driver import Write
from sansmcp.core.limits import Limits

from .fakemcp import FakeServer, Response, sse_response
from .test_driver import make

LEGACY = "2025-11-25"


def listening_server(**kw: Any) -> FakeServer:
    server = FakeServer(modern=False, legacy=LEGACY, **kw)
    server.overrides["GET"] = lambda request, body: sse_response(end=False)
    return server


def gets(net: Any) -> int:
    return sum(1 for c in net.log if isinstance(c, Write) and c.data.startswith(b"GET"))


def test_the_stream_yields_the_only_socket_and_is_not_reopened_without_room() -> None:
    server = listening_server()
    limits = Limits(pool_max_sockets=1, pool_max_sockets_per_origin=1, dial_timeout=1.5)
    net = make(server, limits=limits, observe=False, auto_answer=False)
    view = net.open(on_notification=print)
    net.ok("connect", view)
    assert gets(net) == 1
    assert net.ok("list_tools", view)  # not a dial_timeout: the stream gave its socket up
    net.ok("call_tool", view, "echo", b"{}")
    assert gets(net) == 1  # no socket to spare: not re-opened
    assert view.machine.state.listening is False
    assert net.driver.pool.socket_count <= 1
    net.ok("close_conn", view)


def test_with_room_the_stream_is_reopened_after_the_operation() -> None:
    server = listening_server()
    limits = Limits(pool_max_sockets_per_origin=2)
    net = make(server, limits=limits, auto_answer=False)
    view = net.open(on_notification=print)
    net.ok("connect", view)
    other = net.open(on_notification=print)
    net.ok("connect", other)  # two streams hold both sockets
    assert gets(net) == 2
    net.ok("list_tools", view)  # its own stream yields
    assert gets(net) == 2 and not view.machine.state.listening  # no socket to spare
    net.ok("close_conn", other)  # the other session ends: its socket goes
    net.ok("list_tools", view)
    assert gets(net) == 3  # re-opened after the listing: a socket is to spare now
    assert view.machine.state.listening


def test_more_sessions_than_the_cap_all_finish() -> None:
    server = listening_server()
    limits = Limits(pool_max_sockets_per_origin=2, dial_timeout=1.5)
    net = make(server, limits=limits, auto_answer=False)
    views = [net.open(on_notification=print) for _ in range(4)]
    for view in views:
        net.ok("connect", view)
    for view in views:
        assert net.ok("list_tools", view)
    assert net.driver.pool.origin_socket_count(views[0].machine.settings.endpoint.origin) <= 2


def test_a_stream_not_answered_yet_yields_at_its_head() -> None:
    server = listening_server()
    heads: list[Any] = []

    def slow_get(request: Any, body: Any) -> Response | None:
        heads.append(request)
        return None  # no answer yet: the test answers it by hand

    server.overrides["GET"] = slow_get
    limits = Limits(pool_max_sockets=1, pool_max_sockets_per_origin=1)
    net = make(server, limits=limits, auto_answer=False)
    view = net.open(on_notification=print)
    net.ok("connect", view)
    net.start("list_tools", view)
    net.settle()
    assert view.conn_id not in net.finished or len(net.finished[view.conn_id]) == 1
    assert view.machine.state.listening  # asked to yield, it waits for its head
    get = next(c for c in net.log if isinstance(c, Write) and c.data.startswith(b"GET"))
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
    net.driver.received(get.socket_id, head, now=net.now)
    net.pump()
    done = net.wait(view, before=1)
    assert done.error is None and not view.machine.state.listening


def test_an_ended_stream_is_skipped_and_a_closed_session_forgotten() -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    opened: list[int] = []

    def get(request: Any, body: Any) -> Response:
        opened.append(1)
        return sse_response(end=len(opened) == 1)  # the first stream ends at once

    server.overrides["GET"] = get
    limits = Limits(pool_max_sockets=1, pool_max_sockets_per_origin=1, max_stream_retries=0)
    net = make(server, limits=limits, auto_answer=False)
    first = net.open(on_notification=print)
    net.ok("connect", first)  # its stream ended: nothing holds the socket
    second = net.open(on_notification=print)
    net.ok("connect", second)  # its stream holds the only socket
    assert not first.machine.state.listening and second.machine.state.listening
    assert net.ok("list_tools", first)  # the ended stream is skipped, the live one yields
    assert not second.machine.state.listening
    second.machine.yield_listen(10**9, now=net.now)  # not its stream: nothing happens


def test_a_closed_session_is_forgotten_by_the_others_origin() -> None:
    net = make(listening_server(), auto_answer=False)
    first, second = net.open(on_notification=print), net.open(on_notification=print)
    net.ok("connect", first)
    net.ok("connect", second)
    net.ok("close_conn", first)
    assert list(net.driver._sockets.listeners.values()) == [
        {net.driver._conns[second.conn_id]: None}
    ]
    net.ok("close_conn", second)
    assert net.driver._sockets.listeners == {}
