"""A resolver hook raising what is not an ``Exception`` (``SystemExit``, a bare
``BaseException`` subclass) is a dial input like any other: each connect fails
``ConnectionFailed(cause="dns")`` naming the hook, promptly (not at its dial timeout),
and the Client's name resolution keeps working -- on the blocking adapter no resolver
thread dies of it (more such hooks than ``sync.RESOLVERS`` threads), on the async ones
the resolve task reports it instead of dying (or, on asyncio, stopping the loop).
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from sansmcp import Config, ConnectionFailed, Limits
from sansmcp.core.driver import Resolve
from sansmcp.io_adapters import asyncio as asyncio_adapter
from sansmcp.io_adapters import sync
from sansmcp.io_adapters import trio as trio_adapter
from sansmcp.io_adapters._common import resolve
from tests.hostile.server_h1 import H1Server
from tests.hostile.serving import ServerThread
from tests.timing import WALL, Span, Stopwatch

DIAL = 4.0  # seconds of dial timeout: far over what a prompt failure takes
PROMPT = 2.0  # an upper bound: CPU time always, wall time in `make hostile` (tests/timing.py)
TIMES = sync.RESOLVERS + 2


class Odd(BaseException):
    """Neither an Exception nor a cancellation."""


RAISED = [SystemExit("hook exits"), Odd("odd"), GeneratorExit()]


def _outcome(failed: ConnectionFailed, spent: Span) -> tuple[str | None, bool, bool]:
    # cause "dns", not "timeout": it failed before its dial timeout, however loaded the machine
    prompt = spent.cpu < PROMPT and (spent.wall < PROMPT or not WALL)
    return failed.cause, "resolver hook" in failed.message, prompt


@pytest.mark.parametrize("raised", RAISED, ids=lambda e: type(e).__name__)
def test_a_blocking_hook_raising_a_base_exception_fails_each_dial_and_kills_no_thread(
    raised: BaseException,
) -> None:
    mode = {"raise": True}

    def hook(host: str, port: int) -> list[str]:
        if mode["raise"]:
            raise raised
        return ["127.0.0.1"]

    outcomes = []
    with (
        ServerThread(H1Server()) as server,
        sync.Client(allow_loopback=True, resolver=hook, limits=Limits(dial_timeout=DIAL)) as client,
    ):
        for index in range(TIMES):
            watch = Stopwatch()
            url = f"http://h{index}.test:{server.port}/mcp"
            with pytest.raises(ConnectionFailed) as failed, client.connect(Config(url=url)):
                raise AssertionError("connected through a raising hook")
            outcomes.append(_outcome(failed.value, watch.read()))
        mode["raise"] = False
        with client.connect(Config(url=f"http://good.test:{server.port}/mcp")) as conn:
            assert conn.protocol_version is not None
        busy = client._resolvers._busy
    assert outcomes == [("dns", True, True)] * TIMES
    assert busy == 0


def test_an_async_hook_given_to_the_blocking_client_fails_without_a_warning() -> None:
    async def hook(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with (
            sync.Client(allow_loopback=True, resolver=hook) as client,
            pytest.raises(ConnectionFailed) as failed,
            client.connect(Config(url="http://x.test:9/mcp")),
        ):
            raise AssertionError("connected through a coroutine")
        cause = failed.value.cause
        del client, failed  # what may still hold the coroutine, collected while recording
        gc.collect()
    assert cause == "dns"
    assert [str(w.message) for w in seen if "never awaited" in str(w.message)] == []


@pytest.mark.parametrize("raised", RAISED[:2], ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("runtime", ["asyncio", "trio"])
def test_an_async_hook_raising_a_base_exception_fails_each_dial(
    runtime: str, raised: BaseException
) -> None:
    adapter: Any = asyncio_adapter if runtime == "asyncio" else trio_adapter
    mode = {"raise": True}

    async def hook(host: str, port: int) -> list[str]:
        if mode["raise"]:
            raise raised
        return ["127.0.0.1"]

    async def main(port: int) -> list[tuple[str | None, bool, bool]]:
        outcomes = []
        limits = Limits(dial_timeout=DIAL)
        async with adapter.Client(allow_loopback=True, resolver=hook, limits=limits) as client:
            for index in range(3):
                watch = Stopwatch()
                with pytest.raises(ConnectionFailed) as failed:
                    async with client.connect(Config(url=f"http://h{index}.test:{port}/mcp")):
                        raise AssertionError("connected through a raising hook")
                outcomes.append(_outcome(failed.value, watch.read()))
            mode["raise"] = False
            async with client.connect(Config(url=f"http://good.test:{port}/mcp")) as conn:
                assert conn.protocol_version is not None
        return outcomes

    with ServerThread(H1Server()) as server:
        if runtime == "asyncio":
            outcomes = asyncio.run(main(server.port))
        else:
            outcomes = trio.run(main, server.port)
    assert outcomes == [("dns", True, True)] * 3


@pytest.mark.parametrize("cancelled", [asyncio.CancelledError, trio.Cancelled, KeyboardInterrupt])
def test_a_cancellation_in_the_async_resolve_propagates_and_is_not_reported(
    cancelled: type[BaseException],
) -> None:
    """The runtime's cancellation (and a ``KeyboardInterrupt``) raised where the hook is
    awaited leaves ``resolve`` as itself: nothing is reported to the driver.  (A guard on
    the widened catch: the old code caught only ``Exception`` and let these through too.)"""
    reports: list[str] = []
    driver = SimpleNamespace(
        resolved=lambda *a, **k: reports.append("resolved"),
        resolve_failed=lambda *a, **k: reports.append("failed"),
    )
    client: Any = SimpleNamespace(
        _resolver=None, _driver=driver, _now=lambda: 0.0, _pump=lambda: None
    )
    raised = cancelled._create() if cancelled is trio.Cancelled else cancelled()

    async def getaddrinfo(*args: object, **kwargs: object) -> list[Any]:
        raise raised

    coroutine = resolve(client, Resolve(dial_id=1, host="x.test", port=9), getaddrinfo, cancelled)
    with pytest.raises(cancelled):
        coroutine.send(None)
    assert reports == []
