"""Fixtures of the store tests (issue 28): a real ``redis-server`` and one parametrized
``store`` that runs every operation against the in-process store and against Redis
(blocking, asyncio and sealed at rest)."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sansmcp.core.limits import Limits
from sansmcp.core.store import MemoryStore, StoreAnswer, StoreCommand
from tests.redis_server import RedisServer
from tests.tiers import missing_server

SECRET = b"fleet-secret-of-the-tests-32byte"
KEYS = [("k2", b"\x02" * 32), ("k1", b"\x01" * 16)]


def _binary() -> str:
    binary = RedisServer.find()
    if binary is None:
        missing_server(
            "redis-server not found (PATH, /usr/bin/redis-server, $SANSMCP_REDIS_SERVER)"
        )
    return binary


@pytest.fixture(scope="session")
def redis_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the session (each test flushes it first: ``redis_server``)."""
    server = RedisServer(_binary(), tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server(redis_session: RedisServer) -> RedisServer:
    import redis

    with redis.Redis.from_url(redis_session.url) as client:
        client.flushall()
    return redis_session


@pytest.fixture
def own_redis(tmp_path: pathlib.Path) -> Iterator[RedisServer]:
    """A server of the test's own, to stop, pause and restart."""
    server = RedisServer(_binary(), tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Runner:
    """Runs store commands one at a time on one kind of store."""

    def __init__(self, name: str, store: Any, loop: asyncio.AbstractEventLoop | None = None):
        self.name = name
        self.store = store
        self.loop = loop

    def run(self, command: StoreCommand) -> StoreAnswer:
        if isinstance(self.store, MemoryStore):
            return self.store.execute(command, now=time.monotonic())
        if self.loop is not None:
            answer: StoreAnswer = self.loop.run_until_complete(self.store.aexecute(command))
            return answer
        answer = self.store.execute(command)
        return answer

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.store.aclose())
            self.loop.close()
        elif not isinstance(self.store, MemoryStore):
            self.store.close()


def redis_store(url: str, *, sealed: bool = False, limits: Limits | None = None) -> Any:
    from sansmcp.stores import RedisStore

    return RedisStore(url, secret=SECRET, at_rest=KEYS if sealed else None, limits=limits)


@pytest.fixture(params=["memory", "redis", "redis-asyncio", "redis-sealed"])
def store(request: pytest.FixtureRequest) -> Iterator[Runner]:
    """Every store, one at a time: the contract is the same."""
    if request.param == "memory":
        runner = Runner("memory", MemoryStore())
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        loop = asyncio.new_event_loop() if request.param == "redis-asyncio" else None
        runner = Runner(
            request.param, redis_store(server.url, sealed="sealed" in request.param), loop
        )
    try:
        yield runner
    finally:
        runner.close()
