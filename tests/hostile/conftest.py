"""Fixtures of the hostile-server suite: the client host and the well-behaved baselines."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from .cases import CASES
from .harness import ClientHost, run_case

BASELINES = ("well_behaved", "h2_well_behaved")


@pytest.fixture(scope="session")
def client_host() -> Iterator[ClientHost]:
    host = ClientHost()
    try:
        yield host
    finally:
        host.close()


@pytest.fixture(scope="session")
def baselines(client_host: ClientHost) -> dict[tuple[str, str], int]:
    """Peak RSS (KiB) of a well-behaved run, per (backend, protocol)."""
    out: dict[tuple[str, str], int] = {}
    for case in CASES:
        if case.name not in BASELINES:
            continue
        for backend, (report, _, _) in run_case(client_host, case).items():
            assert report.get("ok"), f"{backend} baseline {case.name} failed: {report}"
            out[(backend, case.proto)] = int(report["maxrss_kib"])
    return out


@pytest.fixture(scope="session")
def measurements() -> Iterator[list[dict[str, Any]]]:
    """Per-case figures; written as JSON lines to $SANSMCP_HOSTILE_REPORT when set."""
    rows: list[dict[str, Any]] = []
    yield rows
    path = os.environ.get("SANSMCP_HOSTILE_REPORT")
    if path:
        with open(path, "w") as out:
            for row in rows:
                out.write(json.dumps(row) + "\n")
