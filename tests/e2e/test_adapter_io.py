"""What the adapters' own I/O paths promise (issue 16: the trio, asyncio and blocking rows).

* A write the kernel does not take at once is finished later, whole and in order (the
  trio adapter sends plain sockets where ``Write`` is pumped and queues only the rest).
* The one timer is moved only earlier: a deadline that moved later makes it fire early,
  find nothing due and wait on; the later deadline still binds, no sooner and no later.
* A sequential call costs its runtime no more wake-ups than a hand-written client:
  one of the socket's reader, one of the caller's task (counted with trio's
  ``Instrument`` and with a selector that counts the asyncio loop's passes); on the
  blocking adapter, the driver's next deadline is read once per ``select``, not again
  by every pump (no other thread selects, so no one else minds it) -- and a deadline
  another thread arms while one selects, already due when that select returns, fires in
  that same step (no later step may come).
* Every runtime's timer takes the farthest deadline the driver arms (``Limits`` at
  1e308 s: deadlines of ~1e308, or inf once overflowed): trio's cancel scope and asyncio's
  ``call_at`` as they are, the blocking adapter's ``poll`` cut to ``MAX_WAIT`` per wait.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import selectors
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
import trio
import trio.testing

from sansmcp import Config, ConnectionFailed, Limits
from sansmcp.io_adapters import asyncio as asyncio_adapter
from sansmcp.io_adapters import sync as sync_adapter
from sansmcp.io_adapters import trio as trio_adapter
from tests.hostile.answers import Request, call_result, json_answer, result, well_behaved
from tests.hostile.server_h1 import H1Reply, H1Server
from tests.hostile.serving import ServerThread

from ..timing import Stopwatch, assert_span_within
from .conftest import Backend, Server

BIG = 8 << 20  # bytes of arguments: far more than a loopback socket's buffers hold
STALL = 0.3  # seconds the server waits before it reads a big body
SLACK = 1.0  # past a deadline: CPU time always, wall time in `make hostile` (tests/timing.py)
CALL_BOUND = 2.5
EARLY = 0.02  # clocks differ slightly between the runtime and time.monotonic()


class StallingServer(H1Server):
    """Reads a big body only after ``STALL`` seconds (the client's sends fill the socket
    buffers meanwhile); answers a call with the length and digest of what arrived."""

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                raw = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            request_line, *lines = raw[:-4].decode("latin-1").split("\r\n")
            method, target, _ = request_line.split(" ", 2)
            headers = {}
            for line in lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if length > BIG:
                await asyncio.sleep(STALL)
            body = await reader.readexactly(length)
            request = Request(method, target, headers, body, json.loads(body) if body else None)
            self.stats.requests.append(request)
            await self.handler(request, H1Reply(writer, self.stats))


async def digest(request: Request, reply: H1Reply) -> None:
    if request.rpc_method != "tools/call":
        return await reply.answer(well_behaved(request))
    text = request.params["arguments"]["text"]
    seen = f"{len(text)} {hashlib.sha256(text.encode()).hexdigest()}"
    content = [{"type": "text", "text": seen}]
    await reply.answer(json_answer(result(request.rpc_id, call_result(content))))


def test_a_request_larger_than_the_socket_buffers_arrives_whole(backend: Backend) -> None:
    texts = [c * (BIG + 1) for c in "ab"]  # two in a row on one socket: in order, each whole

    async def main(url: str) -> list[str]:
        seen = []
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(Config(url=url)) as conn,
        ):
            for text in texts:
                arguments = json.dumps({"text": text}).encode()
                seen.append((await conn.call_tool("echo", arguments)).content[0].text)
            assert client.pool.socket_count == 1
        return seen

    with ServerThread(StallingServer(digest)) as server:
        seen = backend.run(lambda: main(f"http://127.0.0.1:{server.port}/mcp"))
    assert seen == [f"{len(t)} {hashlib.sha256(t.encode()).hexdigest()}" for t in texts]


def test_a_deadline_that_moved_later_binds_at_its_own_time(backend: Backend, plain: Server) -> None:
    # the listing arms the timer at +0.3 s; each call's deadline is later, so the armed
    # timer fires early, mid-call, and must neither fail the call nor forget its deadline
    # (call_timeout leaves the 0.8 s call 1.7 s of scheduling slack on a loaded machine)
    limits = Limits(list_timeout=0.3, call_timeout=CALL_BOUND)

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, limits=limits) as client,
            client.connect(Config(url=plain.url())) as conn,
        ):
            await conn.list_tools()
            result = await conn.call_tool("sleep", b'{"seconds": 0.8}')
            assert result.content[0].text is not None
            watch = Stopwatch()
            with pytest.raises(ConnectionFailed) as failed:
                await conn.call_tool("sleep", b'{"seconds": 5}')
            took = watch.read()
            assert failed.value.cause == "timeout", failed.value
            assert failed.value.bound == "call_timeout", failed.value
            assert took.wall >= CALL_BOUND - EARLY, took
            assert_span_within(took, CALL_BOUND + SLACK, "the call")

    backend.run(main)


CALLS = 20


class CountingSelector(selectors.DefaultSelector):
    """The asyncio loop's passes: one ``select`` each."""

    passes = 0

    def select(self, timeout: float | None = None) -> Any:
        self.passes += 1
        return super().select(timeout)


