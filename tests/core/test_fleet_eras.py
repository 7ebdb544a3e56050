"""A cold endpoint's era loaded once per fleet (issue 28): the era load lease, pure.

Each ``ClientDriver`` is one process of a fleet, with its own lease holder name (its
randomness); they share one ``MemoryStore`` (performed by ``StoreNet``), or none and a
test answers each ``StoreOp`` by hand: late, failed, held, or with garbage.  The fake
server's requests count the era probes (``server/discover``).
"""

from __future__ import annotations

from typing import Any

import pytest

from sansmcp import ConnectionFailed
from sansmcp.core.commands import StoreOp
from sansmcp.core.driver import ClientDriver
from sansmcp.core.fleet import Fleet
from sansmcp.core.fleet_eras import NO_HINT_MARK, SharedEras
from sansmcp.core.fleet_listings import POLL_FIRST
from sansmcp.core.limits import Limits
from sansmcp.core.store import (
    Acquired,
    AcquireLease,
    CompareAndSet,
    Conflict,
    Found,
    Held,
    MemoryStore,
    Missing,
    Read,
    Released,
    ReleaseLease,
    StoreFailed,
    Written,
    era_key,
    lease_key,
)
from sansmcp.core.store_values import ValueCodec

from .fakemcp import MODERN, FakeServer
from .test_driver import URL
from .test_driver_store import LEGACY, StoreNet, methods, sealed_era

KEY = era_key(URL)
LEASE = lease_key(KEY)


def sealed(body: Any) -> bytes:
    value = ValueCodec(1 << 20).seal("era", body)
    assert value is not None
    return value


MARK = sealed(NO_HINT_MARK)


def process(
    server: FakeServer,
    store: MemoryStore | None,
    *,
    number: int = 7,
    limits: Limits | None = None,
    leases: bool = True,
) -> StoreNet:
    """One process of the fleet (``leases``: with randomness, so with lease holders)."""
    driver = ClientDriver(
        limits=limits,
        allow_loopback=True,
        shared_store=True,
        random_bytes=(lambda n: bytes([number]) * n) if leases else None,
    )
    return StoreNet(driver, handlers={8000: server}, store=store)


def fleet(net: StoreNet) -> Fleet:
    assert net.driver.fleet is not None
    return net.driver.fleet


def eras(net: StoreNet) -> SharedEras:
    shared = fleet(net).eras
    assert shared is not None
    return shared


def probes(server: FakeServer) -> int:
    return methods(server).count("server/discover")


def holder(net: StoreNet, view: Any) -> str:
    return f"{bytes([7]).hex() * 12}:{view.conn_id}"


def kinds(net: StoreNet) -> list[str]:
    return [type(op.command).__name__ for op in net.ops]


def together(nets: list[StoreNet], views: list[Any]) -> None:
    """Run every process's connect at once on one clock: each step of each in turn,
    time moving to the earliest deadline when none can step."""
    while not all(net.finished.get(view.conn_id) for net, view in zip(nets, views, strict=True)):
        if any([net.step() for net in nets]):
            continue
        deadline = min(d for net in nets if (d := net.driver.next_deadline()) is not None)
        for net in nets:
            net.now = deadline
            net.driver.handle_timer(now=deadline)
            net.pump()


# -- a fleet started at once -----------------------------------------------------------


@pytest.mark.parametrize("era", ["modern", "legacy"])
@pytest.mark.parametrize("leases", [True, False])
def test_processes_started_at_once_probe_a_cold_endpoint_once(era: str, leases: bool) -> None:
    server = FakeServer() if era == "modern" else FakeServer(modern=False, legacy=LEGACY)
    store = MemoryStore()
    nets = [process(server, store, number=n, leases=leases) for n in range(1, 5)]
    views = [net.open() for net in nets]
    for net, view in zip(nets, views, strict=True):
        net.start("connect", view)
    together(nets, views)
    assert all(
        net.finished[view.conn_id][0].error is None for net, view in zip(nets, views, strict=True)
    )
    versions = {net.driver.pool.era_hint(URL) for net in nets}
    assert versions == {MODERN if era == "modern" else LEGACY}
    counts = [fleet(net).counts for net in nets]
    if not leases:  # no lease holders: every process probes (what the lease prevents)
        assert probes(server) == 4 and sum(c["loads"] for c in counts) == 4
        return
    assert probes(server) == 1  # one process probed; the others took its hint
    assert sum(c["loads"] for c in counts) == 1
    assert sum(c["waits"] for c in counts) == 3 and sum(c["hits"] for c in counts) == 3
    assert sum(c["writes"] for c in counts) == 1
    assert store.execute(Read(key=LEASE), now=nets[0].now) == Missing()  # given back
    if era == "legacy":  # the waiters initialized at once
        assert methods(server).count("initialize") == 4


