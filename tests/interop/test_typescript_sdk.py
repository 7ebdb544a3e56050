"""Interop with MCP servers built with the official TypeScript SDK, on both backends.

The servers are real Node processes on loopback (``tests/interop/server_v*.mjs``),
built from the npm packages pinned in ``tests/interop/package.json``
(``make interop`` installs them and runs this file):

* ``ts-v1``: ``@modelcontextprotocol/sdk`` 1.x, a 2025-11-25 server with sessions;
* ``ts-v2``: ``@modelcontextprotocol/server`` 2.x, which speaks 2026-07-28
  (stateless, per-request envelope) and serves 2025-era clients through its
  stateless legacy fallback.

Each case lists tools and calls them through the public API, then checks what the
server saw (it logs one JSON line per HTTP exchange): the negotiated revision, the
session handling of the era, and the 2026-07-28 standard and ``Mcp-Param-*`` headers.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from sansmcp import Config
from sansmcp.io_adapters import asyncio as asyncio_adapter
from sansmcp.io_adapters import trio as trio_adapter

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PACKAGES = (
    "@modelcontextprotocol/sdk",
    "@modelcontextprotocol/server",
    "@modelcontextprotocol/node",
)
START_TIMEOUT = 20.0
RUN_TIMEOUT = 20.0
LOG_SETTLE = 3.0  # a server logs an exchange when its response finishes, after we saw it
MODERN, LEGACY = "2026-07-28", "2025-11-25"


def _node() -> str:
    """Node >= 20 (the v2 server package's floor): the suite's Node 22 if installed."""
    bundled = Path(os.environ.get("CONFORMANCE_DIR", REPO / ".conformance"))
    candidate = bundled / "node_modules" / ".bin" / "node"
    node = str(candidate) if candidate.exists() else shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (make interop installs Node 22 into .conformance/)")
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=10, check=True
    ).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        pytest.skip(f"node {version} is older than 20 (make interop installs Node 22)")
    return node


def _require_packages() -> None:
    missing = [p for p in PACKAGES if not (HERE / "node_modules" / p / "package.json").exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed in tests/interop (run `make interop`)")


@dataclass
class NodeServer:
    """A running server process and the JSON lines it has logged so far."""

    url: str
    process: subprocess.Popen[str]
    lines: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mark(self) -> int:
        with self.lock:
            return len(self.lines)

    def since(
        self, mark: int, until: Callable[[list[dict[str, Any]]], bool]
    ) -> list[dict[str, Any]]:
        """The records logged after ``mark``, once ``until`` holds (or LOG_SETTLE passed)."""
        deadline = time.monotonic() + LOG_SETTLE
        while True:
            with self.lock:
                records = self.lines[mark:]
            if until(records) or time.monotonic() > deadline:
                return records
            time.sleep(0.02)


def _read(server: NodeServer) -> None:
    assert server.process.stdout is not None
    for line in server.process.stdout:
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            with server.lock:
                server.lines.append(record)


@contextlib.contextmanager
def _start(script: str, *args: str) -> Iterator[NodeServer]:
    _require_packages()
    process = subprocess.Popen(
        [_node(), str(HERE / script), *args],
        cwd=HERE,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    reader: threading.Thread | None = None
    try:
        assert process.stdout is not None
        ready: list[str] = []

        def wait_ready() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                ready.append(line)
                if line.startswith("READY "):
                    return

        waiter = threading.Thread(target=wait_ready, daemon=True)
        waiter.start()
        waiter.join(START_TIMEOUT)
        if not ready or not ready[-1].startswith("READY "):
            raise RuntimeError(f"{script} did not start: {''.join(ready)[-2000:]!r}")
        port = int(ready[-1].split()[1])
        server = NodeServer(url=f"http://127.0.0.1:{port}/mcp", process=process)
        reader = threading.Thread(target=_read, args=(server,), daemon=True)
        reader.start()
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if reader is not None:
            reader.join(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(scope="module")
def ts_v1() -> Iterator[NodeServer]:
    with _start("server_v1.mjs") as server:
        yield server


@pytest.fixture(scope="module")
def ts_v1_json() -> Iterator[NodeServer]:
    with _start("server_v1.mjs", "--json") as server:
        yield server


@pytest.fixture(scope="module")
def ts_v2() -> Iterator[NodeServer]:
    with _start("server_v2.mjs") as server:
        yield server


# -- the client side, written once for both backends ---------------------------


@dataclass
class Seen:
    version: str | None = None
    tools: dict[str, bytes] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)


REGION = " eu-west ü"  # leading space and non-ASCII: goes out base64-encoded


async def exercise(client_cls: Any, url: str, versions: list[str] | None) -> Seen:
    seen = Seen()
    async with (
        client_cls(allow_loopback=True) as client,
        client.connect(Config(url=url, protocol_versions=versions)) as conn,
    ):
        seen.version = conn.protocol_version
        seen.tools = {tool.name: tool.input_schema for tool in await conn.list_tools()}
        seen.results["echo"] = await conn.call_tool("echo", '{"text": "héllo ☃"}'.encode())
        seen.results["add"] = await conn.call_tool("add", b'{"a": 2, "b": 40}')
        seen.results["fail"] = await conn.call_tool("fail")
        if "route" in seen.tools:
            body = json.dumps({"region": REGION, "note": "n"}).encode()
            seen.results["route"] = await conn.call_tool("route", body)
    return seen


def run_asyncio(url: str, versions: list[str] | None) -> Seen:
    async def bounded() -> Seen:
        async with asyncio.timeout(RUN_TIMEOUT):
            return await exercise(asyncio_adapter.Client, url, versions)

    return asyncio.run(bounded())


def run_trio(url: str, versions: list[str] | None) -> Seen:
    async def bounded() -> Seen:
        with trio.fail_after(RUN_TIMEOUT):
            return await exercise(trio_adapter.Client, url, versions)

    result: Seen = trio.run(bounded)
    return result


BACKENDS = {"asyncio": run_asyncio, "trio": run_trio}


def check_common(seen: Seen) -> None:
    assert {"echo", "add", "fail"} <= set(seen.tools)
    echo_schema = json.loads(seen.tools["echo"])
    assert echo_schema["properties"]["text"]["type"] == "string"
    assert echo_schema["required"] == ["text"]
    echo = seen.results["echo"]
    assert not echo.is_error
    assert [(c.type, c.text) for c in echo.content] == [("text", "héllo ☃")]
    add = seen.results["add"]
    assert [c.text for c in add.content] == ["42"]
    assert json.loads(add.structured_content) == {"sum": 42}
    fail = seen.results["fail"]
    assert fail.is_error
    assert [c.text for c in fail.content] == ["this tool always fails"]


def rpc(records: list[dict[str, Any]]) -> list[str | None]:
    return [r.get("rpc") for r in records if "http" in r and r["http"] == "POST"]


# -- the matrix -------------------------------------------------------------------


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_ts_v1_stateful_2025_11_25(backend: str, ts_v1: NodeServer) -> None:
    mark = ts_v1.mark()
    seen = BACKENDS[backend](ts_v1.url, None)
    assert seen.version == LEGACY  # the v1 SDK rejects server/discover; we fall back
    check_common(seen)
    records = ts_v1.since(mark, lambda rs: any(r.get("http") == "DELETE" for r in rs))
    posts = [r for r in records if r.get("http") == "POST"]
    assert rpc(records) == [
        "server/discover",
        "initialize",
        "notifications/initialized",
        "tools/list",
        "tools/call",
        "tools/call",
        "tools/call",
    ]
    assert posts[0]["status"] == 400  # the probe: a legacy server's answer
    assert posts[1]["session"] is None and posts[1]["version"] is None
    session = {r["session"] for r in posts[2:]}
    assert len(session) == 1 and None not in session  # one session, honoured throughout
    assert {r["version"] for r in posts[2:]} == {LEGACY}
    assert all(r["status"] in (200, 202) for r in posts[1:])
    # closing the Conn ends the session with a DELETE
    deletes = [r for r in records if r.get("http") == "DELETE"]
    assert [(r["session"], r["status"]) for r in deletes] == [(session.pop(), 200)]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_ts_v2_stateless_2026_07_28(backend: str, ts_v2: NodeServer) -> None:
    mark = ts_v2.mark()
    seen = BACKENDS[backend](ts_v2.url, None)
    assert seen.version == MODERN
    check_common(seen)
    route = seen.results["route"]
    assert [c.text for c in route.content] == [f"{REGION}|n"]
    records = ts_v2.since(mark, lambda rs: len(rpc(rs)) >= 6)
    assert rpc(records) == ["server/discover", "tools/list", *["tools/call"] * 4]
    assert all(r["status"] == 200 and r["session"] is None for r in records)
    assert {r["version"] for r in records} == {MODERN}
    assert [r["mcpMethod"] for r in records] == rpc(records)
    assert [r["mcpName"] for r in records[2:]] == ["echo", "add", "fail", "route"]
    # the server checked Mcp-Param-Region against the body before running the tool
    encoded = base64.b64encode(REGION.encode()).decode()
    assert records[-1]["params"] == {"mcp-param-region": f"=?base64?{encoded}?="}
    assert all(r["params"] == {} for r in records[:-1])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_ts_v2_legacy_fallback_2025_11_25(backend: str, ts_v2: NodeServer) -> None:
    mark = ts_v2.mark()
    seen = BACKENDS[backend](ts_v2.url, [LEGACY])
    assert seen.version == LEGACY
    check_common(seen)
    assert [c.text for c in seen.results["route"].content] == [f"{REGION}|n"]
    records = ts_v2.since(mark, lambda rs: len(rpc(rs)) >= 7)
    assert rpc(records) == [
        "initialize",
        "notifications/initialized",
        "tools/list",
        *["tools/call"] * 4,
    ]
    # stateless legacy serving: no session is ever issued, so none is sent or deleted
    assert all(r["session"] is None for r in records)
    assert not any(r.get("http") == "DELETE" for r in records)
    assert [r["version"] for r in records] == [None, *[LEGACY] * 6]
    assert all(r["mcpMethod"] is None and r["params"] == {} for r in records)


# -- issue 10 H.2: a legacy era is remembered; H.1: one standalone stream per session --


async def work_items(client_cls: Any, url: str, count: int, answers_input: bool) -> None:
    async def handler(requests: Any) -> Any:
        return {key: {"roots": []} for key in requests}

    async with client_cls(
        allow_loopback=True,
        input_handler=handler if answers_input else None,
        capabilities={"roots": {}} if answers_input else None,
    ) as client:
        for _ in range(count):
            async with client.connect(Config(url=url)) as conn:
                assert conn.protocol_version == LEGACY
                result = await conn.call_tool("echo", b'{"text": "x"}')
                assert [c.text for c in result.content] == ["x"]


def run_work_items(backend: str, url: str, count: int, answers_input: bool) -> None:
    if backend == "asyncio":

        async def bounded() -> None:
            async with asyncio.timeout(RUN_TIMEOUT):
                await work_items(asyncio_adapter.Client, url, count, answers_input)

        asyncio.run(bounded())
        return

    async def bounded_trio() -> None:
        with trio.fail_after(RUN_TIMEOUT):
            await work_items(trio_adapter.Client, url, count, answers_input)

    trio.run(bounded_trio)


@pytest.mark.parametrize("answers_input", [False, True])
@pytest.mark.parametrize("mode", ["sse", "json"])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_ts_v1_legacy_era_is_remembered(
    backend: str, mode: str, answers_input: bool, ts_v1: NodeServer, ts_v1_json: NodeServer
) -> None:
    """Three work items on one Client: one server/discover (400), then per item
    initialize, initialized, the call and the DELETE (with a handler, one GET too)."""
    server = ts_v1 if mode == "sse" else ts_v1_json
    mark = server.mark()
    run_work_items(backend, server.url, 3, answers_input)
    per_item = 5 if answers_input else 4
    records = server.since(mark, lambda rs: len([r for r in rs if "http" in r]) >= 1 + 3 * per_item)
    exchanges = [r for r in records if "http" in r]
    kinds = [r["rpc"] if r["http"] == "POST" else r["http"] for r in exchanges]
    assert kinds.count("server/discover") == 1
    assert exchanges[0]["rpc"] == "server/discover" and exchanges[0]["status"] == 400
    item = ["initialize", "notifications/initialized", "tools/call", "DELETE"]
    item += ["GET"] if answers_input else []
    assert sorted(kinds[1:]) == sorted(item * 3)
    gets = [r for r in exchanges if r["http"] == "GET"]
    assert len({r["session"] for r in gets}) == len(gets)  # one standalone stream a session
    assert all(r["status"] == 200 for r in gets)
