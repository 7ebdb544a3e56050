"""A tools/call the server runs as a task, through the MCP machine (issue 30): with
``ConnSettings(tasks=True)`` the call declares the extension, polls the task to its end
and returns the same ``CallResult`` a direct call gives; without it a task handle is
refused.  The fake clock moves only to the machine's own deadlines."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from sansmcp.core.config import Config, conn_settings
from sansmcp.core.errors import CallerError, ConnectionFailed, ServerAnswered
from sansmcp.core.http import HttpRequest, header_value
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import Closed, ConnSettings, TaskReported, ToolCalled
from sansmcp.core.mcp.taskwire import EXTENSION_ID
from sansmcp.core.url import parse_endpoint

from .fakemcp import URL, Driver, FakeServer, Response, result, sse_response

CAPS = "io.modelcontextprotocol/clientCapabilities"
RESULT = {"content": [{"type": "text", "text": "researched"}], "isError": False}
ASK = {"method": "elicitation/create", "params": {"message": "depth?", "requestedSchema": {}}}


def handle(**more: Any) -> dict[str, Any]:
    return {
        "resultType": "task",
        "taskId": "task-7",
        "status": "working",
        "createdAt": "2026-12-04T10:00:00Z",
        "lastUpdatedAt": "2026-12-04T10:00:00Z",
        "ttlMs": 60000,
        "pollIntervalMs": 2000,
        **more,
    }


def polled(status: str, **more: Any) -> dict[str, Any]:
    return {**handle(status=status, **more), "resultType": "complete"}


def task_server(answers: Iterator[dict[str, Any]]) -> FakeServer:
    """A modern server that runs every call as a task and answers tasks/get (and
    tasks/update, tasks/cancel) from ``answers``, in order."""
    server = FakeServer()
    server.overrides["tools/call"] = lambda req, body: server.wrap(result(body["id"], handle()))

    def task_method(request: HttpRequest, body: Any) -> Response:
        return server.wrap(result(body["id"], next(answers)))

    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        server.overrides[method] = task_method
    return server


def driver(server: FakeServer, *, tasks: bool = True, **kwargs: Any) -> Driver:
    capabilities: dict[str, Any] | None = {"elicitation": {}} if "input_handler" in kwargs else None
    settings = ConnSettings(endpoint=parse_endpoint(URL), tasks=tasks, capabilities=capabilities)
    d = Driver(server, settings=settings, **kwargs)
    d.ok(d.connect())
    return d


def sent(server: FakeServer) -> list[tuple[str, HttpRequest, dict[str, Any]]]:
    return [
        (body["method"], request, body)
        for request, body in zip(server.requests, server.bodies, strict=True)
        if isinstance(body, dict) and "method" in body and body["method"] != "server/discover"
    ]


def test_a_task_is_polled_to_the_same_result_a_direct_call_gives() -> None:
    server = task_server(
        iter([polled("working", pollIntervalMs=500), polled("completed", result=RESULT)])
    )
    d = driver(server)
    outcome = d.ok(d.call("research", b'{"q": "tasks"}'))
    assert isinstance(outcome, ToolCalled)
    direct = FakeServer()
    direct.overrides["tools/call"] = lambda req, body: direct.wrap(result(body["id"], RESULT))
    plain = driver(direct, tasks=False).call("research", b'{"q": "tasks"}')
    assert isinstance(plain, ToolCalled) and outcome.result == plain.result
    requests = sent(server)
    assert [method for method, _, _ in requests] == ["tools/call", "tasks/get", "tasks/get"]
    for method, request, body in requests:
        # every request declares the extension (a server refuses undeclared task requests)
        assert body["params"]["_meta"][CAPS] == {"extensions": {EXTENSION_ID: {}}}
        assert header_value(request.headers, b"mcp-method") == method.encode()
    for _, request, body in requests[1:]:
        assert body["params"]["taskId"] == "task-7"
        assert header_value(request.headers, b"mcp-name") == b"task-7"
    assert d.now == 2.5  # polled after the handle's 2 s, then the poll's 0.5 s


def test_input_during_a_task_goes_through_the_input_handler() -> None:
    asked: list[Any] = []

    def answer(requests: Any) -> Any:
        asked.append(dict(requests))
        return {"depth": {"action": "accept", "content": {"depth": 3}}}

    server = task_server(
        iter(
            [
                polled("input_required", inputRequests={"depth": ASK}),
                {"resultType": "complete"},  # tasks/update's acknowledgement
                polled("input_required", inputRequests={"depth": ASK}),  # not yet reflected
                polled("completed", result=RESULT),
            ]
        )
    )
    server.overrides["tasks/update"] = server.overrides["tasks/get"]
    d = driver(server, input_handler=answer)
    outcome = d.ok(d.call("research"))
    assert isinstance(outcome, ToolCalled) and outcome.result.content[0].text == "researched"
    assert asked == [{"depth": ASK}]  # asked once, though the server listed it twice
    methods = [method for method, _, _ in sent(server)]
    assert methods == ["tools/call", "tasks/get", "tasks/update", "tasks/get", "tasks/get"]
    update = sent(server)[2][2]
    assert update["params"]["inputResponses"] == {
        "depth": {"action": "accept", "content": {"depth": 3}}
    }


def test_a_failed_task_is_the_servers_json_rpc_error() -> None:
    error = {"code": -32603, "message": "rate limited"}
    d = driver(task_server(iter([polled("failed", error=error)])))
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ServerAnswered)
    assert (failure.reason, failure.code, failure.rpc_message) == (
        "jsonrpc_error",
        -32603,
        "rate limited",
    )


def test_a_hostile_task_ends_classified() -> None:
    d = driver(task_server(iter([polled("working", taskId="task-8")])))
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "task_id_changed"
    forever = task_server(iter([polled("working", pollIntervalMs=0)] * 50))
    d = driver(forever, limits=Limits(max_task_polls=5))
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "max_task_polls"
    assert [method for method, _, _ in sent(forever)].count("tasks/get") == 5


def test_without_tasks_a_task_handle_is_refused_and_nothing_is_declared() -> None:
    server = task_server(iter([]))
    d = driver(server, tasks=False)
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "unexpected_task"
    (_, _, body), *_ = sent(server)
    assert body["params"]["_meta"][CAPS] == {}
    assert json.dumps(body).count(EXTENSION_ID) == 0


def test_a_task_that_cannot_end_in_time_is_cancelled_at_the_deadline() -> None:
    # the server asks for 20 s between polls; the task has 5 s: the poll is due at the
    # deadline, where the call gives the task up and cancels it
    server = task_server(iter([{"resultType": "complete"}]))
    server.overrides["tools/call"] = lambda req, body: server.wrap(
        result(body["id"], handle(pollIntervalMs=20_000))
    )
    d = driver(server, limits=Limits(task_timeout=5.0))
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound) == ("timeout", "task_timeout")
    requests = sent(server)
    assert [method for method, _, _ in requests] == ["tools/call", "tasks/cancel"]
    assert header_value(requests[1][1].headers, b"mcp-name") == b"task-7"
    assert d.now == 5.0  # never before the deadline


def test_a_call_past_task_timeout_sends_tasks_cancel_aside_once() -> None:
    # tasks/get never answers: the call's own deadline (task_timeout) gives it up
    server = task_server(iter([{"resultType": "complete"}]))
    server.overrides["tasks/get"] = lambda req, body: Response(
        headers=[(b"content-type", b"text/event-stream")], end=False
    )
    d = driver(server, limits=Limits(task_timeout=8.0, call_timeout=60.0))
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ConnectionFailed)
    assert (failure.cause, failure.bound) == ("timeout", "task_timeout")
    d.pump_side()
    methods = [method for method, _, _ in sent(server)]
    assert methods == ["tools/call", "tasks/get", "tasks/cancel"]
    assert d.now == 8.0


def test_without_tasks_a_call_keeps_call_timeout() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = lambda req, body: Response(
        headers=[(b"content-type", b"text/event-stream")], end=False
    )
    d = driver(server, tasks=False, limits=Limits(call_timeout=3.0, task_timeout=100.0))
    failure = d.failure(d.call("echo"))
    assert isinstance(failure, ConnectionFailed) and failure.bound == "call_timeout"
    assert [method for method, _, _ in sent(server)] == ["tools/call"]


# ------------------------------------------------------------ hostile servers, through the machine


def test_a_task_handle_to_a_listing_is_refused() -> None:
    server = FakeServer()
    server.overrides["tools/list"] = lambda req, body: server.wrap(result(body["id"], handle()))
    d = driver(server)
    failure = d.failure(d.list_tools())
    assert isinstance(failure, ServerAnswered) and failure.reason == "unexpected_task"


def test_a_task_the_server_forgets_at_once_is_lost() -> None:
    server = task_server(iter([]))
    server.overrides["tasks/get"] = lambda req, body: server.wrap(
        {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32602, "message": "no task"}}
    )
    d = driver(server)
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ServerAnswered)
    assert (failure.reason, failure.code, failure.rpc_message) == ("task_lost", -32602, "no task")


@pytest.mark.parametrize(
    ("interval_ms", "pause"),
    [(0, 0.1), (-5, 0.1), (10**12, 30.0), (2.5e3, 2.5)],
)
def test_a_hostile_poll_interval_is_clamped(interval_ms: float, pause: float) -> None:
    server = task_server(iter([polled("working"), polled("completed", result=RESULT)]))
    server.overrides["tools/call"] = lambda req, body: server.wrap(
        result(body["id"], handle(pollIntervalMs=interval_ms))
    )
    d = driver(server)
    d.ok(d.call("research"))
    assert d.now == pytest.approx(pause + 2.0)  # then the poll's own 2 s


def test_config_tasks_reaches_the_settings_and_must_be_a_bool() -> None:
    def built(**kwargs: Any) -> ConnSettings:
        config = Config(url=URL, **kwargs)
        return conn_settings(config, client_info=None, capabilities=None, era_hint=None)

    assert built().tasks is False and built(tasks=True).tasks is True
    with pytest.raises(CallerError, match=r"Config\.tasks must be a bool"):
        built(tasks="yes")


def test_a_call_served_only_as_a_task_says_how_to_get_it() -> None:
    required = {"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}}
    server = FakeServer()
    server.overrides["tools/call"] = lambda req, body: server.wrap(
        {
            "jsonrpc": "2.0",
            "id": body["id"],
            "error": {"code": -32021, "message": "Missing capability", "data": required},
        }
    )
    d = driver(server, tasks=False)
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ServerAnswered)
    assert (failure.reason, failure.code, failure.data) == ("jsonrpc_error", -32021, required)
    assert str(failure).endswith("(the server runs it only as a task: Config(tasks=True))")


def polling(server: FakeServer, **kwargs: Any) -> Driver:
    """A call whose task the machine is waiting to poll (the handle came, nothing else)."""
    d = driver(server, **kwargs)
    d.machine.call_tool("research", now=d.now)
    d.pump_side()
    assert [method for method, _, _ in sent(server)] == ["tools/call"]
    return d


def test_a_caller_giving_a_task_up_sends_tasks_cancel_once_then_closes() -> None:
    server = task_server(iter([{"resultType": "complete"}]))
    d = polling(server)
    assert d.machine.abandon(now=d.now)
    assert not d.machine.abandon(now=d.now)  # once: the task is no longer followed
    d.pump_side()
    assert isinstance(d.outputs[-1], Closed)
    requests = sent(server)
    assert [method for method, _, _ in requests] == ["tools/call", "tasks/cancel"]
    assert header_value(requests[1][1].headers, b"mcp-name") == b"task-7"
    assert d.machine.next_deadline() is None


def test_an_unanswered_tasks_cancel_is_waited_for_cancel_grace_only() -> None:
    server = task_server(iter([]))
    server.overrides["tasks/cancel"] = lambda req, body: None  # never answered
    d = polling(server, limits=Limits(cancel_grace=0.5, close_timeout=9.0))
    assert d.machine.abandon(now=d.now)
    d.pump_side()
    assert not any(isinstance(out, Closed) for out in d.outputs)
    assert d.machine.next_deadline() == d.now + 0.5
    d.now += 0.5
    d.machine.handle_timer(now=d.now)
    d.pump_side()
    assert isinstance(d.outputs[-1], Closed)
    assert [method for method, _, _ in sent(server)] == ["tools/call", "tasks/cancel"]


def test_a_call_given_up_before_any_task_sends_nothing() -> None:
    server = task_server(iter([]))
    server.overrides["tools/call"] = lambda req, body: None  # no handle yet
    d = driver(server)
    d.machine.call_tool("research", now=d.now)
    d.pump_side()
    assert not d.machine.abandon(now=d.now)  # the driver drops the connection itself
    assert [method for method, _, _ in sent(server)] == ["tools/call"]


def test_an_abandoned_conn_lingers_unattended_until_its_task_is_cancelled() -> None:
    """Through the driver: the abandoned Conn is closed at once, nothing more is posted
    for it, and it is forgotten when the ``tasks/cancel`` is answered (or its grace
    passes); the Client's next Conn reuses the socket."""
    from .test_driver import make

    for answered in (True, False):
        server = task_server(iter([{"resultType": "complete"}]))
        if not answered:
            server.overrides["tasks/cancel"] = lambda req, body: None
        net = make(server, limits=Limits(cancel_grace=0.5))
        view = net.open(tasks=True)
        net.ok("connect", view)
        net.start("call_tool", view, "research", b"{}")
        net.settle()  # the handle came: the task waits for its poll
        posted = len(net.finished[view.conn_id])
        net.driver.abandon(view.conn_id, now=net.now)
        net.pump()
        assert view.closed
        net.settle()
        if not answered:
            assert net.driver._conns  # waiting for the cancel's answer, at most the grace
            assert net.tick()
        assert not net.driver._conns and len(net.finished[view.conn_id]) == posted
        methods = [method for method, _, _ in sent(server)]
        assert methods[-2:] == ["tools/call", "tasks/cancel"]
        assert net.ok("connect", net.open()) is None


