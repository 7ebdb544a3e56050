"""The pool machine, driven through its public API with fake wire machines."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from sansmcp.core.errors import LocalProtocolError
from sansmcp.core.limits import Limits
from sansmcp.core.net.pool import (
    ERA_CAPACITY,
    DialNeeded,
    MustWait,
    Pool,
    UseConnection,
)
from sansmcp.core.url import Origin, parse_endpoint
from sansmcp.core.wire import Wire
from sansmcp.core.wire.h1 import H1Connection
from sansmcp.core.wire.h2 import H2Connection
from tests.tiers import examples

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

    def __call__(self, *, http2: bool, limits: Limits, now: float) -> Wire:
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
    pool.started(result.conn_id, now=now)
    return result.conn_id


def use(pool: Pool, origin: Origin, *, now: float = 0.0) -> int:
    result = pool.checkout(origin, now=now)
    assert isinstance(result, UseConnection), result
    fake(pool, result.conn_id).start()
    pool.started(result.conn_id, now=now)
    return result.conn_id


def wait(pool: Pool, origin: Origin, *, now: float = 0.0) -> int:
    """Checkout that must wait; its ticket."""
    result = pool.checkout(origin, now=now)
    assert isinstance(result, MustWait), result
    return result.ticket


def claim_use(pool: Pool, ticket: int, *, now: float = 0.0) -> int:
    """Claim a granted ``UseConnection`` and start the exchange."""
    grant = pool.claim(ticket, now=0.0)
    assert isinstance(grant, UseConnection), grant
    fake(pool, grant.conn_id).start()
    pool.started(grant.conn_id, now=now)
    return grant.conn_id


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
    pool.started(1, now=0.5)
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
    tickets = [wait(pool, HTTPS) for _ in range(49)]
    assert tickets == sorted(set(tickets))
    assert [ticket for ticket, _ in pool.waiting()] == tickets
    before = pool.changed
    wire = pool.dial_succeeded(first.conn_id, alpn="h2", now=0.1)
    assert pool.changed != before
    assert isinstance(wire, FakeWire)
    assert wire.http2
    # the dialer's exchange has not started: can_start() does not count it yet
    assert pool.take_grants() == []
    wire.start()
    pool.started(first.conn_id, now=0.1)
    # then the tickets are served one by one, in order, each once the last one started
    for ticket in tickets:
        assert [t for t, _ in pool.take_grants()] == [ticket]
        assert claim_use(pool, ticket, now=0.2) == first.conn_id
    assert pool.take_grants() == []
    assert pool.waiting() == []
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
    ticket = wait(pool, HTTP)
    wire = pool.dial_succeeded(first.conn_id, alpn=None, now=0.0)
    assert isinstance(wire, FakeWire)
    assert wire.http2
    wire.start()
    pool.started(first.conn_id, now=0.0)
    assert [t for t, _ in pool.take_grants()] == [ticket]
    assert claim_use(pool, ticket) == first.conn_id


def test_alpn_choosing_http1_sends_waiters_to_dial() -> None:
    pool, _ = make()
    first = pool.checkout(HTTPS, now=0.0)
    assert isinstance(first, DialNeeded)
    ticket = wait(pool, HTTPS)
    wire = pool.dial_succeeded(first.conn_id, alpn="http/1.1", now=1.0)
    assert isinstance(wire, FakeWire)
    assert not wire.http2
    assert [t for t, _ in pool.take_grants()] == [ticket]  # nothing to wait for: it may dial
    second = pool.claim(ticket, now=0.0)
    assert isinstance(second, DialNeeded)
    assert second.conn_id != first.conn_id
    assert second.deadline == 31.0
    assert pool.take_grants() == []


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


def fake_of(wire: Wire) -> FakeWire:
    assert isinstance(wire, FakeWire)
    return wire


def test_full_or_draining_http2_connection_leads_to_a_new_dial() -> None:
    factory = Factory(max_streams=2)
    pool = Pool(limits=Limits(), wire_factory=factory)
    h2 = dial(pool, HTTPS, alpn="h2")
    assert use(pool, HTTPS) == h2
    second = pool.checkout(HTTPS, now=0.0)  # streams exhausted: dial, don't wait
    assert isinstance(second, DialNeeded)
    pool.dial_failed(second.conn_id, now=0.0)
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
    ticket = wait(pool, HTTPS)
    assert pool.claim(ticket, now=0.0) is None  # not granted yet: still queued
    assert pool.take_grants() == []
    pool.dial_failed(first.conn_id, now=1.0)
    assert [t for t, _ in pool.take_grants()] == [ticket]
    retry = pool.claim(ticket, now=0.0)
    assert isinstance(retry, DialNeeded)
    assert retry.deadline == 31.0
    assert pool.socket_count == 1


# -- bounds ---------------------------------------------------------------------


def test_max_sockets_waits_then_evicts_the_lru_idle_socket_of_another_origin() -> None:
    pool, factory = make(pool_max_sockets=2)
    a = dial(pool, HTTP, now=0.0)
    b = dial(pool, OTHER, alpn="http/1.1", now=0.0)
    ticket = wait(pool, THIRD, now=1.0)
    assert finish(pool, b, now=2.0) == []  # the idle socket goes to the waiter at once
    assert [t for t, _ in pool.take_grants()] == [ticket]
    result = pool.claim(ticket, now=0.0)
    assert isinstance(result, DialNeeded)
    assert result.close_first == (b,)
    assert factory.made[1].closed_at == 2.0
    assert pool.socket_count == 2
    pool.dial_failed(result.conn_id, now=2.5)
    assert finish(pool, a, now=3.0) == []
    other = dial(pool, OTHER, now=3.5)
    finish(pool, other, now=3.6)
    result = pool.checkout(THIRD, now=4.0)
    assert isinstance(result, DialNeeded)
    assert result.close_first == (a,)  # least recently used
    assert factory.made[0].closed_at == 4.0
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
    pool.discard(a, now=0.0)  # idle: forgotten
    assert pool.socket_count == 0
    pool.discard(a, now=0.0)  # unknown: no-op
    b = dial(pool, HTTPS, alpn="h2")
    use(pool, HTTPS)
    before = pool.changed
    pool.discard(b, now=0.0)  # leased: closed, leases drain
    assert pool.changed != before
    assert pool.socket_count == 0
    pool.discard(b, now=0.0)  # closed already: no-op
    assert factory.made[1].closed_at is None  # the adapter closed it, not the pool
    assert finish(pool, b) == []
    assert finish(pool, b) == []
    assert isinstance(pool.checkout(HTTPS, now=0.0), DialNeeded)
    dialing = pool.checkout(OTHER, now=0.0)
    assert isinstance(dialing, DialNeeded)
    with pytest.raises(LocalProtocolError, match="dial_failed"):
        pool.discard(dialing.conn_id, now=0.0)


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
        pool.dial_failed(7, now=0.0)
    with pytest.raises(LocalProtocolError, match="unknown ticket 3"):
        pool.claim(3, now=0.0)
    with pytest.raises(LocalProtocolError, match="unknown ticket 3"):
        pool.withdraw(3, now=0.0)
    with pytest.raises(LocalProtocolError, match="unknown"):
        pool.started(7, now=0.0)
    result = pool.checkout(HTTP, now=0.0)
    assert isinstance(result, DialNeeded)
    with pytest.raises(LocalProtocolError, match="still dialling"):
        pool.wire(result.conn_id)
    with pytest.raises(LocalProtocolError, match="dial_failed"):
        pool.release(result.conn_id, now=0.0)
    with pytest.raises(LocalProtocolError, match="no exchange about to start"):
        pool.started(result.conn_id, now=0.0)
    pool.dial_succeeded(result.conn_id, alpn=None, now=0.0)
    with pytest.raises(LocalProtocolError, match="not dialling"):
        pool.dial_succeeded(result.conn_id, alpn=None, now=0.0)
    with pytest.raises(LocalProtocolError, match="not dialling"):
        pool.dial_failed(result.conn_id, now=0.0)
    with pytest.raises(LocalProtocolError, match="no started exchange"):
        pool.release(result.conn_id, now=0.0)
    pool.started(result.conn_id, now=0.0)
    with pytest.raises(LocalProtocolError, match="no exchange about to start"):
        pool.started(result.conn_id, now=0.0)
    assert pool.release(result.conn_id, now=0.0) == []
    with pytest.raises(LocalProtocolError, match="no started exchange to release"):
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
    pool.started(first.conn_id, now=0.0)
    pool.started(second.conn_id, now=0.0)
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
    pool.started(result.conn_id, now=2.0)
    return result.conn_id


# -- fairness: the per-origin cap and the queue -------------------------------------

FOURTH = Origin(scheme="http", host="fourth.example", port=8080)


def granted(pool: Pool) -> list[int]:
    return [ticket for ticket, _ in pool.take_grants()]


def test_per_origin_cap_defaults_to_64_and_always_leaves_a_socket_to_another_origin() -> None:
    assert Limits().pool_max_sockets_per_origin == 64
    assert Limits().pool_max_idle_per_origin == 64 and Limits().pool_max_sockets == 256
    assert make()[0].max_sockets_per_origin == 64
    assert make(pool_max_sockets=3)[0].max_sockets_per_origin == 2
    assert make(pool_max_sockets=3, pool_max_sockets_per_origin=3)[0].max_sockets_per_origin == 2
    assert make(pool_max_sockets=65)[0].max_sockets_per_origin == 64
    assert make(pool_max_sockets=64)[0].max_sockets_per_origin == 63
    assert make(pool_max_sockets=2)[0].max_sockets_per_origin == 1
    assert make(pool_max_sockets=1)[0].max_sockets_per_origin == 1  # nothing to share
    assert make(pool_max_sockets_per_origin=2)[0].max_sockets_per_origin == 2


def test_room_for_a_stream_leaves_a_socket_for_an_operation() -> None:
    """A standalone stream may take a socket only when one more stays for an operation:
    below the per-origin cap after it, and an idle socket or room under the Client's cap."""
    pool, _ = make(pool_max_sockets=4, pool_max_sockets_per_origin=3)
    assert pool.has_room_for_stream(HTTP)  # nothing busy, room to dial
    busy = dial(pool, HTTP)
    assert pool.has_room_for_stream(HTTP)  # one busy: a second still leaves a third
    second = dial(pool, HTTP)
    assert not pool.has_room_for_stream(HTTP)  # two busy: a third would reach the cap
    assert finish(pool, second) == []
    assert pool.has_room_for_stream(HTTP)  # the idle one takes it
    dial(pool, THIRD)
    dial(pool, THIRD)
    assert pool.socket_count == 4 and pool.idle_count(HTTP) == 1
    assert pool.has_room_for_stream(HTTP)  # the Client is full, but one socket is idle
    assert finish(pool, busy) == []
    pool.discard(second, now=0.0)
    assert pool.socket_count == 3 and pool.idle_count(HTTP) == 1
    assert use(pool, HTTP) == busy
    dial(pool, THIRD)
    assert pool.socket_count == 4 and pool.idle_count(HTTP) == 0
    assert not pool.has_room_for_stream(HTTP)  # one busy, none idle, the Client full


