"""The two task shapes on the wire (``sansmcp.core.mcp.taskwire``), by table (issue 30)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sansmcp.core.errors import ServerAnswered
from sansmcp.core.http import header_value
from sansmcp.core.mcp import ConnSettings
from sansmcp.core.mcp.requests import Requests
from sansmcp.core.mcp.session import Session
from sansmcp.core.mcp.taskwire import (
    EXTENSION,
    EXTENSION_ID,
    LEGACY,
    STATUS_MESSAGE_CHARS,
    TaskView,
    augment_call,
    created_task,
    declare_extension,
    read_ack,
    read_task,
    related_task,
    requires_tasks,
    task_request,
)
from sansmcp.core.url import parse_endpoint

ECHO = 64


def task(**over: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "taskId": "t-1",
        "status": "working",
        "createdAt": "2025-11-25T10:30:00Z",
        "lastUpdatedAt": "2025-11-25T10:40:00Z",
        "ttlMs": 60000,
        "pollIntervalMs": 5000,
    }
    value.update(over)
    return {k: v for k, v in value.items() if v is not ...}


def legacy_task(**over: Any) -> dict[str, Any]:
    value = task(ttlMs=..., pollIntervalMs=..., ttl=30000, pollInterval=5000)
    value.update(over)
    return {k: v for k, v in value.items() if v is not ...}


def test_a_working_extension_task_reads_every_member() -> None:
    view = read_task(task(statusMessage="going"), EXTENSION, max_echo_bytes=ECHO)
    assert view == TaskView(
        task_id="t-1", status="working", status_message="going", ttl_ms=60000, poll_interval_ms=5000
    )


def test_a_legacy_task_reads_ttl_and_poll_interval() -> None:
    view = read_task(legacy_task(), LEGACY, max_echo_bytes=ECHO)
    assert (view.ttl_ms, view.poll_interval_ms) == (30000, 5000)
    # the other shape's names mean nothing there
    assert read_task(task(), LEGACY, max_echo_bytes=ECHO).ttl_ms is None


def test_optional_members_may_be_absent_or_null() -> None:
    view = read_task(
        task(ttlMs=None, pollIntervalMs=..., createdAt=..., lastUpdatedAt=...),
        EXTENSION,
        max_echo_bytes=ECHO,
    )
    assert view.ttl_ms is None and view.poll_interval_ms is None and view.status_message is None


def test_a_long_status_message_is_cut_and_a_non_string_one_dropped() -> None:
    long = read_task(task(statusMessage="x" * 5000), EXTENSION, max_echo_bytes=ECHO)
    assert long.status_message == "x" * STATUS_MESSAGE_CHARS
    assert read_task(task(statusMessage=7), EXTENSION, max_echo_bytes=ECHO).status_message is None


def test_the_outcomes_come_inline_in_the_extension() -> None:
    done = read_task(
        task(status="completed", result={"content": []}), EXTENSION, max_echo_bytes=ECHO
    )
    assert done.result == {"content": []}
    error = {"code": -32603, "message": "rate limited"}
    failed = read_task(task(status="failed", error=error), EXTENSION, max_echo_bytes=ECHO)
    assert failed.error == error
    asks = {"name": {"method": "elicitation/create", "params": {}}}
    waiting = read_task(
        task(status="input_required", inputRequests=asks), EXTENSION, max_echo_bytes=ECHO
    )
    assert waiting.input_requests == asks


def test_the_legacy_shape_carries_no_outcome_inline() -> None:
    for status in ("completed", "failed", "input_required"):
        view = read_task(legacy_task(status=status), LEGACY, max_echo_bytes=ECHO)
        assert view.result is None and view.error is None and view.input_requests is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ([], "not an object"),
        (task(taskId=...), "taskId"),
        (task(taskId=""), "taskId"),
        (task(taskId=7), "taskId"),
        (task(taskId="x" * (ECHO + 1)), "taskId"),
        (task(taskId="é" * (ECHO // 2 + 1)), "taskId"),  # bytes, not characters
        (task(status="running"), "unknown status 'running'"),
        (task(status=None), "unknown status NoneType"),
        (task(status=...), "unknown status NoneType"),
        (task(ttlMs=-1), "ttlMs"),
        (task(ttlMs="60000"), "ttlMs"),
        (task(ttlMs=True), "ttlMs"),
        (task(ttlMs=float("nan")), "ttlMs"),
        (task(ttlMs=float("inf")), "ttlMs"),
        (task(pollIntervalMs="5000"), "pollIntervalMs"),
        (task(pollIntervalMs=False), "pollIntervalMs"),
        (task(createdAt=1), "createdAt"),
        (task(lastUpdatedAt=None), "lastUpdatedAt"),
        (task(status="completed"), "completed without a result"),
        (task(status="completed", result=[1]), "completed without a result"),
        (task(status="failed"), "failed without"),
        (task(status="failed", error={"code": "x", "message": "m"}), "failed without"),
        (task(status="failed", error={"code": True, "message": "m"}), "failed without"),
        (task(status="failed", error={"code": 1}), "failed without"),
        (task(status="input_required"), "without an object of requests"),
        (task(status="input_required", inputRequests=[]), "without an object of requests"),
        (task(status="input_required", inputRequests={"k": 1}), "without an object"),
        (task(status="input_required", inputRequests={"k": {}}), "without an object"),
        (
            task(status="input_required", inputRequests={"k" * (ECHO + 1): {"method": "m"}}),
            "under a key longer than",
        ),
    ],
)
def test_a_task_we_cannot_use_is_malformed(value: Any, words: str) -> None:
    with pytest.raises(ServerAnswered) as caught:
        read_task(value, EXTENSION, max_echo_bytes=ECHO)
    assert caught.value.reason == "malformed_task"
    assert words in str(caught.value)


def test_a_ttl_and_a_poll_interval_of_any_number_are_read() -> None:
    view = read_task(task(ttlMs=0, pollIntervalMs=-5), EXTENSION, max_echo_bytes=ECHO)
    assert (view.ttl_ms, view.poll_interval_ms) == (0, -5)
    view = read_task(task(ttlMs=6e4, pollIntervalMs=10**400), EXTENSION, max_echo_bytes=ECHO)
    assert (view.ttl_ms, view.poll_interval_ms) == (6e4, 10**400)
    view = read_task(task(ttlMs=10**400), EXTENSION, max_echo_bytes=ECHO)
    assert view.ttl_ms == float("inf")  # past float range: as good as unlimited


# ------------------------------------------------------------ created tasks


def test_an_extension_task_handle_is_recognised_by_its_result_type() -> None:
    result = {"resultType": "task", **task()}
    view = created_task(result, EXTENSION, method="tools/call", max_echo_bytes=ECHO)
    assert view is not None and view.task_id == "t-1"


def test_a_legacy_task_handle_is_the_nested_task() -> None:
    result = {"task": legacy_task(), "_meta": {}}
    view = created_task(result, LEGACY, method="tools/call", max_echo_bytes=ECHO)
    assert view is not None and view.ttl_ms == 30000


@pytest.mark.parametrize(
    "result",
    [
        {"content": [], "isError": False},
        {"resultType": "complete", "content": []},
        {"task": {"taskId": "t"}, "content": []},  # a call result with an extra member
        {"task": "t"},
    ],
)
def test_a_plain_result_is_no_task(result: dict[str, Any]) -> None:
    for shape in (EXTENSION, LEGACY, None):
        assert created_task(result, shape, method="tools/call", max_echo_bytes=ECHO) is None


@pytest.mark.parametrize(
    ("result", "shape", "method", "words"),
    [
        ({"resultType": "task", **task()}, None, "tools/call", "did not ask for"),
        ({"resultType": "task", **task()}, LEGACY, "tools/call", "did not ask for"),
        ({"task": legacy_task()}, None, "tools/call", "2025-11-25 shape"),
        ({"task": legacy_task()}, EXTENSION, "tools/call", "did not ask for"),
        ({"resultType": "task", **task()}, EXTENSION, "tools/list", "only tools/call may"),
        ({"task": legacy_task()}, LEGACY, "server/discover", "only tools/call may"),
    ],
)
def test_an_unasked_task_handle_is_refused(
    result: dict[str, Any], shape: Any, method: str, words: str
) -> None:
    with pytest.raises(ServerAnswered) as caught:
        created_task(result, shape, method=method, max_echo_bytes=ECHO)
    assert caught.value.reason == "unexpected_task"
    assert words in str(caught.value)


def test_a_malformed_handle_is_malformed() -> None:
    with pytest.raises(ServerAnswered) as caught:
        created_task({"resultType": "task"}, EXTENSION, method="tools/call", max_echo_bytes=ECHO)
    assert caught.value.reason == "malformed_task"


# ------------------------------------------------------------ acknowledgements, metadata


@pytest.mark.parametrize("result", [{}, {"resultType": "complete"}, {"_meta": {}}])
def test_an_acknowledgement_is_complete(result: dict[str, Any]) -> None:
    read_ack(result)


@pytest.mark.parametrize(
    ("result", "shown"),
    [
        ({"resultType": "task"}, "'task'"),
        ({"resultType": 3}, "int"),
        ({"resultType": None}, "NoneType"),
    ],
)
def test_an_acknowledgement_of_another_type_is_refused(result: dict[str, Any], shown: str) -> None:
    with pytest.raises(ServerAnswered) as caught:
        read_ack(result)
    assert caught.value.reason == "unknown_result_type" and shown in str(caught.value)


@pytest.mark.parametrize(
    ("result", "task_id"),
    [
        ({"_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t-1"}}}, "t-1"),
        ({"_meta": {"io.modelcontextprotocol/related-task": {"taskId": 1}}}, None),
        ({"_meta": {"io.modelcontextprotocol/related-task": "t-1"}}, None),
        ({"_meta": []}, None),
        ({}, None),
    ],
)
def test_related_task(result: dict[str, Any], task_id: str | None) -> None:
    assert related_task(result) == task_id


# ------------------------------------------------------------ requests


def test_extension_task_requests_are_routed_by_mcp_name() -> None:
    get = task_request(EXTENSION, "tasks/get", "t-1")
    assert (get.method, get.params, get.headers) == (
        "tasks/get",
        {"taskId": "t-1"},
        ((b"mcp-name", b"t-1"),),
    )
    update = task_request(
        EXTENSION, "tasks/update", "t-1", responses={"name": {"action": "accept"}}
    )
    assert update.params == {"taskId": "t-1", "inputResponses": {"name": {"action": "accept"}}}
    assert update.headers == get.headers


def test_a_task_id_that_is_no_plain_header_value_is_encoded() -> None:
    cancel = task_request(EXTENSION, "tasks/cancel", "tâche 1")
    assert cancel.headers == ((b"mcp-name", b"=?base64?dMOiY2hlIDE=?="),)


def test_legacy_task_requests_carry_no_routing_header() -> None:
    got = task_request(LEGACY, "tasks/result", "t-1")
    assert (got.method, got.params, got.headers) == ("tasks/result", {"taskId": "t-1"}, ())


def test_augment_call_asks_a_legacy_server_in_params_only() -> None:
    params = {"name": "slow"}
    assert augment_call(LEGACY, params) == {"name": "slow", "task": {}}
    assert augment_call(EXTENSION, params) == params and params == {"name": "slow"}


@pytest.mark.parametrize(
    ("capabilities", "declared"),
    [
        (None, {"extensions": {EXTENSION_ID: {}}}),
        ({"elicitation": {}}, {"elicitation": {}, "extensions": {EXTENSION_ID: {}}}),
        ({"extensions": {"x/y": {"a": 1}}}, {"extensions": {"x/y": {"a": 1}, EXTENSION_ID: {}}}),
        ({"extensions": "junk"}, {"extensions": {EXTENSION_ID: {}}}),
    ],
)
def test_declare_extension(capabilities: Any, declared: dict[str, Any]) -> None:
    before = repr(capabilities)
    assert declare_extension(capabilities) == declared
    assert repr(capabilities) == before  # the caller's value is not touched


REQUIRED: dict[str, Any] = {"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}}


@pytest.mark.parametrize(
    ("error", "required"),
    [
        ({"code": -32021, "message": "m", "data": REQUIRED}, True),
        (
            {"code": -32021, "message": "m", "data": {"requiredCapabilities": {"extensions": {}}}},
            False,
        ),
        (
            {"code": -32021, "message": "m", "data": {"requiredCapabilities": {"elicitation": {}}}},
            False,
        ),
        ({"code": -32021, "message": "m", "data": {"requiredCapabilities": []}}, False),
        ({"code": -32021, "message": "m"}, False),
        ({"code": -32602, "message": "m", "data": REQUIRED}, False),
    ],
)
def test_requires_tasks(error: dict[str, Any], required: bool) -> None:
    assert requires_tasks(error) is required


def test_a_task_request_goes_out_through_the_connections_request_builder() -> None:
    """The body and headers the connection sends for a task request: the task id in
    params and in ``Mcp-Name``, the method in ``Mcp-Method``, and the declaration of the
    extension in every modern request's ``_meta`` (tasks/get included: a server refuses a
    non-declaring client's task requests with -32021)."""
    settings = ConnSettings(
        endpoint=parse_endpoint("https://mcp.example.com/mcp"),
        capabilities=declare_extension({"elicitation": {}}),
    )
    session = Session()
    session.modern_at("2026-07-28")
    built = task_request(EXTENSION, "tasks/get", "t-1")
    http = Requests(settings, session).rpc(7, built.method, built.params, None, built.headers)
    assert header_value(http.headers, b"mcp-name") == b"t-1"
    assert header_value(http.headers, b"mcp-method") == b"tasks/get"
    body = json.loads(http.body)
    assert (body["id"], body["method"], body["params"]["taskId"]) == (7, "tasks/get", "t-1")
    declared = body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert declared == {"elicitation": {}, "extensions": {EXTENSION_ID: {}}}
