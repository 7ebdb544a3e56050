"""A fleet shares era hints through a real Redis (issue 28, step 4), on every runtime.

Each ``Client`` here stands for one process of a fleet (its own driver and pool); they
share one ``RedisStore`` on a real ``redis-server``.  The servers are the e2e suite's
(the official SDK in a subprocess), whose request log (by ``x-test-tag``) counts what
each Client sent: with the store, only the first Client probes an endpoint's era.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import pathlib
import subprocess
import sys
import threading
from typing import Any

import pytest

from sansmcp import Config, ConnectionFailed
from sansmcp.core.fleet_eras import NO_HINT_MARK
from sansmcp.core.limits import Limits
from sansmcp.core.store import (
    Acquired,
    AcquireLease,
    Found,
    Held,
    Read,
    StoreAnswer,
    StoreCommand,
    era_key,
)
from sansmcp.core.store_values import ValueCodec
from tests.e2e.conftest import Backend, Launcher, Server, backend, free_port, launch  # noqa: F401
from tests.e2e.test_observe import requests_logged

from .conftest import redis_store

ERAS = {"modern": ("--observe",), "legacy": ("--observe", "--legacy-only")}
_runs = itertools.count()


def probes(server: Server, tag: str) -> int:
    """The era probes the callers tagged ``tag`` sent: server/discover, or its 400 from
    a legacy-only server."""
    log = requests_logged(server, tag)
    return sum(1 for e in log if e["rpc"] == "server/discover" or e["status"] == 400)


@pytest.mark.parametrize("era", sorted(ERAS))
def test_only_the_first_process_probes(
    backend: Backend,  # noqa: F811
    launch: Launcher,  # noqa: F811
    redis_server: Any,
    era: str,
) -> None:
    server = launch(*ERAS[era])
    store = redis_store(redis_server.url)
    tag = f"fleet-{backend.name}-{era}"

    async def connect(name: str, shared: Any) -> str:
        async with backend.Client(allow_loopback=True, store=shared) as client:
            config = Config(url=server.url(), headers={"x-test-tag": f"{tag}-{name}"})
            async with client.connect(config) as conn:
                return str(conn.protocol_version)

    def era_stored() -> bool:
        return isinstance(store.execute(Read(key=era_key(server.url()))), Found)

    async def stored() -> str:
        await backend.wait_until(era_stored)
        return "stored"

    async def main() -> list[str]:
        try:
            return [
                await connect("first", store),
                await stored(),  # (the first's write of the era may land after its close)
                await connect("second", store),  # another process: the store's hint
                await connect("alone", None),  # a process without the store probes again
            ]
        finally:
            await store.aclose()  # (the asyncio client's connections, on their loop)

    first, _, second, alone = backend.run(main)
    assert first == second == alone
    logs = {name: requests_logged(server, f"{tag}-{name}") for name in ("first", "second", "alone")}
    probes = {  # server/discover, or its 400 from a legacy-only server
        name: sum(1 for e in log if e["rpc"] == "server/discover" or e["status"] == 400)
        for name, log in logs.items()
    }
    assert probes == {"first": 1, "second": 0, "alone": 1}, logs
    if era == "modern":  # a known modern endpoint: connect sends nothing at all
        assert logs["second"] == []
    else:  # a known legacy one: initialize at once
        assert [entry["rpc"] for entry in logs["second"]][:1] == ["initialize"]
    assert store.failures == {"unavailable": 0, "timeout": 0, "refused": 0, "failed": 0}
    store.close()


def started_at_once(
    store_url: str, server: Server, tag: str, go: pathlib.Path, count: int = 4
) -> list[dict[str, Any]]:
    """``count`` worker processes connect once each, all starting at the same moment
    (the blocking adapter, one process each): their reports."""
    command = [sys.executable, "-m", "tests.stores.worker", "connect", store_url, server.url()]
    workers = [
        subprocess.Popen([*command, tag, str(go)], stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    go.touch()  # every worker is started: they begin together
    try:
        outs = [worker.communicate(timeout=120)[0] for worker in workers]
    finally:
        for worker in workers:  # (a failure above leaves no process or pipe behind)
            if worker.poll() is None:
                worker.kill()
            worker.communicate()
    assert [worker.returncode for worker in workers] == [0] * count
    return [json.loads(out) for out in outs]


@pytest.mark.parametrize("era", sorted(ERAS))
def test_four_processes_started_at_once_probe_a_cold_endpoint_once(
    launch: Launcher,  # noqa: F811
    redis_server: Any,
    tmp_path: pathlib.Path,
    era: str,
) -> None:
    """The cold fleet: every worker starts at the same moment against an endpoint whose
    era no one knows; with Redis one probes (holding the era's load lease), the others
    wait for its hint.  Without a store each probes: what proves the test can fail."""
    server = launch(*ERAS[era])
    run = next(_runs)
    shared, alone = f"fleet-eras-shared-{era}-{run}", f"fleet-eras-alone-{era}-{run}"
    reports = started_at_once(redis_server.url, server, shared, tmp_path / "go")
    assert probes(server, shared) == 1  # one era probe for the fleet
    assert len({report["version"] for report in reports}) == 1
    counts = [report["counts"] for report in reports]
    assert sum(c["loads"] for c in counts) == 1 and sum(c["hits"] for c in counts) == 3
    assert sum(c["writes"] for c in counts) == 1
    alone_reports = started_at_once("none", server, alone, tmp_path / "go-alone")
    assert [report["counts"] for report in alone_reports] == [None] * 4
    assert probes(server, alone) == 4  # without the store: each process probes
    store = redis_store(redis_server.url)
    assert isinstance(store.execute(Read(key=era_key(server.url()))), Found)
    store.close()


# -- the lease holder's probe fails ----------------------------------------------------


class Gate:
    """One process's view of the fleet's store: the process that takes the era's load
    lease is held at its read under the lease until another process found that lease
    held -- so one probes while the other waits, whatever the scheduling."""

    def __init__(self, inner: Any, key: str, held: threading.Event) -> None:
        self.inner = inner
        self.fleet_secret = getattr(inner, "fleet_secret", None)
        self.key, self.held = key, held
        self.loader = False

    def _before(self, command: StoreCommand) -> bool:
        return self.loader and isinstance(command, Read) and command.key == self.key

    def _after(self, command: StoreCommand, answer: StoreAnswer) -> StoreAnswer:
        if isinstance(command, AcquireLease) and command.key.startswith(self.key):
            self.loader = self.loader or isinstance(answer, Acquired)
            if isinstance(answer, Held):
                self.held.set()
        return answer

    def execute(self, command: StoreCommand) -> StoreAnswer:
        if self._before(command):
            self.held.wait(10)
        return self._after(command, self.inner.execute(command))

    async def aexecute(self, command: StoreCommand) -> StoreAnswer:
        if self._before(command):
            await asyncio.to_thread(self.held.wait, 10)
        return self._after(command, await self.inner.aexecute(command))


def test_a_failed_probe_under_the_lease_lets_the_waiter_probe_at_once(
    backend: Backend,  # noqa: F811
    redis_server: Any,
) -> None:
    """Nothing listens at the endpoint: the process holding the era's load lease is
    refused, leaves the no hint mark and gives the lease back; the one that found the
    lease held reads the mark and probes at once -- not after store_load_wait (10 s)."""
    url = f"http://127.0.0.1:{free_port()}/mcp"  # bound, then closed: refused
    key = era_key(url)
    store = redis_store(redis_server.url)
    limits = Limits(store_timeout=12.0, store_load_wait=10.0)
    held = threading.Event()

    async def one(shared: Any) -> dict[str, Any]:
        async with backend.Client(allow_loopback=True, store=shared, limits=limits) as client:
            with pytest.raises(ConnectionFailed):
                async with client.connect(Config(url=url)):
                    pass
            assert client._driver.fleet is not None
            return dict(client._driver.fleet.counts)

    async def main() -> list[dict[str, Any]]:
        try:
            first, second = Gate(store, key, held), Gate(store, key, held)
            return await backend.gather([lambda: one(first), lambda: one(second)])
        finally:
            await store.aclose()

    counts = backend.run(main)
    loader, waiter = sorted(counts, key=lambda c: int(c["waits"]))
    assert held.is_set()
    assert (loader["waits"], loader["loads"], loader["writes"]) == (0, 1, 1)  # the mark
    assert (waiter["waits"], waiter["loads"], waiter["writes"]) == (1, 1, 0)
    assert waiter["unshared"] == 1 and waiter["waited_out"] == 0
    assert loader["unshared"] == loader["waited_out"] == 0
    found = store.execute(Read(key=key))
    assert isinstance(found, Found) and found.value == ValueCodec(1 << 20).seal("era", NO_HINT_MARK)
    store.close()
