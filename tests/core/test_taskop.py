"""The task operation script (``sansmcp.core.mcp.taskop``) driven by hand against a
scripted server: which requests it sends, in which order, with which headers, and how it
ends (issue 30).  The clock is a counter the runner moves to each Sleep: no wall clock."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any

import pytest

from sansmcp.core.errors import ConnectionFailed, McpError, ServerAnswered
from sansmcp.core.limits import Limits
from sansmcp.core.mcp.operations import Ask, Instruction, Sleep
from sansmcp.core.mcp.taskop import run_task
from sansmcp.core.mcp.tasks import TaskTracker
from sansmcp.core.mcp.taskwire import EXTENSION, LEGACY, TaskShape, read_task
from sansmcp.core.mcp.transport import Reply

RESULT = {"content": [{"type": "text", "text": "42"}], "isError": False}
ASK = {"method": "elicitation/create", "params": {"message": "name?"}}
Server = Callable[[str, Mapping[str, Any]], dict[str, Any] | None]


class Run:
    """Runs the script to its end: requests go to ``server`` (a JSON-RPC message or None
    for a bodiless answer), sleeps move the clock, asks go to ``answer``."""

    def __init__(self, server: Server, answer: Callable[[Any], Any] = lambda r: None) -> None:
        self.server = server
        self.answer = answer
        self.clock = 0.0
        self.sent: list[tuple[str, dict[str, Any], tuple[tuple[bytes, bytes], ...]]] = []
        self.sleeps: list[float] = []
        self.asks: list[Any] = []

    def request(
        self, method: str, params: Mapping[str, Any], *, extra: Any = ()
    ) -> Generator[Instruction, Any, Reply]:
        self.sent.append((method, dict(params), tuple(extra)))
        return Reply(200, (), self.server(method, params), self.clock)
        yield  # a generator, like Operations.request

    def __call__(
        self, shape: TaskShape, first: dict[str, Any], limits: Limits | None = None
    ) -> Any:
        tracker = TaskTracker(
            shape, limits or Limits(), deadline=10_000.0, limit=10_000.0, can_answer=True
        )
        step = tracker.created(read_task(first, shape, max_echo_bytes=64), now=self.clock)
        gen = run_task(tracker, step, request=self.request, at=self.clock)
        value: Any = None
        try:
            while True:
                instruction = gen.send(value)
                value = None
                if isinstance(instruction, Sleep):
                    assert instruction.until >= self.clock
                    self.sleeps.append(instruction.until - self.clock)
                    self.clock = instruction.until
                elif isinstance(instruction, Ask):
                    self.asks.append(instruction.requests)
                    value = self.answer(instruction.requests)
                else:  # pragma: no cover - the fake request sends nothing itself
                    raise AssertionError(instruction)
        except StopIteration as stop:
            return stop.value

    def methods(self) -> list[str]:
        return [method for method, _, _ in self.sent]


def ok(result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "result": result}


def err(code: int, message: str = "no") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": message}}


def ext(status: str, **more: Any) -> dict[str, Any]:
    return {"resultType": "complete", "taskId": "t-1", "status": status, "ttlMs": None, **more}


def scripted(*answers: dict[str, Any] | None) -> tuple[Server, list[dict[str, Any] | None]]:
    queue = list(answers)

    def server(method: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        return queue.pop(0)

    return server, queue


def test_the_extension_flow_polls_updates_and_returns_the_result() -> None:
    server, left = scripted(
        ok(ext("working", pollIntervalMs=2000)),
        ok(ext("input_required", inputRequests={"name": ASK})),
        ok({"resultType": "complete"}),
        ok(ext("completed", result=RESULT)),
    )
    run = Run(server, answer=lambda requests: {"name": {"action": "accept"}})
    assert run(EXTENSION, ext("working", pollIntervalMs=5000)) == RESULT
    assert left == []
    assert run.methods() == ["tasks/get", "tasks/get", "tasks/update", "tasks/get"]
    # every task request names the task, in params and in Mcp-Name (routing)
    assert all(params["taskId"] == "t-1" for _, params, _ in run.sent)
    assert all(extra == ((b"mcp-name", b"t-1"),) for _, _, extra in run.sent)
    assert run.sent[2][1]["inputResponses"] == {"name": {"action": "accept"}}
    assert run.asks == [{"name": ASK}]
    assert run.sleeps == [5.0, 2.0, 1.0]  # the server's interval as it changes (1 s: none)


def test_the_legacy_flow_fetches_tasks_result_without_routing_headers() -> None:
    server, left = scripted(
        ok({"taskId": "t-1", "status": "working"}),
        ok({"taskId": "t-1", "status": "completed"}),
        ok(RESULT),
    )
    run = Run(server)
    first = {"taskId": "t-1", "status": "working", "ttl": 60000, "pollInterval": 100}
    assert run(LEGACY, first, Limits(min_task_poll_interval=0.05)) == RESULT
    assert left == [] and run.sleeps == [0.1, 1.0]
    assert run.methods() == ["tasks/get", "tasks/get", "tasks/result"]
    assert all(extra == () for _, _, extra in run.sent)


def test_declined_input_cancels_the_task_once_and_fails() -> None:
    server, left = scripted(ok({"resultType": "complete"}))
    run = Run(server, answer=lambda requests: None)
    with pytest.raises(ServerAnswered) as caught:
        run(EXTENSION, ext("input_required", inputRequests={"k": ASK}))
    assert caught.value.reason == "input_declined"
    assert run.methods() == ["tasks/cancel"] and left == []


@pytest.mark.parametrize("answer", [err(-32602), None, {"jsonrpc": "2.0", "id": 1, "result": []}])
def test_a_cancel_that_fails_still_ends_with_the_reason(answer: dict[str, Any] | None) -> None:
    server, _ = scripted(answer)
    run = Run(server, answer=lambda requests: None)
    with pytest.raises(ServerAnswered) as caught:
        run(EXTENSION, ext("input_required", inputRequests={"k": ASK}))
    assert caught.value.reason == "input_declined"


@pytest.mark.parametrize(
    ("answer", "kind", "reason"),
    [
        (err(-32602, "Task not found"), ServerAnswered, "task_lost"),
        (err(-32603), ServerAnswered, "jsonrpc_error"),
        ({"jsonrpc": "2.0", "id": 1, "result": "done"}, ServerAnswered, "malformed_result"),
        (None, ConnectionFailed, "http_status"),
        (ok(ext("working", taskId="t-2")), ServerAnswered, "task_id_changed"),
    ],
)
def test_a_bad_poll_answer_ends_classified(
    answer: dict[str, Any] | None, kind: type[McpError], reason: str
) -> None:
    server, _ = scripted(answer)
    with pytest.raises(kind) as caught:
        Run(server)(EXTENSION, ext("working"))
    assert getattr(caught.value, "reason", getattr(caught.value, "cause", None)) == reason


def test_a_server_that_never_finishes_ends_at_the_poll_bound() -> None:
    run = Run(lambda method, params: ok(ext("working", pollIntervalMs=0)))
    with pytest.raises(ServerAnswered) as caught:
        run(EXTENSION, ext("working"), Limits(max_task_polls=7))
    assert caught.value.reason == "max_task_polls"
    assert run.methods() == ["tasks/get"] * 7
    assert run.sleeps[1:] == pytest.approx([0.1] * 6)  # a pollIntervalMs of 0 never spins
