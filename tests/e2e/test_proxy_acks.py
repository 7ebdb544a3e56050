"""A response relayed by tinyproxy is not held for the client's delayed ACK.

tinyproxy relays a response's head and body as two writes without ``TCP_NODELAY``, so
the body waits until the client acknowledges the head -- and Linux delays that ACK by
up to 40 ms: 40 ms added to every proxied response.  The adapters acknowledge each read
of a tunnelled socket at once (``TCP_QUICKACK``, ``io_adapters._common.ack_at_once``).

Here: one Conn through a real tinyproxy, straight to the e2e server, lists its tools
``ROUNDS`` times on its pooled tunnel.  Held, that is at least ``ROUNDS`` x 40 ms; not
held, a few ms a round.  The wall bound is asserted by `make hostile` only (a loaded
machine stretches every span, tests/timing.py); `make test` runs the same path on the
three runtimes and bounds its CPU time.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sansmcp import Config
from tests.timing import assert_span_within, span

from .conftest import Backend, Server
from .test_proxy import start_tinyproxy

ROUNDS = 20
DELAYED_ACK = 0.040  # s: Linux's delayed-ACK timer, what each held response would wait

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's: nothing to test here"
)


def test_responses_through_tinyproxy_are_not_held_for_a_delayed_ack(
    backend: Backend, plain: Server, tmp_path: Path
) -> None:
    proxy = start_tinyproxy(tmp_path, [plain.port])

    async def main() -> int:
        async with backend.Client(allow_loopback=True, proxy=proxy.url) as client:
            async with client.connect(Config(url=plain.url())) as conn:
                await conn.list_tools()  # the tunnel up, the session made
                with span() as measured:
                    for _ in range(ROUNDS):
                        assert await conn.list_tools(fresh=True)
                assert_span_within(measured, ROUNDS * DELAYED_ACK / 2, f"{ROUNDS} listings")
            return proxy.connects(plain.port)

    try:
        assert backend.run(main) >= 1  # through the proxy
    finally:
        proxy.stop()
