"""RedisStore against a real ``redis-server`` (issue 28): hostile values planted in Redis,
sealing at rest and key rotation, scripts flushed, the server stopped, paused and
restarted, a race of 8 processes, and a lease holder killed with SIGKILL.

Nothing here asserts a duration: outcomes are counted and ordered.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import Any

import pytest

from sansmcp.core.errors import CallerError
from sansmcp.core.limits import Limits
from sansmcp.core.store import (
    Acquired,
    AcquireLease,
    CompareAndSet,
    Conflict,
    Deleted,
    DeleteIfVersion,
    Found,
    Held,
    Missing,
    Read,
    StoreFailed,
    Take,
    Written,
    era_key,
    lease_key,
    listing_key,
)
from tests.redis_server import RedisServer

from .conftest import KEYS, SECRET, redis_store

KEY = listing_key("https://mcp.example/mcp", "2026-07-28", "tools/list", None, None)
ROOT = pathlib.Path(__file__).resolve().parents[2]


def raw(server: RedisServer) -> Any:
    import redis

    return redis.Redis.from_url(server.url)


def cas(value: bytes, expected: int, key: str = KEY) -> CompareAndSet:
    return CompareAndSet(key=key, value=value, expected=expected, ttl=60.0)


# -- untrusted values ---------------------------------------------------------------

# what is planted, the miss it makes, the version the miss carries (0: unreadable framing)
PLANTED: list[tuple[str, Any, str, int]] = [
    ("no version", b"garbage", "corrupt", 0),
    ("a leading zero", b"0:Pvalue", "corrupt", 0),
    ("19 digits", b"1234567890123456789:Pvalue", "corrupt", 0),
    ("no colon", b"123456", "corrupt", 0),
    ("a list", ["rpush", "a", "b"], "corrupt", 0),
    ("a hash", ["hset", "field", "value"], "corrupt", 0),
    ("an unknown marker", b"12:Xvalue", "sealing", 12),
    ("no payload", b"12:", "sealing", 12),
    ("a sealed value, sealing off", b"12:E\x02k2" + b"\x00" * 40, "sealing", 12),
    ("a value over the bound", b"12:P" + b"v" * 150, "oversized", 12),
    ("a giant", b"12:P" + b"v" * (2 << 20), "oversized", 12),
]


@pytest.mark.parametrize(
    ("what", "planted", "cause", "version"), PLANTED, ids=[p[0] for p in PLANTED]
)
def test_a_planted_value_is_a_counted_miss_and_is_replaceable(
    redis_server: RedisServer, what: str, planted: Any, cause: str, version: int
) -> None:
    client = raw(redis_server)
    store = redis_store(redis_server.url, limits=Limits(max_store_value_bytes=100))

    def plant() -> None:
        client.delete(KEY)
        if isinstance(planted, bytes):
            client.set(KEY, planted)
        else:
            client.execute_command(planted[0], KEY, *planted[1:])

    try:
        plant()
        assert store.execute(Read(key=KEY)) == Missing(version=version)
        assert store.execute(Take(key=KEY)) == Missing(version=version)
        assert client.exists(KEY) == 0  # a take removes what it could not read
        assert store.misses[cause] == 2 and sum(store.misses.values()) == 2
        plant()
        deleted = store.execute(DeleteIfVersion(key=KEY, version=12))
        assert deleted == (Deleted() if version else Conflict(version=0))
        plant()
        assert store.execute(cas(b"fresh", version + 1)) == Conflict(version=version)
        written = store.execute(cas(b"fresh", version))  # the miss's version replaces it
        assert isinstance(written, Written)
        assert store.execute(Read(key=KEY)) == Found(value=b"fresh", version=written.version)
        assert sum(store.failures.values()) == 0
    finally:
        store.close()
        client.close()


def test_a_value_over_the_bound_is_refused_before_redis(redis_server: RedisServer) -> None:
    store = redis_store(redis_server.url, limits=Limits(max_store_value_bytes=100))
    try:
        answer = store.execute(cas(b"v" * 101, 0))
        assert isinstance(answer, StoreFailed) and answer.reason == "refused"
        assert "max_store_value_bytes" in answer.detail
        assert store.execute(Read(key=KEY)) == Missing()
        assert isinstance(store.execute(cas(b"v" * 100, 0)), Written)
        assert store.failures["refused"] == 1
    finally:
        store.close()


# -- sealing at rest ---------------------------------------------------------------------


def test_sealed_values_hold_no_plaintext_and_rotate(redis_server: RedisServer) -> None:
    from sansmcp.stores import RedisStore

    client = raw(redis_server)
    old = RedisStore(redis_server.url, secret=SECRET, at_rest=[KEYS[1]])  # k1 only
    both = RedisStore(redis_server.url, secret=SECRET, at_rest=KEYS)  # k2 first, then k1
    new = RedisStore(redis_server.url, secret=SECRET, at_rest=[KEYS[0]])  # k2 only
    plain = redis_store(redis_server.url)
    stores = (old, both, new, plain)
    try:
        first = old.execute(cas(b"refresh-token-123", 0))
        assert isinstance(first, Written)
        stored = client.get(KEY)
        assert b"refresh-token-123" not in stored and b":E\x02k1" in stored
        assert both.execute(Read(key=KEY)) == Found(
            value=b"refresh-token-123", version=first.version
        )
        missed = Missing(version=first.version)
        assert new.execute(Read(key=KEY)) == missed  # k1 is not among its keys
        assert plain.execute(Read(key=KEY)) == missed  # sealed, and it cannot open
        second = both.execute(cas(b"rotated", first.version))  # rewritten under k2
        assert isinstance(second, Written) and b":E\x02k2" in client.get(KEY)
        assert new.execute(Read(key=KEY)) == Found(value=b"rotated", version=second.version)
        assert old.execute(Read(key=KEY)) == Missing(version=second.version)
        # a sealed value copied under another key, or another version, does not open
        other = listing_key("https://other.example/mcp", "2026-07-28", "tools/list", None, None)
        client.set(other, client.get(KEY))
        assert new.execute(Read(key=other)) == Missing(version=second.version)
        version, _, payload = client.get(KEY).partition(b":")
        client.set(KEY, str(int(version) + 1).encode() + b":" + payload)
        assert new.execute(Read(key=KEY)) == Missing(version=int(version) + 1)
        # a plaintext value where sealing is on is refused too
        third = era_key("https://third.example/mcp")
        planted = plain.execute(cas(b"planted", 0, key=third))
        assert isinstance(planted, Written)
        assert new.execute(Read(key=third)) == Missing(version=planted.version)
        assert (old.misses["sealing"], new.misses["sealing"], plain.misses["sealing"]) == (1, 4, 1)
    finally:
        for store in stores:
            store.close()
        client.close()


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ([], "at least one"),
        ([("", b"k" * 16)], "key id"),
        ([("k\n", b"k" * 16)], "key id"),
        ([("k", b"k" * 15)], "16, 24 or 32"),
        ([("k", "k" * 16)], "16, 24 or 32"),
        ([("k", b"k" * 16), ("k", b"j" * 16)], "twice"),
    ],
)
def test_at_rest_keys_are_checked(keys: Any, match: str) -> None:
    from sansmcp.stores import AtRest

    with pytest.raises(CallerError, match=match):
        AtRest(keys)
    assert "\\x02" not in repr(AtRest(KEYS)) and repr(AtRest(KEYS)) == "AtRest(ids=('k2', 'k1'))"


def test_the_secret_and_the_url_are_checked(redis_server: RedisServer) -> None:
    from sansmcp.stores import RedisStore

    for secret in (b"short", "a str secret of many characters"):
        with pytest.raises(CallerError, match="secret"):
            RedisStore(redis_server.url, secret=secret)  # type: ignore[arg-type]
    with pytest.raises(CallerError, match="RedisStore"):
        RedisStore("http://not-redis", secret=SECRET)


def test_the_listing_identity_is_the_same_on_every_worker(redis_server: RedisServer) -> None:
    one, two = redis_store(redis_server.url), redis_store(redis_server.url)
    parts = [(b"bearer", b"token")]
    try:
        assert one.identity(parts) == two.identity(parts) is not None
        assert one.identity([]) is None
        assert repr(one) == f"RedisStore('{redis_server.url}')"
        hidden = redis_store("redis://user:pass-word@127.0.0.1:1/0", sealed=True)
        assert repr(hidden) == "RedisStore('redis://127.0.0.1:1/0', at_rest=('k2', 'k1'))"
        hidden.close()
    finally:
        one.close()
        two.close()


def test_nothing_of_it_loads_with_sansmcp() -> None:
    code = (
        "import sys, sansmcp, sansmcp.stores; "
        "assert 'redis' not in sys.modules and 'sansmcp.stores.redis_store' not in sys.modules; "
        "sansmcp.stores.RedisStore; assert 'redis' not in sys.modules; "
        "sansmcp.stores.RedisStore('unix:///nowhere', secret=b'x' * 16); "
        "assert 'redis' in sys.modules; print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.stdout.strip() == "ok", done.stderr
    with pytest.raises(AttributeError, match="Nope"):
        import sansmcp.stores

        sansmcp.stores.Nope  # noqa: B018


# -- scripts and failures ----------------------------------------------------------------


def test_scripts_survive_a_script_flush(redis_server: RedisServer) -> None:
    client = raw(redis_server)
    store = redis_store(redis_server.url)

    async def on_asyncio() -> Any:
        client.script_flush()
        answer = await store.aexecute(cas(b"b", 0, key=KEY + "2"))
        await store.aclose()
        return answer

    try:
        written = store.execute(cas(b"a", 0))
        client.script_flush()  # as a restarted or failed-over server: NOSCRIPT
        assert store.execute(Take(key=KEY)) == Found(value=b"a", version=written.version)
        assert isinstance(asyncio.run(on_asyncio()), Written)
        assert sum(store.failures.values()) == 0
    finally:
        store.close()
        client.close()


def run_both(store: Any, command: Any) -> tuple[Any, Any]:
    async def on_asyncio() -> Any:
        try:
            return await store.aexecute(command)
        finally:
            await store.aclose()

    return store.execute(command), asyncio.run(on_asyncio())


def test_a_stopped_server_is_unavailable_then_recovers(own_redis: RedisServer) -> None:
    store = redis_store(own_redis.url)
    try:
        assert isinstance(store.execute(cas(b"before", 0)), Written)
        own_redis.stop()
        for command in (Read(key=KEY), cas(b"x", 0), Take(key=KEY)):
            for answer in run_both(store, command):
                assert isinstance(answer, StoreFailed) and answer.reason == "unavailable", answer
        assert store.failures == {"unavailable": 6, "timeout": 0, "refused": 0, "failed": 0}
        own_redis.start()  # no persistence: the restarted server is empty
        assert run_both(store, Read(key=KEY)) == (Missing(), Missing())
        written = store.execute(cas(b"after", 0))
        assert isinstance(written, Written)
        assert (
            run_both(store, Read(key=KEY)) == (Found(value=b"after", version=written.version),) * 2
        )
        assert store.failures["unavailable"] == 6
    finally:
        store.close()


def test_a_paused_server_times_out_then_recovers(own_redis: RedisServer) -> None:
    store = redis_store(own_redis.url, limits=Limits(store_timeout=0.2))
    try:
        written = store.execute(cas(b"v", 0))
        assert isinstance(written, Written)
        own_redis.signal(signal.SIGSTOP)
        try:
            answers = run_both(store, Read(key=KEY))
        finally:
            own_redis.signal(signal.SIGCONT)
        assert [a.reason for a in answers if isinstance(a, StoreFailed)] == ["timeout"] * 2
        assert run_both(store, Read(key=KEY)) == (Found(value=b"v", version=written.version),) * 2
        assert store.failures["timeout"] == 2
    finally:
        store.close()


# -- processes -------------------------------------------------------------------------

WORKERS = 8
INCREMENTS = 50


def worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.stores.worker", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_eight_processes_race_one_winner_per_version(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    go = tmp_path / "go"
    workers = [
        worker("race", redis_server.url, KEY, str(INCREMENTS), str(go)) for _ in range(WORKERS)
    ]
    go.touch()  # every worker is started: they begin together
    reports = []
    for process in workers:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        reports.append(json.loads(out))
    wins = [tuple(win) for report in reports for win in report["wins"]]
    conflicts = sum(report["conflicts"] for report in reports)
    assert sum(report["failures"] for report in reports) == 0
    # exactly one winner per version: no version was the base of two writes ...
    per_base = collections.Counter(base for base, _, _ in wins)
    assert len(wins) == WORKERS * INCREMENTS and set(per_base.values()) == {1}
    # ... and the writes form one chain from "absent", counting 1, 2, ..., 400: no lost update
    after = {base: (made, count) for base, made, count in wins}
    version, counts = 0, []
    while version in after:
        version, count = after[version]
        counts.append(count)
    assert counts == list(range(1, WORKERS * INCREMENTS + 1))
    store = redis_store(redis_server.url)
    try:
        assert store.execute(Read(key=KEY)) == Found(value=b"400", version=version)
    finally:
        store.close()
    print(
        f"race: {len(wins)} writes, {conflicts} conflicts, winners per version: {set(per_base.values())}"
    )
    assert conflicts > 0  # the workers did race


def test_a_lease_of_a_killed_holder_expires(redis_server: RedisServer) -> None:
    lease = lease_key(KEY)
    holder = worker("hold", redis_server.url, lease, "3.0")
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        os.kill(holder.pid, signal.SIGKILL)
        assert holder.wait(timeout=60) == -signal.SIGKILL
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
        holder.stdout.close() if holder.stdout else None
        holder.stderr.close() if holder.stderr else None
    store = redis_store(redis_server.url)
    try:
        answers = []
        for _ in range(1000):  # 10 ms apart: past the 3 s expiry with room to spare
            answers.append(store.execute(AcquireLease(key=lease, holder="survivor", ttl=60.0)))
            if answers[-1] == Acquired():
                break
            import time

            time.sleep(0.01)
        assert answers[0] == Held() and answers[-1] == Acquired()
        assert set(answers[:-1]) == {Held()}
    finally:
        store.close()


THREADS = 8


def test_one_store_serves_many_threads(redis_server: RedisServer) -> None:
    """The blocking API is shared by threads (the sync adapter's workers, trio's
    ``to_thread``): 8 threads x 25 read + compare-and-set increments lose no update."""
    import threading

    store = redis_store(redis_server.url)
    conflicts = [0] * THREADS

    def add(index: int) -> None:
        done = 0
        while done < 25:
            current = store.execute(Read(key=KEY))
            count, version = (
                (int(current.value), current.version) if isinstance(current, Found) else (0, 0)
            )
            answer = store.execute(cas(b"%d" % (count + 1), version))
            if isinstance(answer, Written):
                done += 1
            else:
                assert isinstance(answer, Conflict), answer
                conflicts[index] += 1

    threads = [threading.Thread(target=add, args=(index,)) for index in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        found = store.execute(Read(key=KEY))
        assert isinstance(found, Found) and found.value == b"%d" % (THREADS * 25)
        assert sum(store.failures.values()) == 0 and sum(store.misses.values()) == 0
    finally:
        store.close()
