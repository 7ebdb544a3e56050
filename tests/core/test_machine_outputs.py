"""The machine's outputs and the driver: one contract, ``McpMachine.direct_outputs``.

A driver pops a machine's outputs from ``direct_outputs`` (no ``next_output`` call per
output) exactly when the machine's ``next_output`` is ``McpMachine``'s own, and asks
``next_output`` otherwise: a subclass that keeps it is drained directly, one that overrides
it (an ``OAuthMachine`` filters and adds outputs) is always asked, whatever its type.
"""

from __future__ import annotations

from typing import Any

import pytest

from sansmcp import Config
from sansmcp.core import driver as driver_module
from sansmcp.core.driver import ConnView, _Conn
from sansmcp.core.mcp import ConnSettings, McpMachine, Output, ToolCalled
from sansmcp.core.results import CallResult
from sansmcp.core.url import parse_endpoint

from .oauth_world import Runner, World
from .test_driver import URL, make


def settings() -> ConnSettings:
    return ConnSettings(endpoint=parse_endpoint(URL))


class Kept(McpMachine):
    """A subclass that keeps ``next_output``: nothing to filter, so nothing to ask."""


class Filtering(McpMachine):
    """A subclass that overrides ``next_output``: records what it hands over, and puts its
    own mark on a call's result (a stand-in for what an OAuthMachine does)."""

    def __init__(self, settings: ConnSettings, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.handed: list[Output] = []

    def next_output(self) -> Any:
        output = McpMachine.next_output(self)
        if output is not None:
            self.handed.append(output)
        if isinstance(output, ToolCalled):
            marked = CallResult(content=[], is_error=False, structured_content=b'"filtered"')
            return ToolCalled(result=marked)
        return output


def test_a_plain_machine_and_a_subclass_that_keeps_next_output_are_drained_directly() -> None:
    for machine in (McpMachine(settings()), Kept(settings())):
        deque = machine.direct_outputs
        assert deque is not None and deque is machine._outputs  # the deque next_output pops
        assert _Conn(ConnView(1, machine)).outputs is deque


def test_a_machine_that_overrides_next_output_is_always_asked() -> None:
    oauth = Runner(World()).machine
    for machine in (Filtering(settings()), oauth):
        assert machine.direct_outputs is None
        assert _Conn(ConnView(1, machine)).outputs is None


def test_the_driver_hands_a_filtering_machines_outputs_through_its_next_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the driver builds this class for a plain Config (its name in the driver's module)
    monkeypatch.setattr(driver_module, "McpMachine", Filtering)
    net = make()
    view = net.driver.open(Config(url=URL), now=net.now)
    assert isinstance(view.machine, Filtering)
    assert net.ok("connect", view) is None
    called = net.ok("call_tool", view, "echo", b'{"text": "hi"}')
    assert isinstance(called, CallResult) and called.structured_content == b'"filtered"'
    handed = [type(output).__name__ for output in view.machine.handed]
    assert "Connected" in handed and "ToolCalled" in handed and "StartExchange" in handed
