"""Tasks of the 2025-11-25 shape (SEP-1686) against the official SDK server speaking
only the legacy era, with the task methods served by hand in front of it
(``tests/e2e/tasks_server.py``'s ``LegacyTasks``), on every backend (issue 30).  Counts,
not durations: the server's task state moves per poll."""

from __future__ import annotations

import pytest

from sansmcp import Config, ConnectionFailed, Limits, ServerAnswered

from .conftest import MODES, Backend, Launcher, Server
from .test_tasks import logged


@pytest.fixture(scope="module")
def legacy_tasks(launch: Launcher) -> Server:
    return launch(*MODES["stateless-json"], "--legacy-only", "--tasks-2025")


def config(server: Server, tag: str, *, tasks: bool = True) -> Config:
    return Config(url=server.url(), headers={"x-test-tag": tag}, tasks=tasks)


def test_a_required_tool_is_listed_and_called_as_a_task(
    backend: Backend, legacy_tasks: Server
) -> None:
    """With tasks, ``deliberate`` (``taskSupport: "required"``) is listed and its call is
    a task, polled to completed (each poll after a status notification), its result
    fetched with ``tasks/result``; without, it is skipped with the reason."""
    tag = f"legacy-call-{backend.name}"

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            async with client.connect(config(legacy_tasks, tag)) as conn:
                listing = await conn.list_tools()
                assert "deliberate" in [tool.name for tool in listing]
                result = await conn.call_tool("deliberate", b'{"topic": "tasks", "polls": 2}')
                assert [c.text for c in result.content] == ["deliberated tasks"]
            async with client.connect(config(legacy_tasks, f"{tag}-off", tasks=False)) as conn:
                listing = await conn.list_tools()
                assert "deliberate" not in [tool.name for tool in listing]
                assert any("required" in skip.reason for skip in conn.skipped_tools)

    backend.run(main)
    calls = [m for m in logged(legacy_tasks, tag) if m.startswith(("tools/call", "tasks/"))]
    assert calls == ["tools/call", "tasks/get", "tasks/get", "tasks/result"]


def test_a_task_given_up_is_cancelled_once(backend: Backend, legacy_tasks: Server) -> None:
    """A task outliving ``Limits.task_timeout`` fails the call with that bound and is
    sent one ``tasks/cancel``."""
    tag = f"legacy-cancel-{backend.name}"

    async def main() -> None:
        limits = Limits(task_timeout=0.5)
        async with (
            backend.Client(allow_loopback=True, limits=limits) as client,
            client.connect(config(legacy_tasks, tag)) as conn,
        ):
            await conn.list_tools()
            with pytest.raises(ConnectionFailed) as caught:
                await conn.call_tool("deliberate", b'{"topic": "t", "polls": 1000000}')
            assert (caught.value.cause, caught.value.bound) == ("timeout", "task_timeout")

    backend.run(main)
    calls = logged(legacy_tasks, tag)
    assert calls.count("tools/call") == 1 and calls.count("tasks/cancel") == 1


@pytest.mark.parametrize(
    ("hostile", "reason"), [("taskid", "task_id_changed"), ("status", "malformed_task")]
)
def test_a_hostile_task_ends_classified(
    backend: Backend, legacy_tasks: Server, hostile: str, reason: str
) -> None:
    tag = f"legacy-hostile-{hostile}-{backend.name}"

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(config(legacy_tasks, tag)) as conn,
        ):
            await conn.list_tools()
            arguments = b'{"topic": "t", "hostile": "' + hostile.encode() + b'"}'
            with pytest.raises(ServerAnswered) as caught:
                await conn.call_tool("deliberate", arguments)
            assert caught.value.reason == reason

    backend.run(main)


def test_a_legacy_task_handle_starts_resumes_and_cancels(
    backend: Backend, legacy_tasks: Server
) -> None:
    """``start_tool`` on a 2025-11-25 server asks for a task and hands it back at once; a
    new Conn resumes it by its id, polls it and follows it to its result
    (``tasks/result``); a second task is cancelled through its handle, which the server
    answers with the task, now ``cancelled``."""
    tag = f"legacy-handle-{backend.name}"

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            async with client.connect(config(legacy_tasks, tag)) as conn:
                await conn.list_tools()
                handle = await conn.start_tool("deliberate", b'{"topic": "kept", "polls": 2}')
                assert handle.status == "working" and handle.task_id.startswith("legacy-")
                task_id = handle.task_id
            async with client.connect(config(legacy_tasks, tag)) as conn:
                await conn.list_tools()
                resumed = conn.resume_task(task_id)
                assert await resumed.poll() == "working"
                result = await resumed.result()
                assert [c.text for c in result.content] == ["deliberated kept"]
                other = await conn.start_tool("deliberate", b'{"topic": "x", "polls": 100000}')
                await other.cancel()
                assert other.status == "cancelled"
                assert await conn.resume_task(other.task_id).poll() == "cancelled"

    backend.run(main)
    calls = [m for m in logged(legacy_tasks, tag) if m.startswith(("tools/call", "tasks/"))]
    assert calls == [
        "tools/call",
        "tasks/get",  # poll: working (one poll left)
        "tasks/get",  # result: completed
        "tasks/result",
        "tools/call",
        "tasks/cancel",
        "tasks/get",
    ]


def test_progress_reaches_the_caller_across_the_polls(
    backend: Backend, legacy_tasks: Server
) -> None:
    """The server sends progress for the call's token on each ``tasks/get`` stream:
    ``on_progress`` gets one per poll, in order, in the caller's task."""
    tag = f"legacy-progress-{backend.name}"
    seen: list[tuple[float, float | None, str | None]] = []

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(config(legacy_tasks, tag)) as conn,
        ):
            await conn.list_tools()
            result = await conn.call_tool(
                "deliberate", b'{"topic": "p", "polls": 3}', on_progress=lambda *a: seen.append(a)
            )
            assert [c.text for c in result.content] == ["deliberated p"]

    backend.run(main)
    assert seen == [(1, None, None), (2, None, None), (3, None, None)]
    calls = [m for m in logged(legacy_tasks, tag) if m.startswith(("tools/call", "tasks/"))]
    assert calls == ["tools/call", "tasks/get", "tasks/get", "tasks/get", "tasks/result"]
