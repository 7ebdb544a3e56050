"""Issue 12's comparisons, interleaved and paired: ``python -m bench.paired [--quick]``.

The issue's two targets for the blocking adapter, on every 10-tool server and era
both adapters ran: (a) ``sansmcp-sync`` CPU per item <= ``sansmcp-asyncio``'s; (b)
``sansmcp-sync ÷ floor-sync`` <= ``sansmcp-asyncio ÷ floor-asyncio``.  In the
sequential table each contender runs alone in one block of about a second, one after
the other: on a shared machine the same row differs up to 2x between two such blocks,
too much to decide a 10 % question.  Here, against one server:

* one child process per contender (:mod:`bench.child`), all four started together and
  kept open (the same ``Client`` or floor connection, warm) for all the rounds of an
  era;
* a sizing round (n from each contender's warm-up: the warm-up's first items run slow),
  not counted, then ``rounds`` rounds; in each, every contender runs one short block of
  about ``budget`` seconds of wall (its n from its sizing block's wall time, the same in
  every counted round), the contenders one after another in an order rotated by one
  place per round (a Williams square: over four rounds each follows each other once),
  each block preceded by two untimed items (their errors counted, the server's
  requests per item counting them); nothing else runs on the client core meanwhile
  (a child is idle between its ``done`` and its next ``go``);
* per round, the two ratios from that round's four blocks: ``sync ÷ asyncio`` and
  ``(sync ÷ floor-sync) ÷ (asyncio ÷ floor-asyncio)``; reported: the median over the
  rounds without errors, the min-max and the quartiles, and the median CPU per item of
  each contender.

A round's four blocks run within about a second of one another, so a drift of the
machine (another helper's build, a frequency change) moves all four, and cancels in
the ratios; a burst that hits one block moves one round's ratio, which the median
shrugs off.  :func:`bench.targets.evaluate` takes the issue-12 targets from here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from typing import IO, Any

from . import sequential
from .procs import LineProcess, Server, cache_bytecode, make_tls

NAMES = ("sansmcp-sync", "sansmcp-asyncio", "floor-sync", "floor-asyncio")
ROUNDS, BUDGET = 12, 0.3  # make bench: 12 rounds (three Williams squares), ~0.3 s blocks
QUICK_ROUNDS, QUICK_BUDGET = 4, 0.05  # --quick: one Williams square of blocks of >= 10 items
REWARM = 2  # untimed items at the start of every block


def _quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (``statistics.quantiles``' inclusive)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(values: list[float]) -> dict[str, float]:
    """Median, min, max and quartiles of per-round figures."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "q1": _quantile(values, 0.25),
        "q3": _quantile(values, 0.75),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-round ratios and their spread, from each round's CPU ms per item by contender;
    a round with an error in any of its blocks is left out (its CPU is not an item's)."""
    full = [
        row["cpu_ms"]
        for row in rows
        if all(row["cpu_ms"].get(name) for name in NAMES) and not any(row["errors"].values())
    ]
    if not full:
        return {}
    sync_vs_asyncio = [r["sansmcp-sync"] / r["sansmcp-asyncio"] for r in full]
    sync_floor = [r["sansmcp-sync"] / r["floor-sync"] for r in full]
    asyncio_floor = [r["sansmcp-asyncio"] / r["floor-asyncio"] for r in full]
    return {
        "rounds_used": len(full),
        "cpu_ms": {name: spread([r[name] for r in full]) for name in NAMES},
        "sync_vs_asyncio": spread(sync_vs_asyncio),
        "sync_floor": spread(sync_floor),
        "asyncio_floor": spread(asyncio_floor),
        "floor_ratio": spread([s / a for s, a in zip(sync_floor, asyncio_floor, strict=True)]),
        # the adapters' CPU over their own floor, in ms per item: where sansmcp costs more
        # than its floor, (b) above asks the blocking adapter to save more than the
        # blocking floor saves over asyncio's; this asks it to add no more than asyncio's
        "over_floor_difference": spread(
            [
                (r["sansmcp-sync"] - r["floor-sync"]) - (r["sansmcp-asyncio"] - r["floor-asyncio"])
                for r in full
            ]
        ),
    }


def _order(round_index: int) -> list[str]:
    """Round ``i``'s order: a Williams square's row (0, 1, 3, 2 shifted by ``i``): the order
    rotates by one place per round, and over four rounds each contender starts once, ends
    once and follows each other contender once (a carry-over from the block before, a
    cache or a socket state, falls on all alike)."""
    size = len(NAMES)
    first = [0]
    for step in range(1, size):
        first.append((step + 1) // 2 if step % 2 else size - step // 2)
    return [NAMES[(k + round_index) % size] for k in first]


def run_server(
    server: Server,
    label: str,
    http: str,
    eras: tuple[str, ...],
    *,
    ca: str | None,
    rounds: int,
    budget: float,
    log: IO[str],
    cpu: int | None,
    echo: bool = True,
) -> list[dict[str, Any]]:
    """The paired rounds against one running server, one entry per era."""
    common = {
        "url": server.url,
        "ca": ca,
        "http": http,
        "expect_tools": server.tools,
        "kind": "seq",
        "warmup": 8,
        "budget": budget,
        "n_min": 20 if budget >= 0.2 else 10,
        "n_max": 1000,
        "rounds": rounds + 1,  # the first sizes the blocks and is not counted
        "rewarm": REWARM,
    }
    phases = [dict(common, era=era) for era in eras]
    spec = {"cpu": cpu, "phases": phases}
    children: dict[str, LineProcess] = {}
    out: list[dict[str, Any]] = []
    try:
        for era_index, era in enumerate(eras):
            entry: dict[str, Any] = {"server": label, "era": era, "rounds": []}
            out.append(entry)
            started = time.perf_counter()
            # One child at a time starts (or, after the previous era's last round, closes
            # and sets up this era's phase) and warms up: warm-ups running side by side
            # would inflate the walls each child picks its n from.
            failed = False
            for name in NAMES:
                if era_index:
                    try:
                        children[name].send("next")
                    except OSError as exc:  # the child is gone (BrokenPipeError)
                        entry["failed"] = f"{name}: {type(exc).__name__}: {exc}"
                        failed = True
                        break
                else:
                    args = ["-m", "bench.child", json.dumps(dict(spec, contender=name))]
                    children[name] = LineProcess(args, log=log)
                failed = _warm(children[name], name, entry)
                if failed:
                    break
            failed = failed or _rounds(server, children, entry, rounds, budget, common["n_min"])
            entry["elapsed_s"] = round(time.perf_counter() - started, 1)
            entry.update(summarise(entry["rounds"]))
            if echo:
                _print(entry)
            if failed:
                break
        else:
            for child in children.values():
                with contextlib.suppress(OSError):  # a child gone by now has nothing to say
                    child.send("next")  # the last round's: the children close and exit
    finally:
        for child in children.values():
            child.stop()
    return out


def _warm(child: LineProcess, name: str, entry: dict[str, Any]) -> bool:
    """Wait for a child's warm-up; True when it failed."""
    try:
        message = child.read_json(timeout=300)
    except (TimeoutError, EOFError) as exc:
        entry["failed"] = f"{name}: {type(exc).__name__}: {exc}"
        return True
    if message["event"] != "warm":
        entry["failed"] = f"{name}: {message.get('error')}"
        return True
    return False


def _rounds(
    server: Server,
    children: dict[str, LineProcess],
    entry: dict[str, Any],
    rounds: int,
    budget: float,
    n_min: int,
) -> bool:
    """Run one era's rounds into ``entry``; True when a child failed (the rest is skipped).
    A sizing round runs first (its n from each contender's warm-up, so its blocks differ
    in length): it re-sizes the blocks and is kept apart, in ``entry["sizing"]``, so the
    counted rounds are whole Williams squares of equal blocks."""
    sizes: dict[str, int] = {}
    try:
        for index in range(rounds + 1):
            order = _order(max(index - 1, 0))
            row: dict[str, Any] = {"order": order, "cpu_ms": {}, "errors": {}, "n": {}}
            for name in row["order"]:
                child = children[name]
                if index:
                    child.send("next")
                    message = child.read_json(timeout=300)
                    if message["event"] != "warm":
                        entry["failed"] = f"{name}: {message.get('error')}"
                        return True
                server.reset()
                child.send(f"go {sizes[name]}" if name in sizes else "go")
                done = child.read_json(timeout=600)
                stats = server.stats()
                if done["event"] != "done":
                    entry["failed"] = f"{name}: {done.get('error')}"
                    return True
                n = done["n"]
                if not index:  # re-size the blocks from this one's wall time
                    per_item = max(done["elapsed_s"] / n, 1e-5)
                    sizes[name] = max(n_min, min(1000, round(budget / per_item)))
                row["n"][name] = n
                row["cpu_ms"][name] = 1000 * done["cpu_s"] / n
                row["errors"][name] = done["errors"]
                row.setdefault("elapsed_s", {})[name] = round(done["elapsed_s"], 3)
                served = n + done.get("rewarm", 0)  # the re-warm items reached the server too
                row.setdefault("requests_per_item", {})[name] = stats["requests"] / served
                if done["errors"]:
                    entry.setdefault("error_samples", []).extend(done["error_samples"][:2])
            if index:
                entry["rounds"].append(row)
            else:
                entry["sizing"] = row
    except (TimeoutError, EOFError, OSError) as exc:  # OSError: a child gone (BrokenPipeError)
        entry["failed"] = f"{type(exc).__name__}: {exc}"
        return True
    return False


def fmt_spread(s: dict[str, float]) -> str:
    """``median [min-max, IQR q1-q3]``."""
    return f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}, IQR {s['q1']:.2f}-{s['q3']:.2f}]"


