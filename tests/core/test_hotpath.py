"""The per-work-item savings keep what they replace (issue 16, the floor target).

Through the pure driver against the fake server: a server's output schema compiled once
per Client (and still checked on every Conn), the Client-wide compile cache's bounds, a
``Config`` checked once while nothing in it can change (and checked again when it can);
the wire's checked request lines reused, and a bad one refused, on a reused socket.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import tracemalloc
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp import CallerError, Config, OAuth, ServerAnswered
from sansmcp.core import config as config_module
from sansmcp.core.config import conn_settings
from sansmcp.core.errors import LocalProtocolError
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import compiled as compiled_module
from sansmcp.core.mcp.compiled import CompiledSchemas
from sansmcp.core.mcp.requests import Requests
from sansmcp.core.mcp.session import Session
from sansmcp.core.results import CallResult
from sansmcp.core.schema import output as output_module
from sansmcp.core.schema.validator import Schema, compile_schema
from sansmcp.core.wire.h1 import H1Connection
from tests.tiers import examples

from .fakemcp import MODERN, FakeServer, result, tool
from .test_driver import URL, Net, make

TOTAL = {
    "type": "object",
    "properties": {"total": {"type": "integer", "minimum": 0}},
    "required": ["total"],
}


def counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Count the calls of ``module.name`` (still calling it)."""
    calls: list[int] = []
    real = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def schema_server(era: str, structured: list[Any], schema: Any = TOTAL) -> FakeServer:
    server = FakeServer(
        tools=[tool("count", outputSchema=schema)],
        **({} if era == "modern" else {"modern": False, "legacy": "2025-11-25"}),
    )
    answers = iter(structured)

    def answer(request: Any, body: Any) -> Any:
        value: dict[str, Any] = {
            "content": [{"type": "text", "text": "t"}],
            "structuredContent": next(answers),
        }
        if era == "modern":
            value["resultType"] = "complete"
        return server.wrap(result(body["id"], value))

    server.overrides["tools/call"] = answer
    return server


def item(net: Net, config: Config | None = None) -> CallResult | BaseException:
    view = net.driver.open(config or Config(url=URL), now=net.now)
    assert net.ok("connect", view) is None
    net.ok("list_tools", view)
    done = net.run("call_tool", view, "count", b"{}")
    assert net.ok("close_conn", view) is None
    if done.error is not None:
        return done.error
    assert isinstance(done.value, CallResult)
    return done.value


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_servers_output_schema_is_compiled_once_per_client_and_checked_every_time(
    monkeypatch: pytest.MonkeyPatch, era: str
) -> None:
    compiles = counting(monkeypatch, output_module, "compile_output")
    net = make(schema_server(era, [{"total": 1}, {"total": 2}, {"total": -1}, {"total": 3}]))
    first, second = item(net), item(net)
    assert isinstance(first, CallResult) and first.validated
    assert isinstance(second, CallResult) and second.validated
    assert json.loads(second.structured_content or b"") == {"total": 2}
    # the shared compiled schema still refuses what does not conform, on another Conn
    failed = item(net)
    assert isinstance(failed, ServerAnswered) and failed.reason == "output_schema_mismatch"
    assert isinstance(item(net), CallResult)
    assert len(compiles) == 1 and len(net.driver.compiled) == 1


def test_another_schema_is_compiled_and_kept_beside_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiles = counting(monkeypatch, output_module, "compile_output")
    server = schema_server("modern", [{"total": 1}, {"total": 2}, {"total": 3}])
    net = make(server)
    item(net)
    server.tools = [tool("count", outputSchema={**TOTAL, "title": "another"})]
    item(net)
    server.tools = [tool("count", outputSchema=TOTAL)]
    item(net)
    assert len(compiles) == 2 and len(net.driver.compiled) == 2


def test_an_unusable_server_schema_is_never_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    compiles = counting(monkeypatch, output_module, "compile_output")
    net = make(schema_server("modern", [], schema={"$ref": "https://example.com/remote"}))
    for _ in range(2):  # every Conn meets the same classified error
        failed = item(net)
        assert isinstance(failed, ServerAnswered) and failed.reason == "unusable_output_schema"
    assert len(compiles) == 2 and len(net.driver.compiled) == 0


