"""CPU to parse and validate one tool listing: ``python -m bench.parse BODY_FILE [--quick]``.

``BODY_FILE`` holds the JSON body of a modern ``tools/list`` response (id 1) as the
official server sent it.  Measured in one process, each for the same number of rounds:

* ``json.loads`` -- the floor;
* ``sansmcp core: parse + validate`` -- ``listing.parse_page`` (the body's bounds,
  checks and typed decode) and ``listing.validate_entry`` on every entry (what the
  listing loop of the MCP machine does per page);
* ``sansmcp core: whole exchange`` -- a fresh ``McpMachine`` (warm era hint) lists
  tools and is fed the response as exchange events: request building, budget
  accounting, JSON-RPC matching, parse, validation, ``Tool`` values;
* ``SDK: pydantic`` -- what the official client does with a JSON response body:
  ``jsonrpc_message_adapter.validate_json``, ``validate_server_result`` for the
  negotiated revision, ``ListToolsResult.model_validate``;
* ``prototype`` -- not the library: the first sketch of the typed one-pass msgspec design
  of issue 16 item 2 (see ``_typed_prototype`` for what it does not check), kept for
  comparison with the library's version of it, ``sansmcp.core.listing``.

Each variant runs in its own process (``VARIANT_INDEX``) and prints one JSON line:
milliseconds of process CPU per listing.
"""

from __future__ import annotations

import json
import resource
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measure(fn: Callable[[], Any], rounds: int) -> float:
    for _ in range(2):
        fn()
    start = _cpu()
    for _ in range(rounds):
        fn()
    return 1000 * (_cpu() - start) / rounds


def _floor(body: bytes, expected: int) -> Callable[[], Any]:
    def run() -> Any:
        return json.loads(body)

    return run


def _sansmcp_validate(body: bytes, expected: int) -> Callable[[], Any]:
    from sansmcp.core.limits import Limits
    from sansmcp.core.listing import parse_page, validate_entry
    from sansmcp.core.tools import Tool

    limits = Limits()

    def run() -> Any:
        message = parse_page(body, limits)
        tools = [
            validate_entry(i, raw, modern=True, max_tool_bytes=limits.max_tool_bytes)
            for i, raw in enumerate(message["result"]["tools"])
        ]
        assert len(tools) == expected and isinstance(tools[-1], Tool)
        return tools

    return run


def _sansmcp_exchange(body: bytes, expected: int) -> Callable[[], Any]:
    from sansmcp.core.config import Config, conn_settings
    from sansmcp.core.http import DataReceived, ResponseEnded, ResponseReceived
    from sansmcp.core.limits import Limits
    from sansmcp.core.mcp import McpMachine, StartExchange, ToolsListed

    limits = Limits()
    settings = conn_settings(
        Config(url="http://127.0.0.1:1/mcp"),
        client_info=None,
        capabilities=None,
        era_hint="2026-07-28",
    )
    head = ((b"content-type", b"application/json"),)

    def run() -> Any:
        machine = McpMachine(settings, limits=limits)
        machine.connect(now=0.0)
        while machine.next_output() is not None:
            pass
        machine.list_tools(now=0.0)
        start = machine.next_output()
        assert isinstance(start, StartExchange)
        xid = start.exchange_id
        machine.receive(
            ResponseReceived(exchange_id=xid, status=200, headers=head, raw_size=120), now=0.0
        )
        machine.receive(DataReceived(exchange_id=xid, data=body), now=0.0)
        machine.receive(ResponseEnded(exchange_id=xid), now=0.0)
        listed = machine.next_output()
        assert isinstance(listed, ToolsListed) and len(listed.tools) == expected, listed
        return listed

    return run


def _sdk(body: bytes, expected: int) -> Callable[[], Any]:
    import mcp.client  # noqa: F401  (the process holds what an SDK client process holds)
    from mcp_types import ListToolsResult, jsonrpc_message_adapter
    from mcp_types import methods as sdk_methods

    def run() -> Any:
        message = jsonrpc_message_adapter.validate_json(body, by_name=False)
        raw = message.result  # type: ignore[union-attr]
        sdk_methods.validate_server_result("tools/list", "2026-07-28", raw)
        result = ListToolsResult.model_validate(raw, by_name=False)
        assert len(result.tools) == expected
        return result

    return run