# -- the loader's steps, answered by hand -------------------------------------------------


def parked(server: FakeServer | None = None, **kw: Any) -> tuple[StoreNet, Any]:
    """A Conn whose era read missed: its lease asked."""
    net = process(server or FakeServer(), None, **kw)
    view = net.open()
    net.start("connect", view)
    net.answer_op(net.ops[-1], Missing(version=3))
    assert net.ops[-1].command == AcquireLease(key=LEASE, holder=holder(net, view), ttl=15.0)
    return net, view


def test_the_read_under_the_lease_finds_another_workers_hint() -> None:
    server = FakeServer()
    net, view = parked(server)
    net.answer_op(net.ops[-1], Acquired())
    recheck = net.ops[-1]
    assert recheck.command == Read(key=KEY)
    net.answer_op(recheck, Found(value=sealed_era(MODERN), version=4))
    assert net.ops[-1].command == ReleaseLease(key=LEASE, holder=holder(net, view))
    assert net.wait(view).error is None and probes(server) == 0  # connected on the hint
    net.answer_op(net.ops[-2], Released())  # (the release's answer: nothing waits)
    assert fleet(net).counts["hits"] == 1 and fleet(net).counts["misses"] == 1
    assert kinds(net) == ["Read", "AcquireLease", "Read", "ReleaseLease"]  # no write: stored
    assert "0 waiting, 0 leases" in repr(eras(net))


def test_the_loader_gives_its_lease_back_once_its_hint_is_written() -> None:
    server = FakeServer()
    net, view = parked(server)
    net.answer_op(net.ops[-1], Acquired())
    net.answer_op(net.ops[-1], Missing(version=5))
    assert net.wait(view).error is None and probes(server) == 1
    write = net.ops[-1]
    assert write.command == CompareAndSet(
        key=KEY, value=sealed_era(MODERN), expected=5, ttl=86_400.0
    )  # the version read under the lease
    assert "ReleaseLease" not in kinds(net)  # not before the hint is stored
    net.answer_op(write, Written(version=6))
    assert net.ops[-1].command == ReleaseLease(key=LEASE, holder=holder(net, view))
    assert fleet(net).counts["loads"] == 1 and fleet(net).counts["misses"] == 2


def test_a_hint_too_big_to_store_gives_the_lease_back_at_once() -> None:
    net, view = parked(limits=Limits(max_store_value_bytes=10))
    net.answer_op(net.ops[-1], Acquired())
    net.answer_op(net.ops[-1], Missing())
    assert net.wait(view).error is None
    assert kinds(net)[-1] == "ReleaseLease" and "CompareAndSet" not in kinds(net)


def test_a_failed_connect_leaves_the_no_hint_mark_then_gives_the_lease_back() -> None:
    server = FakeServer()
    net, view = parked(server)
    net.plan["127.0.0.1"] = ("tcp", ConnectionRefusedError())
    net.answer_op(net.ops[-1], Acquired())
    net.answer_op(net.ops[-1], Missing(version=4))
    assert isinstance(net.wait(view).error, ConnectionFailed)
    mark = net.ops[-1]
    assert mark.command == CompareAndSet(key=KEY, value=MARK, expected=4, ttl=15.0)
    assert "ReleaseLease" not in kinds(net)  # not before the mark is stored
    net.answer_op(mark, Written(version=5))
    assert net.ops[-1].command == ReleaseLease(key=LEASE, holder=holder(net, view))
    assert fleet(net).counts["writes"] == 1 and fleet(net).counts["loads"] == 1
    # the server is back: the hint replaces the mark (on the mark's version)
    del net.plan["127.0.0.1"]
    again = net.open()
    net.start("connect", again)  # (the era was read here: no read, no lease)
    assert net.wait(again).error is None and probes(server) == 1
    assert net.ops[-1].command == CompareAndSet(
        key=KEY, value=sealed_era(MODERN), expected=5, ttl=86_400.0
    )


