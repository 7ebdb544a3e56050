"""HTTP/2: the official app under hypercorn, h2c by prior knowledge and TLS with ALPN.

The server's ``whoami`` tool reports the HTTP version it saw; the client's pool
reports the wire machine it chose; both must agree.
"""

from __future__ import annotations

import pytest

from sansmcp import Config, ConnectionFailed
from sansmcp.core.wire.h1 import H1Connection
from sansmcp.core.wire.h2 import H2Connection

from .conftest import TLS_NAME, Backend, Launcher, Server, Tls, resolver_for

VERSIONS = {"default": (None, "2026-07-28"), "legacy": (["2025-11-25"], "2025-11-25")}


async def exercise(client: object, url: str, versions: list[str] | None, expected: str) -> str:
    """Connect, list, echo; return what the server saw (``"<http> <revision>"``)."""
    async with client.connect(Config(url=url, protocol_versions=versions)) as conn:  # type: ignore[attr-defined]
        assert conn.protocol_version == expected
        tools = await conn.list_tools()
        assert {"echo", "whoami"} <= {tool.name for tool in tools}
        result = await conn.call_tool("echo", b'{"text": "over h2"}')
        assert [c.text for c in result.content] == ["over h2"]
        failed = await conn.call_tool("fail", b"{}")
        assert failed.is_error
        seen = await conn.call_tool("whoami", b"{}")
        assert len(seen.content) == 1 and seen.content[0].text is not None
        return seen.content[0].text


@pytest.mark.parametrize("versions", list(VERSIONS))
def test_h2c_prior_knowledge(backend: Backend, h2c: Server, versions: str) -> None:
    wanted, expected = VERSIONS[versions]

    async def main() -> None:
        async with backend.Client(allow_loopback=True, http2_prior_knowledge=True) as client:
            assert await exercise(client, h2c.url(), wanted, expected) == f"2 {expected}"
            assert isinstance(client.pool.wire(1), H2Connection)
            assert client.pool.socket_count == 1

    backend.run(main)


def test_h2c_server_without_prior_knowledge_is_http11(backend: Backend, h2c: Server) -> None:
    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            assert await exercise(client, h2c.url(), None, "2026-07-28") == "1.1 2026-07-28"
            assert isinstance(client.pool.wire(1), H1Connection)

    backend.run(main)


@pytest.mark.parametrize("versions", list(VERSIONS))
def test_tls_alpn_picks_h2(backend: Backend, tls_h2: Server, tls: Tls, versions: str) -> None:
    """TLS to a name (mapped to loopback by the resolver hook), certificate verified
    against it, ALPN offering h2 and http/1.1: the server picks h2."""
    wanted, expected = VERSIONS[versions]

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True,
            ssl_context=tls.client_context(),
            resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
        ) as client:
            url = tls_h2.url(host=TLS_NAME)
            assert await exercise(client, url, wanted, expected) == f"2 {expected}"
            assert isinstance(client.pool.wire(1), H2Connection)
            assert client.pool.socket_count == 1

    backend.run(main)


def test_tls_server_offering_only_http11(backend: Backend, tls_h1: Server, tls: Tls) -> None:
    async def main() -> None:
        async with backend.Client(
            allow_loopback=True,
            ssl_context=tls.client_context(),
            resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
        ) as client:
            url = tls_h1.url(host=TLS_NAME)
            assert await exercise(client, url, None, "2026-07-28") == "1.1 2026-07-28"
            assert isinstance(client.pool.wire(1), H1Connection)

    backend.run(main)


@pytest.mark.parametrize("case", ["untrusted", "wrong_name"])
def test_tls_verification_failures(backend: Backend, tls_h2: Server, tls: Tls, case: str) -> None:
    """An unknown CA, or a certificate for another name: ConnectionFailed(cause="tls")."""

    async def main() -> None:
        context = None if case == "untrusted" else tls.client_context()
        host = TLS_NAME if case == "untrusted" else "other.test"
        async with backend.Client(
            allow_loopback=True,
            ssl_context=context,
            resolver=resolver_for({host: ["127.0.0.1"]}),
        ) as client:
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url=tls_h2.url(host=host))):
                    raise AssertionError("connected despite a bad certificate")
            assert failed.value.cause == "tls"
            assert client.pool.socket_count == 0

    backend.run(main)


@pytest.mark.parametrize("transport", ["h1", "h2c", "tls"])
def test_large_listing_crosses_flow_control_windows(
    backend: Backend, launch: Launcher, tls: Tls, transport: str
) -> None:
    """~240 KB of tools in one SSE event: many reads, and over HTTP/2 several times the
    initial 64 KiB flow-control window, so the client's WINDOW_UPDATEs must go out."""
    tls_args = ("--tls", str(tls.cert), str(tls.key)) if transport == "tls" else ("--h2c",)
    server = launch("--stateless", "--tools", "500", *tls_args)
    url = server.url(host=TLS_NAME) if transport == "tls" else server.url()

    async def main() -> None:
        async with (
            backend.Client(
                allow_loopback=True,
                http2_prior_knowledge=transport == "h2c",
                ssl_context=tls.client_context(),
                resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
            ) as client,
            client.connect(Config(url=url)) as conn,
        ):
            tools = await conn.list_tools()
            assert len(tools) == 500 + 8
            assert {f"forecast_{index}" for index in range(500)} <= {t.name for t in tools}
            assert conn.skipped_tools == []
            wire = H1Connection if transport == "h1" else H2Connection
            assert isinstance(client.pool.wire(1), wire)
            assert 3 * 65_536 < conn.machine.bytes_received < 1_000_000

    backend.run(main)
