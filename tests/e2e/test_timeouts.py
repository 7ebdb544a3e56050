"""Deadlines on real sockets, with small Limits and an explicit slack.

Each failure is ``ConnectionFailed(cause="timeout")`` naming the bound that
fired, no earlier than the bound and no later than the bound plus ``SLACK``: in CPU time
always, in wall time under ``make hostile`` only (``tests/timing.py``).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from sansmcp import Config, ConnectionFailed, Limits
from sansmcp.core.url import parse_endpoint

from ..timing import Span, Stopwatch, assert_span_within
from .conftest import TLS_NAME, Backend, Relay, Server, Tls, resolver_for

SLACK = 1.0  # scheduling slack on a shared 2-core machine
EARLY = 0.02  # clocks differ slightly between the runtime and time.monotonic()

DIAL_BOUNDS = pytest.mark.parametrize(
    ("limits", "bound"),
    [
        (Limits(dial_timeout=0.3, connect_timeout=5.0), "dial_timeout"),
        (Limits(dial_timeout=5.0, connect_timeout=0.4), "connect_timeout"),
    ],
    ids=["dial_timeout", "connect_timeout"],
)


def assert_timeout(error: ConnectionFailed, bound: str, limit: float, took: Span) -> None:
    assert error.cause == "timeout", error
    assert error.bound == bound, error
    assert error.limit == limit
    assert limit - EARLY <= took.wall, f"{bound}: {took.wall:.3f} s for {limit} s"
    assert_span_within(took, limit + SLACK, f"{bound} of {limit} s")


def test_call_timeout_against_a_sleeping_tool(backend: Backend, plain: Server) -> None:
    limits = Limits(call_timeout=0.5)

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, limits=limits) as client,
            client.connect(Config(url=plain.url())) as conn,
        ):
            watch = Stopwatch()
            with pytest.raises(ConnectionFailed) as failed:
                await conn.call_tool("sleep", b'{"seconds": 5}')
            assert_timeout(failed.value, "call_timeout", 0.5, watch.read())
            # The Conn and the pool carry on after a deadline.
            result = await conn.call_tool("echo", b'{"text": "in time"}')
            assert result.content[0].text == "in time"
            pool = client.pool
            assert pool.socket_count == pool.idle_count(parse_endpoint(plain.url()).origin)

    backend.run(main)


@DIAL_BOUNDS
def test_server_that_accepts_and_never_answers(
    backend: Backend, relay: Callable[..., Relay], limits: Limits, bound: str
) -> None:
    """The TCP connection succeeds; the first request never gets an answer."""
    sentinel = relay(None)
    limit = getattr(limits, bound)

    async def main() -> None:
        async with backend.Client(allow_loopback=True, limits=limits) as client:
            watch = Stopwatch()
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url=sentinel.url())):
                    raise AssertionError("connected to a silent server")
            assert_timeout(failed.value, bound, limit, watch.read())

    backend.run(main)
    assert sentinel.accepts == 1


@DIAL_BOUNDS
def test_tls_handshake_never_answered(
    backend: Backend, tls: Tls, relay: Callable[..., Relay], limits: Limits, bound: str
) -> None:
    """The dial itself hangs (TLS); whichever bound is tighter is the one named."""
    sentinel = relay(None)
    limit = getattr(limits, bound)

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True,
            limits=limits,
            ssl_context=tls.client_context(),
            resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
        ) as client:
            watch = Stopwatch()
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url=sentinel.url(TLS_NAME, "https"))):
                    raise AssertionError("connected to a silent server")
            assert_timeout(failed.value, bound, limit, watch.read())
            assert client.pool.socket_count == 0

    backend.run(main)
    assert sentinel.accepts == 1


def test_call_deadline_while_dialling(
    backend: Backend, tls_h2: Server, tls: Tls, relay: Callable[..., Relay]
) -> None:
    """A call whose socket must be dialled, and the dial hangs: the call's own
    deadline (tighter than dial_timeout) is the bound named."""
    proxy = relay(tls_h2.address)
    limits = Limits(call_timeout=0.5, dial_timeout=5.0, pool_idle_timeout=0.1)
    url = proxy.url(TLS_NAME, "https")

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True,
            limits=limits,
            ssl_context=tls.client_context(),
            resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
        ) as client:
            async with client.connect(Config(url=url)) as conn:  # remembers the era
                await conn.call_tool("echo", b'{"text": "warm"}')
            await backend.wait_until(lambda: client.pool.socket_count == 0)
            proxy.target = None  # from now on: accept, never answer (TLS hangs)
            async with client.connect(Config(url=url)) as conn:  # hinted: no request yet
                watch = Stopwatch()
                with pytest.raises(ConnectionFailed) as failed:
                    await conn.call_tool("echo", b'{"text": "cold"}')
                assert_timeout(failed.value, "call_timeout", 0.5, watch.read())

    backend.run(main)
    assert proxy.accepts == 2


@contextlib.contextmanager
def full_backlog() -> Iterator[int]:
    """A loopback listener whose accept queue is full: a new SYN gets no answer."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(3):
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        time.sleep(0.05)
        probe = stack.enter_context(socket.socket())
        probe.settimeout(0.1)
        with pytest.raises(TimeoutError):
            probe.connect(("127.0.0.1", port))  # the kernel drops SYNs now
        yield port


@DIAL_BOUNDS
def test_tcp_connect_never_completes(backend: Backend, limits: Limits, bound: str) -> None:
    limit = getattr(limits, bound)

    async def main(port: int) -> None:
        async with backend.Client(allow_loopback=True, limits=limits) as client:
            watch = Stopwatch()
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url=f"http://127.0.0.1:{port}/mcp")):
                    raise AssertionError("connected through a full backlog")
            assert_timeout(failed.value, bound, limit, watch.read())
            assert client.pool.socket_count == 0

    with full_backlog() as port:
        backend.run(lambda: main(port))


def test_connection_refused_is_a_dial_failure(backend: Backend) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = int(closed.getsockname()[1])  # bound, never listening: RST at once

        async def main() -> None:
            async with backend.Client(allow_loopback=True) as client:
                with pytest.raises(ConnectionFailed) as failed:
                    async with client.connect(Config(url=f"http://127.0.0.1:{port}/mcp")):
                        raise AssertionError("connected to a closed port")
                assert failed.value.cause == "dial"
                assert client.pool.socket_count == 0

        backend.run(main)
