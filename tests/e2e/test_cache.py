"""The Client-wide listing cache against the official SDK server sending ttlMs / cacheScope.

The server (``tests/e2e/server.py --cache-ttl MS --cache-scope S``) logs every request a
test tags, so each test counts exactly what its own Client sent.  Expiry is shown with
a 1 ms ttl and a 20 ms pause between work items (always stale), freshness with 60 s
(always fresh within a test), so no outcome depends on the machine's speed.

Every test runs on each runtime without a shared store, and on the blocking one (its
store client the simplest) with each store (issue 28): ``Client(store=LocalStore())``
and ``Client(store=RedisStore(...))`` on a real ``redis-server`` (flushed per test), so
the rules hold whether a listing comes from the local cache or from the store.
"""

from __future__ import annotations

import http.client
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from sansmcp import Config, ServerAnswered
from sansmcp.core.limits import Limits
from tests.stores.conftest import redis_server, redis_session, redis_store  # noqa: F401

from .conftest import BACKEND_MODULES, Backend, Launcher, Server

_tags = itertools.count()

STORE_BACKEND = "sync"  # the runtime each store runs on (not every runtime x store)
pytestmark = pytest.mark.parametrize(
    ("backend", "store_kind"),
    [(name, "none") for name in BACKEND_MODULES]
    + [(STORE_BACKEND, "local"), (STORE_BACKEND, "redis")],
    indirect=["backend"],
)


@pytest.fixture
def store(store_kind: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The shared store each Client of the test is given (None: none)."""
    if store_kind == "none":
        yield None
    elif store_kind == "local":
        from sansmcp.stores import LocalStore

        yield LocalStore()
    else:
        shared = redis_store(request.getfixturevalue("redis_server").url)
        try:
            yield shared
        finally:
            shared.close()


@pytest.fixture(scope="module")
def public(launch: Launcher) -> Server:
    return launch("--cache-ttl", "60000", "--cache-scope", "public")


@pytest.fixture(scope="module")
def private(launch: Launcher) -> Server:
    return launch("--cache-ttl", "60000", "--cache-scope", "private")


@pytest.fixture(scope="module")
def brief(launch: Launcher) -> Server:
    return launch("--cache-ttl", "1", "--cache-scope", "public")


def new_tag(backend: Backend) -> str:
    return f"cache-{backend.name}-{next(_tags)}"


def logged(server: Server, tag: str) -> list[str]:
    """The JSON-RPC methods (or HTTP methods) of the requests tagged ``tag``, in order."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        connection.request("GET", f"/_log?{tag}")
        entries: list[dict[str, Any]] = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    return [entry["rpc"] or entry["method"] for entry in entries]


def config(server: Server, tag: str, **kw: Any) -> Config:
    return Config(url=server.url(), headers={"x-test-tag": tag}, **kw)


def work_items(
    backend: Backend, server: Server, tag: str, count: int, store: Any, **client: Any
) -> list[bool]:
    """``count`` list-only work items on one Client; whether each came from the cache."""
    from_cache: list[bool] = []

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store, **client) as c:
            first = None
            for _ in range(count):
                async with c.connect(config(server, tag)) as conn:
                    tools = await conn.list_tools()
                    from_cache.append(conn.tools_from_cache)
                    first = first or tools
                    assert tools == first
                    assert conn.tools_ttl_ms == 60_000 and conn.tools_cache_scope == "public"

    backend.run(main)
    return from_cache


def test_ten_work_items_list_once_with_the_cache(
    backend: Backend, public: Server, store: Any
) -> None:
    with_cache, without = new_tag(backend), new_tag(backend)
    assert work_items(backend, public, with_cache, 10, store) == [False] + [True] * 9
    assert (
        work_items(backend, public, without, 10, store, limits=Limits(max_cache_entries=0))
        == [False] * 10
    )
    sent = logged(public, with_cache)
    assert sent == ["server/discover", "tools/list"]  # 10 work items, 2 requests
    baseline = logged(public, without)
    # (with a shared store, the second Client has the first's era hint: no probe)
    assert baseline.count("tools/list") == 10
    assert baseline.count("server/discover") == (1 if store is None else 0)


def test_fresh_true_lists_from_the_server(backend: Backend, public: Server, store: Any) -> None:
    tag = new_tag(backend)

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store) as c:
            async with c.connect(config(public, tag)) as conn:
                await conn.list_tools()
            async with c.connect(config(public, tag)) as conn:
                await conn.list_tools()
                assert conn.tools_from_cache
                await conn.list_tools(fresh=True)
                assert not conn.tools_from_cache
            async with c.connect(config(public, tag)) as conn:
                await conn.list_tools()  # the fresh listing refreshed the cache
                assert conn.tools_from_cache

    backend.run(main)
    assert logged(public, tag).count("tools/list") == 2


def test_a_listing_past_its_ttl_is_listed_again(
    backend: Backend, brief: Server, store: Any
) -> None:
    tag = new_tag(backend)

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store) as c:
            for _ in range(3):
                async with c.connect(config(brief, tag)) as conn:
                    await conn.list_tools()
                    assert not conn.tools_from_cache
                    assert conn.tools_ttl_ms == 1
                await backend.sleep(0.02)  # > 1 ms: the page is stale whatever the load

    backend.run(main)
    assert logged(brief, tag).count("tools/list") == 3


def test_private_listings_stay_with_their_token(
    backend: Backend, private: Server, store: Any
) -> None:
    tag = new_tag(backend)
    seen: list[bool] = []

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store) as c:
            for token in ("alice", "bob", "alice", "bob"):
                async with c.connect(config(private, tag, bearer_token=token)) as conn:
                    await conn.list_tools()
                    seen.append(conn.tools_from_cache)
                    assert conn.tools_cache_scope == "private"

    backend.run(main)
    assert seen == [False, False, True, True]
    assert logged(private, tag).count("tools/list") == 2


def test_a_client_without_a_credential_does_not_cache_private(
    backend: Backend, private: Server, store: Any
) -> None:
    tag = new_tag(backend)

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store) as c:
            for _ in range(2):
                async with c.connect(Config(url=private.url())) as conn:
                    await conn.list_tools()
                    assert not conn.tools_from_cache
            # the tag header identifies a caller: now the listing is kept
            for _ in range(2):
                async with c.connect(config(private, tag)) as conn:
                    await conn.list_tools()
            assert conn.tools_from_cache

    backend.run(main)


def test_a_32602_on_a_cached_tool_invalidates(backend: Backend, public: Server, store: Any) -> None:
    tag = new_tag(backend)

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store) as c:
            async with c.connect(config(public, tag)) as conn:
                await conn.list_tools()
            async with c.connect(config(public, tag)) as conn:
                with pytest.raises(ServerAnswered) as stale:
                    await conn.call_tool("rpc_error")
                assert stale.value.code == -32602
            async with c.connect(config(public, tag)) as conn:
                await conn.list_tools()
                assert not conn.tools_from_cache

    backend.run(main)
    assert logged(public, tag).count("tools/list") == 2


def test_a_call_only_work_item_takes_its_tools_from_the_cache(
    backend: Backend, public: Server, store: Any
) -> None:
    tag = new_tag(backend)

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store) as c:
            async with c.connect(config(public, tag)) as conn:
                await conn.list_tools()
            for _ in range(3):
                async with c.connect(config(public, tag)) as conn:
                    result = await conn.call_tool("echo", b'{"text": "hi"}')
                    assert result.content[0].text == "hi"
                    assert conn.tools_from_cache

    backend.run(main)
    assert logged(public, tag) == ["server/discover", "tools/list"] + ["tools/call"] * 3
