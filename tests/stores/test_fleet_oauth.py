"""OAuth shared by a fleet through its store (issue 28), on every runtime, with the real
parts: the e2e suite's MCP server behind its bearer gate (the official SDK in a
subprocess, ``--oauth``), its authorization server on loopback, and the store each test
runs over -- ``LocalStore`` (one process's) and ``RedisStore`` on a real ``redis-server``
-- from one fixture (``fleet``).

Each ``Client(store=...)`` stands for one process of the fleet: its own driver, pool and
authorizer; what they share is the store only.  ``OAuth.store`` is given to each as a
``MemoryTokenStore`` it must not use: with a shared store the fleet's is the one truth.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sansmcp import Config, ConnectionFailed, MemoryTokenStore, OAuth, Unauthorized
from sansmcp.core.fleet_listings import UNSHARED_MARK
from sansmcp.core.limits import Limits
from sansmcp.core.store import (
    Acquired,
    AcquireLease,
    Found,
    Held,
    Missing,
    Read,
    StoreAnswer,
    StoreCommand,
    listing_key,
    registration_key,
    token_key,
)
from sansmcp.core.store_values import ValueCodec, registration_from, tokens_from
from sansmcp.stores import LocalStore
from tests.e2e.conftest import Backend, Launcher, Server, backend, launch  # noqa: F401
from tests.e2e.oauth_server import AuthServer
from tests.e2e.test_oauth import REDIRECT, follow

from .conftest import redis_store


@pytest.fixture(scope="module")
def auth_server() -> Iterator[AuthServer]:
    with AuthServer() as server:
        yield server


@pytest.fixture(scope="module")
def gated(launch: Launcher, auth_server: AuthServer) -> Server:  # noqa: F811
    return launch("--stateless", "--json", "--oauth", auth_server.url)


@dataclass
class Fleet:
    """The store the processes of a test share, and how to read it back."""

    name: str
    store: Any

    def read(self, key: str) -> bytes | None:
        found = self.store.execute(Read(key=key))
        return found.value if isinstance(found, Found) else None

    async def aclose(self) -> None:
        if self.name == "redis":
            await self.store.aclose()  # (its asyncio client, on the loop that opened it)

    def close(self) -> None:
        if self.name == "redis":
            self.store.close()


@pytest.fixture(params=["local", "redis"])
def fleet(request: pytest.FixtureRequest) -> Iterator[Fleet]:
    """Every test once over ``LocalStore`` and once over ``RedisStore`` (real Redis)."""
    if request.param == "local":
        yield Fleet("local", LocalStore())
        return
    server = request.getfixturevalue("redis_server")
    shared = Fleet("redis", redis_store(server.url))
    try:
        yield shared
    finally:
        shared.close()


CODEC = ValueCodec(1 << 20)


def tokens_in(fleet: Fleet, server: Server) -> Any:
    data = fleet.read(token_key("", "", server.url(), None))  # (OAuth names no issuer, client)
    return None if data is None else CODEC.open("tokens", data, tokens_from)


def since(auth_server: AuthServer, before: int) -> list[tuple[str, str]]:
    return auth_server.requests[before:]


def test_a_token_one_process_obtained_is_used_by_another_without_authorizing(
    backend: Backend,  # noqa: F811
    gated: Server,
    auth_server: AuthServer,
    fleet: Fleet,
) -> None:
    asked: list[str] = []

    async def step(url: str) -> str:
        asked.append(url)
        return follow(url)

    kept = MemoryTokenStore()
    config = Config(url=gated.url(), oauth=OAuth(redirect_uri=REDIRECT, authorize=step, store=kept))
    before = len(auth_server.requests)

    async def main() -> list[str]:
        names = []
        try:
            for _ in range(2):  # two processes, one after the other
                async with (
                    backend.Client(allow_loopback=True, store=fleet.store) as client,
                    client.connect(config) as conn,
                ):
                    names.append(sorted(tool.name for tool in await conn.list_tools()))
                    result = await conn.call_tool("echo", b'{"text": "hi"}')
                    assert not result.is_error
        finally:
            await fleet.aclose()
        return names

    first, second = backend.run(main)
    assert first == second and "echo" in first
    assert len(asked) == 1  # the second process authorized nothing
    assert since(auth_server, before) == [
        ("GET", "/.well-known/oauth-authorization-server"),
        ("POST", "/register"),
        ("GET", "/authorize"),
        ("POST", "/token"),
    ]
    tokens = tokens_in(fleet, gated)
    assert tokens is not None and tokens.access_token.startswith("e2e-")
    assert kept.tokens(gated.url()) is None  # OAuth.store: not a second copy


def test_the_client_registration_is_shared(
    backend: Backend,  # noqa: F811
    gated: Server,
    auth_server: AuthServer,
    fleet: Fleet,
) -> None:
    async def step(url: str) -> str:
        return follow(url)

    without_step = Config(url=gated.url(), oauth=OAuth(redirect_uri=REDIRECT))
    with_step = Config(url=gated.url(), oauth=OAuth(redirect_uri=REDIRECT, authorize=step))
    before = len(auth_server.requests)

    async def main() -> int:
        try:
            async with backend.Client(allow_loopback=True, store=fleet.store) as first:
                with pytest.raises(Unauthorized) as caught:
                    async with first.connect(without_step):
                        pass  # pragma: no cover - the connect fails
                assert caught.value.cause == "authorization_required"
            middle = len(auth_server.requests)
            async with (
                backend.Client(allow_loopback=True, store=fleet.store) as second,
                second.connect(with_step) as conn,
            ):
                assert await conn.list_tools()
            return middle
        finally:
            await fleet.aclose()

    middle = backend.run(main)
    assert since(auth_server, before)[: middle - before] == [
        ("GET", "/.well-known/oauth-authorization-server"),
        ("POST", "/register"),
    ]
    assert since(auth_server, middle) == [  # no second registration
        ("GET", "/.well-known/oauth-authorization-server"),
        ("GET", "/authorize"),
        ("POST", "/token"),
    ]
    data = fleet.read(registration_key(auth_server.url, None))
    assert data is not None
    registration = CODEC.open("registration", data, registration_from)
    assert registration is not None and registration.client_id == "e2e-client"
    assert auth_server.forms[-1]["client_id"] == "e2e-client"


def test_an_authorization_begun_on_one_process_completes_on_another_once(
    backend: Backend,  # noqa: F811
    gated: Server,
    auth_server: AuthServer,
    fleet: Fleet,
) -> None:
    config = Config(url=gated.url(), oauth=OAuth(redirect_uri=REDIRECT))

    def token_requests() -> int:
        return auth_server.requests.count(("POST", "/token"))

    async def main() -> Unauthorized:
        try:
            async with backend.Client(allow_loopback=True, store=fleet.store) as first:
                with pytest.raises(Unauthorized) as caught:
                    async with first.connect(config):
                        pass  # pragma: no cover - the connect fails
            url = caught.value.authorization_url
            assert url is not None
            redirect = follow(url)  # the person; the redirect lands on another worker
            seen = token_requests()
            async with backend.Client(allow_loopback=True, store=fleet.store) as second:
                await second.complete_authorization(config, redirect)
                async with second.connect(config) as conn:
                    assert await conn.list_tools()
            assert token_requests() == seen + 1
            async with backend.Client(allow_loopback=True, store=fleet.store) as third:
                with pytest.raises(Unauthorized) as again:
                    await third.complete_authorization(config, redirect)  # the same state
            assert token_requests() == seen + 1  # nothing sent
            return again.value
        finally:
            await fleet.aclose()

    error = backend.run(main)
    assert error.cause == "state_mismatch"
    tokens = tokens_in(fleet, gated)
    assert tokens is not None and tokens.access_token.startswith("e2e-")


def test_redis_frozen_while_storing_the_new_grant_is_connection_failed_naming_the_store(
    backend: Backend,  # noqa: F811
    gated: Server,
    auth_server: AuthServer,
    own_redis: Any,
) -> None:
    """SIGSTOP the redis-server while the person authorizes: the grant the token endpoint
    then makes cannot be stored, and the connect ends classified (nothing stored)."""
    limits = Limits(store_timeout=1.0)  # (the default, said: each wait for the frozen store)
    store = redis_store(own_redis.url, limits=limits)
    frozen: list[int] = []

    async def step(url: str) -> str:
        redirect = follow(url)
        os.kill(own_redis.pid, signal.SIGSTOP)  # (SIGCONT in the test's finally)
        frozen.append(own_redis.pid)
        return redirect

    config = Config(url=gated.url(), oauth=OAuth(redirect_uri=REDIRECT, authorize=step))

    async def main() -> ConnectionFailed:
        try:
            async with backend.Client(allow_loopback=True, store=store, limits=limits) as client:
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(config):
                        pass  # pragma: no cover - the connect fails
                return caught.value
        finally:
            await store.aclose()

    before = auth_server.requests.count(("POST", "/token"))
    try:
        error = backend.run(main)
    finally:
        if frozen:
            own_redis.signal(signal.SIGCONT)
    store.close()
    assert frozen  # the step ran: Redis was frozen from then on
    assert error.cause == "store" and error.bound == "store_timeout"
    assert "the store failed while storing new tokens (timeout" in str(error)
    assert "outcome is unknown" in str(error)  # (a paused Redis runs the write on waking)
    assert auth_server.requests.count(("POST", "/token")) == before + 1
    reader = redis_store(own_redis.url)
    try:
        found = reader.execute(Read(key=token_key("", "", gated.url(), None)))
    finally:
        reader.close()
    # nothing, or the grant just made: never another one (the write was on version 0)
    if found != Missing():
        assert isinstance(found, Found)
        tokens = CODEC.open("tokens", found.value, tokens_from)
        assert tokens is not None and tokens.access_token == f"e2e-{auth_server.minted}"


# -- two OAuth Conns listing at once (the listing has no ttlMs) ------------------------


def _listing(command: StoreCommand) -> bool:
    return getattr(command, "key", "").startswith("sansmcp:listing:")


class Worker:
    """One process's view of the fleet's store: the first process to take a listing's
    load lease is held at its read under the lease until another process found that
    lease held -- so one lists while the other waits, whatever the scheduling."""

    def __init__(self, inner: Any, held: threading.Event) -> None:
        self.inner = inner
        self.fleet_secret = getattr(inner, "fleet_secret", None)
        self.held = held
        self.loader = False

    def _before(self, command: StoreCommand) -> bool:
        return self.loader and isinstance(command, Read) and _listing(command)

    def _after(self, command: StoreCommand, answer: StoreAnswer) -> StoreAnswer:
        if isinstance(command, AcquireLease) and _listing(command):
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


def test_two_oauth_conns_listing_at_once_the_waiter_does_not_wait_out_the_load(
    backend: Backend,  # noqa: F811
    gated: Server,
    fleet: Fleet,
) -> None:
    """The gated server sends no ttlMs: the process holding the load lease stores no
    listing, and leaves the unshared mark; the one that found the lease held reads it
    and lists at once -- not after store_load_wait (10 s here)."""

    async def step(url: str) -> str:
        return follow(url)

    config = Config(url=gated.url(), oauth=OAuth(redirect_uri=REDIRECT, authorize=step))
    limits = Limits(store_timeout=12.0, store_load_wait=10.0)
    held = threading.Event()

    async def one(store: Any, listing: bool) -> dict[str, Any]:
        async with backend.Client(allow_loopback=True, store=store, limits=limits) as client:
            async with client.connect(config) as conn:
                if listing:
                    assert "echo" in [tool.name for tool in await conn.list_tools()]
                version = conn.protocol_version
            shared = client._driver.fleet
            assert shared is not None and shared.listings is not None
            return dict(shared.listings.counts, version=version)

    async def main() -> list[dict[str, Any]]:
        try:
            await one(fleet.store, False)  # authorized once: the fleet holds the token
            first, second = Worker(fleet.store, held), Worker(fleet.store, held)
            return await backend.gather([lambda: one(first, True), lambda: one(second, True)])
        finally:
            await fleet.aclose()

    counts = backend.run(main)
    loader, waiter = sorted(counts, key=lambda c: int(c["waits"]))
    assert held.is_set()
    assert (loader["waits"], loader["loads"], loader["writes"]) == (0, 1, 1)  # the mark
    assert waiter["waits"] == 1 and waiter["loads"] == 1 and waiter["writes"] == 0
    assert waiter["unshared"] == 1 and waiter["waited_out"] == 0
    key = listing_key(gated.url(), str(loader["version"]), "tools/list", None, None)
    assert fleet.read(key) == CODEC.seal("listing", UNSHARED_MARK)  # no listing: the mark