def _print(entry: dict[str, Any]) -> None:
    where = f"    paired {entry['server']:14} {entry['era']:6}"
    if "cpu_ms" not in entry:
        print(f"{where} FAILED {entry.get('failed')}", flush=True)
        return
    cpu = " ".join(f"{name} {entry['cpu_ms'][name]['median']:.3f}" for name in NAMES)
    print(
        f"{where} {entry['rounds_used']} rounds {entry['elapsed_s']} s  cpu ms/item (median) {cpu}\n"
        f"{'':8}sync ÷ asyncio {fmt_spread(entry['sync_vs_asyncio'])}  "
        f"(sync ÷ floor) ÷ (asyncio ÷ floor) {fmt_spread(entry['floor_ratio'])}"
        + (f"  FAILED {entry['failed']}" if "failed" in entry else ""),
        flush=True,
    )


# -- standalone: python -m bench.paired ---------------------------------------------


def main() -> None:
    from . import targets

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--budget", type=float, default=0.0, help="seconds of wall per block")
    parser.add_argument("--servers", default="", help="labels, e.g. h1/json,h2tls/json")
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="first the four contenders' sequential rows as make bench runs them, then the "
        "issue-12 targets both ways",
    )
    parser.add_argument("--json", default="", help="also write the entries to this file")
    args = parser.parse_args()
    cache_bytecode()
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    budget = args.budget or (QUICK_BUDGET if args.quick else BUDGET)
    wanted = set(filter(None, args.servers.split(",")))
    server_cpu, client_cpu = sequential.cpus()
    tls = make_tls(sequential.RESULTS / "tls.tmp")
    entries: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    started = time.time()
    print(f"load {sequential.load()}", flush=True)
    with open(sequential.RESULTS / "paired.log.tmp", "w") as log:
        for config in sequential.plan(args.quick):
            if config.tools != 10 or (wanted and config.label.rsplit("/", 1)[0] not in wanted):
                continue
            print(f"server {config.label}  (load {sequential.load()})", flush=True)
            server = Server(
                http=config.http,
                body=config.body,
                tools=10,
                log=log,
                cpu=server_cpu,
                tls=(tls["cert"], tls["key"]) if config.tls else None,
            )
            ca = tls["ca"] if config.tls else None
            try:
                for name in NAMES if args.sequential else ():
                    phases = [
                        p
                        for p in sequential.contender_phases(config, name, server.url, ca)
                        if p["kind"] == "seq"
                    ]
                    records += sequential.run_contender(
                        server, config, name, phases, cpu=client_cpu, log=log
                    )
                entries += run_server(
                    server,
                    config.label,
                    config.http,
                    config.eras,
                    ca=ca,
                    rounds=rounds,
                    budget=budget,
                    log=log,
                    cpu=client_cpu,
                )
            finally:
                server.stop()
    print(f"{time.time() - started:.0f} s, load {sequential.load()}", flush=True)
    if args.sequential:
        for title, result in (
            ("issue 12 from the sequential rows", {"records": records}),
            ("issue 12 from the paired rounds", {"records": records, "paired": entries}),
        ):
            found = [t for t in targets.evaluate(result) if t.group.startswith("issue 12")]
            print(f"\n{title}:", *targets.table(found), sep="\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"paired": entries, "records": records}, f, indent=1)
            f.write("\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
