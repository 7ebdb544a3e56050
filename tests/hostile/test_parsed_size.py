"""Parsed size at the default 8 MiB budget (issue 10 C), every backend, real sockets.

The suite's cases run at a 1 MiB budget under the "16 MiB over a well-behaved run"
rule (the ``parsed_*`` block of ``cases.py``).  These run the shapes at the default
``max_response_bytes`` (8 MiB) and default parsed-size bounds, with another task on the
client's loop ticking every 5 ms, and check:

* the outcome (refused by ``max_json_values`` before decoding, or listed);
* peak RSS at most ``6 x max_response_bytes`` over the well-behaved run's;
* one generous guard on the loop: no tick is more than 1 s late (5x the 200 ms target),
  counted in CPU time the client spent meanwhile (always) and in wall time (under
  ``make hostile`` only: load stretches wall time, see ``tests/timing.py``).

The two event-stream shapes (5-8 s each) run under ``make hostile`` only.  The
lateness and RSS figures go to ``SANSMCP_HOSTILE_REPORT`` (``loop_lag_ms``).  A
control proves the RSS rule of the 1 MiB cases has teeth here: with ``max_json_values``
raised out of the way, the ``[{},{},...]`` body goes past the 16 MiB margin.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import pytest

from sansmcp.core.limits import Limits

from ..timing import assert_within
from .answers import (
    json_answer,
    listing_body,
    repeated_entries,
    result,
    sse_answer,
    sse_event,
    tiny_events,
    tool,
)
from .cases import LIMITS, RSS_MARGIN_KIB, Case, Expect, State, h1
from .harness import ClientHost, measurement, run_case
from .server_h1 import H1Reply

MIB = 1 << 20
BUDGET = Limits().max_response_bytes
SIZE = BUDGET - (64 << 10)  # under the budget with the negotiation's bytes and the heads
DEFAULTS = {
    **LIMITS,
    "max_response_bytes": BUDGET,
    "dial_timeout": 15.0,
    "connect_timeout": 15.0,
    "list_timeout": 15.0,
    "max_tool_bytes": Limits().max_tool_bytes,
}
LAG_GUARD = 1.0  # seconds: 5x the 200 ms target
L = "tools/list"


def chain_padded(values: int, size: int) -> bytes:
    """One-key objects (~190 bytes of heap per counted value) up to ``values``, padded
    with one long string to ``size``: the costliest body the default bound accepts."""
    depth = 400
    unit = b'{"":' * depth + b"0" + b"}" * depth
    units = b",".join([unit] * (values // (depth + 1)))
    head = b'{"name":"pad","description":"'
    tail = b'","inputSchema":{"type":"object","x":[' + units + b"]}}"
    return head + b"x" * (size - len(head) - len(tail) - 200) + tail


def rich_tools(count: int) -> bytes:
    """``count`` tools of about 7 KB each: 24 documented parameters and a nested object."""
    out = []
    for index in range(count):
        props: dict[str, Any] = {
            f"param_{p}": {
                "type": ["string", "integer", "number", "boolean"][p % 4],
                "description": f"Parameter {p} of tool {index}: controls how the operation "
                "treats its input; see the documentation for the accepted forms and examples.",
                **({"enum": [f"value_{k}" for k in range(8)]} if p % 4 == 0 else {}),
            }
            for p in range(24)
        }
        entry = tool(
            f"tool_{index}",
            description="Does one thing well, and says so at length. " * 25,
            inputSchema={"type": "object", "properties": props, "required": ["param_0"]},
        )
        out.append(json.dumps(entry, separators=(",", ":")).encode())
    return b",".join(out)


def listing(entries: bytes) -> Any:
    async def attack(request: Any, reply: H1Reply, state: State) -> None:
        await reply.answer(json_answer(listing_body(request.rpc_id, entries)))

    return attack


async def tiny_events_8mib(request: Any, reply: H1Reply, state: State) -> None:
    answer = sse_event(result(request.rpc_id, {"resultType": "complete", "tools": [tool("a")]}))
    events = tiny_events((SIZE - len(answer)) // 58)
    await reply.answer(sse_answer(events + answer))


def short_data_lines(size: int) -> Any:
    """One event of ``data:NN`` lines (8 bytes each) filling ``size``: not JSON once joined."""

    async def attack(request: Any, reply: H1Reply, state: State) -> None:
        lines = b"".join(b"data:%02d\n" % (i % 100) for i in range(size // 8 - 1))
        await reply.answer(sse_answer(lines + b"\n"))

    return attack


def case(name: str, attack: Any, expect: Expect, **limits: Any) -> Case:
    return Case(
        name,
        "parsed size at the default budget",
        "see test_parsed_size.py",
        h1({L: attack}),
        expect,
        ops=("list",),
        limits={**DEFAULTS, **limits},
        client={"ticker": True},
    )


VALUES = Limits().max_json_values
REFUSED = Expect(
    "ConnectionFailed",
    failed_op="list",
    attrs={"cause": "budget", "bound": "max_json_values", "limit": VALUES},
    over_limit=True,
)
LISTED = Expect("ok")
NOT_JSON = Expect("ConnectionFailed", failed_op="list", attrs={"cause": "not_jsonrpc"})
SHAPES = [
    case("default_empty_objects", listing(repeated_entries(b"{}", SIZE)), REFUSED),
    case("default_floats", listing(repeated_entries(b"0.1", SIZE)), REFUSED),
    case("default_worst_accepted", listing(chain_padded(VALUES - 1500, SIZE)), LISTED),
    case("default_rich_480_tools", listing(rich_tools(480)), LISTED),
]
if os.environ.get("SANSMCP_HOSTILE_FULL") == "1":  # 5-8 s each: `make hostile` only
    SHAPES += [
        case("default_tiny_sse_events", tiny_events_8mib, LISTED),
        case("default_sse_short_data_lines", short_data_lines(SIZE), NOT_JSON),
    ]


def _run(
    client_host: ClientHost,
    shape: Case,
    baselines: dict[tuple[str, str], int],
    measurements: list[dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    out = {}
    for backend, (report, stats, _) in run_case(client_host, shape).items():
        baseline = baselines[(backend, shape.proto)]
        measurements.append(measurement(shape, backend, report, stats, baseline))
        assert not report.get("hung") and not report.get("crashed"), report
        assert "escaped" not in report, report["escaped"]
        assert "Traceback" not in report["stderr"], report["stderr"]
        out[backend] = {**report, "baseline_kib": baseline}
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_default_budget_shapes(
    shape: Case,
    client_host: ClientHost,
    baselines: dict[tuple[str, str], int],
    measurements: list[dict[str, Any]],
) -> None:
    failures = []
    for backend, report in _run(client_host, shape, baselines, measurements).items():
        try:
            expect = shape.expect
            if expect.outcome == "ok":
                assert report["ok"], report.get("error")
            else:
                error = report["error"]
                assert error["class"] == expect.outcome, error
                for name, value in expect.attrs.items():
                    assert error.get(name) == value, (name, error)
                if expect.over_limit:
                    assert error["observed"] > error["limit"], error
            grew = report["maxrss_kib"] - report["baseline_kib"]
            assert grew <= 6 * BUDGET // 1024, f"peak RSS grew {grew} KiB (> 6 x budget)"
            assert_within(report["loop_lag_max"], report["loop_cpu_max"], LAG_GUARD, "a loop stall")
        except AssertionError as exc:
            failures.append(f"[{backend}] {exc}")
    assert not failures, "\n".join(failures)


def test_max_json_values_is_what_keeps_the_rss_down(
    client_host: ClientHost,
    baselines: dict[tuple[str, str], int],
    measurements: list[dict[str, Any]],
) -> None:
    """Control: at the suite's 1 MiB budget, ``[{},{},...]`` with the value bound raised out
    of the way is decoded, and its peak RSS goes past the 16 MiB margin."""
    shape = case(
        "control_empty_objects_unbounded",
        listing(repeated_entries(b"{}", (1 << 20) - (16 << 10))),
        Expect("ServerAnswered"),
        max_response_bytes=1 << 20,
        max_json_values=10**8,
        max_tools=10**8,
    )
    shape = dataclasses.replace(shape, client={})
    for backend, report in _run(client_host, shape, baselines, measurements).items():
        grew = report["maxrss_kib"] - report["baseline_kib"]
        assert grew > RSS_MARGIN_KIB, f"{backend}: grew only {grew} KiB"
