"""``_common.Steps``: the one loop every runtime performs an operation's steps with
(``ConnBase._run`` with ``await``, the blocking adapter's ``Turns._perform``)."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from sansmcp.io_adapters._common import Steps


def operation(log: list[object]) -> Generator[str, object, str]:
    log.append((yield "first"))
    try:
        yield "fails"
    except ValueError as exc:
        log.append(exc.args)
    log.append((yield "last"))
    return "value"


def test_each_step_gets_its_reply_or_its_failure_thrown_in_and_the_value_is_kept() -> None:
    log: list[object] = []
    steps = Steps(operation(log))
    performed = []
    for step in steps:
        performed.append(step)
        if step == "fails":
            steps.fail(ValueError("performing it raised"))
        else:
            steps.reply = f"reply to {step}"
    assert performed == ["first", "fails", "last"]
    assert log == ["reply to first", ("performing it raised",), "reply to last"]
    assert steps.value == "value"


def test_a_failure_is_thrown_once_in_place_of_the_reply() -> None:
    log: list[object] = []
    steps = Steps(operation(log))
    assert next(steps) == "first"
    steps.reply = "one"
    assert next(steps) == "fails"  # "one" sent
    assert steps.reply is None  # not kept once sent
    steps.fail(ValueError("once"))
    assert next(steps) == "last"  # thrown (not "one" sent again), caught by the operation
    steps.reply = "two"
    assert next(steps, "ended") == "ended"  # "two" sent; the operation returns
    assert log == ["one", ("once",), "two"] and steps.value == "value"


def test_what_the_operation_raises_propagates_from_the_iteration() -> None:
    steps = Steps(operation([]))
    with pytest.raises(KeyboardInterrupt):  # not caught by the operation: it propagates
        for step in steps:
            if step == "fails":
                steps.fail(KeyboardInterrupt())
    assert steps.value is None  # it returned nothing
