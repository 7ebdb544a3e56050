"""Listings through the store (issue 28): a ``public`` listing loaded once per fleet
whatever the credential, a ``private`` one once per credential (the private mark), and a
listing made with 2025-11-25 tasks shared under its own key, never served without them.

Pure: each ``ClientDriver`` is one process; they share a ``MemoryStore`` or a test
answers each ``StoreOp`` by hand (``StoreNet``).
"""

from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace
from typing import Any

from sansmcp.core.cache import DISCOVER_METHOD, CachedPage, CallerCache, ListingCache
from sansmcp.core.commands import StoreOp
from sansmcp.core.fleet_listings import KEPT, PRIVATE_MARK, _keep
from sansmcp.core.limits import Limits
from sansmcp.core.store import (
    Acquired,
    AcquireLease,
    CompareAndSet,
    DeleteIfVersion,
    Found,
    Held,
    MemoryStore,
    Missing,
    Read,
    fleet_identity,
    lease_key,
    listing_key,
)
from sansmcp.core.store_values import ValueCodec
from sansmcp.core.tools import Tool

from .fakemcp import MODERN, FakeServer, Response, error, result
from .test_driver import URL
from .test_fleet_listings import (
    SECRET,
    connected,
    done,
    kinds,
    listings,
    lists,
    private_key,
    process,
    public_key,
    server,
    stored_value,
)
from .test_mcp_tasks_legacy import legacy_server

ALICE = {"x-user": "alice"}
BOB = {"x-user": "bob"}


def mark() -> bytes:
    value = ValueCodec(1 << 20).seal("listing", PRIVATE_MARK)
    assert value is not None
    return value


def parked_as(
    headers: dict[str, str] | None, limits: Limits | None = None, scope: str = "public"
) -> tuple[Any, Any]:
    """A Conn (with ``headers``) whose list_tools waits for its reads, answered by hand."""
    net = process(server(scope), None, limits=limits)
    view = net.open(headers=headers) if headers else net.open()
    net.start("connect", view)
    net.answer_op(net.ops[-1], Missing())  # (the era)
    assert net.wait(view).error is None
    net.start("list_tools", view)
    return net, view


def test_a_public_listing_is_loaded_once_whatever_the_credential() -> None:
    net, view = parked_as(BOB)
    public, private = net.ops[-2:]
    net.answer_op(public, Missing())
    net.answer_op(private, Missing())
    lease = net.ops[-1]  # the endpoint's lease, not bob's: alice's worker may hold it
    assert lease.command == AcquireLease(
        key=lease_key(public_key()), holder=lease.command.holder, ttl=15.0
    )
    net.answer_op(lease, Held())
    net.tick()  # bob re-reads both keys: alice's public listing is there
    public, private = net.ops[-2:]
    net.answer_op(private, Missing())
    net.answer_op(public, Found(value=stored_value(), version=3))
    assert done(net, view).error is None and view.tools_from_cache


def test_a_fleet_of_credentials_shares_one_public_listing() -> None:
    fake, store = server(), MemoryStore()
    first = process(fake, store)
    first.ok("list_tools", connected(first, headers=ALICE))
    for headers in (BOB, None):
        other = process(fake, store)
        view = connected(other, headers=headers) if headers else connected(other)
        other.ok("list_tools", view)
        assert view.tools_from_cache
    assert lists(fake) == 1


def test_the_private_mark_sends_a_credential_to_its_own_lease() -> None:
    net, view = parked_as(BOB, scope="private")
    public, private = net.ops[-2:]
    net.answer_op(private, Missing())
    net.answer_op(public, Found(value=mark(), version=5))
    lease = net.ops[-1]
    assert lease.command.key == lease_key(private_key(BOB))
    net.answer_op(lease, Acquired())
    public, private = net.ops[-2:]  # the read under its lease
    net.answer_op(public, Found(value=mark(), version=5))
    net.answer_op(private, Missing())
    assert done(net, view).error is None and not view.tools_from_cache
    # bob's private listing is stored under his key, the mark renewed on the version read
    writes = [op.command for op in net.ops if type(op.command).__name__ == "CompareAndSet"]
    listing = [w for w in writes if w.key.startswith("sansmcp:listing:")]
    assert {w.key: w.expected for w in listing} == {private_key(BOB): 0, public_key(): 5}


def test_a_waiter_that_reads_the_mark_takes_its_own_lease_and_waits_on() -> None:
    net, view = parked_as(BOB, Limits(store_load_wait=1.0))
    for op in net.ops[-2:]:
        net.answer_op(op, Missing())
    net.answer_op(net.ops[-1], Held())  # the endpoint's lease: another worker lists
    net.tick()  # re-read: that listing was private (the mark), bob's key still missing
    public, private = net.ops[-2:]
    net.answer_op(private, Missing())
    net.answer_op(public, Found(value=mark(), version=2))
    lease = net.ops[-1]
    assert lease.command.key == lease_key(private_key(BOB))
    net.answer_op(lease, Held())  # another of bob's workers lists his
    assert listings(net).counts["waits"] == 2
    net.tick()
    for op in net.ops[-2:]:  # the mark gone, his key not yet there: he waits on
        net.answer_op(op, Missing())
    assert net.driver.next_deadline() is not None and lists(net.handlers[8000]) == 0
    net.tick()
    public, private = net.ops[-2:]
    net.answer_op(public, Missing())
    net.answer_op(private, Found(value=stored_value(), version=9))
    assert done(net, view).error is None and view.tools_from_cache


