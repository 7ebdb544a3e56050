"""A fleet's listings and era hints when its Redis fails (issue 28), on every runtime:
the work item goes on, the store's failure counted as a miss.

* Redis stopped, then restarted (empty) mid-run: items before, during and after;
* a slow Redis: a delaying TCP proxy between the store and a real ``redis-server``,
  so every store operation ends at ``Limits.store_timeout``;
* values planted in Redis at an era key (corrupted, oversized) and an oversized one at
  a listing key (a corrupted listing: ``test_fleet_listings.py``; every planted form
  at the store's level: ``test_redis_store.py``);
* a process holding a listing's load lease killed with SIGKILL: the others wait
  ``Limits.store_load_wait``, then list themselves;
* a full Redis (``maxmemory``, ``noeviction``: every write refused, reads served):
  listings and era hints are misses, the work items go on; a refresh of shared tokens
  (:class:`~sansmcp.core.fleet_tokens.RefreshFlight` on a ``RedisStore``) ends as the
  classified store error, the stored tokens untouched.

Each ``Client`` stands for one process of the fleet.  The server is the e2e suite's
(the official SDK in a subprocess); its request log (by ``x-test-tag``) counts what
each phase sent.  Nothing here asserts a duration.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from sansmcp import Config, ConnectionFailed, Limits
from sansmcp.core.fleet_tokens import Done, Failed, Issue, Refresh, RefreshFlight, seal_tokens
from sansmcp.core.oauth.store import Tokens
from sansmcp.core.store import (
    AcquireLease,
    CompareAndSet,
    Found,
    Read,
    Released,
    StoreFailed,
    Written,
    era_key,
    lease_key,
    listing_key,
    token_key,
)
from sansmcp.core.store_values import ValueCodec, tokens_from
from tests.e2e.conftest import Backend, Launcher, Server, backend, launch  # noqa: F401
from tests.e2e.test_observe import requests_logged
from tests.redis_server import RedisServer

from .conftest import _binary, redis_store

_tags = itertools.count()


@pytest.fixture(scope="module")
def public(launch: Launcher) -> Server:  # noqa: F811
    return launch("--observe", "--cache-ttl", "60000", "--cache-scope", "public")


def new_tag(backend: Backend, name: str) -> str:  # noqa: F811
    return f"fleet-fault-{backend.name}-{name}-{next(_tags)}"


def sent(server: Server, tag: str) -> dict[str, int]:
    """What the callers tagged ``tag`` sent: listings and era probes."""
    log = requests_logged(server, tag)
    return {
        "lists": sum(1 for entry in log if entry["rpc"] == "tools/list"),
        "probes": sum(1 for entry in log if entry["rpc"] == "server/discover"),
    }


async def work_item(
    backend: Backend,  # noqa: F811
    server: Server,
    tag: str,
    store: Any,
    limits: Limits | None = None,
) -> dict[str, Any]:
    """One process's work item: connect, list, close; what its fleet counted."""
    async with backend.Client(allow_loopback=True, store=store, limits=limits) as client:
        config = Config(url=server.url(), headers={"x-test-tag": tag})
        async with client.connect(config) as conn:
            names = [tool.name for tool in await conn.list_tools()]
            from_cache = conn.tools_from_cache
            version = str(conn.protocol_version)
        fleet = client._driver.fleet
        assert fleet is not None and fleet.listings is not None
        return {
            "names": names,
            "from_cache": from_cache,
            "version": version,
            "listings": dict(fleet.listings.counts),
            "listing_misses": dict(fleet.listings.codec.misses),
            "eras": dict(fleet.counts),
            "era_misses": dict(fleet.codec.misses),
        }


def stored(store: Any, key: str) -> bool:
    return isinstance(store.execute(Read(key=key)), Found)


def public_listing_key(server: Server, version: str) -> str:
    return listing_key(server.url(), version, "tools/list", None, None)


# -- Redis stopped and restarted ------------------------------------------------------


