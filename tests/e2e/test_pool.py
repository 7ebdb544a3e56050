"""The shared pool on real sockets: reuse, HTTP/2 multiplexing, idle expiry, fairness.

A counting relay stands between client and server, so "one TCP connection" is
what the server side accepted, not what the client believes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from sansmcp import Config, ConnectionFailed, Limits
from sansmcp.core.url import parse_endpoint

from ..timing import Stopwatch, assert_span_within, assert_within
from .conftest import MODES, TLS_NAME, Backend, Launcher, Relay, Server, Tls, resolver_for

IDLE = 0.3
SLACK = 1.0  # past a deadline: CPU time always, wall time in `make hostile` (tests/timing.py)


async def work_item(client: object, url: str, text: str) -> str:
    """One work item: connect, call echo, close."""
    async with client.connect(Config(url=url)) as conn:  # type: ignore[attr-defined]
        result = await conn.call_tool("echo", f'{{"text": "{text}"}}'.encode())
        assert result.content[0].text is not None
        return result.content[0].text


@pytest.mark.parametrize("versions", [None, ["2025-11-25"]])
def test_sequential_work_items_share_one_connection(
    backend: Backend, plain: Server, relay: Callable[..., Relay], versions: list[str] | None
) -> None:
    proxy = relay(plain.address)

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            for index in range(3):
                async with client.connect(Config(url=proxy.url(), protocol_versions=versions)) as c:
                    tools = await c.list_tools()
                    assert "echo" in {tool.name for tool in tools}
                    result = await c.call_tool("echo", f'{{"text": "{index}"}}'.encode())
                    assert result.content[0].text == str(index)
                origin = parse_endpoint(proxy.url()).origin
                assert client.pool.socket_count == client.pool.idle_count(origin) == 1

    backend.run(main)
    assert proxy.accepts == 1
    proxy.wait_for_closes(1)  # closed when the Client closed


@pytest.mark.parametrize("transport", ["h2c", "tls"])
def test_fifty_concurrent_work_items_share_one_http2_connection(
    backend: Backend,
    h2c: Server,
    tls_h2: Server,
    tls: Tls,
    relay: Callable[..., Relay],
    transport: str,
) -> None:
    server = h2c if transport == "h2c" else tls_h2
    proxy = relay(server.address)
    url = proxy.url() if transport == "h2c" else proxy.url(host=TLS_NAME, scheme="https")

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True,
            http2_prior_knowledge=transport == "h2c",
            ssl_context=tls.client_context(),
            resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
        ) as client:
            texts = [f"item {index}" for index in range(50)]
            results = await backend.gather(
                [lambda text=text: work_item(client, url, text) for text in texts]  # type: ignore[misc]
            )
            assert results == texts
            assert client.pool.socket_count == 1

    backend.run(main)
    assert proxy.accepts == 1


def test_idle_connection_closed_after_the_idle_bound(
    backend: Backend, plain: Server, relay: Callable[..., Relay]
) -> None:
    proxy = relay(plain.address)

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True, limits=Limits(pool_idle_timeout=IDLE)
        ) as client:
            assert await work_item(client, proxy.url(), "a") == "a"
            idle_since, watch = time.monotonic(), Stopwatch()
            assert client.pool.socket_count == 1
            closed_at = await backend.wait_until(lambda: bool(proxy.client_closes))
            assert closed_at - idle_since >= IDLE - 0.05
            assert_within(closed_at - idle_since, watch.read().cpu, IDLE + SLACK, "idle close")
            assert client.pool.socket_count == 0
            # The pool dials afresh afterwards.
            assert await work_item(client, proxy.url(), "b") == "b"
            assert proxy.accepts == 2

    backend.run(main)


def test_socket_bound_queues_work_items(
    backend: Backend, plain: Server, relay: Callable[..., Relay]
) -> None:
    """Ten concurrent work items over HTTP/1.1 with at most three sockets in the pool,
    so two for their one origin (one is always left to another origin): the rest wait
    for a socket and all succeed; two idle sockets are kept afterwards."""
    proxy = relay(plain.address)
    limits = Limits(pool_max_sockets=3, pool_max_idle_per_origin=2)

    sockets: list[int] = []

    async def item(client: object, index: int) -> str:
        async with client.connect(Config(url=proxy.url())) as conn:  # type: ignore[attr-defined]
            slept = await conn.call_tool("sleep", b'{"seconds": 0.1}')
            assert slept.content[0].text == "slept 0.1"
            sockets.append(client.pool.socket_count)  # type: ignore[attr-defined]
            return await work_item(client, proxy.url(), str(index))

    async def main() -> None:
        async with backend.Client(allow_loopback=True, limits=limits) as client:
            results = await backend.gather(
                [lambda index=index: item(client, index) for index in range(10)]  # type: ignore[misc]
            )
            assert results == [str(index) for index in range(10)]
            origin = parse_endpoint(proxy.url()).origin
            assert client.pool.socket_count == client.pool.idle_count(origin) == 2

    backend.run(main)
    assert max(sockets) == 2
    assert proxy.accepts >= 2
    proxy.wait_for_closes(proxy.accepts)  # every socket the client opened, it closed


@pytest.mark.parametrize("versions", [None, ["2025-11-25"]])
def test_server_closing_idle_connections(
    backend: Backend, launch: Launcher, relay: Callable[..., Relay], versions: list[str] | None
) -> None:
    """The server (here: the relay) closes its idle keep-alive connections between two
    calls: the pool notices the EOF, forgets the socket and the next call dials anew."""
    proxy = relay(launch(*MODES["stateful-sse"]).address)

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(Config(url=proxy.url(), protocol_versions=versions)) as conn,
        ):
            first = await conn.call_tool("echo", b'{"text": "1"}')
            assert first.content[0].text == "1"
            accepted = proxy.accepts
            proxy.hang_up()
            await backend.wait_until(lambda: client.pool.socket_count == 0)
            second = await conn.call_tool("echo", b'{"text": "2"}')
            assert second.content[0].text == "2"
            assert proxy.accepts == accepted + 1

    backend.run(main)


# -- fairness: a stalled origin cannot starve another -------------------------------

STALL = 10.0  # how long the stalled origin's requests are left waiting


async def in_background(
    backend: Backend, fns: list[Callable[[], Awaitable[Any]]], body: Callable[[], Awaitable[Any]]
) -> Any:
    """Run ``body`` while ``fns`` run in the background; cancel them after it."""
    if backend.name != "trio":  # asyncio, and the sync adapter's shim
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(fn()) for fn in fns]  # type: ignore[arg-type]
        try:
            return await body()
        finally:
            for task in tasks:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes
    async with trio.open_nursery() as nursery:
        for fn in fns:
            nursery.start_soon(fn)
        result = await body()
        nursery.cancel_scope.cancel()
    return result


@pytest.mark.parametrize("per_origin", [None, 2], ids=["default-cap", "capped"])
def test_a_stalled_origin_cannot_starve_another(
    backend: Backend, plain: Server, relay: Callable[..., Relay], per_origin: int | None
) -> None:
    """Origin A accepts and never answers; four work items for it wait on it.  With
    four sockets in the pool -- and the per-origin cap at its default (64, clamped to
    three: issue 26, where A took all four) or at two -- a work item for healthy origin
    B completes while every one of A's four is still pending: asserted by order (B's
    result arrives first, A's sockets and queued checkout unchanged), not by time."""
    stalled = relay(None)
    healthy = relay(plain.address)
    limits = Limits(
        pool_max_sockets=4,
        connect_timeout=STALL,
        dial_timeout=STALL,
        **({} if per_origin is None else {"pool_max_sockets_per_origin": per_origin}),
    )
    stalled_origin = parse_endpoint(stalled.url()).origin
    held = 3 if per_origin is None else per_origin
    ended: list[str] = []  # A's work items that ended (any way), in order

    async def stalled_item(client: Any) -> None:
        try:
            async with client.connect(Config(url=stalled.url())):
                raise AssertionError("the stalled server answered")
        finally:
            ended.append("a")

    async def main() -> None:
        async with backend.Client(allow_loopback=True, limits=limits) as client:
            assert client.pool.max_sockets_per_origin == held

            async def body() -> None:
                await backend.wait_until(
                    lambda: stalled.accepts == held and len(client.pool.waiting()) == 4 - held,
                    timeout=5,
                )
                assert await work_item(client, healthy.url(), "b") == "b"
                ended.append("b")
                assert ended == ["b"], ended  # B's result came while all four of A's wait
                assert stalled.accepts == held
                assert client.pool.origin_socket_count(stalled_origin) == held
                assert [o for _, o in client.pool.waiting()] == [stalled_origin] * (4 - held)
                assert healthy.accepts == 1

            await in_background(backend, [lambda: stalled_item(client)] * 4, body)

    backend.run(main)
    assert ended[0] == "b" and ended.count("a") == 4  # A's ended only when cancelled


