"""The refresh race through the public API, end to end (issue 28).

``test_token_race.py`` drives the core's ``RefreshFlight`` by hand; here each of 8 worker
processes (``tests.stores.client_worker``) is what a platform runs: one blocking
``sansmcp`` ``Client(store=...)`` doing work items (connect, call, list, close) on the
e2e MCP server behind its OAuth gate (``tests/e2e/server.py --oauth``).  The
authorization server (``AuthServer(lifetime=...)``) grants access tokens that expire
after a second, rotates refresh tokens and revokes the whole family on any reuse.  The
grant is made once, in this process, into the fleet's store; the workers find it there.

With ``RedisStore`` on a real ``redis-server``: no reuse, no revocation, every work item
authorized, several refreshes, and the grant left in Redis is the newest.  With each
worker's own ``LocalStore`` holding a copy of the same grant: the family is revoked and
work items end ``Unauthorized`` (what proves the test can fail).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import pytest

from sansmcp import Unauthorized
from sansmcp.core.limits import Limits
from sansmcp.core.store import Found, Read, token_key
from sansmcp.core.store_values import ValueCodec, tokens_from
from sansmcp.io_adapters.sync import Client
from sansmcp.stores import RedisStore
from tests.e2e.conftest import Launcher, Server, launch  # noqa: F401
from tests.e2e.oauth_server import AuthServer
from tests.e2e.test_oauth import follow
from tests.redis_server import RedisServer
from tests.tiers import examples

from .client_worker import PAUSE, SECRET, config

WORKERS = 8
LIFETIME = 1.0  # seconds an access token lives
# work items per worker, PAUSE apart: at least three token lifetimes of pauses alone, so
# tokens expire (and are refreshed) several times during a run however fast the machine
ITEMS = max(examples(full=600, test=60), round(3 * LIFETIME / PAUSE))
WORKER_TIMEOUT = 600  # seconds; a bound on a hung worker, not a measure


@pytest.fixture
def auth_server() -> Iterator[AuthServer]:
    with AuthServer(lifetime=LIFETIME) as server:
        yield server


@pytest.fixture
def gated(launch: Launcher, auth_server: AuthServer) -> Server:  # noqa: F811
    """The e2e server behind the OAuth gate of this test's authorization server (its
    listing public for ten minutes: a list is served by the fleet's store)."""
    return launch("--stateless", "--json", "--cache-ttl", "600000", "--oauth", auth_server.url)


def authorize_once(redis_url: str, server: Server) -> None:
    """The one authorization of the fleet (a person's, completed from the redirect),
    made by a Client of this process with the fleet's store: the grant lands in Redis."""
    store = RedisStore(redis_url, secret=SECRET)
    try:
        with Client(allow_loopback=True, store=store) as client:
            cfg = config(server.url())
            with pytest.raises(Unauthorized) as caught, client.connect(cfg):
                pass  # pragma: no cover - the connect fails
            url = caught.value.authorization_url
            assert caught.value.cause == "authorization_required" and url is not None
            client.complete_authorization(cfg, follow(url))
    finally:
        store.close()


class Fleet:
    """The worker processes of a test: :meth:`run` starts ``WORKERS`` of a kind (``redis``
    or ``local``), which begin together once the go-file exists, and sums their counts;
    :meth:`reap` kills whatever is still running and reaps every process started."""

    def __init__(self, redis_url: str, server: Server, go: pathlib.Path) -> None:
        self.redis_url = redis_url
        self.server = server
        self.go = go
        self.workers: list[subprocess.Popen[str]] = []

    def run(self, kind: str) -> Counter[str]:
        command = [sys.executable, "-m", "tests.stores.client_worker", kind, self.redis_url]
        for _ in range(WORKERS):
            self.workers.append(
                subprocess.Popen(
                    [*command, self.server.url(), str(ITEMS), str(self.go)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        self.go.touch()  # every worker is started: they begin together
        total: Counter[str] = Counter()
        for worker in self.workers:
            out, err = worker.communicate(timeout=WORKER_TIMEOUT)
            assert worker.returncode == 0, err
            total.update(json.loads(out))
        return total

    def reap(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                worker.kill()
            worker.communicate()


@pytest.fixture
def fleet(
    redis_server: RedisServer, gated: Server, auth_server: AuthServer, tmp_path: pathlib.Path
) -> Iterator[Fleet]:
    """The grant authorized once into Redis, and the fleet to run on it (reaped at the end)."""
    authorize_once(redis_server.url, gated)
    assert len(auth_server.families) == 1 and auth_server.refreshes == 0
    fleet = Fleet(redis_server.url, gated, tmp_path / "go")
    try:
        yield fleet
    finally:
        fleet.reap()


def seen(auth: AuthServer, total: Counter[str]) -> str:
    """What the authorization server counted and how the work items ended."""
    return (
        f"refreshes {auth.refreshes}, reuses {auth.reuses}, revocations {auth.revocations}, "
        f"refused {auth.refused}; items {dict(total)}"
    )


def test_a_fleet_of_clients_sharing_a_grant_in_redis_never_races_the_rotation(
    fleet: Fleet, gated: Server, auth_server: AuthServer
) -> None:
    total = fleet.run("redis")
    print(seen(auth_server, total))
    assert total == {"ok": WORKERS * ITEMS}, seen(auth_server, total)  # every item authorized
    assert auth_server.reuses == auth_server.revocations == auth_server.refused == 0
    assert auth_server.refreshes >= 2, seen(auth_server, total)  # expired, refreshed: twice+
    store = RedisStore(fleet.redis_url, secret=SECRET)
    found = store.execute(Read(key=token_key("", "", gated.url(), None)))
    store.close()
    assert isinstance(found, Found)
    stored = ValueCodec(Limits().max_store_value_bytes).open("tokens", found.value, tokens_from)
    assert stored is not None  # the newest grant: no older one written over it
    assert [stored.refresh_token] == auth_server.families


def test_the_same_fleet_each_with_its_own_store_loses_the_grant(
    fleet: Fleet, auth_server: AuthServer
) -> None:
    """Each worker holds the same grant in its LocalStore: the expected outcome is the
    family revoked and work items refused (what proves the test above can fail)."""
    total = fleet.run("local")
    print(seen(auth_server, total))
    assert auth_server.reuses >= 1 and auth_server.revocations == 1, seen(auth_server, total)
    assert auth_server.families == [""]  # revoked
    refused = sum(n for outcome, n in total.items() if outcome.startswith("unauthorized:"))
    assert refused > 0 and total["ok"] + refused == WORKERS * ITEMS, seen(auth_server, total)
