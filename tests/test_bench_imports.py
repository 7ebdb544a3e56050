"""``bench/`` has no import circle: its modules import each other as a tree; and the
fleet and egress-proxy sections of its report render (issues 28, 29).

Every ``from . import x`` and ``from .x import y`` counts, at the top of a module or
inside a function (a lazy import still ties the two modules together).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[0])
    return found


def test_bench_modules_import_no_circle() -> None:
    graph = {path.stem: _imports(path) for path in BENCH.glob("*.py")}
    assert {"run", "paired", "report", "sequential"} <= set(graph)
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import circle: " + " -> ".join((*path, module))
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


def _fleet_report() -> dict[str, Any]:
    arm = {
        "tools_list_served": 1,
        "requests": 2,
        "requests_by_method": {"tools/list": 1, "server/discover": 1},
        "wall_s": 3.0,
        "cold_us_median": 20000.0,
        "warm_us_median": 150.0,
        "store_counts": {"reads": 15, "hits": 7, "misses": 8, "failures": 0},
    }
    cpu = {
        "items_per_arm": 8,
        "rounds": 2,
        "cpu_per_item_us": {"none": 600.0, "local": 100.0, "redis": 800.0},
        "cpu_spread_us": {name: [1.0, 2.0] for name in ("none", "local", "redis")},
        "wall_per_item_us": {"none": 1500.0, "local": 110.0, "redis": 800.0},
        "requests_per_item": {"none": 1.0, "local": 0.0, "redis": 0.0},
        "redis_store_counts": {"reads": 8, "hits": 8},
        "redis_store_call_cpu_us": 230.0,
        "redis_get_floor": {"value_bytes": 4668, "cpu_us": 120.0},
        "redis_trip_cpu_us": 700.0,
        "server_trip_cpu_us": 500.0,
        "redis_trip_wall_us": 690.0,
        "server_trip_wall_us": 1390.0,
    }
    fleet = {"procs": 8, "items_per_proc": 200, "local": {**arm, "store_counts": None}}
    fleet["redis"] = arm
    return {"load_before": 1.0, "load_after": 2.0, "fleet": fleet, "cpu": cpu}


def _proxy_report() -> dict[str, Any]:
    from bench.proxy import ROUTES, WAYS

    place: dict[str, Any] = {"items_per_arm": 60, "rounds": 2, "round_trip_cpu_us": 500.0}
    for way in WAYS:
        for route in ROUTES:
            place[f"{way}/{route}"] = {
                "cpu_us": 1000.0,
                "cpu_spread_us": [900.0, 1100.0],
                "wall_us": 3000.0,
                "requests": 2.0,
                "connections": 2.0 if way == "dial" else 0.033,
                "connects": 2.0 if way == "dial" and route == "proxy" else 0.0,
            }
        for base in ("direct", "paced"):
            place[f"{way}_over_{base}_cpu_us"] = 250.0
            place[f"{way}_over_{base}_trips"] = 0.5 if base == "paced" else 1.5
    report: dict[str, Any] = {"load_before": 1.0, "load_after": 2.0, "tinyproxy": "t 1"}
    report["h1/json/10"] = place
    return report


def test_the_fleet_and_proxy_sections_render_a_measured_and_a_failed_run() -> None:
    """``make bench`` renders these after minutes of measuring: a renderer that breaks
    on its own module's answer (or on the answer of a run without redis-server or
    tinyproxy) is caught here, not at the end of a run."""
    from bench import fleet, proxy

    fleet_lines = "\n".join(fleet.markdown(_fleet_report()))
    assert "**met** (1 with Redis, 1 without)" in fleet_lines
    assert "**missed** (1.40x in CPU)" in fleet_lines
    assert "4,668-byte" in fleet_lines
    proxy_lines = proxy.markdown(_proxy_report())
    verdicts = [line for line in proxy_lines if line.startswith("| h1/json/10 | 500 |")]
    assert [line.count("| no |") for line in verdicts] == [1, 1]  # direct: 1.5 trips
    assert [line.count("| yes |") for line in verdicts] == [1, 1]  # paced: 0.5 trips
    for render in (fleet.markdown, proxy.markdown):
        assert render({"failed": "no redis-server"}) == ["(not measured: no redis-server)"]
        assert render(None) == ["(not measured: absent)"]