def test_a_configured_output_schema_is_compiled_per_conn(monkeypatch: pytest.MonkeyPatch) -> None:
    compiles = counting(monkeypatch, output_module, "compile_output")
    server = schema_server("modern", [{"total": 1}, {"total": 2}], schema=None)
    server.tools = [tool("count")]
    net = make(server)
    config = Config(url=URL, output_schemas={"count": TOTAL})
    for _ in range(2):
        done = item(net, config)
        assert isinstance(done, CallResult) and done.validated
    assert len(compiles) == 2 and len(net.driver.compiled) == 0


def stepless() -> Any:
    """A stand-in compiled schema whose compile spent no steps (its estimate is its source's)."""
    return Schema(cast(Any, None), "")


def test_the_compiled_schemas_are_bounded_least_recently_used_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (3 schemas, 10 source bytes' worth: set by Limits.max_compiled_schemas and
    # max_compiled_schema_bytes since they became Limits fields)
    cache = CompiledSchemas(max_entries=3, max_bytes=10 * compiled_module.HELD_PER_SOURCE_BYTE)
    schemas: list[Any] = [stepless() for _ in range(4)]
    for index in range(3):
        cache.put(b"%d" % index, schemas[index])
    assert cache.get(b"0") is schemas[0]  # used: now the most recent
    cache.put(b"3", schemas[3])
    assert len(cache) == 3 and cache.get(b"1") is None  # the least recently used left
    assert [cache.get(b"%d" % i) for i in (0, 2, 3)] == [schemas[0], schemas[2], schemas[3]]
    cache.put(b"x" * 11, schemas[1])  # over the bytes alone: not kept
    assert cache.get(b"x" * 11) is None and len(cache) == 3


def another_schema_each_time(
    monkeypatch: pytest.MonkeyPatch, limits: Limits, schemas: list[dict[str, Any]]
) -> tuple[Net, FakeServer, list[int]]:
    """A driver whose server lists ``schemas[i]`` as the output schema on work item i
    (what a hostile server does to make every call compile, and the Client keep, one)."""
    compiles = counting(monkeypatch, output_module, "compile_output")
    server = schema_server("modern", [{"total": n} for n in range(len(schemas) + 4)])
    net = make(server, limits=limits)
    return net, server, compiles


def test_a_server_changing_its_schema_each_listing_cannot_grow_the_kept_schemas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = Limits(max_compiled_schemas=2)
    schemas = [{**TOTAL, "title": f"t{n}"} for n in range(5)]
    net, server, compiles = another_schema_each_time(monkeypatch, limits, schemas)
    for number, schema in enumerate(schemas, 1):
        server.tools = [tool("count", outputSchema=schema)]
        done = item(net)
        assert isinstance(done, CallResult) and done.validated
        assert len(net.driver.compiled) == min(number, 2)
    assert len(compiles) == 5
    server.tools = [tool("count", outputSchema=schemas[0])]  # evicted: compiled again
    item(net)
    server.tools = [tool("count", outputSchema=schemas[4])]  # kept: not compiled
    item(net)
    assert len(compiles) == 6 and len(net.driver.compiled) == 2


def test_the_kept_schemas_are_bounded_by_their_estimated_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Large dense schemas (a subschema every 3 bytes, the costliest form per source byte
    measured), each under max_tool_bytes, from a server, with the default bounds: the
    estimate of what the Client holds stays under max_compiled_schema_bytes, whatever the
    server sends.  (That the estimate bounds the heap is measured in the next tests.)"""
    limits = Limits()
    wide = [{"type": "object", "title": f"t{n}", "anyOf": [{}] * 12_000} for n in range(4)]
    net, server, compiles = another_schema_each_time(monkeypatch, limits, wide)
    held = []
    for schema in wide:
        server.tools = [tool("count", outputSchema=schema)]
        done = item(net)
        assert isinstance(done, CallResult) and done.validated
        held.append((len(net.driver.compiled), net.driver.compiled.bytes))
    source = json.dumps(wide[0], separators=(",", ":")).encode()
    compiled = compile_schema(  # (from its bytes, as the server's: 12,000 distinct dicts)
        json.loads(source),
        max_steps=limits.max_validation_steps,
        max_depth=limits.max_validation_depth,
    )
    assert compiled.steps > 12_000  # one step (at least) per subschema
    size = compiled_module.held_estimate(source, compiled)
    assert 2 * size <= limits.max_compiled_schema_bytes < 3 * size  # two fit, not three
    assert held == [(1, size), (2, 2 * size), (2, 2 * size), (2, 2 * size)]
    assert len(compiles) == 4
    # one over the bytes bound by itself is compiled for its Conn and never kept
    limits = Limits(max_compiled_schema_bytes=size - 1)
    net, server, compiles = another_schema_each_time(monkeypatch, limits, wide[:1])
    server.tools = [tool("count", outputSchema=wide[0])]
    for _ in range(2):
        done = item(net)
        assert isinstance(done, CallResult) and done.validated
    assert len(compiles) == 2 and len(net.driver.compiled) == 0 and net.driver.compiled.bytes == 0


def test_a_short_pattern_holding_much_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """29 source bytes of pattern compile to ~500,000 instructions (~36 MB): its estimate
    counts the steps the compile spent, so with the default bounds it is never kept
    (charged by its source alone it was, 64 of them ~2.3 GB)."""
    limits = Limits()
    pattern = {**TOTAL, "pattern": "(?:a{999}){499}"}
    net, server, compiles = another_schema_each_time(monkeypatch, limits, [pattern])
    server.tools = [tool("count", outputSchema=pattern)]
    for _ in range(2):
        done = item(net)
        assert isinstance(done, CallResult) and done.validated
    assert len(compiles) == 2 and len(net.driver.compiled) == 0 and net.driver.compiled.bytes == 0


HOSTILE_SHAPES: list[dict[str, Any]] = [
    {"pattern": "(?:a{99}){99}"},  # a counted repetition: ~10,000 instructions
    {"pattern": "(?:(?:)|(?:)|(?:)){999}"},  # alternations, the densest per step measured
    {"pattern": "(?:[a-z0-9_]{99}){40}"},  # a character class copied 4,000 times
    {"anyOf": [{}] * 4_000},  # a subschema every 3 bytes, the densest per source byte
    {"allOf": [{"allOf": [{"type": "string"}] * 10}] * 300},  # nested
    {"enum": list(range(6_000))},
    {"properties": {f"p{n}": {"type": "string", "minLength": 1} for n in range(2_000)}},
    {"anyOf": [{}] * 2_000, "pattern": "(?:a{99}){40}"},  # dense both ways at once
]


@pytest.mark.parametrize("shape", HOSTILE_SHAPES, ids=lambda shape: str(shape)[:24])
def test_each_hostile_shape_holds_less_than_its_estimate(shape: dict[str, Any]) -> None:
    """The heap one compiled schema holds (tracemalloc; its parsed source excluded, its
    bytes included, as the kept key) is under ``held_estimate``."""
    source = json.dumps(shape).encode()
    raw = json.loads(source)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        compiled = compile_schema(raw, max_steps=20_000, max_depth=64)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before + len(source)
    finally:
        tracemalloc.stop()
    assert compiled.steps > 0
    assert held <= compiled_module.held_estimate(source, compiled)


def test_the_heap_the_kept_hostile_schemas_hold_stays_under_the_bound() -> None:
    """Many kept schemas of each hostile shape (each distinct by its title, as a server
    changing its listing sends them): the heap the kept ones hold, measured with
    tracemalloc, stays under max_compiled_schema_bytes."""
    bound = 4 << 20
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cache = CompiledSchemas(max_entries=64, max_bytes=bound)
        most = kept = 0  # the most heap held (after a put) and the most schemas kept
        for copy in range(6):
            for shape in HOSTILE_SHAPES:
                source = json.dumps({**shape, "title": f"t{copy}"}).encode()
                compiled = compile_schema(json.loads(source), max_steps=20_000, max_depth=64)
                cache.put(source, compiled)
                del source, compiled  # only what the cache keeps is left
                most = max(most, tracemalloc.get_traced_memory()[0] - before)
                kept = max(kept, len(cache))
                assert cache.bytes <= bound
    finally:
        tracemalloc.stop()
    assert kept > 2  # small ones are kept together
    assert most <= bound, f"the kept schemas held {most:,} bytes, over {bound:,}"


def test_one_conn_calling_many_tools_keeps_their_schemas_under_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A listing of many tools, each with a heavy output schema, and a caller calling
    each on one Conn: that Conn's compiled schemas (one per tool called, compiled at its
    first call) are bounded by max_compiled_schema_bytes beside the one in use."""
    from sansmcp.core.mcp.toolset import Toolset

    seen: list[Toolset] = []
    output_schema = Toolset.output_schema

    def spying(self: Toolset, name: str) -> Schema | None:
        seen.append(self)
        return output_schema(self, name)

    monkeypatch.setattr(Toolset, "output_schema", spying)
    heavy = [{**TOTAL, "title": f"t{n}", "pattern": "(?:a{99}){99}"} for n in range(6)]
    limits = Limits(max_compiled_schemas=0, max_compiled_schema_bytes=3 << 20)
    server = schema_server("modern", [{"total": n} for n in range(6)])
    server.tools = [tool(f"tool{n}", outputSchema=schema) for n, schema in enumerate(heavy)]
    net = make(server, limits=limits)
    view = net.driver.open(Config(url=URL), now=net.now)
    assert net.ok("connect", view) is None
    net.ok("list_tools", view)
    held: list[dict[str, Any]] = []
    for n in range(6):
        done = net.run("call_tool", view, f"tool{n}", b"{}")
        assert isinstance(done.value, CallResult) and done.value.validated
        held.append(dict(seen[-1]._output_schemas))
        assert list(held[-1])[-1] == f"tool{n}"  # the one in use
    assert net.ok("close_conn", view) is None
    assert [len(kept) for kept in held] == [1, 2, 1, 2, 1, 2]  # two fit, not three
    size = held[0]["tool0"][2]
    assert 2 * size <= limits.max_compiled_schema_bytes < 3 * size
    assert all(sum(entry[2] for entry in kept.values()) <= 2 * size for kept in held)
    assert len({id(ops) for ops in seen}) == 1  # one Conn


def test_no_schema_is_kept_with_max_compiled_schemas_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net, _server, compiles = another_schema_each_time(
        monkeypatch, Limits(max_compiled_schemas=0), [TOTAL]
    )
    for _ in range(2):
        done = item(net)
        assert isinstance(done, CallResult) and done.validated
    assert len(compiles) == 2 and len(net.driver.compiled) == 0


def test_a_schema_two_conns_compiled_at_once_is_kept_once() -> None:
    cache = CompiledSchemas(max_entries=4, max_bytes=1 << 20)
    first: Any = stepless()
    second: Any = stepless()
    cache.put(b"{}", first)
    cache.put(b"{}", second)
    assert cache.get(b"{}") is first and len(cache) == 1
    assert cache.bytes == 2 * compiled_module.HELD_PER_SOURCE_BYTE


# ---------------------------------------------------------------- Config checked once


def plain_item(net: Net, config: Config) -> Any:
    view = net.driver.open(config, now=net.now)
    assert net.ok("connect", view) is None
    called = net.ok("call_tool", view, "echo", b'{"text": "hi"}')
    assert net.ok("close_conn", view) is None
    return view, called


def test_a_config_that_cannot_change_is_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = counting(monkeypatch, config_module, "conn_settings")
    net = make()
    config = Config(url=URL, protocol_versions=(MODERN,), bearer_token="t0ken")
    views = [plain_item(net, config)[0] for _ in range(3)]
    assert len(checks) == 1
    # the era the pool learnt reaches the later Conns' settings as before
    assert [view.machine.settings.era_hint for view in views] == [None, MODERN, MODERN]
    assert views[1].machine.settings is views[2].machine.settings
    other = Config(url=URL)
    plain_item(net, other)
    plain_item(net, config)  # the memo holds the last Config only
    assert len(checks) == 3


@pytest.mark.parametrize(
    "field",
    [
        {"headers": {"x-tenant": "a"}},
        {"meta": {"k": "v"}},
        {"tool_schemas": {"echo": {"type": "object"}}},
        {"output_schemas": {"other": {"type": "object"}}},
        {"protocol_versions": [MODERN]},
    ],
)
def test_a_config_holding_something_mutable_is_checked_every_time(
    monkeypatch: pytest.MonkeyPatch, field: dict[str, Any]
) -> None:
    checks = counting(monkeypatch, config_module, "conn_settings")
    net = make()
    config = Config(url=URL, **field)
    for _ in range(2):
        plain_item(net, config)
    assert len(checks) == 2


class _MyConfig(Config):
    """A caller's own Config kind: its fields could be properties, so never reused."""


@pytest.mark.parametrize(
    "config",
    [
        Config(url=URL, oauth=OAuth(redirect_uri="http://127.0.0.1:9/cb")),
        _MyConfig(url=URL),
    ],
    ids=["oauth", "subclass"],
)
def test_an_oauth_config_or_a_config_subclass_is_checked_at_every_open(
    monkeypatch: pytest.MonkeyPatch, config: Config
) -> None:
    checks = counting(monkeypatch, config_module, "conn_settings")
    net = make(random_bytes=lambda n: b"\x01" * n)
    for _ in range(2):
        net.driver.close_conn(net.driver.open(config, now=net.now), now=net.now)
    assert len(checks) == 2


def test_a_mutated_header_mapping_is_sent_and_checked_again() -> None:
    server = FakeServer()
    net = make(server)
    headers = {"x-tenant": "a"}
    config = Config(url=URL, headers=headers)
    plain_item(net, config)
    headers["x-tenant"] = "b"
    plain_item(net, config)
    sent = [dict(request.headers).get(b"x-tenant") for request in server.requests]
    assert sent[0] == b"a" and sent[-1] == b"b"
    headers["x-tenant"] = " bad"  # now unusable: refused before any I/O, as before
    with pytest.raises(CallerError, match="whitespace"):
        net.driver.open(config, now=net.now)


def test_the_client_info_and_capabilities_are_the_clients_own_copy() -> None:
    server = FakeServer()
    info: dict[str, Any] = {"name": "agent", "version": "1"}
    capabilities: dict[str, Any] = {"elicitation": {}}
    net = make(server, answers_input=True, capabilities=capabilities, client_info=info)
    config = Config(url=URL)  # a Config whose settings are reused: nothing may leak in later
    plain_item(net, config)
    info["name"], capabilities["sampling"] = "changed", {}
    info["bad"] = float("nan")  # not JSON: would fail the encoding if it were read now
    plain_item(net, config)
    sent = json.dumps(server.bodies)
    assert sent.count("agent") >= 2  # sent on each Conn
    assert "changed" not in sent and "sampling" not in sent


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("client_info", ["name"], "client_info must be a mapping, not list"),
        ("client_info", {"n": float("inf")}, "client_info cannot be sent as JSON"),
        ("capabilities", {"x": object()}, "capabilities cannot be sent as JSON"),
    ],
)
def test_an_unusable_client_info_or_capability_is_refused_when_the_client_is_made(
    field: str, value: Any, message: str
) -> None:
    with pytest.raises(CallerError, match=message):
        make(answers_input=True, **{field: value})


