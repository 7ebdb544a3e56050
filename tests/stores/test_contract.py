"""The store contract (issue 28), every operation against every store from one fixture:
the in-process ``MemoryStore`` and ``RedisStore`` on a real ``redis-server`` (blocking,
asyncio, sealed at rest)."""

from __future__ import annotations

import time

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
    NotHeld,
    Read,
    Released,
    ReleaseLease,
    Take,
    Written,
    era_key,
    lease_key,
    token_key,
)

from .conftest import Runner

KEY = token_key("https://as.example", "client", "https://mcp.example/mcp", "tenant-1")
POLLS = 400  # 10 ms apart: far past the short TTLs below


def cas(value: bytes, expected: int, ttl: float = 60.0, key: str = KEY) -> CompareAndSet:
    return CompareAndSet(key=key, value=value, expected=expected, ttl=ttl)


def test_read_and_compare_and_set(store: Runner) -> None:
    assert store.run(Read(key=KEY)) == Missing()
    first = store.run(cas(b"one", 0))
    assert isinstance(first, Written) and first.version > 0
    assert store.run(Read(key=KEY)) == Found(value=b"one", version=first.version)
    assert store.run(cas(b"two", 0)) == Conflict(version=first.version)  # only when absent
    second = store.run(cas(b"two", first.version))
    assert isinstance(second, Written) and second.version != first.version
    assert store.run(cas(b"old", first.version)) == Conflict(version=second.version)
    assert store.run(Read(key=KEY)) == Found(value=b"two", version=second.version)


def test_values_are_bytes_kept_exactly(store: Runner) -> None:
    for value in (b"", b"\x00\xff:12:", "é€𝄞".encode(), bytes(range(256)) * 64):
        current = store.run(Read(key=KEY))
        expected = current.version if isinstance(current, Found) else 0
        written = store.run(cas(value, expected))
        assert isinstance(written, Written)
        assert store.run(Read(key=KEY)) == Found(value=value, version=written.version)


def test_delete_if_version(store: Runner) -> None:
    assert store.run(DeleteIfVersion(key=KEY, version=0)) == Conflict(version=0)
    assert store.run(DeleteIfVersion(key=KEY, version=5)) == Conflict(version=0)
    written = store.run(cas(b"v", 0))
    assert isinstance(written, Written)
    other = written.version % 1000 + 1
    assert store.run(DeleteIfVersion(key=KEY, version=other)) == Conflict(version=written.version)
    assert store.run(DeleteIfVersion(key=KEY, version=written.version)) == Deleted()
    assert store.run(Read(key=KEY)) == Missing()


def test_versions_are_not_reused_after_a_delete(store: Runner) -> None:
    seen: set[int] = set()
    for _ in range(20):
        written = store.run(cas(b"v", 0))
        assert isinstance(written, Written) and written.version not in seen
        seen.add(written.version)
        assert store.run(DeleteIfVersion(key=KEY, version=written.version)) == Deleted()
    assert len(seen) == 20


def test_take_hands_the_value_to_one_taker(store: Runner) -> None:
    written = store.run(cas(b"verifier", 0))
    assert isinstance(written, Written)
    assert store.run(Take(key=KEY)) == Found(value=b"verifier", version=written.version)
    assert store.run(Take(key=KEY)) == Missing()
    assert store.run(Read(key=KEY)) == Missing()


def test_a_lease(store: Runner) -> None:
    lease = lease_key(KEY)
    assert store.run(AcquireLease(key=lease, holder="worker-1", ttl=60.0)) == Acquired()
    assert store.run(AcquireLease(key=lease, holder="worker-2", ttl=60.0)) == Held()
    assert store.run(ReleaseLease(key=lease, holder="worker-2")) == NotHeld()
    assert store.run(ReleaseLease(key=lease, holder="worker-1")) == Released()
    assert store.run(ReleaseLease(key=lease, holder="worker-1")) == NotHeld()
    assert store.run(AcquireLease(key=lease, holder="worker-2", ttl=60.0)) == Acquired()


def test_keys_are_independent(store: Runner) -> None:
    other = era_key("https://mcp.example/mcp")
    assert isinstance(store.run(cas(b"a", 0)), Written)
    assert isinstance(store.run(cas(b"b", 0, key=other)), Written)
    assert isinstance(store.run(Take(key=other)), Found)
    assert isinstance(store.run(Read(key=KEY)), Found)


def polls_until_missing(store: Runner, key: str) -> int:
    for poll in range(1, POLLS + 1):
        if store.run(Read(key=key)) == Missing():
            return poll
        time.sleep(0.01)
    return POLLS + 1


def test_every_key_expires(store: Runner) -> None:
    assert isinstance(store.run(cas(b"v", 0, ttl=0.05)), Written)
    assert polls_until_missing(store, KEY) <= POLLS
    assert isinstance(store.run(cas(b"again", 0)), Written)  # absent again: creatable
    lease = lease_key(KEY)
    assert store.run(AcquireLease(key=lease, holder="dead", ttl=0.05)) == Acquired()
    for _ in range(POLLS):
        if store.run(AcquireLease(key=lease, holder="next", ttl=60.0)) == Acquired():
            break
        time.sleep(0.01)
    assert store.run(ReleaseLease(key=lease, holder="dead")) == NotHeld()
    assert store.run(ReleaseLease(key=lease, holder="next")) == Released()
