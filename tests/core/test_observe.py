"""Progress, server notifications, log level and request reports in the pure core (issue 14).

The machine against ``fakemcp``'s scripted server: which requests carry a progress token
and a log level, which notifications come out (in order, bounded per request), where
they may arrive (the call's stream, the legacy standalone stream), and the request
reports telemetry maps to spans.  The driver's part -- ``Deliver`` and holding what
comes between operations -- is at the end.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.config import Config, conn_settings
from sansmcp.core.driver import ClientDriver, Deliver, Write
from sansmcp.core.errors import CallerError, ConnectionFailed, ServerAnswered, Unauthorized
from sansmcp.core.http import HttpRequest
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import (
    META_VERSION,
    ConnSettings,
    LogMessage,
    Notification,
    Progress,
    RequestEnded,
    RequestStarted,
    ToolCalled,
)
from sansmcp.core.mcp.notifications import Notices, error_type, notification_of, progress_of
from sansmcp.core.url import parse_endpoint
from tests.tiers import examples

from .fakemcp import (
    URL,
    Driver,
    FakeServer,
    Response,
    error,
    json_response,
    result,
    sse_response,
)

LEGACY = "2025-11-25"


def settings_with(**extra: Any) -> ConnSettings:
    return ConnSettings(endpoint=parse_endpoint(URL), **extra)


def note(method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def progress(token: Any, value: Any, total: Any = None, message: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"progressToken": token, "progress": value}
    if total is not None:
        params["total"] = total
    if message is not None:
        params["message"] = message
    return note("notifications/progress", params)


def call_result(rid: Any, *, is_error: bool = False, modern: bool = True) -> dict[str, Any]:
    value: dict[str, Any] = {"content": [], "isError": is_error}
    if modern:
        value["resultType"] = "complete"
    return result(rid, value)


def streamed_call(*before: Any, modern: bool = True, is_error: bool = False) -> Any:
    """A tools/call override: the notifications ``before`` (a callable gets the request
    id), then the result, on one event stream."""

    def answer(request: HttpRequest, body: Any) -> Response:
        rid = body["id"]
        events = [event(rid) if callable(event) else event for event in before]
        return sse_response(*events, call_result(rid, modern=modern, is_error=is_error))

    return answer


def pcall(driver: Driver) -> Any:
    """Call ``echo`` asking for progress."""
    driver.machine.call_tool("echo", b"{}", now=driver.now, progress=True)
    return driver.pump()


def observations(driver: Driver) -> list[Any]:
    kinds = (Progress, LogMessage, Notification, RequestStarted, RequestEnded)
    return [out for out in driver.outputs if isinstance(out, kinds)]


def bodies(server: FakeServer, method: str) -> list[dict[str, Any]]:
    return [b for b in server.bodies if isinstance(b, dict) and b.get("method") == method]


# ---------------------------------------------------------------- progress


def test_progress_token_is_the_request_id_and_progress_arrives_in_order() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = streamed_call(
        lambda rid: progress(rid, 1, 3, "one"),
        lambda rid: progress(rid + 100, 9),  # another token: not ours
        lambda rid: progress(rid, 2.5),
        lambda rid: progress(rid, "x"),  # not a number: dropped
        lambda rid: progress(rid, 3, "3"),  # a total that is not a number: dropped
        lambda rid: progress(str(rid), 4),  # a string token we never sent
        lambda rid: progress(rid, 10**400, 10**401, 7),  # huge ints, kept as sent
    )
    driver = Driver(server)
    driver.ok(driver.connect())
    driver.ok(pcall(driver))
    call = bodies(server, "tools/call")[-1]
    assert call["params"]["_meta"]["progressToken"] == call["id"]
    assert observations(driver) == [
        Progress(progress=1, total=3, message="one"),
        Progress(progress=2.5, total=None, message=None),
        Progress(progress=10**400, total=10**401, message=None),
    ]


def test_no_token_without_progress_and_progress_then_ignored() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = streamed_call(lambda rid: progress(rid, 1))
    driver = Driver(server)
    driver.ok(driver.connect())
    driver.ok(driver.call("echo"))
    assert "progressToken" not in bodies(server, "tools/call")[-1]["params"]["_meta"]
    assert observations(driver) == []


def test_progress_only_for_tools_call_and_only_while_it_runs() -> None:
    server = FakeServer()
    driver = Driver(server)
    driver.ok(driver.connect())
    driver.ok(pcall(driver))
    notices = driver.machine._t.notices
    assert notices.token is None  # the call ended: nothing is ours any more
    driver.ok(driver.list_tools())
    assert "progressToken" not in bodies(server, "tools/list")[-1]["params"]["_meta"]


def test_notifications_are_delivered_only_when_wanted() -> None:
    events = (
        note("notifications/message", {"level": "info", "logger": "db", "data": {"a": 1}}),
        note("notifications/message", {"level": "loud", "data": 1}),  # no such level
        note("notifications/message", {"level": "info", "logger": 5}),  # a logger not a str
        note("notifications/tools/list_changed"),
        note("notifications/other", [1, 2]),  # params not an object
    )
    quiet = FakeServer()
    quiet.overrides["tools/call"] = streamed_call(*events)
    driver = Driver(quiet)
    driver.ok(driver.connect())
    driver.ok(driver.call("echo"))
    assert observations(driver) == []

    server = FakeServer()
    server.overrides["tools/call"] = streamed_call(*events)
    driver = Driver(server, settings=settings_with(notifications=True))
    driver.ok(driver.connect())
    driver.ok(driver.call("echo"))
    assert observations(driver) == [
        LogMessage(level="info", logger="db", data={"a": 1}),
        Notification(method="notifications/message", params={"level": "loud", "data": 1}),
        Notification(method="notifications/message", params={"level": "info", "logger": 5}),
        Notification(method="notifications/tools/list_changed", params={}),
        Notification(method="notifications/other", params={}),
    ]


def test_max_notifications_per_request_drops_and_counts() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = streamed_call(
        *(lambda rid, i=i: progress(rid, i) for i in range(5)),
        note("notifications/message", {"level": "info", "data": "x"}),
    )
    driver = Driver(
        server, settings=settings_with(notifications=True), limits=Limits(max_notifications=2)
    )
    driver.ok(driver.connect())
    outcome = driver.ok(pcall(driver))
    assert isinstance(outcome, ToolCalled)  # not fatal
    assert observations(driver) == [Progress(progress=i, total=None, message=None) for i in (0, 1)]
    assert driver.machine.notifications_dropped == 4
    # the next request counts afresh
    driver.ok(pcall(driver))
    assert len(observations(driver)) == 4
    assert driver.machine.notifications_dropped == 8


@settings(max_examples=examples(60), deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["progressToken", "progress", "total", "message", "level", "logger", "data"]
        ),
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=3)
        | st.lists(st.integers(), max_size=2),
        max_size=7,
    ),
    st.sampled_from(["notifications/progress", "notifications/message", "x"]),
)
def test_any_params_give_a_typed_observation_or_none(params: dict[str, Any], method: str) -> None:
    outputs: Any = __import__("collections").deque()
    notices = Notices(outputs, limit=10, deliver=True)
    notices.begin(1, 1)
    notices.take({"method": method, "params": params})
    for item in outputs:
        if isinstance(item, Progress):
            assert isinstance(item.progress, int | float) and not isinstance(item.progress, bool)
            assert item.total is None or isinstance(item.total, int | float)
            assert item.message is None or isinstance(item.message, str)
        elif isinstance(item, LogMessage):
            assert item.level in (
                "debug",
                "info",
                "notice",
                "warning",
                "error",
                "critical",
                "alert",
                "emergency",
            )
        else:
            assert isinstance(item, Notification) and item.method == method
    assert len(outputs) <= 1


def test_progress_of_and_notification_of() -> None:
    assert progress_of({"progress": True}) is None
    assert progress_of({"progress": 1, "total": None, "message": 3}) == Progress(
        progress=1, total=None, message=None
    )
    assert notification_of("notifications/message", {"level": "error"}) == LogMessage(
        level="error", logger=None, data=None
    )


# ---------------------------------------------------------------- log level


def test_modern_log_level_goes_in_every_request_meta() -> None:
    server = FakeServer()
    driver = Driver(server, settings=settings_with(log_level="warning"))
    driver.ok(driver.connect())
    driver.ok(driver.call("echo"))
    for body in server.bodies:
        assert body["params"]["_meta"]["io.modelcontextprotocol/logLevel"] == "warning"
    assert bodies(server, "logging/setLevel") == []


def legacy_server(*, logging: bool, set_level: Any = None) -> FakeServer:
    server = FakeServer(modern=False, legacy=LEGACY)
    default = server.default

    def initialize(request: HttpRequest, body: Any) -> Response:
        response = default(request, body)
        assert response is not None
        if logging:
            message = json.loads(response.chunks[0])
            message["result"]["capabilities"]["logging"] = {}
            response.chunks = [json.dumps(message).encode()]
        return response

    server.overrides["initialize"] = initialize
    if set_level is not None:
        server.overrides["logging/setLevel"] = set_level
    else:
        server.overrides["logging/setLevel"] = lambda r, b: json_response(result(b["id"], {}))
    return server


def test_legacy_log_level_one_set_level_per_session_when_the_server_logs() -> None:
    server = legacy_server(logging=True)
    driver = Driver(server, settings=settings_with(log_level="info", protocol_versions=(LEGACY,)))
    driver.ok(driver.connect())
    driver.ok(driver.call("echo"))
    driver.ok(driver.call("echo"))
    assert [b["params"] for b in bodies(server, "logging/setLevel")] == [{"level": "info"}]
    # initialize, initialized, setLevel, two calls (no handler, no callback: no GET)
    assert driver.machine.responses_received == 5


def test_legacy_set_level_error_is_not_fatal_and_absent_capability_sends_none() -> None:
    server = legacy_server(
        logging=True, set_level=lambda r, b: json_response(error(b["id"], -32602, "no"))
    )
    driver = Driver(server, settings=settings_with(log_level="debug", protocol_versions=(LEGACY,)))
    driver.ok(driver.connect())
    assert len(bodies(server, "logging/setLevel")) == 1
    quiet = legacy_server(logging=False)
    driver = Driver(quiet, settings=settings_with(log_level="debug", protocol_versions=(LEGACY,)))
    driver.ok(driver.connect())
    assert bodies(quiet, "logging/setLevel") == []
    unset = legacy_server(logging=True)
    driver = Driver(unset, settings=settings_with(protocol_versions=(LEGACY,)))
    driver.ok(driver.connect())
    assert bodies(unset, "logging/setLevel") == []


def test_config_checks_the_callback_and_the_level() -> None:
    with pytest.raises(CallerError, match="on_notification"):
        conn_settings(
            Config(url=URL, on_notification=3), client_info=None, capabilities=None, era_hint=None
        )  # type: ignore[arg-type]
    with pytest.raises(CallerError, match="log level"):
        conn_settings(
            Config(url=URL, log_level="loud"), client_info=None, capabilities=None, era_hint=None
        )
    made = conn_settings(
        Config(url=URL, on_notification=print, log_level="error"),
        client_info=None,
        capabilities=None,
        era_hint=None,
        observe=True,
    )
    assert made.notifications and made.log_level == "error" and made.observe


# ---------------------------------------------------------------- the legacy standalone stream


def listening(server: FakeServer, *events: Any) -> None:
    server.overrides["GET"] = lambda r, b: sse_response(*events, end=False)


def test_legacy_standalone_stream_opens_for_notifications_and_delivers_them() -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    listening(server, note("notifications/tools/list_changed"), {"jsonrpc": "2.0", "result": 1})
    driver = Driver(server, settings=settings_with(notifications=True, protocol_versions=(LEGACY,)))
    driver.ok(driver.connect())
    driver.pump_side()
    assert driver.methods().count("GET") == 1
    assert Notification(method="notifications/tools/list_changed", params={}) in observations(
        driver
    )


def test_legacy_standalone_stream_opens_at_the_first_progress_call_once() -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    listening(server, progress(2, 0.5, 1, "half"))  # the call below is request 2
    driver = Driver(server, settings=settings_with(protocol_versions=(LEGACY,)))
    driver.ok(driver.connect())
    assert "GET" not in driver.methods()
    driver.ok(pcall(driver))
    assert driver.methods().count("GET") == 1
    assert observations(driver) == [Progress(progress=0.5, total=1, message="half")]
    driver.ok(pcall(driver))
    assert driver.methods().count("GET") == 1  # once per session


def test_modern_progress_call_opens_no_stream() -> None:
    server = FakeServer()
    driver = Driver(server)
    driver.ok(driver.connect())
    driver.ok(pcall(driver))
    assert "GET" not in driver.methods()


# ---------------------------------------------------------------- trace context


def test_propagated_meta_goes_into_the_operation_requests_only() -> None:
    server = FakeServer()
    driver = Driver(server)
    driver.machine.propagate({"traceparent": "00-ab-cd-01", "baggage": "k=v"})
    driver.ok(driver.connect())
    meta = server.bodies[-1]["params"]["_meta"]
    assert meta["traceparent"] == "00-ab-cd-01" and meta["baggage"] == "k=v"
    driver.ok(driver.call("echo"))  # no propagate: nothing
    assert "traceparent" not in server.bodies[-1]["params"]["_meta"]


def test_config_traceparent_wins_and_legacy_carries_the_meta() -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    fixed = settings_with(meta={"traceparent": "mine"}, protocol_versions=(LEGACY,))
    driver = Driver(server, settings=fixed)
    driver.ok(driver.connect())
    driver.machine.propagate({"traceparent": "theirs", "tracestate": "s"})
    driver.ok(driver.call("echo"))
    assert bodies(server, "tools/call")[-1]["params"]["_meta"] == {"traceparent": "mine"}
    plain = FakeServer(modern=False, legacy=LEGACY)
    driver = Driver(plain, settings=settings_with(protocol_versions=(LEGACY,)))
    driver.ok(driver.connect())
    driver.machine.propagate({"traceparent": "theirs"})
    driver.ok(pcall(driver))
    call = bodies(plain, "tools/call")[-1]
    assert call["params"]["_meta"] == {"traceparent": "theirs", "progressToken": call["id"]}


# ---------------------------------------------------------------- request reports


def reports(driver: Driver) -> list[Any]:
    return [o for o in observations(driver) if isinstance(o, RequestStarted | RequestEnded)]


def test_no_reports_without_observe() -> None:
    driver = Driver(FakeServer())
    driver.ok(driver.connect())
    driver.ok(driver.call("echo"))
    assert reports(driver) == []


def test_reports_for_each_request_with_outcomes() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = streamed_call(is_error=True)
    driver = Driver(server, settings=settings_with(observe=True))
    driver.ok(driver.connect())
    driver.ok(driver.call("echo"))
    got = reports(driver)
    assert [type(o).__name__ for o in got] == [
        "RequestStarted",
        "RequestEnded",
        "RequestStarted",
        "RequestEnded",
    ]
    discover, call = got[1], got[3]
    assert discover.method == "server/discover" and discover.error_type is None
    assert call.method == "tools/call" and call.tool == "echo" and call.error_type == "tool_error"
    assert call.protocol_version == "2026-07-28" and call.session_id is None
    assert got[2].rpc_id == call.rpc_id and call.started == got[2].at


def test_reports_of_an_error_answer_a_timeout_and_a_close() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = lambda r, b: json_response(error(b["id"], -32602, "bad args"))
    driver = Driver(server, settings=settings_with(observe=True), limits=Limits(call_timeout=1.0))
    driver.ok(driver.connect())
    driver.failure(driver.call("echo"))
    ended = reports(driver)[-1]
    assert (ended.error_type, ended.rpc_code, ended.error_message) == ("-32602", -32602, "bad args")
    server.overrides["tools/call"] = lambda r, b: Response(
        end=False, headers=[(b"content-type", b"text/event-stream")]
    )
    error_out = driver.failure(driver.call("echo"))
    assert isinstance(error_out, ConnectionFailed) and error_out.cause == "timeout"
    assert reports(driver)[-1].error_type == "timeout"
    # a close while a call runs ends its request as cancelled
    driver.machine.call_tool("echo", b"{}", now=driver.now)
    driver.pump_side()
    driver.close()
    assert reports(driver)[-1].error_type == "cancelled"


def test_reports_of_a_legacy_session_and_a_resumed_stream() -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    calls: dict[str, Any] = {"n": 0}

    def broken_then_resumed(request: HttpRequest, body: Any) -> Response:
        calls["n"] += 1
        calls["id"] = body["id"]
        return sse_response(b"id: e1\ndata: " + json.dumps(note("x")).encode() + b"\n\n", end=True)

    def resume(request: HttpRequest, body: Any) -> Response:
        if calls["n"] == 1 and any(k == b"last-event-id" for k, _ in request.headers):
            calls["n"] += 1
            return sse_response(call_result(calls["id"], modern=False))
        return Response(status=405)

    server.overrides["tools/call"] = broken_then_resumed
    server.overrides["GET"] = resume
    driver = Driver(server, settings=settings_with(observe=True, protocol_versions=(LEGACY,)))
    driver.ok(driver.connect())
    driver.ok(driver.call("echo"))
    got = reports(driver)
    starts = [o for o in got if isinstance(o, RequestStarted)]
    assert [o.method for o in starts] == ["initialize", "tools/call"]  # one per request
    ended = got[-1]
    assert isinstance(ended, RequestEnded) and ended.error_type is None
    assert ended.session_id == "session-1"


def test_modern_reissue_is_a_new_request() -> None:
    server = FakeServer()
    attempts = {"n": 0}

    def breaks_once(request: HttpRequest, body: Any) -> Response:
        attempts["n"] += 1
        if attempts["n"] == 1:
            return sse_response(b": nothing\n\n", end=True)
        return sse_response(call_result(body["id"]))

    server.overrides["tools/call"] = breaks_once
    settings_ = settings_with(observe=True, reissue_calls=True)
    driver = Driver(server, settings=settings_)
    driver.ok(driver.connect())
    driver.ok(driver.call("echo"))
    calls = [o for o in reports(driver) if o.method == "tools/call"]
    assert [type(o).__name__ for o in calls] == [
        "RequestStarted",
        "RequestEnded",
        "RequestStarted",
        "RequestEnded",
    ]
    assert calls[0].rpc_id != calls[2].rpc_id and calls[1].error_type is None


def test_error_type_of_every_error() -> None:
    assert error_type(ServerAnswered("x", reason="max_tools")) == "max_tools"
    assert error_type(ServerAnswered("x", reason="jsonrpc_error", code=-1)) == "-1"
    assert error_type(ConnectionFailed("x", cause="reset")) == "reset"
    assert error_type(Unauthorized("x", status=401)) == "unauthorized"


def test_a_failed_operation_without_an_answer_reports_its_cause() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = lambda r, b: Response(status=500)
    driver = Driver(server, settings=settings_with(observe=True))
    driver.ok(driver.connect())
    driver.failure(driver.call("echo"))
    assert reports(driver)[-1].error_type == "http_status"


# ---------------------------------------------------------------- the driver


def drain(driver: ClientDriver) -> list[Any]:
    out = []
    while (command := driver.next_command()) is not None:
        out.append(command)
    return out


def test_driver_delivers_observations_and_holds_those_between_operations() -> None:
    driver = ClientDriver(observe=True)
    view = driver.open(Config(url=URL, on_notification=print), now=0.0)
    assert view.on_notification is print
    assert view.machine.settings.observe and view.machine.settings.notifications
    conn = driver._conns[view.conn_id]
    driver._observed(conn, Notification(method="n", params={}))  # between operations: held
    assert drain(driver) == [] and len(conn.held) == 1
    conn.attended = True
    driver._observed(conn, RequestEnded(rpc_id=1, method="m", tool=None, started=0.0, at=1.0))
    (delivered,) = drain(driver)
    assert isinstance(delivered, Deliver) and delivered.item.http_version is None

    for version in ("2", "1.1"):
        conn.http = version
        driver._observed(conn, RequestEnded(rpc_id=1, method="m", tool=None, started=0.0, at=1.0))
        (delivered,) = drain(driver)
        assert delivered.item.http_version == version


def test_through_the_driver_a_notification_between_operations_waits_for_the_next() -> None:
    from .test_driver import make

    server = FakeServer(modern=False, legacy=LEGACY)
    server.overrides["GET"] = lambda request, body: sse_response(end=False)
    net = make(server, observe=True, auto_answer=False)
    seen: list[Any] = []
    view = net.open(on_notification=seen.append)
    net.ok("connect", view)
    get = next(c for c in net.log if isinstance(c, Write) and c.data.startswith(b"GET"))
    pushed = note("notifications/tools/list_changed")
    data = net.servers[get.socket_id].push(b"data: " + json.dumps(pushed).encode() + b"\n\n")
    before = len(net.delivered)
    net.driver.received(get.socket_id, data, now=net.now)
    net.pump()
    assert len(net.delivered) == before  # no operation runs: held
    net.ok("list_tools", view)
    items = [d.item for d in net.delivered[before:]]
    assert items[0] == Notification(method="notifications/tools/list_changed", params={})
    ended = [i for i in items if isinstance(i, RequestEnded)]
    assert [e.method for e in ended] == ["tools/list"] and ended[0].http_version == "1.1"


def test_an_observer_with_nothing_open_reports_nothing() -> None:
    from collections import deque

    from sansmcp.core.mcp.notifications import Observer
    from sansmcp.core.mcp.session import Session

    outputs: deque[Any] = deque()
    observer = Observer(outputs, Session())
    observer.replied({"jsonrpc": "2.0", "id": 1, "result": {}})
    observer.ended("cancelled", 1.0)
    observer.sent(None, "notifications/initialized", None, 1.0)
    assert not outputs


def test_progress_without_asking_is_not_a_notification() -> None:
    server = FakeServer()
    server.overrides["tools/call"] = streamed_call(lambda rid: progress(rid, 1))
    driver = Driver(server, settings=settings_with(notifications=True))
    driver.ok(driver.connect())
    driver.ok(driver.call("echo"))  # no on_progress: the progress is not ours
    assert observations(driver) == []
    quiet = FakeServer()
    quiet.overrides["tools/call"] = streamed_call(
        note("notifications/message", {"level": "info", "data": 1}), lambda rid: progress(rid, 2)
    )
    driver = Driver(quiet)  # progress asked, notifications not
    driver.ok(driver.connect())
    driver.ok(pcall(driver))
    assert observations(driver) == [Progress(progress=2, total=None, message=None)]


def test_through_the_driver_over_h2c_the_http_version_is_2() -> None:
    from .test_driver import make

    net = make(FakeServer(), observe=True, http2_prior_knowledge=True, h2c=True, auto_answer=False)
    view = net.open()
    net.ok("connect", view)
    net.ok("list_tools", view)
    ended = [d.item for d in net.delivered if isinstance(d.item, RequestEnded)]
    assert [e.http_version for e in ended] == ["2", "2"]  # server/discover, tools/list


_TRACE = ("traceparent", "tracestate", "baggage")
_CARRIER_KEYS = st.sampled_from([*_TRACE, "progressToken", META_VERSION, "b3", "x"])


@settings(max_examples=examples(150), deadline=None)
@given(
    carrier=st.dictionaries(_CARRIER_KEYS, st.text(max_size=12), max_size=7),
    own=st.dictionaries(st.sampled_from(["tracestate", "baggage", "k"]), st.text(max_size=5)),
    legacy=st.booleans(),
)
def test_a_carrier_never_duplicates_or_forges_a_meta_key(
    carrier: dict[str, str], own: dict[str, str], legacy: bool
) -> None:
    """Whatever keys a telemetry carrier holds, the request's ``_meta`` takes from it only
    the trace context (traceparent, tracestate, baggage) that ``Config.meta`` does not
    have: a ``progressToken``, a protocol key or a ``Config.meta`` key never comes from it
    (in the modern era ``_meta`` is spliced as bytes, where a duplicate would win)."""
    server = FakeServer(modern=False, legacy=LEGACY) if legacy else FakeServer()
    versions = {"protocol_versions": (LEGACY,)} if legacy else {}
    driver = Driver(server, settings=settings_with(meta=own, **versions))
    driver.machine.propagate(carrier)
    driver.ok(driver.connect())
    meta = bodies(server, "initialize" if legacy else "server/discover")[-1]["params"].get(
        "_meta", {}
    )
    taken = {k: v for k, v in carrier.items() if k in _TRACE and k not in own}
    ours = {k: v for k, v in meta.items() if k not in own and k not in _TRACE}
    assert {k: meta[k] for k in own} == own
    assert {k: v for k, v in meta.items() if k in _TRACE and k not in own} == taken
    assert "progressToken" not in meta and "b3" not in ours and "x" not in ours
    if not legacy:
        assert ours[META_VERSION] == driver.machine.protocol_version
