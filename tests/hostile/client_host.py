"""Runs the real sansmcp ``Client`` in forked children, one per scenario, and reports.

Run as ``python -X dev -W error -m tests.hostile.client_host``.  The host imports
sansmcp and both runtimes once, caps its address space (``RLIMIT_AS``, a safety net
only), then reads one JSON line per batch on stdin -- ``[spec, spec, ...]`` -- forks one
child per spec (they run concurrently), and writes one JSON line with the children's
reports in the same order.  Forking gives every scenario a fresh process (so its peak
RSS, ``ru_maxrss``, is its own) without paying interpreter start-up each time.

A spec: ``backend`` (``"asyncio"`` / ``"trio"`` / ``"sync"``: the blocking adapter's
calls in threads behind ``tests/e2e/sync_shim.py``'s async facade, on asyncio), ``url``, ``ops`` (after connecting:
``"list"``, ``"call"``, ``"sleep:SECONDS"``), ``limits`` (``Limits`` fields), and optionally ``h2``
(prior-knowledge h2c), ``allow_loopback`` (default true), ``resolver`` (a fixed answer),
``input`` (``"answer"`` / ``"decline"``: an input handler), ``tasks`` (``Config.tasks``),
``versions``, ``tool``,
``arguments``, ``reconnect`` (then open a second ``Conn`` on the same ``Client`` and
list), ``hard_timeout`` (seconds; the child is killed past it), ``ticker`` (run another
task on the loop that sleeps 5 ms at a time; ``loop_lag_max`` reports its worst
lateness, seconds, and ``loop_cpu_max`` the most CPU time the process spent between one
of its sleeps and the wake-up), ``observe`` (count what ``Config.on_notification`` and a call's
``on_progress`` receive: the report's ``notifications``, and the call op's ``progress`` and
``dropped``, ``Conn.notifications_dropped``).

A report: ``ok``, ``error`` (class name and every attribute), ``failed_op``, ``elapsed``
(seconds from the start of the failing op to the exception, or to the end of the last
op), ``close_elapsed``, ``total``; ``cpu``, ``close_cpu`` and ``total_cpu``, the CPU time
the child spent in the same spans (``time.process_time``: what `make test` bounds, see
``tests/timing.py``); ``ops`` (per-op results), ``second`` (the second
``Conn``'s outcome), ``maxrss_kib``, ``stderr``
(the child's, bounded), and ``escaped`` (a traceback) when anything but an
``McpError`` left the public API; ``hung`` / ``crashed`` when the child never reported.
"""

from __future__ import annotations

import asyncio
import gc
import http.client
import json
import os
import resource
import select
import signal
import sys
import tempfile
import time
import traceback
import urllib.parse
from typing import Any

import trio

from sansmcp import Config, Limits, McpError, OAuth
from sansmcp.io_adapters import asyncio as asyncio_adapter
from sansmcp.io_adapters import trio as trio_adapter
from tests.e2e import sync_shim

ADDRESS_SPACE_CAP = 2 << 30
STDERR_KEEP = 8192
REPORT_TEXT = 1000  # characters of a content block's text reported back to the host


def describe(exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"class": type(exc).__name__, "message": str(exc)[:400]}
    for name in (
        "cause",
        "bound",
        "limit",
        "observed",
        "status",
        "location",
        "reason",
        "code",
        "www_authenticate",
        "challenges",
    ):
        if hasattr(exc, name):
            value = getattr(exc, name)
            out[name] = value if isinstance(value, str | int | float | bool | None) else repr(value)
    if hasattr(exc, "challenges"):
        out["challenges"] = [[scheme, dict(params)] for scheme, params in exc.challenges]
    return out


