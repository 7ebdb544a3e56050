"""A worker of the public-API refresh race (issue 28):
``python -m tests.stores.client_worker STORE REDIS_URL MCP_URL ITEMS GO``.

One blocking ``sansmcp`` ``Client`` for the process, as a platform's worker has:
``STORE`` ``redis``: ``Client(store=RedisStore(REDIS_URL))``, the fleet's grant in it;
``local``: ``Client(store=LocalStore())``, holding at start a copy of every value the
test stored in Redis (the grant as each process would have kept it alone).  Once the
file ``GO`` exists, ``ITEMS`` work items on the OAuth-gated MCP server ``MCP_URL``, a
pause apart: connect, call ``echo`` (and list the tools every other item), close.  The
``OAuth`` has no authorization step: a grant lost ends an item as
``Unauthorized(cause="authorization_required")``.  Prints its counts as JSON: items
``ok``, ``unauthorized`` by cause, and any other error by type and cause.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
from collections import Counter
from typing import Any

from sansmcp import Config, Limits, McpError, OAuth, Unauthorized
from sansmcp.core.store import CompareAndSet, Found, Read
from sansmcp.io_adapters.sync import Client
from sansmcp.stores import LocalStore, RedisStore

SECRET = b"fleet-secret-of-the-tests-32byte"
REDIRECT = "http://127.0.0.1:9/callback"
PAUSE = 0.05  # seconds between two work items: ITEMS of them outlast several token lifetimes
# a loaded machine (8 workers, Redis, the servers on a few cores): no store or lease wait
# may end a work item; none of these bounds is what the race tests
LIMITS = Limits(store_timeout=10.0, store_load_wait=60.0)


def config(mcp_url: str) -> Config:
    """What every worker (and the test's first authorization) connects with."""
    return Config(url=mcp_url, oauth=OAuth(redirect_uri=REDIRECT))


def copied(redis_url: str) -> LocalStore:
    """A LocalStore holding every value stored in Redis now (read through the store)."""
    import redis

    local = LocalStore()
    remote = RedisStore(redis_url, secret=SECRET)
    with redis.Redis.from_url(redis_url) as raw:
        keys = [key.decode() for key in raw.scan_iter()]
    for key in keys:
        found = remote.execute(Read(key=key))
        if isinstance(found, Found):
            local.execute(CompareAndSet(key=key, value=found.value, expected=0, ttl=3600.0))
    remote.close()
    return local


def item(client: Client, cfg: Config, index: int) -> None:
    with client.connect(cfg) as conn:
        result = conn.call_tool("echo", json.dumps({"text": f"item {index}"}).encode())
        assert not result.is_error
        if index % 2:
            assert "echo" in [tool.name for tool in conn.list_tools()]


def work(kind: str, redis_url: str, mcp_url: str, items: int, go: pathlib.Path) -> int:
    store: Any = (
        RedisStore(redis_url, secret=SECRET, limits=LIMITS)
        if kind == "redis"
        else copied(redis_url)
    )
    counts: Counter[str] = Counter()
    with Client(allow_loopback=True, store=store, limits=LIMITS) as client:
        cfg = config(mcp_url)
        for _ in range(60_000):  # the parent creates the file once all workers are started
            if go.exists():
                break
            time.sleep(0.001)
        for index in range(items):
            try:
                item(client, cfg, index)
            except Unauthorized as error:
                counts[f"unauthorized:{error.cause}"] += 1
            except McpError as error:
                counts[f"{type(error).__name__}:{getattr(error, 'cause', None)}"] += 1
            else:
                counts["ok"] += 1
            time.sleep(PAUSE)
    if kind == "redis":
        store.close()
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    kind, redis_url, mcp_url, items, go = sys.argv[1:]
    sys.exit(work(kind, redis_url, mcp_url, int(items), pathlib.Path(go)))