def test_an_origin_at_its_cap_waits_while_another_origin_dials() -> None:
    pool, _ = make(pool_max_sockets=4, pool_max_sockets_per_origin=2)
    stalled = [dial(pool, HTTP), dial(pool, HTTP)]  # their server never answers
    queued = [wait(pool, HTTP) for _ in range(5)]
    assert pool.origin_socket_count(HTTP) == 2
    healthy = pool.checkout(THIRD, now=0.0)
    assert isinstance(healthy, DialNeeded)
    assert pool.socket_count == 3
    # a freed socket of the stalled origin goes to its oldest waiter
    assert finish(pool, stalled[0], now=1.0) == []
    assert granted(pool) == [queued[0]]
    assert claim_use(pool, queued[0]) == stalled[0]
    assert [ticket for ticket, _ in pool.waiting()] == queued[1:]


def test_without_a_lower_per_origin_cap_one_origin_still_leaves_a_socket() -> None:
    """Issue 26: with the per-origin cap at its default (clamped), four stalled
    exchanges to one origin held all four sockets and another origin waited.  Now the
    fourth waits at its origin's cap and the other origin dials at once."""
    pool, _ = make(pool_max_sockets=4)
    stalled = [dial(pool, HTTP) for _ in range(3)]
    queued = wait(pool, HTTP)
    healthy = pool.checkout(THIRD, now=0.0)
    assert isinstance(healthy, DialNeeded)
    assert pool.socket_count == 4 and pool.origin_socket_count(HTTP) == 3
    assert pool.waiting() == [(queued, HTTP)]
    # the healthy origin's socket, once idle, is not the stalled origin's: at its cap
    pool.dial_succeeded(healthy.conn_id, alpn=None, now=0.0)
    fake(pool, healthy.conn_id).start()
    pool.started(healthy.conn_id, now=0.0)
    assert finish(pool, healthy.conn_id, now=1.0) == []
    assert granted(pool) == []
    assert len(stalled) == pool.origin_socket_count(HTTP)


