"""Cold start: imports, the first work item in a fresh process, and the CLI.

``python -m bench.cold_start [--runs N] [--json FILE] [--quick]``.  Three measures,
each a whole fresh interpreter per run, the contenders interleaved run by run so the
machine's load falls on all alike; medians are reported.

* **import**: ``python -X importtime -c 'import M'`` for ``sansmcp.io_adapters.asyncio``
  (issue 16, item 5: target <= 60 ms), ``.trio``, ``.sync`` and the official SDK's
  ``mcp`` (+ ``httpx2``).  The total is the cumulative figure of ``M``'s own line (what
  importing ``M`` added to a bare interpreter); the CPU is ``time.process_time`` around
  the import in the same process.  The modules with the largest median self time are
  kept, so a missed target carries where its time goes.
* **first work item**: a fresh process imports the client, builds it and runs one work
  item (connect, list 10 tools, call ``echo``, close) against the bench server; wall and
  CPU of the import and of that first item, sansmcp on each backend vs the SDK
  (``mcp.Client(url)``, as its README shows it).
* **CLI**: ``sansmcp tools URL --allow-loopback --backend B``, wall and CPU of the
  whole child (``os.wait4``).

Every child runs with byte code cached, as an installed package runs: this machine's
environment sets ``PYTHONDONTWRITEBYTECODE`` (every import would compile its source), so
the children drop it and keep their ``.pyc`` files under ``PYTHONPYCACHEPREFIX`` in the
temporary directory (the worktree stays clean); the first, unmeasured run of each fills it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .procs import ROOT, Server

BACKENDS = ("asyncio", "trio", "sync")
SANSMCP = Path(sys.executable).parent / "sansmcp"
IMPORTS = {
    "sansmcp.io_adapters.asyncio": "sansmcp.io_adapters.asyncio",
    "sansmcp.io_adapters.trio": "sansmcp.io_adapters.trio",
    "sansmcp.io_adapters.sync": "sansmcp.io_adapters.sync",
    "the SDK": "mcp",
    "the runtime alone": "asyncio",
}
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "sansmcp-bench-pycache"))

_FIRST = r"""
import json, sys, time
w0, c0 = time.perf_counter(), time.process_time()
kind, url = sys.argv[1], sys.argv[2]
if kind == "sdk":
    import asyncio
    import mcp
else:
    from sansmcp import Config
    if kind == "sync":
        from sansmcp.io_adapters.sync import Client
    elif kind == "trio":
        import trio
        from sansmcp.io_adapters.trio import Client
    else:
        import asyncio
        from sansmcp.io_adapters.asyncio import Client
w1, c1 = time.perf_counter(), time.process_time()
ARGS = b'{"text": "hi"}'
if kind == "sdk":
    async def sdk():
        async with mcp.Client(url) as client:
            tools = (await client.list_tools()).tools
            result = await client.call_tool("echo", {"text": "hi"})
        return len(tools), result.content[0].text
    out = asyncio.run(sdk())
elif kind == "sync":
    with Client(allow_loopback=True) as client, client.connect(Config(url=url)) as conn:
        out = (len(conn.list_tools()), conn.call_tool("echo", ARGS).content[0].text)
else:
    async def ours():
        async with Client(allow_loopback=True) as client:
            async with client.connect(Config(url=url)) as conn:
                tools = await conn.list_tools()
                result = await conn.call_tool("echo", ARGS)
        return len(tools), result.content[0].text
    out = trio.run(ours) if kind == "trio" else asyncio.run(ours())
w2, c2 = time.perf_counter(), time.process_time()
assert out == (10, "hi"), out
print(json.dumps({"import_wall_ms": 1e3 * (w1 - w0), "import_cpu_ms": 1e3 * (c1 - c0),
                  "first_wall_ms": 1e3 * (w2 - w1), "first_cpu_ms": 1e3 * (c2 - c1)}))
