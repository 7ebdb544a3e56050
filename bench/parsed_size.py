"""What one hostile or large ``tools/list`` body costs the core: ``python -m bench.parsed_size``.

For each body shape (8 MiB unless said, the default ``max_response_bytes``), a fresh
process feeds the body to a fresh ``McpMachine`` as exchange events (64 KiB
``DataReceived`` chunks, as an adapter would) and reports:

* ``outcome``: the listing's tool count, or the error class and bound;
* ``end_ms``: CPU of the one step that ends the response (count, decode, parse,
  validate) -- the longest any other work item on the loop waits because of it;
* ``rss_mib``: peak RSS over the process's RSS with the body's bytes already held;
* ``loads_ms`` / ``loads_rss_mib``: ``json.loads`` of the same bytes (in another process),
  the floor the issue compares with.

``--json`` prints one JSON line per shape instead of the table.

``--tokens`` measures instead what each kind of structural token can cost: for a 4 MiB
body of each family (one-key objects, chains, distinct keys, short strings, floats, one
wide character in ASCII text, ...), the peak RSS of ``parse_json`` alone (decode + depth
walk) over the body already held, with the counts of ``{ [ , :`` a heap estimate taken
before decoding would weigh.  (Issue 10 C: the figures behind keeping ``max_json_values``.)
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sansmcp.core.limits import Limits

MIB = 1 << 20
HEAD = b'{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","tools":['
TAIL = b"]}}"


def _fill(unit: bytes, size: int) -> bytes:
    count = (size - len(HEAD) - len(TAIL) + 1) // (len(unit) + 1)
    return HEAD + b",".join([unit] * count) + TAIL


def _min_tools(size: int) -> bytes:
    out, total, index = [], len(HEAD) + len(TAIL), 0
    while True:
        unit = b'{"name":"t%d","inputSchema":{"type":"object"}}' % index
        if total + len(unit) + 1 > size:
            return HEAD + b",".join(out) + TAIL
        out.append(unit)
        total += len(unit) + 1
        index += 1


def _rich_tool(index: int) -> dict[str, Any]:
    """A tool of about 7 KB: 24 documented parameters (enums, ranges) and a nested object."""
    props: dict[str, Any] = {}
    for p in range(24):
        prop: dict[str, Any] = {
            "type": ["string", "integer", "number", "boolean"][p % 4],
            "description": f"Parameter {p} of tool {index}: controls how the operation treats "
            "its input; see the documentation for the accepted forms, defaults and examples.",
        }
        if p % 4 == 0:
            prop["enum"] = [f"value_{k}" for k in range(8)]
        if p % 4 == 1:
            prop.update(minimum=0, maximum=1000)
        props[f"param_{p}"] = prop
    props["options"] = {
        "type": "object",
        "properties": {
            f"o{k}": {"type": "array", "items": {"type": "string", "maxLength": 64}}
            for k in range(10)
        },
    }
    return {
        "name": f"tool_{index}",
        "title": f"Tool {index}",
        "description": "Does one thing well, and says so at length. " * 25,
        "inputSchema": {
            "type": "object",
            "properties": props,
            "required": ["param_0", "param_1"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True, "idempotentHint": False},
    }


def _many_tools(count: int, size: int) -> bytes:
    """``count`` valid tools of 12 values each, descriptions filling ``size``: the most
    entries a listing may validate, each with as many values as the bound leaves."""
    pad = "d" * ((size - len(HEAD) - len(TAIL)) // count - 200)
    entries = [
        json.dumps(
            {
                "name": f"t{i}",
                "description": pad,
                "inputSchema": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            },
            separators=(",", ":"),
        ).encode()
        for i in range(count)
    ]
    return HEAD + b",".join(entries) + TAIL


def _prose_tool(index: int) -> dict[str, Any]:
    """A tool of about 7 KB that is mostly documentation: 8 parameters, long descriptions."""
    props = {
        f"param_{p}": {
            "type": "string",
            "description": f"Parameter {p} of tool {index}. "
            + "Explains the field at length. " * 20,
        }
        for p in range(8)
    }
    return {
        "name": f"tool_{index}",
        "description": "Does one thing well, and says so at length. " * 25,
        "inputSchema": {"type": "object", "properties": props, "required": ["param_0"]},
    }


def _prose(tools: int) -> bytes:
    value = {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete", "tools": []}}
    value["result"]["tools"] = [_prose_tool(i) for i in range(tools)]  # type: ignore[index]
    return json.dumps(value, separators=(",", ":")).encode()


def _rich(tools: int) -> bytes:
    value = {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete", "tools": []}}
    value["result"]["tools"] = [_rich_tool(i) for i in range(tools)]  # type: ignore[index]
    return json.dumps(value, separators=(",", ":")).encode()


def _chain_padded(values: int, size: int) -> bytes:
    """The most heap per counted value (one-key objects, ~190 B each), padded with one
    string to ``size`` bytes: the worst body the default bound accepts."""
    depth = 400
    unit = b'{"":' * depth + b"0" + b"}" * depth
    units = b",".join([unit] * (values // (depth + 1)))
    head = HEAD + b'{"name":"pad","description":"'
    middle = b'","inputSchema":{"type":"object","x":[' + units + b"]}}"
    pad = b"x" * (size - len(head) - len(middle) - len(TAIL))
    return head + pad + middle + TAIL


def shapes() -> dict[str, bytes]:
    size = 8 * MIB - 4096  # the budget also pays for the head and the negotiation
    astral = "\U0001f600" * ((size - 200) // 4)
    escaped = "\\ud83d\\ude00" * ((size - 200) // 12)
    return {
        "empty_objects [{},{},...]": _fill(b"{}", size),
        "empty_arrays [[],[],...]": _fill(b"[]", size),
        "floats [0.1,0.1,...]": _fill(b"0.1", size),
        "minimal valid tools": _min_tools(size),
        "one astral string (UTF-8)": HEAD
        + b'{"name":"a","description":"'
        + astral.encode()
        + b'","inputSchema":{"type":"object"}}'
        + TAIL,
        "one astral string (escaped)": HEAD
        + b'{"name":"a","description":"'
        + escaped.encode()
        + b'","inputSchema":{"type":"object"}}'
        + TAIL,
        "ASCII text, one astral char (UTF-8)": HEAD
        + b'{"name":"a","description":"'
        + b"x" * (size - 200)
        + "\U0001f600".encode()
        + b'","inputSchema":{"type":"object"}}'
        + TAIL,
        "ASCII text, one astral char (escaped)": HEAD
        + b'{"name":"a","description":"'
        + b"x" * (size - 200)
        + b"\\ud83d\\ude00"
        + b'","inputSchema":{"type":"object"}}'
        + TAIL,
        "1,000 rich tools": _rich(1000),
        "480 rich tools (under the bound)": _rich(480),
        "1,000 prose-heavy tools": _prose(1000),
        "9,500 valid tools, 13 values each": _many_tools(9_500, size),
        "worst accepted (chain at the bound, padded)": _chain_padded(
            Limits().max_json_values - 1500, 8 * MIB - 4096
        ),
    }


def _token_families() -> dict[str, bytes]:
    size = 4 * MIB

    def fill(unit: bytes) -> bytes:
        return b"[" + b",".join([unit] * (size // (len(unit) + 1))) + b"]"

    def chain(open_: bytes, close: bytes, depth: int) -> bytes:
        return fill(open_ * depth + b"0" + close * depth)

    def one_string(middle: bytes) -> bytes:
        return b'["' + b"a" * (size - 20) + middle + b'"]'

    return {
        "{}": fill(b"{}"),
        "[]": fill(b"[]"),
        "0": fill(b"0"),
        "0.1": fill(b"0.1"),
        "true": fill(b"true"),
        '"a"': fill(b'"a"'),
        '"ab"': fill(b'"ab"'),
        '{"a":0}': fill(b'{"a":0}'),
        "[0]": fill(b"[0]"),
        '{"a":{}}': fill(b'{"a":{}}'),
        'chain {"":{"":...}}': chain(b'{"":', b"}", 400),
        "chain [[[...]]]": chain(b"[", b"]", 400),
        "one object, distinct keys": b"{"
        + b",".join(b'"%x":0' % i for i in range(size // 9))
        + b"}",
        "one-key objects, distinct keys": b"["
        + b",".join(b'{"%x":1}' % i for i in range(size // 12))
        + b"]",
        "distinct strings": b"[" + b",".join(b'"%x"' % i for i in range(size // 8)) + b"]",
        '"a\\nb"': fill(b'"a\\nb"'),
        "ASCII + one astral char (UTF-8)": one_string("\U0001f600".encode()),
        "ASCII + one astral char (escaped)": one_string(b"\\ud83d\\ude00"),
        "ASCII + one CJK char (UTF-8)": one_string("\u4e00".encode()),
        "ASCII + one Latin-1 char (UTF-8)": one_string("\u00e9".encode()),
    }


def _child(path: str, mode: str) -> dict[str, Any]:
    body = Path(path).read_bytes()
    if mode == "tokens":
        from sansmcp.core.jsonvalue import parse_json

        buffer = bytearray(body)
        del body
        base = _reset_peak()
        parse_json(buffer, max_depth=512)
        return {"rss_mib": _status_mib("VmHWM") - base}
    if mode == "loads":
        base = _reset_peak()
        start = _cpu()
        json.loads(body)
        ms = 1000 * (_cpu() - start)
        rss = _status_mib("VmHWM") - base
        return {"loads_ms": ms, "loads_rss_mib": rss}
    from sansmcp.core.config import Config, conn_settings
    from sansmcp.core.errors import McpError
    from sansmcp.core.http import DataReceived, ResponseEnded, ResponseReceived
    from sansmcp.core.limits import Limits
    from sansmcp.core.mcp import McpMachine, OperationFailed, StartExchange, ToolsListed

    settings = conn_settings(
        Config(url="http://127.0.0.1:1/mcp"),
        client_info=None,
        capabilities=None,
        era_hint="2026-07-28",
    )
    machine = McpMachine(settings, limits=Limits())
    machine.connect(now=0.0)
    while machine.next_output() is not None:
        pass
    machine.list_tools(now=0.0)
    start_exchange = machine.next_output()
    assert isinstance(start_exchange, StartExchange)
    xid = start_exchange.exchange_id
    head = ((b"content-type", b"application/json"),)
    base = _reset_peak()
    cpu0 = _cpu()
    machine.receive(
        ResponseReceived(exchange_id=xid, status=200, headers=head, raw_size=120), now=0.0
    )
    view = memoryview(body)
    for offset in range(0, len(body), 64 << 10):
        machine.receive(
            DataReceived(exchange_id=xid, data=bytes(view[offset : offset + (64 << 10)])), now=0.0
        )
    cpu1 = _cpu()
    machine.receive(ResponseEnded(exchange_id=xid), now=0.0)
    out = machine.next_output()
    while out is not None and not isinstance(out, ToolsListed | OperationFailed):
        out = machine.next_output()  # a CancelExchange, ...
    cpu2 = _cpu()
    rss = _status_mib("VmHWM") - base
    if isinstance(out, ToolsListed):
        outcome = f"{len(out.tools):,} tools, {out.skipped_count:,} skipped"
    else:
        assert isinstance(out, OperationFailed) and isinstance(out.error, McpError)
        error = out.error
        bound = getattr(error, "bound", None) or getattr(error, "reason", None)
        outcome = f"{type(error).__name__} {bound}"
    return {
        "outcome": outcome,
        "data_ms": 1000 * (cpu1 - cpu0),
        "end_ms": 1000 * (cpu2 - cpu1),
        "rss_mib": rss,
    }


def _reset_peak() -> float:
    """Reset the kernel's peak-RSS mark to the current RSS (``clear_refs`` 5); return it.

    (``ru_maxrss`` would not do: Linux carries it across ``exec`` from the parent.)"""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_mib("VmRSS")


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(field)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _run(path: str, mode: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.parsed_size", "--child", path, mode],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    return dict(json.loads(out.stdout))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(_child(sys.argv[2], sys.argv[3])))
        return
    if "--tokens" in sys.argv:
        _tokens()
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in shapes().items():
            path = os.path.join(tmp, "body.json")
            Path(path).write_bytes(body)
            count = body.count(b"[") + body.count(b"{") + body.count(b",") + 1
            row = {"shape": name, "bytes": len(body), "value_bound": count}
            row.update(_run(path, "core"))
            row.update(_run(path, "loads"))
            rows.append(row)
            if "--json" in sys.argv:
                print(json.dumps(row), flush=True)
    if "--json" in sys.argv:
        return
    print(
        "| shape | bytes | value bound | outcome | end step CPU ms | peak RSS MiB "
        "| json.loads ms | json.loads RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['shape']} | {r['bytes']:,} | {r['value_bound']:,} | {r['outcome']} "
            f"| {r['end_ms']:.0f} | {r['rss_mib']:.1f} | {r['loads_ms']:.0f} "
            f"| {r['loads_rss_mib']:.1f} |"
        )


def _tokens() -> None:
    print("| family | bytes | `{` | `[` | `,` | `:` | peak RSS MiB | RSS bytes per body byte |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in _token_families().items():
            path = os.path.join(tmp, "body.json")
            Path(path).write_bytes(body)
            rss = _run(path, "tokens")["rss_mib"]
            counts = [body.count(c) for c in (b"{", b"[", b",", b":")]
            print(
                f"| {name} | {len(body):,} | "
                + " | ".join(f"{c:,}" for c in counts)
                + f" | {rss:.1f} | {rss * MIB / len(body):.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
