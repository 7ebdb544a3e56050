"""The contenders: one work item each, written as a user of that client would write it.

A work item: connect, list tools (following pagination), call ``echo``, close.  Each
contender is set up once per process (``open``), runs many work items (``item``,
which returns the number of tools listed and the echoed text, so the harness can
check the work was done) and is torn down (``close``).

* ``sansmcp-asyncio`` / ``sansmcp-trio``: one ``Client`` (its pool, its era cache)
  for the process; a fresh ``Conn`` per work item.  Legacy: ``protocol_versions``
  restricted to 2025-11-25.  HTTP/2: ``http2_prior_knowledge``.
* ``sansmcp-sync``: the same on the blocking adapter (``item_sync``); its concurrent
  phase is 50 threads sharing the ``Client``.
* ``sdk-default``: ``mcp.Client(url)`` per work item, as the README shows it: its
  own ``httpx2`` client (so its own TCP connections) each time, ``mode="auto"``
  (probes ``server/discover``) or ``"legacy"``.  It speaks HTTP/1.1 whatever the
  server offers.
* ``sdk-tuned``: one shared ``httpx2.AsyncClient`` (pooled; ``http2=True`` with
  prior knowledge on the HTTP/2 server) passed to ``streamable_http_client``, and
  ``mode`` pinned to the era (no probe: the SDK's equivalent of a warm era cache).
* ``fastmcp``: ``fastmcp.Client(url)`` per work item, its defaults.
* ``floor-sync`` / ``floor-asyncio`` / ``floor-trio``: :mod:`bench.floor`.
* ``llhttp-sync`` / ``llhttp-asyncio`` / ``llhttp-trio``: the same floors reading
  HTTP/1.1 with llhttp (``httptools``) instead of h11 (HTTP/1.1 servers only).

Over TLS (``ca``: the bench CA's PEM file) every contender trusts that CA: sansmcp
through ``Client(ssl_context=)``, the SDK through ``httpx2.AsyncClient(verify=)``, the
floors through :func:`bench.floor.tls_context`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

CONTENDERS = (
    "sansmcp-asyncio",
    "sansmcp-trio",
    "sansmcp-sync",
    "sdk-default",
    "sdk-tuned",
    "fastmcp",
    "floor-sync",
    "floor-asyncio",
    "floor-trio",
)
LLHTTP = ("llhttp-sync", "llhttp-asyncio", "llhttp-trio")
RUNTIME = {
    "sansmcp-asyncio": "asyncio",
    "sansmcp-trio": "trio",
    "sansmcp-sync": "sync",
    "sdk-default": "asyncio",
    "sdk-tuned": "asyncio",
    "fastmcp": "asyncio",
    "floor-sync": "sync",
    "floor-asyncio": "asyncio",
    "floor-trio": "trio",
    "llhttp-sync": "sync",
    "llhttp-asyncio": "asyncio",
    "llhttp-trio": "trio",
}
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ECHO_BYTES = b'{"text": "hi"}'
ECHO_DICT = json.loads(ECHO_BYTES)


class Contender:
    """``open`` / ``item`` / ``close``; ``item`` is a coroutine except on the sync runtime
    (``item_sync``: the blocking adapter and the sync floor)."""

    def __init__(self, url: str, era: str, http: str, ca: str | None = None) -> None:
        self.url = url
        self.era = era
        self.http = http
        self.ca = ca

    def ssl_context(self) -> Any:
        """A client context trusting the bench CA, offering h2 and http/1.1 by ALPN (a
        caller's context is used as given: sansmcp sets no ALPN on it); None: not TLS."""
        if self.ca is None:
            return None
        import ssl

        context = ssl.create_default_context(cafile=self.ca)
        context.set_alpn_protocols(["h2", "http/1.1"])
        return context

    async def open(self) -> None:
        pass

    async def item(self) -> tuple[int, str]:
        raise NotImplementedError

    async def close(self) -> None:
        pass


class SansmcpAsyncio(Contender):
    async def open(self) -> None:
        from sansmcp import Config
        from sansmcp.io_adapters.asyncio import Client

        self.client = Client(
            allow_loopback=True,
            http2_prior_knowledge=self.http == "h2" and self.ca is None,
            ssl_context=self.ssl_context(),
        )
        versions = (LEGACY,) if self.era == "legacy" else None
        self.config = Config(url=self.url, protocol_versions=versions)

    async def item(self) -> tuple[int, str]:
        async with self.client.connect(self.config) as conn:
            tools = await conn.list_tools()
            result = await conn.call_tool("echo", ECHO_BYTES)
        return len(tools), result.content[0].text or ""

    async def close(self) -> None:
        await self.client.aclose()


class SansmcpTrio(SansmcpAsyncio):
    async def open(self) -> None:
        from sansmcp import Config
        from sansmcp.io_adapters.trio import Client

        self.client = Client(
            allow_loopback=True,
            http2_prior_knowledge=self.http == "h2" and self.ca is None,
            ssl_context=self.ssl_context(),
        )  # type: ignore[assignment]
        versions = (LEGACY,) if self.era == "legacy" else None
        self.config = Config(url=self.url, protocol_versions=versions)


class SansmcpSync(Contender):
    async def open(self) -> None:
        from sansmcp import Config
        from sansmcp.io_adapters.sync import Client

        self.client = Client(
            allow_loopback=True,
            http2_prior_knowledge=self.http == "h2" and self.ca is None,
            ssl_context=self.ssl_context(),
        )
        versions = (LEGACY,) if self.era == "legacy" else None
        self.config = Config(url=self.url, protocol_versions=versions)

    def item_sync(self) -> tuple[int, str]:
        with self.client.connect(self.config) as conn:
            tools = conn.list_tools()
            result = conn.call_tool("echo", ECHO_BYTES)
        return len(tools), result.content[0].text or ""

    async def close(self) -> None:
        self.client.close()


async def _sdk_work(client: Any) -> tuple[int, str]:
    async with client:
        count = 0
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            count += len(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        result = await client.call_tool("echo", dict(ECHO_DICT))
    return count, result.content[0].text


class SdkDefault(Contender):
    async def open(self) -> None:
        import mcp

        self.mcp = mcp
        self.mode = "legacy" if self.era == "legacy" else "auto"

    async def item(self) -> tuple[int, str]:
        return await _sdk_work(self.mcp.Client(self.url, mode=self.mode))


class SdkTuned(Contender):
    async def open(self) -> None:
        import httpx2
        import mcp
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        self.mcp = mcp
        self.streamable_http_client = streamable_http_client
        if self.http == "h2":
            self.http_client = httpx2.AsyncClient(
                http1=False,
                http2=True,
                timeout=httpx2.Timeout(30.0, read=300.0),
                limits=httpx2.Limits(max_connections=64, max_keepalive_connections=64),
                **({"verify": self.ssl_context()} if self.ca else {}),
            )
        else:
            assert self.ca is None, "TLS rows are HTTP/2"
            self.http_client = create_mcp_http_client()
        await self.http_client.__aenter__()
        self.mode = "legacy" if self.era == "legacy" else MODERN

    async def item(self) -> tuple[int, str]:
        transport = self.streamable_http_client(self.url, http_client=self.http_client)
        return await _sdk_work(self.mcp.Client(transport, mode=self.mode))

    async def close(self) -> None:
        await self.http_client.__aexit__(None, None, None)


class FastMcp(Contender):
    async def open(self) -> None:
        import fastmcp

        self.fastmcp = fastmcp
        self.mode = "legacy" if self.era == "legacy" else "auto"

    async def item(self) -> tuple[int, str]:
        async with self.fastmcp.Client(self.url, mode=self.mode) as client:
            tools = await client.list_tools()
            result = await client.call_tool("echo", dict(ECHO_DICT))
        return len(tools), result.content[0].text  # type: ignore[union-attr]


class _Floor(Contender):
    llhttp = False

    def _address(self) -> tuple[str, int, str]:
        parts = urlsplit(self.url)
        assert parts.hostname is not None and parts.port is not None
        return parts.hostname, parts.port, parts.path

    def _options(self) -> dict[str, Any]:
        return {"llhttp": self.llhttp, "ca": self.ca}


class FloorSync(_Floor):
    async def open(self) -> None:
        from .floor import SyncFloor

        self.floor = SyncFloor(*self._address(), self.http, **self._options())

    def item_sync(self) -> tuple[int, str]:
        return self.floor.item(self.era)

    async def close(self) -> None:
        self.floor.close()


class FloorAsyncio(_Floor):
    async def open(self) -> None:
        from .floor import AsyncioFloor

        self.floor = AsyncioFloor(*self._address(), self.http, **self._options())

    async def item(self) -> tuple[int, str]:
        return await self.floor.item(self.era)

    async def close(self) -> None:
        await self.floor.close()


class FloorTrio(FloorAsyncio):
    async def open(self) -> None:
        from .floor import TrioFloor

        self.floor = TrioFloor(*self._address(), self.http, **self._options())  # type: ignore[assignment]


class LlhttpSync(FloorSync):
    llhttp = True


class LlhttpAsyncio(FloorAsyncio):
    llhttp = True


class LlhttpTrio(FloorTrio):
    llhttp = True


def make(name: str, url: str, era: str, http: str, ca: str | None = None) -> Contender:
    classes: dict[str, type[Contender]] = {
        "sansmcp-asyncio": SansmcpAsyncio,
        "sansmcp-trio": SansmcpTrio,
        "sansmcp-sync": SansmcpSync,
        "sdk-default": SdkDefault,
        "sdk-tuned": SdkTuned,
        "fastmcp": FastMcp,
        "floor-sync": FloorSync,
        "floor-asyncio": FloorAsyncio,
        "floor-trio": FloorTrio,
        "llhttp-sync": LlhttpSync,
        "llhttp-asyncio": LlhttpAsyncio,
        "llhttp-trio": LlhttpTrio,
    }
    return classes[name](url, era, http, ca)