class StepCounter(trio.abc.Instrument):
    steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


def test_a_sequential_call_wakes_the_asyncio_loop_twice() -> None:
    selector = CountingSelector()

    async def main(url: str) -> int:
        async with (
            asyncio_adapter.Client(allow_loopback=True) as client,
            client.connect(Config(url=url)) as conn,
        ):
            await conn.call_tool("echo", b'{"text": "warm"}')
            before = selector.passes
            for _ in range(CALLS):
                await conn.call_tool("echo", b'{"text": "hi"}')
            return selector.passes - before

    with ServerThread(H1Server()) as server:  # one write per answer: one read
        loop = asyncio.SelectorEventLoop(selector)
        try:
            passes = loop.run_until_complete(main(f"http://127.0.0.1:{server.port}/mcp"))
        finally:
            loop.close()
    # per call: the pass that reads the answer, the pass that resumes the caller (a
    # reader task of its own would cost a third)
    assert passes <= 2 * CALLS, passes


def test_a_sequential_call_costs_trio_two_task_steps() -> None:
    counter = StepCounter()

    async def main(url: str) -> int:
        async with (
            trio_adapter.Client(allow_loopback=True) as client,
            client.connect(Config(url=url)) as conn,
        ):
            await conn.call_tool("echo", b'{"text": "warm"}')
            trio.lowlevel.add_instrument(counter)
            for _ in range(CALLS):
                await conn.call_tool("echo", b'{"text": "hi"}')
            trio.lowlevel.remove_instrument(counter)
            return counter.steps

    with ServerThread(H1Server()) as server:
        steps = trio.run(main, f"http://127.0.0.1:{server.port}/mcp")
    # per call: the reader's step (the answer read) and the caller's; the request is
    # sent where it is pumped, by the caller, with no writer task and no checkpoint
    assert steps <= 2 * CALLS, steps


def test_a_sequential_blocking_call_reads_the_next_deadline_once_per_select() -> None:
    with ServerThread(H1Server()) as server, sync_adapter.Client(allow_loopback=True) as client:
        driver, loop = client._driver, client._loop
        counts = {"deadlines": 0, "selects": 0}

        def counted(fn: Any, key: str) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                counts[key] += 1
                return fn(*args, **kwargs)

            return wrapper

        with client.connect(Config(url=f"http://127.0.0.1:{server.port}/mcp")) as conn:
            conn.call_tool("echo", b'{"text": "warm"}')
            driver.next_deadline = counted(driver.next_deadline, "deadlines")  # type: ignore[method-assign]
            loop.wait = counted(loop.wait, "selects")  # type: ignore[method-assign]
            for _ in range(CALLS):
                conn.call_tool("echo", b'{"text": "hi"}')
    # per call: each poll step reads one, the pump that sends the request none (it would
    # only if the watcher were selecting then, which a load pause of GRACE can cause);
    # a pump that read it too would make that 2 * selects + CALLS
    assert counts["selects"] >= CALLS, counts  # the setup: each call selected
    assert counts["deadlines"] <= counts["selects"] + CALLS // 2, counts  # the behaviour


