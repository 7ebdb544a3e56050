"""The benchmark harness: ``python -m bench.run [--quick]`` (``make bench`` / ``make bench-quick``).

For each server configuration (HTTP/1.1, HTTP/2 with prior knowledge or HTTP/2 over
TLS, JSON or SSE responses, a tool count) it starts ``bench.server`` in its own process
pinned to one core, then each contender in its own process pinned to another core, one
after the other, against that same server: sequential work items per era (legacy
2025-11-25, modern 2026-07-28), and on the 10-tool JSON servers 50 concurrent work items
and the heap held per idle pooled connection.  The server counts requests and TCP
connections per measured phase.  On each 10-tool server, then, the paired issue-12
rounds (``bench.paired``: the sync and asyncio adapters and their floors, kept warm,
interleaved).  Then a listing parse micro-benchmark (``bench.parse``) and a profile of
sansmcp's work item per backend, era and server kind (``bench.profile``: where the time
goes, shown under each missed target) and tracing off vs on (``bench.tracing``); the
cold start (``bench.cold_start``: imports, a fresh process's first work item, the CLI)
against the 10-tool HTTP/1.1 server; last, the in-flight rows (``bench.inflight``: 1 /
100 / 500 / 1,000 in flight against ``bench.canned``, and a profile at 1,000).  The TLS
rows use a trustme CA made for the run (``results/tls.tmp/``).  Writes
``bench/results/latest.json``; ``bench.report`` turns it into ``latest.md`` (with the
issue-16 targets table) and plots.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from . import paired, report
from .contenders import CONTENDERS, LLHTTP
from .procs import ROOT, LineProcess, Server, cache_bytecode, make_tls

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


def _cpus() -> tuple[int | None, int | None]:
    """(server core, client core) when the machine lets us pin; else (None, None)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None, None
    if len(cores) < 2:
        return None, None
    return cores[-1], cores[0]


def _load() -> list[float]:
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


def _phases(
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


def _listing_body(server: Server) -> bytes:
    """The modern tools/list response body, as the server sends it to the floor."""
    from .floor import SyncFloor, work_item

    floor = SyncFloor("127.0.0.1", server.port, server.path, "h1")
    steps = work_item("modern")
    try:
        return floor._exchange(next(steps)).body
    finally:
        floor.close()
        steps.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a reduced set, under a minute")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated contenders, 'paired' for the paired section (debugging; default all)",
    )
    args = parser.parse_args()
    cache_bytecode()
    RESULTS.mkdir(parents=True, exist_ok=True)
    server_cpu, client_cpu = _cpus()
    only = set(filter(None, args.only.split(",")))
    started = time.time()
    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "pinned": {"server": server_cpu, "client": client_cpu},
        "load_before": _load(),
        "versions": _versions(),
    }
    records: list[dict[str, Any]] = []
    extras: dict[str, Any] = {"profiles": {}, "paired": []}
    tls = make_tls(RESULTS / "tls.tmp")
    with open(RESULTS / "run.log.tmp", "w") as log:
        for config in plan(args.quick):
            print(f"server {config.label}  (load {_load()})", flush=True)
            server = Server(
                http=config.http,
                body=config.body,
                tools=config.tools,
                log=log,
                cpu=server_cpu,
                tls=(tls["cert"], tls["key"]) if config.tls else None,
            )
            ca = tls["ca"] if config.tls else None
            try:
                for name in config.contenders:
                    if only and name not in only:
                        continue
                    phases = _phases(config, name, server.url, ca)
                    records += run_contender(server, config, name, phases, cpu=client_cpu, log=log)
                if config.tools == 10 and (not only or "paired" in only):
                    extras["paired"] += paired.run_server(
                        server,
                        config.label,
                        config.http,
                        config.eras,
                        ca=ca,
                        rounds=paired.QUICK_ROUNDS if args.quick else paired.ROUNDS,
                        budget=paired.QUICK_BUDGET if args.quick else paired.BUDGET,
                        log=log,
                        cpu=client_cpu,
                    )
                if config.tools == 10 and config.body == "json":
                    extras["profiles"].update(
                        _profiles(config, server.url, ca, args.quick, log, client_cpu)
                    )
                if config.tools == 1000 and config.http == "h1" and config.body == "json":
                    body = _listing_body(server)
                    (RESULTS / "listing-1000.json.tmp").write_bytes(body)
                    extras["parse"] = _parse_bench(
                        RESULTS / "listing-1000.json.tmp", args.quick, log, client_cpu
                    )
                if config.tools == 10 and config.http == "h1" and config.body == "json":
                    extras["tracing"] = _run_json_child(
                        ["-m", "bench.tracing", server.url] + (["--quick"] if args.quick else []),
                        log,
                        client_cpu,
                    )
                    print("  cold start", flush=True)
                    extras["cold_start"] = _cold_start(server.url, args.quick, log, client_cpu)
            finally:
                server.stop()
            print(f"  ({time.time() - started:.0f} s so far)", flush=True)
        print(f"in flight (bench.canned)  (load {_load()})", flush=True)
        extras["inflight"] = _inflight(args.quick)
        print(f"  ({time.time() - started:.0f} s so far)", flush=True)
    meta["load_after"] = _load()
    meta["duration_s"] = round(time.time() - started, 1)
    result = {"meta": meta, "records": records, **extras}
    (RESULTS / "latest.json").write_text(json.dumps(result, indent=1) + "\n")
    report.write(result, RESULTS)
    print(f"wrote {RESULTS / 'latest.json'} and latest.md in {meta['duration_s']} s")


