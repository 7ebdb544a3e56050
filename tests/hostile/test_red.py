"""Red team (issue 10, adversarial review): attacks that do not fit a ``Case``, real sockets.

Written by someone who did not write the code under attack.  Each test drives the public
API of every backend (the suite's client host, one forked child per run) and checks the
promise it attacks: only ``ConnectionFailed`` / ``Unauthorized`` / ``ServerAnswered`` leave
the API, nothing hangs past a deadline + ``SLACK``, and, at the default 8 MiB budget,
peak RSS stays within ``6 x max_response_bytes`` of the well-behaved run and no other work
item on the loop waits more than ``LAG_GUARD``: in CPU time spent meanwhile always, in wall
time under `make hostile` only (``tests/timing.py``).  A test that shows a defect left unfixed is
``xfail(strict=True)`` with the defect named.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import trio

from sansmcp.core.limits import Limits

from ..timing import assert_within
from . import red_attacks as red
from .answers import Request, dumps, json_answer, result
from .cases import LIMITS, SLACK, Case, Expect, State, h1, h2s
from .harness import ClientHost, measurement, run_case
from .server_h1 import H1Reply

BUDGET = Limits().max_response_bytes
SIZE = BUDGET - (64 << 10)  # under the budget with the negotiation's bytes and the heads
RSS_CAP_KIB = 6 * BUDGET // 1024
LAG_GUARD = 1.0  # seconds: 5x the 200 ms target, as in test_parsed_size.py
DEFAULTS = {
    **LIMITS,
    "max_response_bytes": BUDGET,
    "dial_timeout": 15.0,
    "connect_timeout": 15.0,
    "list_timeout": 15.0,
    "call_timeout": 15.0,
    "max_tool_bytes": Limits().max_tool_bytes,
}
C = "tools/call"
L = "tools/list"


def _case(
    name: str,
    attacks: Mapping[str, Any],
    *,
    ops: tuple[str, ...],
    limits: Mapping[str, Any] | None = None,
) -> Case:
    return Case(
        name,
        "red team",
        "see test_red.py",
        h1(attacks),
        Expect("ok"),
        ops=ops,
        limits=dict(DEFAULTS if limits is None else limits),
        client={"ticker": True},
    )


def _reports(
    client_host: ClientHost,
    case: Case,
    baselines: dict[tuple[str, str], int],
    measurements: list[dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Run ``case`` on every backend; check nothing escaped, hung, crashed or warned."""
    out = {}
    for backend, (report, stats, _) in run_case(client_host, case).items():
        baseline = baselines[(backend, case.proto)]
        measurements.append(measurement(case, backend, report, stats, baseline))
        assert not report.get("hung") and not report.get("crashed"), (backend, report)
        assert "escaped" not in report, (backend, report["escaped"])
        for marker in ("Traceback", "Exception ignored", "Warning:"):
            assert marker not in report["stderr"], (backend, report["stderr"])
        out[backend] = {**report, "grew_kib": report["maxrss_kib"] - baseline}
    return out


def _failures(reports: dict[str, dict[str, Any]], check: Callable[[dict[str, Any]], None]) -> str:
    failures = []
    for backend, report in reports.items():
        try:
            check(report)
        except AssertionError as exc:
            failures.append(f"[{backend}] {exc}")
    return "\n".join(failures)


# ---- parsed size of a call result at the default budget ---------------------------------


def _call_text(inner: bytes) -> Any:
    """tools/call answered with one text block whose JSON string body is ``inner``."""

    async def attack(request: Request, reply: H1Reply, state: State) -> None:
        head = (
            b'{"jsonrpc":"2.0","id":%d,"result":{"resultType":"complete","isError":false,'
            b'"content":[{"type":"text","text":"' % request.rpc_id
        )
        await reply.answer(json_answer(head + inner + b'"}]}}'))

    return attack


def _call_value(make: Callable[[int], bytes]) -> Any:
    """tools/call answered with the result ``make(rpc_id)`` (a JSON object's bytes)."""

    async def attack(request: Request, reply: H1Reply, state: State) -> None:
        await reply.answer(json_answer(make(request.rpc_id)))

    return attack


