"""Turn ``latest.json`` into ``latest.md`` and PNG plots: ``python -m bench.report``.

Key columns are ratios, measured side by side on the same server in one run:
``SDK-default ÷ this`` and ``SDK-tuned ÷ this`` (how many times cheaper this
contender's client CPU per work item is than the official SDK client), and
``this ÷ floor`` (how many times the hand-written floor of the same runtime
it costs: asyncio contenders against the asyncio floor, trio against trio, the blocking
adapter against the blocking (sync) floor), and on HTTP/1.1 ``this ÷ llhttp`` against the
same floor reading responses with llhttp.  The targets table (issue 16, and issue 12's
sync targets) is computed from the records; each missed target is followed by the
profile of where its time goes (:mod:`bench.targets`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import fleet as fleet_module
from . import paired as paired_module
from . import proxy as proxy_module
from . import targets as targets_module
from .targets import _fmt

FLOOR_OF = {
    "sansmcp-asyncio": "floor-asyncio",
    "sansmcp-trio": "floor-trio",
    "sansmcp-sync": "floor-sync",
    "sdk-default": "floor-asyncio",
    "sdk-tuned": "floor-asyncio",
    "fastmcp": "floor-asyncio",
    "floor-sync": "floor-sync",
    "floor-asyncio": "floor-asyncio",
    "floor-trio": "floor-trio",
    "llhttp-sync": "floor-sync",
    "llhttp-asyncio": "floor-asyncio",
    "llhttp-trio": "floor-trio",
}
LLHTTP_OF = {
    "sansmcp-asyncio": "llhttp-asyncio",
    "sansmcp-trio": "llhttp-trio",
    "sansmcp-sync": "llhttp-sync",
    "sdk-default": "llhttp-asyncio",
    "sdk-tuned": "llhttp-asyncio",
    "fastmcp": "llhttp-asyncio",
}
ORDER = (
    "sansmcp-asyncio",
    "sansmcp-trio",
    "sansmcp-sync",
    "sdk-default",
    "sdk-tuned",
    "fastmcp",
    "floor-sync",
    "floor-asyncio",
    "floor-trio",
    "llhttp-sync",
    "llhttp-asyncio",
    "llhttp-trio",
)
SERVERS = (
    "h1/json/10",
    "h1/sse/10",
    "h2/json/10",
    "h2/sse/10",
    "h2tls/json/10",
    "h1/json/100",
    "h1/json/1000",
    "h1/sse/1000",
    "h2/json/1000",
)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _ok(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if "failed" not in r and r.get("kind") in ("seq", "conc")]


def _index(records: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    return {(r["server"], r["era"], r["kind"], r["contender"]): r for r in _ok(records)}


def _rows(records: list[dict[str, Any]], kind: str) -> list[str]:
    index = _index(records)
    groups = sorted(
        {(r["server"], r["era"]) for r in _ok(records) if r["kind"] == kind},
        key=lambda g: (SERVERS.index(g[0]) if g[0] in SERVERS else 99, g[1]),
    )
    lines = [
        "| server | era | contender | CPU ms/item | SDK-default ÷ this | SDK-tuned ÷ this "
        "| this ÷ floor | this ÷ llhttp | wall p50 ms | wall p99 ms | req/item | TCP/item | HTTP "
        "| peak RSS MB | n | errors |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|",
    ]
    for server, era in groups:

        def cpu(name: str, server: str = server, era: str = era) -> float | None:
            record = index.get((server, era, kind, name))
            return record.get("cpu_ms_per_item") if record else None

        for name in ORDER:
            record = index.get((server, era, kind, name))
            if record is None:
                continue
            mine = record["cpu_ms_per_item"]
            versions = "+".join(sorted(record.get("by_version", {})))
            lines.append(
                f"| {server} | {era} | {name} | {_fmt(mine, 3)} "
                f"| {_fmt(_ratio(cpu('sdk-default'), mine))} "
                f"| {_fmt(_ratio(cpu('sdk-tuned'), mine))} "
                f"| {_fmt(_ratio(mine, cpu(FLOOR_OF[name])))} "
                f"| {_fmt(_ratio(mine, cpu(LLHTTP_OF.get(name, ''))))} "
                f"| {_fmt(record['wall_ms_median'])} | {_fmt(record['wall_ms_p99'])} "
                f"| {_fmt(record['requests_per_item'])} | {_fmt(record['connections_per_item'], 3)} "
                f"| {versions} | {_fmt(record['maxrss_mb'], 1)} | {record['n']} "
                f"| {record['errors']} |"
            )
    return lines


def _paired(entries: list[dict[str, Any]] | None, records: list[dict[str, Any]]) -> list[str]:
    """The paired issue-12 rounds (:mod:`bench.paired`) beside the sequential rows' ratios."""
    if not entries:
        return ["(not run)"]
    seq = targets_module._seq(records)
    lines = [
        "| server | era | rounds | sync ms | asyncio ms | floor-sync ms | floor-asyncio ms "
        "| sync ÷ asyncio | sync ÷ floor | asyncio ÷ floor "
        "| (sync ÷ floor) ÷ (asyncio ÷ floor) | sequential: sync ÷ asyncio, ratio of ratios "
        "| errors |",
        "|---|---|--:|--:|--:|--:|--:|---|--:|--:|---|---|--:|",
    ]
    for entry in entries:
        server, era = entry["server"], entry["era"]
        if "cpu_ms" not in entry:
            lines.append(f"| {server} | {era} | FAILED: {entry.get('failed')} |")
            continue

        def cpu(name: str, server: str = server, era: str = era) -> float | None:
            return seq.get((server, era, name))

        seq_one = _ratio(cpu("sansmcp-sync"), cpu("sansmcp-asyncio"))
        seq_two = _ratio(
            _ratio(cpu("sansmcp-sync"), cpu("floor-sync")),
            _ratio(cpu("sansmcp-asyncio"), cpu("floor-asyncio")),
        )
        ms = {name: _fmt(entry["cpu_ms"][name]["median"], 3) for name in paired_module.NAMES}
        errors = sum(sum(row["errors"].values()) for row in entry["rounds"])
        lines.append(
            f"| {server} | {era} | {entry['rounds_used']} | {ms['sansmcp-sync']} "
            f"| {ms['sansmcp-asyncio']} | {ms['floor-sync']} | {ms['floor-asyncio']} "
            f"| {paired_module.fmt_spread(entry['sync_vs_asyncio'])} "
            f"| {_fmt(entry['sync_floor']['median'])} | {_fmt(entry['asyncio_floor']['median'])} "
            f"| {paired_module.fmt_spread(entry['floor_ratio'])} "
            f"| {_fmt(seq_one)}, {_fmt(seq_two)} | {errors}"
            + (f"; FAILED after these rounds: {entry['failed']}" if "failed" in entry else "")
            + " |"
        )
    return lines