# ---------------------------------------------------------------- request heads


def requests_at(legacy: bool) -> tuple[Requests, Session]:
    settings = conn_settings(
        Config(url=URL, bearer_token="a"), client_info=None, capabilities=None, era_hint=None
    )
    session = Session()
    if legacy:
        session.initializing()
        session.legacy_at("2025-11-25", b"s1")
    else:
        session.modern_at(MODERN)
    return Requests(settings, session), session


def test_the_wire_writes_a_repeated_header_list_as_before_and_refuses_a_bad_one() -> None:
    requests, _ = requests_at(legacy=False)
    wire = H1Connection(limits=Limits(), now=0.0)
    sent = []
    for rpc_id in (1, 2):
        request = requests.modern(rpc_id, "tools/list", {})
        wire.start(rpc_id, request, now=0.0)
        sent.append(wire.data_to_send())
        wire.receive_data(b"HTTP/1.1 204 No Content\r\n\r\n", now=0.0)
        while wire.next_event() is not None:
            pass
    assert sent[0].replace(b'"id":1', b'"id":2') == sent[1]
    assert b"\r\nmcp-method: tools/list\r\n" in sent[1]
    bad = dataclasses.replace(request, headers=(*request.headers, (b"x-bad", b"a\r\nb")))
    with pytest.raises(LocalProtocolError):
        wire.start(3, bad, now=0.0)
    assert wire.can_start() and wire.data_to_send() == b""  # nothing changed
    wire.start(3, request, now=0.0)
    assert wire.data_to_send().startswith(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n")


_LEAF = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
_BAD = st.sampled_from([b"bytes", {1, 2}, object(), complex(1, 2)])


@settings(max_examples=examples(300), deadline=None)
@given(
    value=st.recursive(
        _LEAF | _BAD,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=8,
    )
)
def test_a_client_wide_mapping_is_copied_as_json_or_refused_as_the_callers_mistake(
    value: Any,
) -> None:
    try:  # the oracle: a dict that json.dumps takes strictly
        expected = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        expected = None
    if value is not None and not isinstance(value, dict):
        expected = None
    if value is not None and expected is None:
        with pytest.raises(CallerError, match="client_info"):
            config_module.json_snapshot("client_info", value)
        return
    copy = config_module.json_snapshot("client_info", value)
    assert copy == expected
    assert copy is None or copy is not value
