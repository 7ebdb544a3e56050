"""Nothing of a closed Conn outlives it by a reference cycle (issue 26, finding 2).

A reference cycle is freed only when the cyclic collector runs, so a cycle through a
closed Conn kept its last listing alive until then: 200 sequential 1.1 MB listings
peaked at 217 MiB (asyncio) where a ``gc.collect()`` after each kept 32 MiB.  These
tests run work items against real loopback servers with the collector off
(``gc.disable()``, re-enabled in ``finally``) and check, on asyncio, trio and the
blocking adapter, for every way a work item ends (an answer, ``ConnectionFailed``,
``ServerAnswered``, a timeout, the caller's callback raising, a cancellation):

* freed by reference counting alone: weak references to the Conn and its machine are
  dead, and no object of a sansmcp type made by the work items is left;
* and so ``gc.collect()`` with ``DEBUG_SAVEALL`` finds no sansmcp object unreachable;
* memory (tracemalloc's peak) over sequential ~1.1 MB listings with the cache off stays
  within one listing's cost of the first work item's peak, with the collector off.

The work items run on each runtime directly (not through ``sync_shim``'s threads and
futures, whose own bookkeeping would be counted too); exceptions are caught and only
their class kept, so no traceback holds a frame.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import os
import threading
import tracemalloc
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sansmcp import Config, ConnectionFailed, Limits, ServerAnswered
from sansmcp.io_adapters import asyncio as asyncio_adapter
from sansmcp.io_adapters import sync as sync_adapter
from sansmcp.io_adapters import trio as trio_adapter

from .conftest import MODES, RUN_TIMEOUT, Launcher, Server, free_port

FULL = os.environ.get("SANSMCP_HOSTILE_FULL") == "1"
ADAPTERS = ("asyncio", "trio", "sync")
CAPABILITIES = {"elicitation": {"form": {}}}
# How a work item ends, and the exception the caller sees (None: it returns).
OUTCOMES: dict[str, type[BaseException] | None] = {
    "answered": None,
    "refused": ConnectionFailed,  # nothing listens on the port
    "rpc_error": ServerAnswered,  # a JSON-RPC error answer
    "timeout": ConnectionFailed,  # Limits.call_timeout cuts a sleeping call
    "handler_raised": LookupError,  # the caller's own input handler raises: propagates (its class)
    "cancelled": BaseException,  # native cancellation; the blocking adapter: Ctrl-C
}
LISTING_TOOLS, DESCRIPTION_BYTES = 250, 4000  # the big server: a ~1.1 MB tools/list answer


class HandlerFault(LookupError):
    """What the test's input handler raises (the caller's own exception)."""


@pytest.fixture(scope="module")
def servers(launch: Launcher) -> dict[str, Server]:
    """The modern era (stateless, JSON) over HTTP/1.1 and over HTTP/2 (h2c), and the
    legacy one (stateful, SSE, a DELETE)."""
    return {
        "modern": launch(*MODES["stateless-json"]),
        "h2c": launch("--stateless", "--json", "--h2c"),
        "legacy": launch(*MODES["stateful-sse"]),
    }


@pytest.fixture(scope="module")
def big(launch: Launcher) -> Server:
    args = ("--tools", str(LISTING_TOOLS), "--description-bytes", str(DESCRIPTION_BYTES))
    return launch(*MODES["stateless-json"], *args)


# -- work items, one runner per runtime ---------------------------------------------


REFUSED: list[int] = []  # one port nothing listens on (one URL: the URL memo is warm)


def item_config(server: Server, era: str, outcome: str) -> Config:
    if outcome == "refused" and not REFUSED:
        REFUSED.append(free_port())
    url = f"http://127.0.0.1:{REFUSED[0]}/mcp" if outcome == "refused" else server.url()
    return Config(url=url, protocol_versions=["2025-11-25"] if era == "legacy" else None)


def call_for(outcome: str, era: str) -> tuple[str, bytes]:
    if outcome == "rpc_error":
        return "rpc_error", b"{}"
    if outcome in ("timeout", "cancelled"):
        return "sleep", b'{"seconds": 5}'
    if outcome == "handler_raised":
        return ("ask" if era == "legacy" else "ask_mrtr"), b"{}"
    return "echo", b'{"text": "x"}'


Probe = Callable[[Any], None]  # records weak references to a live Conn's parts


async def async_item(
    client: Any, server: Server, era: str, outcome: str, probe: Probe, cancel: Any
) -> None:
    """One work item on an async Client: connect, list, call, close."""
    async with client.connect(item_config(server, era, outcome)) as conn:
        probe(conn)
        tools = await conn.list_tools()
        assert tools and conn.skipped_count == 0
        name, arguments = call_for(outcome, era)
        if outcome == "cancelled":
            await cancel(conn.call_tool(name, arguments))
        else:
            result = await conn.call_tool(name, arguments)
            assert result.content[0].text == "x"


def sync_item(client: Any, server: Server, era: str, outcome: str, probe: Probe) -> None:
    with client.connect(item_config(server, era, outcome)) as conn:
        probe(conn)
        tools = conn.list_tools()
        assert tools and conn.skipped_count == 0
        name, arguments = call_for(outcome, era)
        if outcome == "cancelled":  # the blocking adapter's cancellation: a KeyboardInterrupt
            name, arguments = ("ask" if era == "legacy" else "ask_mrtr"), b"{}"
        result = conn.call_tool(name, arguments)
        assert result.content[0].text == "x"


def client_kwargs(
    outcomes: list[str], adapter: str, era: str, limits: Limits | None, current: list[str]
) -> dict[str, Any]:
    """The Client's arguments: an input handler that raises (the caller's fault), or, on
    the blocking adapter in a "cancelled" item, a KeyboardInterrupt (its cancellation)."""

    def raising(requests: Mapping[str, Any]) -> None:
        if current[0] == "cancelled":
            raise KeyboardInterrupt
        raise HandlerFault(f"refused {len(requests)}")

    async def raising_async(requests: Mapping[str, Any]) -> None:
        raising(requests)

    if limits is None:
        limits = Limits(call_timeout=0.2) if "timeout" in outcomes else Limits()
    handler = raising if adapter == "sync" else raising_async
    return {
        "allow_loopback": True,
        "limits": limits,
        "input_handler": handler,
        "capabilities": CAPABILITIES,
        "http2_prior_knowledge": era == "h2c",
    }


def run_items(
    adapter: str,
    server: Server,
    era: str,
    outcomes: list[str],
    probe: Probe,
    *,
    limits: Limits | None = None,
    after_each: Callable[[], None] = lambda: None,
) -> list[str]:
    """Run one work item per outcome on one Client (closed at the end): the class name of
    what each raised ("" for none), nothing else of it kept."""
    seen: list[str] = []
    current = [""]  # the outcome of the item in hand
    kwargs = client_kwargs(outcomes, adapter, era, limits, current)

    def record(exc: BaseException | None) -> None:
        seen.append("" if exc is None else type(exc).__name__)

    if adapter == "sync":
        with sync_adapter.Client(**kwargs) as client:
            for outcome in outcomes:
                current[0] = outcome
                try:
                    sync_item(client, server, era, outcome, probe)
                    record(None)
                except (ConnectionFailed, ServerAnswered, LookupError) as exc:
                    record(exc)
                except KeyboardInterrupt:
                    seen.append("cancelled")
                after_each()
        join_sync_threads()
        return seen

    async def asyncio_cancel(awaitable: Any) -> None:
        task = asyncio.ensure_future(awaitable)
        await asyncio.sleep(0.1)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise asyncio.CancelledError  # the work item ends in its cancellation

    async def trio_cancel(awaitable: Any) -> None:
        with trio.move_on_after(0.1) as scope:
            await awaitable
        assert scope.cancelled_caught
        raise trio.TooSlowError  # the work item ends in its cancellation

    module, cancel = (
        (asyncio_adapter, asyncio_cancel) if adapter == "asyncio" else (trio_adapter, trio_cancel)
    )

    async def main() -> None:
        async with module.Client(**kwargs) as client:
            for outcome in outcomes:
                current[0] = outcome
                try:
                    await async_item(client, server, era, outcome, probe, cancel)
                    record(None)
                except (ConnectionFailed, ServerAnswered, LookupError) as exc:
                    record(exc)
                except (asyncio.CancelledError, trio.TooSlowError):
                    seen.append("cancelled")
                after_each()

    if adapter == "asyncio":
        asyncio.run(main())
    else:
        trio.run(main)
    return seen


def join_sync_threads() -> None:
    """The blocking Client's threads end with its close (and let go of it): wait for them."""
    for thread in threading.enumerate():
        if thread.name.startswith("sansmcp-"):
            thread.join(timeout=RUN_TIMEOUT)


