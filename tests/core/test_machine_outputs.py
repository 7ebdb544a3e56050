"""The machine's outputs and the driver: one contract, ``McpMachine.outputs``.

A driver pops a machine's outputs from ``outputs`` (no ``next_output`` call per output),
whatever the Conn; a Conn with ``Config.oauth`` has an authorizer in front of its
machine (composed, never a subclass), and its outputs -- the authorizer's own, and the
machine's, screened -- come through the authorizer's ``next_output``.
"""

from __future__ import annotations

from typing import Any

import pytest

from sansmcp import Config
from sansmcp.core import driver as driver_module
from sansmcp.core.conn import ConnRecord
from sansmcp.core.driver import ConnView
from sansmcp.core.mcp import ConnSettings, McpMachine, Output, ToolCalled
from sansmcp.core.oauth.store import OAuth
from sansmcp.core.results import CallResult
from sansmcp.core.url import parse_endpoint

from .oauth_world import REDIRECT, Runner, World
from .test_driver import URL, make


def settings() -> ConnSettings:
    return ConnSettings(endpoint=parse_endpoint(URL))


class Filtering:
    """An authorizer in front of ``machine``: records what it hands over, and puts its own
    mark on a call's result (a stand-in for what an OAuthMachine does)."""

    def __init__(self, machine: McpMachine) -> None:
        self.machine = machine
        self.handed: list[Output] = []

    def __getattr__(self, name: str) -> Any:  # the operations, events and timers
        return getattr(self.machine, name)

    def next_output(self) -> Output | None:
        output = self.machine.next_output()
        if output is not None:
            self.handed.append(output)
        if isinstance(output, ToolCalled):
            marked = CallResult(content=[], is_error=False, structured_content=b'"filtered"')
            return ToolCalled(result=marked)
        return output


def test_a_machine_is_drained_directly() -> None:
    machine = McpMachine(settings())
    deque = machine.outputs
    assert deque is machine._outputs  # the deque next_output pops
    conn = ConnRecord(ConnView(1, machine))
    assert conn.outputs is deque and conn.auth is None and conn.front is machine


def test_an_oauth_conns_outputs_come_through_its_authorizer() -> None:
    auth = Runner(World()).machine
    assert not isinstance(auth, McpMachine)  # composed: no McpMachine subclass
    conn = ConnRecord(ConnView(1, auth.machine, auth))
    assert conn.auth is auth and conn.front is auth and conn.machine is auth.machine


def test_the_driver_hands_an_authorizers_outputs_through_its_next_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the driver builds the authorizer of a Config.oauth Conn with this function
    monkeypatch.setattr(driver_module, "_authorizer", lambda _d, machine, _c: Filtering(machine))
    net = make()
    view = net.driver.open(Config(url=URL, oauth=OAuth(redirect_uri=REDIRECT)), now=net.now)
    assert isinstance(view.auth, Filtering)
    assert net.ok("connect", view) is None
    called = net.ok("call_tool", view, "echo", b'{"text": "hi"}')
    assert isinstance(called, CallResult) and called.structured_content == b'"filtered"'
    handed = [type(output).__name__ for output in view.auth.handed]
    assert "Connected" in handed and "ToolCalled" in handed and "StartExchange" in handed
