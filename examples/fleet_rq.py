"""A fleet of RQ workers sharing what their Clients learn through one Redis (issue 28).

``work_item`` is an RQ job: one work item on the blocking adapter -- connect, list the
tools, call ``add``, close -- with a ``Client`` of its own: RQ's default worker forks a
process (its "work horse") for every job, so nothing a job's ``Client`` learns outlives
the job in memory (``SimpleWorker`` runs jobs in its own process: the same code serves).
With ``store=``, the era of the endpoint and its tool listing (when the server marks it
``cacheScope: "public"`` with a ``ttlMs``) go to Redis, and the fleet probes and lists
the server once, not once per job.

Start workers (Redis is RQ's broker and the store; every worker has the same secret)::

    export FLEET_REDIS_URL=redis://localhost:6379/0 FLEET_SECRET=$(openssl rand -hex 32)
    rq worker --url "$FLEET_REDIS_URL" --path examples fleet

and enqueue jobs from anywhere: ``python examples/fleet_rq.py MCP_URL 100`` enqueues
100 ``add`` items, waits for them, and prints each answer.  ``FLEET_ALLOW_LOOPBACK=1``
lets the jobs reach a server on loopback (a local test server).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from sansmcp import Config
from sansmcp.io_adapters.sync import Client
from sansmcp.stores import RedisStore

_STORES: dict[int, RedisStore] = {}  # pid -> its store (a forked process opens its own)


def store() -> RedisStore:
    """This process's connection to the fleet's store."""
    pid = os.getpid()
    if pid not in _STORES:
        url, secret = os.environ["FLEET_REDIS_URL"], os.environ["FLEET_SECRET"].encode()
        _STORES.clear()  # (a forked child's copy of its parent's: never used by the child)
        _STORES[pid] = RedisStore(url, secret=secret)
    return _STORES[pid]


def work_item(url: str, a: int, b: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """One job: the sum the server's ``add`` tool answers, the tools listed, and whether
    the listing cost no request (``cached``: the fleet's store served it).

    A failure raises a classified error (``ConnectionFailed``, ``Unauthorized``,
    ``ServerAnswered``), which RQ records as the job's failure.  The Client is the job's
    own (under RQ's default worker the job's process ends with it); closing it waits, at
    most ``Limits.store_timeout``, for its writes to the store still under way."""
    loopback = os.environ.get("FLEET_ALLOW_LOOPBACK") == "1"
    config = Config(url=url, headers=headers or {})
    with Client(store=store(), allow_loopback=loopback) as client, client.connect(config) as conn:
        tools = [tool.name for tool in conn.list_tools()]
        cached = conn.tools_from_cache
        result = conn.call_tool("add", json.dumps({"a": a, "b": b}).encode())
    if result.is_error or not result.content:
        raise RuntimeError(f"add failed: {result.content}")
    return {"sum": int(str(result.content[0].text)), "tools": tools, "cached": cached}


def main(url: str, count: int) -> int:
    import redis
    from rq import Queue

    queue = Queue("fleet", connection=redis.Redis.from_url(os.environ["FLEET_REDIS_URL"]))
    jobs = [queue.enqueue("fleet_rq.work_item", url, i, i) for i in range(count)]
    while any(job.get_status() not in ("finished", "failed") for job in jobs):
        time.sleep(0.1)
    failed = 0
    for job in jobs:
        value = job.return_value()
        if value is None:
            failed += 1
            print(f"{job.id}: failed", file=sys.stderr)
        else:
            print(value["sum"], "(the listing from the store)" if value["cached"] else "")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
