"""The work item through an egress proxy's CONNECT tunnel vs direct (issue 29's figure).

``python -m bench.proxy [--quick] [--out FILE]``; in ``make bench``'s report ("Egress
proxy", from :func:`run`).  Starts ``bench.server`` twice (HTTP/1.1 and TLS with ALPN
``h2``, 10 tools, JSON) and a real ``tinyproxy`` (Debian's; a config written to a
temporary directory: loopback only, ``ConnectPort`` = the two servers' ports, a log at
level Connect; stopped by its pid).  Then, in this process, asyncio Clients run the
bench work item (connect, ``list_tools()``, call ``echo``, close; modern era) in
alternated rounds, per server, two ways each:

* **pooled** -- the default pool: after warm-up every item reuses a pooled socket (a
  tunnel, through the proxy), so the tunnel costs the client nothing per item but the
  relayed bytes' latency;
* **dial** -- ``Limits(pool_max_idle_per_origin=0)``: no socket is kept, so each
  request dials again (two per item), through the proxy a ``CONNECT`` first (then, over
  TLS, the handshake inside the tunnel);
* **paced** -- the control: direct, idling ``PACE`` after each request, as the proxied
  requests wait (tinyproxy relays the server's response head and body as two writes
  without ``TCP_NODELAY``, so the body waits for the client's delayed ACK, ~40 ms a
  request): what the idle itself costs in CPU (caches gone cold, the loop's wake-ups).

Each way, ``direct``, ``paced`` and ``proxy`` (``Client(proxy=tinyproxy)``, ``guard="local"``:
``CONNECT <vetted-ip>:<port>``): client CPU (``time.process_time``) and wall per item,
and the servers' request and connection counts, the proxy's CONNECTs from its log.  The
target: the tunnel adds no more client CPU than one extra round trip costs (per item when
pooled, per tunnel when dialling), one round trip being the direct pooled item's CPU over
its requests (one request's share), against ``direct`` and against ``paced``.
Prints one JSON line (``--out FILE``: writes it there and the Markdown beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .procs import Server, make_tls

QUICK = {"rounds": 4, "per_round": 10}
FULL = {"rounds": 6, "per_round": 30}
WAYS = ("pooled", "dial")
ROUTES = ("direct", "paced", "proxy")
PACE = 0.040  # the idle the paced arm adds after each request (Linux's delayed ACK)


def _tinyproxy() -> str | None:
    found = shutil.which("tinyproxy")
    if found:
        return found
    return "/usr/bin/tinyproxy" if os.access("/usr/bin/tinyproxy", os.X_OK) else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Tinyproxy:
    """One ``tinyproxy`` with its own config, listening on a loopback port."""

    def __init__(self, binary: str, directory: Path, ports: list[int], cpu: int | None) -> None:
        self.port = _free_port()
        self.log = directory / "tinyproxy.log"
        lines = [
            f"Port {self.port}",
            "Listen 127.0.0.1",
            "Timeout 60",
            f'LogFile "{self.log}"',
            "LogLevel Connect",
            f'PidFile "{directory / "tinyproxy.pid"}"',
            "MaxClients 128",
            "Allow 127.0.0.1",
            "DisableViaHeader Yes",
            *(f"ConnectPort {port}" for port in ports),
        ]
        config = directory / "tinyproxy.conf"
        config.write_text("\n".join(lines) + "\n")
        self.process = subprocess.Popen(
            [binary, "-d", "-c", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if cpu is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(self.process.pid, {cpu})
        end = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"tinyproxy exited: {self.log.read_text(errors='replace')}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > end:
                    self.stop()
                    raise RuntimeError("tinyproxy is not listening") from None
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connects(self, port: int) -> int:
        """The CONNECTs to ``127.0.0.1:port`` in the proxy's log so far."""
        pattern = re.compile(rf"CONNECT 127\.0\.0\.1:{port} HTTP/1\.1")
        return len(pattern.findall(self.log.read_text(errors="replace")))

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


