"""The trio adapter's tasks: owned by the Client's nursery, none outliving it, none
killing the run (the far deadlines its timer takes: ``test_adapter_io.py``).

Real sockets on loopback (the hostile suite's HTTP/1.1 server in a thread).  A trio
system task that raises ends the whole run (``TrioInternalError``), and one still
running after its Client closed is a leak: ``async with Client()`` runs every task of
the Client (resolves, sockets, the timer) in its nursery, and a socket task's fault is
the driver's ``reader_failed`` (its exchanges fail classified), never an escape.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from sansmcp import Config, ConnectionFailed
from sansmcp.io_adapters import trio as trio_adapter
from tests.hostile.server_h1 import H1Server
from tests.hostile.serving import ServerThread

RUN_TIMEOUT = 60.0  # a safety net on each run (a loaded machine), never a speed assertion


def _tasks(task: trio.lowlevel.Task) -> Iterator[trio.lowlevel.Task]:
    """Every task under ``task`` (its nurseries' children, theirs, ...)."""
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            yield child
            yield from _tasks(child)


def _ours(task: trio.lowlevel.Task) -> list[str]:
    """The names of the sansmcp tasks under ``task`` (named ``sansmcp-<what>-<id>``)."""
    return sorted(child.name for child in _tasks(task) if child.name.startswith("sansmcp-"))


def _run(main: Any, *args: Any) -> Any:
    async def bounded() -> Any:
        with trio.fail_after(RUN_TIMEOUT):
            return await main(*args)

    return trio.run(bounded)


def test_the_client_s_tasks_run_in_its_nursery_and_none_outlives_the_block() -> None:
    async def main(url: str) -> dict[str, list[str]]:
        root = trio.lowlevel.current_root_task()
        async with (
            trio_adapter.Client(allow_loopback=True) as client,
            client.connect(Config(url=url)) as conn,
        ):
            await conn.call_tool("echo", b'{"text": "hi"}')
            nursery = client._nursery
            assert nursery is not None
            inside = sorted(task.name for task in nursery.child_tasks)
            system = [  # trio's system nursery: the root task's children
                task.name
                for child_nursery in root.child_nurseries
                for task in child_nursery.child_tasks
                if task.name.startswith("sansmcp-")
            ]
        return {"inside": inside, "system": system, "after": _ours(root)}

    with ServerThread(H1Server()) as server:
        seen = _run(main, f"http://127.0.0.1:{server.port}/mcp")
    assert "sansmcp-timer" in seen["inside"], seen
    assert any(name.startswith("sansmcp-socket-") for name in seen["inside"]), seen
    assert seen["system"] == [] and seen["after"] == [], seen


def test_a_fault_escaping_a_socket_task_fails_its_exchanges_and_not_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A socket's reader that raises once its socket is reported connected (the fault
    escapes the reader itself): the connect fails classified, the Client keeps working
    (a second attempt fails the same way), the run goes on, and no task is left once the
    block ends."""

    async def failing(
        self: trio_adapter.Client,
        socket_id: int,
        source: socket.socket,
        alpn: str | None,
        quickack: socket.socket | None = None,
    ) -> None:
        self._driver.connected(socket_id, alpn=alpn, now=self._now())
        self._pump()  # the initialize request goes out
        await trio.lowlevel.wait_readable(source)  # the server answered (and is done with it)
        raise RuntimeError("injected fault")

    monkeypatch.setattr(trio_adapter.Client, "_read", failing)

    async def main(url: str) -> tuple[list[ConnectionFailed], list[str]]:
        failures = []
        async with trio_adapter.Client(allow_loopback=True) as client:
            for _ in range(2):
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(Config(url=url)):
                        raise AssertionError("connected")
                failures.append(caught.value)
        return failures, _ours(trio.lowlevel.current_root_task())

    with ServerThread(H1Server()) as server:
        failures, left = _run(main, f"http://127.0.0.1:{server.port}/mcp")
    assert [failure.cause for failure in failures] == ["framing", "framing"], failures
    assert all("the socket reader failed" in failure.message for failure in failures)
    assert left == []


def test_the_block_s_own_exception_leaves_it_unchanged() -> None:
    """The nursery of ``async with Client()`` wraps nothing in an ``ExceptionGroup``."""

    async def main(url: str) -> None:
        async with (
            trio_adapter.Client(allow_loopback=True) as client,
            client.connect(Config(url=url)) as conn,
        ):
            await conn.call_tool("echo", b'{"text": "hi"}')
            raise KeyError("the caller's own")

    with ServerThread(H1Server()) as server, pytest.raises(KeyError, match="own"):
        _run(main, f"http://127.0.0.1:{server.port}/mcp")


def test_a_client_entered_twice_keeps_one_nursery_until_the_outer_block_ends() -> None:
    """The inner block closes the Client (as ever); the outer one owns the nursery, which
    ends with it."""

    async def main(url: str) -> tuple[bool, bool, list[str]]:
        root = trio.lowlevel.current_root_task()
        async with trio_adapter.Client(allow_loopback=True) as client:
            nursery = client._nursery
            async with client, client.connect(Config(url=url)) as conn:
                await conn.call_tool("echo", b'{"text": "hi"}')
                same = client._nursery is nursery
            still = client._nursery is nursery and client._driver.closed
        return same, still, _ours(root)

    with ServerThread(H1Server()) as server:
        same, still, left = _run(main, f"http://127.0.0.1:{server.port}/mcp")
    assert same and still and left == []
