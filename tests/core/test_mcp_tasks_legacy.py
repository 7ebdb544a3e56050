"""Tasks of the 2025-11-25 shape (SEP-1686) through the machine: the server's
``tasks.requests.tools.call`` capability read at initialize, the ``task`` parameter on a
call to a tool that may run as one, and the task followed with ``tasks/get`` and
``tasks/result``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sansmcp.core.cache import CallerCache, ListingCache
from sansmcp.core.errors import ServerAnswered
from sansmcp.core.http import HttpRequest, header_value
from sansmcp.core.limits import Limits
from sansmcp.core.listing import parse_page, validate_entry
from sansmcp.core.mcp import ConnSettings, Progress, TaskReported, ToolCalled, ToolsListed
from sansmcp.core.mcp.rules import declares_task_calls
from sansmcp.core.mcp.session import Session
from sansmcp.core.mcp.toolset import invalidate_listings
from sansmcp.core.toolrules import execution_fault
from sansmcp.core.tools import SkippedTool, Tool, validate_tool
from sansmcp.core.url import parse_endpoint

from .fakemcp import URL, Driver, FakeServer, Response, result, sse_response, tool

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


def test_a_required_tool_is_kept_and_run_as_a_task_only_with_tasks() -> None:
    server = legacy_server("required")
    d = listed(server)
    assert [t.task_support for t in d.machine.tools.values()] == ["required"]
    assert isinstance(d.ok(d.call("research")), ToolCalled)
    assert "tasks/result" in [b["method"] for b in requests(server)]
    plain = Driver(server, settings=ConnSettings(endpoint=parse_endpoint(URL)))
    plain.ok(plain.connect())
    outcome = plain.ok(plain.list_tools())
    assert isinstance(outcome, ToolsListed) and outcome.tools == ()
    assert 'taskSupport is "required"' in outcome.skipped[0].reason


def test_the_shared_cache_keeps_listings_with_and_without_tasks_apart() -> None:
    server = legacy_server("required")

    def answer(request: HttpRequest, body: Any) -> Response:
        value = {"tools": server.tools, "ttlMs": 60_000, "cacheScope": "public"}
        return server.wrap(result(body["id"], value))

    server.overrides["tools/list"] = answer
    shared = ListingCache(max_entries=16, max_bytes=1 << 20)

    def conn(tasks: bool) -> tuple[int, ToolsListed]:
        settings = ConnSettings(endpoint=parse_endpoint(URL), tasks=tasks)
        d = Driver(server, settings=settings, cache=CallerCache(shared, settings, b"salt"))
        d.ok(d.connect())
        before = len([b for b in requests(server) if b["method"] == "tools/list"])
        outcome = d.ok(d.list_tools())
        assert isinstance(outcome, ToolsListed)
        after = len([b for b in requests(server) if b["method"] == "tools/list"])
        return after - before, outcome

    assert conn(True)[0] == 1
    sent, without = conn(False)  # not served the listing that kept the required tool
    assert sent == 1 and without.tools == () and without.skipped_count == 1
    sent, again = conn(True)  # served from the cache, the required tool kept
    assert sent == 0 and [t.name for t in again.tools] == ["research"]
    assert conn(False)[0] == 0
    session = Session()
    session.protocol_version = "2025-11-25"
    caller = CallerCache(shared, ConnSettings(endpoint=parse_endpoint(URL)), b"salt")
    invalidate_listings(caller, session)  # (tools/list_changed): both listings go
    assert len(shared) == 0


def test_both_listing_paths_keep_a_required_tool_only_with_tasks() -> None:
    entry = {"name": "r", "inputSchema": {}, "execution": {"taskSupport": "required"}}
    raw = parse_page(
        json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": [entry]}}).encode(), Limits()
    )["result"]["tools"][0]
    for judge, value in ((validate_entry, raw), (validate_tool, entry)):
        kept = judge(0, value, modern=False, max_tool_bytes=1_000, tasks=True)
        assert isinstance(kept, Tool) and kept.task_support == "required"
        skipped = judge(0, value, modern=False, max_tool_bytes=1_000)
        assert isinstance(skipped, SkippedTool) and "required" in skipped.reason
    assert execution_fault("required", True) is None


def test_a_legacy_status_notification_reaches_the_task() -> None:
    # the task said cancelled (notifications/tasks/status), then working (the poll): a flap
    server = legacy_server()
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/tasks/status",
        "params": task("cancelled"),
    }
    server.overrides["tasks/get"] = lambda r, b: sse_response(note, result(b["id"], task()))
    d = listed(server)
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "task_transition"


def test_a_legacy_task_given_up_sends_tasks_cancel_once() -> None:
    server = legacy_server()
    d = listed(server)
    d.machine.call_tool("research", now=d.now)
    d.pump_side()
    assert d.machine.abandon(now=d.now)
    assert not d.machine.abandon(now=d.now)
    d.pump_side()
    methods = [b["method"] for b in requests(server)]
    assert methods[-2:] == ["tools/call", "tasks/cancel"]
    assert requests(server)[-1]["params"] == {"taskId": "task-7"}


# ---------------------------------------------------------------- the task handle


def task_op(d: Driver, action: str, subject: str, **more: Any) -> Any:
    return d.run(lambda now: d.machine.task(action, subject, now=now, **more))


def test_a_task_handle_starts_polls_and_follows_a_legacy_task() -> None:
    """``start`` asks for a task (the ``task`` parameter) and reports it; ``poll`` is one
    ``tasks/get``; ``result`` polls at once and fetches the outcome with ``tasks/result``
    -- no ``Mcp-Name`` on any (the extension's routing header only)."""
    server = legacy_server("required")
    d = listed(server)
    started = task_op(d, "start", "research", arguments=b'{"q": 1}')
    assert started == TaskReported(task_id="task-7", status="working")
    assert task_op(d, "poll", "task-7") == TaskReported(task_id="task-7", status="completed")
    outcome = d.ok(task_op(d, "result", "task-7", tool="research"))
    assert isinstance(outcome, ToolCalled) and outcome.result.content[0].text == "researched"
    calls = [b for b in requests(server) if b["method"].startswith(("tools/call", "tasks/"))]
    methods = [b["method"] for b in calls]
    assert methods == ["tools/call", "tasks/get", "tasks/get", "tasks/result"]
    assert calls[0]["params"]["task"] == {}
    assert all(b["params"] == {"taskId": "task-7"} for b in calls[1:])
    tasked = [r for r, b in zip(server.requests, server.bodies, strict=True) if b in calls[1:]]
    assert all(header_value(r.headers, b"mcp-name") is None for r in tasked)


def test_a_legacy_cancel_reports_the_task_the_server_answers_with() -> None:
    server = legacy_server()
    d = listed(server)
    assert task_op(d, "cancel", "task-7") == TaskReported(task_id="task-7", status="cancelled")
    server.overrides["tasks/cancel"] = lambda r, b: server.wrap(
        result(b["id"], task("cancelled", taskId="task-8"))
    )
    failure = d.failure(task_op(d, "cancel", "task-7"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "task_id_changed"
    server.overrides["tasks/cancel"] = lambda r, b: server.wrap(result(b["id"], {}))
    failure = d.failure(task_op(d, "cancel", "task-7"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "malformed_task"


def test_progress_for_the_call_reaches_the_caller_across_the_tasks_polls() -> None:
    """The ``progressToken`` of the ``tools/call`` stays valid for its task's lifetime
    (SEP-1686): progress for it on a ``tasks/get`` or ``tasks/result`` stream is the
    call's; progress for another token is not."""
    server = legacy_server()
    calls: list[int] = []
    original = server.overrides["tools/call"]

    def call(request: HttpRequest, body: Any) -> Response:
        calls.append(body["id"])
        return original(request, body)

    def progress(value: int, token: int | None = None) -> dict[str, Any]:
        params = {"progressToken": calls[-1] if token is None else token, "progress": value}
        return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}

    server.overrides["tools/call"] = call
    server.overrides["tasks/get"] = lambda r, b: sse_response(
        progress(1), progress(9, token=b["id"]), result(b["id"], task("completed"))
    )
    server.overrides["tasks/result"] = lambda r, b: sse_response(
        progress(2), result(b["id"], RESULT)
    )
    d = listed(server)
    d.machine.call_tool("research", b"{}", now=d.now, progress=True)
    assert isinstance(d.ok(d.pump()), ToolCalled)
    assert [o for o in d.outputs if isinstance(o, Progress)] == [
        Progress(progress=1, total=None, message=None),
        Progress(progress=2, total=None, message=None),
    ]
    assert d.machine._t.notices.token is None  # the call ended: nothing is ours any more
