"""Cancellation by the caller (a trio cancel scope, an asyncio ``Task.cancel()``).

The cancellation must reach the canceller as itself (never an ``McpError``),
promptly, and leave the pool consistent: every remaining socket idle (no lease
held by the abandoned exchange), and the next work item on the same Client works.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sansmcp import Config
from sansmcp.core.url import parse_endpoint

from ..timing import Stopwatch, assert_span_within
from .conftest import MODES, TLS_NAME, Backend, Launcher, Relay, Server, Tls, resolver_for

DELAY = 0.3  # when the cancellation comes
SLACK = 1.0  # how late it may take effect: CPU time always, wall time in `make hostile`


async def echo_item(client: object, url: str, **config: object) -> None:
    async with client.connect(Config(url=url, **config)) as conn:  # type: ignore[attr-defined]
        result = await conn.call_tool("echo", b'{"text": "after"}')
        assert result.content[0].text == "after"


def assert_consistent(client: object, url: str) -> None:
    pool = client.pool  # type: ignore[attr-defined]
    assert pool.socket_count == pool.idle_count(parse_endpoint(url).origin)


@pytest.mark.parametrize("transport", ["h1", "h2c"])
def test_cancel_a_call_mid_flight(
    backend: Backend, plain: Server, h2c: Server, relay: Callable[..., Relay], transport: str
) -> None:
    proxy = relay((plain if transport == "h1" else h2c).address)
    url = proxy.url()

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True, http2_prior_knowledge=transport == "h2c"
        ) as client:
            async with client.connect(Config(url=url)) as conn:

                async def sleepy() -> None:
                    await conn.call_tool("sleep", b'{"seconds": 5}')

                watch = Stopwatch()
                seen = await backend.cancel_after(DELAY, sleepy)
                assert type(seen) is backend.cancelled
                assert_span_within(watch.read(), DELAY + SLACK, "the cancellation")
                assert_consistent(client, url)
                # The abandoned operation cannot resume: the Conn is closed, and says so.
                with pytest.raises(RuntimeError, match="closed"):
                    await conn.call_tool("echo", b'{"text": "same conn"}')
            await echo_item(client, url)
            assert_consistent(client, url)
            assert client.pool.socket_count == 1

    backend.run(main)
    if transport == "h1":
        # HTTP/1.1 cannot abandon a response: the socket was closed and a new one dialled.
        proxy.wait_for_closes(2)  # the cancelled socket, then the last one at Client close
        assert proxy.accepts == 2
    else:
        # HTTP/2 resets the stream; the connection lives on.
        proxy.wait_for_closes(1)
        assert proxy.accepts == 1


def test_cancel_a_whole_work_item_on_a_legacy_session(
    backend: Backend, launch: Launcher, relay: Callable[..., Relay]
) -> None:
    """Cancelled inside ``async with client.connect(...)``: closing the Conn on the way
    out must neither swallow the cancellation nor hang."""
    proxy = relay(launch(*MODES["stateful-json"]).address)
    url = proxy.url()

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:

            async def item() -> None:
                async with client.connect(Config(url=url, protocol_versions=["2025-11-25"])) as c:
                    await c.call_tool("sleep", b'{"seconds": 5}')

            watch = Stopwatch()
            seen = await backend.cancel_after(DELAY, item)
            assert type(seen) is backend.cancelled
            assert_span_within(watch.read(), DELAY + SLACK, "the cancellation")
            assert_consistent(client, url)
            await echo_item(client, url, protocol_versions=["2025-11-25"])
            assert_consistent(client, url)

    backend.run(main)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_cancel_during_the_dial(
    backend: Backend, plain: Server, tls: Tls, relay: Callable[..., Relay], scheme: str
) -> None:
    """A server that accepts and never answers (never finishes TLS): cancel the connect."""
    sentinel = relay(None)
    url = sentinel.url(host=TLS_NAME if scheme == "https" else None, scheme=scheme)

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True,
            ssl_context=tls.client_context(),
            resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
        ) as client:

            async def item() -> None:
                async with client.connect(Config(url=url)):
                    raise AssertionError("connected to a silent server")

            seen = await backend.cancel_after(DELAY, item)
            assert type(seen) is backend.cancelled
            assert client.pool.socket_count == 0
            await echo_item(client, plain.url())

    backend.run(main)
    assert sentinel.accepts == 1