def _typed_prototype(body: bytes, expected: int) -> Callable[[], Any]:
    """Not the library: what the issue-16 design (one typed msgspec pass, each schema kept
    as the server's bytes) costs here.  It checks what validate_tool checks on this
    body's shape (name, description, title, the schema roots' ``type``, a bracket bound on
    each schema's depth, the size bound, x-mcp-header only where the bytes hold it) and
    builds the same Tool values; it does *not* yet give today's exact refusals (numbers
    over the digit limit or overflowing a double inside a skipped schema, lone
    surrogates, duplicate keys kept in the bytes, whitespace counted in the size), which
    is what a library version must add.  Needs ``pip install msgspec``."""
    import msgspec

    from sansmcp.core.limits import Limits
    from sansmcp.core.tools import Tool, header_params_of

    limits = Limits()
    raw_default = msgspec.Raw(b"")

    # defstruct: this module's annotations are strings, which msgspec would resolve in
    # the module's globals, where a local class is not
    entry_fields = [
        ("name", Any, None),
        ("description", Any, ""),
        ("title", Any, None),
        ("inputSchema", msgspec.Raw, raw_default),
        ("outputSchema", msgspec.Raw, raw_default),
        ("annotations", Any, None),
        ("execution", Any, None),
    ]
    entry = msgspec.defstruct("Entry", entry_fields)
    result = msgspec.defstruct("Result", [("tools", list[entry])])
    message = msgspec.defstruct("Message", [("result", result)])
    head_type = msgspec.defstruct("Head", [("type", Any, "object")])

    page = msgspec.json.Decoder(message).decode
    head = msgspec.json.Decoder(head_type).decode
    depth_left = limits.max_json_depth - 4  # message > result > tools > entry > schema

    def run() -> Any:
        tools = []
        for entry in page(body).result.tools:
            name, description, title = entry.name, entry.description, entry.title
            assert isinstance(name, str) and name and isinstance(description, str)
            schema = bytes(entry.inputSchema)
            assert head(schema).type == "object"
            assert schema.count(b"[") + schema.count(b"{") <= depth_left
            output = bytes(entry.outputSchema) or None
            if output is not None:
                assert isinstance(head(output), head_type)
            size = len(name) + len(description) + len(schema) + len(output or b"")
            assert size <= limits.max_tool_bytes
            params = ()
            if b'"x-mcp-header"' in schema:
                params = header_params_of(msgspec.json.decode(schema))
            tools.append(
                Tool(
                    name=name,
                    description=description,
                    input_schema=schema,
                    title=title if isinstance(title, str) else None,
                    output_schema=output,
                    header_params=params,
                )
            )
        assert len(tools) == expected
        return tools

    return run


VARIANTS: dict[str, Callable[[bytes, int], Callable[[], Any]]] = {
    "json.loads (floor)": _floor,
    "sansmcp core: parse + validate": _sansmcp_validate,
    "sansmcp core: whole exchange": _sansmcp_exchange,
    "SDK: pydantic validate": _sdk,
    "prototype (not the library): msgspec typed, raw schemas": _typed_prototype,
}


def _profile(body: bytes, expected: int, rounds: int) -> dict[str, Any]:
    """Where sansmcp's parse + validate spends its CPU (cProfile on process time)."""
    import cProfile
    import pstats
    import time

    run = _sansmcp_validate(body, expected)
    run()
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for _ in range(rounds):
        run()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = [
        {
            "function": f"{filename.rsplit('/', 2)[-2]}/{filename.rsplit('/', 1)[-1]}:{line}({func})"
            if "/" in filename
            else func,
            "calls": nc / rounds,
            "own_ms": 1000 * tt / rounds,
            "cumulative_ms": 1000 * ct / rounds,
        }
        for (filename, line, func), (_cc, nc, tt, ct, _callers) in stats.items()
    ]
    rows.sort(key=lambda r: -r["own_ms"])
    return {"variant": "profile", "rows": rows[:12]}


def main() -> None:
    """``BODY_FILE VARIANT_INDEX|profile [--quick]``: one variant per process, so each pays
    the garbage collector for its own imports only (a process that imported the SDK
    walks far more objects in each full collection)."""
    body = Path(sys.argv[1]).read_bytes()
    rounds = 5 if "--quick" in sys.argv else 30
    expected = len(json.loads(body)["result"]["tools"])
    if sys.argv[2] == "profile":
        print(json.dumps(_profile(body, expected, rounds)), flush=True)
        return
    name = list(VARIANTS)[int(sys.argv[2])]
    out: dict[str, Any] = {"variant": name, "tools": expected, "body_bytes": len(body)}
    out["rounds"] = rounds
    try:
        out["ms"] = _measure(VARIANTS[name](body, expected), rounds)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
