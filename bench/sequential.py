"""The server plan and the sequential rows: what ``make bench`` runs against each server.

``plan`` lists the server configurations; ``contender_phases`` says what each contender
measures against one of them (sequential work items per era, 50 concurrent ones, the
heap per pooled connection); ``run_contender`` runs those phases in the contender's own
process (``bench.child``) and summarises them.  ``bench.run`` (the whole set) and
``bench.paired`` (the issue-12 rounds, run alone) both start from here; this module
imports neither.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field
from typing import IO, Any

from .contenders import CONTENDERS, LLHTTP
from .procs import ROOT, LineProcess, Server

RESULTS = ROOT / "bench" / "results"
ASYNC = tuple(c for c in CONTENDERS if c != "floor-sync")  # and sansmcp-sync: 50 threads
POOLED = ("sansmcp-asyncio", "sansmcp-trio", "sdk-tuned", "floor-asyncio", "floor-trio")
BACKENDS = ("asyncio", "trio", "sync")
# over TLS: sdk-default and fastmcp build their own clients per item (no CA to trust)
TLS_CONTENDERS = (
    "sansmcp-asyncio",
    "sansmcp-trio",
    "sansmcp-sync",
    "sdk-tuned",
    "floor-sync",
    "floor-asyncio",
    "floor-trio",
)


@dataclass(frozen=True)
class ServerConfig:
    http: str
    body: str
    tools: int
    eras: tuple[str, ...] = ("legacy", "modern")
    contenders: tuple[str, ...] = CONTENDERS
    concurrency: tuple[str, ...] = ()  # contenders measured with 50 in flight
    memory: tuple[str, ...] = ()  # contenders measured for heap per idle connection
    budget: float = 1.0
    n_min: int = 20
    n_max: int = 2000
    extra: dict[str, Any] = field(default_factory=dict)
    tls: bool = False  # HTTP/2 over TLS (ALPN), the run's trustme CA

    @property
    def label(self) -> str:
        return f"{'h2tls' if self.tls else self.http}/{self.body}/{self.tools}"


def plan(quick: bool) -> list[ServerConfig]:
    """Server configurations and what runs against each.

    The official server answers 2026-07-28 requests with ``application/json`` even in
    SSE mode (it streams only when a request needs to), so SSE servers run the legacy
    era only: a modern phase there would repeat the JSON one.
    """
    if quick:
        return [
            ServerConfig(
                "h1",
                "json",
                10,
                budget=0.3,
                n_min=20,
                n_max=400,
                contenders=(*CONTENDERS, "llhttp-asyncio"),
                concurrency=(
                    "sansmcp-asyncio",
                    "sansmcp-trio",
                    "sansmcp-sync",
                    "sdk-tuned",
                    "floor-asyncio",
                ),
            ),
            ServerConfig(
                "h2",
                "json",
                10,
                eras=("modern",),
                contenders=(
                    "sansmcp-asyncio",
                    "sansmcp-trio",
                    "sansmcp-sync",
                    "sdk-tuned",
                    "floor-asyncio",
                    "floor-sync",
                ),
                budget=0.3,
                n_min=15,
                n_max=300,
            ),
            ServerConfig(
                "h2",
                "json",
                10,
                eras=("modern",),
                contenders=("sansmcp-asyncio", "sdk-tuned", "floor-asyncio"),
                budget=0.3,
                n_min=15,
                n_max=300,
                tls=True,
            ),
            ServerConfig(
                "h1",
                "json",
                1000,
                eras=("modern",),
                contenders=("sansmcp-asyncio", "sdk-tuned", "floor-asyncio"),
                budget=0.4,
                n_min=3,
                n_max=20,
            ),
        ]
    return [
        ServerConfig(
            "h1",
            "json",
            10,
            budget=2.0,
            n_min=40,
            n_max=3000,
            contenders=CONTENDERS + LLHTTP,
            concurrency=ASYNC,
            memory=POOLED,
        ),
        ServerConfig(
            "h1",
            "sse",
            10,
            eras=("legacy",),
            contenders=CONTENDERS + LLHTTP,
            budget=1.0,
            n_min=30,
            n_max=1500,
        ),
        ServerConfig("h2", "json", 10, budget=1.0, n_min=30, n_max=1500, concurrency=ASYNC),
        ServerConfig("h2", "sse", 10, eras=("legacy",), budget=0.8, n_min=30, n_max=1500),
        ServerConfig(
            "h2",
            "json",
            10,
            contenders=TLS_CONTENDERS,
            budget=0.6,
            n_min=30,
            n_max=1500,
            tls=True,
        ),
        ServerConfig("h1", "json", 100, eras=("modern",), budget=0.8, n_min=20, n_max=500),
        ServerConfig(
            "h1", "json", 1000, contenders=CONTENDERS + LLHTTP, budget=1.5, n_min=8, n_max=60
        ),
        ServerConfig("h1", "sse", 1000, eras=("legacy",), budget=1.0, n_min=5, n_max=40),
        ServerConfig("h2", "json", 1000, eras=("modern",), budget=1.0, n_min=5, n_max=40),
    ]


def cpus() -> tuple[int | None, int | None]:
    """(server core, client core) when the machine lets us pin; else (None, None)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None, None
    if len(cores) < 2:
        return None, None
    return cores[-1], cores[0]


