"""The issue-16 targets (and issue 12's sync targets), computed from one run's records.

:func:`evaluate` turns ``latest.json`` into one :class:`Target` per (target, where):
what was measured, the bound, met or not, and which profile says where the time goes.
:func:`table` renders them; :func:`where_the_time_goes` renders, for every missed
target, its profile (cProfile own time grouped by area: sansmcp's driver + pool, MCP
machine, wire, adapter; h11; h2/hpack; the runtime; json) and what closing it needs.

The targets (issue 16, "Targets"; issue 12):

* >= 6x cheaper than the tuned SDK on HTTP/1.1 and >= 5x on h2 (h2c and TLS h2), every
  backend, both eras;
* <= 1.3x the h11 floor of the same runtime (the ratio to the llhttp floor beside it);
* 1,000 in flight at default limits: CPU per item <= 1.5x sequential, p99 <= 2x the
  same-runtime floor's, <= 50 KiB RSS per in-flight item (the blocking adapter is shown at
  its 100 threads);
* the 1,000-tool listing: parse + validate <= 1.5x ``json.loads``;
* ``import sansmcp.io_adapters.asyncio`` <= 60 ms (``-X importtime``);
* issue 12: sync CPU <= asyncio CPU, and sync ÷ sync floor <= asyncio ÷ asyncio floor,
  from the paired section (:mod:`bench.paired`: the median over interleaved rounds of the
  per-round ratios, ``sync ÷ asyncio`` and ``(sync ÷ floor-sync) ÷ (asyncio ÷
  floor-asyncio)``), the sequential rows' figures in the note; the sequential rows only
  where the paired section did not run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

BACKENDS = ("sansmcp-asyncio", "sansmcp-trio", "sansmcp-sync")
FLOOR = {"sansmcp-asyncio": "floor-asyncio", "sansmcp-trio": "floor-trio"}
FLOOR["sansmcp-sync"] = "floor-sync"
LLHTTP = {"sansmcp-asyncio": "llhttp-asyncio", "sansmcp-trio": "llhttp-trio"}
LLHTTP["sansmcp-sync"] = "llhttp-sync"
H1_SERVERS = ("h1/json/10", "h1/sse/10")
H2_SERVERS = ("h2/json/10", "h2/sse/10", "h2tls/json/10")
PARSE_KEY = "sansmcp core: parse + validate"
PARSE_FLOOR = "json.loads (floor)"
IMPORT_KEY = "sansmcp.io_adapters.asyncio"


@dataclass
class Target:
    group: str
    target: str
    where: str
    measured: float | None
    bound: float
    at_most: bool  # met when measured <= bound (else >=)
    unit: str = "x"
    note: str = ""
    profile: str | None = None  # a key of :func:`profiles`
    gap: str = ""  # what closing it needs, when missed
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def met(self) -> bool | None:
        if self.measured is None or math.isnan(self.measured):
            return None
        return self.measured <= self.bound if self.at_most else self.measured >= self.bound


def _fmt(value: float | None, digits: int = 2) -> str:
    """A figure for a table: ``-`` when missing, fewer decimals the larger it is."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.{digits}f}"


def _seq(records: list[dict[str, Any]]) -> dict[tuple[str, str, str], float]:
    return {
        (r["server"], r["era"], r["contender"]): r["cpu_ms_per_item"]
        for r in records
        if r.get("kind") == "seq" and "failed" not in r and "cpu_ms_per_item" in r
    }


def _profile_key(result: dict[str, Any], server: str, era: str, name: str) -> str | None:
    """The sequential profile nearest to (server, era, contender): the same server, or its
    JSON twin (the SSE servers are not profiled), the same era, else the modern one."""
    profiles = result.get("profiles") or {}
    twin = server.replace("/sse/", "/json/")
    for candidate in (server, twin):
        for e in (era, "modern"):
            key = f"{candidate}|{e}|{name}"
            if key in profiles and "areas_us_per_item" in profiles[key]:
                return "seq:" + key
    return None