def test_a_checkout_queued_past_its_deadline_fails_by_its_own_bound(
    backend: Backend, plain: Server, relay: Callable[..., Relay]
) -> None:
    """One socket, held by a slow call: a listing on a second work item waits in the
    pool's queue and fails by its own ``list_timeout``, without ever dialling; it leaves
    the queue."""
    proxy = relay(plain.address)
    limits = Limits(pool_max_sockets=1, list_timeout=1.0)
    origin = parse_endpoint(proxy.url()).origin

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, limits=limits) as client,
            client.connect(Config(url=proxy.url())) as holder,
            client.connect(Config(url=proxy.url())) as queued,
        ):

            async def body() -> None:
                await backend.wait_until(lambda: client.pool.idle_count(origin) == 0)
                watch = Stopwatch()
                with pytest.raises(ConnectionFailed) as failed:
                    await queued.list_tools()
                took = watch.read()
                assert failed.value.cause == "timeout"
                assert failed.value.bound == "list_timeout"
                assert failed.value.limit == 1.0
                assert took.wall >= 1.0 - 0.02
                assert_span_within(took, 1.0 + SLACK, "the queued listing")
                assert client.pool.waiting() == []
                assert proxy.accepts == 1

            async def slow_call() -> None:
                await holder.call_tool("sleep", b'{"seconds": 5}')

            await in_background(backend, [slow_call], body)

    backend.run(main)
