"""OpenTelemetry against the official SDK server, with the real ``opentelemetry-sdk`` (issue 14).

In-memory span exporter and metric reader: span names, kinds, attributes and status,
the ``mcp.client.operation.duration`` points, and the ``traceparent`` the server
received.  Off (no ``telemetry=``): sansmcp imports no ``opentelemetry`` module (a
subprocess checks ``sys.modules``) and makes no OpenTelemetry call (counted).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry import baggage, context, propagate, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sansmcp import CallerError, Config, ConnectionFailed, Limits, ServerAnswered
from sansmcp.otel import (
    DURATION_BUCKETS,
    KNOWN_CODES,
    MAX_TELEMETRY_BYTES,
    OTHER,
    Telemetry,
    clip_text,
)

from ..hostile.answers import Request, error, json_answer, well_behaved
from ..hostile.server_h1 import H1Reply, H1Server
from ..hostile.serving import ServerThread
from .conftest import MODES, REPO, Backend, Launcher, Server

ERAS = {"modern": ("--observe",), "legacy": ("--observe", "--legacy-only")}


class Sdk:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.telemetry = Telemetry(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    def points(self) -> list[Any]:
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == "mcp.client.operation.duration":
                        assert metric.unit == "s"
                        found.extend(metric.data.data_points)
        return found


@pytest.fixture(params=sorted(ERAS))
def observed(request: pytest.FixtureRequest, launch: Launcher) -> tuple[str, Server]:
    return request.param, launch(*ERAS[request.param])


def test_spans_metrics_and_the_traceparent_the_server_received(
    backend: Backend, observed: tuple[str, Server]
) -> None:
    era, server = observed
    sdk = Sdk()
    outer_tracer = sdk.tracer_provider.get_tracer("the-platform")

    async def main() -> tuple[str, str]:
        config = Config(url=server.url())
        async with (
            backend.Client(allow_loopback=True, telemetry=sdk.telemetry) as client,
            client.connect(config) as conn,
        ):
            with outer_tracer.start_as_current_span("work item") as outer:
                token = context.attach(baggage.set_baggage("tenant", "t1"))
                try:
                    seen = await conn.call_tool("meta_seen")
                finally:
                    context.detach(token)
                await conn.call_tool("fail")  # isError
                with pytest.raises(ServerAnswered):
                    await conn.call_tool("rpc_error")
                carrier: dict[str, str] = {}
                propagate.inject(carrier, context=trace.set_span_in_context(outer))
        return str(seen.content[0].text), carrier["traceparent"]

    seen_text, outer_traceparent = backend.run(main)
    meta = json.loads(seen_text)
    assert meta["baggage"] == "tenant=t1"

    spans = {span.name: span for span in sdk.spans.get_finished_spans()}
    call = spans["tools/call meta_seen"]
    # the traceparent the server received names sansmcp's tools/call span (so the
    # server's spans nest under it), in the caller's trace
    version_field, trace_id, span_id, flags = meta["traceparent"].split("-")
    assert version_field == "00" and int(flags, 16) & 1  # sampled
    assert int(trace_id, 16) == call.context.trace_id == spans["work item"].context.trace_id
    assert int(span_id, 16) == call.context.span_id
    assert outer_traceparent.split("-")[1] == trace_id
    assert call.kind is SpanKind.CLIENT
    attrs = dict(call.attributes or {})
    version = "2026-07-28" if era == "modern" else "2025-11-25"
    expected = {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "meta_seen",
        "gen_ai.operation.name": "execute_tool",
        "mcp.protocol.version": version,
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "network.protocol.version": "1.1",
        "server.address": "127.0.0.1",
        "server.port": server.port,
    }
    assert {k: attrs.get(k) for k in expected} == expected
    assert attrs["jsonrpc.request.id"].isdigit()
    assert ("mcp.session.id" in attrs) == (era == "legacy")
    assert "error.type" not in attrs and call.status.status_code is StatusCode.UNSET
    assert call.parent is not None and call.parent.span_id == spans["work item"].context.span_id
    assert call.start_time <= call.end_time

    failed = spans["tools/call fail"]
    assert failed.attributes["error.type"] == "tool_error"
    assert failed.status.status_code is StatusCode.ERROR
    rpc = spans["tools/call rpc_error"]
    assert rpc.attributes["error.type"] == "-32602"
    assert rpc.attributes["rpc.response.status_code"] == "-32602"
    assert rpc.status.status_code is StatusCode.ERROR
    assert rpc.status.description == "rpc_error always answers -32602"
    first = "server/discover" if era == "modern" else "initialize"
    assert spans[first].attributes["mcp.method.name"] == first
    assert "gen_ai.tool.name" not in spans[first].attributes

    points = sdk.points()
    calls = [p for p in points if p.attributes.get("mcp.method.name") == "tools/call"]
    assert sum(p.count for p in calls) == 3
    assert all(tuple(p.explicit_bounds) == DURATION_BUCKETS for p in points)
    for point in points:
        assert "jsonrpc.request.id" not in point.attributes
        assert "mcp.session.id" not in point.attributes
    errors = {p.attributes.get("error.type") for p in calls}
    assert errors == {None, "tool_error", "-32602"}


def test_config_traceparent_wins(backend: Backend, launch: Launcher) -> None:
    server = launch(*ERAS["modern"])
    sdk = Sdk()
    mine = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    async def main() -> str:
        config = Config(url=server.url(), meta={"traceparent": mine})
        async with (
            backend.Client(allow_loopback=True, telemetry=sdk.telemetry) as client,
            client.connect(config) as conn,
        ):
            with sdk.tracer_provider.get_tracer("p").start_as_current_span("outer"):
                seen = await conn.call_tool("meta_seen")
        return str(seen.content[0].text)

    assert json.loads(backend.run(main))["traceparent"] == mine


def test_a_raising_callback_ends_the_open_span(backend: Backend, launch: Launcher) -> None:
    server = launch(*ERAS["modern"])
    sdk = Sdk()

    class Boom(Exception):
        pass

    def boom(*args: Any) -> None:
        raise Boom("no")

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, telemetry=sdk.telemetry) as client,
            client.connect(Config(url=server.url())) as conn,
        ):
            with pytest.raises(Boom):
                await conn.call_tool("report", b'{"steps": 2}', on_progress=boom)

    backend.run(main)
    span = next(s for s in sdk.spans.get_finished_spans() if s.name == "tools/call report")
    assert span.attributes["error.type"] == "Boom"
    assert span.status.status_code is StatusCode.ERROR


def test_a_call_run_as_a_task_is_one_span_naming_the_task(
    backend: Backend, launch: Launcher
) -> None:
    """A ``tools/call`` the server runs as a task (the extension's tasks server) is one
    span lasting until the task ended, carrying ``sansmcp.task.id`` (the id
    ``on_task`` heard) and ``sansmcp.task.status`` (the last: ``completed``; ``working``
    for a task given up at ``task_timeout``, with its error); each poll is a span of its
    own; neither attribute reaches the metric."""
    server = launch(*MODES["stateless-json"], "--tasks")
    sdk = Sdk()
    ids: list[str] = []

    async def main() -> None:
        limits = Limits(task_timeout=0.5)
        async with (
            backend.Client(allow_loopback=True, telemetry=sdk.telemetry, limits=limits) as client,
            client.connect(Config(url=server.url(), tasks=True)) as conn,
        ):
            await conn.call_tool(
                "research", b'{"topic": "t", "polls": 2}', on_task=lambda i, *_: ids.append(i)
            )
            with pytest.raises(ConnectionFailed):
                await conn.call_tool("research", b'{"topic": "endless", "polls": 100000}')

    backend.run(main)
    spans = sdk.spans.get_finished_spans()
    calls = [span for span in spans if span.name == "tools/call research"]
    assert len(calls) == 2
    done, given_up = calls
    assert done.attributes["sansmcp.task.id"] == ids[0] and ids[0].startswith("task-")
    assert done.attributes["sansmcp.task.status"] == "completed"
    assert done.status.status_code is StatusCode.UNSET
    assert given_up.attributes["sansmcp.task.status"] == "working"
    assert given_up.attributes["error.type"] == "timeout"
    assert given_up.attributes["sansmcp.task.id"] not in (None, ids[0])
    polls = [span for span in spans if span.name == "tasks/get"]
    first, second = (int(span.attributes["jsonrpc.request.id"]) for span in calls)
    between = [s for s in polls if first < int(s.attributes["jsonrpc.request.id"]) < second]
    assert len(between) == 2  # research polled twice, its call's span open meanwhile
    assert all("sansmcp.task.id" not in span.attributes for span in polls)
    assert all(not str(key).startswith("sansmcp.") for p in sdk.points() for key in p.attributes)


def test_off_no_opentelemetry_call(
    backend: Backend, launch: Launcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = launch(*ERAS["modern"])
    calls: list[str] = []
    for module, name in ((propagate, "inject"), (trace, "get_tracer"), (trace, "get_current_span")):
        original = getattr(module, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kw)

        monkeypatch.setattr(module, name, counted)

    async def work_item(telemetry: Telemetry | None) -> None:
        async with (
            backend.Client(allow_loopback=True, telemetry=telemetry) as client,
            client.connect(Config(url=server.url())) as conn,
        ):
            await conn.list_tools()
            await conn.call_tool("whoami")

    backend.run(lambda: work_item(None))
    assert calls == []
    sdk = Sdk()
    backend.run(lambda: work_item(sdk.telemetry))
    assert "inject" in calls  # the counter sees the calls telemetry makes


def test_off_imports_no_opentelemetry_module(launch: Launcher) -> None:
    server = launch(*ERAS["modern"])
    program = (
        "import asyncio, sys\n"
        "import sansmcp, sansmcp.cli\n"
        "from sansmcp.io_adapters import asyncio as adapter\n"
        "async def main():\n"
        "    async with adapter.Client(allow_loopback=True) as client:\n"
        f"        async with client.connect(sansmcp.Config(url={server.url()!r})) as conn:\n"
        "            await conn.list_tools()\n"
        "            await conn.call_tool('report', b'{}', on_progress=lambda *a: None)\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_call_refused_before_its_request_ends_its_span(
    backend: Backend, launch: Launcher
) -> None:
    """The tools/call span opens when the call starts (its context goes in ``_meta``): a
    call refused before any request still ends it, once, with the refusal."""
    server = launch(*ERAS["modern"])
    sdk = Sdk()

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, telemetry=sdk.telemetry) as client,
            client.connect(Config(url=server.url())) as conn,
        ):
            with pytest.raises(CallerError):
                await conn.call_tool("echo", b"[1]")  # not one JSON object
            result = await conn.call_tool("echo", b'{"text": "after"}')
            assert result.content[0].text == "after"

    backend.run(main)
    calls = [s for s in sdk.spans.get_finished_spans() if s.name == "tools/call echo"]
    assert len(calls) == 2
    refused, answered = calls
    assert refused.attributes["error.type"] == "CallerError"
    assert refused.status.status_code is StatusCode.ERROR
    assert answered.status.status_code is StatusCode.UNSET
    assert "error.type" not in answered.attributes
    assert sdk.telemetry._opened == {} and sdk.telemetry._spans == {}


def test_a_telemetry_hook_carrier_is_checked(backend: Backend, launch: Launcher) -> None:
    server = launch(*ERAS["modern"])

    class Bad:
        def carrier(self, conn: object, tool: str | None) -> Any:
            return {"traceparent": 5}

        def observe(self, conn: object, item: Any, now: float) -> None:
            pass

        def abandon(self, conn: object, error: BaseException) -> None:
            pass

    async def main() -> None:
        async with backend.Client(allow_loopback=True, telemetry=Bad()) as client:
            with pytest.raises(CallerError, match="carrier"):
                async with client.connect(Config(url=server.url())):
                    pass

    backend.run(main)


# ---- a hostile server's values (issue 26, findings 6 and 7) ----------------------------

CODES = 1_200  # distinct JSON-RPC error codes, one call each
HUGE_MESSAGE = "\u00e9" + "m" * 3_000_000 + "\u6771"  # an error message of 3 MB
LONG_TOOL = "long_" + "x" * 59_995  # a tool name of 60,000 characters
MANY_RESPONSES = Limits(max_responses=2 * CODES)  # all on one connection


async def hostile_answers(request: Request, reply: H1Reply) -> None:
    """A modern server whose errors carry any code and any message."""
    if request.rpc_method != "tools/call":
        await reply.answer(well_behaved(request))
        return
    name = request.params.get("name")
    arguments = request.params.get("arguments") or {}
    if name == "code":
        answer = error(request.rpc_id, arguments["code"], f"code {arguments['code']}")
    elif name == "huge":
        answer = error(request.rpc_id, -32603, HUGE_MESSAGE)
    else:
        answer = error(request.rpc_id, 7, f"no tool {len(str(name)):,} characters long")
    await reply.answer(json_answer(answer))


def distinct_codes() -> list[int]:
    """1,200 codes: the documented ones, JSON-RPC's reserved range, and far outside it."""
    codes = sorted(KNOWN_CODES | set(range(-32099, -32000)) | {-(10**40) - n for n in range(50)})
    codes += range(CODES - len(codes))  # 0, 1, 2, ...
    assert len(set(codes)) == CODES
    return codes


def test_hostile_codes_and_strings_stay_bounded(backend: Backend) -> None:
    """1,200 distinct error codes make at most one series per documented code plus
    ``_OTHER``; a 3 MB message and a 60 KB tool name reach no span name, attribute or
    status description longer than MAX_TELEMETRY_BYTES (UTF-8)."""
    sdk = Sdk()
    codes = distinct_codes()
    with ServerThread(H1Server(hostile_answers)) as server:

        async def main() -> None:
            config = Config(url=f"http://127.0.0.1:{server.port}/mcp")
            async with (
                backend.Client(
                    allow_loopback=True, telemetry=sdk.telemetry, limits=MANY_RESPONSES
                ) as client,
                client.connect(config) as conn,
            ):
                for code in codes:
                    with pytest.raises(ServerAnswered) as caught:
                        await conn.call_tool("code", json.dumps({"code": code}).encode())
                    assert caught.value.code == code
                with pytest.raises(ServerAnswered) as caught:
                    await conn.call_tool("huge")
                assert caught.value.rpc_message == HUGE_MESSAGE
                with pytest.raises(ServerAnswered):
                    await conn.call_tool(LONG_TOOL)

        backend.run(main, timeout=120)

    spans = sdk.spans.get_finished_spans()
    calls = [s for s in spans if s.attributes.get("mcp.method.name") == "tools/call"]
    for span in spans:  # every string within the limit, in UTF-8 bytes
        texts = [span.name, span.status.description or ""]
        texts += [v for v in span.attributes.values() if isinstance(v, str)]
        assert max(len(t.encode()) for t in texts) <= MAX_TELEMETRY_BYTES, span.name[:80]
    by_tool: dict[str, list[Any]] = {}
    for span in calls:
        by_tool.setdefault(span.attributes["gen_ai.tool.name"], []).append(span)
    assert sorted(by_tool) == sorted(["code", "huge", clip_text(LONG_TOOL)])
    sent = [int(s.attributes["rpc.response.status_code"]) for s in by_tool["code"]]
    # spans keep the server's code; HeaderMismatch (-32020) is re-listed and retried once
    assert sorted(sent) == sorted([*codes, -32020])
    for span in by_tool["code"]:
        code = int(span.attributes["rpc.response.status_code"])
        assert span.attributes["error.type"] == (str(code) if code in KNOWN_CODES else OTHER)
    [huge] = by_tool["huge"]
    assert huge.status.description == clip_text(HUGE_MESSAGE)
    assert huge.status.description.startswith("\u00e9mmm")
    assert huge.status.description.endswith("\u2026")
    [long] = by_tool[clip_text(LONG_TOOL)]
    assert long.name == clip_text(f"tools/call {LONG_TOOL}")
    assert long.attributes["error.type"] == OTHER

    points = [p for p in sdk.points() if p.attributes.get("mcp.method.name") == "tools/call"]
    series = {
        (p.attributes["error.type"], p.attributes["rpc.response.status_code"]) for p in points
    }
    expected_series = {(str(c), str(c)) for c in KNOWN_CODES} | {(OTHER, OTHER)}
    assert series == expected_series  # 11 series, not 1,202
    assert len(points) == len(expected_series)
    counts = {p.attributes["error.type"]: p.count for p in points}
    assert counts[OTHER] == CODES - len(KNOWN_CODES) + 1  # the long tool's code 7 too
    assert counts["-32603"] == 2  # one of the 1,200 and the huge message
    assert counts["-32020"] == 2  # and its retry
    for point in sdk.points():
        assert "gen_ai.tool.name" not in point.attributes
        for value in point.attributes.values():
            assert not isinstance(value, str) or len(value.encode()) <= MAX_TELEMETRY_BYTES
