"""The pool's per-origin structures choose as the old scans did (issue 16, item 1).

Checkout and release used to scan every socket of the origin (the most recently used
idle HTTP/1.1 socket that can start; at the per-origin cap, the first idle socket to
close) and sort every idle one (the excess over ``pool_max_idle_per_origin``, retirable
first, then least recently used).  The pool now keeps each origin's idle sockets in the
order they became idle.  :func:`reference_checkout` and :func:`reference_release` are
those scans, run over the pool's own account of its sockets before each call; with a
clock that moves forward at every step (ties in ``last_used`` never arise) every choice
must be the same.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.limits import Limits
from sansmcp.core.net.pool import DialNeeded, MustWait, Pool, UseConnection
from sansmcp.core.url import Origin
from tests.tiers import examples

from .test_pool import Factory, FakeWire

ORIGINS = [Origin(scheme="http", host=f"h{i}.example", port=80) for i in range(3)]
LIMITS = Limits(
    pool_max_sockets=6,
    pool_max_sockets_per_origin=4,
    pool_max_idle_per_origin=2,
    pool_idle_timeout=50.0,
)


def _idle(pool: Pool, origin: Origin | None = None) -> list[object]:
    return [
        conn
        for conn in pool._conns.values()
        if conn.idle() and (origin is None or conn.origin == origin)
    ]


def _close_key(conn: object) -> tuple[bool, float, int]:
    return (not conn.retirable(), conn.last_used, conn.conn_id)  # type: ignore[attr-defined]


def reference_checkout(pool: Pool, origin: Origin) -> tuple[str, int | None, tuple[int, ...]]:
    """("use", id, ()) / ("dial", None, close_first) / ("wait", None, ()) by the old scan."""
    best = None
    for conn in pool._conns.values():
        if conn.origin != origin or conn.wire is None or conn.leases:
            continue
        if conn.wire.is_broken or not conn.wire.can_start():
            continue
        if best is None or conn.last_used >= best.last_used:
            best = conn
    if best is not None:
        return "use", best.conn_id, ()
    mine = [c for c in pool._conns.values() if c.origin == origin and c.state.name != "CLOSED"]
    if len(mine) >= LIMITS.pool_max_sockets_per_origin:
        idle = _idle(pool, origin)
        if not idle:
            return "wait", None, ()
        return "dial", None, (min(idle, key=_close_key).conn_id,)  # type: ignore[attr-defined]
    if pool.socket_count >= LIMITS.pool_max_sockets:
        idle = _idle(pool)
        if not idle:
            return "wait", None, ()
        return "dial", None, (min(idle, key=_close_key).conn_id,)  # type: ignore[attr-defined]
    return "dial", None, ()


def reference_release(pool: Pool, conn_id: int) -> list[int]:
    """The ids the old release closed: this one if it cannot start again, else the idle
    excess of its origin (counting this one, about to be idle)."""
    conn = pool._conns[conn_id]
    assert conn.wire is not None
    if conn.wire.is_broken or (conn.leases == 1 and not conn.wire.can_start()):
        return [conn_id]
    if conn.leases > 1:
        return []
    idle = [*_idle(pool, conn.origin), conn]
    keys = sorted(  # the released one sorts as used now: the latest
        (_close_key(c) if c is not conn else (True, float("inf"), conn_id), c.conn_id)  # type: ignore[attr-defined]
        for c in idle
    )
    excess = len(idle) - LIMITS.pool_max_idle_per_origin
    return [c_id for _, c_id in keys[: max(excess, 0)]]


# mostly checkouts and releases (so origins hold several idle sockets to choose from);
# now and then a wire degrades or time passes
KINDS = ["checkout"] * 5 + ["release"] * 5 + ["break", "no_keep_alive", "expire"]
step = st.tuples(st.sampled_from(KINDS), st.integers(0, 60))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(step, max_size=80))
def test_choices_match_the_old_scans(steps: list[tuple[str, int]]) -> None:
    factory = Factory()
    pool = Pool(limits=LIMITS, wire_factory=factory)
    now = 0.0
    held: list[int] = []  # one entry per started lease (HTTP/1.1: one per socket)
    for kind, arg in steps:
        now += 1.0
        if kind == "checkout":
            origin = ORIGINS[arg % len(ORIGINS)]
            if pool.waiting():  # keep the queue out of it: the scans are of one checkout
                continue
            expected = reference_checkout(pool, origin)
            result = pool.checkout(origin, now=now)
            if isinstance(result, MustWait):
                assert expected[0] == "wait"
                pool.withdraw(result.ticket, now=now)
                continue
            if isinstance(result, UseConnection):
                assert expected == ("use", result.conn_id, ())
                conn_id = result.conn_id
            else:
                assert isinstance(result, DialNeeded)
                assert expected == ("dial", None, result.close_first)
                for closed in result.close_first:
                    assert closed not in held
                conn_id = result.conn_id
                pool.dial_succeeded(conn_id, alpn=None, now=now)
            wire = pool.wire(conn_id)
            assert isinstance(wire, FakeWire)
            wire.start()
            pool.started(conn_id, now=now)
            held.append(conn_id)
        elif kind == "release" and held:
            conn_id = held.pop(arg % len(held))
            wire = pool.wire(conn_id)
            assert isinstance(wire, FakeWire)
            wire.finish()
            expected_closed = reference_release(pool, conn_id)
            assert sorted(pool.release(conn_id, now=now)) == sorted(expected_closed)
        elif kind in ("break", "no_keep_alive") and factory.made:
            degraded = factory.made[arg % len(factory.made)]
            if kind == "break":
                degraded.broken = True
            else:
                degraded.keep_alive = False
        elif kind == "expire":
            now += arg
            pool.expire(now=now)
    # the per-origin views agree with the pool's account
    for origin in ORIGINS:
        assert pool.idle_count(origin) == len(_idle(pool, origin))
