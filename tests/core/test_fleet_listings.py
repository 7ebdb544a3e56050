"""Tool listings through the store seam (issue 28): the double-checked load, pure.

Each ``ClientDriver`` here is one process of a fleet; they share one ``MemoryStore``
(performed by ``StoreNet``), or none, and a test answers each ``StoreOp`` by hand:
late, failed, held, or with garbage.  The fake server's ``tools/list`` requests count
what each process listed.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from sansmcp.core.cache import CachedPage, ListingCache
from sansmcp.core.commands import StoreOp
from sansmcp.core.driver import ClientDriver
from sansmcp.core.errors import CallerError
from sansmcp.core.fleet import Fleet
from sansmcp.core.fleet_listings import POLL_FIRST, PRIVATE_MARK, UNSHARED_MARK, SharedListings
from sansmcp.core.limits import Limits
from sansmcp.core.store import (
    Acquired,
    AcquireLease,
    CompareAndSet,
    Conflict,
    Found,
    Held,
    MemoryStore,
    Missing,
    Read,
    ReleaseLease,
    StoreFailed,
    Written,
    fleet_identity,
    listing_key,
)
from sansmcp.core.store_values import ValueCodec, listing_body, listing_from
from sansmcp.core.tools import SkippedTool, Tool

from .fakemcp import MODERN, FakeServer, json_response, result, tool
from .test_driver import URL
from .test_driver_store import StoreNet

SECRET = b"s" * 32
WALL = 1_000_000.0  # the wall clock at net.now == 0


def server(scope: str = "public", ttl: int = 60_000, tools: list[Any] | None = None) -> FakeServer:
    fake = FakeServer()
    entries = [tool("echo"), tool("add")] if tools is None else tools

    def listing(request: Any, body: Any) -> Any:
        value = {"resultType": "complete", "tools": entries, "ttlMs": ttl, "cacheScope": scope}
        return json_response(result(body["id"], value))

    fake.overrides["tools/list"] = listing
    return fake


def process(
    fake: FakeServer,
    store: MemoryStore | None,
    *,
    limits: Limits | None = None,
    secret: bytes | None = SECRET,
) -> StoreNet:
    nets: list[StoreNet] = []
    driver = ClientDriver(
        limits=limits,
        allow_loopback=True,
        shared_store=True,
        fleet_secret=secret,
        random_bytes=lambda n: b"\x07" * n,
        wall_clock=lambda: WALL + nets[0].now,
    )
    net = StoreNet(driver, handlers={8000: fake}, store=store)
    nets.append(net)
    return net


def lists(fake: FakeServer) -> int:
    return sum(1 for body in fake.bodies if body and body.get("method") == "tools/list")


def listings(net: StoreNet) -> SharedListings:
    fleet = net.driver.fleet
    assert fleet is not None and fleet.listings is not None
    return fleet.listings


def connected(net: StoreNet, **config: Any) -> Any:
    view = net.open(**config)
    assert net.ok("connect", view) is None
    return view


def kinds(net: StoreNet) -> list[str]:
    """The listing ops (not the era's)."""
    return [
        type(op.command).__name__
        for op in net.ops
        if getattr(op.command, "key", "").startswith("sansmcp:listing:")
    ]


def done(net: StoreNet, view: Any) -> Any:
    """The list_tools' Finished (the connect's was the first)."""
    return net.wait(view, before=1)


def public_key(version: str = MODERN) -> str:
    return listing_key(URL, version, "tools/list", None, None)


def private_key(headers: dict[str, str]) -> str:
    parts = sorted((b"header:" + k.encode(), v.encode()) for k, v in headers.items())
    return listing_key(URL, MODERN, "tools/list", None, fleet_identity(SECRET, parts))


# -- a fleet against one store --------------------------------------------------------


def test_a_public_listing_is_loaded_once_for_the_fleet() -> None:
    fake, store = server(), MemoryStore()
    first = process(fake, store)
    tools = first.ok("list_tools", connected(first))
    assert [t.name for t in tools] == ["echo", "add"] and lists(fake) == 1
    assert listings(first).counts["loads"] == 1 and listings(first).counts["writes"] == 1
    assert "Read" in kinds(first) and "AcquireLease" in kinds(first)
    assert kinds(first)[-2:] == ["CompareAndSet", "ReleaseLease"]
    second = process(fake, store)
    view = connected(second)
    assert second.ok("list_tools", view) == tools and view.tools_from_cache
    assert lists(fake) == 1  # no tools/list from the second process
    assert listings(second).counts["hits"] == 1
    before = len(second.ops)
    assert second.ok("list_tools", view) == tools  # the local cache now: no store op
    assert len(second.ops) == before
    second.driver.list_tools(view.conn_id, now=second.now, fresh=True)  # the server, no read
    second.pump()
    assert second.wait(view, before=3).value == tools
    assert lists(fake) == 2 and "fresh" not in repr(listings(second))
    write = second.ops[-1].command  # by the version read: it replaces it
    assert isinstance(write, CompareAndSet) and write.expected != 0
    assert listings(second).counts["conflicts"] == 0 and write.key == public_key()


def test_a_private_listing_is_shared_by_the_same_credential_only() -> None:
    fake, store = server(scope="private"), MemoryStore()
    alice = {"x-user": "alice"}
    first = process(fake, store)
    first.ok("list_tools", connected(first, headers=alice))
    assert isinstance(store.execute(Read(key=private_key(alice)), now=0.0), Found)
    mark = store.execute(Read(key=public_key()), now=0.0)  # the private mark, no listing
    assert isinstance(mark, Found) and json.loads(mark.value) == [1, "listing", PRIVATE_MARK]
    again = process(fake, store)
    view = connected(again, headers=alice)
    again.ok("list_tools", view)
    assert view.tools_from_cache and lists(fake) == 1
    other = process(fake, store)
    view = connected(other, headers={"x-user": "bob"})
    other.ok("list_tools", view)
    assert not view.tools_from_cache and lists(fake) == 2
    anonymous = process(fake, store)  # no credential: a private listing is not shared
    anonymous.ok("list_tools", connected(anonymous))
    assert "AcquireLease" not in kinds(anonymous)  # (the mark read: nothing to wait for)
    assert listings(anonymous).counts["writes"] == 1 and lists(fake) == 3  # the mark, renewed
    renewed = store.execute(Read(key=public_key()), now=0.0)
    assert isinstance(renewed, Found) and renewed.value == mark.value


def test_without_a_fleet_secret_only_public_listings_are_shared() -> None:
    fake, store = server(scope="private"), MemoryStore()
    net = process(fake, store, secret=None)
    net.ok("list_tools", connected(net, headers={"x-user": "alice"}))
    assert kinds(net).count("Read") == 2  # the public key only (and the recheck)
    assert listings(net).counts["writes"] == 1  # the private mark, no listing


def unshared_mark() -> bytes:
    value = ValueCodec(1 << 20).seal("listing", UNSHARED_MARK)
    assert value is not None
    return value


def test_an_empty_or_unservable_listing_is_never_stored_only_the_unshared_mark() -> None:
    for fake in (server(tools=[]), server(ttl=0)):
        store = MemoryStore()
        net = process(fake, store)
        net.ok("list_tools", connected(net))
        (write,) = [op.command for op in net.ops if isinstance(op.command, CompareAndSet)][1:]
        assert write.key == public_key() and write.value == unshared_mark()
        assert write.ttl == Limits().store_lease_expiry and write.expected == 0
        assert kinds(net)[-2:] == ["CompareAndSet", "ReleaseLease"]
        other = process(fake, store)  # another process: lists at once, no lease taken
        other.ok("list_tools", connected(other))
        assert kinds(other) == ["Read"] and listings(other).counts["unshared"] == 1
        assert lists(fake) == 2
    big = process(server(), MemoryStore(), limits=Limits(max_store_value_bytes=120))
    big.ok("list_tools", connected(big))
    assert listings(big).codec.unsealed == 1 and listings(big).counts["writes"] == 1  # the mark


def test_a_stale_or_unreadable_stored_listing_is_a_miss() -> None:
    fake, store = server(ttl=1_000), MemoryStore()
    first = process(fake, store)
    first.ok("list_tools", connected(first))
    late = process(fake, store)
    late.now = 5.0  # past the stored expiry (its wall clock moved on too)
    view = connected(late)
    late.ok("list_tools", view)
    assert not view.tools_from_cache and lists(fake) == 2
    assert listings(late).counts["misses"] == 2  # the read, and the read under the lease
    garbage = MemoryStore()
    garbage.execute(
        CompareAndSet(key=public_key(), value=b"\x00garbage", expected=0, ttl=60), now=0.0
    )
    planted = process(fake, garbage)
    view = connected(planted)
    planted.ok("list_tools", view)
    assert listings(planted).codec.misses["undecodable"] == 2 and lists(fake) == 3
    assert listings(planted).counts["writes"] == 1  # replaced, by the version read


# -- answers by hand --------------------------------------------------------------------


def parked(fake: FakeServer | None = None, **kw: Any) -> tuple[StoreNet, Any]:
    net = process(fake or server(), None, **kw)
    view = net.open()
    net.start("connect", view)
    net.answer_op(net.ops[-1], Missing())  # the era read
    net.answer_op(net.ops[-1], Acquired())  # its load lease
    net.answer_op(net.ops[-1], Missing())  # the read under it: this process probes
    assert net.wait(view).error is None
    net.start("list_tools", view)
    return net, view


def stored_value(now: float = 0.0, ttl: int = 60_000) -> bytes:
    page = CachedPage(
        tools=(Tool(name="echo", description="d", input_schema=b'{"type":"object"}'),),
        skipped=(),
        skipped_count=0,
        next_cursor=None,
        ttl_ms=ttl,
    )
    value = ValueCodec(1 << 20).seal("listing", listing_body([(None, page, WALL + now + 60)]))
    assert value is not None
    return value


def test_a_waiter_re_reads_until_the_loader_stored_it() -> None:
    fake = server()
    net, view = parked(fake, limits=Limits(store_load_wait=1.0))
    read = net.ops[-1]
    assert isinstance(read.command, Read) and read.command.key == public_key()
    net.answer_op(read, Missing())
    lease = net.ops[-1]
    assert isinstance(lease.command, AcquireLease)
    net.answer_op(lease, Held())
    assert net.driver.next_deadline() == pytest.approx(net.now + POLL_FIRST)
    net.tick()  # the first re-read
    net.answer_op(net.ops[-1], Missing())
    assert net.driver.next_deadline() == pytest.approx(POLL_FIRST * 3)  # doubled
    net.tick()
    net.answer_op(net.ops[-1], Found(value=stored_value(), version=4))
    assert done(net, view).error is None and view.tools_from_cache
    assert listings(net).counts["waits"] == 1 and listings(net).counts["hits"] == 1
    assert lists(fake) == 0
    # the stored expiry is a minute away, the page's ttl 60 s: fresh here until then
    hit = net.driver.cache.listing(
        URL, MODERN, None, now=net.now + 59, max_pages=9, max_recorded_skips=9
    )
    assert hit is not None


def test_a_stored_expiry_never_outlives_the_pages_ttl_here() -> None:
    net, view = parked()
    net.answer_op(net.ops[-1], Found(value=stored_value(ttl=1_000), version=1))  # 1 s ttl
    assert done(net, view).error is None and view.tools_from_cache
    cache = net.driver.cache
    assert cache.listing(URL, MODERN, None, now=net.now + 0.5, max_pages=9, max_recorded_skips=9)
    assert not cache.listing(URL, MODERN, None, now=net.now + 1, max_pages=9, max_recorded_skips=9)


def test_a_waiter_past_store_load_wait_lists_itself() -> None:
    fake = server()
    net, view = parked(fake, limits=Limits(store_load_wait=0.0))
    net.answer_op(net.ops[-1], Missing())
    net.answer_op(net.ops[-1], Held())
    assert done(net, view).error is None and not view.tools_from_cache
    assert lists(fake) == 1 and listings(net).counts["loads"] == 1
    assert listings(net).counts["waited_out"] == 1
    assert "ReleaseLease" not in kinds(net)  # it held none


def test_a_waiter_that_reads_the_unshared_mark_lists_at_once() -> None:
    """The loader's listing has no ttlMs: it stores nothing, and says so; the waiter
    does not re-read until store_load_wait for a key that will not be written."""
    fake, store = server(ttl=0), MemoryStore()
    waiter, view = parked(fake, limits=Limits(store_load_wait=30.0))
    waiter.answer_op(waiter.ops[-1], Missing())
    lease = waiter.ops[-1]
    assert isinstance(lease.command, AcquireLease)
    loader = process(fake, store)  # the process holding the lease lists meanwhile
    loader.ok("list_tools", connected(loader))
    waiter.answer_op(lease, Held())
    waiter.tick()  # the re-read, after POLL_FIRST
    poll = waiter.ops[-1]
    assert poll.command == Read(key=public_key())
    waiter.answer_op(poll, store.execute(poll.command, now=waiter.now))
    assert done(waiter, view).error is None and not view.tools_from_cache
    counts = listings(waiter).counts
    assert (counts["waits"], counts["unshared"], counts["waited_out"], counts["loads"]) == (
        1,
        1,
        0,
        1,
    )
    assert kinds(waiter) == ["Read", "AcquireLease", "Read"]  # no lease, nothing written
    assert lists(fake) == 2


def test_an_unshared_mark_over_max_store_value_bytes_is_not_written() -> None:
    net = process(server(ttl=0), MemoryStore(), limits=Limits(max_store_value_bytes=30))
    net.ok("list_tools", connected(net))
    assert listings(net).counts["writes"] == 0 and "CompareAndSet" not in kinds(net)
    assert kinds(net)[-1] == "ReleaseLease"


def test_the_read_under_the_lease_finds_another_workers_listing() -> None:
    fake = server()
    net, view = parked(fake)
    net.answer_op(net.ops[-1], Missing())
    net.answer_op(net.ops[-1], Acquired())
    recheck = net.ops[-1]
    assert isinstance(recheck.command, Read)
    net.answer_op(recheck, Found(value=stored_value(), version=2))
    assert done(net, view).error is None and view.tools_from_cache and lists(fake) == 0
    release = net.ops[-1]
    assert release.command == ReleaseLease(
        key=public_key() + ":lease", holder=f"{'07' * 12}:{view.conn_id}"
    )
    net.answer_op(release, StoreFailed(reason="unavailable", detail="down"))  # counted only
    assert listings(net).counts["failures"] == 1


@pytest.mark.parametrize("phase", ["read", "lease", "recheck"])
def test_a_failed_store_is_a_miss_and_the_work_item_goes_on(phase: str) -> None:
    fake = server()
    net, view = parked(fake)
    if phase != "read":
        net.answer_op(net.ops[-1], Missing())
    if phase == "recheck":
        net.answer_op(net.ops[-1], Acquired())
    net.answer_op(net.ops[-1], StoreFailed(reason="timeout", detail="slow"))
    assert done(net, view).error is None and lists(fake) == 1
    assert listings(net).counts["failures"] == 1
    assert ("ReleaseLease" in kinds(net)) is (phase == "recheck")  # its lease goes back


@pytest.mark.parametrize("phase", ["read", "recheck"])
def test_a_store_that_does_not_answer_delays_a_listing_by_store_timeout(phase: str) -> None:
    fake = server()
    net, view = parked(fake, limits=Limits(store_timeout=0.5))
    if phase == "recheck":
        net.answer_op(net.ops[-1], Missing())
        net.answer_op(net.ops[-1], Acquired())
    late = net.ops[-1]
    assert net.driver.next_deadline() == pytest.approx(net.now + 0.5)
    assert done(net, view).error is None and lists(fake) == 1
    assert listings(net).counts["timeouts"] == 1
    net.answer_op(late, Found(value=stored_value(), version=1))  # late: nothing waits
    assert listings(net).counts["hits"] == 0


def test_a_private_and_a_public_key_are_both_read() -> None:
    fake = server()
    net, _view = parked(fake, limits=Limits(store_timeout=0.5))
    # (no credential: the public key alone)
    assert [op.command.key for op in net.ops[-1:]] == [public_key()]  # type: ignore[union-attr]
    net2 = process(server(), None)
    headers = {"x-user": "alice"}
    view2 = net2.open(headers=headers)
    net2.start("connect", view2)
    net2.answer_op(net2.ops[-1], Missing())
    assert net2.wait(view2).error is None
    net2.start("list_tools", view2)
    public, private = net2.ops[-2:]
    assert private.command == Read(key=private_key(headers))
    net2.answer_op(public, Found(value=stored_value(), version=1))
    assert net2.driver.next_deadline() is not None  # (waits for the other key)
    net2.answer_op(private, Found(value=stored_value(), version=2))
    assert done(net2, view2).error is None and view2.tools_from_cache
    assert net.driver.next_deadline() is not None  # (the first Conn still waits)


def test_a_parked_listing_abandoned_or_closed() -> None:
    net, view = parked()
    net.answer_op(net.ops[-1], Missing())
    lease = net.ops[-1]
    net.driver.abandon(view.conn_id, now=net.now)
    net.answer_op(lease, Acquired())  # its Conn is gone: the lease goes back at once
    assert isinstance(net.ops[-1].command, ReleaseLease)
    other, view2 = parked()
    other.driver.close(now=other.now)
    other.pump()
    assert other.finished[view2.conn_id][-1].error is not None
    other.answer_op(other.ops[-2], Missing())  # nothing waits: ignored


def test_a_failed_listing_releases_its_lease() -> None:
    fake = server()
    fake.overrides["tools/list"] = lambda request, body: json_response(
        {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32000, "message": "no"}}
    )
    net, view = parked(fake)
    net.answer_op(net.ops[-1], Missing())
    net.answer_op(net.ops[-1], Acquired())
    net.answer_op(net.ops[-1], Missing())
    assert done(net, view).error is not None
    assert isinstance(net.ops[-1].command, ReleaseLease)


