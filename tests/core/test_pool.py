"""The pool machine, driven through its public API with fake wire machines."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sansmcp.core.errors import LocalProtocolError
from sansmcp.core.limits import Limits
from sansmcp.core.pool import (
    ERA_CAPACITY,
    DialNeeded,
    MustWait,
    Pool,
    UseConnection,
    WireConnection,
)
from sansmcp.core.url import Origin, parse_endpoint
from sansmcp.core.wire.h1 import H1Connection
from sansmcp.core.wire.h2 import H2Connection

HTTP = Origin(scheme="http", host="example.com", port=80)
HTTPS = Origin(scheme="https", host="example.com", port=443)
OTHER = Origin(scheme="https", host="other.example", port=443)
THIRD = Origin(scheme="http", host="third.example", port=8080)


class FakeWire:
    """Just enough of H1Connection / H2Connection for the pool."""

    def __init__(self, *, http2: bool, limits: Limits, now: float, max_streams: int) -> None:
        self.http2 = http2
        self.created = now
        self.max_streams = min(max_streams, limits.h2_max_concurrent_streams)
        self.active = 0
        self.broken = False
        self.closed_at: float | None = None
        self.keep_alive = True
        self.goaway = False

    def can_start(self) -> bool:
        if self.broken or self.closed_at is not None:
            return False
        if self.http2:
            return not self.goaway and self.active < self.max_streams
        return self.keep_alive and self.active == 0

    @property
    def is_broken(self) -> bool:
        return self.broken

    def close(self, *, now: float) -> None:
        self.closed_at = now

    def start(self) -> None:
        assert self.can_start()
        self.active += 1

    def finish(self) -> None:
        assert self.active > 0
        self.active -= 1


@dataclass
class Factory:
    max_streams: int = 100
    made: list[FakeWire] = field(default_factory=list)

    def __call__(self, *, http2: bool, limits: Limits, now: float) -> WireConnection:
        wire = FakeWire(http2=http2, limits=limits, now=now, max_streams=self.max_streams)
        self.made.append(wire)
        return wire


def make(**limits: float) -> tuple[Pool, Factory]:
    factory = Factory()
    return Pool(limits=Limits(**limits), wire_factory=factory), factory  # type: ignore[arg-type]


def fake(pool: Pool, conn_id: int) -> FakeWire:
    wire = pool.wire(conn_id)
    assert isinstance(wire, FakeWire)
    return wire


def dial(pool: Pool, origin: Origin, *, alpn: str | None = None, now: float = 0.0) -> int:
    """Checkout that must dial; complete the dial and start the exchange."""
    result = pool.checkout(origin, now=now)
    assert isinstance(result, DialNeeded), result
    wire = pool.dial_succeeded(result.conn_id, alpn=alpn, now=now)
    assert isinstance(wire, FakeWire)
    wire.start()
    return result.conn_id


def use(pool: Pool, origin: Origin, *, now: float = 0.0) -> int:
    result = pool.checkout(origin, now=now)
    assert isinstance(result, UseConnection), result
    fake(pool, result.conn_id).start()
    return result.conn_id


def finish(pool: Pool, conn_id: int, *, now: float = 0.0) -> list[int]:
    fake(pool, conn_id).finish()
    return pool.release(conn_id, now=now)


# -- reuse and dialling ---------------------------------------------------------


def test_sequential_exchanges_reuse_one_http1_socket() -> None:
    pool, factory = make()
    first = pool.checkout(HTTP, now=0.0)
    assert first == DialNeeded(conn_id=1, origin=HTTP, alpn=(), deadline=30.0)
    assert pool.dial_succeeded(1, alpn=None, now=0.5) is factory.made[0]
    assert not factory.made[0].http2
    factory.made[0].start()
    assert finish(pool, 1, now=1.0) == []
    assert pool.idle_count(HTTP) == 1
    for step in range(5):
        assert use(pool, HTTP, now=2.0 + step) == 1
        assert finish(pool, 1, now=2.5 + step) == []
    assert len(factory.made) == 1
    assert pool.socket_count == 1


def test_two_concurrent_http1_exchanges_dial_twice() -> None:
    pool, factory = make()
    a = pool.checkout(HTTP, now=0.0)
    b = pool.checkout(HTTP, now=0.0)  # the first dial is h1-only: no reason to wait
    assert isinstance(a, DialNeeded)
    assert isinstance(b, DialNeeded)
    assert a.conn_id != b.conn_id
    pool.dial_succeeded(a.conn_id, alpn=None, now=0.1)
    factory.made[0].start()
    c = pool.checkout(HTTP, now=0.2)  # the open socket is busy
    assert isinstance(c, DialNeeded)
    assert pool.socket_count == 3


def test_most_recently_used_idle_http1_socket_first() -> None:
    pool, _ = make()
    a = dial(pool, HTTP)
    b = dial(pool, HTTP)
    finish(pool, b, now=1.0)
    finish(pool, a, now=2.0)
    assert use(pool, HTTP, now=3.0) == a
    assert use(pool, HTTP, now=3.0) == b


def test_fifty_concurrent_work_items_share_one_http2_connection() -> None:
    pool, factory = make()
    first = pool.checkout(HTTPS, now=0.0)
    assert isinstance(first, DialNeeded)
    assert first.alpn == ("h2", "http/1.1")
    waits = [pool.checkout(HTTPS, now=0.0) for _ in range(49)]
    assert waits == [MustWait(changed=pool.changed)] * 49
    before = pool.changed
    wire = pool.dial_succeeded(first.conn_id, alpn="h2", now=0.1)
    assert pool.changed != before
    assert isinstance(wire, FakeWire)
    assert wire.http2
    wire.start()
    ids = {use(pool, HTTPS, now=0.2) for _ in range(49)}
    assert ids == {first.conn_id}
    assert len(factory.made) == 1
    assert wire.active == 50
    for _ in range(49):
        assert finish(pool, first.conn_id, now=1.0) == []
        assert pool.idle_count(HTTPS) == 0
    assert finish(pool, first.conn_id, now=1.0) == []
    assert pool.idle_count(HTTPS) == 1
    assert use(pool, HTTPS, now=2.0) == first.conn_id


def test_prior_knowledge_makes_plain_http_wait_for_the_h2_dial() -> None:
    factory = Factory()
    pool = Pool(limits=Limits(), http2_prior_knowledge=True, wire_factory=factory)
    first = pool.checkout(HTTP, now=0.0)
    assert isinstance(first, DialNeeded)
    assert first.alpn == ()
    assert isinstance(pool.checkout(HTTP, now=0.0), MustWait)
    wire = pool.dial_succeeded(first.conn_id, alpn=None, now=0.0)
    assert isinstance(wire, FakeWire)
    assert wire.http2
    wire.start()
    assert use(pool, HTTP) == first.conn_id


def test_alpn_choosing_http1_sends_waiters_to_dial() -> None:
    pool, _ = make()
    first = pool.checkout(HTTPS, now=0.0)
    assert isinstance(first, DialNeeded)
    assert isinstance(pool.checkout(HTTPS, now=0.0), MustWait)
    wire = pool.dial_succeeded(first.conn_id, alpn="http/1.1", now=0.0)
    assert isinstance(wire, FakeWire)
    assert not wire.http2
    wire.start()
    second = pool.checkout(HTTPS, now=0.0)
    assert isinstance(second, DialNeeded)
    assert second.conn_id != first.conn_id


def test_tls_without_alpn_is_http1_unless_prior_knowledge() -> None:
    pool, _ = make()
    first = pool.checkout(HTTPS, now=0.0)
    assert isinstance(first, DialNeeded)
    assert not fake_of(pool.dial_succeeded(first.conn_id, alpn=None, now=0.0)).http2
    factory = Factory()
    pool = Pool(limits=Limits(), http2_prior_knowledge=True, wire_factory=factory)
    first = pool.checkout(HTTPS, now=0.0)
    assert isinstance(first, DialNeeded)
    assert fake_of(pool.dial_succeeded(first.conn_id, alpn=None, now=0.0)).http2


def fake_of(wire: WireConnection) -> FakeWire:
    assert isinstance(wire, FakeWire)
    return wire


def test_full_or_draining_http2_connection_leads_to_a_new_dial() -> None:
    factory = Factory(max_streams=2)
    pool = Pool(limits=Limits(), wire_factory=factory)
    h2 = dial(pool, HTTPS, alpn="h2")
    assert use(pool, HTTPS) == h2
    second = pool.checkout(HTTPS, now=0.0)  # streams exhausted: dial, don't wait
    assert isinstance(second, DialNeeded)
    pool.dial_failed(second.conn_id)
    finish(pool, h2)
    factory.made[0].goaway = True  # GOAWAY received, one stream still running
    third = pool.checkout(HTTPS, now=0.0)
    assert isinstance(third, DialNeeded)
    # the draining connection is closed once its last stream is released
    assert finish(pool, h2, now=5.0) == [h2]
    assert factory.made[0].closed_at == 5.0


def test_dial_failed_wakes_waiters_who_then_dial() -> None:
    pool, _ = make()
    first = pool.checkout(HTTPS, now=0.0)
    assert isinstance(first, DialNeeded)
    wait = pool.checkout(HTTPS, now=0.0)
    assert isinstance(wait, MustWait)
    pool.dial_failed(first.conn_id)
    assert pool.changed != wait.changed
    assert pool.socket_count == 0
    retry = pool.checkout(HTTPS, now=1.0)
    assert isinstance(retry, DialNeeded)
    assert retry.deadline == 31.0


# -- bounds ---------------------------------------------------------------------


def test_max_sockets_waits_then_evicts_the_lru_idle_socket_of_another_origin() -> None:
    pool, factory = make(pool_max_sockets=2)
    a = dial(pool, HTTP, now=0.0)
    b = dial(pool, OTHER, alpn="http/1.1", now=0.0)
    wait = pool.checkout(THIRD, now=1.0)
    assert wait == MustWait(changed=pool.changed)
    assert finish(pool, b, now=2.0) == []
    assert pool.changed != wait.changed
    assert finish(pool, a, now=3.0) == []
    result = pool.checkout(THIRD, now=4.0)
    assert isinstance(result, DialNeeded)
    assert result.close_first == (b,)  # least recently used
    assert factory.made[1].closed_at == 4.0
    assert pool.socket_count == 2
    with pytest.raises(LocalProtocolError, match="unknown connection id"):
        pool.wire(b)


def test_max_sockets_evicts_a_retirable_socket_before_a_healthy_one() -> None:
    pool, factory = make(pool_max_sockets=2)
    a = dial(pool, HTTP)
    b = dial(pool, OTHER, alpn="http/1.1")
    finish(pool, a, now=1.0)
    finish(pool, b, now=2.0)
    factory.made[1].broken = True  # broke while idle: not closed (nothing to say)
    result = pool.checkout(THIRD, now=3.0)
    assert isinstance(result, DialNeeded)
    assert result.close_first == (b,)
    assert factory.made[1].closed_at is None
    assert factory.made[0].closed_at is None


def test_idle_sockets_per_origin_are_bounded() -> None:
    pool, factory = make(pool_max_idle_per_origin=2)
    ids = [dial(pool, HTTP) for _ in range(4)]
    assert finish(pool, ids[0], now=1.0) == []
    assert finish(pool, ids[1], now=2.0) == []
    assert finish(pool, ids[2], now=3.0) == [ids[0]]
    assert factory.made[0].closed_at == 3.0
    assert finish(pool, ids[3], now=4.0) == [ids[1]]
    assert pool.idle_count(HTTP) == 2
    assert pool.socket_count == 2


def test_zero_idle_per_origin_closes_at_release() -> None:
    pool, _ = make(pool_max_idle_per_origin=0)
    a = dial(pool, HTTP)
    assert finish(pool, a, now=1.0) == [a]
    assert pool.socket_count == 0


def test_idle_expiry_at_exactly_the_bound() -> None:
    pool, factory = make(pool_idle_timeout=30.0)
    assert pool.next_deadline() is None
    a = dial(pool, HTTP)
    assert pool.next_deadline() is None  # in use
    finish(pool, a, now=10.0)
    assert pool.next_deadline() == 40.0
    before = pool.changed
    assert pool.expire(now=39.999) == []
    assert pool.changed == before
    assert pool.expire(now=40.0) == [a]
    assert pool.changed != before
    assert factory.made[0].closed_at == 40.0
    assert pool.next_deadline() is None
    assert pool.socket_count == 0


def test_reuse_restarts_the_idle_clock() -> None:
    pool, _ = make(pool_idle_timeout=30.0)
    a = dial(pool, HTTP)
    finish(pool, a, now=10.0)
    assert use(pool, HTTP, now=35.0) == a
    finish(pool, a, now=36.0)
    assert pool.expire(now=60.0) == []
    assert pool.next_deadline() == 66.0


# -- broken sockets ---------------------------------------------------------------


def test_broken_http1_socket_is_closed_at_release_and_never_reused() -> None:
    pool, factory = make()
    a = dial(pool, HTTP)
    factory.made[0].broken = True
    assert finish(pool, a, now=1.0) == [a]
    assert factory.made[0].closed_at is None  # broken: nothing to tell it
    result = pool.checkout(HTTP, now=2.0)
    assert isinstance(result, DialNeeded)
    assert result.conn_id != a


def test_socket_that_breaks_while_idle_is_skipped_and_due_for_expiry() -> None:
    pool, factory = make()
    a = dial(pool, HTTP)
    finish(pool, a, now=1.0)
    factory.made[0].broken = True  # e.g. the server closed it and the reader fed EOF
    assert pool.next_deadline() == 1.0  # already due
    result = pool.checkout(HTTP, now=2.0)
    assert isinstance(result, DialNeeded)
    assert result.close_first == ()
    assert pool.expire(now=2.0) == [a]


def test_http1_without_keep_alive_is_closed_at_release() -> None:
    pool, factory = make()
    a = dial(pool, HTTP)
    factory.made[0].keep_alive = False
    assert finish(pool, a, now=1.0) == [a]
    assert factory.made[0].closed_at == 1.0


def test_broken_http2_connection_closes_at_once_and_leases_drain() -> None:
    pool, factory = make()
    h2 = dial(pool, HTTPS, alpn="h2")
    use(pool, HTTPS)
    use(pool, HTTPS)
    factory.made[0].broken = True
    assert isinstance(pool.checkout(HTTPS, now=0.0), DialNeeded)  # skipped, not waited on
    assert finish(pool, h2, now=1.0) == [h2]
    assert pool.socket_count == 1  # only the new dial
    assert pool.wire(h2) is factory.made[0]  # holders may still drain events
    assert finish(pool, h2, now=1.0) == []
    assert finish(pool, h2, now=1.0) == []
    with pytest.raises(LocalProtocolError, match="unknown connection id"):
        pool.release(h2, now=1.0)


def test_discard() -> None:
    pool, factory = make()
    a = dial(pool, HTTP)
    finish(pool, a)
    pool.discard(a)  # idle: forgotten
    assert pool.socket_count == 0
    pool.discard(a)  # unknown: no-op
    b = dial(pool, HTTPS, alpn="h2")
    use(pool, HTTPS)
    before = pool.changed
    pool.discard(b)  # leased: closed, leases drain
    assert pool.changed != before
    assert pool.socket_count == 0
    pool.discard(b)  # closed already: no-op
    assert factory.made[1].closed_at is None  # the adapter closed it, not the pool
    assert finish(pool, b) == []
    assert finish(pool, b) == []
    assert isinstance(pool.checkout(HTTPS, now=0.0), DialNeeded)
    dialing = pool.checkout(OTHER, now=0.0)
    assert isinstance(dialing, DialNeeded)
    with pytest.raises(LocalProtocolError, match="dial_failed"):
        pool.discard(dialing.conn_id)


def test_close_all() -> None:
    pool, factory = make()
    idle = dial(pool, HTTP)
    finish(pool, idle)
    busy = dial(pool, HTTPS, alpn="h2")
    dialing = pool.checkout(OTHER, now=0.0)
    assert isinstance(dialing, DialNeeded)
    before = pool.changed
    assert pool.close_all(now=9.0) == [idle, busy]
    assert pool.changed != before
    assert [w.closed_at for w in factory.made] == [9.0, 9.0]
    assert pool.socket_count == 1  # the dial in flight
    assert finish(pool, busy) == []
    pool.dial_succeeded(dialing.conn_id, alpn="h2", now=10.0)
    assert pool.close_all(now=11.0) == [dialing.conn_id]
    quiet = pool.changed
    assert pool.close_all(now=12.0) == []
    assert pool.changed == quiet


# -- misuse ---------------------------------------------------------------------


def test_misuse_raises_local_protocol_error() -> None:
    pool, _ = make()
    with pytest.raises(LocalProtocolError, match="unknown connection id 7"):
        pool.release(7, now=0.0)
    with pytest.raises(LocalProtocolError, match="unknown"):
        pool.dial_failed(7)
    result = pool.checkout(HTTP, now=0.0)
    assert isinstance(result, DialNeeded)
    with pytest.raises(LocalProtocolError, match="still dialling"):
        pool.wire(result.conn_id)
    with pytest.raises(LocalProtocolError, match="dial_failed"):
        pool.release(result.conn_id, now=0.0)
    pool.dial_succeeded(result.conn_id, alpn=None, now=0.0)
    with pytest.raises(LocalProtocolError, match="not dialling"):
        pool.dial_succeeded(result.conn_id, alpn=None, now=0.0)
    with pytest.raises(LocalProtocolError, match="not dialling"):
        pool.dial_failed(result.conn_id)
    assert pool.release(result.conn_id, now=0.0) == []
    with pytest.raises(LocalProtocolError, match="no exchange to release"):
        pool.release(result.conn_id, now=0.0)
    assert pool.idle_count(HTTP) == 1


# -- era hints ------------------------------------------------------------------


def test_era_hints_are_per_endpoint_and_lru_bounded() -> None:
    pool = Pool(limits=Limits(), wire_factory=Factory(), era_capacity=3)
    a, b, c, d = (parse_endpoint(f"https://example.com/{n}").url for n in "abcd")
    assert pool.era_hint(a) is None
    pool.remember_era(a, "2026-07-28")
    pool.remember_era(b, "2025-11-25")
    pool.remember_era(c, "2026-07-28")
    assert pool.era_hint(a) == "2026-07-28"  # touches a: b is now the oldest
    pool.remember_era(d, "2025-06-18")
    assert pool.era_hint(b) is None
    assert pool.era_hint(a) == "2026-07-28"
    assert pool.era_hint(c) == "2026-07-28"
    pool.remember_era(c, "2025-11-25")  # overwrite
    assert pool.era_hint(c) == "2025-11-25"
    pool.forget_era(c)
    pool.forget_era(c)
    assert pool.era_hint(c) is None
    assert pool.era_hint(d) == "2025-06-18"


def test_default_era_capacity() -> None:
    pool = Pool(limits=Limits(), wire_factory=Factory())
    for n in range(ERA_CAPACITY + 10):
        pool.remember_era(f"https://h/{n}", "2026-07-28")
    assert pool.era_hint("https://h/9") is None
    assert pool.era_hint("https://h/10") == "2026-07-28"
    assert pool.era_hint(f"https://h/{ERA_CAPACITY + 9}") == "2026-07-28"


# -- the real wire machines -------------------------------------------------------


def test_default_factory_builds_the_real_wire_machines() -> None:
    pool = Pool(limits=Limits(), http2_prior_knowledge=True)
    first = pool.checkout(HTTPS, now=0.0)
    assert isinstance(first, DialNeeded)
    assert isinstance(pool.dial_succeeded(first.conn_id, alpn="h2", now=0.0), H2Connection)
    second = pool.checkout(OTHER, now=0.0)
    assert isinstance(second, DialNeeded)
    h1 = pool.dial_succeeded(second.conn_id, alpn="http/1.1", now=0.0)
    assert isinstance(h1, H1Connection)
    assert h1.can_start()
    assert not h1.is_broken
    assert pool.release(first.conn_id, now=1.0) == []
    assert pool.release(second.conn_id, now=2.0) == []
    assert use_real(pool, OTHER) == second.conn_id
    assert pool.release(second.conn_id, now=2.0) == []
    assert pool.next_deadline() == 31.0
    h2 = pool.wire(first.conn_id)
    assert isinstance(h2, H2Connection)
    h2.data_to_send()  # the preface
    assert pool.expire(now=32.0) == [first.conn_id, second.conn_id]
    assert h2.data_to_send()  # the GOAWAY queued by close(now=)
    assert not h2.can_start()
    assert not h1.can_start()


def use_real(pool: Pool, origin: Origin) -> int:
    result = pool.checkout(origin, now=2.0)
    assert isinstance(result, UseConnection)
    return result.conn_id


# -- a random walk ----------------------------------------------------------------

ORIGINS = [HTTP, HTTPS, OTHER, THIRD]
MAX_SOCKETS = 4
MAX_IDLE = 2
IDLE_TIMEOUT = 5.0


class PoolMachine(RuleBasedStateMachine):
    """Checkout / dial / release / break / expire in any order; the bounds always hold."""

    def __init__(self) -> None:
        super().__init__()
        self.factory = Factory(max_streams=3)
        self.pool = Pool(
            limits=Limits(
                pool_max_sockets=MAX_SOCKETS,
                pool_max_idle_per_origin=MAX_IDLE,
                pool_idle_timeout=IDLE_TIMEOUT,
            ),
            wire_factory=self.factory,
        )
        self.now = 0.0
        self.dialing: list[int] = []
        self.live: dict[int, FakeWire] = {}  # open sockets the adapter still holds
        self.held: list[int] = []  # one entry per lease held

    def _closed(self, ids: list[int] | tuple[int, ...]) -> None:
        for conn_id in ids:
            wire = self.live.pop(conn_id)
            if conn_id in self.held:
                assert wire.broken, "closed a healthy socket with exchanges on it"

    @rule(origin=st.sampled_from(ORIGINS))
    def checkout(self, origin: Origin) -> None:
        result = self.pool.checkout(origin, now=self.now)
        if isinstance(result, UseConnection):
            assert result.conn_id in self.live
            wire = fake(self.pool, result.conn_id)
            assert not wire.is_broken
            wire.start()
            self.held.append(result.conn_id)
        elif isinstance(result, DialNeeded):
            self._closed(result.close_first)
            self.dialing.append(result.conn_id)
        else:
            assert result == MustWait(changed=self.pool.changed)

    @precondition(lambda self: bool(self.dialing))
    @rule(data=st.data(), alpn=st.sampled_from(["h2", "http/1.1", None, "fail"]))
    def dial_ends(self, data: st.DataObject, alpn: str | None) -> None:
        conn_id = self.dialing.pop(data.draw(st.integers(0, len(self.dialing) - 1)))
        if alpn == "fail":
            self.pool.dial_failed(conn_id)
            return
        wire = fake_of(self.pool.dial_succeeded(conn_id, alpn=alpn, now=self.now))
        wire.start()
        self.live[conn_id] = wire
        self.held.append(conn_id)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        conn_id = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        fake(self.pool, conn_id).finish()
        self._closed(self.pool.release(conn_id, now=self.now))

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), how=st.sampled_from(["broken", "goaway", "no-keep-alive"]))
    def degrade(self, data: st.DataObject, how: str) -> None:
        wire = self.live[data.draw(st.sampled_from(sorted(self.live)))]
        if how == "broken":
            wire.broken = True
        elif how == "goaway":
            wire.goaway = True
        else:
            wire.keep_alive = False

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def socket_dies(self, data: st.DataObject) -> None:
        conn_id = data.draw(st.sampled_from(sorted(self.live)))
        self.live.pop(conn_id).broken = True
        self.pool.discard(conn_id)

    @rule(dt=st.sampled_from([0.0, 0.5, 1.0, IDLE_TIMEOUT, 2 * IDLE_TIMEOUT]))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        deadline = self.pool.next_deadline()
        closed = self.pool.expire(now=self.now)
        assert bool(closed) == (deadline is not None and deadline <= self.now)
        self._closed(closed)
        after = self.pool.next_deadline()
        assert after is None or after > self.now

    @invariant()
    def bounds_hold(self) -> None:
        assert self.pool.socket_count <= MAX_SOCKETS
        assert self.pool.socket_count == len(self.dialing) + len(self.live)
        for origin in ORIGINS:
            assert self.pool.idle_count(origin) <= MAX_IDLE


PoolMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestPoolMachine = PoolMachine.TestCase