# ---------------------------------------------------------------- the task handle


def task_op(d: Driver, action: str, subject: str, **more: Any) -> Any:
    return d.run(lambda now: d.machine.task(action, subject, now=now, **more))


def test_start_reports_the_task_and_result_follows_it_by_id() -> None:
    server = task_server(
        iter([polled("working", pollIntervalMs=500), polled("completed", result=RESULT)])
    )
    d = driver(server)
    started = task_op(d, "start", "research", arguments=b'{"q": "tasks"}')
    assert started == TaskReported(task_id="task-7", status="working")
    assert d.now == 0.0  # reported at once, not polled
    outcome = d.ok(task_op(d, "result", "task-7", tool="research"))
    assert isinstance(outcome, ToolCalled) and outcome.result.content[0].text == "researched"
    assert [method for method, _, _ in sent(server)] == ["tools/call", "tasks/get", "tasks/get"]
    assert d.now == 0.5  # a resumed task is polled at once, then at its interval


def test_start_answered_at_once_is_the_calls_result() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = lambda req, body: server.wrap(result(body["id"], RESULT))
    d = driver(server)
    outcome = d.ok(task_op(d, "start", "research"))
    assert isinstance(outcome, ToolCalled) and not outcome.result.is_error


def test_poll_reports_the_status_and_cancel_is_acknowledged() -> None:
    server = task_server(iter([polled("input_required", inputRequests={"a": ASK}), {}]))
    d = driver(server)
    assert task_op(d, "poll", "task-7") == TaskReported(task_id="task-7", status="input_required")
    assert task_op(d, "cancel", "task-7") == TaskReported(task_id="task-7", status="cancelled")
    requests = sent(server)
    assert [method for method, _, _ in requests] == ["tasks/get", "tasks/cancel"]
    assert all(header_value(r.headers, b"mcp-name") == b"task-7" for _, r, _ in requests)