def test_list_tools_before_connect_is_not_parked() -> None:
    net = process(server(), None)
    view = net.open()
    fleet = net.driver.fleet
    assert fleet is not None
    record = net.driver._conns[view.conn_id]
    assert fleet.park_listing(record, lambda conn: None, 0.0) is None  # no version yet


# -- the pieces on their own -------------------------------------------------------------


def test_shared_listings_direct() -> None:
    from collections import deque
    from itertools import count

    outbox: deque[Any] = deque()
    shared = SharedListings(
        Limits(),
        outbox,
        count(1),
        secret=SECRET,
        holder="h",
        wall_clock=lambda: WALL,
        prefix="sansmcp",
    )
    bare = SimpleNamespace(
        cache=None, machine=SimpleNamespace(toolset=SimpleNamespace(cache_version=lambda: MODERN))
    )
    assert shared.park(bare, 0.0) is None  # type: ignore[arg-type]
    oauth = SimpleNamespace(auth=object(), machine=None)
    assert shared._identity(oauth) is None  # type: ignore[arg-type]
    assert shared.timer(42, 0.0) is None  # not a listing's wait
    shared.done(42)  # nothing to forget
    assert not shared.owns(42) and "0 waiting" in repr(shared)
    assert Fleet(Limits()).park_listing(bare, lambda c: None, 0.0) is None  # type: ignore[arg-type]
    Fleet(Limits()).failed(1)
    for secret in ("text", b""):
        with pytest.raises(CallerError, match="fleet_secret"):
            Fleet(Limits(), secret=secret)  # type: ignore[arg-type]