def test_the_wait_is_bounded_from_the_first_lease_held() -> None:
    net, view = parked_as(BOB, Limits(store_load_wait=0.01))
    for op in net.ops[-2:]:
        net.answer_op(op, Missing())
    net.answer_op(net.ops[-1], Held())
    net.tick()
    public, private = net.ops[-2:]
    net.answer_op(private, Missing())
    net.answer_op(public, Found(value=mark(), version=2))
    net.answer_op(net.ops[-1], Held())  # its own lease held too: past the first wait
    assert done(net, view).error is None and not view.tools_from_cache
    assert lists(net.handlers[8000]) == 1


def test_without_an_identity_the_mark_means_list_at_once() -> None:
    net, view = parked_as(None, Limits(store_load_wait=1.0))
    net.answer_op(net.ops[-1], Missing())
    net.answer_op(net.ops[-1], Held())
    net.tick()
    net.answer_op(net.ops[-1], Found(value=mark(), version=2))  # the waiter's re-read
    assert done(net, view).error is None and lists(net.handlers[8000]) == 1
    assert kinds(net).count("AcquireLease") == 1


def test_a_mark_under_a_private_key_is_a_miss() -> None:
    net, _view = parked_as(BOB)
    public, private = net.ops[-2:]
    net.answer_op(private, Found(value=mark(), version=1))
    net.answer_op(public, Missing())
    assert net.ops[-1].command.key == lease_key(public_key())  # (not marked)


# -- 2025-11-25 tasks ---------------------------------------------------------------------

TASKS_VERSION = "2025-11-25"


def tasks_server() -> FakeServer:
    """A 2025-11-25 server whose one tool must run as a task; a public listing."""
    fake = legacy_server("required")

    def answer(request: Any, body: Any) -> Response:
        value = {"tools": fake.tools, "ttlMs": 60_000, "cacheScope": "public"}
        return fake.wrap(result(body["id"], value))

    fake.overrides["tools/list"] = answer
    return fake


def test_a_listing_made_with_tasks_is_shared_under_its_own_key() -> None:
    fake, store = tasks_server(), MemoryStore()
    first = process(fake, store)
    tools = first.ok("list_tools", connected(first, tasks=True))
    assert [t.task_support for t in tools] == ["required"] and lists(fake) == 1
    tasks_key = listing_key(URL, TASKS_VERSION + " tasks", "tools/list", None, None)
    assert isinstance(store.execute(Read(key=tasks_key), now=0.0), Found)
    assert isinstance(store.execute(Read(key=public_key(TASKS_VERSION)), now=0.0), Missing)
    second = process(fake, store)  # with tasks: served from the store, the tool kept
    view = connected(second, tasks=True)
    assert second.ok("list_tools", view) == tools and view.tools_from_cache
    assert lists(fake) == 1 and listings(second).codec.misses["shape"] == 0
    plain = process(fake, store)  # without: never that listing; its own (the tool skipped)
    view = connected(plain)
    assert plain.ok("list_tools", view) == [] and not view.tools_from_cache
    assert lists(fake) == 2
    reads = {op.command.key for op in plain.ops if isinstance(op.command, Read)}
    assert tasks_key not in reads and public_key(TASKS_VERSION) in reads


def test_a_fleet_identity_keys_the_tasks_listing_too() -> None:
    identity = fleet_identity(SECRET, [(b"header:x-user", b"alice")])
    fake = tasks_server()
    fake.overrides["tools/list"] = lambda request, body: fake.wrap(
        result(body["id"], {"tools": fake.tools, "ttlMs": 60_000, "cacheScope": "private"})
    )
    store = MemoryStore()
    net = process(fake, store)
    net.ok("list_tools", connected(net, headers=ALICE, tasks=True))
    key = listing_key(URL, TASKS_VERSION + " tasks", "tools/list", None, identity)
    assert isinstance(store.execute(Read(key=key), now=0.0), Found)


def test_a_listing_stale_before_it_is_shared_is_not_written() -> None:
    shared = listings(process(server(), None))
    page = CachedPage(
        tools=(Tool(name="t", description="", input_schema=b"{}"),),
        skipped=(),
        skipped_count=0,
        next_cursor=None,
        ttl_ms=1_000,
    )
    conn: Any = None  # (not read: nothing to write)
    shared._share(conn, MODERN, [(None, page, -5.0)], True, {}, 0.0)  # received 5 s ago
    assert shared.counts["writes"] == 0


# -- invalidation -------------------------------------------------------------------------


def stale_tool(fake: FakeServer) -> None:
    """Each call answers -32602: the listing it came from is stale."""
    fake.overrides["tools/call"] = lambda request, body: fake.wrap(
        error(body["id"], -32602, "stale")
    )