async def scenario(client_cls: Any, sleep: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Connect, run the ops, close; record what happened and when (backend-neutral)."""
    report: dict[str, Any] = {"ok": False, "ops": []}
    kwargs: dict[str, Any] = {
        "limits": Limits(**spec.get("limits", {})),
        "allow_loopback": spec.get("allow_loopback", True),
        "http2_prior_knowledge": spec.get("h2", False),
    }
    if spec.get("resolver") is not None:
        answer = list(spec["resolver"])

        async def resolve(host: str, port: int) -> list[str]:
            return answer

        kwargs["resolver"] = resolve
    if spec.get("input") is not None:
        accept = spec["input"] == "answer"

        async def handler(requests: Any) -> Any:
            if not accept:
                return None
            return {key: {"action": "accept", "content": {"ok": True}} for key in requests}

        kwargs["input_handler"] = handler
        kwargs["capabilities"] = {"elicitation": {}}

    def noticed(note: Any) -> None:
        report["notifications"] += 1

    oauth = OAuth(redirect_uri="http://127.0.0.1:9/callback", authorize=_authorize)
    config = Config(
        url=spec["url"],
        protocol_versions=spec.get("versions"),
        on_notification=noticed if spec.get("observe") else None,
        oauth=oauth if spec.get("oauth") else None,
        tasks=bool(spec.get("tasks")),
    )
    if spec.get("observe"):
        report["notifications"] = 0
    async with client_cls(**kwargs) as client:
        await _first_conn(client, config, spec, sleep, report)
        if spec.get("reconnect"):
            report["second"] = await _second_conn(client, config)
    return report


async def _authorize(url: str) -> str:
    """The embedder's authorization step: GET the authorization URL (loopback only),
    never follow its redirect, hand back the ``Location`` (blocking: the server runs in
    another thread of the host)."""
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname == "127.0.0.1", url
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        connection.request("GET", f"{parts.path}?{parts.query}")
        response = connection.getresponse()
        response.read()
        return response.getheader("location") or ""
    finally:
        connection.close()


async def _first_conn(
    client: Any, config: Config, spec: dict[str, Any], sleep: Any, report: dict[str, Any]
) -> None:
    op, started, cpu = "connect", time.monotonic(), time.process_time()
    try:
        async with client.connect(config) as conn:
            report["ops"].append(
                {
                    "op": "connect",
                    "elapsed": time.monotonic() - started,
                    "cpu": time.process_time() - cpu,
                    "version": conn.protocol_version,
                }
            )
            for op in spec.get("ops", []):
                started, cpu = time.monotonic(), time.process_time()
                try:
                    entry = await _run_op(conn, op, spec, sleep)
                except BaseException:
                    report["elapsed"] = time.monotonic() - started
                    report["cpu"] = time.process_time() - cpu
                    raise
                entry["elapsed"] = time.monotonic() - started
                entry["cpu"] = time.process_time() - cpu
                report["ops"].append(entry)
            op, started, cpu = "close", time.monotonic(), time.process_time()
        report["close_elapsed"] = time.monotonic() - started
        report["close_cpu"] = time.process_time() - cpu
        report["ok"] = True
    except McpError as exc:
        report["error"] = describe(exc)
        report["failed_op"] = op
        report.setdefault("elapsed", time.monotonic() - started)
        report.setdefault("cpu", time.process_time() - cpu)


async def _second_conn(client: Any, config: Config) -> dict[str, Any]:
    """A second Conn on the same Client (and pool) after the first one ended."""
    started, cpu = time.monotonic(), time.process_time()
    try:
        async with client.connect(config) as conn:
            tools = await conn.list_tools()
        out: dict[str, Any] = {"ok": True, "tools": [t.name for t in tools]}
    except McpError as exc:
        out = {"ok": False, "error": describe(exc)}
    return {**out, "elapsed": time.monotonic() - started, "cpu": time.process_time() - cpu}


async def _run_op(conn: Any, op: str, spec: dict[str, Any], sleep: Any) -> dict[str, Any]:
    if op.startswith("sleep:"):
        await sleep(float(op.partition(":")[2]))
        return {"op": op}
    if op == "list":
        tools = await conn.list_tools()
        return {
            "op": op,
            "tools": [tool.name for tool in tools],
            "skipped": [[s.index, s.name, s.reason] for s in conn.skipped_tools],
            "skipped_count": conn.skipped_count,
        }
    if op == "call":
        arguments = spec.get("arguments", '{"text": "hi"}').encode()
        observed = spec.get("observe")
        counts = {"progress": 0}

        def progressed(progress: Any, total: Any, message: Any) -> None:
            counts["progress"] += 1

        result = await conn.call_tool(
            spec.get("tool", "echo"), arguments, on_progress=progressed if observed else None
        )
        if observed:
            return {
                "op": op,
                "is_error": result.is_error,
                "progress": counts["progress"],
                "dropped": conn.notifications_dropped,
            }
        return {
            "op": op,
            "is_error": result.is_error,
            # texts cut to REPORT_TEXT characters: a multi-MiB text parsed back by the host
            # would grow it, and every later child forked from it, past its baselines
            "content": [[block.type, _cut(block.text)] for block in result.content],
        }
    raise ValueError(f"unknown op {op!r}")


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= REPORT_TEXT else text[:REPORT_TEXT] + "..."


TICK = 0.005


async def ticker(sleep: Any, lag: list[float]) -> None:
    """Another work item on the same loop: wakes every TICK, records its worst lateness
    (``lag[0]``, wall seconds) and the most CPU time the process spent between one of its
    sleeps and the wake-up (``lag[1]``: what a stall costs, whatever the machine's load)."""
    while True:
        before, cpu = time.monotonic(), time.process_time()
        await sleep(TICK)
        lag[0] = max(lag[0], time.monotonic() - before - TICK)
        lag[1] = max(lag[1], time.process_time() - cpu)


def _asyncio_client(spec: dict[str, Any]) -> Any:
    return sync_shim.Client if spec["backend"] == "sync" else asyncio_adapter.Client


async def _asyncio_with_ticker(spec: dict[str, Any], lag: list[float]) -> dict[str, Any]:
    task = asyncio.create_task(ticker(asyncio.sleep, lag))
    try:
        return await scenario(_asyncio_client(spec), asyncio.sleep, spec)
    finally:
        task.cancel()


async def _trio_with_ticker(spec: dict[str, Any], lag: list[float]) -> dict[str, Any]:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker, trio.sleep, lag)
        report = await scenario(trio_adapter.Client, trio.sleep, spec)
        nursery.cancel_scope.cancel()
    return report


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    began, cpu = time.monotonic(), time.process_time()
    lag = [0.0, 0.0]
    try:
        if spec.get("ticker") and spec["backend"] == "trio":
            report = trio.run(_trio_with_ticker, spec, lag)
        elif spec.get("ticker"):
            report = asyncio.run(_asyncio_with_ticker(spec, lag))
        elif spec["backend"] == "trio":
            report = trio.run(scenario, trio_adapter.Client, trio.sleep, spec)
        else:
            report = asyncio.run(scenario(_asyncio_client(spec), asyncio.sleep, spec))
        if spec.get("ticker"):
            report["loop_lag_max"], report["loop_cpu_max"] = lag
    except BaseException as exc:  # anything but McpError escaped the public API
        report = {"ok": False, "escaped": "".join(traceback.format_exception(exc))[-6000:]}
    report["total"] = time.monotonic() - began
    report["total_cpu"] = time.process_time() - cpu
    gc.collect()  # let unclosed-resource warnings surface now, into stderr
    report["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return report


def fork_child(spec: dict[str, Any]) -> tuple[int, int, str]:
    """Fork a child running ``spec``; returns (pid, read end of its report pipe, stderr path)."""
    read_fd, write_fd = os.pipe()
    err_fd, err_path = tempfile.mkstemp(prefix="hostile-stderr-")
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            os.close(read_fd)
            os.dup2(err_fd, 2)
            report = run_child(spec)
            sys.stderr.flush()
            with open(err_path, "rb") as err:
                report["stderr"] = err.read(STDERR_KEEP).decode("utf-8", "replace")
            data = json.dumps(report).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view) :]
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    os.close(err_fd)
    return pid, read_fd, err_path


def run_batch(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    children = [fork_child(spec) for spec in specs]
    chunks: dict[int, list[bytes]] = {fd: [] for _, fd, _ in children}
    deadline = time.monotonic() + max(float(s.get("hard_timeout", 30)) for s in specs)
    open_fds = set(chunks)
    while open_fds:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        ready, _, _ = select.select(list(open_fds), [], [], remaining)
        for fd in ready:
            data = os.read(fd, 65536)
            if data:
                chunks[fd].append(data)
            else:
                open_fds.discard(fd)
    reports = []
    for pid, fd, err_path in children:
        hung = fd in open_fds
        if hung:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        raw = b"".join(chunks[fd])
        if hung:
            report: dict[str, Any] = {"ok": False, "hung": True}
        elif not raw:
            report = {"ok": False, "crashed": f"wait status {status}"}
        else:
            report = json.loads(raw)
        if "stderr" not in report:
            with open(err_path, "rb") as err:
                report["stderr"] = err.read(STDERR_KEEP).decode("utf-8", "replace")
        os.unlink(err_path)
        reports.append(report)
    return reports


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
    print("READY", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        reports = run_batch(json.loads(line))
        sys.stdout.write(json.dumps(reports) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