def _structured(rpc_id: int) -> bytes:
    """A call result whose structuredContent holds 60,000 members of 100-byte strings: just
    under max_json_values, the rest of the budget in values (no prose to pad it)."""
    members = b",".join(b'"k%06d":"%s"' % (i, b"v" * 100) for i in range(60_000))
    body = result(rpc_id, {"resultType": "complete", "isError": False, "content": []})
    text = dumps(body)[:-2] + b',"structuredContent":{' + members + b"}}}"
    return text


def _image(rpc_id: int) -> bytes:
    """One image block of ~7.9 MiB of base64 (decoded: ~5.9 MiB)."""
    data = b"QUJD" * ((SIZE - 300) // 4)
    head = b'{"jsonrpc":"2.0","id":%d,"result":{"resultType":"complete","isError":false,' % rpc_id
    return head + b'"content":[{"type":"image","mimeType":"image/png","data":"' + data + b'"}]}}'


def _duplicates(rpc_id: int) -> bytes:
    """structuredContent with one key repeated 100,000 times (the last one wins)."""
    members = b",".join([b'"a":"%s"' % (b"x" * 60)] * 100_000)
    head = b'{"jsonrpc":"2.0","id":%d,"result":{"resultType":"complete","isError":false,' % rpc_id
    return head + b'"content":[],"structuredContent":{' + members + b"}}}"


TEXT = SIZE - 400
CALL_SHAPES = {
    # \u0000 escapes: 6 bytes each, one character each
    "red_call_nul_escapes": _call_text(b"\\u0000" * (TEXT // 6)),
    # escaped surrogate pairs: 12 bytes each, one astral character each
    "red_call_escaped_astral_pairs": _call_text(b"\\ud83d\\ude00" * (TEXT // 12)),
    "red_call_structured_content": _call_value(_structured),
    "red_call_base64_image": _call_value(_image),
    "red_call_duplicate_keys": _call_value(_duplicates),
}


@pytest.mark.parametrize("name", list(CALL_SHAPES))
def test_call_result_shapes_at_the_default_budget(
    name: str,
    client_host: ClientHost,
    baselines: dict[tuple[str, str], int],
    measurements: list[dict[str, Any]],
) -> None:
    """Call results (the parsed-size cases tried listings): accepted or refused classified,
    peak RSS <= 6 x budget over the well-behaved run, no tick on the loop > 1 s late."""
    case = _case(name, {C: CALL_SHAPES[name]}, ops=("list", "call"))
    reports = _reports(client_host, case, baselines, measurements)

    def check(report: dict[str, Any]) -> None:
        assert report["ok"] or report["error"]["class"] == "ServerAnswered", report.get("error")
        assert report["grew_kib"] <= RSS_CAP_KIB, f"peak RSS grew {report['grew_kib']} KiB"
        assert_within(report["loop_lag_max"], report["loop_cpu_max"], LAG_GUARD, "a loop stall")

    failures = _failures(reports, check)
    assert not failures, failures


def test_lone_surrogate_escapes_are_refused_at_the_default_budget(
    client_host: ClientHost,
    baselines: dict[tuple[str, str], int],
    measurements: list[dict[str, Any]],
) -> None:
    """A call result of ~8 MiB of lone surrogate escapes (``"\\ud800"``): refused as invalid
    JSON naming the first escape (I-JSON, RFC 7493 s2.1; it used to be accepted), within the
    RSS cap and without stalling the loop."""
    case = _case(
        "red_call_lone_surrogates", {C: _call_text(b"\\ud800" * (TEXT // 6))}, ops=("list", "call")
    )
    reports = _reports(client_host, case, baselines, measurements)

    def check(report: dict[str, Any]) -> None:
        error = report["error"]
        assert (error["class"], error["cause"]) == ("ConnectionFailed", "not_jsonrpc"), error
        assert "the escape \\ud800 at line 1 column " in error["message"], error
        assert "is a lone UTF-16 surrogate" in error["message"], error
        assert report["grew_kib"] <= RSS_CAP_KIB, f"peak RSS grew {report['grew_kib']} KiB"
        assert_within(report["loop_lag_max"], report["loop_cpu_max"], LAG_GUARD, "a loop stall")

    failures = _failures(reports, check)
    assert not failures, failures


ASTRAL = "\U0001f600".encode()
WIDENED = {
    # one raw astral character, then ASCII: the whole decoded text is 4 bytes a character
    # (32 MiB) and so is the string built from it (32 MiB): peak ~ +70 MiB
    "red_call_raw_astral_then_ascii": _call_text(ASTRAL + b"a" * (TEXT - 4)),
    # the same in a tool's description: skipped (max_tool_bytes), but decoded first
    "red_list_raw_astral_then_ascii": None,
}


async def _listing_astral(request: Request, reply: H1Reply, state: State) -> None:
    description = ASTRAL + b"a" * (TEXT - 4)
    body = (
        b'{"jsonrpc":"2.0","id":%d,"result":{"resultType":"complete","tools":[{"name":"w",'
        b'"inputSchema":{},"description":"' % request.rpc_id
    )
    await reply.answer(json_answer(body + description + b'"}]}}'))


@pytest.mark.parametrize("name", list(WIDENED))
def test_one_astral_character_widens_the_whole_body(
    name: str,
    client_host: ClientHost,
    baselines: dict[tuple[str, str], int],
    measurements: list[dict[str, Any]],
) -> None:
    if name.startswith("red_list"):
        case = _case(name, {L: _listing_astral}, ops=("list",))
    else:
        case = _case(name, {C: WIDENED[name]}, ops=("list", "call"))
    reports = _reports(client_host, case, baselines, measurements)

    def check(report: dict[str, Any]) -> None:
        # refused before decoding: its text would take 4 bytes a character, over 3 x the
        # budget (it grew +64 MiB, over the 6 x cap, while it was decoded)
        error = report["error"]
        assert (error["class"], error["cause"]) == ("ConnectionFailed", "budget"), error
        assert (error["bound"], error["limit"]) == ("max_response_bytes", 3 * BUDGET), error
        assert report["grew_kib"] <= RSS_CAP_KIB, f"peak RSS grew {report['grew_kib']} KiB"

    failures = _failures(reports, check)
    assert not failures, failures


# ---- HTTP/1.1 one-byte chunks: the twin of h2_tiny_data -----------------------------------


@pytest.mark.parametrize("content_type", ["text/event-stream", "application/json"])
def test_one_byte_chunks_forever(
    content_type: str,
    client_host: ClientHost,
    baselines: dict[tuple[str, str], int],
    measurements: list[dict[str, Any]],
) -> None:
    """A chunked body of one-byte chunks forever, at the suite's limits (1 MiB budget, 1 s
    per-request cap, 2 s list_timeout): the twin of h2_tiny_data, stopped by
    ``h1_max_small_chunks`` (4,096, about 25 KB in), and no other work item on the loop
    waits more than 1 s. Before that bound (and before the asyncio reader yielded between
    reads) the loop stalled 1.4-3.4 s on asyncio and the request cap fired only after
    list_timeout had passed."""
    name = "red_h1_tiny_chunks_" + content_type.partition("/")[2]
    case = _case(name, {L: red.tiny_chunks_forever(content_type)}, ops=("list",), limits=LIMITS)
    reports = _reports(client_host, case, baselines, measurements)

    def check(report: dict[str, Any]) -> None:
        error = report["error"]
        assert error["class"] == "ConnectionFailed", error
        assert (error["cause"], error["bound"]) == ("budget", "h1_max_small_chunks"), error
        assert (error["limit"], error["observed"]) == (4_096, 4_097), error
        assert_within(report["elapsed"], report["cpu"], LIMITS["dial_timeout"] + SLACK, "list")
        assert_within(report["loop_lag_max"], report["loop_cpu_max"], LAG_GUARD, "a loop stall")

    failures = _failures(reports, check)
    assert not failures, failures


# ---- Limits edge values that validate -------------------------------------------------------


def test_largest_http2_settings_limits_work_over_h2c(
    client_host: ClientHost,
    baselines: dict[tuple[str, str], int],
    measurements: list[dict[str, Any]],
) -> None:
    """``max_header_bytes`` / ``h2_max_concurrent_streams`` at 2**32 validated and then raised
    ``struct.error`` out of ``connect`` over h2 (both backends); they are refused now (see
    tests/core/test_red_core.py), and the largest accepted value, 2**32 - 1, works."""
    top = {"max_header_bytes": 2**32 - 1, "h2_max_concurrent_streams": 2**32 - 1}
    case = dataclasses.replace(
        _case("red_h2_settings_at_32_bits", {}, ops=("list", "call"), limits={**LIMITS, **top}),
        server=h2s({}),
        proto="h2",
        client={},
    )
    reports = _reports(client_host, case, baselines, measurements)
    failures = _failures(reports, lambda report: _ok(report, ["echo"]))
    assert not failures, failures


def _ok(report: dict[str, Any], tools: list[str]) -> None:
    assert report["ok"], report.get("error")
    assert report["ops"][1]["tools"] == tools, report["ops"]


# ---- the resolver hook: values the property test's strategies do not draw ----------------


class _RaisingText(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ itself fails")


def _endless() -> Iterator[str]:
    while True:
        yield "127.0.0.1"


def _then_raise() -> Iterator[str]:
    yield "93.184.216.34"
    raise OSError("the embedder's directory went away mid-answer")


def _sync_hook(host: str, port: int) -> list[str]:  # not a coroutine function
    return ["127.0.0.1"]


async def _answer(value: Callable[[], Any]) -> Any:
    return value()


HOOK_VALUES: dict[str, Callable[[str, int], Any]] = {
    # a plain function: `await` of a list raises TypeError inside the adapter
    "sync_function": _sync_hook,
    # a dict iterates its keys: str literals, vetted like a list
    "dict_of_loopback": lambda host, port: _answer(lambda: {"127.0.0.1": 1, "::1": 2}),
    # a scope id on loopback is dropped, and ::1 judged as loopback
    "scoped_loopback": lambda host, port: _answer(lambda: ["::1%25lo", "::1%lo"]),
    "mapped_loopback": lambda host, port: _answer(lambda: ["::ffff:127.0.0.1"]),
    "nat64_loopback": lambda host, port: _answer(lambda: ["64:ff9b::7f00:1"]),
    "endless_generator": lambda host, port: _answer(_endless),
    "raises_mid_iteration": lambda host, port: _answer(_then_raise),
    "exception_without_text": lambda host, port: _answer(
        lambda: (_ for _ in ()).throw(_RaisingText())
    ),
    "a_str_subclass": lambda host, port: _answer(lambda: [type("S", (str,), {})("8.8.8.8")]),
}


@pytest.mark.parametrize("backend", ["asyncio", "trio", "sync"])
@pytest.mark.parametrize("name", list(HOOK_VALUES))
def test_resolver_hook_values_never_dial_loopback(name: str, backend: str) -> None:
    """With ``allow_loopback=False``, no hook value reaches a loopback listener, and the only
    error is ``ConnectionFailed`` (``dns`` or ``refused_address``)."""
    with _sentinel() as (port, pending):
        url = f"http://mix.test:{port}/mcp"
        outcome = _run_backend(backend, url, HOOK_VALUES[name])
        assert outcome in ("dns", "refused_address"), outcome
        assert pending() == 0, "a loopback listener was dialled"


@contextlib.contextmanager
def _sentinel() -> Iterator[tuple[int, Callable[[], int]]]:
    """Listeners on 127.0.0.1 and (when the host has it) ::1 at one port that never answer;
    ``pending()`` counts the connections that reached them."""
    listeners = [socket.socket(socket.AF_INET, socket.SOCK_STREAM)]
    listeners[0].bind(("127.0.0.1", 0))
    port = listeners[0].getsockname()[1]
    v6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        v6.bind(("::1", port))
        listeners.append(v6)
    except OSError:
        v6.close()
    for listener in listeners:
        listener.listen(64)
        listener.setblocking(False)
    seen = [0]

    def pending() -> int:
        for listener in listeners:
            while True:
                try:
                    conn, _ = listener.accept()
                except BlockingIOError:
                    break
                conn.close()
                seen[0] += 1
        return seen[0]

    try:
        yield port, pending
    finally:
        for listener in listeners:
            listener.close()


def _client_class(backend: str) -> Any:
    """The backend's ``Client``; "sync": the blocking adapter behind the e2e suite's shim."""
    from sansmcp.io_adapters import asyncio as asyncio_adapter
    from sansmcp.io_adapters import trio as trio_adapter
    from tests.e2e import sync_shim

    return {"asyncio": asyncio_adapter, "trio": trio_adapter, "sync": sync_shim}[backend].Client


def _run_backend(backend: str, url: str, hook: Callable[[str, int], Any]) -> str:
    """Connect with ``hook`` and ``allow_loopback=False``: the ConnectionFailed cause."""
    from sansmcp import Config, ConnectionFailed

    client_cls: Any = _client_class(backend)

    async def main() -> str:
        limits = Limits(dial_timeout=2.0, connect_timeout=2.0)
        async with client_cls(allow_loopback=False, resolver=hook, limits=limits) as client:
            try:
                async with client.connect(Config(url=url)):
                    return "connected"
            except ConnectionFailed as exc:
                return str(exc.cause)

    if backend == "trio":
        return trio.run(main)
    return asyncio.run(main())


# ---- caller mistakes: CallerError before any I/O, and the Conn stays usable ---------------


@pytest.mark.parametrize("backend", ["asyncio", "trio", "sync"])
def test_str_arguments_are_a_caller_error_and_the_conn_stays_usable(backend: str) -> None:
    """``call_tool("echo", '{"text": "hi"}')`` raised ``TypeError``; every later operation on
    the Conn, and its close, then raised ``RuntimeError("a Conn runs one operation at a
    time")``."""
    from sansmcp import CallerError, Config

    from .serving import ServerThread

    client_cls: Any = _client_class(backend)
    seen: list[str] = []

    async def main(port: int) -> None:
        url = f"http://127.0.0.1:{port}/mcp"
        async with (
            client_cls(allow_loopback=True) as client,
            client.connect(Config(url=url)) as conn,
        ):
            for wrong in ('{"text": "hi"}', None, {"text": "hi"}):
                with pytest.raises(CallerError, match="tool arguments must be bytes"):
                    await conn.call_tool("echo", wrong)
            result = await conn.call_tool("echo", b'{"text": "hi"}')
            seen.append(result.content[0].text or "")
            seen.append(",".join(tool.name for tool in await conn.list_tools()))

    with ServerThread(h1({})()) as server:
        if backend == "trio":
            trio.run(main, server.port)
        else:  # asyncio, and the sync adapter behind its shim
            asyncio.run(main(server.port))
        counts = server.stats.count()
    assert seen == ['{"text": "hi"}', "echo"], seen  # the server echoes the arguments
    assert counts.get(C) == 1, counts  # the refused calls sent nothing


@pytest.mark.parametrize("backend", ["asyncio", "trio", "sync"])
def test_config_mistakes_are_caller_errors_before_any_request(backend: str) -> None:
    """A header value with a leading space raised h11's ``LocalProtocolError`` out of
    ``connect``; a NaN in ``meta`` raised ``JsonError`` mid-operation and left the Conn busy
    (its close raised ``RuntimeError``).  Both are ``CallerError`` now, with no request."""
    from sansmcp import CallerError, Config

    from .serving import ServerThread

    client_cls: Any = _client_class(backend)

    async def main(port: int) -> None:
        url = f"http://127.0.0.1:{port}/mcp"
        async with client_cls(allow_loopback=True) as client:
            for config in (
                Config(url=url, headers={"X-Tenant": " acme"}),
                Config(url=url, meta={"traceparent": float("nan")}),
            ):
                with pytest.raises(CallerError):
                    async with client.connect(config):
                        raise AssertionError("connected")
            async with client.connect(Config(url=url)) as conn:
                assert [tool.name for tool in await conn.list_tools()] == ["echo"]

    with ServerThread(h1({})()) as server:
        if backend == "trio":
            trio.run(main, server.port)
        else:  # asyncio, and the sync adapter behind its shim
            asyncio.run(main(server.port))
        counts = server.stats.count()
    assert counts == {"server/discover": 1, L: 1}, counts