def test_redis_stopped_and_restarted_mid_run(
    backend: Backend,  # noqa: F811
    public: Server,
    own_redis: RedisServer,
) -> None:
    store = redis_store(own_redis.url)
    tags = {phase: new_tag(backend, phase) for phase in ("up", "down", "restarted")}
    era = era_key(public.url())

    async def phase(tag: str, items: int) -> list[dict[str, Any]]:
        done = [await work_item(backend, public, tag, store)]
        key = public_listing_key(public, done[0]["version"])
        if own_redis.process is not None:  # (an async adapter's writes may land after close)
            await backend.wait_until(lambda: stored(store, era) and stored(store, key))
        for _ in range(items - 1):
            done.append(await work_item(backend, public, tag, store))
        return done

    async def main() -> dict[str, list[dict[str, Any]]]:
        try:
            up = await phase(tags["up"], 3)
            own_redis.stop()
            down = await phase(tags["down"], 3)
            own_redis.start()  # the same socket, an empty server (no persistence)
            restarted = await phase(tags["restarted"], 3)
            return {"up": up, "down": down, "restarted": restarted}
        finally:
            await store.aclose()

    items = backend.run(main)
    names = {tuple(item["names"]) for phase in items.values() for item in phase}
    assert len(names) == 1 and next(iter(names))  # every work item listed the tools
    from_cache = {name: [item["from_cache"] for item in phase] for name, phase in items.items()}
    assert from_cache == {
        "up": [False, True, True],
        "down": [False, False, False],  # each a miss: listed from the server
        "restarted": [False, True, True],  # the empty store filled again
    }
    for item in items["down"]:  # the failures counted, never raised
        assert item["listings"]["failures"] >= 1 and item["listings"]["loads"] == 1
        assert item["eras"]["failures"] >= 1 and item["eras"]["hits"] == 0
    assert {name: sent(public, tag) for name, tag in tags.items()} == {
        "up": {"lists": 1, "probes": 1},
        "down": {"lists": 3, "probes": 3},
        "restarted": {"lists": 1, "probes": 1},
    }
    assert store.failures["unavailable"] >= 6  # (at least an era read and a listing's per item)
    store.close()


# -- a slow Redis --------------------------------------------------------------------


class DelayProxy:
    """A loopback TCP listener that relays to a Unix socket, each chunk ``delay`` seconds
    late in both directions: a Redis that answers, but too late.  Threads, joined by
    :meth:`stop`."""

    def __init__(self, target: str, delay: float) -> None:
        self.target = target
        self.delay = delay
        self.accepted = 0
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self._listener.getsockname()[1]}/0"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            for sock in (client, upstream):
                sock.settimeout(0.05)
                self._sockets.append(sock)
            for source, sink in ((client, upstream), (upstream, client)):
                pump = threading.Thread(target=self._pump, args=(source, sink), daemon=True)
                self._threads.append(pump)
                pump.start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                chunk = source.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk or self._stop.wait(self.delay):
                return
            try:
                sink.sendall(chunk)
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        for sock in [self._listener, *self._sockets]:
            sock.close()


def test_a_slow_redis_ends_each_operation_at_store_timeout(
    backend: Backend,  # noqa: F811
    public: Server,
    redis_server: RedisServer,
) -> None:
    limits = Limits(store_timeout=0.2)
    proxy = DelayProxy(str(redis_server.socket), delay=2.0)  # ten times the deadline
    store = redis_store(proxy.url, limits=limits)
    tag = new_tag(backend, "slow")

    async def main() -> list[dict[str, Any]]:
        try:
            return [await work_item(backend, public, tag, store, limits) for _ in range(2)]
        finally:
            await store.aclose()

    try:
        items = backend.run(main)
    finally:
        proxy.stop()
    for item in items:  # each goes on as a miss: it probes and lists itself
        assert item["names"] and item["from_cache"] is False
        assert item["listings"]["loads"] == 1 and item["listings"]["hits"] == 0
        listing_timeouts = item["listings"]["timeouts"] + item["listings"]["failures"]
        assert listing_timeouts >= 1
        assert item["eras"]["hits"] == 0
    assert sent(public, tag) == {"lists": 2, "probes": 2}
    assert proxy.accepted >= 1  # the store's operations went through the proxy
    # (a connection's handshake cut by the deadline counts as "unavailable")
    assert store.failures["timeout"] >= 1
    assert store.failures["refused"] == store.failures["failed"] == 0
    store.close()


# -- values planted in Redis --------------------------------------------------------

MAX = Limits().max_store_value_bytes
PLANTED = {
    "a corrupted era hint": ("era", b"12:P" + b"\xff{not an era"),
    "an oversized era hint": ("era", b"12:P" + b"v" * (MAX + 1)),
    "an oversized listing": ("listing", b"12:P" + b"v" * (MAX + 1)),
}


