"""The single-flight refresh of a shared grant (issue 28), pure, on ``MemoryStore``.

A ``RefreshFlight`` is stepped by hand: each store command is performed on one
``MemoryStore`` shared by the "workers" (flights) of a test, or answered by hand
(failed, unexpected).  ``RotatingAS`` is a fake authorization server that rotates
refresh tokens and revokes the whole family on any reuse, as real ones do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sansmcp.core.errors import ConnectionFailed
from sansmcp.core.fleet_tokens import (
    POLL_FIRST,
    POLL_MAX,
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
    Acquired,
    AcquireLease,
    CompareAndSet,
    Conflict,
    DeleteIfVersion,
    Found,
    Held,
    MemoryStore,
    Missing,
    Read,
    ReleaseLease,
    StoreFailed,
    Written,
    lease_key,
    token_key,
)
from sansmcp.core.store_values import ValueCodec

KEY = token_key("https://as.example", "client-1", "https://mcp.example/mcp", None)
LIMITS = Limits(store_lease_expiry=5.0, store_load_wait=1.0)


def tokens(n: int) -> Tokens:
    return Tokens(
        access_token=f"at-{n}",
        refresh_token=f"rt-{n}",
        issuer="https://as.example",
        token_endpoint="https://as.example/token",
    )


def codec() -> ValueCodec:
    return ValueCodec(LIMITS.max_store_value_bytes)


def plant(store: MemoryStore, value: Tokens, now: float = 0.0, expected: int = 0) -> int:
    command = seal_tokens(codec(), KEY, value, expected)
    assert command is not None
    answer = store.execute(command, now=now)
    assert isinstance(answer, Written)
    return answer.version


def flight(version: int, holder: str = "w1", stale: Tokens | None = None) -> RefreshFlight:
    return RefreshFlight(
        KEY, stale or tokens(1), version, holder=holder, limits=LIMITS, codec=codec(), now=0.0
    )


@dataclass
class RotatingAS:
    """Rotates refresh tokens; a reused one revokes the family (every token it issued)."""

    current: str = "rt-1"
    issued: int = 1
    revoked: bool = False
    refreshes: int = 0
    reuses: list[str] = field(default_factory=list)

    def refresh(self, refresh_token: str | None) -> Tokens | None:
        if self.revoked or refresh_token != self.current:
            if not self.revoked:
                self.reuses.append(str(refresh_token))
            self.revoked = True
            return None
        self.refreshes += 1
        self.issued += 1
        self.current = f"rt-{self.issued}"
        return tokens(self.issued)


def run(
    one: RefreshFlight, store: MemoryStore, server: RotatingAS, now: float = 0.0
) -> tuple[Done, list[Next]]:
    """Step ``one`` to its outcome alone, performing everything on ``store``."""
    steps: list[Next] = []
    step = one.start()
    while not isinstance(step, Done):
        steps.append(step)
        match step:
            case Issue(command=command):
                step = one.answer(store.execute(command, now=now), now)
            case Sleep(until=until):
                now = until
                step = one.woke(now)
            case Refresh(tokens=old):
                new = server.refresh(old.refresh_token)
                step = one.refused() if new is None else one.refreshed(new)
    if step.release is not None:
        store.execute(step.release, now=now)
    return step, steps


def test_lease_won_refreshes_once_writes_over_the_version_read_and_releases() -> None:
    store, server = MemoryStore(), RotatingAS()
    version = plant(store, tokens(1))
    done, steps = run(flight(version), store, server)
    assert isinstance(done.outcome, Use) and done.outcome.by_us
    assert done.outcome.tokens == tokens(2) and server.refreshes == 1
    assert [type(s.command) for s in steps if isinstance(s, Issue)] == [
        AcquireLease,
        Read,
        CompareAndSet,
    ]
    write = next(
        s.command for s in steps if isinstance(s, Issue) and isinstance(s.command, CompareAndSet)
    )
    assert write.expected == version
    assert done.release == ReleaseLease(key=lease_key(KEY), holder="w1")
    stored = store.execute(Read(key=KEY), now=0.0)
    assert isinstance(stored, Found) and stored.version == done.outcome.version
    assert (
        store.execute(AcquireLease(key=lease_key(KEY), holder="x", ttl=1.0), now=0.0) == Acquired()
    )


def test_recheck_finds_another_workers_rotation_and_does_not_refresh() -> None:
    store, server = MemoryStore(), RotatingAS()
    version = plant(store, tokens(1))
    newer = plant(store, tokens(2), expected=version)  # another worker refreshed meanwhile
    done, steps = run(flight(version), store, server)
    assert done.outcome == Use(tokens(2), newer, by_us=False)
    assert server.refreshes == 0 and not any(isinstance(s, Refresh) for s in steps)
    assert done.release is not None  # the lease was ours: released


def test_lease_lost_the_waiter_polls_and_uses_the_new_tokens() -> None:
    store, server = MemoryStore(), RotatingAS()
    version = plant(store, tokens(1))
    store.execute(AcquireLease(key=lease_key(KEY), holder="winner", ttl=5.0), now=0.0)
    loser = flight(version, holder="loser")
    step = loser.start()
    assert isinstance(step, Issue)
    step = loser.answer(store.execute(step.command, now=0.0), 0.0)
    assert step == Sleep(POLL_FIRST)
    step = loser.woke(POLL_FIRST)
    assert isinstance(step, Issue) and isinstance(step.command, Read)
    step = loser.answer(store.execute(step.command, now=POLL_FIRST), POLL_FIRST)
    assert isinstance(step, Issue) and isinstance(step.command, AcquireLease)  # still old: retry
    step = loser.answer(Held(), POLL_FIRST)
    assert step == Sleep(POLL_FIRST + 2 * POLL_FIRST)  # doubling
    newer = plant(store, tokens(2), expected=version)  # the winner wrote
    step = loser.woke(1.0)
    assert isinstance(step, Issue)
    done = loser.answer(store.execute(step.command, now=1.0), 1.0)
    assert done == Done(Use(tokens(2), newer, by_us=False), None)  # lease never held
    assert server.refreshes == 0 and loser.counts["waits"] == 2


def test_pauses_are_bounded_and_a_killed_holder_delays_by_at_most_the_lease_expiry() -> None:
    store, server = MemoryStore(), RotatingAS()
    version = plant(store, tokens(1))
    store.execute(AcquireLease(key=lease_key(KEY), holder="killed", ttl=5.0), now=0.0)
    done, steps = run(flight(version, holder="w2"), store, server)
    sleeps = [s.until for s in steps if isinstance(s, Sleep)]
    gaps = [b - a for a, b in zip([0.0, *sleeps], sleeps, strict=False)]
    assert max(gaps) == POLL_MAX
    assert sleeps[-1] >= 5.0 > sleeps[-2]  # the lease expired: the next try won it
    assert isinstance(done.outcome, Use) and done.outcome.by_us and server.refreshes == 1


def test_a_waiter_gives_up_past_lease_expiry_plus_load_wait_without_writing() -> None:
    one = flight(1)
    step = one.start()
    step = one.answer(Held(), 0.0)
    assert isinstance(step, Sleep)
    done = one.woke(LIMITS.store_lease_expiry + LIMITS.store_load_wait)
    assert isinstance(done, Done) and done.release is None
    assert isinstance(done.outcome, Failed)
    assert done.outcome.error.cause == "store" and done.outcome.error.bound == "store_load_wait"


def test_invalid_grant_rereads_and_uses_a_rotation_made_meanwhile() -> None:
    store = MemoryStore()
    version = plant(store, tokens(1))
    one = flight(version)
    step = one.start()
    while not isinstance(step, Refresh):
        assert isinstance(step, Issue)
        step = one.answer(store.execute(step.command, now=0.0), 0.0)
    newer = plant(store, tokens(2), expected=version)  # a rotation the lease did not stop
    step = one.refused()
    assert isinstance(step, Issue) and isinstance(step.command, Read)
    done = one.answer(store.execute(step.command, now=0.0), 0.0)
    assert done == Done(
        Use(tokens(2), newer, by_us=False), ReleaseLease(key=lease_key(KEY), holder="w1")
    )
    assert isinstance(store.execute(Read(key=KEY), now=0.0), Found)  # nothing deleted


def test_invalid_grant_deletes_only_the_version_read() -> None:
    store = MemoryStore()
    version = plant(store, tokens(1))
    server = RotatingAS(current="rt-elsewhere")  # the grant is dead
    done, steps = run(flight(version), store, server)
    assert done.outcome == Gone()
    deletes = [
        s.command for s in steps if isinstance(s, Issue) and isinstance(s.command, DeleteIfVersion)
    ]
    assert deletes == [DeleteIfVersion(key=KEY, version=version)]
    assert store.execute(Read(key=KEY), now=0.0) == Missing()


def test_delete_conflict_rereads_and_uses_what_was_written() -> None:
    one = flight(3)
    one.start()
    one.answer(Acquired(), 0.0)
    one.answer(Found(value=b"", version=3), 0.0)  # same version: refresh
    one.refused()
    step = one.answer(Found(value=b"", version=3), 0.0)
    assert step == Issue(DeleteIfVersion(key=KEY, version=3))
    step = one.answer(Conflict(version=4), 0.0)
    assert isinstance(step, Issue) and isinstance(step.command, Read)
    sealed = seal_tokens(codec(), KEY, tokens(9), 0)
    assert sealed is not None
    done = one.answer(Found(value=sealed.value, version=4), 0.0)
    assert isinstance(done, Done) and done.outcome == Use(tokens(9), 4, by_us=False)
    assert one.counts["conflicts"] == 1


def test_cas_conflict_keeps_the_stored_tokens_and_serves_ours() -> None:
    store, server = MemoryStore(), RotatingAS()
    version = plant(store, tokens(1))
    one = flight(version)
    step = one.start()
    while not isinstance(step, Refresh):
        assert isinstance(step, Issue)
        step = one.answer(store.execute(step.command, now=0.0), 0.0)
    theirs = plant(store, tokens(7), expected=version)
    step = one.refreshed(tokens(2))
    assert isinstance(step, Issue)
    done = one.answer(store.execute(step.command, now=0.0), 0.0)
    assert isinstance(done, Done) and done.outcome == Use(tokens(2), 0, by_us=True)
    stored = store.execute(Read(key=KEY), now=0.0)
    assert isinstance(stored, Found) and stored.version == theirs  # never overwritten
    assert server.refreshes == 0 and one.counts == {
        "reads": 1,
        "waits": 0,
        "refreshes": 1,
        "conflicts": 1,
    }


@pytest.mark.parametrize("phase", ["lease", "recheck", "write", "reread", "delete"])
def test_a_failed_store_ends_as_cause_store_and_writes_nothing(phase: str) -> None:
    failed = StoreFailed(reason="timeout", detail="slow")
    one = flight(3)
    one.start()
    if phase != "lease":
        one.answer(Acquired(), 0.0)
    if phase in ("write", "reread", "delete"):
        one.answer(Found(value=b"", version=3), 0.0)
        if phase == "write":
            one.refreshed(tokens(2))
        else:
            one.refused()
            if phase == "delete":
                one.answer(Found(value=b"", version=3), 0.0)
    done = one.answer(failed, 0.0)
    assert isinstance(done, Done) and isinstance(done.outcome, Failed)
    error = done.outcome.error
    assert isinstance(error, ConnectionFailed) and error.cause == "store"
    assert error.bound == "store_timeout"
    assert done.outcome.unsaved == (tokens(2) if phase == "write" else None)
    assert (done.release is None) == (phase == "lease")


def test_missing_or_unreadable_tokens_are_gone_never_refreshed_blindly() -> None:
    one = flight(3)
    one.start()
    one.answer(Acquired(), 0.0)
    assert one.answer(Missing(), 0.0) == Done(Gone(), ReleaseLease(key=lease_key(KEY), holder="w1"))
    two = flight(3)
    two.start()
    two.answer(Acquired(), 0.0)
    done = two.answer(Found(value=b"\xff garbage", version=4), 0.0)
    assert isinstance(done, Done) and done.outcome == Gone()


def test_an_unexpected_answer_fails_classified() -> None:
    one = flight(3)
    one.start()
    done = one.answer(Written(version=1), 0.0)
    assert isinstance(done, Done) and isinstance(done.outcome, Failed)
    assert done.outcome.error.cause == "store"
    assert "Written" in str(done.outcome.error) and "lease" in str(done.outcome.error)


def test_tokens_too_big_to_store_are_not_written() -> None:
    one = RefreshFlight(KEY, tokens(1), 3, holder="w", limits=LIMITS, codec=ValueCodec(64), now=0.0)
    one.start()
    one.answer(Acquired(), 0.0)
    one.answer(Found(value=b"", version=3), 0.0)
    big = Tokens(access_token="a" * 100, issuer="i", token_endpoint="t")
    done = one.refreshed(big)
    assert isinstance(done, Done) and isinstance(done.outcome, Failed)
    assert done.outcome.unsaved == big and done.outcome.error.bound == "max_store_value_bytes"
    assert "RefreshFlight(done" in repr(one)


def interleave(workers: int, shared: bool) -> RotatingAS:
    """``workers`` flights stepped round-robin, one store each or one shared."""
    server = RotatingAS()
    stores = [MemoryStore()] if shared else [MemoryStore() for _ in range(workers)]
    versions = [plant(store, tokens(1)) for store in stores]
    flights = [flight(versions[i % len(stores)], holder=f"w{i}") for i in range(workers)]
    steps: list[Next] = [f.start() for f in flights]
    now = 0.0
    while not all(isinstance(s, Done) for s in steps):
        now += 0.01
        for i, one in enumerate(flights):
            store = stores[i % len(stores)]
            match steps[i]:
                case Issue(command=command):
                    steps[i] = one.answer(store.execute(command, now=now), now)
                case Sleep(until=until) if until <= now:
                    steps[i] = one.woke(now)
                case Refresh(tokens=old):
                    new = server.refresh(old.refresh_token)
                    steps[i] = one.refused() if new is None else one.refreshed(new)
                case Done(release=release) if release is not None:
                    store.execute(release, now=now)
                    steps[i] = Done(steps[i].outcome, None)  # type: ignore[union-attr]
    assert all(isinstance(s, Done) for s in steps)
    return server


def test_eight_workers_one_store_one_refresh_no_revocation() -> None:
    server = interleave(8, shared=True)
    assert server.refreshes == 1 and not server.revoked and server.reuses == []


def test_eight_workers_own_stores_revoke_the_family() -> None:
    server = interleave(8, shared=False)  # what the shared store prevents
    assert server.revoked and server.reuses == ["rt-1"]