def expected(outcome: str) -> str:
    if outcome in ("cancelled", "handler_raised"):
        return {"cancelled": "cancelled", "handler_raised": HandlerFault.__name__}[outcome]
    error = OUTCOMES[outcome]
    return "" if error is None else error.__name__


def ours(o: object) -> bool:
    """``o`` is an instance of one of sansmcp's own types."""
    module = type(o).__dict__.get("__module__")
    return isinstance(module, str) and module.startswith("sansmcp")


def sansmcp_objects() -> collections.Counter[str]:
    """The objects of sansmcp's own types the collector tracks, by type."""
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects() if ours(o))


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def check_nothing_left(adapter: str, server: Server, era: str, outcomes: list[str]) -> None:
    """Run ``outcomes`` with the collector off; then nothing of sansmcp's is left alive
    and the collector finds nothing of sansmcp's unreachable."""
    refs: list[weakref.ref[Any]] = []

    def probe(conn: Any) -> None:
        refs.extend([weakref.ref(conn), weakref.ref(conn.machine), weakref.ref(conn.client)])

    run_items(adapter, server, era, outcomes, lambda conn: None)  # warm: lazy imports, memos
    with collector_off():
        before = sansmcp_objects()
        seen = run_items(adapter, server, era, outcomes, probe)
        assert seen == [expected(outcome) for outcome in outcomes]
        alive = [ref() for ref in refs if ref() is not None]
        assert not alive, f"alive after close (a reference cycle holds them): {alive}"
        left = sansmcp_objects() - before
        assert not left, f"sansmcp objects left by the work items: {dict(left)}"
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        garbage = collections.Counter(type(o).__qualname__ for o in gc.garbage if ours(o))
        assert not garbage, f"sansmcp objects only the collector frees: {dict(garbage)}"