async def _measure(
    server: Server, proxy: Tinyproxy, ca: str | None, rounds: int, per_round: int
) -> dict[str, Any]:
    """The four arms (way x route) against ``server``, alternated round by round."""
    from sansmcp import Config, Limits
    from sansmcp.io_adapters.asyncio import Client

    context = None
    if ca is not None:
        context = ssl.create_default_context(cafile=ca)
        context.set_alpn_protocols(["h2", "http/1.1"])
    config = Config(url=server.url)
    clients: dict[tuple[str, str], Any] = {}
    for way in WAYS:
        limits = Limits(pool_max_idle_per_origin=0) if way == "dial" else Limits()
        for route in ROUTES:
            via = proxy.url if route == "proxy" else None
            clients[(way, route)] = Client(
                allow_loopback=True, proxy=via, ssl_context=context, limits=limits
            )
    cpu: dict[tuple[str, str], list[float]] = {arm: [] for arm in clients}
    wall: dict[tuple[str, str], list[float]] = {arm: [] for arm in clients}
    counted: dict[tuple[str, str], dict[str, int]] = {
        arm: {"requests": 0, "connections": 0, "connects": 0} for arm in clients
    }

    async def block(client: Any, n: int, pace: float) -> tuple[float, list[float]]:
        walls = []
        start = time.process_time()
        for _ in range(n):
            started = time.perf_counter()
            async with client.connect(config) as conn:
                await conn.list_tools()
                if pace:
                    await asyncio.sleep(pace)
                result = await conn.call_tool("echo", b'{"text": "hi"}')
                if pace:
                    await asyncio.sleep(pace)
            walls.append(time.perf_counter() - started)
            if result.content[0].text != "hi":
                raise RuntimeError(f"echo answered {result.content!r}")
        return (time.process_time() - start) / n, walls

    for client in clients.values():
        await block(client, 20, 0.0)  # warm: pool, era hint
    arms = list(clients)
    for index in range(rounds):
        shift = index % len(arms)
        for arm in arms[shift:] + arms[:shift]:  # each arm first in turn
            server.reset()
            connects = proxy.connects(server.port)
            pace = PACE if arm[1] == "paced" else 0.0
            per_item, walls = await block(clients[arm], per_round, pace)
            stats = server.stats()
            cpu[arm].append(per_item)
            wall[arm] += walls
            counted[arm]["requests"] += stats["requests"]
            counted[arm]["connections"] += stats["connections"]
            counted[arm]["connects"] += proxy.connects(server.port) - connects
    for client in clients.values():
        await client.aclose()
    items = rounds * per_round
    out: dict[str, Any] = {"items_per_arm": items, "rounds": rounds}
    for way, route in arms:
        arm = (way, route)
        out[f"{way}/{route}"] = {
            "cpu_us": round(statistics.median(cpu[arm]) * 1e6, 1),
            "cpu_spread_us": [round(min(cpu[arm]) * 1e6, 1), round(max(cpu[arm]) * 1e6, 1)],
            "wall_us": round(statistics.median(wall[arm]) * 1e6, 1),
            **{name: round(count / items, 3) for name, count in counted[arm].items()},
        }
    direct = out["pooled/direct"]
    trip = direct["cpu_us"] / max(direct["requests"], 1e-9)
    out["round_trip_cpu_us"] = round(trip, 1)
    for way in WAYS:
        # pooled: per item (its tunnel is reused); dial: per tunnel (a CONNECT per dial)
        tunnels = out[f"{way}/proxy"]["connects"] if way == "dial" else 1.0
        for base in ("direct", "paced"):
            added = (out[f"{way}/proxy"]["cpu_us"] - out[f"{way}/{base}"]["cpu_us"]) / tunnels
            out[f"{way}_over_{base}_cpu_us"] = round(added, 1)
            out[f"{way}_over_{base}_trips"] = round(added / trip, 2)
    return out


