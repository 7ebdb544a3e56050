"""The shared pool on real sockets: reuse, HTTP/2 multiplexing, idle expiry.

A counting relay stands between client and server, so "one TCP connection" is
what the server side accepted, not what the client believes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from sansmcp import Config, Limits
from sansmcp.core.url import parse_endpoint

from .conftest import TLS_NAME, Backend, Relay, Server, Tls, resolver_for

IDLE = 0.3
SLACK = 1.0  # scheduling slack on a shared 2-core machine


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
            idle_since = time.monotonic()
            assert client.pool.socket_count == 1
            closed_at = await backend.wait_until(lambda: bool(proxy.client_closes), timeout=5)
            assert IDLE - 0.05 <= closed_at - idle_since <= IDLE + SLACK
            assert client.pool.socket_count == 0
            # The pool dials afresh afterwards.
            assert await work_item(client, proxy.url(), "b") == "b"
            assert proxy.accepts == 2

    backend.run(main)