@pytest.mark.parametrize("answer", [Conflict(version=9), StoreFailed(reason="timeout", detail="")])
def test_a_mark_not_written_still_gives_the_lease_back(answer: Any) -> None:
    net, view = parked()
    net.plan["127.0.0.1"] = ("tcp", ConnectionRefusedError())
    net.answer_op(net.ops[-1], Acquired())
    net.answer_op(net.ops[-1], Found(value=sealed_era(MODERN) + b"x", version=6))  # garbage
    assert isinstance(net.wait(view).error, ConnectionFailed)
    assert net.ops[-1].command == CompareAndSet(key=KEY, value=MARK, expected=6, ttl=15.0)
    net.answer_op(net.ops[-1], answer)  # (another worker's hint won: it stays)
    assert kinds(net)[-1] == "ReleaseLease"


def test_a_mark_over_max_store_value_bytes_is_not_written() -> None:
    net, view = parked(limits=Limits(max_store_value_bytes=10))
    net.plan["127.0.0.1"] = ("tcp", ConnectionRefusedError())
    net.answer_op(net.ops[-1], Acquired())
    net.answer_op(net.ops[-1], Missing())
    assert isinstance(net.wait(view).error, ConnectionFailed)
    assert kinds(net)[-1] == "ReleaseLease" and "CompareAndSet" not in kinds(net)


def test_a_failed_connect_without_the_lease_leaves_no_mark() -> None:
    net, view = parked()
    net.plan["127.0.0.1"] = ("tcp", ConnectionRefusedError())
    net.answer_op(net.ops[-1], StoreFailed(reason="unavailable", detail="down"))
    assert isinstance(net.wait(view).error, ConnectionFailed)
    assert kinds(net) == ["Read", "AcquireLease"]


def test_a_waiter_that_reads_the_mark_probes_at_once() -> None:
    server = FakeServer()
    net, view = parked(server, limits=Limits(store_load_wait=60.0))
    net.answer_op(net.ops[-1], Held())
    net.tick()
    net.answer_op(net.ops[-1], Missing())  # the loader probes still
    net.tick()
    net.answer_op(net.ops[-1], Found(value=MARK, version=7))  # its probe failed
    assert net.wait(view).error is None and probes(server) == 1
    counts = fleet(net).counts
    assert (counts["waits"], counts["unshared"], counts["waited_out"], counts["loads"]) == (
        1,
        1,
        0,
        1,
    )
    assert net.now < 1.0  # (two re-reads: not store_load_wait)
    assert net.ops[-1].command == CompareAndSet(
        key=KEY, value=sealed_era(MODERN), expected=7, ttl=86_400.0
    )  # its hint replaces the mark
    assert "ReleaseLease" not in kinds(net)  # it held none


def test_a_conn_that_reads_the_mark_first_probes_at_once_without_the_lease() -> None:
    server = FakeServer()
    net = process(server, None)
    views = [net.open(), net.open()]
    for view in views:
        net.start("connect", view)
    net.answer_op(net.ops[-1], Found(value=MARK, version=3))
    assert all(net.wait(view).error is None for view in views)
    assert kinds(net) == ["Read", "CompareAndSet"] and probes(server) == 2
    counts = fleet(net).counts
    assert (counts["unshared"], counts["misses"], counts["loads"]) == (2, 1, 2)
    assert net.ops[-1].command == CompareAndSet(
        key=KEY, value=sealed_era(MODERN), expected=3, ttl=86_400.0
    )


def test_the_read_under_the_lease_that_finds_the_mark_probes_holding_the_lease() -> None:
    server = FakeServer()
    net, view = parked(server)
    net.answer_op(net.ops[-1], Acquired())
    net.answer_op(net.ops[-1], Found(value=MARK, version=2))
    assert net.wait(view).error is None and probes(server) == 1
    assert fleet(net).counts["unshared"] == 0 and fleet(net).counts["misses"] == 2
    assert net.ops[-1].command == CompareAndSet(
        key=KEY, value=sealed_era(MODERN), expected=2, ttl=86_400.0
    )