def _failures(records: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in records:
        if "failed" in r:
            lines.append(
                f"- {r.get('server')} {r.get('era', '')} {r.get('kind', '')} "
                f"{r['contender']}: {r['failed']}"
            )
        elif r.get("errors"):
            lines.append(
                f"- {r['server']} {r['era']} {r['kind']} {r['contender']}: "
                f"{r['errors']} failed work items, e.g. {r['error_samples'][:2]}"
            )
    return lines


def _requests(records: list[dict[str, Any]]) -> list[str]:
    """What each contender sends per work item, as the server saw it (10-tool servers)."""
    lines = [
        "| server | era | contender | per work item (JSON-RPC method or HTTP method) |",
        "|---|---|---|---|",
    ]
    for r in _ok(records):
        if r["kind"] != "seq" or r["tools"] != 10 or not r.get("by_rpc"):
            continue
        parts = ", ".join(
            f"{name} {_fmt(count / r['n'])}"
            for name, count in sorted(r["by_rpc"].items(), key=lambda kv: -kv[1])
        )
        lines.append(f"| {r['server']} | {r['era']} | {r['contender']} | {parts} |")
    return lines


def _health(records: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| server | era | kind | contender | n | RSS growth KiB | RSS growth B/item | fd growth |",
        "|---|---|---|---|--:|--:|--:|--:|",
    ]
    for r in _ok(records):
        if "rss_growth_kb" not in r:
            continue
        lines.append(
            f"| {r['server']} | {r['era']} | {r['kind']} | {r['contender']} | {r['n']} "
            f"| {r['rss_growth_kb']} | {_fmt(1024 * r['rss_growth_kb'] / r['n'])} "
            f"| {r['fds_growth']} |"
        )
    return lines


def _scaling(records: list[dict[str, Any]]) -> tuple[list[str], dict[str, dict[int, float]]]:
    series: dict[str, dict[int, float]] = {}
    for r in _ok(records):
        if (
            r["kind"] == "seq"
            and r["era"] == "modern"
            and r["http"] == "h1"
            and r["body"] == "json"
        ):
            series.setdefault(r["contender"], {})[r["tools"]] = r["cpu_ms_per_item"]
    counts = sorted({t for s in series.values() for t in s})
    lines = [
        "| contender | " + " | ".join(f"{t} tools ms" for t in counts) + " | 1000 ÷ 10 |",
        "|---|" + "--:|" * (len(counts) + 1),
    ]
    for name in ORDER:
        if name not in series:
            continue
        row = series[name]
        cells = [_fmt(row.get(t), 3) for t in counts]
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {_fmt(_ratio(row.get(1000), row.get(10)))} |"
        )
    return lines, series