def test_a_freed_slot_goes_to_the_longest_waiting_checkout_that_can_use_it() -> None:
    pool, factory = make(pool_max_sockets=3, pool_max_sockets_per_origin=2)
    a1, a2 = dial(pool, HTTP), dial(pool, HTTP)
    b = dial(pool, THIRD)
    t_a1 = wait(pool, HTTP)  # at its origin's cap
    t_b = wait(pool, THIRD)  # the pool is full
    t_c = wait(pool, FOURTH)  # the pool is full
    t_a2 = wait(pool, HTTP)
    # b's socket frees: only THIRD can use it (HTTP is at its cap, FOURTH finds no room)
    assert finish(pool, b, now=1.0) == []
    assert granted(pool) == [t_b]
    assert claim_use(pool, t_b) == b
    # an HTTP socket frees: the oldest HTTP ticket gets it; FOURTH, older than t_a2, too
    # could evict it, but t_a1 is older still
    assert finish(pool, a1, now=2.0) == []
    assert granted(pool) == [t_a1]
    assert claim_use(pool, t_a1) == a1
    # the other HTTP socket frees: t_c (older than t_a2) evicts it to dial FOURTH
    assert finish(pool, a2, now=3.0) == []
    assert granted(pool) == [t_c]
    dial_c = pool.claim(t_c, now=0.0)
    assert isinstance(dial_c, DialNeeded)
    assert dial_c.origin == FOURTH
    assert dial_c.close_first == (a2,)
    assert factory.made[1].closed_at == 3.0
    assert pool.waiting() == [(t_a2, HTTP)]
    # the dial fails: its slot goes to t_a2
    pool.dial_failed(dial_c.conn_id, now=4.0)
    assert granted(pool) == [t_a2]
    assert isinstance(pool.claim(t_a2, now=0.0), DialNeeded)
    assert pool.waiting() == []