@pytest.mark.parametrize(
    "body", [{"scope": "unshared", "version": 1}, {"scope": "private"}, {"scope": ["unshared"]}]
)
def test_a_planted_mark_of_the_wrong_shape_is_a_counted_miss(body: Any) -> None:
    net = process(FakeServer(), None)
    view = net.open()
    net.start("connect", view)
    net.answer_op(net.ops[-1], Found(value=sealed(body), version=3))
    assert kinds(net) == ["Read", "AcquireLease"]  # a miss: it loads under the lease
    net.answer_op(net.ops[-1], Held())
    net.tick()
    net.answer_op(net.ops[-1], Found(value=sealed(body), version=3))
    assert not net.finished.get(view.conn_id)  # a miss: it waits on
    assert fleet(net).codec.misses["shape"] == 2 and fleet(net).counts["unshared"] == 0


def test_a_waiter_re_reads_until_the_loader_stored_the_hint() -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    net, view = parked(server, limits=Limits(store_load_wait=1.0))
    net.answer_op(net.ops[-1], Held())
    assert net.driver.next_deadline() == pytest.approx(POLL_FIRST)
    net.tick()  # the first re-read
    assert net.ops[-1].command == Read(key=KEY)
    net.answer_op(net.ops[-1], Missing())
    assert net.driver.next_deadline() == pytest.approx(POLL_FIRST * 3)  # doubled
    net.tick()
    net.answer_op(net.ops[-1], Acquired())  # (an answer no read gets: a miss)
    net.tick()
    net.answer_op(net.ops[-1], Found(value=sealed_era(LEGACY), version=8))
    assert net.wait(view).error is None
    assert probes(server) == 0 and methods(server)[0] == "initialize"
    counts = fleet(net).counts
    assert (counts["waits"], counts["hits"], counts["loads"], counts["reads"]) == (1, 1, 0, 4)
    assert "ReleaseLease" not in kinds(net)  # it held none


@pytest.mark.parametrize("wait", [0.0, 0.05])
def test_a_waiter_past_store_load_wait_probes_itself(wait: float) -> None:
    server = FakeServer()
    net, view = parked(server, limits=Limits(store_load_wait=wait))
    net.answer_op(net.ops[-1], Held())
    answered: set[int] = set()
    while not net.finished.get(view.conn_id):
        net.settle()
        read = net.ops[-1]
        if isinstance(read.command, Read) and read.op_id not in answered:
            answered.add(read.op_id)
            net.answer_op(read, Found(value=b"\x00garbage", version=1))  # a miss
        elif not net.finished.get(view.conn_id):
            net.tick()
    assert len(answered) == (0 if wait == 0 else 2)  # (re-reads at 0.02, 0.05)
    assert net.wait(view).error is None and probes(server) == 1
    assert fleet(net).counts["loads"] == 1 and fleet(net).counts["waits"] == 1
    assert fleet(net).counts["waited_out"] == 1 and fleet(net).counts["unshared"] == 0


@pytest.mark.parametrize("phase", ["lease", "recheck", "poll"])
def test_a_failed_store_is_a_miss_and_the_connect_goes_on(phase: str) -> None:
    server = FakeServer()
    net, view = parked(server)
    if phase == "recheck":
        net.answer_op(net.ops[-1], Acquired())
    elif phase == "poll":
        net.answer_op(net.ops[-1], Held())
        net.tick()
    net.answer_op(net.ops[-1], StoreFailed(reason="unavailable", detail="down"))
    assert net.wait(view).error is None and probes(server) == 1
    assert fleet(net).counts["failures"] == 1 and fleet(net).counts["loads"] == 1
    assert "ReleaseLease" not in kinds(net)  # (recheck: held until its hint is written)
    net.answer_op(net.ops[-1], Written(version=1))
    assert ("ReleaseLease" in kinds(net)) is (phase == "recheck")


@pytest.mark.parametrize("phase", ["lease", "recheck"])
def test_a_store_that_does_not_answer_delays_a_connect_by_store_timeout(phase: str) -> None:
    server = FakeServer()
    net, view = parked(server, limits=Limits(store_timeout=0.5))
    if phase == "recheck":
        net.answer_op(net.ops[-1], Acquired())
    late = net.ops[-1]
    assert net.driver.next_deadline() == pytest.approx(0.5)
    assert net.wait(view).error is None and probes(server) == 1
    assert fleet(net).counts["timeouts"] == 1 and net.now == pytest.approx(0.5)
    if phase == "lease":  # the lease came too late: given back at once
        net.answer_op(late, Acquired())
        assert net.ops[-1].command == ReleaseLease(key=LEASE, holder=holder(net, view))
    else:  # it probed holding the lease: given back once the hint is written
        net.answer_op(late, Found(value=sealed_era(MODERN), version=1))  # late: ignored
        net.answer_op(net.ops[-1], Written(version=2))
        assert kinds(net)[-1] == "ReleaseLease"
    assert fleet(net).counts["hits"] == 0


