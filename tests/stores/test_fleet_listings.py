"""A fleet shares tool listings through a real Redis (issue 28), on every runtime.

Each ``Client`` stands for one process of a fleet (its own driver, pool and local
cache); they share one ``RedisStore`` on a real ``redis-server``.  The servers are the
e2e suite's (the official SDK in a subprocess, sending ``ttlMs`` / ``cacheScope``);
their request log (by ``x-test-tag``) counts the ``tools/list`` requests each caller
sent.  ``Config.headers`` are part of a caller's credentials, so two Clients with the
same tag are the same caller, and a ``private`` listing is shared between them only.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from sansmcp import Config
from sansmcp.core.store import CompareAndSet, Found, Read, listing_key
from tests.e2e.conftest import Backend, Launcher, Server, backend, launch  # noqa: F401
from tests.e2e.test_observe import requests_logged

from .conftest import redis_store

_tags = itertools.count()


@pytest.fixture(scope="module")
def public(launch: Launcher) -> Server:  # noqa: F811
    return launch("--observe", "--cache-ttl", "60000", "--cache-scope", "public")


@pytest.fixture(scope="module")
def private(launch: Launcher) -> Server:  # noqa: F811
    return launch("--observe", "--cache-ttl", "60000", "--cache-scope", "private")


def new_tag(backend: Backend, name: str) -> str:  # noqa: F811
    return f"fleet-list-{backend.name}-{name}-{next(_tags)}"


def lists(server: Server, tag: str) -> int:
    return sum(1 for entry in requests_logged(server, tag) if entry["rpc"] == "tools/list")


async def work_item(backend: Backend, server: Server, tag: str, store: Any) -> dict[str, Any]:  # noqa: F811
    """One process's list-only work item: what it listed and what its fleet counted."""
    async with backend.Client(allow_loopback=True, store=store) as client:
        config = Config(url=server.url(), headers={"x-test-tag": tag})
        async with client.connect(config) as conn:
            tools = await conn.list_tools()
            fleet = client._driver.fleet
            listings = None if fleet is None else fleet.listings
            return {
                "names": [tool.name for tool in tools],
                "from_cache": conn.tools_from_cache,
                "version": conn.protocol_version,
                "counts": None if listings is None else dict(listings.counts),
                "misses": None if listings is None else dict(listings.codec.misses),
            }


def stored(store: Any, server: Server, version: str, identity: bytes | None = None) -> bool:
    key = listing_key(server.url(), version, "tools/list", None, identity)
    return isinstance(store.execute(Read(key=key)), Found)


def test_the_second_process_lists_nothing(
    backend: Backend,  # noqa: F811
    public: Server,
    redis_server: Any,
) -> None:
    store = redis_store(redis_server.url)
    first_tag, second_tag = new_tag(backend, "first"), new_tag(backend, "second")

    async def main() -> list[dict[str, Any]]:
        try:
            first = await work_item(backend, public, first_tag, store)
            await backend.wait_until(lambda: stored(store, public, first["version"]))
            second = await work_item(backend, public, second_tag, store)
            return [first, second]
        finally:
            await store.aclose()

    first, second = backend.run(main)
    assert first["names"] == second["names"] and first["names"]
    assert (first["from_cache"], second["from_cache"]) == (False, True)
    assert (lists(public, first_tag), lists(public, second_tag)) == (1, 0)
    assert first["counts"]["loads"] == 1 and first["counts"]["writes"] == 1
    assert second["counts"]["hits"] == 1 and second["counts"]["loads"] == 0
    store.close()