def load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _summarise(done: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    n = done["n"]
    walls = done.get("walls_s") or []
    out: dict[str, Any] = {
        "n": n,
        "errors": done["errors"],
        "error_samples": done["error_samples"],
        "maxrss_mb": round(done["maxrss_kb"] / 1024, 1),
        "requests_per_item": stats["requests"] / n if n else None,
        "connections_per_item": stats["connections"] / n if n else None,
        "connections": stats["connections"],
        "by_method": stats["by_method"],
        "by_version": stats["by_version"],
        "statuses": stats["statuses"],
        "by_rpc": stats.get("by_rpc", {}),
        "stray_requests": stats.get("strays", 0),
    }
    if walls:
        out.update(
            cpu_ms_per_item=1000 * done["cpu_s"] / n,
            wall_ms_median=1000 * statistics.median(walls),
            wall_ms_p99=1000 * _percentile(walls, 0.99),
            elapsed_s=done["elapsed_s"],
            items_per_s=n / done["elapsed_s"] if done["elapsed_s"] else None,
        )
    if "rss_before_kb" in done:
        out.update(
            rss_growth_kb=done["rss_after_kb"] - done["rss_before_kb"],
            fds_growth=done["fds_after"] - done["fds_before"],
        )
    if "heap_delta_bytes" in done:
        idle = max(1, stats["connections"] - 1)  # beyond the one pooled before
        out.update(
            heap_delta_bytes=done["heap_delta_bytes"],
            heap_bytes_per_connection=done["heap_delta_bytes"] / idle,
            fds_growth=done["fds_after"] - done["fds_before"],
        )
    return out


def run_contender(
    server: Server,
    config: ServerConfig,
    name: str,
    phases: list[dict[str, Any]],
    *,
    cpu: int | None,
    log: IO[str],
) -> list[dict[str, Any]]:
    http = config.http
    spec = {"contender": name, "cpu": cpu, "phases": phases}
    child = LineProcess(["-m", "bench.child", json.dumps(spec)], log=log)
    records = []
    try:
        for phase in phases:
            record: dict[str, Any] = {
                "server": config.label,
                "http": http,
                "body": config.body,
                "tools": config.tools,
                "contender": name,
                "era": phase["era"],
                "kind": phase["kind"],
                "concurrency": phase.get("concurrency", 1),
            }
            message = child.read_json(timeout=300)
            if message["event"] == "failed":
                record["failed"] = message["error"]
                records.append(record)
                print(f"    {name:16} {phase['era']:6} {phase['kind']:4} FAILED {message['error']}")
                continue
            server.reset()
            child.send("go")
            done = child.read_json(timeout=600)
            stats = server.stats()
            child.send("next")
            if done["event"] == "failed":
                record["failed"] = done["error"]
                print(f"    {name:16} {phase['era']:6} {phase['kind']:4} FAILED {done['error']}")
            else:
                record.update(_summarise(done, stats))
                _print(record)
            records.append(record)
    except (TimeoutError, EOFError) as exc:
        records.append(
            {
                "server": config.label,
                "contender": name,
                "failed": f"{type(exc).__name__}: {exc}",
            }
        )
        print(f"    {name:16} FAILED {exc}")
    finally:
        child.stop()
    return records


def _print(record: dict[str, Any]) -> None:
    if record["kind"] == "mem":
        print(
            f"    {record['contender']:16} {record['era']:6} mem  "
            f"{record['heap_bytes_per_connection'] / 1024:8.1f} KiB/idle conn "
            f"({record['connections']} conns)"
        )
        return
    print(
        f"    {record['contender']:16} {record['era']:6} {record['kind']:4} n={record['n']:<5}"
        f" cpu {record['cpu_ms_per_item']:8.3f} ms/item  wall p50 {record['wall_ms_median']:8.2f}"
        f" p99 {record['wall_ms_p99']:8.2f} ms  req {record['requests_per_item']:.2f}"
        f" tcp {record['connections_per_item']:.3f}  rss {record['maxrss_mb']} MB"
        + (f"  ERRORS {record['errors']}" if record["errors"] else "")
    )


def contender_phases(
    config: ServerConfig, name: str, url: str, ca: str | None = None
) -> list[dict[str, Any]]:
    common = {
        "url": url,
        "ca": ca,
        "http": config.http,
        "expect_tools": config.tools,
        "budget": config.budget,
        "n_min": config.n_min,
        "n_max": config.n_max,
    }
    phases = [
        dict(common, era=era, kind="seq", warmup=5 if config.tools < 1000 else 2)
        for era in config.eras
    ]
    if name in config.concurrency and "modern" in config.eras:
        phases.append(
            dict(
                common,
                era="modern",
                kind="conc",
                concurrency=50,
                warmup=5,
                n=150 if config.budget >= 1.0 else 100,  # 3 (2) waves of 50
            )
        )
    if name in config.memory and config.http == "h1" and not config.tls:
        phases.append(dict(common, era="modern", kind="mem", concurrency=8, warmup=3, n=8))
    return phases