def _profiles(
    config: ServerConfig, url: str, ca: str | None, quick: bool, log: IO[str], cpu: int | None
) -> dict[str, Any]:
    """cProfile of sansmcp's work item on each backend and era against this server:
    where the time goes, for the targets the report finds missed."""
    out: dict[str, Any] = {}
    # legacy profiled on HTTP/1.1 only (the h2 legacy rows are shown with their modern
    # twin's profile): a profile per row would add minutes to the run
    eras = ("modern",) if quick or config.http != "h1" else config.eras
    for era in eras:
        for backend in ("asyncio",) if quick else BACKENDS:
            args = ["-m", "bench.profile", url, "--backend", backend, "--era", era]
            args += ["--http", config.http] + (["--ca", ca] if ca else [])
            args += ["--quick"] if quick else []
            out[f"{config.label}|{era}|sansmcp-{backend}"] = _run_json_child(args, log, cpu)
    return out


def _cold_start(url: str, quick: bool, log: IO[str], cpu: int | None) -> dict[str, Any]:
    """``bench.cold_start`` in its own process (its children inherit the core pinning)."""
    args = ["-m", "bench.cold_start", "--url", url, "--json", "1"]
    args += ["--runs", "2" if quick else "6"]
    return _run_json_child(args, log, cpu)


def _inflight(quick: bool) -> dict[str, Any]:
    """The in-flight rows (``bench.inflight``: its own canned server, unpinned: at
    1,000 in flight client and server share the machine) and a profile at the top level."""
    from . import inflight

    levels = "1,100" if quick else "1,100,500,1000"
    items = 200 if quick else 2000
    names = inflight.CONTENDERS
    if quick:
        names = ("sansmcp-asyncio", "floor-asyncio", "sansmcp-sync", "floor-sync")
    options = argparse.Namespace(
        levels=levels, contenders=",".join(names), limits="", items=items, repeat=1
    )
    try:
        rows = inflight.run(options)
        top = max(int(level) for level in levels.split(","))
        profiles = (
            {} if quick else inflight.profile(["sansmcp-asyncio", "sansmcp-trio"], top, items)
        )
    except (SystemExit, Exception) as exc:  # a failed child: the report says so
        return {"failed": f"{type(exc).__name__}: {exc}"}
    for row in rows:
        print(
            f"    {row['name']:16} {row['level']:5} cpu {row['cpu_ms']:.3f} ms/item "
            f"p99 {row['p99_ms']:.1f} ms  rss {row['rss_kib_per_item']:.1f} KiB/item",
            flush=True,
        )
    return {"levels": levels, "items": items, "rows": rows, "profiles": profiles, "top": top}


def _parse_bench(path: Path, quick: bool, log: IO[str], cpu: int | None) -> dict[str, Any]:
    from .parse import VARIANTS

    out: dict[str, Any] = {"ms": {}}
    for index, name in enumerate(VARIANTS):
        args = ["-m", "bench.parse", str(path), str(index)] + (["--quick"] if quick else [])
        one = _run_json_child(args, log, cpu)
        out["ms"][name] = one.get("ms")
        if "error" in one or "failed" in one:
            out.setdefault("errors", {})[name] = one.get("error") or one.get("failed")
        for key in ("tools", "body_bytes", "rounds"):
            if key in one:
                out[key] = one[key]
    args = ["-m", "bench.parse", str(path), "profile"] + (["--quick"] if quick else [])
    out["profile"] = _run_json_child(args, log, cpu).get("rows")
    return out


def _run_json_child(args: list[str], log: IO[str], cpu: int | None) -> dict[str, Any]:
    child = LineProcess(args, log=log, cpu=cpu)
    try:
        return child.read_json(timeout=300)
    except (TimeoutError, EOFError) as exc:
        return {"failed": f"{type(exc).__name__}: {exc}"}
    finally:
        child.stop()


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("sansmcp", "mcp", "fastmcp", "httpx2", "h11", "h2", "trio", "pydantic"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "absent"
    return out


if __name__ == "__main__":
    main()
