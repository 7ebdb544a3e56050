"""A fleet shares era hints through a real Redis (issue 28, step 4), on every runtime.

Each ``Client`` here stands for one process of a fleet (its own driver and pool); they
share one ``RedisStore`` on a real ``redis-server``.  The servers are the e2e suite's
(the official SDK in a subprocess), whose request log (by ``x-test-tag``) counts what
each Client sent: with the store, only the first Client probes an endpoint's era.
"""

from __future__ import annotations

from typing import Any

import pytest

from sansmcp import Config
from sansmcp.core.store import Found, Read, era_key
from tests.e2e.conftest import Backend, Launcher, backend, launch  # noqa: F401
from tests.e2e.test_observe import requests_logged

from .conftest import redis_store

ERAS = {"modern": ("--observe",), "legacy": ("--observe", "--legacy-only")}


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
