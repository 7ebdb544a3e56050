"""A work item for code with no event loop: a Celery or RQ task, a Django view, a thread pool.

``work_item`` is what a task queue would call, in whichever worker thread it runs; all
of them share the process's one :class:`~sansmcp.io_adapters.sync.Client`, so
sequential items reuse keep-alive sockets and concurrent ones to an HTTP/2 server
multiplex over one connection.  Run: ``python examples/worker.py URL [--allow-loopback]``
-- it calls the server's ``echo`` tool for 32 items from an 8-thread pool and prints the
answers in order.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

from sansmcp import Config, McpError
from sansmcp.io_adapters.sync import Client

CLIENT = Client(allow_loopback="--allow-loopback" in sys.argv)  # one per process


def work_item(url: str, text: str, token: str | None = None) -> str:
    """One task: connect, call a tool, return its text; a classified error otherwise."""
    with CLIENT.connect(Config(url=url, bearer_token=token)) as conn:
        result = conn.call_tool("echo", json.dumps({"text": text}).encode())
    if result.is_error:
        raise RuntimeError(f"the tool failed: {result.content}")
    return str(result.content[0].text)


def main(url: str) -> int:
    with CLIENT, ThreadPoolExecutor(max_workers=8) as pool:
        try:
            for answer in pool.map(lambda i: work_item(url, f"item {i}"), range(32)):
                print(answer)
        except McpError as exc:  # ConnectionFailed, Unauthorized or ServerAnswered
            print(f"failed: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