@pytest.mark.parametrize("what", sorted(PLANTED))
def test_a_planted_value_is_a_counted_miss_then_replaced(
    backend: Backend,  # noqa: F811
    public: Server,
    redis_server: RedisServer,
    what: str,
) -> None:
    import redis

    where, value = PLANTED[what]
    store = redis_store(redis_server.url)
    tag, probe = new_tag(backend, "planted"), new_tag(backend, "probe")

    async def main() -> list[dict[str, Any]]:
        try:
            async with backend.Client(allow_loopback=True) as client:  # (no store)
                config = Config(url=public.url(), headers={"x-test-tag": probe})
                async with client.connect(config) as conn:
                    version = str(conn.protocol_version)
            key = era_key(public.url()) if where == "era" else public_listing_key(public, version)
            with redis.Redis.from_url(redis_server.url) as raw:
                raw.set(key, value, ex=60)
            first = await work_item(backend, public, tag, store)
            await backend.wait_until(lambda: stored(store, key))  # replaced by the item's write
            second = await work_item(backend, public, tag, store)
            return [first, second]
        finally:
            await store.aclose()

    first, second = backend.run(main)
    assert first["names"] == second["names"] and first["names"]
    if where == "era":
        assert first["eras"]["hits"] == 0 and second["eras"]["hits"] == 1
    else:
        assert (first["from_cache"], second["from_cache"]) == (False, True)
        assert first["listings"]["misses"] >= 1 and first["listings"]["loads"] == 1
    if "oversized" in what:  # refused by the store: never read whole
        assert store.misses["oversized"] >= 1
    else:  # opened by the core, refused there: at the read and the read under the lease
        assert sum(first["era_misses"].values()) == 2
    assert sent(public, tag) == {"lists": 1, "probes": 1}  # the second item: both shared
    store.close()


# -- a lease holder killed -----------------------------------------------------------


def test_a_killed_lease_holder_delays_the_others_by_the_load_wait(
    backend: Backend,  # noqa: F811
    public: Server,
    redis_server: RedisServer,
) -> None:
    import redis

    limits = Limits(store_load_wait=0.3)
    store = redis_store(redis_server.url, limits=limits)
    tag, probe = new_tag(backend, "orphan"), new_tag(backend, "probe")

    async def version_of() -> str:
        async with backend.Client(allow_loopback=True) as client:  # (no store)
            config = Config(url=public.url(), headers={"x-test-tag": probe})
            async with client.connect(config) as conn:
                return str(conn.protocol_version)

    version = backend.run(version_of)
    key = public_listing_key(public, version)
    # the load lease is the endpoint's public key's, whatever the caller's credentials
    # (a public listing is loaded once per fleet)
    lease = lease_key(key)
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.stores.worker", "hold", redis_server.url, lease, "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        os.kill(holder.pid, signal.SIGKILL)  # the lease stays, its holder gone
        assert holder.wait(timeout=30) == -signal.SIGKILL
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGKILL)
        holder.communicate()

    async def main() -> list[dict[str, Any]]:
        try:
            items = await backend.gather(
                [lambda: work_item(backend, public, tag, store, limits) for _ in range(3)]
            )
            await backend.wait_until(lambda: stored(store, key))
            items.append(await work_item(backend, public, tag, store, limits))
            return items
        finally:
            await store.aclose()

    *waiters, late = backend.run(main)
    # each found the lease held and waited; past the wait one lists and stores, and a
    # waiter still polling may find its listing (served) or list itself too
    assert [item["listings"]["waits"] for item in waiters] == [1, 1, 1]
    loads = sum(item["listings"]["loads"] for item in waiters)
    assert loads >= 1 and loads + sum(item["listings"]["hits"] for item in waiters) == 3
    assert all(item["names"] == late["names"] for item in waiters) and late["names"]
    assert late["from_cache"] is True and late["listings"]["hits"] == 1
    assert late["listings"]["waits"] == 0  # the listing stored: no lease asked
    assert sent(public, tag)["lists"] == loads
    with redis.Redis.from_url(redis_server.url) as raw:  # the orphan lease outlived the waits
        assert raw.exists(lease) == 1
    store.close()


# -- a full Redis --------------------------------------------------------------------