def test_a_conn_parked_twice_is_not_read_twice() -> None:
    net, view = parked()
    record = net.driver._conns[view.conn_id]
    assert listings(net).park(record, net.now) is None


def test_the_listing_codec() -> None:
    page = CachedPage(
        tools=(
            Tool(
                name="t",
                description="d",
                input_schema=b'{"type":"object"}',
                title="T",
                annotations={"readOnlyHint": True},
                output_schema=b'{"type":"object"}',
                task_support="optional",
            ),
        ),
        skipped=(SkippedTool(index=1, name=None, reason="bad"),),
        skipped_count=1,
        next_cursor="c",
        ttl_ms=5,
    )
    body = listing_body([(None, page, WALL)])
    opened = listing_from(
        json.loads(json.dumps(body)), modern=True, max_tool_bytes=10_000, max_pages=4
    )
    assert opened == [(None, page, WALL)]

    def broken(**change: Any) -> dict[str, Any]:
        raw = json.loads(json.dumps(body))
        raw["pages"][0].update(change)
        return raw

    bad = [
        {"pages": "x"},
        {"pages": []},
        {"pages": [1]},
        broken(cursor=3),
        broken(expires=1e300),
        broken(ttl_ms=0),
        broken(skipped=[[1, None]]),
        broken(tools=[{"name": ""}]),
    ]
    for raw in bad:
        assert listing_from(raw, modern=True, max_tool_bytes=10_000, max_pages=4) is None, raw
    assert listing_from(body, modern=True, max_tool_bytes=10_000, max_pages=0) is None


def test_the_journal_is_off_without_a_store() -> None:
    cache = ListingCache(max_entries=4, max_bytes=1 << 20)
    from sansmcp.core.cache import CallerCache

    settings = SimpleNamespace(endpoint=SimpleNamespace(url=URL), bearer_token=None, headers=[])
    caller = CallerCache(cache, settings, b"salt")  # type: ignore[arg-type]
    assert caller.journal is None
    caller.store_listing(MODERN, [], public=True)
    assert caller.journal is None


def test_writes_are_counted() -> None:
    net = process(server(), None)
    shared = listings(net)
    shared._emit(CompareAndSet(key="k", value=b"v", expected=0, ttl=1))
    op: StoreOp = net.driver.next_command()  # type: ignore[assignment]
    net.answer_op(op, Written(version=1))
    shared._emit(CompareAndSet(key="k", value=b"v", expected=0, ttl=1))
    op = net.driver.next_command()  # type: ignore[assignment]
    net.answer_op(op, Conflict(version=1))
    assert shared.counts["conflicts"] == 1