def evaluate(result: dict[str, Any]) -> list[Target]:
    records = result.get("records") or []
    cpu = _seq(records)
    out: list[Target] = []
    servers = [s for s in H1_SERVERS + H2_SERVERS if any(k[0] == s for k in cpu)]
    # 1. cheaper than the tuned SDK
    for server in servers:
        bound = 6.0 if server in H1_SERVERS else 5.0
        for era in ("legacy", "modern"):
            sdk = cpu.get((server, era, "sdk-tuned"))
            for name in BACKENDS:
                mine = cpu.get((server, era, name))
                if mine is None or sdk is None:
                    continue
                target = Target(
                    "vs the tuned SDK",
                    f">= {bound:.0f}x cheaper than the tuned SDK",
                    f"{server} {era} {name}",
                    sdk / mine,
                    bound,
                    at_most=False,
                    profile=_profile_key(result, server, era, name),
                )
                if not target.met:
                    need = mine - sdk / bound
                    target.gap = (
                        f"{1e3 * need:.0f} µs less CPU per item ({100 * need / mine:.0f} % of "
                        f"{1e3 * mine:.0f} µs; the SDK spends {1e3 * sdk:.0f})"
                    )
                out.append(target)
    # 2. within 1.3x of the h11 floor (HTTP/1.1 servers; llhttp ratio alongside)
    for server in servers:
        if server not in H1_SERVERS:
            continue
        for era in ("legacy", "modern"):
            for name in BACKENDS:
                mine = cpu.get((server, era, name))
                floor = cpu.get((server, era, FLOOR[name]))
                if mine is None or floor is None:
                    continue
                llhttp = cpu.get((server, era, LLHTTP[name]))
                note = f"÷ llhttp floor {_fmt(mine / llhttp)}x" if llhttp else ""
                target = Target(
                    "vs the floor",
                    "<= 1.3x the h11 floor of its runtime",
                    f"{server} {era} {name}",
                    mine / floor,
                    1.3,
                    at_most=True,
                    note=note,
                    profile=_profile_key(result, server, era, name),
                )
                if not target.met:
                    need = mine - 1.3 * floor
                    target.gap = (
                        f"{1e3 * need:.0f} µs less CPU per item ({100 * need / mine:.0f} % of "
                        f"{1e3 * mine:.0f} µs; the floor spends {1e3 * floor:.0f})"
                    )
                out.append(target)
    out += _inflight_targets(result.get("inflight"))
    out += _parse_target(result.get("parse"))
    out += _import_target(result.get("cold_start"))
    out += _issue12_targets(result, cpu)
    return out


def _spread_note(s: dict[str, float]) -> str:
    note = f"range {_fmt(s['min'])}-{_fmt(s['max'])}, IQR {_fmt(s['q1'])}-{_fmt(s['q3'])}"
    return note + (" (the IQR spans 1)" if s["q1"] <= 1.0 <= s["q3"] else "")


def _seq_note(ratio: float | None) -> str:
    return f"sequential rows {_fmt(ratio)}x" if ratio is not None else "no sequential rows"


def _over_floor_note(entry: dict[str, Any]) -> str:
    """The blocking adapter's CPU over its floor minus asyncio's over its floor (paired)."""
    diff = entry.get("over_floor_difference")
    if diff is None:
        return ""
    return (
        f"(sync - its floor) - (asyncio - its floor) {1e3 * diff['median']:+.0f} µs "
        f"[IQR {1e3 * diff['q1']:+.0f} to {1e3 * diff['q3']:+.0f}]; "
    )


PAIRED_MIN_ROUNDS = 4  # one Williams square: fewer, and the paired figures decide nothing

_ISSUE12_A = "sync CPU <= asyncio CPU"
_ISSUE12_B = "(sync ÷ sync floor) ÷ (asyncio ÷ asyncio floor) <= 1"


def _issue12_target(
    what: str, where: str, ratio: float, sync_ms: float, note: str, profile: str | None
) -> Target:
    """One issue-12 target: ``ratio`` at most 1, and what the sync item must save if not."""
    target = Target(
        "issue 12 (sync)",
        what,
        where,
        ratio,
        1.0,
        at_most=True,
        unit="x asyncio" if what == _ISSUE12_A else "x",
        note=note,
        profile=profile,
    )
    if not target.met:
        target.gap = f"{1e3 * sync_ms * (1 - 1 / ratio):.0f} µs less CPU per sync item"
    return target