@pytest.fixture
def full_redis(tmp_path: Any) -> Iterator[RedisServer]:
    """A server of the test's own with a tiny ``maxmemory`` and ``noeviction``, to fill
    (:func:`fill`)."""
    server = RedisServer(_binary(), tmp_path, maxmemory="2mb")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def fill(server: RedisServer) -> int:
    """Write 1 KB values until Redis refuses one (out of memory); then pin ``maxmemory``
    below what is used, so an allocator's fluctuation cannot make room again.  The keys
    written."""
    import redis

    with redis.Redis.from_url(server.url) as raw:
        written = 0
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for written in range(100_000):  # (2 MB: ~2,000)
                raw.set(f"filler:{written}", b"x" * 1000)
        used = raw.info("memory")["used_memory"]
        raw.config_set("maxmemory", used // 2)
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            raw.set("probe", b"x")
    return written


def test_a_full_redis_is_a_miss_for_listings_and_eras(
    backend: Backend,  # noqa: F811
    public: Server,
    full_redis: RedisServer,
) -> None:
    import redis

    fill(full_redis)
    store = redis_store(full_redis.url)
    tag = new_tag(backend, "full")

    def refusals(items: list[dict[str, Any]]) -> int:
        """Per item: its listing's load lease and write, its era's load lease (one per
        era load) and its era hint's writes (one after each operation that succeeded
        while none was stored or in flight)."""
        return sum(
            1 + i["listings"]["writes"] + i["eras"]["loads"] + i["eras"]["writes"] for i in items
        )

    async def main() -> list[dict[str, Any]]:
        try:
            items = [await work_item(backend, public, tag, store) for _ in range(3)]
            # the writes are refused too, once performed (an adapter may end them late)
            await backend.wait_until(lambda: store.failures["refused"] >= refusals(items))
            return items
        finally:
            await store.aclose()

    items = backend.run(main)
    assert {tuple(item["names"]) for item in items} == {tuple(items[0]["names"])}
    assert items[0]["names"]  # every work item listed the tools
    for item in items:  # each a miss: it probed and listed from the server
        assert item["from_cache"] is False
        listings = item["listings"]
        assert listings["hits"] == 0 and listings["loads"] == 1 and listings["failures"] >= 1
        assert listings["waits"] == 0  # the lease refused: no wait, it lists at once
        assert listings["writes"] == 1  # (refused: a miss again for the next item)
        assert item["eras"]["hits"] == 0 and item["eras"]["loads"] == 1
        assert 1 <= item["eras"]["writes"] <= 2
    assert sent(public, tag) == {"lists": 3, "probes": 3}
    assert store.failures["refused"] == refusals(items)  # every write, and only writes
    assert store.failures["unavailable"] == store.failures["timeout"] == 0
    assert store.failures["failed"] == 0 and store.misses == {
        "corrupt": 0,
        "oversized": 0,
        "sealing": 0,
    }
    with redis.Redis.from_url(full_redis.url) as raw:  # nothing of the fleet was stored
        assert [key for key in raw.keys("*") if not key.startswith(b"filler:")] == []
    store.close()


def test_a_token_refresh_on_a_full_redis_ends_as_a_store_error(full_redis: RedisServer) -> None:
    """The store's level: a worker's refresh flight (the pure machine, its commands
    performed by a blocking ``RedisStore``) when Redis fills under it."""
    limits = Limits()
    store = redis_store(full_redis.url, limits=limits)
    codec = ValueCodec(limits.max_store_value_bytes)
    key = token_key("https://as.example", "client-1", "https://mcp.example/mcp", None)
    old = Tokens(access_token="a1", refresh_token="r1", expires_at=0.0, issuer="https://as.example")
    new = Tokens(access_token="a2", refresh_token="r2", expires_at=60.0, issuer=old.issuer)
    first = seal_tokens(codec, key, old, 0)
    assert first is not None
    stored = store.execute(first)
    assert isinstance(stored, Written)
    # a worker takes the lease and re-reads (the same version: it refreshes) ...
    flight = RefreshFlight(key, old, stored.version, holder="w1", limits=limits, codec=codec, now=0)
    step = flight.start()
    assert isinstance(step, Issue) and isinstance(step.command, AcquireLease)
    step = flight.answer(store.execute(step.command), now=0)
    assert isinstance(step, Issue) and isinstance(step.command, Read)
    assert isinstance(flight.answer(store.execute(step.command), now=0), Refresh)
    fill(full_redis)  # ... Redis fills while the token endpoint answers
    step = flight.refreshed(new)
    assert isinstance(step, Issue) and isinstance(step.command, CompareAndSet)
    refused = store.execute(step.command)
    assert isinstance(refused, StoreFailed) and refused.reason == "refused"
    done = flight.answer(refused, now=0)
    assert isinstance(done, Done) and isinstance(done.outcome, Failed)
    error = done.outcome.error
    assert isinstance(error, ConnectionFailed) and error.cause == "store"
    assert "storing refreshed tokens" in str(error) and "refused" in str(error)
    assert done.outcome.unsaved == new  # usable for the work item at hand, not stored
    assert done.release is not None  # a delete: allowed on a full Redis
    assert isinstance(store.execute(done.release), Released)
    found = store.execute(Read(key=key))  # the old tokens stay, never overwritten
    assert isinstance(found, Found) and found.version == stored.version
    assert codec.open("tokens", found.value, tokens_from) == old
    # another worker's flight on the full Redis: its lease is refused, nothing else done
    other = RefreshFlight(key, old, stored.version, holder="w2", limits=limits, codec=codec, now=0)
    step = other.start()
    assert isinstance(step, Issue) and isinstance(step.command, AcquireLease)
    done = other.answer(store.execute(step.command), now=0)
    assert isinstance(done, Done) and isinstance(done.outcome, Failed)
    assert done.outcome.error.cause == "store" and done.outcome.unsaved is None
    assert "taking the refresh lease" in str(done.outcome.error) and done.release is None
    assert store.failures == {"unavailable": 0, "timeout": 0, "refused": 2, "failed": 0}
    assert isinstance(store.execute(Read(key=key)), Found)
    store.close()