def test_an_origin_at_its_cap_evicts_its_own_unusable_idle_socket() -> None:
    pool, factory = make(pool_max_sockets_per_origin=2)
    busy, spent = dial(pool, HTTP), dial(pool, HTTP)
    factory.made[1].keep_alive = False
    factory.made[1].finish()
    pool.release(spent, now=1.0)  # closed at release: cannot start again
    again = dial(pool, HTTP)
    finish(pool, again, now=2.0)
    factory.made[2].broken = True  # broke while idle
    result = pool.checkout(HTTP, now=3.0)
    assert isinstance(result, DialNeeded)
    assert result.close_first == (again,)
    assert pool.origin_socket_count(HTTP) == 2
    assert busy != again


def test_withdrawing_a_queued_ticket() -> None:
    pool, _ = make(pool_max_sockets=1)
    a = dial(pool, HTTP)
    first, second = wait(pool, THIRD), wait(pool, THIRD)
    assert pool.withdraw(first, now=0.5) == []
    assert pool.waiting() == [(second, THIRD)]
    assert pool.withdraw(second, now=0.5) == []
    assert pool.waiting() == []
    assert finish(pool, a, now=1.0) == []
    assert granted(pool) == []
    assert pool.origin_socket_count(THIRD) == 0


def test_withdrawing_a_granted_lease_hands_it_to_the_next_ticket() -> None:
    pool, _ = make(pool_max_sockets=1)
    a = dial(pool, HTTP)
    first, second = wait(pool, HTTP), wait(pool, HTTP)
    finish(pool, a, now=1.0)
    assert granted(pool) == [first]
    assert pool.withdraw(first, now=2.0) == []  # never claimed: given back
    assert granted(pool) == [second]
    assert claim_use(pool, second) == a
    with pytest.raises(LocalProtocolError, match="unknown ticket"):
        pool.claim(first, now=0.0)


def test_withdrawing_a_granted_lease_on_a_dead_socket_closes_it() -> None:
    pool, factory = make(pool_max_sockets=1)
    a = dial(pool, HTTP)
    ticket = wait(pool, HTTP)
    finish(pool, a, now=1.0)
    assert granted(pool) == [ticket]
    factory.made[0].broken = True  # the server closed it before the holder woke
    assert pool.withdraw(ticket, now=2.0) == [a]
    assert pool.socket_count == 0


def test_withdrawing_a_granted_dial_returns_its_evictions() -> None:
    pool, _ = make(pool_max_sockets=2)
    a, b = dial(pool, HTTP), dial(pool, OTHER, alpn="http/1.1")
    first, second = wait(pool, THIRD), wait(pool, FOURTH)
    finish(pool, a, now=1.0)
    assert granted(pool) == [first]
    assert pool.withdraw(first, now=2.0) == [a]  # evicted for it: still to be closed
    assert granted(pool) == [second]  # the dial slot went on
    dial_d = pool.claim(second, now=0.0)
    assert isinstance(dial_d, DialNeeded)
    assert dial_d.close_first == ()
    assert pool.socket_count == 2
    assert pool.wire(b) is not None