def test_an_invalidation_deletes_the_stored_listing_by_its_version() -> None:
    fake, store = server(), MemoryStore()
    net = process(fake, store)
    net.ok("list_tools", connected(net))
    stored = store.execute(Read(key=public_key()), now=0.0)
    assert isinstance(stored, Found)
    stale_tool(fake)
    view = connected(net)
    net.failure("call_tool", view, "echo", b"{}")
    delete = net.ops[-1].command
    assert delete == DeleteIfVersion(key=public_key(), version=stored.version)
    assert isinstance(store.execute(Read(key=public_key()), now=0.0), Missing)
    assert listings(net).counts["deletes"] == 1
    net.ok("list_tools", connected(net))  # listed from the server again, and stored
    assert lists(fake) == 2 and listings(net).counts["writes"] == 2


def test_a_listing_received_before_an_invalidation_is_stale_in_that_process() -> None:
    fake, store = server(), MemoryStore()
    first = process(fake, store)
    first.ok("list_tools", connected(first))
    old = store.execute(Read(key=public_key()), now=0.0)
    assert isinstance(old, Found)
    second = process(fake, store)
    view = connected(second)
    second.ok("list_tools", view)
    assert view.tools_from_cache  # (from the store: its version known)
    stale_tool(fake)
    second.now += 1.0  # (a second later, by the wall clock too)
    second.failure("call_tool", view, "echo", b"{}")
    # the old listing lands again after the delete (a write that was under way)
    store.execute(CompareAndSet(key=public_key(), value=old.value, expected=0, ttl=60), now=0.0)
    again = connected(second)
    second.ok("list_tools", again)
    assert not again.tools_from_cache and lists(fake) == 2
    assert listings(second).counts["misses"] == 2  # the read, and the read under the lease


def test_a_drop_without_a_known_version_deletes_nothing() -> None:
    net = process(server(), None)
    view = net.open(headers=ALICE)
    record = net.driver._conns[view.conn_id]
    shared = listings(net)
    shared._drop(record, MODERN)
    assert not any(isinstance(op, StoreOp) for op in net.driver._outbox)
    assert list(shared._stale) == [public_key(), private_key(ALICE)]


def journal_page() -> CachedPage:
    return CachedPage(
        tools=(Tool(name="t", description="", input_schema=b"{}"),),
        skipped=(),
        skipped_count=0,
        next_cursor=None,
        ttl_ms=60_000,
    )


def test_a_listing_stored_after_its_invalidation_replaces_it_without_a_delete() -> None:
    net = process(server(), None)
    view = net.open()
    record = net.driver._conns[view.conn_id]
    shared = listings(net)
    shared._versions[public_key()] = 7
    assert record.cache is not None
    pages = [(None, journal_page(), 0.0)]
    record.cache.journal = [(MODERN, None, False), (MODERN, pages, True)]
    shared.listed(record, 0.0)
    (op,) = [c for c in net.driver._outbox if isinstance(c, StoreOp)]
    assert isinstance(op.command, CompareAndSet) and op.command.expected == 7
    assert shared.counts["deletes"] == 0


def test_a_listing_invalidated_after_it_was_stored_is_not_shared() -> None:
    net = process(server(), None)
    view = net.open()
    record = net.driver._conns[view.conn_id]
    shared = listings(net)
    shared._versions[public_key()] = 7
    assert record.cache is not None
    pages = [(None, journal_page(), 0.0)]
    record.cache.journal = [(MODERN, pages, True), (MODERN, None, False)]
    shared.listed(record, 0.0)
    (op,) = [c for c in net.driver._outbox if isinstance(c, StoreOp)]
    assert op.command == DeleteIfVersion(key=public_key(), version=7)
    assert shared.counts["writes"] == 0


def test_a_failed_operation_shares_its_invalidations_and_keeps_its_listings() -> None:
    net = process(server(), None)
    view = net.open()
    record = net.driver._conns[view.conn_id]
    shared = listings(net)
    shared._versions[public_key()] = 7
    assert record.cache is not None
    kept = (MODERN, [(None, journal_page(), 0.0)], True)
    record.cache.journal = [kept, (MODERN, None, False)]
    shared.done(view.conn_id, record)
    (op,) = [c for c in net.driver._outbox if isinstance(c, StoreOp)]
    assert op.command == DeleteIfVersion(key=public_key(), version=7)
    assert record.cache.journal == [kept]


def test_what_a_process_remembers_is_bounded() -> None:
    kept: OrderedDict[str, Any] = OrderedDict()
    for n in range(KEPT + 1):
        _keep(kept, str(n), n)
    assert len(kept) == KEPT and "0" not in kept


def test_a_discover_invalidation_is_not_journaled() -> None:
    settings = SimpleNamespace(endpoint=SimpleNamespace(url=URL), bearer_token=None, headers=[])
    caller = CallerCache(ListingCache(max_entries=4, max_bytes=1 << 20), settings, b"s")  # type: ignore[arg-type]
    caller.journal = []
    caller.invalidate(MODERN, DISCOVER_METHOD)
    caller.invalidate(MODERN)
    assert caller.journal == [(MODERN, None, False)]
