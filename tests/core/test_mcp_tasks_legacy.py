"""Tasks of the 2025-11-25 shape (SEP-1686) through the machine: the server's
``tasks.requests.tools.call`` capability read at initialize, the ``task`` parameter on a
call to a tool that may run as one, and the task followed with ``tasks/get`` and
``tasks/result``."""

from __future__ import annotations

from typing import Any

import pytest

from sansmcp.core.errors import ServerAnswered
from sansmcp.core.http import HttpRequest
from sansmcp.core.mcp import ConnSettings, ToolCalled
from sansmcp.core.mcp.rules import declares_task_calls
from sansmcp.core.url import parse_endpoint

from .fakemcp import URL, Driver, FakeServer, Response, result, tool

RESULT = {"content": [{"type": "text", "text": "researched"}], "isError": False}
CAPABLE = {"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}}}


def task(status: str = "working", **more: Any) -> dict[str, Any]:
    return {
        "taskId": "task-7",
        "status": status,
        "createdAt": "2025-11-25T10:00:00Z",
        "lastUpdatedAt": "2025-11-25T10:00:00Z",
        "ttl": 60000,
        "pollInterval": 1000,
        **more,
    }


def legacy_server(
    support: str | None = "optional",
    capabilities: dict[str, Any] = CAPABLE,
    version: str = "2025-11-25",
    created: dict[str, Any] | None = None,
) -> FakeServer:
    """A 2025-11-25 server whose one tool runs as a task when asked: working, then
    completed on the first tasks/get; tasks/result gives the call's result."""
    execution = {} if support is None else {"execution": {"taskSupport": support}}
    server = FakeServer(modern=False, legacy=version, tools=[tool("research", **execution)])
    server.capabilities = capabilities

    def call(request: HttpRequest, body: Any) -> Response:
        if "task" in body["params"]:
            return server.wrap(result(body["id"], {"task": created or task()}))
        return server.wrap(result(body["id"], RESULT))

    server.overrides["tools/call"] = call
    server.overrides["tasks/get"] = lambda r, b: server.wrap(result(b["id"], task("completed")))
    server.overrides["tasks/result"] = lambda r, b: server.wrap(result(b["id"], RESULT))
    server.overrides["tasks/cancel"] = lambda r, b: server.wrap(result(b["id"], task("cancelled")))
    return server


def listed(server: FakeServer, *, tasks: bool = True) -> Driver:
    settings = ConnSettings(endpoint=parse_endpoint(URL), tasks=tasks)
    d = Driver(server, settings=settings)
    d.ok(d.connect())
    d.ok(d.list_tools())
    return d


def requests(server: FakeServer) -> list[dict[str, Any]]:
    return [b for b in server.bodies if isinstance(b, dict) and "method" in b]


def test_a_tool_that_may_run_as_a_task_is_asked_and_followed_to_its_result() -> None:
    server = legacy_server()
    d = listed(server)
    outcome = d.ok(d.call("research", b'{"q": 1}'))
    assert isinstance(outcome, ToolCalled)
    assert outcome.result.content[0].text == "researched"
    calls = [b for b in requests(server) if b["method"].startswith(("tools/call", "tasks/"))]
    assert [b["method"] for b in calls] == ["tools/call", "tasks/get", "tasks/result"]
    assert calls[0]["params"]["task"] == {}
    assert all(b["params"]["taskId"] == "task-7" for b in calls[1:])


@pytest.mark.parametrize(
    ("support", "capabilities", "version", "tasks"),
    [
        ("optional", CAPABLE, "2025-11-25", False),  # the Conn does not speak tasks
        ("optional", {"tools": {}}, "2025-11-25", True),  # the server does not
        ("optional", CAPABLE, "2025-06-18", True),  # nor does its revision
        (None, CAPABLE, "2025-11-25", True),  # the tool forbids it
    ],
)
def test_a_call_asks_no_task_unless_all_three_say_it_may(
    support: str | None, capabilities: dict[str, Any], version: str, tasks: bool
) -> None:
    server = legacy_server(support, capabilities, version)
    d = listed(server, tasks=tasks)
    assert isinstance(d.ok(d.call("research")), ToolCalled)
    bodies = requests(server)
    call = next(b for b in bodies if b["method"] == "tools/call")
    assert "task" not in call["params"]
    assert not any(b["method"].startswith("tasks/") for b in bodies)


def test_a_hostile_created_task_ends_classified() -> None:
    server = legacy_server(created=task(status="sleeping"))
    d = listed(server)
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "malformed_task"


@pytest.mark.parametrize(
    ("capabilities", "declared"),
    [
        (CAPABLE, True),
        ({"tasks": {"requests": {"tools": {"call": True}}}}, False),
        ({"tasks": {"requests": {"tools": []}}}, False),
        ({"tasks": {"list": {}}}, False),
        ([], False),
    ],
)
def test_declares_task_calls(capabilities: Any, declared: bool) -> None:
    assert declares_task_calls({"capabilities": capabilities}) is declared
    assert declares_task_calls({}) is False
