"""One task's tracker (``sansmcp.core.mcp.tasks``): its steps by table, hostile servers
by property (issue 30).  Times are the caller's clock, passed in: no wall clock here."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import (
    CallerError,
    ConnectionFailed,
    LocalProtocolError,
    McpError,
    ServerAnswered,
)
from sansmcp.core.limits import Limits
from sansmcp.core.mcp.tasks import (
    TRANSITIONS,
    AskInput,
    Cancel,
    Deliver,
    FetchResult,
    Poll,
    SendUpdate,
    TaskTracker,
    poll_delay,
)
from sansmcp.core.mcp.taskwire import EXTENSION, LEGACY, STATUSES, TaskShape, read_task
from tests.tiers import examples

LIMITS = Limits(max_task_polls=20, max_call_attempts=3, min_task_poll_interval=0.5)
RESULT = {"content": [{"type": "text", "text": "done"}], "isError": False}
ASK = {"method": "elicitation/create", "params": {"message": "name?"}}


def task(status: str = "working", **over: Any) -> dict[str, Any]:
    value: dict[str, Any] = {"taskId": "t-1", "status": status, "ttlMs": None}
    value.update(over)
    return value


def tracker(
    shape: TaskShape = EXTENSION,
    *,
    limits: Limits = LIMITS,
    deadline: float = 1000.0,
    can_answer: bool = True,
) -> TaskTracker:
    return TaskTracker(shape, limits, deadline=deadline, limit=deadline, can_answer=can_answer)


def create(t: TaskTracker, value: dict[str, Any], now: float = 0.0) -> Any:
    return t.created(read_task(value, t.shape, max_echo_bytes=64), now=now)


def refused(call: Any, reason: str) -> ServerAnswered:
    with pytest.raises(ServerAnswered) as caught:
        call()
    assert caught.value.reason == reason
    return caught.value


# ------------------------------------------------------------ the poll interval


@pytest.mark.parametrize(
    ("interval_ms", "seconds"),
    [
        (None, 1.0),  # the server suggests none
        (5000, 5.0),
        (2500.5, 2.5005),
        (0, 0.5),  # a spin: the floor
        (-100, 0.5),
        (float("nan"), 0.5),
        (float("-inf"), 0.5),
        (10**12, 30.0),  # a park: the ceiling
        (float("inf"), 30.0),
        (10**400, 30.0),  # past float range
    ],
)
def test_poll_delay_is_clamped(interval_ms: Any, seconds: float) -> None:
    assert poll_delay(interval_ms, LIMITS) == seconds


def test_the_floor_wins_when_the_bounds_cross() -> None:
    crossed = Limits(min_task_poll_interval=5.0, max_task_poll_interval=1.0)
    assert poll_delay(10**9, crossed) == 5.0 and poll_delay(0, crossed) == 5.0


@settings(max_examples=examples(300), deadline=None)
@given(st.none() | st.integers() | st.floats(allow_nan=True, allow_infinity=True))
def test_poll_delay_is_always_within_the_bounds(interval_ms: Any) -> None:
    delay = poll_delay(interval_ms, LIMITS)
    assert LIMITS.min_task_poll_interval <= delay <= LIMITS.max_task_poll_interval


def test_the_status_table() -> None:
    assert TRANSITIONS["working"] == TRANSITIONS["input_required"] == STATUSES
    for terminal in ("completed", "failed", "cancelled"):
        assert TRANSITIONS[terminal] == {terminal}


# ------------------------------------------------------------ the extension, end to end


def test_an_extension_task_polls_asks_updates_and_delivers() -> None:
    t = tracker()
    assert create(t, task(pollIntervalMs=2000), now=10.0) == Poll(12.0)
    assert t.polls == 1 and t.task_id == "t-1" and t.status == "working"
    assert t.polled(task(statusMessage="half", pollIntervalMs=1000), now=12.0) == Poll(13.0)
    assert t.status_message == "half"
    asked = t.polled(task("input_required", inputRequests={"name": ASK}), now=13.0)
    assert asked == AskInput({"name": ASK})
    sent = t.answered({"name": {"action": "accept"}, "other": 1}, now=14.0)
    assert sent == SendUpdate({"name": {"action": "accept"}})  # only what was asked
    assert t.updated({"resultType": "complete"}, now=14.5) == Poll(15.5)
    # the update not yet reflected: the same key again is not asked twice
    again = t.polled(task("input_required", inputRequests={"name": ASK}), now=15.5)
    assert again == Poll(16.5)
    assert t.polled(task(), now=16.5) == Poll(17.5)
    done = t.polled({"resultType": "complete", **task("completed", result=RESULT)}, now=17.5)
    assert done == Deliver(RESULT) and t.done


def test_a_task_created_complete_delivers_at_once() -> None:
    t = tracker()
    assert create(t, task("completed", result=RESULT)) == Deliver(RESULT)
    assert t.polls == 0


def test_a_failed_extension_task_is_its_json_rpc_error() -> None:
    t = tracker()
    create(t, task())
    error = {"code": -32603, "message": "API rate limit exceeded", "data": {"retry": 5}}
    failure = refused(lambda: t.polled(task("failed", error=error), now=1.0), "jsonrpc_error")
    assert (failure.code, failure.rpc_message, failure.data) == (
        -32603,
        error["message"],
        {"retry": 5},
    )
    assert t.done


def test_a_task_cancelled_by_the_server_is_classified() -> None:
    t = tracker()
    create(t, task())
    failure = refused(
        lambda: t.polled(task("cancelled", statusMessage="admin"), now=1), "task_cancelled"
    )
    assert "admin" in str(failure)
    t = tracker()
    assert "'t-1'" in str(refused(lambda: create(t, task("cancelled")), "task_cancelled"))


def test_partial_answers_and_a_second_round() -> None:
    t = tracker()
    create(t, task())
    two = {"a": ASK, "b": ASK}
    assert t.polled(task("input_required", inputRequests=two), now=1) == AskInput(two)
    assert t.answered({"a": 1}, now=2) == SendUpdate({"a": 1})
    t.updated({}, now=2)
    # b is still outstanding and never answered: asked again (a new round), a is not
    assert t.polled(task("input_required", inputRequests=two), now=3) == AskInput({"b": ASK})
    assert t.answered({}, now=4) == Poll(5.0)  # nothing to send: poll again


def test_declined_input_cancels_the_task_then_fails() -> None:
    t = tracker()
    create(t, task("input_required", inputRequests={"k": ASK}))
    assert t.answered(None, now=1) == Cancel()
    refused(lambda: t.cancelled({"resultType": "complete"}), "input_declined")
    assert t.done


def test_input_without_a_handler_fails_with_the_requests() -> None:
    t = tracker(can_answer=False)
    create(t, task())
    failure = refused(
        lambda: t.polled(task("input_required", inputRequests={"k": ASK}), now=1), "input_required"
    )
    assert failure.data == {"k": ASK} and "elicitation/create" in str(failure)


def test_endless_input_is_bounded_by_max_call_attempts() -> None:
    t = tracker()
    create(t, task())
    for round in range(LIMITS.max_call_attempts):
        key = f"k{round}"
        assert t.polled(task("input_required", inputRequests={key: ASK}), now=round) == AskInput(
            {key: ASK}
        )
        t.answered({key: 1}, now=round)
        t.updated({}, now=round)
    failure = refused(
        lambda: t.polled(task("input_required", inputRequests={"last": ASK}), now=9),
        "max_call_attempts",
    )
    assert failure.bound == "max_call_attempts" and failure.limit == 3


# ------------------------------------------------------------ 2025-11-25


def test_a_legacy_task_fetches_its_result_when_it_ends() -> None:
    t = tracker(LEGACY)
    assert create(
        t, {"taskId": "t-1", "status": "working", "ttl": 60000, "pollInterval": 800}
    ) == Poll(0.8)
    assert t.polled({"taskId": "t-1", "status": "completed"}, now=0.8) == FetchResult()
    meta = {"io.modelcontextprotocol/related-task": {"taskId": "t-1"}}
    assert t.fetched({**RESULT, "_meta": meta}, now=1) == Deliver({**RESULT, "_meta": meta})


@pytest.mark.parametrize("status", ["failed", "input_required"])
def test_a_legacy_task_fetches_its_result_for_input_or_failure(status: str) -> None:
    t = tracker(LEGACY)
    create(t, {"taskId": "t-1", "status": "working"})
    assert t.polled({"taskId": "t-1", "status": status}, now=1) == FetchResult()
    assert t.fetched(RESULT, now=2) == Deliver(RESULT)


def test_a_legacy_result_naming_another_task_is_refused() -> None:
    t = tracker(LEGACY)
    create(t, {"taskId": "t-1", "status": "completed"})
    meta = {"io.modelcontextprotocol/related-task": {"taskId": "t-2"}}
    refused(lambda: t.fetched({**RESULT, "_meta": meta}, now=1), "task_id_changed")


def test_a_legacy_cancel_answers_with_the_task() -> None:
    t = tracker(LEGACY)
    create(t, {"taskId": "t-1", "status": "working"})
    gave_up = ConnectionFailed("gone", cause="client_closed")
    assert t.cancel(gave_up) == Cancel()
    with pytest.raises(ConnectionFailed):
        t.cancelled({"taskId": "t-1", "status": "cancelled"})
    t = tracker(LEGACY)
    create(t, {"taskId": "t-1", "status": "working"})
    t.cancel(gave_up)
    refused(lambda: t.cancelled({"taskId": "t-2", "status": "cancelled"}), "task_id_changed")
    t = tracker(LEGACY)
    create(t, {"taskId": "t-1", "status": "working"})
    t.cancel(gave_up)
    refused(lambda: t.cancelled({"taskId": "t-1", "status": "gone"}), "malformed_task")


# ------------------------------------------------------------ cancel, resume, errors


def test_cancel_is_sent_once() -> None:
    t = tracker()
    create(t, task())
    first = ConnectionFailed("caller gave up", cause="client_closed")
    assert t.cancel(first) == Cancel()
    second = ConnectionFailed("again", cause="client_closed")
    with pytest.raises(ConnectionFailed) as caught:
        t.cancel(second)
    assert caught.value is second and t.done


def test_a_failed_cancel_still_ends_with_its_reason() -> None:
    t = tracker()
    create(t, task())
    t.cancel(ConnectionFailed("caller gave up", cause="client_closed"))
    with pytest.raises(ConnectionFailed):
        t.cancelled(None)


def test_cancel_before_any_task_fails_at_once() -> None:
    t = tracker()
    with pytest.raises(ConnectionFailed):
        t.cancel(ConnectionFailed("caller gave up", cause="client_closed"))


def test_resume_polls_at_once() -> None:
    t = tracker()
    assert t.resumed("t-9", now=50.0) == Poll(50.0)
    assert t.polled(task(taskId="t-9"), now=50.0) == Poll(51.0)
    refused(lambda: t.polled(task(taskId="t-1"), now=51), "task_id_changed")


@pytest.mark.parametrize("task_id", ["", "x" * 65, 7, None])
def test_resume_refuses_an_id_that_cannot_be_sent(task_id: Any) -> None:
    with pytest.raises(CallerError):
        tracker(limits=Limits(max_echo_bytes=64)).resumed(task_id, now=0)


@pytest.mark.parametrize(
    ("code", "method", "reason"),
    [
        (-32602, "tasks/get", "task_lost"),
        (-32602, "tasks/update", "task_lost"),
        (-32603, "tasks/get", "jsonrpc_error"),
    ],
)
def test_a_json_rpc_error_on_a_task_request(code: int, method: str, reason: str) -> None:
    t = tracker()
    create(t, task())
    failure = refused(
        lambda: t.failed({"code": code, "message": "Task not found"}, method=method), reason
    )
    assert failure.code == code and failure.rpc_message == "Task not found"
    assert (method in str(failure)) is (reason == "task_lost")


# ------------------------------------------------------------ hostile servers, by table


def test_a_task_id_that_changes_is_refused() -> None:
    t = tracker()
    create(t, task())
    failure = refused(lambda: t.polled(task(taskId="t-2"), now=1), "task_id_changed")
    assert "'t-2'" in str(failure) and "'t-1'" in str(failure)


@pytest.mark.parametrize(
    ("first", "then"),
    [
        (task("completed", result=RESULT), task()),
        (task("completed", result=RESULT), task("failed", error={"code": 1, "message": "m"})),
        (task("cancelled"), task()),
    ],
)
def test_a_terminal_status_that_moves_is_refused(
    first: dict[str, Any], then: dict[str, Any]
) -> None:
    # a notification brings the terminal status; the next poll says otherwise
    t = tracker()
    create(t, task())
    t.notified(first, now=1)
    refused(lambda: t.polled(then, now=2), "task_transition")


def test_a_key_asked_again_after_the_task_went_back_to_work_is_a_flap() -> None:
    t = tracker()
    create(t, task("input_required", inputRequests={"k": ASK}))
    t.answered({"k": 1}, now=1)
    t.updated({}, now=1)
    t.polled(task(), now=2)
    failure = refused(
        lambda: t.polled(task("input_required", inputRequests={"k": ASK}), now=3), "task_transition"
    )
    assert "'k'" in str(failure)


def test_notifications_about_other_tasks_are_ignored() -> None:
    t = tracker()
    create(t, task())
    t.notified(task("completed", taskId="other", result=RESULT), now=1)
    assert t.status == "working"
    refused(lambda: t.notified({"taskId": "t-1"}, now=1), "malformed_task")


@pytest.mark.parametrize("kind", ["input_required", 5, None])
def test_a_poll_answer_of_another_result_type_is_refused(kind: Any) -> None:
    t = tracker()
    create(t, task())
    refused(lambda: t.polled({"resultType": kind, **task()}, now=1), "malformed_task")


def test_a_poll_answer_of_result_type_task_is_read() -> None:
    t = tracker()
    create(t, task())
    assert t.polled({"resultType": "task", **task()}, now=1) == Poll(2.0)


def test_an_update_answered_with_another_type_is_refused() -> None:
    t = tracker()
    create(t, task("input_required", inputRequests={"k": ASK}))
    t.answered({"k": 1}, now=1)
    refused(lambda: t.updated({"resultType": "input_required"}, now=1), "unknown_result_type")
    assert t.done


def test_the_poll_count_is_bounded() -> None:
    t = tracker()
    create(t, task(pollIntervalMs=0))
    for n in range(1, LIMITS.max_task_polls):
        assert t.polled(task(pollIntervalMs=0), now=n) == Poll(n + 0.5)
    failure = refused(lambda: t.polled(task(), now=99), "max_task_polls")
    assert failure.bound == "max_task_polls" and failure.limit == 20
    assert t.polls == LIMITS.max_task_polls + 1


def test_the_ttl_bounds_the_task_from_when_we_first_saw_it() -> None:
    t = tracker()
    assert create(t, task(ttlMs=3000, pollIntervalMs=10**12), now=10.0) == Poll(13.0)
    failure = refused(lambda: t.polled(task(ttlMs=3000), now=13.0), "task_expired")
    assert "3000 ms" in str(failure) and "working" in str(failure)


def test_a_ttl_that_grows_extends_the_task_and_a_null_one_frees_it() -> None:
    t = tracker()
    create(t, task(ttlMs=1000, pollIntervalMs=5000), now=0.0)
    assert t.polled(task(ttlMs=60000, pollIntervalMs=5000), now=1.0) == Poll(6.0)
    assert t.polled(task(ttlMs=None, pollIntervalMs=10**9), now=6.0) == Poll(36.0)


def test_a_ttl_of_zero_still_allows_one_poll() -> None:
    t = tracker()
    assert create(t, task(ttlMs=0), now=5.0) == Poll(5.0)
    refused(lambda: t.polled(task(ttlMs=0), now=5.0), "task_expired")


def test_an_update_after_expiry_polls_at_once() -> None:
    t = tracker()
    create(t, task("input_required", ttlMs=1000, inputRequests={"k": ASK}), now=0.0)
    t.answered({"k": 1}, now=2.0)
    assert t.updated({}, now=2.0) == Poll(2.0)


def test_the_last_poll_is_at_the_deadline_then_the_task_is_cancelled() -> None:
    t = tracker(deadline=10.0)
    assert create(t, task(pollIntervalMs=20_000), now=1.0) == Poll(10.0)
    assert t.polled(task(), now=10.0) == Cancel()
    assert t.cancelling and not t.done
    with pytest.raises(ConnectionFailed) as caught:
        t.cancelled({"resultType": "complete"})
    assert caught.value.cause == "timeout" and caught.value.bound == "task_timeout"
    assert t.done


def test_a_done_tracker_refuses_every_call() -> None:
    t = tracker()
    create(t, task("completed", result=RESULT))
    for call in (
        lambda: t.polled(task(), now=1),
        lambda: t.notified(task(), now=1),
        lambda: t.answered(None, now=1),
        lambda: t.updated({}, now=1),
        lambda: t.fetched(RESULT, now=1),
        lambda: t.failed({"code": 1, "message": "m"}, method="tasks/get"),
        lambda: t.cancel(ConnectionFailed("x", cause="client_closed")),
        lambda: t.cancelled(None),
        lambda: t.created(read_task(task(), EXTENSION, max_echo_bytes=64), now=1),
        lambda: t.resumed("t", now=1),
    ):
        with pytest.raises(LocalProtocolError):
            call()


def test_answers_and_cancel_acks_out_of_turn_are_the_drivers_bug() -> None:
    t = tracker()
    create(t, task())
    with pytest.raises(LocalProtocolError):
        t.answered({}, now=1)
    with pytest.raises(LocalProtocolError):
        t.cancelled({})


# ------------------------------------------------------------ hostile servers, by property

STATUS = (
    st.sampled_from([*sorted(STATUSES), "running", "", "COMPLETED"]) | st.none() | st.integers()
)
NUMBER = (
    st.none()
    | st.integers(min_value=-(10**15), max_value=10**15)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.just(10**400)
    | st.text(max_size=3)
    | st.booleans()
)
KEYS = st.sampled_from(["a", "b", "c", "d", "e", "f"])
REQUESTS = st.dictionaries(KEYS, st.just(ASK) | st.just({}), max_size=3) | st.integers()
TASK_VALUE = st.fixed_dictionaries(
    {"taskId": st.sampled_from(["t-1", "t-1", "t-1", "t-2", "", 7])},
    optional={
        "status": STATUS,
        "ttlMs": NUMBER,
        "pollIntervalMs": NUMBER,
        "ttl": NUMBER,
        "pollInterval": NUMBER,
        "result": st.just(RESULT) | st.integers(),
        "error": st.just({"code": -1, "message": "m"}) | st.just({}),
        "inputRequests": REQUESTS,
        "resultType": st.sampled_from(["complete", "task", "input_required"]),
        "statusMessage": st.text(max_size=5) | st.integers(),
    },
)
EVENT = st.tuples(
    st.sampled_from(["poll", "poll", "poll", "notify", "error", "cancel"]),
    TASK_VALUE,
    st.floats(min_value=0, max_value=50),
    st.sampled_from([None, {}, {"a": 1, "b": 2, "c": 3}]),
)


@settings(max_examples=examples(1000, 400), deadline=None)
@given(
    shape=st.sampled_from([EXTENSION, LEGACY]),
    first=TASK_VALUE,
    events=st.lists(EVENT, max_size=60),
    can_answer=st.booleans(),
    resume=st.booleans(),
)
def test_a_hostile_server_never_crashes_the_tracker(
    shape: TaskShape,
    first: dict[str, Any],
    events: list[tuple[str, dict[str, Any], float, Any]],
    can_answer: bool,
    resume: bool,
) -> None:
    """Whatever the server sends, each step is one of the documented steps or a classified
    error, polls stay within ``max_task_polls``, times move forward, and the tracker ends
    within the poll bound plus the input rounds."""
    t = tracker(shape, deadline=400.0, can_answer=can_answer)
    now = 0.0
    steps = 0
    try:
        view = read_task(first, shape, max_echo_bytes=64)
    except ServerAnswered as error:  # an unusable handle ends before any tracker
        assert error.reason == "malformed_task"
        view = None
    try:
        if resume or view is None:
            step: Any = t.resumed("t-1", now=now)
        else:
            step = t.created(view, now=now)
        for kind, value, later, answers in events:
            steps += 1
            assert steps <= LIMITS.max_task_polls + 2 * LIMITS.max_call_attempts + 8
            assert isinstance(step, Poll | AskInput | SendUpdate | FetchResult | Cancel | Deliver)
            assert t.polls <= LIMITS.max_task_polls
            if isinstance(step, Deliver):
                assert t.done
                return
            if isinstance(step, Poll):
                assert now <= step.at <= t.deadline
                now = step.at
            if kind == "cancel" and not isinstance(step, Cancel):
                step = t.cancel(ConnectionFailed("caller gave up", cause="client_closed"))
                continue
            match step:
                case Poll() | FetchResult():
                    if kind == "notify":
                        t.notified(value, now=now)
                        continue
                    if kind == "error":
                        t.failed({"code": -32602, "message": "gone"}, method="tasks/get")
                    if isinstance(step, FetchResult):
                        step = t.fetched(value, now=now)
                    else:
                        step = t.polled(value, now=now)
                case AskInput():
                    step = t.answered(answers, now=now + later)
                    now += later
                case SendUpdate():
                    step = t.updated(value, now=now)
                case Cancel():
                    t.cancelled(value if kind == "poll" else None)
                case _:  # pragma: no cover - Deliver returned above
                    raise AssertionError(step)
    except McpError as error:
        assert isinstance(error, ServerAnswered | ConnectionFailed)
        assert t.done
        if isinstance(error, ConnectionFailed):
            assert error.cause in ("timeout", "client_closed")
        else:
            assert error.reason
    assert t.polls <= LIMITS.max_task_polls
    assert not math.isnan(now)