def _memory(records: list[dict[str, Any]]) -> list[str]:
    if not any(r.get("kind") == "mem" for r in records):
        return ["(not measured in this run; `make bench` measures it)"]
    lines = [
        "| contender | idle pooled connections | Python heap per idle connection KiB | fd growth |",
        "|---|--:|--:|--:|",
    ]
    for r in records:
        if r.get("kind") != "mem" or "failed" in r:
            continue
        held = r["heap_delta_bytes"]
        extra = max(1, r["connections"] - 1)
        lines.append(
            f"| {r['contender']} | {r['connections']} | {_fmt(held / extra / 1024, 1)} "
            f"| {r['fds_growth']} |"
        )
    return lines


def _request_targets(records: list[dict[str, Any]]) -> list[str]:
    """The request counts per work item (issue 7's protocol targets, still held)."""
    index = _index(records)
    lines = [
        "| check | where | measured | met |",
        "|---|---|--:|---|",
    ]
    for server in SERVERS:
        for name in ("sansmcp-asyncio", "sansmcp-trio", "sansmcp-sync"):
            me = index.get((server, "modern", "seq", name))
            if me is not None:
                value = me["requests_per_item"]
                lines.append(
                    f"| modern, warm era: only the operation's requests (2) | {server} {name} "
                    f"| {_fmt(value)} req | {'yes' if value <= 2.0 + 1e-9 else '**no**'} |"
                )
            me = index.get((server, "legacy", "seq", name))
            if me is not None:
                value = me["requests_per_item"]
                lines.append(
                    f"| legacy: initialize, initialized, list, call, DELETE (5) | {server} {name} "
                    f"| {_fmt(value)} req | {'yes' if value <= 5.0 + 1e-9 else '**no**'} |"
                )
    return lines


