"""The pure decisions of the MCP machine (``sansmcp.core.mcp.rules``), by table."""

from __future__ import annotations

from typing import Any

import pytest

from sansmcp.core.errors import CallerError, ConnectionFailed, ServerAnswered, Unauthorized
from sansmcp.core.mcp import rules
from sansmcp.core.mcp.rules import AskInput, Backoff, Complete, Head

JSON = ((b"content-type", b"application/json"),)
SSE = ((b"content-type", b"text/event-stream; charset=utf-8"),)
PROBLEM = ((b"content-type", b"application/problem+json"),)
HTML = ((b"content-type", b"text/html"),)


@pytest.mark.parametrize(
    ("status", "headers", "expects_reply", "head"),
    [
        (301, (), True, Head.REDIRECT),
        (307, JSON, False, Head.REDIRECT),
        (401, JSON, True, Head.UNAUTHORIZED),
        (403, (), False, Head.UNAUTHORIZED),
        (202, (), False, Head.OTHER),  # a notification's answer: no body read
        (200, SSE, True, Head.SSE),
        (200, JSON, True, Head.JSON),
        (400, PROBLEM, True, Head.JSON),  # an error status may carry a JSON-RPC error
        (500, SSE, True, Head.OTHER),  # an event stream only on 2xx
        (200, HTML, True, Head.UNUSABLE),
        (204, (), True, Head.UNUSABLE),
        (404, HTML, True, Head.OTHER),
    ],
)
def test_classify_head(status: int, headers: Any, expects_reply: bool, head: Head) -> None:
    assert rules.classify_head(status, headers, expects_reply=expects_reply) is head


@pytest.mark.parametrize(
    ("status", "headers", "accepted"),
    [(200, SSE, True), (200, JSON, False), (405, SSE, False), (409, (), False)],
)
def test_listen_accepted(status: int, headers: Any, accepted: bool) -> None:
    assert rules.listen_accepted(status, headers) is accepted


def test_head_errors_name_what_the_server_sent() -> None:
    redirect = rules.redirect_error(302, ((b"location", b"https://elsewhere/" + b"x" * 600),))
    assert redirect.cause == "redirect" and redirect.status == 302
    assert redirect.location is not None and len(redirect.location) == 512
    assert rules.redirect_error(303, ()).location is None
    denied = rules.unauthorized_error(401, ((b"www-authenticate", b'Bearer realm="r"'),))
    assert isinstance(denied, Unauthorized) and denied.challenges[0][0] == "bearer"
    bare = rules.unauthorized_error(403, ())
    assert bare.www_authenticate is None and bare.challenges == [] and "(" not in str(bare)
    unusable = rules.unusable_head_error(200, HTML)
    assert unusable.cause == "not_jsonrpc" and "'text/html'" in str(unusable)
    assert "'none'" in str(rules.unusable_head_error(200, ()))


@pytest.mark.parametrize(
    ("cause", "had_head", "refusals", "resend"),
    [
        ("refused", False, 0, True),
        ("refused", False, 2, True),
        ("refused", False, 3, False),  # the limit
        ("refused", True, 0, False),  # the server processed it
        ("reset", False, 0, False),
    ],
)
def test_resend_refused(cause: str, had_head: bool, refusals: int, resend: bool) -> None:
    assert rules.resend_refused(cause, had_head, refusals, 3) is resend


@pytest.mark.parametrize(
    ("retries", "progressed", "after"),
    [(0, False, 1), (2, False, 3), (3, True, 0), (0, True, 0)],
)
def test_count_break(retries: int, progressed: bool, after: int) -> None:
    assert rules.count_break(retries, progressed, 3) == after


def test_count_break_past_the_limit_fails() -> None:
    with pytest.raises(ConnectionFailed) as caught:
        rules.count_break(3, False, 3)
    assert caught.value.bound == "max_stream_retries" and caught.value.observed == 4


def test_timeout_and_server_error() -> None:
    late = rules.timeout("call_timeout", 2.5)
    assert late.cause == "timeout" and late.limit == 2.5 and "2.5 s" in str(late)
    error = rules.server_error({"error": {"code": -1, "message": "m" * 300, "data": [1]}})
    assert error.code == -1 and error.data == [1] and len(str(error)) < 300
    assert rules.server_error({"error": {"code": 5, "message": "x"}}).data is None


@pytest.mark.parametrize(
    ("result", "allow_input", "kind"),
    [
        ({}, False, "complete"),
        ({"resultType": "complete"}, False, "complete"),
        ({"resultType": "input_required"}, True, "input_required"),
        ({"resultType": "input_required"}, False, None),
        ({"resultType": "later"}, True, None),
    ],
)
def test_result_kind(result: dict[str, Any], allow_input: bool, kind: str | None) -> None:
    if kind is None:
        with pytest.raises(ServerAnswered) as caught:
            rules.result_kind(result, allow_input=allow_input)
        assert caught.value.reason == "unknown_result_type"
    else:
        assert rules.result_kind(result, allow_input=allow_input) == kind


@pytest.mark.parametrize(
    ("message", "ok"),
    [
        (None, False),
        ({"error": {}}, False),
        ({"result": []}, False),
        ({"result": {"protocolVersion": "2099-01-01"}}, False),
        ({"result": {"protocolVersion": "2025-06-18"}}, True),
    ],
)
def test_initialize_result(message: Any, ok: bool) -> None:
    assert rules.initialize_result(message, ["2025-11-25", "2025-06-18"]) is ok