def test_a_late_held_is_ignored() -> None:
    net, view = parked(limits=Limits(store_timeout=0.5))
    late = net.ops[-1]
    assert net.wait(view).error is None
    count = len(net.ops)
    net.answer_op(late, Held())
    assert len(net.ops) == count and fleet(net).counts["waits"] == 0


def test_a_conn_that_comes_during_a_load_takes_the_lease_step() -> None:
    server = FakeServer()
    net, first = parked(server)
    net.answer_op(net.ops[-1], Acquired())
    second = net.open()
    net.start("connect", second)  # the era was read here, but a load is under way
    assert net.ops[-1].command == AcquireLease(key=LEASE, holder=holder(net, second), ttl=15.0)
    net.answer_op(net.ops[-1], Held())  # (its own process's loader holds it)
    net.answer_op(net.ops[-2], Missing())  # the first's read under the lease: it probes
    assert net.wait(first).error is None and probes(server) == 1
    net.answer_op(
        next(op for op in net.ops if isinstance(op.command, CompareAndSet)), Written(version=1)
    )
    net.tick()  # the second's re-read finds nothing (the store answers by hand)...
    net.answer_op(net.ops[-1], Found(value=sealed_era(MODERN), version=1))  # ...then the hint
    assert net.wait(second).error is None and probes(server) == 1


def test_a_parked_conn_abandoned_leaves_the_mark_and_gives_its_lease_back() -> None:
    net, view = parked()
    net.answer_op(net.ops[-1], Acquired())
    recheck = net.ops[-1]
    net.driver.abandon(view.conn_id, now=net.now)
    net.pump()
    mark = net.ops[-1]  # (nothing read under the lease: written only where none is)
    assert mark.command == CompareAndSet(key=KEY, value=MARK, expected=0, ttl=15.0)
    net.answer_op(mark, Written(version=1))
    assert kinds(net)[-1] == "ReleaseLease"
    count = len(net.ops)
    net.answer_op(recheck, Missing())  # nobody waits for it any more
    assert len(net.ops) == count


def test_a_failed_first_read_takes_no_lease() -> None:
    server = FakeServer()
    net = process(server, None)
    view = net.open()
    net.start("connect", view)
    net.answer_op(net.ops[-1], StoreFailed(reason="timeout", detail="slow"))
    assert net.wait(view).error is None and probes(server) == 1
    assert kinds(net) == ["Read", "CompareAndSet"]


def test_two_conns_of_a_process_take_one_hint_read() -> None:
    server = FakeServer()
    net = process(server, None)
    views = [net.open(), net.open()]
    for view in views:
        net.start("connect", view)
    net.answer_op(net.ops[-1], Found(value=sealed_era(MODERN), version=2))
    assert all(net.wait(view).error is None for view in views)
    assert probes(server) == 0 and kinds(net) == ["Read"]
    assert fleet(net).counts["hits"] == 1 and net.driver.pool.era_hint(URL) == MODERN


def test_an_era_read_by_hand_on_the_shared_eras() -> None:
    fleet_ = Fleet(Limits(), holder="h")
    shared = fleet_.eras
    assert shared is not None and not shared.busy(URL) and not shared.waits(1)
    assert shared.start(1, URL, 0.0) == 1.0 and shared.busy(URL) and shared.waits(1)
    (op,) = [op for op in fleet_._outbox if isinstance(op, StoreOp)]
    assert shared.owns(op.op_id) and not shared.owns(op.op_id + 1)
    shared.written(op.op_id + 1, Written(version=1))  # no lease waits for that op: nothing
    assert shared.answered(op.op_id, Acquired(), 0.0) == (1, 1.0, None)
    shared.done(1)
    assert not shared.busy(URL) and isinstance(fleet_._outbox[-1].command, ReleaseLease)