def test_a_grant_on_a_socket_that_closes_goes_back_to_the_queue() -> None:
    pool, factory = make()
    first = pool.checkout(HTTPS, now=0.0)
    assert isinstance(first, DialNeeded)
    t1, t2 = wait(pool, HTTPS), wait(pool, HTTPS)
    wire = fake_of(pool.dial_succeeded(first.conn_id, alpn="h2", now=0.0))
    wire.start()
    pool.started(first.conn_id, now=0.0)
    assert pool.waiting() == [(t2, HTTPS)]  # t1 granted a stream, not yet claimed
    pool.discard(first.conn_id, now=1.0)  # the socket died before t1 woke
    # t1 is first in line again and, with no socket left, is told to dial; t2 waits for it
    grants = pool.take_grants()
    assert [ticket for ticket, _ in grants] == [t1]
    assert isinstance(grants[0][1], DialNeeded)
    assert pool.claim(t1, now=0.0) == grants[0][1]
    assert pool.waiting() == [(t2, HTTPS)]
    assert factory.made[0].closed_at is None


def test_a_revoked_grant_waits_again_in_its_place() -> None:
    pool, factory = make(pool_max_sockets=1)
    h2 = dial(pool, HTTPS, alpn="h2")
    assert use(pool, HTTPS) == h2
    other = wait(pool, THIRD)  # no room
    factory.made[0].goaway = True
    t1, t2 = wait(pool, HTTPS), wait(pool, HTTPS)  # no stream, no room to dial
    factory.made[0].goaway = False
    assert finish(pool, h2, now=1.0) == []
    # a stream is free: `other` is older but finds no room; t1 gets the stream, and t2
    # waits until t1's stream has started
    assert granted(pool) == [t1]
    assert pool.waiting() == [(other, THIRD), (t2, HTTPS)]
    factory.made[0].broken = True
    assert finish(pool, h2, now=2.0) == [h2]  # broken: closed, t1's grant revoked
    # the socket is gone: `other` (the oldest) dials; t1 waits again, ahead of t2
    assert granted(pool) == [other]
    assert pool.waiting() == [(t1, HTTPS), (t2, HTTPS)]
    assert pool.claim(t1, now=0.0) is None


def test_a_grant_that_broke_before_its_claim_is_not_handed_out() -> None:
    pool, factory = make(pool_max_sockets=3, pool_max_sockets_per_origin=3)
    a = dial(pool, HTTP)
    dial(pool, HTTP)
    dial(pool, THIRD)
    first, second = wait(pool, HTTP), wait(pool, HTTP)
    finish(pool, a, now=1.0)
    assert granted(pool) == [first]
    factory.made[0].broken = True  # behind the pool's back, before `first` woke
    # not handed out: `first` is served anew, as the oldest, by evicting the broken socket
    redial = pool.claim(first, now=2.0)
    assert isinstance(redial, DialNeeded)
    assert redial.close_first == (a,)
    assert pool.waiting() == [(second, HTTP)]


def test_a_grant_that_cannot_be_served_anew_at_its_claim_waits_in_its_place() -> None:
    pool, factory = make(pool_max_sockets=1)
    first = pool.checkout(HTTPS, now=0.0)
    assert isinstance(first, DialNeeded)
    t1, t2 = wait(pool, HTTPS), wait(pool, HTTPS)
    fake_of(pool.dial_succeeded(first.conn_id, alpn="h2", now=0.0)).start()
    pool.started(first.conn_id, now=0.0)
    assert granted(pool) == [t1]
    factory.made[0].goaway = True  # before t1 woke; the dialer's stream still runs
    assert pool.claim(t1, now=1.0) is None
    assert pool.waiting() == [(t1, HTTPS), (t2, HTTPS)]
    assert finish(pool, first.conn_id, now=2.0) == [first.conn_id]
    assert granted(pool) == [t1]
    assert isinstance(pool.claim(t1, now=2.0), DialNeeded)


def test_close_all_revokes_unclaimed_grants() -> None:
    pool, _ = make(pool_max_sockets=1)
    a = dial(pool, HTTP)
    ticket = wait(pool, HTTP)
    finish(pool, a, now=1.0)
    assert granted(pool) == [ticket]
    assert pool.close_all(now=2.0) == [a]
    grant = pool.claim(ticket, now=0.0)  # the pass after close_all: it may dial now
    assert isinstance(grant, DialNeeded)
    assert grant.deadline == 32.0


# -- a random walk ----------------------------------------------------------------