def run(*, rounds: int, per_round: int, server_cpu: int | None = None) -> dict[str, Any]:
    """Both servers through one tinyproxy; ``{"failed": why}`` when it is missing."""
    binary = _tinyproxy()
    if binary is None:
        return {"failed": "no tinyproxy (Debian package tinyproxy; PATH or /usr/bin)"}
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    report["load_before"] = os.getloadavg()[0]
    report["tinyproxy"] = subprocess.run(
        [binary, "-v"], capture_output=True, text=True, check=False
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        tls = make_tls(directory / "tls")
        servers: list[Server] = []
        proxy = None
        try:
            servers.append(Server(http="h1", body="json", tools=10, log=sys.stderr, cpu=server_cpu))
            tls_pair = (tls["cert"], tls["key"])
            servers.append(
                Server(
                    http="h2", body="json", tools=10, log=sys.stderr, cpu=server_cpu, tls=tls_pair
                )
            )
            plain, secure = servers
            proxy = Tinyproxy(binary, directory, [plain.port, secure.port], server_cpu)
            report["h1/json/10"] = asyncio.run(_measure(plain, proxy, None, rounds, per_round))
            report["h2tls/json/10"] = asyncio.run(
                _measure(secure, proxy, tls["ca"], rounds, per_round)
            )
        finally:
            if proxy is not None:
                proxy.stop()
            for server in servers:
                server.stop()
    report["load_after"] = os.getloadavg()[0]
    return report


def markdown(report: dict[str, Any] | None) -> list[str]:
    """The report's "Egress proxy" section (issue 29)."""
    places = [p for p in ("h1/json/10", "h2tls/json/10") if report and p in report]
    if not report or not places:
        return [f"(not measured: {report.get('failed') if report else 'absent'})"]
    first = report[places[0]]
    lines = [
        "`bench/proxy.py`: sansmcp on asyncio, the work item (connect, list, call `echo`, "
        f"close; modern era) direct vs through a real tinyproxy ({report['tinyproxy']}) "
        '`CONNECT` tunnel (`guard="local"`), alternated rounds '
        f"({first['rounds']} x {first['items_per_arm'] // first['rounds']} items per arm); "
        "pooled: sockets (tunnels) reused across items; dial: "
        "`pool_max_idle_per_origin=0`, a new socket (and `CONNECT`) per request; paced: "
        f"direct, idling {PACE * 1000:.0f} ms after each request (the control). CPU: the "
        "rounds' median [min-max]; wall: median per item; requests and connections counted "
        f"by the server, `CONNECT`s by the proxy's log. Load {report['load_before']:.1f} "
        f"before, {report['load_after']:.1f} after.",
        "",
        "| server | way | route | CPU µs/item | wall µs/item | requests/item | "
        "connections/item | CONNECTs/item |",
        "|---|---|---|--:|--:|--:|--:|--:|",
    ]
    for place in places:
        for way in WAYS:
            for route in ROUTES:
                arm = report[place][f"{way}/{route}"]
                lines.append(
                    f"| {place} | {way} | {route} | {arm['cpu_us']:,.0f} "
                    f"[{arm['cpu_spread_us'][0]:,.0f}-{arm['cpu_spread_us'][1]:,.0f}] "
                    f"| {arm['wall_us']:,.0f} | {arm['requests']} | {arm['connections']} "
                    f"| {arm['connects']} |"
                )
    lines += [
        "",
        "Target: the tunnel adds no more client CPU per item than one extra round trip "
        "(one round trip: the direct pooled item's CPU over its requests), per item when "
        "pooled, per tunnel (`CONNECT`) when dialling. Against "
        "`direct` (the raw difference) and against `paced` (direct, idling "
        f"{PACE * 1000:.0f} ms after each request as the proxied items wait: the CPU an "
        "idle core's cold caches cost, taken out), in µs per item and in round trips:",
        "",
        "| server | one round trip µs | way | tunnel - direct | trips | met | "
        "tunnel - paced | trips | met |",
        "|---|--:|---|--:|--:|---|--:|--:|---|",
    ]
    for place in places:
        row = report[place]
        for way in WAYS:
            cells = [place, f"{row['round_trip_cpu_us']:,.0f}", way]
            for base in ("direct", "paced"):
                trips = row[f"{way}_over_{base}_trips"]
                cells += [
                    f"{row[f'{way}_over_{base}_cpu_us']:,.0f}",
                    f"{trips:.2f}",
                    "yes" if trips <= 1 else "no",
                ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer rounds and items")
    parser.add_argument("--server-cpu", type=int, default=None, help="pin servers and proxy")
    parser.add_argument("--out", default=None, help="write the JSON here and the .md beside it")
    args = parser.parse_args()
    report = run(**(QUICK if args.quick else FULL), server_cpu=args.server_cpu)
    if args.out is None:
        print(json.dumps(report))
        return
    out = Path(args.out)
    out.write_text(json.dumps(report, indent=2) + "\n")
    text = "\n".join(markdown(report))
    out.with_suffix(".md").write_text("# Egress proxy (issue 29)\n\n" + text + "\n")
    print(text)


if __name__ == "__main__":
    main()
