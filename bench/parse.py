"""CPU to parse and validate one tool listing: ``python -m bench.parse BODY_FILE [--quick]``.

``BODY_FILE`` holds the JSON body of a modern ``tools/list`` response (id 1) as the
official server sent it.  Measured in one process, each for the same number of rounds:

* ``json.loads`` -- the floor;
* ``sansmcp core: parse + validate`` -- ``parse_json`` and ``validate_tool`` on every
  entry (what the listing loop of the MCP machine does per page);
* ``sansmcp core: whole exchange`` -- a fresh ``McpMachine`` (warm era hint) lists
  tools and is fed the response as exchange events: request building, budget
  accounting, JSON-RPC matching, parse, validation, ``Tool`` values;
* ``SDK: pydantic`` -- what the official client does with a JSON response body:
  ``jsonrpc_message_adapter.validate_json``, ``validate_server_result`` for the
  negotiated revision, ``ListToolsResult.model_validate``.

Prints one JSON line: milliseconds of process CPU per listing, per variant.
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


def variants(body: bytes) -> dict[str, Callable[[], Any]]:
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher  # noqa: F401  (loads as the SDK does)
    from mcp_types import ListToolsResult, jsonrpc_message_adapter
    from mcp_types import methods as sdk_methods

    from sansmcp.core.config import Config, conn_settings
    from sansmcp.core.http import DataReceived, ResponseEnded, ResponseReceived
    from sansmcp.core.jsonvalue import parse_json
    from sansmcp.core.limits import Limits
    from sansmcp.core.mcp import McpMachine, StartExchange, ToolsListed
    from sansmcp.core.tools import Tool, validate_tool

    limits = Limits()
    expected = len(json.loads(body)["result"]["tools"])

    def floor() -> Any:
        return json.loads(body)

    def sansmcp_validate() -> Any:
        message = parse_json(body, max_depth=limits.max_json_depth)
        tools = [
            validate_tool(i, raw, modern=True, max_tool_bytes=limits.max_tool_bytes)
            for i, raw in enumerate(message["result"]["tools"])
        ]
        assert len(tools) == expected and isinstance(tools[-1], Tool)
        return tools

    settings = conn_settings(
        Config(url="http://127.0.0.1:1/mcp"),
        client_info=None,
        capabilities=None,
        era_hint="2026-07-28",
    )
    head = ((b"content-type", b"application/json"),)

    def sansmcp_exchange() -> Any:
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

    def sdk() -> Any:
        message = jsonrpc_message_adapter.validate_json(body, by_name=False)
        raw = message.result  # type: ignore[union-attr]
        sdk_methods.validate_server_result("tools/list", "2026-07-28", raw)
        result = ListToolsResult.model_validate(raw, by_name=False)
        assert len(result.tools) == expected
        return result

    return {
        "json.loads (floor)": floor,
        "sansmcp core: parse + validate": sansmcp_validate,
        "sansmcp core: whole exchange": sansmcp_exchange,
        "SDK: pydantic validate": sdk,
    }


def main() -> None:
    body = Path(sys.argv[1]).read_bytes()
    rounds = 5 if "--quick" in sys.argv else 30
    tools = len(json.loads(body)["result"]["tools"])
    out: dict[str, Any] = {"tools": tools, "body_bytes": len(body), "rounds": rounds, "ms": {}}
    for name, fn in variants(body).items():
        try:
            out["ms"][name] = _measure(fn, rounds)
        except Exception as exc:
            out["ms"][name] = None
            out.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
