"""ALPN: set once, on sansmcp's own context only; a caller's ``ssl_context`` is used as
given, on every backend.

Real TLS on loopback (the official SDK's server with a trustme certificate, offering h2
and http/1.1).  A caller's context with no ALPN speaks HTTP/1.1 and is left as it was
(a handshake with it afterwards still offers nothing); one the caller set ``h2`` on
speaks HTTP/2; the Client's own context is built once and offers h2 (the test trusts
the test CA on that very object, which the Client then dials with).
"""

from __future__ import annotations

import socket
import ssl

from sansmcp import Config
from sansmcp.core.net.pool import ALPN_OFFER
from sansmcp.core.wire.h1 import H1Connection
from sansmcp.core.wire.h2 import H2Connection

from .conftest import TLS_NAME, Backend, Server, Tls, resolver_for


def _offered(context: ssl.SSLContext, server: Server) -> str | None:
    """What ``server`` selects by ALPN in a handshake made with ``context`` (blocking)."""
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=TLS_NAME) as tls,
    ):
        return tls.selected_alpn_protocol()


def _wire(backend: Backend, server: Server, **client: object) -> type:
    """The wire class of the one socket a work item over TLS to ``server`` used."""

    async def main() -> type:
        async with (
            backend.Client(
                allow_loopback=True, resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}), **client
            ) as made,
            made.connect(Config(url=server.url(host=TLS_NAME))) as conn,
        ):
            assert [tool.name for tool in await conn.list_tools()]
            return type(made.pool.wire(1))

    return backend.run(main)  # type: ignore[no-any-return]


def test_a_caller_s_context_without_alpn_is_used_as_given(
    backend: Backend, tls_h2: Server, tls: Tls
) -> None:
    context = ssl.create_default_context()
    tls.ca.configure_trust(context)
    assert _wire(backend, tls_h2, ssl_context=context) is H1Connection
    assert _offered(context, tls_h2) is None  # the Client set no ALPN on it


def test_a_caller_s_context_offering_h2_speaks_h2(
    backend: Backend, tls_h2: Server, tls: Tls
) -> None:
    context = ssl.create_default_context()
    tls.ca.configure_trust(context)
    context.set_alpn_protocols(["h2", "http/1.1"])
    assert _wire(backend, tls_h2, ssl_context=context) is H2Connection


def test_the_client_s_own_context_is_built_once_with_h2_offered(
    backend: Backend, tls_h2: Server, tls: Tls
) -> None:
    async def main() -> tuple[bool, type]:
        async with backend.Client(
            allow_loopback=True, resolver=resolver_for({TLS_NAME: ["127.0.0.1"]})
        ) as client:
            own = client.tls_context(ALPN_OFFER)
            tls.ca.configure_trust(own)  # (the test CA on the Client's own object)
            async with client.connect(Config(url=tls_h2.url(host=TLS_NAME))) as conn:
                await conn.list_tools()
            return client.tls_context(ALPN_OFFER) is own, type(client.pool.wire(1))

    assert backend.run(main) == (True, H2Connection)