"""


def _python(args: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=ENV, check=False
    )
    if done.returncode:
        raise RuntimeError(f"{args[:3]}: exit {done.returncode}: {done.stderr[-800:]}")
    return done


def import_once(module: str) -> dict[str, Any]:
    """One fresh interpreter: ``-X importtime`` of ``import module`` and its CPU."""
    code = f"import time; c = time.process_time(); import {module}; print(time.process_time() - c)"
    done = _python(["-X", "importtime", "-c", code])
    total_us = None
    own: dict[str, int] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "[us]" in line:
            continue
        self_us, cumulative, name = line[len("import time:") :].split("|")
        own[name.strip()] = own.get(name.strip(), 0) + int(self_us)
        if name == f" {module}":  # the top-level line: everything importing it added
            total_us = int(cumulative)
    if total_us is None:
        raise RuntimeError(f"no importtime line for {module}")
    return {"total_ms": total_us / 1e3, "cpu_ms": 1e3 * float(done.stdout), "self_us": own}


# the driver's parts that are modules of their own (docs/architecture.md)
_DRIVER = frozenset(
    f"sansmcp.core.{part}" for part in ("commands", "conn", "dialer", "sockets", "timers")
)


def _area(module: str) -> str:
    """The group a module's import time is reported under."""
    top = module.split(".")[0]
    if module.startswith("sansmcp.core.mcp") or module.startswith("sansmcp.core.schema"):
        return "sansmcp MCP machine"
    if module.startswith(("sansmcp.core.wire", "sansmcp.core.http")):
        return "sansmcp wire"
    if module in _DRIVER or module.startswith(("sansmcp.core.driver", "sansmcp.core.net")):
        return "sansmcp driver + pool"
    if module.startswith("sansmcp.io_adapters"):
        return "sansmcp adapters"
    if top == "sansmcp":
        return "sansmcp other core (config, limits, tools, cache, ...)"
    if top == "h11":
        return "h11"
    if top in ("h2", "hpack", "hyperframe"):
        return "h2 / hpack"
    if top in ("asyncio", "trio", "ssl", "_ssl", "socket", "selectors", "select", "outcome"):
        return "runtime (asyncio / trio / ssl / socket)"
    if top in sys.stdlib_module_names:
        return "other stdlib (json, re, dataclasses, typing, ...)"
    return "third-party (the SDK's pydantic, httpx2, ...)"


def imports(runs: int) -> dict[str, Any]:
    samples: dict[str, list[dict[str, Any]]] = {label: [] for label in IMPORTS}
    for module in IMPORTS.values():  # one unmeasured run each: the page cache, the .pyc
        import_once(module)
    for _ in range(runs):
        for label, module in IMPORTS.items():
            samples[label].append(import_once(module))
    out: dict[str, Any] = {}
    for label, runs_of in samples.items():
        names = {name for run in runs_of for name in run["self_us"]}
        own = {
            name: statistics.median(run["self_us"].get(name, 0) for run in runs_of) / 1e3
            for name in names
        }
        areas: dict[str, float] = {}
        for name, ms in own.items():
            areas[_area(name)] = areas.get(_area(name), 0.0) + ms
        out[label] = {
            "module": IMPORTS[label],
            "runs": len(runs_of),
            "total_ms": statistics.median(run["total_ms"] for run in runs_of),
            "total_ms_min": min(run["total_ms"] for run in runs_of),
            "cpu_ms": statistics.median(run["cpu_ms"] for run in runs_of),
            "top_self_ms": sorted(own.items(), key=lambda kv: -kv[1])[:15],
            "areas_ms": dict(sorted(areas.items(), key=lambda kv: -kv[1])),
        }
    return out


def first_items(url: str, runs: int) -> dict[str, Any]:
    kinds = ("asyncio", "trio", "sync", "sdk")
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for kind in kinds:
        _python(["-c", _FIRST, kind, url])
    for _ in range(runs):
        for kind in kinds:
            samples[kind].append(json.loads(_python(["-c", _FIRST, kind, url]).stdout))
    return {
        ("sansmcp-" + k if k != "sdk" else "sdk-default"): {
            key: statistics.median(s[key] for s in samples[k]) for key in samples[k][0]
        }
        for k in kinds
    }