def _paired_usable(entry: dict[str, Any]) -> bool:
    return (
        "failed" not in entry
        and "floor_ratio" in entry
        and entry.get("rounds_used", 0) >= PAIRED_MIN_ROUNDS
    )


def _paired_fallback_note(entry: dict[str, Any] | None) -> str:
    """Why the sequential rows decide: no paired entry, or one that failed or fell short."""
    if entry is None:
        return "sequential rows (not in the paired section)"
    errors = sum(sum(r.get("errors", {}).values()) for r in entry.get("rounds", []))
    why = (
        f"paired failed after {len(entry.get('rounds', []))} rounds: {entry['failed']}"
        if "failed" in entry
        else f"paired used {entry.get('rounds_used', 0)} rounds (< {PAIRED_MIN_ROUNDS})"
    )
    return f"sequential rows ({why}; {errors} errors)"


def _issue12_targets(
    result: dict[str, Any], cpu: dict[tuple[str, str, str], float]
) -> list[Target]:
    """Issue 12: the blocking adapter against asyncio, from the paired section
    (:mod:`bench.paired`: interleaved rounds, the median of per-round ratios) where it ran
    clean for at least a Williams square, else from the sequential rows.  The other side's
    figures stay in the note."""
    paired = {(e["server"], e["era"]): e for e in result.get("paired") or []}
    places = {(server, era) for server, era, _ in cpu} | set(paired)
    out: list[Target] = []
    for server in H1_SERVERS + H2_SERVERS:
        for era in ("legacy", "modern"):
            if (server, era) not in places:
                continue
            where = f"{server} {era}"
            sync = cpu.get((server, era, "sansmcp-sync"))
            asy = cpu.get((server, era, "sansmcp-asyncio"))
            sync_floor = cpu.get((server, era, "floor-sync"))
            asy_floor = cpu.get((server, era, "floor-asyncio"))
            seq_cpu = sync / asy if sync and asy else None
            seq_floor = (
                (sync / sync_floor) / (asy / asy_floor)
                if sync and asy and sync_floor and asy_floor
                else None
            )
            profile = _profile_key(result, server, era, "sansmcp-sync")
            entry = paired.get((server, era))
            if entry is not None and _paired_usable(entry):
                rounds = entry["rounds_used"]
                median_sync = entry["cpu_ms"]["sansmcp-sync"]["median"]
                one, two = entry["sync_vs_asyncio"], entry["floor_ratio"]
                head = f"paired, median of {rounds} rounds, "
                out.append(
                    _issue12_target(
                        _ISSUE12_A,
                        where,
                        one["median"],
                        median_sync,
                        head + _spread_note(one) + "; " + _seq_note(seq_cpu),
                        profile,
                    )
                )
                out.append(
                    _issue12_target(
                        _ISSUE12_B,
                        where,
                        two["median"],
                        median_sync,
                        head + f"{_spread_note(two)}; sync ÷ its floor "
                        f"{_fmt(entry['sync_floor']['median'])}x, asyncio ÷ its floor "
                        f"{_fmt(entry['asyncio_floor']['median'])}x; "
                        + _over_floor_note(entry)
                        + _seq_note(seq_floor),
                        profile,
                    )
                )
                continue
            if seq_cpu is None:
                continue
            assert sync is not None
            note = _paired_fallback_note(entry)
            out.append(_issue12_target(_ISSUE12_A, where, seq_cpu, sync, note, profile))
            if seq_floor is not None:
                out.append(_issue12_target(_ISSUE12_B, where, seq_floor, sync, note, profile))
    return out


