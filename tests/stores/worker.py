"""A worker process of the store tests (issue 28): ``python -m tests.stores.worker MODE ...``.

* ``race URL KEY N GO``: once the file ``GO`` exists, add 1 to the counter under ``KEY``
  ``N`` times by read + compare-and-set, retrying on a conflict; print its wins (the
  version each write expected, the version it made, the count it wrote) and conflicts
  as JSON.
* ``hold URL KEY TTL``: take the lease ``KEY`` for ``TTL`` seconds, say ``held``, and
  wait to be killed.
* ``list URL MCP_URL TAG GO``: once ``GO`` exists, one list-only work item on the
  blocking adapter with the shared store (a waiter waits up to a minute for another's
  load); print its tool names and its listing counts as JSON.
* ``connect URL MCP_URL TAG GO``: once ``GO`` exists, connect once on the blocking
  adapter with the shared store (``URL`` ``none``: without a store; a waiter waits up
  to a minute for another's era probe); print the protocol version and the fleet's
  era counts as JSON.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

from sansmcp.core.store import (
    Acquired,
    AcquireLease,
    CompareAndSet,
    Conflict,
    Found,
    Read,
    Written,
)
from sansmcp.stores import RedisStore

SECRET = b"fleet-secret-of-the-tests-32byte"
MAX_ATTEMPTS = 100_000


def race(url: str, key: str, increments: int, go: pathlib.Path) -> int:
    store = RedisStore(url, secret=SECRET)
    for _ in range(60_000):  # the parent creates the file once all workers are started
        if go.exists():
            break
        time.sleep(0.001)
    wins: list[tuple[int, int, int]] = []
    conflicts = failures = 0
    for _ in range(MAX_ATTEMPTS):
        if len(wins) == increments:
            break
        current = store.execute(Read(key=key))
        count, version = (
            (int(current.value), current.version) if isinstance(current, Found) else (0, 0)
        )
        answer = store.execute(
            CompareAndSet(key=key, value=b"%d" % (count + 1), expected=version, ttl=600.0)
        )
        if isinstance(answer, Written):
            wins.append((version, answer.version, count + 1))
        elif isinstance(answer, Conflict):
            conflicts += 1
        else:
            failures += 1
    store.close()
    print(json.dumps({"wins": wins, "conflicts": conflicts, "failures": failures}))
    return 0 if len(wins) == increments else 1


def hold(url: str, key: str, ttl: float) -> int:
    store = RedisStore(url, secret=SECRET)
    if store.execute(AcquireLease(key=key, holder="doomed", ttl=ttl)) != Acquired():
        return 1
    print("held", flush=True)
    time.sleep(600)  # until killed
    return 1


def list_once(url: str, mcp_url: str, tag: str, go: pathlib.Path) -> int:
    from sansmcp import Config, Limits
    from sansmcp.io_adapters.sync import Client

    store = RedisStore(url, secret=SECRET)
    for _ in range(60_000):
        if go.exists():
            break
        time.sleep(0.001)
    limits = Limits(store_load_wait=60.0)  # (a loaded machine: the loader may be slow)
    with Client(allow_loopback=True, store=store, limits=limits) as client:
        config = Config(url=mcp_url, headers={"x-test-tag": tag})
        with client.connect(config) as conn:
            names = [tool.name for tool in conn.list_tools()]
        fleet = client._driver.fleet
        assert fleet is not None and fleet.listings is not None
        counts = dict(fleet.listings.counts)
    store.close()
    print(json.dumps({"names": names, "counts": counts}))
    return 0


def connect_once(url: str, mcp_url: str, tag: str, go: pathlib.Path) -> int:
    from sansmcp import Config, Limits
    from sansmcp.io_adapters.sync import Client

    store = None if url == "none" else RedisStore(url, secret=SECRET)
    for _ in range(60_000):
        if go.exists():
            break
        time.sleep(0.001)
    limits = Limits(store_load_wait=60.0)  # (a loaded machine: the prober may be slow)
    with Client(allow_loopback=True, store=store, limits=limits) as client:
        config = Config(url=mcp_url, headers={"x-test-tag": tag})
        with client.connect(config) as conn:
            version = str(conn.protocol_version)
        fleet = client._driver.fleet
        counts = None if fleet is None else dict(fleet.counts)
    if store is not None:
        store.close()
    print(json.dumps({"version": version, "counts": counts}))
    return 0


if __name__ == "__main__":
    mode, url, key, *rest = sys.argv[1:]
    if mode == "connect":
        sys.exit(connect_once(url, key, rest[0], pathlib.Path(rest[1])))
    if mode == "list":
        sys.exit(list_once(url, key, rest[0], pathlib.Path(rest[1])))
    if mode == "race":
        sys.exit(race(url, key, int(rest[0]), pathlib.Path(rest[1])))
    sys.exit(hold(url, key, float(rest[0])))