@pytest.mark.parametrize(
    ("cursor", "seen", "outcome"),
    [
        (None, set(), None),
        ("b", {"a"}, "b"),
        ("é" * 4, set(), "é" * 4),  # 8 UTF-8 bytes: exactly the limit
        ("é" * 5, set(), "oversized_cursor"),
        ("\ud800" * 3, set(), "oversized_cursor"),  # a lone surrogate counts 3 bytes
        ("a", {"a"}, "cursor_cycle"),
        (7, set(), "malformed_result"),
        ("", set(), ""),
    ],
)
def test_advance_cursor(cursor: object, seen: set[str], outcome: str | None) -> None:
    before = set(seen)
    if outcome in ("oversized_cursor", "cursor_cycle", "malformed_result"):
        with pytest.raises(ServerAnswered) as caught:
            rules.advance_cursor(cursor, seen, 2, 8)
        assert caught.value.reason == outcome
        assert seen == before
    else:
        assert rules.advance_cursor(cursor, seen, 2, 8) == outcome
        assert seen == (before if cursor is None else before | {cursor})


@pytest.mark.parametrize(
    ("ttl", "scope", "page", "merged"),
    [
        (None, None, {}, (0, None)),
        (None, None, {"ttlMs": 500, "cacheScope": "public"}, (500, "public")),
        (500, "public", {"ttlMs": 200}, (200, "public")),
        (200, "public", {"ttlMs": 900, "cacheScope": "private"}, (200, "private")),
        (200, "private", {"ttlMs": 100, "cacheScope": "public"}, (100, "private")),
        (300, None, {"ttlMs": -5}, (0, None)),
        (300, None, {"ttlMs": True}, (0, None)),  # a bool is not an int here
        (300, None, {"ttlMs": 1.5, "cacheScope": 3}, (0, None)),
    ],
)
def test_merge_cache(
    ttl: int | None, scope: str | None, page: dict[str, Any], merged: tuple[int, str | None]
) -> None:
    assert rules.merge_cache(ttl, scope, page) == merged


ELICIT = {"e": {"method": "elicitation/create", "params": {}}}


@pytest.mark.parametrize(
    ("result", "can_answer", "step"),
    [
        ({"resultType": "complete"}, False, Complete()),
        ({}, True, Complete()),
        ({"resultType": "input_required", "inputRequests": ELICIT}, True, AskInput(ELICIT, None)),
        (
            {"resultType": "input_required", "inputRequests": ELICIT, "requestState": "s"},
            True,
            AskInput(ELICIT, "s"),
        ),
        ({"resultType": "input_required", "requestState": "s"}, False, Backoff("s")),
        ({"resultType": "input_required", "inputRequests": {}}, False, Backoff(None)),
        (
            {"resultType": "input_required", "inputRequests": {}, "requestState": "s"},
            True,
            Backoff("s"),
        ),
        ({"resultType": "input_required"}, True, "malformed_result"),
        ({"resultType": "input_required", "requestState": 5}, True, "bad_request_state"),
        ({"resultType": "input_required", "requestState": "x" * 9}, True, "bad_request_state"),
        ({"resultType": "input_required", "inputRequests": [1]}, True, "malformed_result"),
        ({"resultType": "input_required", "inputRequests": {"a": 1}}, True, "malformed_result"),
        (
            {"resultType": "input_required", "inputRequests": {"a": {"method": 1}}},
            True,
            "malformed_result",
        ),
        ({"resultType": "input_required", "inputRequests": ELICIT}, False, "input_required"),
        ({"resultType": "other"}, True, "unknown_result_type"),
    ],
)
def test_next_call_step(result: dict[str, Any], can_answer: bool, step: object) -> None:
    if isinstance(step, str):
        with pytest.raises(ServerAnswered) as caught:
            rules.next_call_step(result, can_answer=can_answer, max_echo_bytes=8)
        assert caught.value.reason == step
    else:
        assert rules.next_call_step(result, can_answer=can_answer, max_echo_bytes=8) == step


def test_input_required_without_a_handler_names_the_methods() -> None:
    requests = {"a": {"method": "sampling/createMessage"}, "b": {"method": "elicitation/create"}}
    with pytest.raises(ServerAnswered) as caught:
        rules.next_call_step(
            {"resultType": "input_required", "inputRequests": requests},
            can_answer=False,
            max_echo_bytes=8,
        )
    assert "(elicitation/create, sampling/createMessage)" in str(caught.value)
    assert caught.value.data == requests


@pytest.mark.parametrize(
    ("shed", "jitter", "delay"),
    [
        (0, 0.5, 0.05),
        (1, 0.5, 0.1),
        (3, 0.5, 0.4),
        (4, 0.5, 0.5),  # capped
        (30, 0.5, 0.5),
        (0, 0.0, 0.025),
        (4, 0.999, 0.7495),
    ],
)
def test_backoff_delay(shed: int, jitter: float, delay: float) -> None:
    assert rules.backoff_delay(shed, jitter) == pytest.approx(delay)


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ([("k", {})], "must return a mapping"),
        ({"k": {1, 2}}, "cannot be sent"),
        ({1: {"action": "accept"}}, "must have string keys"),
    ],
)
def test_an_input_handlers_answer_is_checked_before_use(answers: object, message: str) -> None:
    with pytest.raises(CallerError, match=message):
        rules.checked_answers(answers)
    assert rules.checked_answers(None) is None
    assert rules.checked_answers({"k": {"action": "accept"}}) == {"k": {"action": "accept"}}
