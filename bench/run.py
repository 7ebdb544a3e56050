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
against the 10-tool HTTP/1.1 server; then the in-flight rows (``bench.inflight``: 1 /
100 / 500 / 1,000 in flight against ``bench.canned``, and a profile at 1,000); last, the
fleet (``bench.fleet``: 8 processes sharing listings through a real ``redis-server``, and
CPU per item on a Redis hit, an in-process hit and no cache) and the egress proxy
(``bench.proxy``: the work item through a real tinyproxy's ``CONNECT`` tunnel vs direct).  The TLS
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
import sys
import time
from pathlib import Path
from typing import IO, Any

from . import paired, report
from .procs import LineProcess, Server, cache_bytecode, make_tls
from .sequential import (
    BACKENDS,
    RESULTS,
    ServerConfig,
    contender_phases,
    cpus,
    load,
    plan,
    run_contender,
)


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
        help="comma-separated contenders, 'paired' / 'fleet' / 'proxy' for those sections (debugging; default all)",
    )
    args = parser.parse_args()
    cache_bytecode()
    RESULTS.mkdir(parents=True, exist_ok=True)
    server_cpu, client_cpu = cpus()
    only = set(filter(None, args.only.split(",")))
    started = time.time()
    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "pinned": {"server": server_cpu, "client": client_cpu},
        "load_before": load(),
        "versions": _versions(),
    }
    records: list[dict[str, Any]] = []
    extras: dict[str, Any] = {"profiles": {}, "paired": []}
    tls = make_tls(RESULTS / "tls.tmp")
    with open(RESULTS / "run.log.tmp", "w") as log:
        for config in plan(args.quick):
            print(f"server {config.label}  (load {load()})", flush=True)
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
                    phases = contender_phases(config, name, server.url, ca)
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
        print(f"in flight (bench.canned)  (load {load()})", flush=True)
        extras["inflight"] = _inflight(args.quick)
        print(f"  ({time.time() - started:.0f} s so far)", flush=True)
        if not only or "fleet" in only:
            print(f"fleet (bench.fleet, redis-server)  (load {load()})", flush=True)
            quick = ["--quick"] if args.quick else []
            extras["fleet"] = _run_json_child(["-m", "bench.fleet", *quick], log, None, timeout=900)
            print(f"  ({time.time() - started:.0f} s so far)", flush=True)
        if not only or "proxy" in only:
            print(f"egress proxy (bench.proxy, tinyproxy)  (load {load()})", flush=True)
            args_proxy = ["-m", "bench.proxy"] + (["--quick"] if args.quick else [])
            if server_cpu is not None:
                args_proxy += ["--server-cpu", str(server_cpu)]
            extras["proxy"] = _run_json_child(args_proxy, log, client_cpu, timeout=900)
            print(f"  ({time.time() - started:.0f} s so far)", flush=True)
    meta["load_after"] = load()
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


def _run_json_child(
    args: list[str], log: IO[str], cpu: int | None, timeout: float = 300
) -> dict[str, Any]:
    child = LineProcess(args, log=log, cpu=cpu)
    try:
        return child.read_json(timeout=timeout)
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
