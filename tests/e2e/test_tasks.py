"""A tool the server runs as a task (2026-07-28 + ``io.modelcontextprotocol/tasks``),
against the official SDK server with the extension (``tests/e2e/tasks_server.py``), on
every backend (issue 30).  Named after the conformance suite's four client scenarios:
create handling, poll interval, routing headers, terminal handling.  Counts, not
durations: the server's task state moves per poll."""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from typing import Any

import pytest

from sansmcp import CallerError, Config, ConnectionFailed, Limits, ServerAnswered

from .conftest import MODES, Backend, Launcher, Server

CAPABILITIES = {"elicitation": {"form": {}}}


@pytest.fixture(scope="module")
def tasks_server(launch: Launcher) -> Server:
    return launch(*MODES["stateless-json"], "--tasks")


@pytest.fixture(scope="module")
def tasks_sse(launch: Launcher) -> Server:
    """The same, answering every request on an event stream."""
    return launch(*MODES["stateless-sse"], "--tasks")


def logged(server: Server, tag: str) -> list[str]:
    """The JSON-RPC methods of the requests tagged ``tag``, in order."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        connection.request("GET", f"/_log?{tag}")
        entries: list[dict[str, Any]] = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    return [entry["rpc"] or entry["method"] for entry in entries]


def config(server: Server, tag: str, *, tasks: bool = True) -> Config:
    return Config(url=server.url(), headers={"x-test-tag": tag}, tasks=tasks)


@pytest.mark.parametrize("answers", ["json", "sse"])
def test_create_handling_and_terminal_handling(
    backend: Backend, tasks_server: Server, tasks_sse: Server, answers: str
) -> None:
    """A task handle is polled to its completed state, and the call returns the task's
    ``CallToolResult`` as a direct call would; the connection serves the next call."""
    tasks_server = tasks_server if answers == "json" else tasks_sse
    tag = f"create-{backend.name}-{answers}"

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(config(tasks_server, tag)) as conn,
        ):
            result = await conn.call_tool("research", b'{"topic": "tasks", "polls": 3}')
            assert not result.is_error
            assert [c.text for c in result.content] == ["researched tasks"]
            again = await conn.call_tool("echo", b'{"text": "after"}')
            assert again.content[0].text == "after"

    backend.run(main)
    calls = [m for m in logged(tasks_server, tag) if m.startswith(("tools/", "tasks/"))]
    assert calls == ["tools/call", "tasks/get", "tasks/get", "tasks/get", "tools/call"]


def test_routing_headers_and_input(backend: Backend, tasks_server: Server) -> None:
    """Every task request carries ``Mcp-Name: <taskId>`` (the server refuses one that
    does not), and the task's input request reaches the input handler once."""
    tag = f"input-{backend.name}"
    asked: list[Mapping[str, Any]] = []

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        asked.append(requests)
        return {key: {"action": "accept", "content": {"name": "Ada"}} for key in requests}

    async def main() -> None:
        async with (
            backend.Client(
                allow_loopback=True, input_handler=handler, capabilities=CAPABILITIES
            ) as client,
            client.connect(config(tasks_server, tag)) as conn,
        ):
            result = await conn.call_tool("interview", b"{}")
            assert [c.text for c in result.content] == ["hello Ada"]

    backend.run(main)
    assert len(asked) == 1 and list(asked[0]) == ["name"]
    assert asked[0]["name"]["method"] == "elicitation/create"
    calls = [m for m in logged(tasks_server, tag) if m.startswith(("tools/", "tasks/"))]
    assert calls == ["tools/call", "tasks/get", "tasks/update", "tasks/get"]


def test_a_client_without_tasks_gets_the_missing_capability(
    backend: Backend, tasks_server: Server
) -> None:
    """Without ``Config(tasks=True)`` nothing is declared, and a server that can serve
    the call only as a task answers -32021 naming the extension."""

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(config(tasks_server, f"off-{backend.name}", tasks=False)) as conn,
        ):
            with pytest.raises(ServerAnswered) as caught:
                await conn.call_tool("research", b'{"topic": "x"}')
            assert caught.value.reason == "jsonrpc_error" and caught.value.code == -32021
            required = caught.value.data["requiredCapabilities"]["extensions"]
            assert "io.modelcontextprotocol/tasks" in required
            assert "Config(tasks=True)" in str(caught.value)

    backend.run(main)