def test_a_private_listing_is_shared_by_one_credential_only(
    backend: Backend,  # noqa: F811
    private: Server,
    redis_server: Any,
) -> None:
    store = redis_store(redis_server.url)
    same, other = new_tag(backend, "same"), new_tag(backend, "other")

    async def main() -> list[dict[str, Any]]:
        try:
            first = await work_item(backend, private, same, store)
            identity = store.identity([(b"header:x-test-tag", same.encode())])
            await backend.wait_until(
                lambda: (
                    stored(store, private, first["version"], identity)
                    and stored(store, private, first["version"])
                )  # (the private mark)
            )
            public_key = listing_key(private.url(), first["version"], "tools/list", None, None)
            mark = store.execute(Read(key=public_key))  # the private mark, never the listing
            assert isinstance(mark, Found) and b'"scope":"private"' in mark.value
            again = await work_item(backend, private, same, store)  # another process
            stranger = await work_item(backend, private, other, store)  # another caller
            return [first, again, stranger]
        finally:
            await store.aclose()

    first, again, stranger = backend.run(main)
    assert first["names"] == again["names"] == stranger["names"]
    assert (first["from_cache"], again["from_cache"], stranger["from_cache"]) == (
        False,
        True,
        False,
    )
    assert lists(private, same) == 1  # two processes, one credential: one listing
    assert lists(private, other) == 1
    store.close()


def test_a_corrupted_listing_is_a_counted_miss(
    backend: Backend,  # noqa: F811
    public: Server,
    redis_server: Any,
) -> None:
    store = redis_store(redis_server.url)
    probe, tag = new_tag(backend, "probe"), new_tag(backend, "planted")

    async def main() -> dict[str, Any]:
        try:
            async with backend.Client(allow_loopback=True) as client:  # (no store)
                config = Config(url=public.url(), headers={"x-test-tag": probe})
                async with client.connect(config) as conn:
                    version = conn.protocol_version
            key = listing_key(public.url(), str(version), "tools/list", None, None)
            planted = store.execute(
                CompareAndSet(key=key, value=b'[1, "listing", {"pages": 7}]', expected=0, ttl=60)
            )
            assert type(planted).__name__ == "Written"
            return await work_item(backend, public, tag, store)
        finally:
            await store.aclose()

    item = backend.run(main)
    assert item["names"] and item["from_cache"] is False
    # the planted value: a miss, counted at the read and at the read again under the lease
    assert item["misses"]["shape"] == 2
    assert item["counts"]["loads"] == 1
    assert lists(public, tag) == 1
    store.close()


def test_redis_stopped_the_work_item_still_lists(
    backend: Backend,  # noqa: F811
    public: Server,
    own_redis: Any,
) -> None:
    store = redis_store(own_redis.url)
    own_redis.stop()
    tag = new_tag(backend, "down")

    async def main() -> dict[str, Any]:
        try:
            return await work_item(backend, public, tag, store)
        finally:
            await store.aclose()

    item = backend.run(main)
    assert item["names"] and item["from_cache"] is False
    assert item["counts"]["failures"] >= 1 and item["counts"]["loads"] == 1
    assert lists(public, tag) == 1
    store.close()


def test_eight_processes_started_at_once_list_once(
    public: Server, redis_server: Any, tmp_path: pathlib.Path
) -> None:
    """The cold fleet: every worker starts at the same moment; one lists, the others
    wait for its listing (the blocking adapter, one process each)."""
    tag, go = f"fleet-list-stampede-{next(_tags)}", tmp_path / "go"
    command = [sys.executable, "-m", "tests.stores.worker", "list", redis_server.url]
    workers = [
        subprocess.Popen([*command, public.url(), tag, str(go)], stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    go.touch()  # every worker is started: they begin together
    try:
        outs = [worker.communicate(timeout=120)[0] for worker in workers]
    finally:
        for worker in workers:  # (a failure above leaves no process or pipe behind)
            if worker.poll() is None:
                worker.kill()
            worker.communicate()
    assert [worker.returncode for worker in workers] == [0] * len(workers)
    reports = [json.loads(out) for out in outs]
    assert len({tuple(r["names"]) for r in reports}) == 1 and reports[0]["names"]
    assert lists(public, tag) == 1  # one tools/list for the fleet
    assert sum(r["counts"]["loads"] for r in reports) == 1
    assert sum(r["counts"]["hits"] for r in reports) == 7