def _inflight_targets(inflight: dict[str, Any] | None) -> list[Target]:
    if not inflight or "rows" not in inflight:
        return []
    by = {(row["name"], int(row["level"])): row for row in inflight["rows"]}
    top = int(inflight.get("top", 1000))
    out = []
    for name in BACKENDS:
        level = top if name != "sansmcp-sync" else min(top, 100)
        row, seq = by.get((name, level)), by.get((name, 1))
        floor = by.get((FLOOR[name], level))
        if row is None:
            continue
        where = f"{name} at {level:,} in flight" + (" (threads)" if name == "sansmcp-sync" else "")
        key = f"inflight:{name}" if name != "sansmcp-sync" else None
        if seq is not None:
            t = Target(
                "in flight",
                "CPU per item <= 1.5x sequential",
                where,
                row["cpu_ms"] / seq["cpu_ms"],
                1.5,
                at_most=True,
                note=f"{_fmt(row['cpu_ms'], 3)} vs {_fmt(seq['cpu_ms'], 3)} ms",
                profile=key,
            )
            out.append(t)
        if floor is not None:
            t = Target(
                "in flight",
                "p99 <= 2x the floor's",
                where,
                row["p99_ms"] / floor["p99_ms"],
                2.0,
                at_most=True,
                note=f"{_fmt(row['p99_ms'], 0)} vs {_fmt(floor['p99_ms'], 0)} ms",
                profile=key,
            )
            if not t.met:
                t.gap = (
                    "p99 is about the wave's length (CPU per item x items on a shared core): "
                    f"CPU per item {_fmt(row['cpu_ms'], 3)} ms against the floor's "
                    f"{_fmt(floor['cpu_ms'], 3)}"
                )
            out.append(t)
        rss, note = row["rss_kib_per_item"], "peak RSS growth over the in-flight items"
        if name == "sansmcp-sync" and seq is not None and level > 1:
            rss = (row["rss_kib"] - seq["rss_kib"]) / (level - 1)
            note = "marginal (level-1 growth apart): at 100 the pool's fixed cost dominates"
        out.append(
            Target(
                "in flight",
                "<= 50 KiB RSS per in-flight item",
                where,
                rss,
                50.0,
                at_most=True,
                unit=" KiB",
                note=note,
            )
        )
    return out


def _parse_target(parse: dict[str, Any] | None) -> list[Target]:
    if not parse or not parse.get("ms"):
        return []
    ms = parse["ms"]
    mine, floor = ms.get(PARSE_KEY), ms.get(PARSE_FLOOR)
    if mine is None or not floor:
        return []
    t = Target(
        "listing",
        "1,000-tool listing parse + validate <= 1.5x json.loads",
        PARSE_KEY,
        mine / floor,
        1.5,
        at_most=True,
        note=f"{_fmt(mine, 3)} vs {_fmt(floor, 3)} ms",
        profile="parse" if parse.get("profile") else None,
    )
    if not t.met:
        t.gap = f"{mine - 1.5 * floor:.2f} ms less per listing"
    return [t]


def _import_target(cold: dict[str, Any] | None) -> list[Target]:
    if not cold or IMPORT_KEY not in (cold.get("imports") or {}):
        return []
    row = cold["imports"][IMPORT_KEY]
    alone = (cold["imports"].get("the runtime alone") or {}).get("total_ms")
    t = Target(
        "import",
        "import sansmcp.io_adapters.asyncio <= 60 ms",
        "-X importtime, median of fresh processes",
        row["total_ms"],
        60.0,
        at_most=True,
        unit=" ms",
        note=f"CPU {_fmt(row['cpu_ms'], 0)} ms, min {_fmt(row['total_ms_min'], 0)} ms"
        + (f"; `import asyncio` alone {_fmt(alone, 0)} ms" if alone else ""),
        profile="import",
    )
    if not t.met:
        t.gap = f"{row['total_ms'] - 60:.0f} ms less" + (
            f" (`import asyncio` alone takes {alone:.0f} ms here)" if alone else ""
        )
    return [t]