def test_poll_interval_is_honoured_in_count(backend: Backend, tasks_server: Server) -> None:
    """A task that stays working for many polls is polled exactly that many times:
    one ``tasks/get`` per interval, no spin (``pollIntervalMs`` is 50 ms, above the
    ``Limits.min_task_poll_interval`` floor of 0.1 s, so each poll waits the floor)."""
    tag = f"poll-{backend.name}"

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(config(tasks_server, tag)) as conn,
        ):
            result = await conn.call_tool("research", b'{"topic": "slow", "polls": 5}')
            assert [c.text for c in result.content] == ["researched slow"]

    backend.run(main)
    assert logged(tasks_server, tag).count("tasks/get") == 5


def test_a_task_given_up_is_cancelled_once(backend: Backend, tasks_server: Server) -> None:
    """A task that outlives ``Limits.task_timeout`` fails the call with that bound, and
    the server is sent ``tasks/cancel`` for it, once (best effort, aside)."""
    tag = f"cancel-{backend.name}"

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, limits=Limits(task_timeout=0.5)) as client,
            client.connect(config(tasks_server, tag)) as conn,
        ):
            with pytest.raises(ConnectionFailed) as caught:
                await conn.call_tool("research", b'{"topic": "endless", "polls": 100000}')
            assert (caught.value.cause, caught.value.bound) == ("timeout", "task_timeout")

    backend.run(main)
    calls = logged(tasks_server, tag)
    assert calls.count("tools/call") == 1 and calls.count("tasks/cancel") == 1
    assert calls.count("tasks/get") >= 1


class Interrupted(Exception):
    """What the caller's own input handler raises: the caller gives the call up."""


def cancels(server: Server, tag: str) -> int:
    return logged(server, tag).count("tasks/cancel")


def test_a_caller_giving_a_task_up_cancels_it_once(backend: Backend, tasks_server: Server) -> None:
    """The caller's input handler raises while the task waits for input: the exception
    propagates unchanged, the Conn is closed, and the server is sent ``tasks/cancel``
    for the task once (aside, bounded by ``Limits.cancel_grace``); the Client serves the
    next Conn."""
    tag = f"abandon-{backend.name}"

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        raise Interrupted

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True, input_handler=handler, capabilities=CAPABILITIES
        ) as client:
            async with client.connect(config(tasks_server, tag)) as conn:
                with pytest.raises(Interrupted):
                    await conn.call_tool("interview", b"{}")
                with pytest.raises(RuntimeError, match="closed"):
                    await conn.call_tool("echo", b'{"text": "same conn"}')
            await backend.wait_until(lambda: cancels(tasks_server, tag) >= 1)
            async with client.connect(config(tasks_server, tag)) as conn:
                again = await conn.call_tool("echo", b'{"text": "after"}')
                assert again.content[0].text == "after"

    backend.run(main)
    calls = logged(tasks_server, tag)
    assert calls.count("tools/call") == 2 and calls.count("tasks/cancel") == 1
    assert calls.index("tasks/cancel") < len(calls) - 1  # before the next Conn's call


def test_a_cancelled_caller_cancels_its_task_once(backend: Backend, tasks_server: Server) -> None:
    """The caller's task is cancelled natively (a trio cancel scope, ``Task.cancel()``)
    while the task is polled: the cancellation reaches the canceller as itself, and the
    server is sent ``tasks/cancel`` for the task once."""
    tag = f"cancelled-{backend.name}"

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            async with client.connect(config(tasks_server, tag)) as conn:

                async def endless() -> None:
                    await conn.call_tool("research", b'{"topic": "endless", "polls": 100000}')

                seen = await backend.cancel_after(0.5, endless)
                assert type(seen) is backend.cancelled
            await backend.wait_until(lambda: cancels(tasks_server, tag) >= 1)

    backend.run(main)
    calls = logged(tasks_server, tag)
    assert calls.count("tools/call") == 1 and calls.count("tasks/cancel") == 1
    assert calls.count("tasks/get") >= 1


