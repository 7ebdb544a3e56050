"""The official TypeScript "everything" server's task tool, ``simulate-research-query``
(2025-11-25 tasks: ``execution.taskSupport: "required"``, ``CreateTaskResult``,
``tasks/get``, ``tasks/result`` whose stream carries an elicitation), on every backend
(issue 30).  The server is a real Node process on loopback (``tests/everything_server.py``);
without Node or the npm package the tests skip naming it, and fail under
``SANSMCP_REQUIRE_SERVERS=1``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from sansmcp import Config

from .. import everything_server
from ..tiers import missing_server
from .conftest import Backend

TOOL = "simulate-research-query"
CAPABILITIES = {"elicitation": {"form": {}}}


@pytest.fixture(scope="module")
def everything(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[everything_server.EverythingServer]:
    found = everything_server.find()
    if isinstance(found, str):
        missing_server(found)
    server = everything_server.EverythingServer(
        *found, tmp_path_factory.mktemp("everything") / "log"
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_simulate_research_query_runs_as_a_task(
    backend: Backend, everything: everything_server.EverythingServer
) -> None:
    """With ``Config(tasks=True)`` the required-task tool is listed and ``call_tool``
    drives its task to the report: the clarification the server asks for on the
    ``tasks/result`` stream (an ``elicitation/create`` naming the task) is answered by
    the input handler once, and the report carries the answer; ``on_task`` hears of
    the task (``working`` first) under the id the elicitation names.  Without tasks the
    tool is skipped, its reason naming ``required``."""
    asked: list[Mapping[str, Mapping[str, Any]]] = []
    seen: list[tuple[str, str, str | None]] = []

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        asked.append(requests)
        return {
            key: {"action": "accept", "content": {"interpretation": "snake"}} for key in requests
        }

    async def main() -> str:
        async with backend.Client(
            allow_loopback=True, input_handler=handler, capabilities=CAPABILITIES
        ) as client:
            async with client.connect(Config(url=everything.url, tasks=True)) as conn:
                listing = await conn.list_tools()
                assert TOOL in [tool.name for tool in listing]
                result = await conn.call_tool(
                    TOOL,
                    b'{"topic": "python", "ambiguous": true}',
                    on_task=lambda *update: seen.append(update),
                )
                assert not result.is_error
                text = str(result.content[0].text)
            async with client.connect(Config(url=everything.url)) as conn:
                assert TOOL not in [tool.name for tool in await conn.list_tools()]
                (skip,) = [s for s in conn.skipped_tools if s.name == TOOL]
                assert "required" in skip.reason
            return text

    text = backend.run(main)
    assert text.startswith("# Research Report: python (snake)")
    assert "**Clarification**: snake" in text
    assert len(asked) == 1
    ((request,),) = [list(requests.values()) for requests in asked]
    assert request["method"] == "elicitation/create"
    related = request["params"]["_meta"]["io.modelcontextprotocol/related-task"]
    assert isinstance(related["taskId"], str) and related["taskId"]
    assert seen[0][1] == "working" and {task_id for task_id, _, _ in seen} == {related["taskId"]}


def test_simulate_research_query_through_a_task_handle(
    backend: Backend, everything: everything_server.EverythingServer
) -> None:
    """``start_tool`` hands the task back at once; the task is taken up again by its id
    (on the same Conn: this server keeps its tasks per session), polled (``working``, the
    stage in its message) and followed to the report; a second task is cancelled through
    its handle, and a poll then says ``cancelled``."""

    async def main() -> tuple[str, str | None]:
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(Config(url=everything.url, tasks=True)) as conn,
        ):
            await conn.list_tools()
            handle = await conn.start_tool(TOOL, b'{"topic": "tides"}')
            assert handle.status == "working" and handle.tool == TOOL
            resumed = conn.resume_task(handle.task_id)
            assert await resumed.poll() == "working"
            message = resumed.status_message
            result = await resumed.result()
            assert resumed.status == "completed" and not result.is_error
            other = await conn.start_tool(TOOL, b'{"topic": "moons"}')
            await other.cancel()
            assert other.status == "cancelled"
            assert await conn.resume_task(other.task_id).poll() == "cancelled"
            return str(result.content[0].text), message

    text, message = backend.run(main)
    assert text.startswith("# Research Report: tides")
    assert message is not None and message.endswith("...")  # e.g. "Gathering sources..."
