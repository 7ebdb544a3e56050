"""A plain ``import sansmcp.io_adapters.<runtime>`` loads only what a plain work item needs.

Issue 16, item 5 (``import sansmcp.io_adapters.asyncio`` <= 60 ms, measured by
``bench.cold_start``): hpack (our HTTP/2 machine's only dependency) loads on the first
HTTP/2 dial, the OAuth flow on the first ``Config(oauth=)``, the outputSchema validator
on the first schema, telemetry on ``Config(telemetry=)``, ``hashlib`` on the first
credential the cache digests; the adapters draw randomness from ``os.urandom`` (what
``secrets.token_bytes`` calls) and do not load ``secrets``.  Each runs in a fresh interpreter: ``sys.modules`` after the import.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

NOT_FOR_A_PLAIN_ITEM = (
    "h2",
    "hpack",
    "hyperframe",
    "sansmcp.core.wire.h2",
    "sansmcp.core.oauth.flow",
    "sansmcp.core.oauth.fetching",
    "sansmcp.core.oauth.discovery",
    "sansmcp.core.oauth.registration",
    "sansmcp.core.oauth.grants",
    "sansmcp.core.oauth.machine",
    "sansmcp.core.oauth.dpop",
    "sansmcp.core.schema",
    "sansmcp.otel",
    "opentelemetry",
    "sansmcp.cli",
    "hashlib",
    "secrets",
)


def _loaded_after(statement: str) -> set[str]:
    probe = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout))


def _heavy(loaded: set[str]) -> list[str]:
    return sorted(
        name
        for name in loaded
        if any(name == heavy or name.startswith(heavy + ".") for heavy in NOT_FOR_A_PLAIN_ITEM)
    )


RUNTIME = {"asyncio": "asyncio, ssl", "trio": "trio, ssl", "sync": "selectors, socket, ssl"}


@pytest.mark.parametrize("runtime", ["asyncio", "trio", "sync"])
def test_a_plain_adapter_import_loads_nothing_a_plain_work_item_never_needs(runtime: str) -> None:
    loaded = _loaded_after(f"import sansmcp.io_adapters.{runtime}")
    assert f"sansmcp.io_adapters.{runtime}" in loaded
    assert "sansmcp.core.wire.h1" in loaded  # what a plain work item does need
    # what the runtime loads on its own is not ours to defer (trio imports hashlib)
    assert _heavy(loaded - _loaded_after(f"import {RUNTIME[runtime]}")) == []


def test_h2_and_hashlib_still_load_when_used() -> None:
    """The probe can fail: what the lazy imports defer is loaded once it is needed."""
    loaded = _loaded_after(
        "import sansmcp.io_adapters.asyncio; "
        "from sansmcp.core.net.pool import standard_wire; from sansmcp import Limits; "
        "standard_wire(http2=True, limits=Limits(), now=0.0); "
        "from sansmcp.core.cache import caller_identity; "
        "from types import SimpleNamespace as S; "
        "caller_identity(S(bearer_token='t', headers=()), bytes(16))"
    )
    assert {"hpack", "sansmcp.core.wire.h2", "hashlib"} <= loaded
    assert "h2" not in loaded and "hyperframe" not in loaded  # our own HTTP/2 needs only hpack