def cli_once(url: str, backend: str) -> tuple[float, float]:
    """(wall s, CPU s) of one ``sansmcp tools`` run; fails unless it exits 0."""
    command = [str(SANSMCP), "tools", url, "--allow-loopback", "--backend", backend]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV, cwd=ROOT
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.stderr is not None
    err = process.stderr.read()
    process.stderr.close()
    if process.returncode != 0:
        raise RuntimeError(f"{backend}: exit {process.returncode}: {err.decode()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def cli(url: str, runs: int) -> dict[str, Any]:
    figures: dict[str, list[tuple[float, float]]] = {b: [] for b in BACKENDS}
    for backend in BACKENDS:  # a first run each, unmeasured: the page cache
        cli_once(url, backend)
    for _ in range(runs):
        for backend in BACKENDS:
            figures[backend].append(cli_once(url, backend))
    return {
        backend: {
            "wall_ms": statistics.median(w for w, _ in runs_of) * 1000,
            "cpu_ms": statistics.median(c for _, c in runs_of) * 1000,
        }
        for backend, runs_of in figures.items()
    }


def measure(url: str, runs: int) -> dict[str, Any]:
    """Everything above against the server at ``url`` (10 tools, HTTP/1.1, JSON)."""
    started = time.time()
    out: dict[str, Any] = {"runs": runs, "load_before": list(os.getloadavg())}
    out["imports"] = imports(max(runs, 3) if runs < 5 else 10)
    out["first_item"] = first_items(url, runs)
    out["cli"] = cli(url, runs)
    out["load_after"] = list(os.getloadavg())
    out["duration_s"] = round(time.time() - started, 1)
    return out


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['runs']} runs each, load {result['load_before'][0]:.1f}",
        "",
        "| import | -X importtime total ms (median) | min | CPU ms |",
        "|---|--:|--:|--:|",
    ]
    for label, row in result["imports"].items():
        lines.append(
            f"| `{row['module']}` ({label}) | {row['total_ms']:.1f} | {row['total_ms_min']:.1f} "
            f"| {row['cpu_ms']:.1f} |"
        )
    lines += [
        "",
        "| contender | import wall / CPU ms | first item wall / CPU ms |",
        "|---|--:|--:|",
    ]
    for name, row in result["first_item"].items():
        lines.append(
            f"| {name} | {row['import_wall_ms']:.0f} / {row['import_cpu_ms']:.0f} "
            f"| {row['first_wall_ms']:.0f} / {row['first_cpu_ms']:.0f} |"
        )
    lines += ["", "| `sansmcp tools` backend | wall ms | CPU ms |", "|---|--:|--:|"]
    for backend, row in result["cli"].items():
        lines.append(f"| {backend} | {row['wall_ms']:.0f} | {row['cpu_ms']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--url", default="", help="a running bench server (else one is started)")
    parser.add_argument("--json", default="", help="print one JSON line instead of tables")
    parser.add_argument("--imports-only", action="store_true")
    args = parser.parse_args()
    if args.imports_only:
        result: dict[str, Any] = {"imports": imports(args.runs)}
        for label, row in result["imports"].items():
            print(
                f"{label}: total {row['total_ms']:.1f} ms (min {row['total_ms_min']:.1f}), "
                f"CPU {row['cpu_ms']:.1f} ms; top self {row['top_self_ms'][:8]}"
            )
        return
    if args.url:
        result = measure(args.url, args.runs)
    else:
        with open(os.devnull, "w") as log:
            server = Server(http="h1", body="json", tools=10, log=log, cpu=None)
            try:
                result = measure(server.url, args.runs)
            finally:
                server.stop()
    if args.json:
        print(json.dumps(result), flush=True)
    else:
        print(table(result))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