ORIGINS = [HTTP, HTTPS, OTHER, THIRD]
MAX_SOCKETS = 4
PER_ORIGIN = 2
MAX_IDLE = 2
IDLE_TIMEOUT = 5.0
MAX_STREAMS = 3


class PoolMachine(RuleBasedStateMachine):
    """Checkouts for several origins, grants, claims, withdrawals, dials that succeed
    or fail, releases, broken and closed sockets, time: the bounds always hold, and
    the queue is served first come first served among the checkouts that can be.

    The machine plays the adapter.  It keeps its own account of every socket and
    lease and, from it, judges independently whether a queued checkout could be
    served right now (:meth:`servable`): none ever may be left waiting.

    The pool's ``Limits`` are drawn (issue 26): whatever they are, an origin holding
    no socket is never kept waiting by one other origin (:meth:`no_origin_waits_on_one_other`).
    """

    def __init__(self) -> None:
        super().__init__()
        self.factory = Factory(max_streams=MAX_STREAMS)
        self.pool = Pool(
            limits=Limits(
                pool_max_sockets=MAX_SOCKETS,
                pool_max_sockets_per_origin=PER_ORIGIN,
                pool_max_idle_per_origin=MAX_IDLE,
                pool_idle_timeout=IDLE_TIMEOUT,
            ),
            wire_factory=self.factory,
        )
        self.now = 0.0
        self.dialing: dict[int, Origin] = {}  # dials the machine is making
        self.live: dict[int, tuple[Origin, FakeWire]] = {}  # open sockets it still holds
        self.held: list[int] = []  # one entry per started lease
        self.queued: dict[int, Origin] = {}  # tickets in the pool's queue
        self.granted: dict[int, UseConnection | DialNeeded] = {}  # announced, unclaimed
        self.origin_of: dict[int, Origin] = {}  # every ticket's origin
        # a wire degraded behind the pool's back: it learns of it at its next pass
        self.stale = False
        self.max_sockets, self.per_origin, self.max_idle = MAX_SOCKETS, PER_ORIGIN, MAX_IDLE

    @initialize(
        max_sockets=st.integers(1, 6), per_origin=st.integers(1, 8), max_idle=st.integers(0, 3)
    )
    def limits(self, max_sockets: int, per_origin: int, max_idle: int) -> None:
        """Any pool bounds a caller may set, including a per-origin cap at or above the
        pool's own (clamped, as documented, to one socket fewer than the pool's)."""
        self.pool = Pool(
            limits=Limits(
                pool_max_sockets=max_sockets,
                pool_max_sockets_per_origin=per_origin,
                pool_max_idle_per_origin=max_idle,
                pool_idle_timeout=IDLE_TIMEOUT,
            ),
            wire_factory=self.factory,
        )
        self.max_sockets, self.max_idle = max_sockets, max_idle
        self.per_origin = min(per_origin, max_sockets - 1) if max_sockets > 1 else 1
        assert self.pool.max_sockets_per_origin == self.per_origin

    # -- the machine's own account ---------------------------------------------

    def _closed(self, ids: list[int] | tuple[int, ...]) -> None:
        for conn_id in ids:
            _, wire = self.live.pop(conn_id)
            if conn_id in self.held:
                assert wire.broken, "closed a healthy socket with exchanges on it"

    def _pending(self, conn_id: int) -> int:
        return sum(
            1
            for grant in self.granted.values()
            if isinstance(grant, UseConnection) and grant.conn_id == conn_id
        )

    def _leases(self, conn_id: int) -> int:
        return self.held.count(conn_id) + self._pending(conn_id)

    def _dials(self) -> list[Origin]:
        granted = [g.origin for g in self.granted.values() if isinstance(g, DialNeeded)]
        return [*self.dialing.values(), *granted]

    def _sockets(self, origin: Origin | None = None) -> int:
        dials = [o for o in self._dials() if origin in (None, o)]
        return len(dials) + sum(1 for o, _ in self.live.values() if origin in (None, o))

    def servable(self, origin: Origin) -> bool:
        """Could a checkout for ``origin`` get a socket now (by the pool's documented rules)?"""
        wait = any(o == origin and o.scheme == "https" for o in self._dials())
        for conn_id, (o, wire) in self.live.items():
            if o != origin or wire.broken or not wire.can_start():
                continue
            if wire.http2:
                if self._pending(conn_id):
                    wait = True
                    continue
                return True
            if self._leases(conn_id) == 0:
                return True
        if wait:
            return False
        idle = [conn_id for conn_id in self.live if self._leases(conn_id) == 0]
        if self._sockets(origin) >= self.per_origin:
            return any(self.live[conn_id][0] == origin for conn_id in idle)
        if self._sockets() >= self.max_sockets:
            return bool(idle)
        return True

    def _sync(self, *, passed: bool = True) -> None:
        """After every pool call: learn the grants and revocations, check the order.
        ``passed``: the call was one after which the pool serves its queue anew."""
        self.stale = self.stale and not passed
        queue = dict(self.pool.waiting())
        for ticket in [t for t in self.granted if t in queue]:  # revoked: its socket closed
            grant = self.granted.pop(ticket)
            assert isinstance(grant, UseConnection)
            assert grant.conn_id not in self.live
        grants = self.pool.take_grants()
        for ticket, grant in grants:
            assert ticket not in queue
            old = self.granted.pop(ticket, None)
            if old is None:
                assert ticket in self.queued
            else:  # revoked (its socket closed) and granted again in the same call
                assert isinstance(old, UseConnection)
                assert old.conn_id not in self.live
            self.granted[ticket] = grant
            if isinstance(grant, DialNeeded):
                assert grant.origin == self.origin_of[ticket]
                self._closed(grant.close_first)
            else:
                assert self.live[grant.conn_id][0] == self.origin_of[ticket]
        left = {t for t in self.queued if t not in queue} - {t for t, _ in grants}
        assert not left, f"tickets vanished from the queue: {left}"
        self.queued = queue
        for ticket, _ in grants:  # first come first served within an origin
            origin = self.origin_of[ticket]
            assert all(t > ticket for t, o in queue.items() if o == origin)

    # -- rules -------------------------------------------------------------------

    @rule(origin=st.sampled_from(ORIGINS))
    def checkout(self, origin: Origin) -> None:
        behind = any(o == origin for o in self.queued.values())
        could = self.servable(origin)
        result = self.pool.checkout(origin, now=self.now)
        if isinstance(result, MustWait):
            assert behind or not could
            self.origin_of[result.ticket] = origin
            self.queued[result.ticket] = origin
        else:
            assert could and not behind
            self._take(result)
        self._sync(passed=False)

    @rule(origin=st.sampled_from(ORIGINS), count=st.integers(2, 4))
    def burst(self, origin: Origin, count: int) -> None:
        for _ in range(count):
            self.checkout(origin)

    def _take(self, grant: UseConnection | DialNeeded) -> None:
        if isinstance(grant, UseConnection):
            assert grant.conn_id in self.live
            wire = fake(self.pool, grant.conn_id)
            assert not wire.is_broken
            wire.start()  # asserts that the wire admits one more exchange
            self.pool.started(grant.conn_id, now=self.now)
            self.held.append(grant.conn_id)
        else:
            self._closed(grant.close_first)
            self.dialing[grant.conn_id] = grant.origin

    @precondition(lambda self: bool(self.granted))
    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(sorted(self.granted)))
        grant = self.granted.pop(ticket)
        usable = True
        if isinstance(grant, UseConnection):
            wire = self.live[grant.conn_id][1]
            usable = not wire.broken and wire.can_start()
        claimed = self.pool.claim(ticket, now=self.now)
        if usable:
            assert claimed == grant
            if isinstance(grant, DialNeeded):  # its evictions were closed at the grant
                claimed = dataclasses.replace(grant, close_first=())
        else:  # broke behind the pool's back: back in the queue, served again if it can be
            assert claimed != grant
            if claimed is None:
                self.queued[ticket] = self.origin_of[ticket]
        if claimed is not None:
            self._take(claimed)
        self._sync(passed=not usable)

    @precondition(lambda self: bool(self.granted or self.queued))
    @rule(data=st.data())
    def withdraw(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(sorted([*self.granted, *self.queued])))
        grant = self.granted.pop(ticket, None)
        self.queued.pop(ticket, None)
        doomed = self.pool.withdraw(ticket, now=self.now)
        if isinstance(grant, DialNeeded):
            assert doomed == list(grant.close_first)  # already closed at the grant
        else:
            self._closed(doomed)
        self._sync(passed=grant is not None)

    @precondition(lambda self: bool(self.dialing))
    @rule(data=st.data(), alpn=st.sampled_from(["h2", "http/1.1", None, "fail"]))
    def dial_ends(self, data: st.DataObject, alpn: str | None) -> None:
        conn_id = data.draw(st.sampled_from(sorted(self.dialing)))
        origin = self.dialing.pop(conn_id)
        if alpn == "fail":
            self.pool.dial_failed(conn_id, now=self.now)
        else:
            wire = fake_of(self.pool.dial_succeeded(conn_id, alpn=alpn, now=self.now))
            self.live[conn_id] = (origin, wire)
            self._sync()
            wire.start()
            self.pool.started(conn_id, now=self.now)
            self.held.append(conn_id)
        self._sync()

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        conn_id = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        fake(self.pool, conn_id).finish()
        self._closed(self.pool.release(conn_id, now=self.now))
        self._sync()

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), how=st.sampled_from(["broken", "goaway", "no-keep-alive"]))
    def degrade(self, data: st.DataObject, how: str) -> None:
        _, wire = self.live[data.draw(st.sampled_from(sorted(self.live)))]
        if how == "broken":
            wire.broken = True
        elif how == "goaway":
            wire.goaway = True
        else:
            wire.keep_alive = False
        self.stale = True

    @precondition(
        lambda self: any(isinstance(grant, UseConnection) for grant in self.granted.values())
    )
    @rule(data=st.data(), how=st.sampled_from(["broken", "goaway", "no-keep-alive"]))
    def granted_socket_degrades(self, data: st.DataObject, how: str) -> None:
        """Before the grant's holder wakes (then ``claim`` must not hand it out)."""
        conn_ids = sorted(
            {g.conn_id for g in self.granted.values() if isinstance(g, UseConnection)}
        )
        conn_id = data.draw(st.sampled_from(conn_ids))
        wire = self.live[conn_id][1]
        if how == "broken":
            wire.broken = True
        elif how == "goaway":
            wire.goaway = True
        else:
            wire.keep_alive = False
        self.stale = True

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def socket_dies(self, data: st.DataObject) -> None:
        conn_id = data.draw(st.sampled_from(sorted(self.live)))
        self.live.pop(conn_id)[1].broken = True
        self.pool.discard(conn_id, now=self.now)
        self._sync()

    @precondition(lambda self: bool(self.live))
    @rule()
    def close_all(self) -> None:
        closed = self.pool.close_all(now=self.now)
        assert sorted(closed) == sorted(self.live)
        for conn_id in closed:  # leased or not: the Client is closing
            self.live.pop(conn_id)[1].broken = True
        self._sync()

    @rule(dt=st.sampled_from([0.0, 0.5, 1.0, IDLE_TIMEOUT, 2 * IDLE_TIMEOUT]))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        deadline = self.pool.next_deadline()
        closed = self.pool.expire(now=self.now)
        assert bool(closed) == (deadline is not None and deadline <= self.now)
        self._closed(closed)
        self._sync(passed=bool(closed))
        after = self.pool.next_deadline()
        assert after is None or after > self.now

    # -- invariants --------------------------------------------------------------

    @invariant()
    def bounds_hold(self) -> None:
        assert self.pool.socket_count <= self.max_sockets
        assert self.pool.socket_count == self._sockets()
        for origin in ORIGINS:
            held = self.pool.origin_socket_count(origin)
            assert held == self._sockets(origin) <= self.per_origin
            assert held < self.max_sockets or self.max_sockets == 1
            assert self.pool.idle_count(origin) <= self.max_idle

    @invariant()
    def no_socket_carries_more_than_its_wire_admits(self) -> None:
        for conn_id, (_, wire) in self.live.items():
            assert self._leases(conn_id) <= (MAX_STREAMS if wire.http2 else 1)

    @invariant()
    def no_waiter_that_could_be_served_is_left_waiting(self) -> None:
        assert self.queued == dict(self.pool.waiting())
        if self.stale:
            return
        for origin in set(self.queued.values()):
            assert not self.servable(origin), f"a checkout for {origin} waits needlessly"

    @invariant()
    def no_origin_waits_on_one_other(self) -> None:
        """A checkout for an origin that holds no socket waits only while the pool is
        full of busy sockets held by two other origins or more: never because of one
        (a stalled server holding every socket), whatever the Limits, once the pool has
        more than one socket.  Judged from the machine's own account, not the pool's."""
        if self.stale or self.max_sockets == 1:
            return
        holders = {origin for origin in ORIGINS if self._sockets(origin)}
        idle = [c for c in self.live if self._leases(c) == 0]
        for origin in set(self.queued.values()):
            if self._sockets(origin) == 0:
                assert len(holders) >= 2, f"{origin} waits on {holders} alone"
                assert self._sockets() == self.max_sockets and not idle


PoolMachine.TestCase.settings = settings(
    max_examples=examples(150, 40), stateful_step_count=50, deadline=None
)
TestPoolMachine = PoolMachine.TestCase