def test_a_task_started_on_one_conn_is_resumed_on_another(
    backend: Backend, tasks_server: Server
) -> None:
    """``start_tool`` hands back the task at once (nothing polled); the Conn closes; a
    new Conn takes the task up by its id, polls it and follows it to the same result
    a direct call gives."""
    tag = f"resume-{backend.name}"

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            async with client.connect(config(tasks_server, tag)) as conn:
                handle = await conn.start_tool("research", b'{"topic": "kept", "polls": 3}')
                assert handle.status == "working" and handle.tool == "research"
                task_id = handle.task_id
            assert isinstance(task_id, str) and task_id
            async with client.connect(config(tasks_server, tag)) as conn:
                resumed = conn.resume_task(task_id)
                assert resumed.task_id == task_id and resumed.status is None
                assert await resumed.poll() == "working"
                result = await resumed.result()
                assert [c.text for c in result.content] == ["researched kept"]
                assert resumed.status == "completed" and await resumed.poll() == "completed"
                assert await resumed.result() is result  # kept: no more requests

    backend.run(main)
    calls = [m for m in logged(tasks_server, tag) if m.startswith(("tools/", "tasks/"))]
    assert calls == ["tools/call", "tasks/get", "tasks/get", "tasks/get"]


def test_a_task_handle_cancels_its_task(backend: Backend, tasks_server: Server) -> None:
    """``handle.cancel()`` sends ``tasks/cancel`` once; the server's task is then
    ``cancelled``, which a poll reports."""
    tag = f"handle-cancel-{backend.name}"

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(config(tasks_server, tag)) as conn,
        ):
            handle = await conn.start_tool("research", b'{"topic": "x", "polls": 100000}')
            await handle.cancel()
            assert handle.status == "cancelled"
            assert await conn.resume_task(handle.task_id).poll() == "cancelled"

    backend.run(main)
    calls = [m for m in logged(tasks_server, tag) if m.startswith(("tools/", "tasks/"))]
    assert calls == ["tools/call", "tasks/cancel", "tasks/get"]


def test_on_task_reports_the_task_and_each_change_of_status(
    backend: Backend, tasks_server: Server
) -> None:
    """``call_tool(on_task=...)`` hears of the task when the server answers with it and
    at each change of status -- not at every poll (three polls stay ``working``) -- in
    the caller's task; the id is the server's."""
    tag = f"on-task-{backend.name}"
    seen: list[tuple[str, str, str | None]] = []

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        return {key: {"action": "accept", "content": {"name": "Ada"}} for key in requests}

    async def main() -> None:
        async with (
            backend.Client(
                allow_loopback=True, input_handler=handler, capabilities=CAPABILITIES
            ) as client,
            client.connect(config(tasks_server, tag)) as conn,
        ):
            report = lambda *update: seen.append(update)  # noqa: E731
            result = await conn.call_tool("research", b'{"topic": "t", "polls": 3}', on_task=report)
            assert [c.text for c in result.content] == ["researched t"]
            first = [status for _, status, _ in seen]
            assert first == ["working", "completed"]
            seen.clear()
            await conn.call_tool("interview", b"{}", on_task=report)
            await conn.call_tool("echo", b'{"text": "direct"}', on_task=report)  # no task

    backend.run(main)
    assert [status for _, status, _ in seen] == [
        "working",
        "input_required",
        "completed",
    ]
    assert len({task_id for task_id, _, _ in seen}) == 1 and seen[0][0].startswith("task-")
    assert {message for _, _, message in seen} == {None}


def test_an_on_task_callback_that_raises_gives_the_task_up(
    backend: Backend, tasks_server: Server
) -> None:
    """What the caller's ``on_task`` raises propagates unchanged; the task it was told
    of is sent ``tasks/cancel`` once, and a callback that is not callable is refused
    before anything is sent."""
    tag = f"on-task-raises-{backend.name}"

    def refuse(task_id: str, status: str, message: str | None) -> None:
        raise Interrupted(task_id)

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            async with client.connect(config(tasks_server, tag)) as conn:
                with pytest.raises(CallerError, match="on_task"):
                    await conn.call_tool("research", b"{}", on_task="print")  # type: ignore[arg-type]
                with pytest.raises(Interrupted):
                    await conn.call_tool(
                        "research", b'{"topic": "x", "polls": 100}', on_task=refuse
                    )
            await backend.wait_until(lambda: cancels(tasks_server, tag) >= 1)

    backend.run(main)
    calls = logged(tasks_server, tag)
    assert calls.count("tools/call") == 1 and calls.count("tasks/cancel") == 1
