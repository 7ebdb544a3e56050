"""The Client-wide listing cache (spec caching: ttlMs / cacheScope), through the MCP machine.

Several machines share one ``ListingCache`` as the Conns of one Client do; each has
its own fake clock.  Scope separation, freshness per page, invalidation and the
bounds are checked from what each machine sends and returns.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.cache import (
    MAX_TTL_MS,
    CachedPage,
    CallerCache,
    ListingCache,
    caller_identity,
    credential_parts,
    page_size,
)
from sansmcp.core.errors import ServerAnswered
from sansmcp.core.http import HttpRequest, header_value
from sansmcp.core.mcp import ConnSettings, ToolsListed
from sansmcp.core.tools import SkippedTool, Tool
from sansmcp.core.url import parse_endpoint
from tests.tiers import examples

from .fakemcp import (
    MODERN,
    URL,
    Driver,
    FakeServer,
    Response,
    error,
    json_response,
    result,
    sse_response,
    tool,
)

BIG = 1 << 40


def settings_for(
    token: str | None = None, headers: dict[str, str] | None = None, url: str = URL, **kw: Any
) -> ConnSettings:
    encoded = tuple((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())
    return ConnSettings(endpoint=parse_endpoint(url), bearer_token=token, headers=encoded, **kw)


def conn(
    server: FakeServer,
    cache: ListingCache,
    *,
    salt: bytes = b"salt",
    now: float = 0.0,
    token: str | None = "token-a",
    headers: dict[str, str] | None = None,
    anonymous: bool = False,
    **kw: Any,
) -> Driver:
    settings = settings_for(token, headers, **kw)
    caller = CallerCache(cache, settings, salt, anonymous=anonymous)
    driver = Driver(server, settings=settings, cache=caller)
    driver.now = now
    driver.ok(driver.connect())
    return driver


def listed(driver: Driver, *, fresh: bool = False) -> ToolsListed:
    outcome = driver.ok(driver.run(functools.partial(driver.machine.list_tools, fresh=fresh)))
    assert isinstance(outcome, ToolsListed)
    return outcome


def list_count(server: FakeServer) -> int:
    return sum(1 for b in server.bodies if isinstance(b, dict) and b.get("method") == "tools/list")


def serve_pages(server: FakeServer, make: Any) -> None:
    """Answer tools/list with ``make(cursor)``."""

    def answer(request: HttpRequest, body: Any) -> Response:
        value = make((body.get("params") or {}).get("cursor"))
        if server.modern:
            value.setdefault("resultType", "complete")
        return server.wrap(result(body["id"], value))

    server.overrides["tools/list"] = answer


def hinted(
    scope: str | None = "public", ttl: Any = 60_000, tools: list[dict[str, Any]] | None = None
) -> FakeServer:
    server = FakeServer(tools=tools)

    def make(cursor: Any) -> dict[str, Any]:
        value: dict[str, Any] = {"tools": server.tools, "ttlMs": ttl}
        if scope is not None:
            value["cacheScope"] = scope
        return value

    serve_pages(server, make)
    return server


def cache() -> ListingCache:
    return ListingCache(max_entries=1024, max_bytes=16 << 20)


# ---------------------------------------------------------------- hits


def test_a_fresh_hit_sends_no_request_and_returns_the_same_listing() -> None:
    bad = {"name": 7}
    server = hinted(tools=[tool("a"), bad, tool("b")])
    shared = cache()
    first = conn(server, shared)
    one = listed(first)
    assert list_count(server) == 1 and not first.machine.tools_from_cache
    second = conn(server, shared, now=30.0)
    sent = len(server.requests)
    two = listed(second)
    assert len(server.requests) == sent  # no request at all
    assert two.tools == one.tools and two.skipped == one.skipped
    assert two.skipped_count == one.skipped_count == 1
    assert (two.ttl_ms, two.cache_scope) == (60_000, "public")
    assert second.machine.tools_from_cache
    assert set(second.machine.tools) == {"a", "b"}
    # fresh=True always asks the server, and the Conn then says so
    listed(second, fresh=True)
    assert list_count(server) == 2 and not second.machine.tools_from_cache


def test_expiry_at_exactly_received_plus_ttl() -> None:
    server = hinted(ttl=1_000)
    shared = cache()
    listed(conn(server, shared))
    listed(conn(server, shared, now=0.999))
    assert list_count(server) == 1
    listed(conn(server, shared, now=1.0))  # now < t_received + ttlMs no longer holds
    assert list_count(server) == 2


@pytest.mark.parametrize("ttl", [None, 0, -5, 1.5, True, "60000"])
def test_absent_zero_negative_or_odd_ttl_is_never_served(ttl: Any) -> None:
    server = hinted(ttl=ttl)
    if ttl is None:
        serve_pages(server, lambda cursor: {"tools": server.tools, "cacheScope": "public"})
    shared = cache()
    listed(conn(server, shared))
    listed(conn(server, shared))
    assert list_count(server) == 2 and len(shared) == 0


def test_a_400_digit_ttl_is_capped_at_a_day() -> None:
    server = hinted(ttl=10**400)
    shared = cache()
    listed(conn(server, shared))
    listed(conn(server, shared, now=MAX_TTL_MS / 1000 - 1))
    assert list_count(server) == 1
    listed(conn(server, shared, now=MAX_TTL_MS / 1000))
    assert list_count(server) == 2


def test_a_listing_reports_the_same_ttl_fresh_and_from_the_cache() -> None:
    server = hinted(ttl=10**400)
    shared = cache()
    fresh, cached = listed(conn(server, shared)), listed(conn(server, shared))
    assert list_count(server) == 1
    assert fresh.ttl_ms == cached.ttl_ms == MAX_TTL_MS


def test_each_page_has_its_own_clock_and_a_stale_page_refetches_from_the_first() -> None:
    server = FakeServer(tools=[tool(f"t{i}") for i in range(3)])
    ttls = {None: 10_000, "1": 1_000, "2": 10_000}

    def make(cursor: Any) -> dict[str, Any]:
        start = int(cursor) if cursor else 0
        value: dict[str, Any] = {
            "tools": server.tools[start : start + 1],
            "ttlMs": ttls[cursor],
            "cacheScope": "public",
        }
        if start + 1 < 3:
            value["nextCursor"] = str(start + 1)
        return value

    serve_pages(server, make)
    shared = cache()
    listed(conn(server, shared))
    assert list_count(server) == 3 and len(shared) == 3
    hit = listed(conn(server, shared, now=0.5))
    assert [t.name for t in hit.tools] == ["t0", "t1", "t2"] and hit.ttl_ms == 1_000
    assert list_count(server) == 3
    before = len(server.bodies)
    listed(conn(server, shared, now=1.5))  # the middle page went stale
    cursors = [
        (b.get("params") or {}).get("cursor")
        for b in server.bodies[before:]
        if isinstance(b, dict) and b.get("method") == "tools/list"
    ]
    assert cursors == [None, "1", "2"]


def test_a_listing_with_one_uncacheable_page_is_not_stored() -> None:
    server = FakeServer(tools=[tool("a"), tool("b")])

    def make(cursor: Any) -> dict[str, Any]:
        if cursor is None:
            return {"tools": [tool("a")], "nextCursor": "1", "ttlMs": 5_000, "cacheScope": "public"}
        return {"tools": [tool("b")], "ttlMs": 0, "cacheScope": "public"}

    serve_pages(server, make)
    shared = cache()
    listed(conn(server, shared))
    assert len(shared) == 0


# ---------------------------------------------------------------- scope


def test_private_is_never_served_to_another_token() -> None:
    server = hinted(scope="private")
    shared = cache()
    listed(conn(server, shared, token="alice"))
    bob = conn(server, shared, token="bob")
    listed(bob)
    assert list_count(server) == 2 and not bob.machine.tools_from_cache
    alice = conn(server, shared, token="alice")
    listed(alice)
    assert list_count(server) == 2 and alice.machine.tools_from_cache


def test_private_is_never_served_to_another_api_key_header() -> None:
    server = hinted(scope="private")
    shared = cache()
    listed(conn(server, shared, token=None, headers={"X-Api-Key": "k1"}))
    listed(conn(server, shared, token=None, headers={"X-Api-Key": "k2"}))
    listed(conn(server, shared, token=None, headers={"X-Api-Key": "k1", "X-Extra": "1"}))
    listed(conn(server, shared, token="k1"))  # the same secret as a token: another caller
    assert list_count(server) == 4
    listed(conn(server, shared, token=None, headers={"X-Api-Key": "k1"}))
    assert list_count(server) == 4


def test_absent_or_unknown_scope_counts_as_private() -> None:
    for scope in (None, "shared", "PUBLIC"):
        server = hinted(scope=scope)
        shared = cache()
        listed(conn(server, shared, token="alice"))
        listed(conn(server, shared, token="bob"))
        assert list_count(server) == 2
        listed(conn(server, shared, token="alice"))
        assert list_count(server) == 2


def test_public_is_shared_across_credentials_and_with_none() -> None:
    server = hinted(scope="public")
    shared = cache()
    listed(conn(server, shared, token="alice"))
    for kw in ({"token": "bob"}, {"token": None}, {"token": None, "headers": {"X-Api-Key": "z"}}):
        driver = conn(server, shared, **kw)  # type: ignore[arg-type]
        listed(driver)
        assert driver.machine.tools_from_cache
    assert list_count(server) == 1


def test_private_without_any_credential_is_not_cached() -> None:
    server = hinted(scope="private")
    shared = cache()
    listed(conn(server, shared, token=None))
    assert len(shared) == 0
    listed(conn(server, shared, token=None))
    assert list_count(server) == 2


def test_a_listing_with_any_private_page_is_private() -> None:
    server = FakeServer()

    def make(cursor: Any) -> dict[str, Any]:
        if cursor is None:
            return {"tools": [tool("a")], "nextCursor": "1", "ttlMs": 5_000, "cacheScope": "public"}
        return {"tools": [tool("b")], "ttlMs": 5_000, "cacheScope": "private"}

    serve_pages(server, make)
    shared = cache()
    listed(conn(server, shared, token="alice"))
    listed(conn(server, shared, token="bob"))
    assert list_count(server) == 4
    hit = listed(conn(server, shared, token="alice"))
    assert list_count(server) == 4 and hit.cache_scope == "private"


def test_other_endpoints_and_versions_are_other_keys() -> None:
    server = hinted()
    shared = cache()
    listed(conn(server, shared))
    listed(conn(server, shared, url="https://mcp.example.com/other"))
    assert list_count(server) == 2
    legacy = FakeServer(modern=False, legacy="2025-11-25")
    serve_pages(
        legacy, lambda cursor: {"tools": [tool("a")], "ttlMs": 5_000, "cacheScope": "public"}
    )
    listed(conn(legacy, shared))
    assert list_count(legacy) == 1 and len(shared) == 3  # a legacy listing is cached too
    listed(conn(legacy, shared))
    assert list_count(legacy) == 1


def test_salt_separates_clients_and_the_digest_hides_the_secret() -> None:
    settings = settings_for("s3cr3t-token", {"X-Api-Key": "k"})
    one = caller_identity(settings, b"client-1")
    two = caller_identity(settings, b"client-2")
    assert one is not None and two is not None and one != two
    assert one == caller_identity(settings, b"client-1")
    assert b"s3cr3t" not in one and len(one) == 32
    assert caller_identity(settings_for(None), b"x") is None
    assert credential_parts(settings_for(None, {"b": "2", "a": "1"})) == [
        (b"header:a", b"1"),
        (b"header:b", b"2"),
    ]
    # two Clients' salts never meet in one cache; shown by sharing one on purpose
    server = hinted(scope="private")
    shared = cache()
    listed(conn(server, shared, salt=b"client-1"))
    listed(conn(server, shared, salt=b"client-2"))
    assert list_count(server) == 2


def test_an_anonymous_caller_never_meets_a_private_listing_through_shared_headers() -> None:
    """An OAuth Conn's identity is its token store's, not in its settings: with the same
    headers as another caller it must neither be served nor leave a private listing."""
    server = hinted(scope="private")
    shared = cache()
    headers = {"X-Tenant": "t1"}
    listed(conn(server, shared, token=None, headers=headers))  # keyed by the header
    listed(conn(server, shared, token=None, headers=headers, anonymous=True))  # not served
    listed(conn(server, shared, token=None, headers=headers, anonymous=True))  # nor kept
    assert list_count(server) == 3
    public = hinted(scope="public")
    listed(conn(public, shared, token=None, headers=headers, anonymous=True))
    listed(conn(public, shared, token=None, headers=headers, anonymous=True))
    assert list_count(public) == 1  # public entries are shared as for anyone


@settings(max_examples=examples(60), deadline=None)
@given(
    callers=st.lists(
        st.tuples(
            st.sampled_from([None, "alice", "bob"]),
            st.sampled_from([None, "k1", "k2"]),
            st.sampled_from(["public", "private", None]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_a_listing_is_served_only_to_whom_its_scope_allows(
    callers: list[tuple[str | None, str | None, str | None]],
) -> None:
    """Each caller lists a server that tags its listing with the caller's own name; what
    any caller gets must be its own listing, or a public one."""
    shared = cache()
    for token, key, scope in callers:
        who = f"{token}/{key}"
        server = FakeServer()
        value: dict[str, Any] = {"tools": [tool("t", description=who)], "ttlMs": 60_000}
        if scope is not None:
            value["cacheScope"] = scope
        serve_pages(server, lambda cursor, value=value: dict(value))
        driver = conn(server, shared, token=token, headers={"X-Api-Key": key} if key else None)
        got = listed(driver)
        description = got.tools[0].description
        if driver.machine.tools_from_cache:
            assert description == who or got.cache_scope == "public"
        else:
            assert description == who and list_count(server) == 1


# ---------------------------------------------------------------- invalidation


def call_error(server: FakeServer, code: int) -> None:
    server.overrides["tools/call"] = lambda request, body: server.wrap(
        error(body["id"], code, "stale")
    )


@pytest.mark.parametrize("code", [-32602, -32601])
def test_a_stale_tool_error_on_a_cached_tool_invalidates(code: int) -> None:
    server = hinted(tools=[tool("echo")])
    shared = cache()
    listed(conn(server, shared))
    call_error(server, code)
    driver = conn(server, shared)
    listed(driver)
    failure = driver.failure(driver.call("echo"))
    assert isinstance(failure, ServerAnswered) and failure.code == code
    assert len(shared) == 0
    listed(conn(server, shared))
    assert list_count(server) == 2


def test_an_error_for_a_tool_not_in_the_listing_or_another_code_keeps_it() -> None:
    server = hinted(tools=[tool("echo")])
    shared = cache()
    driver = conn(server, shared)
    listed(driver)
    call_error(server, -32602)
    driver.failure(driver.call("unknown"))
    call_error(server, -32000)
    driver.failure(driver.call("echo"))
    assert len(shared) == 1


def test_invalidation_drops_only_what_the_caller_could_be_served() -> None:
    server = hinted(scope="private", tools=[tool("echo")])
    shared = cache()
    listed(conn(server, shared, token="alice"))
    bob = conn(server, shared, token="bob")
    listed(bob)
    call_error(server, -32602)
    bob.failure(bob.call("echo"))
    assert len(shared) == 1
    listed(conn(server, shared, token="alice"))
    assert list_count(server) == 2


def test_header_mismatch_relists_past_the_cache_and_refreshes_it() -> None:
    server = hinted(tools=[tool("echo", description="old")])
    shared = cache()
    listed(conn(server, shared))
    server.tools = [tool("echo", description="new")]
    calls = 0

    def answer(request: HttpRequest, body: Any) -> Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return server.wrap(error(body["id"], -32020, "header mismatch"))
        value = {"content": [], "isError": False, "resultType": "complete"}
        return server.wrap(result(body["id"], value))

    server.overrides["tools/call"] = answer
    driver = conn(server, shared)
    driver.ok(driver.call("echo"))
    assert list_count(server) == 2  # the relist went to the server despite a fresh entry
    hit = listed(conn(server, shared))
    assert list_count(server) == 2 and hit.tools[0].description == "new"


def test_list_changed_on_a_calls_stream_invalidates() -> None:
    server = hinted(tools=[tool("echo")])
    shared = cache()
    driver = conn(server, shared)
    listed(driver)
    notice = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    server.overrides["tools/call"] = lambda request, body: sse_response(
        notice,
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {}},
        result(body["id"], {"content": [], "isError": False, "resultType": "complete"}),
    )
    driver.ok(driver.call("echo"))
    assert len(shared) == 0


def test_list_changed_on_the_standalone_stream_invalidates() -> None:
    server = FakeServer(modern=False, legacy="2025-11-25", sse=True)
    serve_pages(
        server, lambda cursor: {"tools": [tool("a")], "ttlMs": 60_000, "cacheScope": "public"}
    )
    notice = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    shared = cache()
    listed(conn(server, shared))
    assert len(shared) == 1
    server.overrides["GET"] = lambda request, body: sse_response(
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {}}, notice, end=False
    )
    settings = settings_for("token-a", capabilities={})
    driver = Driver(
        server,
        settings=settings,
        cache=CallerCache(shared, settings, b"salt"),
        input_handler=lambda requests: None,
    )
    driver.ok(driver.connect())
    assert "GET" in driver.methods()
    assert len(shared) == 0


def test_an_error_for_a_cursor_discards_the_pages() -> None:
    server = FakeServer()
    broken = False

    def answer(request: HttpRequest, body: Any) -> Response:
        cursor = (body.get("params") or {}).get("cursor")
        if cursor is not None and broken:
            return server.wrap(error(body["id"], -32602, "invalid cursor"))
        value: dict[str, Any] = {
            "tools": [tool("b" if cursor else "a")],
            "ttlMs": 60_000 if cursor is None else 1_000,
            "cacheScope": "public",
            "resultType": "complete",
        }
        if cursor is None:
            value["nextCursor"] = "1"
        return server.wrap(result(body["id"], value))

    server.overrides["tools/list"] = answer
    shared = cache()
    listed(conn(server, shared))
    assert len(shared) == 2
    broken = True
    driver = conn(server, shared, now=2.0)  # page 2 stale: the listing is fetched again
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ServerAnswered) and len(shared) == 0


# ---------------------------------------------------------------- a Conn that only calls


def test_a_call_only_conn_takes_header_params_from_a_fresh_listing() -> None:
    schema = {
        "type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    }
    server = hinted(tools=[tool("where", inputSchema=schema)])
    shared = cache()
    listed(conn(server, shared))
    driver = conn(server, shared)
    driver.ok(driver.call("where", b'{"region": "eu"}'))
    assert list_count(server) == 1 and driver.machine.tools_from_cache
    call = [b for b in server.requests if b.body and b'"tools/call"' in b.body][-1]
    assert header_value(call.headers, b"mcp-param-region") == b"eu"
    # stale: no headers from the cache, and the Conn says so
    late = conn(server, shared, now=120.0)
    late.ok(late.call("where", b'{"region": "eu"}'))
    assert not late.machine.tools_from_cache
    call = [b for b in server.requests if b.body and b'"tools/call"' in b.body][-1]
    assert header_value(call.headers, b"mcp-param-region") is None


# ---------------------------------------------------------------- server/discover


def discover_with(server: FakeServer, ttl: int, scope: str = "public") -> None:
    def answer(request: HttpRequest, body: Any) -> Response:
        return server.wrap(
            result(
                body["id"],
                {
                    "resultType": "complete",
                    "supportedVersions": [MODERN, 7],
                    "capabilities": {"tools": {}},
                    "ttlMs": ttl,
                    "cacheScope": scope,
                },
            )
        )

    server.overrides["server/discover"] = answer


def discovers(server: FakeServer) -> int:
    return sum(
        1 for b in server.bodies if isinstance(b, dict) and b.get("method") == "server/discover"
    )


def test_a_fresh_discover_result_makes_the_era_known_without_a_probe() -> None:
    server = FakeServer()
    discover_with(server, 10_000)
    shared = cache()
    conn(server, shared)
    assert discovers(server) == 1 and len(shared) == 1
    again = conn(server, shared, now=5.0)
    assert discovers(server) == 1 and again.machine.protocol_version == MODERN
    listed(again)
    conn(server, shared, now=10.0)  # stale: probed again
    assert discovers(server) == 2


def test_a_discover_result_the_server_contradicts_is_forgotten() -> None:
    server = FakeServer()
    discover_with(server, 60_000)
    shared = cache()
    conn(server, shared)
    # the server turned legacy-only: the modern request fails, the era is probed again
    legacy = FakeServer(modern=False, legacy="2025-11-25")
    driver = conn(legacy, shared)
    assert driver.methods() == []  # the era was known: no probe
    listed(driver)
    assert driver.machine.protocol_version == "2025-11-25" and len(shared) == 0
    assert driver.methods()[:2] == ["tools/list", "server/discover"]


def test_a_private_discover_result_without_a_credential_is_not_kept() -> None:
    server = FakeServer()
    discover_with(server, 10_000, scope="private")
    shared = cache()
    conn(server, shared, token=None)
    assert len(shared) == 0
    conn(server, shared, token="t")
    assert len(shared) == 1 and discovers(server) == 2
    conn(server, shared, token="t")  # the same caller: known without a probe
    conn(server, shared, token="u")
    assert discovers(server) == 3


# ---------------------------------------------------------------- bounds


def page(name: str, description: str = "", cursor: str | None = None) -> CachedPage:
    return CachedPage(
        tools=(Tool(name=name, description=description, input_schema=b"{}"),),
        skipped=(SkippedTool(index=1, name=None, reason="bad"),),
        skipped_count=1,
        next_cursor=cursor,
        ttl_ms=1000,
    )


def key(name: str) -> tuple[str, str, str, str | None, bytes | None]:
    return (URL, MODERN, name, None, None)


def test_lru_by_entries() -> None:
    lru = ListingCache(max_entries=2, max_bytes=BIG)
    for name in "abc":
        lru.put(key(name), page(name), expires=10, size=1)
        if name == "b":
            assert lru.get(key("a"), now=0) is not None  # a is now the most recent
    assert lru.get(key("b"), now=0) is None
    assert lru.get(key("a"), now=0) is not None and lru.get(key("c"), now=0) is not None
    assert len(lru) == 2


def test_lru_by_bytes_and_an_oversized_entry_is_not_stored() -> None:
    lru = ListingCache(max_entries=100, max_bytes=1000)
    lru.put(key("a"), page("a"), expires=10, size=600)
    lru.put(key("b"), page("b"), expires=10, size=300)
    lru.put(key("c"), page("c"), expires=10, size=300)  # a goes
    assert lru.get(key("a"), now=0) is None and lru.bytes == 600
    lru.put(key("d"), page("d"), expires=10, size=1001)
    assert lru.get(key("d"), now=0) is None and lru.bytes == 600
    lru.put(key("b"), page("b"), expires=10, size=100)  # replacing re-counts
    assert lru.bytes == 400 and len(lru) == 2
    off = ListingCache(max_entries=0, max_bytes=BIG)
    off.put(key("a"), page("a"), expires=10, size=1)
    assert len(off) == 0


def test_the_machine_respects_the_bounds() -> None:
    server = hinted(tools=[tool(f"t{i}", description="x" * 500) for i in range(4)])
    tiny = ListingCache(max_entries=8, max_bytes=1000)
    listed(conn(server, tiny))
    assert len(tiny) == 0  # the one page is larger than the whole cache
    assert page_size(page("a", "x" * 500)) > 500


def test_a_cached_chain_that_loops_or_repeats_a_tool_is_a_miss() -> None:
    lru = cache()
    lkey = (URL, MODERN, "tools/list")
    lru.put((*lkey, None, None), page("a", cursor="1"), expires=10, size=1)
    lru.put((*lkey, "1", None), page("b", cursor="1"), expires=10, size=1)
    assert lru.listing(URL, MODERN, None, now=0, max_pages=10, max_recorded_skips=5) is None
    lru.put((*lkey, "1", None), page("a"), expires=10, size=1)
    assert lru.listing(URL, MODERN, None, now=0, max_pages=10, max_recorded_skips=5) is None
    lru.put((*lkey, "1", None), page("b"), expires=10, size=1)
    assert lru.listing(URL, MODERN, None, now=0, max_pages=1, max_recorded_skips=5) is None
    whole = lru.listing(URL, MODERN, None, now=0, max_pages=2, max_recorded_skips=1)
    assert whole is not None and len(whole.skipped) == 1 and whole.skipped_count == 2


ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["put", "get", "invalidate"]),
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from([None, b"id-1", b"id-2"]),
        st.integers(min_value=1, max_value=400),
        st.floats(min_value=0, max_value=5),
    ),
    max_size=40,
)


@settings(max_examples=examples(200), deadline=None)
@given(actions=ACTIONS)
def test_bounds_and_accounting_hold_under_any_sequence(
    actions: list[tuple[str, str, bytes | None, int, float]],
) -> None:
    lru = ListingCache(max_entries=3, max_bytes=700)
    stored: dict[Any, tuple[CachedPage, float]] = {}
    now = 0.0
    for action, name, owner, size, step in actions:
        now += step
        k = (URL, MODERN, "tools/list", name, owner)
        if action == "put":
            value = page(name)
            lru.put(k, value, expires=now + 2, size=size)
            stored[k] = (value, now + 2)
        elif action == "get":
            got = lru.get(k, now=now)
            if got is not None:  # only what was stored under exactly this key, fresh
                assert stored[k][0] is got and now < stored[k][1]
        else:
            lru.invalidate(URL, MODERN, "tools/list", owner)
            for other in (None, owner):
                assert lru.get((URL, MODERN, "tools/list", name, other), now=now) is None
        assert len(lru) <= 3 and lru.bytes <= 700
        assert lru.bytes == sum(e.size for e in lru._entries.values())
        assert sum(len(keys) for keys in lru._groups.values()) == len(lru)


def test_a_json_body_listing_response_is_cached_too() -> None:
    server = FakeServer()
    server.overrides["tools/list"] = lambda request, body: json_response(
        result(
            body["id"],
            {"tools": [tool("a")], "ttlMs": 1000, "cacheScope": "public", "resultType": "complete"},
        )
    )
    shared = cache()
    listed(conn(server, shared))
    listed(conn(server, shared))
    assert list_count(server) == 1


@settings(max_examples=examples(80), deadline=None)
@given(
    ttls=st.lists(st.integers(min_value=-5, max_value=3_000), min_size=1, max_size=4),
    at=st.floats(min_value=0, max_value=4),
)
def test_a_listing_is_served_exactly_while_every_page_is_fresh(ttls: list[int], at: float) -> None:
    """Pages received at 0 with their own ttls; a later Conn at ``at`` is served from the
    cache iff every page is fresh then (``at < ttl / 1000`` for each), and then sends nothing."""
    server = FakeServer()

    def make(cursor: Any) -> dict[str, Any]:
        index = int(cursor) if cursor else 0
        value: dict[str, Any] = {
            "tools": [tool(f"t{index}")],
            "ttlMs": ttls[index],
            "cacheScope": "public",
        }
        if index + 1 < len(ttls):
            value["nextCursor"] = str(index + 1)
        return value

    serve_pages(server, make)
    shared = cache()
    listed(conn(server, shared))
    later = conn(server, shared, now=at)
    got = listed(later)
    fresh = all(ttl > 0 and at < ttl / 1000 for ttl in ttls)
    assert later.machine.tools_from_cache == fresh
    assert list_count(server) == (1 if fresh else 2) * len(ttls)
    assert [t.name for t in got.tools] == [f"t{i}" for i in range(len(ttls))]


# -- bytes, not characters: strings of 1-, 2-, 3- and 4-byte UTF-8 characters ------------

WIDTHS = st.one_of(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E),
    st.characters(min_codepoint=0x80, max_codepoint=0x7FF, exclude_categories=["Cc"]),
    st.characters(min_codepoint=0x800, max_codepoint=0xFFFF, exclude_categories=["Cs"]),
    st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF),
)


def wide(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    return st.text(WIDTHS, min_size=min_size, max_size=max_size)


def utf8(text: str | None) -> int:
    return len((text or "").encode("utf-8"))


def held(value: Any, cursor: str | None) -> int:
    """What one entry keeps, in real UTF-8 bytes: every string (encoded) and schema,
    and the cursor of its key -- no overhead at all."""
    if not isinstance(value, CachedPage):
        return utf8(cursor) + sum(utf8(v) for v in value.supported)
    total = utf8(cursor) + utf8(value.next_cursor)
    for kept in value.tools:
        total += utf8(kept.name) + utf8(kept.description) + utf8(kept.title)
        total += len(kept.input_schema) + len(kept.output_schema or b"")
        if kept.annotations is not None:
            total += utf8(json.dumps(kept.annotations, ensure_ascii=False))
        for param in kept.header_params:
            total += utf8(param.header) + utf8(param.type) + sum(map(utf8, param.path))
    for skip in value.skipped:
        total += utf8(skip.name) + utf8(skip.reason)
    return total


def wide_tool(name: str, text: str) -> dict[str, Any]:
    return tool(
        name,
        description=text * 40,  # long enough that its bytes, not the overheads, dominate
        title=text * 10,
        annotations={"note": text},
        inputSchema={"type": "object", "properties": {text: {"description": text}}},
        outputSchema={"type": "object", "description": text},
    )


@st.composite
def wide_listings(draw: st.DrawFn) -> list[list[tuple[list[dict[str, Any]], str | None]]]:
    """Listings of 1-3 pages of 1-3 tools whose every string mixes character widths;
    each page but the last names a distinct wide cursor."""
    listings = []
    for n in range(draw(st.integers(1, 4))):
        count = draw(st.integers(1, 3))
        cursors = draw(st.lists(wide(1, 200), min_size=count - 1, max_size=count - 1, unique=True))
        pages = []
        for p in range(count):
            tools = [
                wide_tool(f"t{n}-{p}-{i}" + draw(wide(0, 8)), draw(wide(0, 60)))
                for i in range(draw(st.integers(1, 3)))
            ]
            pages.append((tools, cursors[p] if p < count - 1 else None))
        listings.append(pages)
    return listings


@settings(max_examples=60, deadline=None)
@given(listings=wide_listings(), max_bytes=st.integers(min_value=0, max_value=60_000))
def test_the_cache_holds_no_more_utf8_bytes_than_its_bound(
    listings: list[list[tuple[list[dict[str, Any]], str | None]]], max_bytes: int
) -> None:
    """Private listings of wide text, one caller each, through the machine into one
    cache: the real UTF-8 bytes of what it keeps (strings encoded, schemas, cursors,
    no overhead) never pass ``max_bytes``; each entry is charged at least its real
    bytes; past the bound the least recently used goes, so the last listing is served
    from the cache exactly when its pages fit together, and fetched again otherwise."""
    lru = ListingCache(max_entries=64, max_bytes=max_bytes)
    for n, pages in enumerate(listings):
        by_cursor = {None: pages[0]} | {pages[p - 1][1]: pages[p] for p in range(1, len(pages))}
        server = FakeServer()

        def make(cursor: Any, by_cursor: Any = by_cursor) -> dict[str, Any]:
            tools, following = by_cursor[cursor]
            value: dict[str, Any] = {"tools": tools, "ttlMs": 60_000, "cacheScope": "private"}
            if following is not None:
                value["nextCursor"] = following
            return value

        serve_pages(server, make)
        # the same listing into an unbounded cache: what each page is charged, none evicted
        ref = ListingCache(max_entries=64, max_bytes=BIG)
        listed(conn(server, ref, token=f"token-{n}"))
        assert len(ref) == len(pages)
        for (_, _, _, cursor, _), entry in ref._entries.items():
            assert held(entry.value, cursor) <= entry.size  # charged at least what it keeps
        need = ref.bytes

        driver = conn(server, lru, token=f"token-{n}")
        first = listed(driver)
        assert len(first.tools) + first.skipped_count == sum(len(t) for t, _ in pages)
        kept = sum(held(e.value, k[3]) for k, e in lru._entries.items())
        assert kept <= lru.bytes <= max_bytes
        asked = list_count(server)
        again = listed(driver)  # from the cache exactly when the listing's pages fit together
        assert list_count(server) == asked + (0 if need <= max_bytes else len(pages))
        assert again.tools == first.tools
        assert sum(held(e.value, k[3]) for k, e in lru._entries.items()) <= max_bytes


def test_a_page_of_four_byte_characters_is_charged_four_bytes_each() -> None:
    """The finding: a str's length undercounted astral text 4x (a cache filled to 2.6x
    its bound).  Now a page of 1,000 four-byte characters is charged 4,000 of them and
    does not fit a 3,000-byte cache at all."""
    astral = "\U0001f600" * 1000
    wide_page = page("a", astral, cursor=astral)
    assert page_size(wide_page) >= 8000 == 2 * utf8(astral)
    lru = ListingCache(max_entries=8, max_bytes=3000)
    lru.store_listing(URL, MODERN, None, [(None, wide_page, 0.0)], public=True)
    assert len(lru) == 0 and lru.bytes == 0
    lru.store_discovery(URL, MODERN, None, ("\U0001f600" * 16,), public=True, ttl_ms=10, received=0)
    assert lru.bytes == 400 + 64 + 64