@pytest.mark.parametrize("outcome", list(OUTCOMES))
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_closed_conn_leaves_no_cycle(
    adapter: str, outcome: str, servers: dict[str, Server]
) -> None:
    check_nothing_left(adapter, servers["modern"], "modern", [outcome])


@settings(
    max_examples=60 if FULL else 6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    adapter=st.sampled_from(ADAPTERS),
    era=st.sampled_from(["modern", "h2c", "legacy"]),
    outcomes=st.lists(st.sampled_from(list(OUTCOMES)), min_size=1, max_size=4),
)
def test_work_items_in_any_order_leave_no_cycle(
    adapter: str, era: str, outcomes: list[str], servers: dict[str, Server]
) -> None:
    check_nothing_left(adapter, servers[era], era, outcomes)


# -- memory over sequential listings -------------------------------------------------

ITEMS = 200 if FULL else 30


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_memory_stays_flat_over_sequential_listings(adapter: str, big: Server) -> None:
    """``ITEMS`` listings of ~1.1 MB (the cache off, the collector off): tracemalloc's
    peak over them all stays within one listing's cost (and 1 MiB) of the first item's."""
    limits = Limits(max_cache_entries=0)
    peaks: list[int] = []
    listing: list[int] = []

    def probe(conn: Any) -> None:
        pass

    def after_each() -> None:
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.reset_peak()

    run_items(adapter, big, "modern", ["answered"], probe, limits=limits)  # warm
    with collector_off():
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            held = listing_cost(adapter, big, limits)
            listing.append(held)
            tracemalloc.reset_peak()
            run_items(
                adapter,
                big,
                "modern",
                ["answered"] * ITEMS,
                probe,
                limits=limits,
                after_each=after_each,
            )
        finally:
            tracemalloc.stop()
    first, worst = peaks[0] - base, max(peaks) - base
    assert held > 500_000, f"a listing costs {held:,} bytes: not the ~1.1 MB one"
    assert worst <= first + held + 2**20, (
        f"peak {worst:,} bytes over {ITEMS} items; the first item's {first:,}, a listing"
        f" {held:,}: something of a closed Conn stays alive"
    )


def listing_cost(adapter: str, server: Server, limits: Limits) -> int:
    """What one parsed listing holds: traced bytes while it is kept (its Client closed),
    less before its Client was made."""
    kept: list[Any] = []

    async def list_async(module: Any) -> None:
        async with (
            module.Client(allow_loopback=True, limits=limits) as client,
            client.connect(Config(url=server.url())) as conn,
        ):
            kept.append(await conn.list_tools())

    def list_sync() -> None:
        with (
            sync_adapter.Client(allow_loopback=True, limits=limits) as client,
            client.connect(Config(url=server.url())) as conn,
        ):
            kept.append(conn.list_tools())

    before = tracemalloc.get_traced_memory()[0]
    if adapter == "sync":
        list_sync()
        join_sync_threads()
    elif adapter == "asyncio":
        asyncio.run(list_async(asyncio_adapter))
    else:
        trio.run(list_async, trio_adapter)
    held = tracemalloc.get_traced_memory()[0] - before
    kept.clear()
    return held
