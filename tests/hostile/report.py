"""Format the figures of a ``SANSMCP_HOSTILE_REPORT`` run as a Markdown table.

``python -m tests.hostile.report PATH.jsonl``: one row per case, per backend the wall
time (of the failing operation, or the whole run when it succeeds) and the peak RSS with
its difference from the well-behaved run's.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .cases import BACKENDS


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    seconds = row["elapsed"] if row["elapsed"] is not None else row["total"]
    rss = row["maxrss_kib"] / 1024
    delta = (row["maxrss_kib"] - row["baseline_kib"]) / 1024
    return f"{seconds:.2f} s, {rss:.1f} MiB ({delta:+.1f})"


def table(rows: list[dict[str, Any]]) -> str:
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault(row["case"], {})[row["backend"]] = row
    lines = [
        "| case | outcome | "
        + " | ".join(f"{b}: time, peak RSS (vs baseline)" for b in BACKENDS)
        + " |",
        "|---|---|" + "---|" * len(BACKENDS),
    ]
    for case, runs in by_case.items():
        outcomes = sorted({f"{r['outcome']} {r['bound'] or ''}".strip() for r in runs.values()})
        cells = " | ".join(_cell(runs.get(b)) for b in BACKENDS)
        lines.append(f"| `{case}` | {' / '.join(outcomes)} | {cells} |")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as source:
        print(table([json.loads(line) for line in source if line.strip()]))
