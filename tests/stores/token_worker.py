"""A worker of the refresh race (issue 28): ``python -m tests.stores.token_worker ...``.

``STORE AS_URL ITEMS GO AT RT`` where ``STORE`` is a redis URL (the fleet's shared store)
or ``own`` (an in-process ``MemoryStore`` of this worker's, holding the grant ``AT`` /
``RT`` at start).  Once the file ``GO`` exists, it runs ``ITEMS`` work items: read the
grant from the store, refresh it through a :class:`RefreshFlight` when it expires within
``MARGIN`` seconds (the flight's commands performed on the store, blocking), then call
the test's protected resource with the access token; refused there (the token expired
in flight on a loaded machine), it refreshes and tries again (``ATTEMPTS``).  Prints its
counts as JSON.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

from sansmcp.core.fleet_tokens import (
    Done,
    Failed,
    Gone,
    Issue,
    Next,
    Refresh,
    RefreshFlight,
    Sleep,
    Use,
    seal_tokens,
)
from sansmcp.core.limits import Limits
from sansmcp.core.oauth.store import Tokens
from sansmcp.core.store import (
    Found,
    MemoryStore,
    Read,
    StoreAnswer,
    StoreCommand,
    token_key,
)
from sansmcp.core.store_values import ValueCodec, tokens_from

SECRET = b"fleet-secret-of-the-tests-32byte"
ISSUER = "http://as.test"
RESOURCE = "http://mcp.test/mcp"
KEY = token_key(ISSUER, "race-client", RESOURCE, None)
MARGIN = 0.4  # refresh an access token with less than this left
PAUSE = 0.02  # between two work items
ATTEMPTS = 3  # a work item refused by the resource (a token expired in flight) tries again
LIMITS = Limits(store_lease_expiry=5.0, store_load_wait=5.0)


class Blocking:
    """Performs store commands on a RedisStore or on this process's MemoryStore."""

    def __init__(self, url: str) -> None:
        if url == "own":
            self.memory: MemoryStore | None = MemoryStore()
            self.redis = None
        else:
            from sansmcp.stores import RedisStore

            self.memory = None
            self.redis = RedisStore(url, secret=SECRET, limits=LIMITS)

    def run(self, command: StoreCommand) -> StoreAnswer:
        if self.memory is not None:
            return self.memory.execute(command, now=time.time())
        assert self.redis is not None
        return self.redis.execute(command)

    def close(self) -> None:
        if self.redis is not None:
            self.redis.close()


def token_request(as_url: str, refresh_token: str | None) -> Tokens | None:
    body = urllib.parse.urlencode(
        {"grant_type": "refresh_token", "refresh_token": refresh_token or ""}
    ).encode()
    try:
        with urllib.request.urlopen(f"{as_url}/token", data=body, timeout=10) as response:
            granted = json.loads(response.read())
    except urllib.error.HTTPError:  # invalid_grant
        return None
    return Tokens(
        access_token=granted["access_token"],
        refresh_token=granted["refresh_token"],
        expires_at=time.time() + granted["expires_in"],
        issuer=ISSUER,
        token_endpoint=f"{as_url}/token",
    )


def refresh(store: Blocking, as_url: str, stale: Tokens, version: int, holder: str) -> Done:
    flight = RefreshFlight(
        KEY,
        stale,
        version,
        holder=holder,
        limits=LIMITS,
        codec=ValueCodec(LIMITS.max_store_value_bytes),
        now=time.time(),
    )
    step: Next = flight.start()
    while not isinstance(step, Done):
        match step:
            case Issue(command=command):
                step = flight.answer(store.run(command), time.time())
            case Sleep(until=until):
                time.sleep(max(0.0, until - time.time()))
                step = flight.woke(time.time())
            case Refresh(tokens=old):
                new = token_request(as_url, old.refresh_token)
                step = flight.refused() if new is None else flight.refreshed(new)
    if step.release is not None:
        store.run(step.release)
    return step


def call(as_url: str, tokens: Tokens) -> bool:
    request = urllib.request.Request(
        f"{as_url}/work", headers={"Authorization": f"Bearer {tokens.access_token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10):
            return True
    except urllib.error.HTTPError:
        return False


def work(url: str, as_url: str, items: int, go: pathlib.Path, at: str, rt: str) -> int:
    store = Blocking(url)
    codec = ValueCodec(LIMITS.max_store_value_bytes)
    holder = uuid.uuid4().hex
    if store.memory is not None:  # the grant, as each worker would have kept it alone
        first = Tokens(
            access_token=at,
            refresh_token=rt,
            expires_at=time.time() + 1.0,
            issuer=ISSUER,
            token_endpoint=f"{as_url}/token",
        )
        command = seal_tokens(codec, KEY, first, 0)
        assert command is not None
        store.run(command)
    for _ in range(60_000):
        if go.exists():
            break
        time.sleep(0.001)
    counts = dict.fromkeys(
        ("authorized", "unauthorized", "refreshed", "used_theirs", "gone", "failed"), 0
    )
    for _ in range(items):
        stale = False  # the resource refused the token: refresh it whatever its expiry
        for _attempt in range(ATTEMPTS):
            answer = store.run(Read(key=KEY))
            if not isinstance(answer, Found):
                counts["gone"] += 1
                break
            tokens = codec.open("tokens", answer.value, tokens_from)
            assert tokens is not None and tokens.expires_at is not None
            if stale or tokens.expires_at - time.time() < MARGIN:
                done = refresh(store, as_url, tokens, answer.version, holder)
                match done.outcome:
                    case Use(tokens=fresh, by_us=by_us):
                        tokens = fresh
                        counts["refreshed" if by_us else "used_theirs"] += 1
                    case Gone():
                        counts["gone"] += 1
                        break
                    case Failed():
                        counts["failed"] += 1
                        continue
            if call(as_url, tokens):
                counts["authorized"] += 1
                break
            counts["unauthorized"] += 1
            stale = True
        if counts["gone"]:
            break
        time.sleep(PAUSE)
    store.close()
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    url, as_url, items, go, at, rt = sys.argv[1:]
    sys.exit(work(url, as_url, int(items), pathlib.Path(go), at, rt))
