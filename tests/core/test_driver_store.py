"""The driver's store seam (issue 28, era hints): ``StoreOp`` commands and their answers.

``StoreNet`` is ``test_driver.Net`` that also performs :class:`StoreOp`: on a
``MemoryStore`` shared by several drivers (one per process of a fleet), or not at all,
so a test answers by hand, late, with a failure or with garbage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sansmcp import ConnectionFailed, UsageError
from sansmcp.core.driver import ClientDriver, Command, Connect, StoreOp
from sansmcp.core.fleet import ERA_CAPACITY, Fleet
from sansmcp.core.limits import Limits
from sansmcp.core.store import (
    CompareAndSet,
    Conflict,
    Found,
    MemoryStore,
    Missing,
    Read,
    StoreFailed,
    Written,
    era_key,
)
from sansmcp.core.store_values import ValueCodec, era_body

from .fakemcp import MODERN, FakeServer
from .test_driver import URL, Net, work_item

LEGACY = "2025-11-25"


@dataclass
class StoreNet(Net):
    store: MemoryStore | None = None  # None: the test answers each StoreOp itself
    ops: list[StoreOp] = field(default_factory=list)

    def execute(self, command: Command) -> None:
        if not isinstance(command, StoreOp):
            return super().execute(command)
        self.ops.append(command)
        store = self.store
        if store is not None:
            answer = store.execute(command.command, now=self.now)
            self.react(
                None, lambda: self.driver.store_answered(command.op_id, answer, now=self.now)
            )
        return None

    def answer_op(self, op: StoreOp, answer: object) -> None:
        self.driver.store_answered(op.op_id, answer, now=self.now)  # type: ignore[arg-type]
        self.pump()


def worker(server: FakeServer, store: MemoryStore | None, limits: Limits | None = None) -> StoreNet:
    driver = ClientDriver(limits=limits, allow_loopback=True, shared_store=True)
    return StoreNet(driver, handlers={8000: server}, store=store)


def methods(server: FakeServer) -> list[str | None]:
    return [body.get("method") if body else None for body in server.bodies]


def sealed_era(version: str) -> bytes:
    value = ValueCodec(1 << 20).seal("era", era_body(version))
    assert value is not None
    return value


def test_a_fleet_probes_a_legacy_endpoint_once() -> None:
    server, store = FakeServer(modern=False, legacy=LEGACY), MemoryStore()
    first = worker(server, store)
    work_item(first)
    assert methods(server).count("server/discover") == 1
    assert [type(op.command) for op in first.ops] == [Read, CompareAndSet]
    assert first.driver.fleet is not None and first.driver.fleet.counts["writes"] == 1
    second = worker(server, store)  # another process of the fleet: its own driver
    work_item(second)
    assert methods(server).count("server/discover") == 1  # no probe: the store's hint
    assert methods(server).count("initialize") == 2
    assert second.driver.pool.era_hint(URL) == LEGACY
    assert [type(op.command) for op in second.ops] == [Read]  # the hint stored is the same
    assert second.driver.fleet is not None and second.driver.fleet.counts["hits"] == 1
    work_item(second)  # known now: no read, no park
    assert len(second.ops) == 1
    alone = worker(server, None)
    alone.driver.fleet = None  # as a Client without a store
    work_item(alone)
    assert methods(server).count("server/discover") == 2 and alone.ops == []


def test_conns_to_one_endpoint_wait_for_one_read() -> None:
    net = worker(FakeServer(), None)
    views = [net.open(), net.open()]
    for view in views:
        net.start("connect", view)
    (op,) = net.ops
    assert op.command == Read(key=era_key(URL))
    assert net.sockets(Connect) == []  # nothing dialled while they wait
    for op_name in ("list_tools", "connect"):
        with pytest.raises(UsageError, match="one operation at a time"):
            net.start(op_name, views[0])
    net.answer_op(op, Missing())
    for view in views:
        assert net.wait(view).error is None
    later = net.open()  # the pool has the era now: no wait
    assert net.ok("connect", later) is None and len(net.ops) == 2  # (the era written)
    assert isinstance(net.ops[1].command, CompareAndSet)


def test_a_store_that_does_not_answer_delays_a_connect_by_store_timeout() -> None:
    limits = Limits(store_timeout=0.25)
    net = worker(FakeServer(), None, limits)
    view = net.open()
    net.start("connect", view)
    (read,) = net.ops
    assert net.driver.next_deadline() == 0.25
    assert net.tick() and net.now == 0.25
    assert net.wait(view).error is None  # went on without a hint
    assert net.driver.pool.era_hint(URL) == MODERN
    net.answer_op(read, Found(value=sealed_era(LEGACY), version=7))  # late: ignored
    assert net.driver.pool.era_hint(URL) == MODERN


def test_a_failed_or_unreadable_answer_is_no_hint() -> None:
    net = worker(FakeServer(), None)
    failing, garbage = net.open(), net.open("http://127.0.0.1:8000/other")
    net.start("connect", failing)
    net.start("connect", garbage)
    first, second = net.ops
    net.answer_op(first, StoreFailed(reason="unavailable", detail="down"))
    net.answer_op(second, Found(value=b"\x00not an era", version=3))
    assert net.wait(failing).error is None and net.wait(garbage).error is None
    fleet = net.driver.fleet
    assert fleet is not None
    assert fleet.counts["failures"] == 1 and fleet.codec.misses["undecodable"] == 1


def test_a_waiting_conn_abandoned_or_closed() -> None:
    net = worker(FakeServer(), None)
    gone, closing = net.open(), net.open("http://127.0.0.1:8000/other")
    net.start("connect", gone)
    net.start("connect", closing)
    net.driver.abandon(gone.conn_id, now=net.now)
    with pytest.raises(UsageError):
        net.start("connect", gone)
    net.answer_op(net.ops[0], Missing())  # nobody waits for it any more
    net.driver.close(now=net.now)
    net.pump()
    (done,) = net.finished[closing.conn_id]
    assert isinstance(done.error, ConnectionFailed) and done.error.cause == "client_closed"
    assert net.sockets(Connect) == []


def test_an_endpoint_is_read_once_even_when_its_connect_failed() -> None:
    net = worker(FakeServer(), None)
    net.plan["127.0.0.1"] = ("tcp", ConnectionRefusedError())
    failed = net.open()
    net.start("connect", failed)
    net.answer_op(net.ops[0], Missing())
    assert isinstance(net.wait(failed).error, ConnectionFailed)
    assert net.driver.pool.era_hint(URL) is None
    net.plan.clear()
    assert net.ok("connect", net.open()) is None
    assert [type(op.command) for op in net.ops] == [Read, CompareAndSet]  # no second read
    closed = net.open()
    assert net.ok("close_conn", closed) is None
    with pytest.raises(UsageError, match="closed"):
        net.start("connect", closed)


def test_unknown_conns_and_answers() -> None:
    net = worker(FakeServer(), None)
    with pytest.raises(UsageError):
        net.driver.connect(999, now=0.0)
    net.answer_op(StoreOp(op_id=999, command=Read(key="k")), Missing())  # never asked: ignored


# -- the Fleet's bookkeeping, on its own -----------------------------------------------


def test_era_writes() -> None:
    fleet = Fleet(Limits())
    op = fleet.era_write(URL, LEGACY)
    assert op is not None and op.command == CompareAndSet(
        key=era_key(URL), value=sealed_era(LEGACY), expected=0, ttl=86_400.0
    )
    assert fleet.era_write(URL, MODERN) is None  # one write in flight per endpoint
    assert fleet.answered(op.op_id, Written(version=5)) is None
    assert fleet.era_write(URL, LEGACY) is None  # stored already
    again = fleet.era_write(URL, MODERN)
    assert again is not None and isinstance(again.command, CompareAndSet)
    assert again.command.expected == 5
    assert fleet.answered(again.op_id, Conflict(version=9)) is None  # another worker's
    third = fleet.era_write(URL, MODERN)
    assert third is not None and isinstance(third.command, CompareAndSet)
    assert third.command.expected == 9
    assert fleet.answered(third.op_id, StoreFailed(reason="timeout", detail="")) is None
    assert fleet.counts == {
        "reads": 0,
        "hits": 0,
        "misses": 0,
        "loads": 0,
        "waits": 0,
        "waited_out": 0,
        "unshared": 0,
        "failures": 1,
        "timeouts": 0,
        "writes": 3,
        "conflicts": 1,
    }
    assert fleet.era_known(URL) and "1 endpoints" in repr(fleet)
    assert Fleet(Limits(max_store_value_bytes=10)).era_write(URL, LEGACY) is None  # too big


def test_remembered_endpoints_are_bounded() -> None:
    fleet = Fleet(Limits())
    for number in range(ERA_CAPACITY + 1):
        url = f"https://mcp{number}.example/mcp"
        op = fleet.wait_era(url, number)
        assert op is not None
        fleet.stop_waiting(url, 10**6)  # not waiting: nothing to remove
        assert fleet.answered(op.op_id, Missing(version=number)) == (url, None, [number])
    assert not fleet.era_known("https://mcp0.example/mcp")
    assert fleet.era_known(f"https://mcp{ERA_CAPACITY}.example/mcp")
