"""``ConnectionFailed.cause`` and ``ServerAnswered.reason`` are closed sets (issue 11, item 4).

The tables below are written here, from the values callers compare against today; they
must equal the ``Cause`` / ``Reason`` literals, each value must be described in its
class's docstring, and the package must use every value and no other: mypy checks each
call site against the literal; the walks below check that no other constant is passed
(even past a ``type: ignore``) and that no documented value is dead.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sansmcp.core.errors import (
    MAX_MESSAGE_CHARS,
    Cause,
    ConnectionFailed,
    Reason,
    ServerAnswered,
    Unauthorized,
    budget_exceeded,
)

CAUSES = frozenset(
    {
        "dns",
        "refused_address",
        "dial",
        "tls",
        "timeout",
        "budget",
        "framing",
        "reset",
        "refused",
        "redirect",
        "http_status",
        "not_jsonrpc",
        "stream_broken",
        "session_expired",
        "bad_document",
        "client_closed",
        "proxy",
        "store",
    }
)
REASONS = frozenset(
    {
        "jsonrpc_error",
        "unsupported_version",
        "bad_session_id",
        "malformed_result",
        "unknown_result_type",
        "no_usable_content",
        "malformed_structured_content",
        "max_tool_pages",
        "max_tools",
        "oversized_cursor",
        "cursor_cycle",
        "max_call_attempts",
        "bad_request_state",
        "input_required",
        "input_declined",
        "output_schema_mismatch",
        "unusable_output_schema",
        "validation_budget",
        "unexpected_task",
        "malformed_task",
        "task_id_changed",
        "task_transition",
        "task_lost",
        "task_cancelled",
        "task_expired",
        "max_task_polls",
    }
)
PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "sansmcp"


def documented(doc: str | None) -> set[str]:
    """The values of the docstring's bullet list: ``* ``"a"`` / ``"b"`` -- ...``."""
    assert doc is not None
    found: set[str] = set()
    for line in doc.splitlines():
        bullet = re.match(r'\s*\* ((?:``"\w+"``(?: / )?)+) --', line)
        if bullet:
            found.update(re.findall(r'``"(\w+)"``', bullet.group(1)))
    return found


@functools.cache
def modules() -> list[tuple[pathlib.Path, ast.AST]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in PACKAGE.rglob("*.py")]


def passed_constants(keyword: str, constructor: str) -> set[str]:
    """Every constant the package passes as ``keyword=`` to ``constructor`` (both arms of
    a conditional expression too).  A computed value is mypy's to check against the
    literal, not this walk's."""
    values: set[str] = set()
    for _, tree in modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            if getattr(node.func, "id", getattr(node.func, "attr", None)) != constructor:
                continue
            for kw in node.keywords:
                if kw.arg == keyword:
                    value = kw.value
                    arms = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
                    values.update(
                        arm.value
                        for arm in arms
                        if isinstance(arm, ast.Constant) and isinstance(arm.value, str)
                    )
    return values


@functools.cache
def constants_outside_errors() -> frozenset[str]:
    """Every string constant in the package's modules other than ``errors.py``."""
    return frozenset(
        node.value
        for path, tree in modules()
        if path.name != "errors.py" or path.parent.name != "core"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


def test_cause_literal_is_the_table() -> None:
    assert set(get_args(Cause)) == set(CAUSES)
    assert len(get_args(Cause)) == len(CAUSES)


def test_reason_literal_is_the_table() -> None:
    assert set(get_args(Reason)) == set(REASONS)
    assert len(get_args(Reason)) == len(REASONS)


def test_every_cause_is_documented_in_the_class_docstring() -> None:
    assert documented(ConnectionFailed.__doc__) == set(CAUSES)


def test_every_reason_is_documented_in_the_class_docstring() -> None:
    assert documented(ServerAnswered.__doc__) == set(REASONS)


def test_the_package_passes_no_other_cause() -> None:
    assert passed_constants("cause", "ConnectionFailed") <= CAUSES


def test_the_package_passes_no_other_reason() -> None:
    assert passed_constants("reason", "ServerAnswered") <= REASONS


@pytest.mark.parametrize("value", sorted(CAUSES | REASONS))
def test_no_value_is_dead(value: str) -> None:
    # each documented value is raised or compared against somewhere outside errors.py
    assert value in constants_outside_errors()


@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_a_cause_still_compares_as_its_string(cause: Cause) -> None:
    error = ConnectionFailed("m", cause=cause)
    assert error.cause == cause and isinstance(error.cause, str)
    assert f"cause={error.cause}" == f"cause={cause}"


@pytest.mark.parametrize("reason", sorted(REASONS))
def test_a_reason_still_compares_as_its_string(reason: Reason) -> None:
    error = ServerAnswered("m", reason=reason)
    assert error.reason == reason and isinstance(error.reason, str)


def test_budget_exceeded_is_a_budget_cause() -> None:
    error = budget_exceeded("m", "max_header_bytes", 10, 11)
    assert (error.cause, error.bound, error.limit, error.observed) == (
        "budget",
        "max_header_bytes",
        10,
        11,
    )


@given(st.text(max_size=20), st.integers(min_value=0, max_value=3 * MAX_MESSAGE_CHARS))
def test_a_message_is_never_longer_than_its_bound(head: str, length: int) -> None:
    """Whatever a server's text makes a message: at most MAX_MESSAGE_CHARS, the cut said,
    a message within the bound kept to the letter."""
    message = (head + "x" * length)[: len(head) + length]
    for error in (
        ConnectionFailed(message, cause="framing"),
        ServerAnswered(message, reason="malformed_result"),
        Unauthorized(message, status=401),
    ):
        assert len(error.message) <= MAX_MESSAGE_CHARS and str(error) == error.message
        if len(message) <= MAX_MESSAGE_CHARS:
            assert error.message == message
        else:
            assert error.message.startswith(message[:100])
            assert error.message.endswith(f"... ({len(message):,} characters in all)")