def test_a_due_deadline_another_thread_armed_during_select_fires_in_that_step() -> None:
    """The leader selects with no deadline; meanwhile another thread (played here inside the
    select, the lock let go, as a resolver reporting would) arms one already due and pumps.
    The leader's step must fire it: its own mail may end its turn before a next step."""
    with sync_adapter.Client(allow_loopback=True) as client:
        real, fired = client._driver, []
        armed: list[float] = []
        fake = SimpleNamespace(
            next_deadline=lambda: armed[0] if armed else None,
            next_command=lambda: None,
            handle_timer=lambda now: fired.append(now),
        )

        def select(timeout: float | None) -> list[Any]:
            assert timeout is None  # nothing was armed when the leader looked
            with client._lock:  # another thread's report: a deadline due at once, pumped
                armed.append(time.monotonic() - 0.001)
                client._pump()
            return []

        client._driver, client._loop.wait = cast(Any, fake), select  # type: ignore[method-assign]
        try:
            with client._lock:
                client._poll()
        finally:
            client._driver = real
    assert len(fired) == 1 and fired[0] >= armed[0], (fired, armed)


def test_mail_for_a_trio_caller_cancelled_while_parked_is_kept_not_rescheduled() -> None:
    # The cancellation reschedules the parked caller at once; mail posted before it runs
    # (a reader's pump in the same scheduler pass) must not reschedule it a second time.
    conn = trio_adapter.Conn(
        cast(Any, SimpleNamespace(telemetry=None)), cast(Any, SimpleNamespace(machine=None))
    )
    mail = cast(Any, "mail")

    async def main() -> list[object]:
        outcome: list[object] = []
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def caller() -> None:
                with scope:
                    await conn._next()
                outcome.append("cancelled")

            nursery.start_soon(caller)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()  # (the parked task is rescheduled with Cancelled now)
            conn._post(mail)
        outcome.append(await conn._next())  # kept: taken without parking
        return outcome

    assert trio.run(main) == ["cancelled", "mail"]


def test_mail_for_an_asyncio_caller_cancelled_while_parked_is_kept() -> None:
    conn = asyncio_adapter.Conn(
        cast(Any, SimpleNamespace(telemetry=None)), cast(Any, SimpleNamespace(machine=None))
    )
    mail = cast(Any, "mail")

    async def main() -> list[object]:
        caller = asyncio.ensure_future(conn._next())
        await asyncio.sleep(0)  # parked
        caller.cancel()
        conn._post(mail)
        with pytest.raises(asyncio.CancelledError):
            await caller
        return [await conn._next()]  # kept: taken without parking

    assert asyncio.run(main()) == ["mail"]


FAR = 1e308  # seconds: now + FAR is as far as a float goes (or overflows to inf)


def test_the_farthest_deadlines_arm_every_runtime_s_timer(backend: Backend) -> None:
    limits = Limits(
        dial_timeout=FAR,
        connect_timeout=FAR,
        list_timeout=FAR,
        call_timeout=FAR,
        close_timeout=FAR,
        pool_idle_timeout=FAR,
    )

    async def main(url: str) -> list[str | None]:
        texts = []
        async with (
            backend.Client(allow_loopback=True, limits=limits) as client,
            client.connect(Config(url=url)) as conn,
        ):
            deadline = client._driver.next_deadline()
            assert deadline is not None and deadline > 1e307  # (armed: the idle socket's)
            for timeout in (None, FAR):
                result = await conn.call_tool("echo", b'{"text": "hi"}', timeout=timeout)
                texts.append(result.content[0].text)
        return texts

    with ServerThread(H1Server()) as server:
        url = f"http://127.0.0.1:{server.port}/mcp"
        assert backend.run(lambda: main(url)) == ['{"text": "hi"}'] * 2