def table(found: list[Target]) -> list[str]:
    if not found:
        return ["(no target measured in this run)"]
    lines = [
        "| group | target | where | measured | met | note |",
        "|---|---|---|--:|---|---|",
    ]
    for t in found:
        met = {True: "yes", False: "**no**", None: "-"}[t.met]
        unit = t.unit if t.unit != "x" else "x"
        lines.append(
            f"| {t.group} | {t.target} | {t.where} | {_fmt(t.measured)}{unit} | {met} | {t.note} |"
        )
    met = sum(1 for t in found if t.met)
    missed = sum(1 for t in found if t.met is False)
    lines += ["", f"{met} met, {missed} missed, of {len(found)}."]
    return lines


def profiles(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every profile of the run by key: ``seq:<server>|<era>|<contender>``,
    ``inflight:<contender>``, ``parse``, ``import``."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in (result.get("profiles") or {}).items():
        if "areas_us_per_item" in value:
            out["seq:" + key] = value
    inflight = result.get("inflight") or {}
    for name, value in (inflight.get("profiles") or {}).items():
        out["inflight:" + name] = value
    parse = result.get("parse") or {}
    if parse.get("profile"):
        out["parse"] = {"rows": parse["profile"]}
    cold = result.get("cold_start") or {}
    if IMPORT_KEY in (cold.get("imports") or {}):
        out["import"] = cold["imports"][IMPORT_KEY]
    return out


def _render(key: str, profile: dict[str, Any], top: int = 8) -> list[str]:
    if key == "import":
        areas = ", ".join(f"{k} {_fmt(v, 1)}" for k, v in profile["areas_ms"].items())
        lines = [f"Import self time by area, ms (median): {areas}.", ""]
        lines += ["| module | self ms |", "|---|--:|"]
        lines += [f"| `{name}` | {_fmt(ms)} |" for name, ms in profile["top_self_ms"][:top]]
        return lines
    if key == "parse":
        lines = ["| function | calls/listing | own ms | cumulative ms |", "|---|--:|--:|--:|"]
        for row in profile["rows"][:top]:
            lines.append(
                f"| `{row['function']}` | {_fmt(row['calls'])} | {_fmt(row['own_ms'])} "
                f"| {_fmt(row['cumulative_ms'])} |"
            )
        return lines
    total = profile["profiled_us_per_item"]
    areas = ", ".join(
        f"{k} {_fmt(v, 0)} ({100 * v / total:.0f} %)"
        for k, v in profile["areas_us_per_item"].items()
        if v >= 0.5
    )
    lines = [
        f"{profile['items']} items under cProfile, {_fmt(total, 0)} µs own time per item "
        f"(inflated by the profiler: read the shares). By area: {areas}.",
        "",
        "| function (own time) | area | calls/item | own µs/item | cumulative µs/item |",
        "|---|---|--:|--:|--:|",
    ]
    for row in profile["top_own"][:top]:
        lines.append(
            f"| `{row['function']}` | {row.get('area', '')} | {_fmt(row['calls_per_item'])} "
            f"| {_fmt(row['tottime_us_per_item'])} | {_fmt(row['cumtime_us_per_item'])} |"
        )
    return lines


def where_the_time_goes(found: list[Target], result: dict[str, Any]) -> list[str]:
    missed = [t for t in found if t.met is False]
    if not missed:
        return ["Every measured target is met."]
    known = profiles(result)
    by_profile: dict[str | None, list[Target]] = {}
    for t in missed:
        by_profile.setdefault(t.profile if t.profile in known else None, []).append(t)
    lines: list[str] = []
    for key, group in by_profile.items():
        if key is None:
            continue
        title = key.split(":", 1)[-1].replace("|", " ")
        lines += [f"### {title}", ""]
        lines += ["Missed here:", ""]
        for t in group:
            gap = f" — closing it needs {t.gap}" if t.gap else ""
            lines.append(f"- {t.target}, {t.where}: {_fmt(t.measured)}{t.unit}{gap}.")
        lines += ["", *_render(key, known[key]), ""]
    if None in by_profile:
        lines += ["### Without a profile in this run", ""]
        for t in by_profile[None]:
            gap = f" — closing it needs {t.gap}" if t.gap else ""
            lines.append(f"- {t.target}, {t.where}: {_fmt(t.measured)}{t.unit}{gap}.")
        lines.append("")
    return lines