def test_a_poll_about_another_task_ends_classified() -> None:
    server = task_server(iter([polled("working", taskId="task-8")]))
    d = driver(server)
    failure = d.failure(task_op(d, "poll", "task-7"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "task_id_changed"


@pytest.mark.parametrize(
    ("tasks", "action", "subject", "wording"),
    [
        (False, "poll", "task-7", "Config(tasks=True)"),
        (True, "wait", "task-7", "a task action is one of"),
        (True, "poll", "", "a task id must be"),
        (True, "result", "x" * (65 << 10), "a task id must be"),
        (True, "start", "", "tool name"),
    ],
)
def test_a_task_handle_call_that_cannot_be_made_is_refused_before_any_io(
    tasks: bool, action: str, subject: str, wording: str
) -> None:
    server = task_server(iter([]))
    d = driver(server, tasks=tasks)
    with pytest.raises(CallerError, match=re.escape(wording)):
        d.machine.task(action, subject, now=d.now)
    assert sent(server) == []


def test_the_driver_runs_a_task_handles_operations() -> None:
    from .test_driver import make

    server = task_server(iter([polled("working")]))
    net = make(server)
    view = net.open(tasks=True)
    net.ok("connect", view)
    started = net.ok("task", view, "start", "research")
    assert started == TaskReported(task_id="task-7", status="working")
    assert net.ok("task", view, "poll", "task-7") == started


# ---------------------------------------------------------------- status notifications


def status(params: Any, method: str = "notifications/tasks") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def notifying(*notes: dict[str, Any], then: dict[str, Any]) -> FakeServer:
    """A task server whose tasks/get answers on a stream: ``notes``, then ``then``."""
    server = task_server(iter([]))
    server.overrides["tasks/get"] = lambda req, body: sse_response(*notes, result(body["id"], then))
    return server


def test_a_status_notification_reaches_the_task_it_is_about() -> None:
    # the task said cancelled (a notification), then working (the poll): a flap
    server = notifying(
        status(polled("working", taskId="task-other")),  # another task's: ignored
        status(polled("working"), method="notifications/tasks/status"),  # other shape's
        status({**polled("cancelled"), "resultType": "complete"}),
        then=polled("working"),
    )
    d = driver(server)
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "task_transition"


def test_a_bad_status_notification_fails_the_call_classified() -> None:
    server = notifying(status(5), then=polled("completed", result=RESULT))
    d = driver(server)
    failure = d.failure(d.call("research"))
    assert isinstance(failure, ServerAnswered) and failure.reason == "malformed_task"


def test_status_notifications_without_a_task_are_dropped() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = lambda req, body: sse_response(
        status(polled("working")), result(body["id"], RESULT)
    )
    d = driver(server)
    outcome = d.ok(d.call("research"))
    assert isinstance(outcome, ToolCalled) and d.machine._t.statuses == []


def test_tasks_result_waits_under_task_timeout() -> None:
    d = driver(FakeServer(), limits=Limits(task_timeout=77.0, dial_timeout=3.0))
    send = next(d.machine._ops.request("tasks/result", {"taskId": "t"}))
    assert (send.cap, send.cap_bound) == (77.0, "task_timeout")
    get = next(d.machine._ops.request("tasks/get", {"taskId": "t"}))
    assert (get.cap, get.cap_bound) == (3.0, "dial_timeout")