def _inflight(inflight: dict[str, Any] | None) -> list[str]:
    if not inflight or "rows" not in inflight:
        return [f"(not measured: {inflight.get('failed') if inflight else 'absent'})"]
    from .inflight import CONTENDERS as NAMES
    from .inflight import FLOOR

    rows = inflight["rows"]
    by = {(row["name"], int(row["level"])): row for row in rows}
    lines = [
        f"`bench.inflight` against `bench.canned` (HTTP/1.1, modern, 10 tools; a fast canned "
        f"server, so the server is not the bottleneck), default `Limits()`, "
        f"{inflight['items']:,} items per cell (at least 2 per in-flight worker), one process "
        "per (contender, level); the blocking contenders stop at 100 threads. RSS per "
        "in-flight item: peak RSS growth over the level; marginal: the level-1 growth apart.",
        "",
        "| contender | in flight | CPU ms/item | x own sequential | p50 ms | p99 ms "
        "| p99 x floor | RSS KiB / in-flight | marginal | dials |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in sorted(rows, key=lambda r: (NAMES.index(r["name"]), int(r["level"]))):
        level = int(row["level"])
        seq = by.get((row["name"], 1))
        floor = by.get((FLOOR.get(row["name"], ""), level))
        marginal = None
        if seq is not None and level > 1:
            marginal = (row["rss_kib"] - seq["rss_kib"]) / (level - 1)
        lines.append(
            f"| {row['name']} | {level:,} | {_fmt(row['cpu_ms'], 3)} "
            f"| {_fmt(_ratio(row['cpu_ms'], seq['cpu_ms'] if seq else None))} "
            f"| {_fmt(row['p50_ms'])} | {_fmt(row['p99_ms'])} "
            f"| {_fmt(_ratio(row['p99_ms'], floor['p99_ms'] if floor else None))} "
            f"| {_fmt(row['rss_kib_per_item'] if level > 1 else None)} | {_fmt(marginal)} "
            f"| {row['dials']:.0f} |"
        )
    return lines


def _cold_start(cold: dict[str, Any] | None) -> list[str]:
    if not cold or "imports" not in cold:
        return [f"(not measured: {cold.get('failed') if cold else 'absent'})"]
    lines = [
        f"Fresh interpreters, {cold['runs']} runs each (imports: 10 in `make bench`), contenders "
        "interleaved; medians. Byte code cached (`PYTHONPYCACHEPREFIX`), as an installed "
        "package runs. Import: `python -X importtime -c 'import M'`, the cumulative "
        "figure of `M`'s own line, and the CPU (`process_time`) around it.",
        "",
        "| import | -X importtime ms | min ms | CPU ms | largest areas (self ms) |",
        "|---|--:|--:|--:|---|",
    ]
    for label, row in cold["imports"].items():
        areas = ", ".join(f"{k} {_fmt(v, 1)}" for k, v in list(row["areas_ms"].items())[:4])
        lines.append(
            f"| `{row['module']}`{'' if label == row['module'] else f' ({label})'} "
            f"| {_fmt(row['total_ms'], 1)} "
            f"| {_fmt(row['total_ms_min'], 1)} | {_fmt(row['cpu_ms'], 1)} | {areas} |"
        )
    lines += [
        "",
        "A fresh process: import the client, build it, one work item (connect, list 10 "
        "tools, call `echo`, close) against the 10-tool HTTP/1.1 JSON server.",
        "",
        "| contender | import wall ms | import CPU ms | first item wall ms | first item CPU ms |",
        "|---|--:|--:|--:|--:|",
    ]
    for name, row in cold["first_item"].items():
        lines.append(
            f"| {name} | {_fmt(row['import_wall_ms'], 0)} | {_fmt(row['import_cpu_ms'], 0)} "
            f"| {_fmt(row['first_wall_ms'], 0)} | {_fmt(row['first_cpu_ms'], 0)} |"
        )
    lines += [
        "",
        "The CLI, `sansmcp tools URL --allow-loopback --backend B`, the whole child:",
        "",
        "| backend | wall ms | CPU ms |",
        "|---|--:|--:|",
    ]
    for backend, row in cold["cli"].items():
        lines.append(f"| {backend} | {_fmt(row['wall_ms'], 0)} | {_fmt(row['cpu_ms'], 0)} |")
    return lines


def _cpu(
    index: dict[tuple[str, str, str, str], dict[str, Any]], server: str, era: str, name: str
) -> float | None:
    record = index.get((server, era, "seq", name))
    return record["cpu_ms_per_item"] if record else None


def _profile(profile: dict[str, Any] | None) -> list[str]:
    if not profile or "top_own" not in profile:
        return ["(no profile)"]
    lines = [
        f"cProfile of {profile['items']} work items (10 tools, modern, HTTP/1.1 JSON, asyncio adapter, "
        f"warm pool and era cache); profiled own time {_fmt(profile['profiled_us_per_item'])} µs per "
        "item (cProfile inflates it; read the shares, not the totals).",
        "",
        "Own time by area, µs per item: "
        + ", ".join(f"{k} {_fmt(v)}" for k, v in profile["areas_us_per_item"].items()),
        "",
        "| # | function (own time) | calls/item | own µs/item | cumulative µs/item |",
        "|--:|---|--:|--:|--:|",
    ]
    for i, row in enumerate(profile["top_own"][:10], 1):
        lines.append(
            f"| {i} | `{row['function']}` | {_fmt(row['calls_per_item'])} "
            f"| {_fmt(row['tottime_us_per_item'])} | {_fmt(row['cumtime_us_per_item'])} |"
        )
    return lines


def _tracing(tracing: dict[str, Any] | None) -> list[str]:
    if not tracing or "on_us_per_item" not in tracing:
        return [f"(not measured: {tracing.get('failed') if tracing else 'absent'})"]
    return [
        "The 10-tool modern work item (HTTP/1.1 JSON, asyncio), telemetry off vs on "
        "(`sansmcp.otel.Telemetry` over the real opentelemetry-sdk, in-memory exporter and "
        f"reader), {tracing['blocks']} alternated blocks of {tracing['items_per_block']} "
        "items in one process; CPU (`process_time`) per item, medians of the blocks.",
        "",
        "| tracing | CPU µs/item | ratio |",
        "|---|--:|--:|",
        f"| off | {_fmt(tracing['off_us_per_item'], 0)} | 1.00 |",
        f"| on | {_fmt(tracing['on_us_per_item'], 0)} | {_fmt(tracing['on_over_off'])} |",
    ]


def _parse(parse: dict[str, Any] | None) -> list[str]:
    if not parse or "ms" not in parse:
        return [f"(no parse benchmark: {parse})"]
    ms = parse["ms"]
    sdk = ms.get("SDK: pydantic validate")
    floor = ms.get("json.loads (floor)")
    lines = [
        f"One modern `tools/list` body of {parse['tools']:,} tools ({parse['body_bytes']:,} bytes), "
        f"{parse['rounds']} rounds each, process CPU.",
        "",
        "| variant | CPU ms per listing | ÷ SDK | ÷ json.loads |",
        "|---|--:|--:|--:|",
    ]
    for name, value in ms.items():
        lines.append(
            f"| {name} | {_fmt(value, 3)} | {_fmt(_ratio(value, sdk), 3)} | {_fmt(_ratio(value, floor))} |"
        )
    if parse.get("profile"):
        lines += [
            "",
            "Where sansmcp's parse + validate goes (cProfile, process time; inflated by the "
            "profiler, read the shares):",
            "",
            "| function | calls/listing | own ms | cumulative ms |",
            "|---|--:|--:|--:|",
        ]
        for row in parse["profile"][:10]:
            lines.append(
                f"| `{row['function']}` | {_fmt(row['calls'])} | {_fmt(row['own_ms'])} "
                f"| {_fmt(row['cumulative_ms'])} |"
            )
    if parse.get("errors"):
        lines.append("")
        lines.append(f"errors: {parse['errors']}")
    return lines


def write(result: dict[str, Any], out: Path) -> None:
    meta = result["meta"]
    records = result["records"]
    scaling_lines, series = _scaling(records)
    found = targets_module.evaluate(result)
    md = [
        "# sansmcp benchmark" + (" (quick)" if meta.get("quick") else ""),
        "",
        f"Run {meta['date']}, {meta['duration_s']} s, Python {meta['python']}, {meta['cpus']} CPUs; "
        f"server pinned to CPU {meta['pinned']['server']}, clients to CPU {meta['pinned']['client']}. "
        f"Load average before {meta['load_before']}, after {meta.get('load_after')} "
        "(the machine is shared: absolute times drift, side-by-side ratios hold better).",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".",
        "",
        "Work item: connect, list tools (following pagination), call `echo`, close; a fresh "
        "MCP connection each time. CPU is the client process's user+sys (`getrusage`) over the "
        "measured items; requests and TCP connections are counted inside the server process. "
        "Server `hN/body/tools`: h1 = uvicorn HTTP/1.1, h2 = hypercorn h2c (prior knowledge), "
        "h2tls = hypercorn HTTP/2 over TLS (ALPN; a trustme CA every contender trusts); "
        "json or sse responses; tools in the listing. HTTP column: the versions the server saw. "
        "Ratios: `SDK-default ÷ this` and `SDK-tuned ÷ this` > 1 means this contender is that "
        "many times cheaper; `this ÷ floor` is its CPU over the hand-written floor of "
        "its own runtime (asyncio floor for asyncio clients, trio floor for trio, the "
        "blocking floor for the blocking adapter); `this ÷ llhttp` over the same floor "
        "reading HTTP/1.1 with llhttp (`httptools`; the `llhttp-*` rows) instead of h11.",
        "",
        "Notes on reading it:",
        "",
        "- The official server answers 2026-07-28 requests with `application/json` even in "
        "SSE mode (it streams only when a request needs to), so the SSE servers run the legacy "
        "era only.",
        "- `sdk-default` and `fastmcp` build a new `httpx2` client per work item (new TCP "
        "connections each time, `mode='auto'`: a `server/discover` probe each time) and speak "
        "HTTP/1.1 even to the h2c server. `sdk-tuned` shares one pooled `httpx2.AsyncClient` "
        "(HTTP/2 prior knowledge on h2 servers) and pins `mode` to 2026-07-28 (no probe) or "
        "`legacy`. In legacy mode the SDK also opens the standalone GET stream (one more request "
        "and connection per item); sansmcp never opens it.",
        "- Floors send sansmcp's exact request bytes over one keep-alive connection per "
        "in-flight work item (unbounded; HTTP/2 floors do not multiplex concurrent items), "
        "check each status and `json.loads` each body; nothing else. HTTP/1.1 is read with "
        "h11 (or llhttp), HTTP/2 by a hand-written frame reader with `hpack` (not the `h2` "
        "library, which costs more than sansmcp's own h2 wire).",
        "- hypercorn's `keep_alive_max_requests` (1,000 by default: GOAWAY after 1,000 "
        "requests on a connection, failing the streams in flight) is raised for the run; with "
        "the default, 50 concurrent work items over one HTTP/2 connection fail a few percent "
        "of items, for sansmcp and the SDK alike.",
        "- p99 over fewer than 100 items is the sample's maximum. Under 50 concurrent items "
        "the single-process server is the bottleneck, so wall times there measure the server.",
        "",
        "## Targets (issue 16, and issue 12's sync targets)",
        "",
        "Computed from this run's records (`bench/targets.py`). Ratios to the SDK and "
        "the floors are CPU per work item in the sequential rows (10 tools); the TLS h2 "
        "server is `h2tls/json/10`. Issue 12's two targets come from the paired section "
        "below (interleaved rounds, the four contenders kept warm; measured: the median "
        "of the per-round ratios, its range and quartiles in the note beside the sequential "
        "rows' figure); a place the paired section did not run falls back to the "
        "sequential rows. A missed target's profile follows in the next section.",
        "",
        *targets_module.table(found),
        "",
        "## Where the time goes, for each missed target",
        "",
        "cProfile (process time) of sansmcp's work item on the same server kind, era and "
        "backend (the SSE servers share their JSON twin's profile); own time grouped by "
        "area, a C builtin charged to its callers' areas; the in-flight profiles are the "
        "measured waves at the top level; the listing's is `bench.parse`'s; the import's "
        "is `-X importtime` self time.",
        "",
        *targets_module.where_the_time_goes(found, result),
        "",
        "## Issue 12, paired: the blocking adapter against asyncio, interleaved rounds",
        "",
        "`bench/paired.py`: against each 10-tool server and era, one warm process per "
        "contender (`sansmcp-sync`, `sansmcp-asyncio`, `floor-sync`, `floor-asyncio`), "
        "an uncounted sizing round, then rounds of short blocks of the same n items each, the "
        "contenders one after another in an order rotated per round (a Williams square), two "
        "untimed items before each block. CPU ms per item: the median over the rounds without "
        "errors; the ratios are computed per round "
        "and shown as median [min-max, IQR]. The last column is the same two ratios from the "
        "sequential rows (one ~1 s block per contender, minutes apart), for comparison.",
        "",
        *_paired(result.get("paired"), records),
        "",
        "## Sequential work items",
        "",
        *_rows(records, "seq"),
        "",
        "## Requests per work item, by kind",
        "",
        *_requests(records),
        "",
        "## 50 concurrent work items",
        "",
        *_rows(records, "conc"),
        "",
        "## Scaling with tool count (modern, HTTP/1.1, JSON): CPU ms per work item",
        "",
        *scaling_lines,
        "",
        "## Parse and validate a 1,000-tool listing",
        "",
        *_parse(result.get("parse")),
        "",
        "## Memory per idle pooled connection (HTTP/1.1)",
        "",
        "Python heap (tracemalloc) still held after 8 simultaneous work items left their "
        "sockets in the pool, over the connections beyond the one already pooled; kernel socket "
        "buffers are not included.",
        "",
        *_memory(records),
        "",
        "## In flight: 1 / 100 / 500 / 1,000 work items at once (issue 16, item 1)",
        "",
        *_inflight(result.get("inflight")),
        "",
        "## Fleet: listings shared through Redis (issue 28)",
        "",
        *fleet_module.markdown(result.get("fleet")),
        "",
        "## Egress proxy: the work item through tinyproxy's CONNECT tunnel (issue 29)",
        "",
        *proxy_module.markdown(result.get("proxy")),
        "",
        "## Cold start: imports, a fresh process's first work item, the CLI",
        "",
        *_cold_start(result.get("cold_start")),
        "",
        "## Request counts per work item",
        "",
        *_request_targets(records),
        "",
        "## Where sansmcp's CPU goes",
        "",
        *_profile(
            (result.get("profiles") or {}).get("h1/json/10|modern|sansmcp-asyncio")
            or result.get("profile")
        ),
        "",
        "## Tracing off vs on (issue 14)",
        "",
        *_tracing(result.get("tracing")),
        "",
        "## Health: RSS and file descriptors across the measured items",
        "",
        "Growth from just before to just after the measured items (after a collection). Under "
        "concurrency the fd growth is the idle sockets the pool keeps.",
        "",
        *_health(records),
        "",
        "## Failures and errors",
        "",
        *(_failures(records) or ["none"]),
        "",
    ]
    (out / "latest.md").write_text("\n".join(md))
    _plots(records, series, out)


def _color(name: str) -> str:
    """One colour per contender in every plot (matplotlib's tab10 cycle, in ORDER)."""
    return f"C{ORDER.index(name) % 10}"


def _plots(records: list[dict[str, Any]], series: dict[str, dict[int, float]], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    index = _index(records)
    groups = [
        (s, e)
        for s in SERVERS
        for e in ("legacy", "modern")
        if s.endswith("/10") and any(index.get((s, e, "seq", n)) for n in ORDER)
    ]
    names = [n for n in ORDER if any(index.get((s, e, "seq", n)) for s, e in groups)]
    if groups and names:
        fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(groups)), 5))
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            xs, ys = [], []
            for g, (server, era) in enumerate(groups):
                record = index.get((server, era, "seq", name))
                if record:
                    xs.append(g + i * width - 0.4 + width / 2)
                    ys.append(record["cpu_ms_per_item"])
            ax.bar(xs, ys, width, label=name, color=_color(name))
        ax.set_yscale("log")
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{s}\n{e}" for s, e in groups])
        ax.set_ylabel("client CPU ms per work item (log)")
        ax.set_title("CPU per work item (10 tools), by contender")
        ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.16))
        ax.grid(axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "cpu_per_item.png", dpi=110)
        plt.close(fig)
    if series:
        fig, ax = plt.subplots(figsize=(7, 5))
        for name in ORDER:
            points = series.get(name)
            if points and len(points) > 1:
                counts = sorted(points)
                ax.plot(
                    counts, [points[c] for c in counts], marker="o", label=name, color=_color(name)
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tools in the listing")
        ax.set_ylabel("client CPU ms per work item")
        ax.set_title("Scaling with tool count (modern, HTTP/1.1, JSON)")
        ax.legend(fontsize=8)
        ax.grid(which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "scaling.png", dpi=110)
        plt.close(fig)
    conc = [r for r in _ok(records) if r["kind"] == "conc"]
    if conc:
        servers = [s for s in SERVERS if any(r["server"] == s for r in conc)]
        names = [n for n in ORDER if any(r["contender"] == n for r in conc)]
        fig, ax = plt.subplots(figsize=(8, 5))
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            xs, ys = [], []
            for g, server in enumerate(servers):
                record = index.get((server, "modern", "conc", name))
                if record:
                    xs.append(g + i * width - 0.4 + width / 2)
                    ys.append(record["cpu_ms_per_item"])
            ax.bar(xs, ys, width, label=name, color=_color(name))
        ax.set_yscale("log")
        ax.set_xticks(range(len(servers)))
        ax.set_xticklabels(servers)
        ax.set_ylabel("client CPU ms per work item (log)")
        ax.set_title("50 concurrent work items (10 tools, modern)")
        ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.16))
        ax.grid(axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "concurrent.png", dpi=110)
        plt.close(fig)


def main() -> None:
    out = Path(__file__).resolve().parent / "results"
    write(json.loads((out / "latest.json").read_text()), out)


if __name__ == "__main__":
    main()
