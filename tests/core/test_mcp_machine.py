"""The machine's own tables and snapshot, and the corners of its composed parts.

The phase table (``sansmcp.core.mcp.state``) and the era table
(``sansmcp.core.mcp.session``) are checked both ways: every move the machine makes
over whole work items is in the table and every entry is used; a move the table
does not list is a ``LocalProtocolError``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from sansmcp.core.errors import ConnectionFailed, LocalProtocolError
from sansmcp.core.http import DataReceived, ExchangeFailed, HttpRequest, header_value
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import (
    Closed,
    Connected,
    ConnSettings,
    InputRequired,
    MachineState,
    McpMachine,
    Phase,
    StartExchange,
    ToolCalled,
    ToolsListed,
)
from sansmcp.core.mcp.session import ERA_TRANSITIONS, Era, Session
from sansmcp.core.mcp.state import PHASE_TRANSITIONS, check_phase
from sansmcp.core.url import parse_endpoint

from .fakemcp import URL, Driver, FakeServer, Response, error, json_response, result, sse_response

LEGACY = "2025-11-25"
ELICIT = {"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {"m": 2}}
ACCEPT = {"request": {"action": "accept"}}


def settings(**kwargs: Any) -> ConnSettings:
    return ConnSettings(endpoint=parse_endpoint(URL), **kwargs)


def listening(server: FakeServer) -> Driver:
    """A legacy session whose embedder answers input: its GET stream open and silent."""
    server.overrides.setdefault("GET", lambda req, body: sse_response(end=False))
    driver = Driver(
        server,
        settings=settings(capabilities={"elicitation": {}}),
        input_handler=lambda requests: ACCEPT,
    )
    driver.ok(driver.connect())
    return driver


def get_stream(driver: Driver) -> StartExchange:
    (get,) = [s for s in driver.started if s.request.method == b"GET"]
    return get


def send_on(driver: Driver, exchange_id: int, message: Any) -> None:
    data = b"data: " + json.dumps(message).encode() + b"\n\n"
    driver.feed(DataReceived(exchange_id=exchange_id, data=data))


# ---------------------------------------------------------------- the phase table


def test_check_phase_is_the_table() -> None:
    for current, new in itertools.product(Phase, Phase):
        if new in PHASE_TRANSITIONS[current]:
            assert check_phase(current, new) is new
        else:
            with pytest.raises(LocalProtocolError, match=f"from {current.name} to {new.name}"):
                check_phase(current, new)


def test_every_phase_move_of_whole_work_items_is_in_the_table_and_every_entry_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken: set[tuple[Phase, Phase]] = set()
    enter = McpMachine._enter

    def recording(machine: McpMachine, phase: Phase) -> None:
        before = machine.state.phase
        enter(machine, phase)  # raises for a move outside the table
        taken.add((before, phase))

    monkeypatch.setattr(McpMachine, "_enter", recording)
    for server in (FakeServer(), FakeServer(modern=False, legacy=LEGACY, sse=True)):
        driver = Driver(server)
        driver.ok(driver.connect())
        driver.ok(driver.list_tools())
        driver.ok(driver.call("echo"))
        assert isinstance(driver.close(), Closed)
    # a close while an operation runs ends the operation first
    silent = FakeServer()
    driver = Driver(silent)
    driver.ok(driver.connect())
    silent.overrides["tools/list"] = lambda req, body: None
    driver.machine.list_tools(now=0.0)
    assert isinstance(driver.close(), Closed)
    table = {(a, b) for a, nexts in PHASE_TRANSITIONS.items() for b in nexts}
    assert taken == table


def test_a_move_outside_the_table_leaves_the_phase_as_it_was() -> None:
    driver = Driver(FakeServer())
    driver.machine.connect(now=0.0)
    with pytest.raises(LocalProtocolError, match="from RUNNING to CLOSING"):
        driver.machine._enter(Phase.CLOSING)
    assert driver.machine.state.phase is Phase.RUNNING
    assert isinstance(driver.pump(), Connected)


def test_busy_is_the_phase() -> None:
    driver = Driver(FakeServer())
    assert not driver.machine.busy and driver.machine.state.phase is Phase.IDLE
    driver.machine.connect(now=0.0)
    assert driver.machine.busy and driver.machine.state.phase is Phase.RUNNING
    with pytest.raises(LocalProtocolError, match="already running"):
        driver.machine.connect(now=0.0)


# ---------------------------------------------------------------- the era table


def test_session_moves_are_the_table() -> None:
    for current, new in itertools.product(Era, Era):
        session = Session()
        session.era = current
        if new in ERA_TRANSITIONS[current]:
            session.move(new)
            assert session.era is new
        else:
            with pytest.raises(LocalProtocolError, match=f"from {current.name} to {new.name}"):
                session.move(new)
            assert session.era is current


def test_every_era_move_of_the_negotiations_is_in_the_table_and_every_entry_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken: set[tuple[Era, Era]] = set()
    move = Session.move

    def recording(session: Session, era: Era) -> None:
        before = session.era
        move(session, era)
        taken.add((before, era))

    monkeypatch.setattr(Session, "move", recording)
    # modern by probe, then by hint; legacy by probe; a reconnect of each
    for server, hint in ((FakeServer(), None), (FakeServer(), "2026-07-28")):
        driver = Driver(server, settings=settings(era_hint=hint))
        driver.ok(driver.connect())
        driver.ok(driver.connect())
    legacy = FakeServer(modern=False, legacy=LEGACY)
    driver = Driver(legacy)
    driver.ok(driver.connect())
    legacy.sessions.clear()  # the server expires the session: re-initialize from LEGACY
    driver.ok(driver.list_tools())
    driver.ok(driver.connect())
    # an initialize answered with another version the server supports: initialized again
    retry = FakeServer(modern=False, legacy="2025-06-18")
    asked: list[str] = []

    def initialize(req: HttpRequest, body: Any) -> Response | None:
        asked.append(body["params"]["protocolVersion"])
        if body["params"]["protocolVersion"] != "2025-06-18":
            return json_response(error(body["id"], -32602, "no", {"supported": ["2025-06-18"]}))
        return retry.default(req, body)

    retry.overrides["initialize"] = initialize
    driver = Driver(retry)
    driver.ok(driver.connect())
    assert asked == [LEGACY, "2025-06-18"]
    # an initialize that fails leaves INITIALIZING; the next connect starts over
    broken = FakeServer(modern=False, legacy=LEGACY)
    broken.overrides["initialize"] = lambda req, body: Response(status=500)
    driver = Driver(broken)
    driver.failure(driver.connect())
    driver.failure(driver.connect())
    table = {(a, b) for a, nexts in ERA_TRANSITIONS.items() for b in nexts}
    assert taken == table


# ---------------------------------------------------------------- the state snapshot


def snapshots(driver: Driver) -> list[MachineState]:
    """The machine's state each time it starts an exchange (the driver's handler runs)."""
    taken: list[MachineState] = []
    handler = driver.handler

    def snapshot(request: HttpRequest) -> Response | None:
        taken.append(driver.machine.state)
        return handler(request)

    driver.handler = snapshot
    return taken


def test_state_across_a_modern_work_item() -> None:
    driver = Driver(FakeServer())
    taken = snapshots(driver)
    idle = driver.machine.state
    assert idle == MachineState(
        phase=Phase.IDLE,
        era=Era.UNKNOWN,
        protocol_version=None,
        session_id=False,
        op_bound=None,
        op_deadline=None,
        exchanges=(),
        held_answer=False,
        listening=False,
        listen_opens=0,
        pending_asks=0,
        bytes_received=0,
        responses_received=0,
        exhausted=None,
    )
    driver.ok(driver.connect())
    driver.ok(driver.list_tools())
    driver.ok(driver.call("echo"))
    assert isinstance(driver.close(), Closed)
    discover, listing, call = taken
    assert discover.phase is Phase.RUNNING and discover.era is Era.UNKNOWN
    assert discover.op_bound == "connect_timeout"
    assert discover.op_deadline == Limits().connect_timeout
    assert discover.exchanges == (("op", 1),)
    assert listing.era is Era.MODERN and listing.protocol_version == "2026-07-28"
    assert listing.op_bound == "list_timeout" and listing.responses_received == 1
    assert call.op_bound == "call_timeout" and not call.session_id
    end = driver.machine.state
    assert end.phase is Phase.IDLE and end.exchanges == () and end.op_bound is None
    assert end.responses_received == 3 == driver.machine.responses_received
    assert end.bytes_received == driver.fed == driver.machine.bytes_received
    assert driver.machine.session_id is None


def test_state_across_a_legacy_work_item_with_its_standalone_stream() -> None:
    server = FakeServer(modern=False, legacy=LEGACY, sse=True)
    driver = listening(server)
    connected = driver.machine.state
    assert connected.phase is Phase.IDLE and connected.era is Era.LEGACY
    assert connected.protocol_version == LEGACY and connected.session_id
    assert connected.listening and connected.exchanges == (("listen", 1),)
    assert driver.machine.session_id == b"session-1"
    taken = snapshots(driver)
    get = get_stream(driver)

    def call(req: HttpRequest, body: Any) -> Response:
        send_on(driver, get.exchange_id, ELICIT)  # asked on the stream while the call runs
        return sse_response(result(body["id"], {"content": []}), end=False)

    server.overrides["tools/call"] = call
    driver.ok(driver.call("echo"))
    calling, answer = taken
    assert calling.phase is Phase.RUNNING and calling.op_bound == "call_timeout"
    assert dict(calling.exchanges) == {"op": 1, "listen": 1}
    # the answer to the server's request goes out while the call's answer is held
    assert answer.held_answer
    assert dict(answer.exchanges) == {"side": 1, "drain": 1, "listen": 1}
    assert answer.pending_asks == 0
    after = driver.machine.state
    assert after.phase is Phase.IDLE and not after.held_answer and after.listening
    assert isinstance(driver.close(), Closed)
    closed = driver.machine.state
    assert closed.phase is Phase.IDLE and not closed.session_id and not closed.listening
    assert closed.era is Era.LEGACY and closed.listen_opens == 0


def test_state_names_the_spent_budget() -> None:
    driver = Driver(FakeServer(), limits=Limits(max_responses=1))
    driver.ok(driver.connect())
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.bound == "max_responses"
    assert driver.machine.state.exhausted == "max_responses"


# ---------------------------------------------------------------- corners of the parts


def test_an_event_for_an_exchange_the_machine_does_not_know_is_ignored() -> None:
    driver = Driver(FakeServer())
    driver.ok(driver.connect())
    before = driver.machine.state
    driver.machine.receive(DataReceived(exchange_id=999, data=b"x" * 100), now=0.0)
    assert driver.machine.next_output() is None and driver.machine.state == before


def test_a_backoff_that_is_already_due_does_not_wait() -> None:
    """A jitter of -0.5 makes the delay 0: the call is sent again without a timer."""
    server = FakeServer()
    calls: list[Any] = []

    def call(req: HttpRequest, body: Any) -> Response | None:
        calls.append(body)
        if len(calls) == 1:
            return json_response(
                result(body["id"], {"resultType": "input_required", "requestState": "s"})
            )
        return server.default(req, body)

    server.overrides["tools/call"] = call
    driver = Driver(server, jitter=lambda: -0.5)
    driver.ok(driver.connect())
    assert isinstance(driver.ok(driver.call("echo")), ToolCalled)
    assert driver.now == 0.0 and calls[1]["params"]["requestState"] == "s"


def test_a_server_request_from_the_standalone_stream_outlives_the_operation() -> None:
    """An operation's end drops its own asks, not those of the session's stream."""
    server = FakeServer(modern=False, legacy=LEGACY)
    driver = listening(server)
    get = get_stream(driver)
    machine = driver.machine
    machine.list_tools(now=0.0)
    start = driver.pending()
    assert isinstance(start, StartExchange)
    send_on(driver, get.exchange_id, ELICIT)
    ask = driver.pending()
    assert isinstance(ask, InputRequired) and ask.server_request
    driver.deliver(start.exchange_id, server(start.request) or Response())
    assert isinstance(driver.pending(), ToolsListed)
    assert machine.wanted(ask) and machine.state.pending_asks == 1
    machine.answer_input(ask.input_id, ACCEPT, now=0.0)
    answer = driver.pending()
    assert isinstance(answer, StartExchange)
    assert json.loads(answer.request.body) == {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {"action": "accept"},
    }


def test_a_failed_answer_to_a_server_request_is_forgotten() -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    driver = listening(server)
    get = get_stream(driver)
    send_on(driver, get.exchange_id, {"jsonrpc": "2.0", "id": "p", "method": "ping"})
    answer = driver.pending()
    assert isinstance(answer, StartExchange)
    reset = ConnectionFailed("reset", cause="reset")
    driver.feed(ExchangeFailed(exchange_id=answer.exchange_id, error=reset))
    assert driver.pending() is None
    state = driver.machine.state
    assert state.phase is Phase.IDLE and state.exchanges == (("listen", 1),)


def test_notifications_on_the_standalone_stream_are_ignored() -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    driver = listening(server)
    get = get_stream(driver)
    for message in (
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {}},
        [{"jsonrpc": "2.0", "id": 1, "method": 5}, "text", {"jsonrpc": "2.0", "id": 2}],
    ):
        send_on(driver, get.exchange_id, message)
    assert driver.pending() is None and driver.machine.state.listening


@pytest.mark.parametrize("supported", [[LEGACY], ["1999-01-01"], None])
def test_an_initialize_error_naming_no_other_version_is_the_error(supported: Any) -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    server.overrides["initialize"] = lambda req, body: json_response(
        error(body["id"], -32602, "unsupported", {"supported": supported}), 400
    )
    driver = Driver(server)
    failure = driver.failure(driver.connect())
    assert getattr(failure, "reason", None) == "jsonrpc_error"
    assert driver.methods().count("initialize") == 1


def test_a_legacy_session_without_a_session_id_sends_its_version_only() -> None:
    server = FakeServer(modern=False, legacy=LEGACY, session=None)
    driver = Driver(server)
    driver.ok(driver.connect())
    driver.ok(driver.list_tools())
    listing = server.requests[-1]
    assert header_value(listing.headers, b"mcp-protocol-version") == LEGACY.encode()
    assert header_value(listing.headers, b"mcp-session-id") is None
    assert not driver.machine.state.session_id


@pytest.mark.parametrize("body", [b"{", b"[1, 2", b"\xff"])
def test_an_unparsable_json_answer_is_not_jsonrpc(body: bytes) -> None:
    server = FakeServer()
    server.overrides["tools/list"] = lambda req, _: Response(
        headers=[(b"content-type", b"application/json")], chunks=[body]
    )
    driver = Driver(server)
    driver.ok(driver.connect())
    failure = driver.failure(driver.list_tools())
    assert isinstance(failure, ConnectionFailed) and failure.cause == "not_jsonrpc"


def test_a_held_answer_is_released_when_its_stream_fails() -> None:
    server = FakeServer(sse=True)
    driver = Driver(server)
    driver.ok(driver.connect())
    reset = ConnectionFailed("reset", cause="reset")

    def listing(req: HttpRequest, body: Any) -> Response:
        answer = server.default(req, body)
        assert answer is not None
        answer.end = False
        answer.fail = reset
        return answer

    server.overrides["tools/list"] = listing
    listed = driver.ok(driver.list_tools())
    assert isinstance(listed, ToolsListed) and listed.tools[0].name == "echo"
    assert driver.now == 0.0  # released by the failure, not by the held answer's timer


def _ids() -> Iterator[int]:
    return itertools.count(100)


def test_injected_ids_number_requests_and_exchanges() -> None:
    server = FakeServer()
    driver = Driver(server, ids=_ids(), exchange_ids=itertools.count(50))
    driver.ok(driver.connect())
    assert server.bodies[0]["id"] == 100 and driver.started[0].exchange_id == 50


def test_protocol_versions_naming_none_sansmcp_speaks_are_a_caller_error() -> None:
    from sansmcp.core.config import Config, conn_settings
    from sansmcp.core.errors import CallerError

    for make in (
        lambda: McpMachine(settings(protocol_versions=("1999-01-01",))),
        lambda: conn_settings(
            Config(url=URL, protocol_versions=["1999-01-01"]),
            client_info=None,
            capabilities=None,
            era_hint=None,
        ),
    ):
        with pytest.raises(CallerError, match=r"protocol_versions \('1999-01-01',\) names no"):
            make()


@pytest.mark.parametrize("status", [500, 502])
def test_a_probe_answered_with_an_error_page_is_an_http_status(status: int) -> None:
    server = FakeServer()
    server.overrides["server/discover"] = lambda req, body: Response(status=status)
    driver = Driver(server)
    failure = driver.failure(driver.connect())
    assert isinstance(failure, ConnectionFailed) and failure.cause == "http_status"
    assert failure.status == status and driver.methods() == ["server/discover"]
