"""Progress, server notifications and the log level against the official SDK server (issue 14).

Every test runs on every backend (``backend``) against ``tests/e2e/server.py --observe``,
in both eras: the 2026-07-28 server, and the same SDK behind ``--legacy-only`` (a legacy
session with its standalone GET stream).
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import pytest

from sansmcp import Config, ConnectionFailed, Limits, UsageError
from sansmcp.core.mcp import LogMessage, Notification

from .conftest import Backend, Launcher, Server

ERAS = {"modern": ("--observe",), "legacy": ("--observe", "--legacy-only")}


@pytest.fixture(params=sorted(ERAS))
def observed(request: pytest.FixtureRequest, launch: Launcher) -> tuple[str, Server]:
    return request.param, launch(*ERAS[request.param])


def requests_logged(server: Server, tag: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/_log?{tag}", timeout=5) as r:
        return list(json.loads(r.read()))


class Boom(Exception):
    pass


def test_progress_in_order_and_log_messages(backend: Backend, observed: tuple[str, Server]) -> None:
    era, server = observed
    tag = uuid.uuid4().hex
    notes: list[Any] = []

    async def main() -> tuple[list[Any], list[Any], str | None]:
        progress: list[Any] = []
        config = Config(
            url=server.url(),
            headers={"x-test-tag": tag},
            on_notification=notes.append,
            log_level="info",
        )
        async with backend.Client(allow_loopback=True) as client, client.connect(config) as conn:
            result = await conn.call_tool(
                "report", b'{"steps": 3}', on_progress=lambda *a: progress.append(a)
            )
            assert result.content[0].text == "reported 3"
            untotalled: list[Any] = []
            await conn.call_tool(
                "report",
                b'{"steps": 2, "with_total": false}',
                on_progress=lambda *a: untotalled.append(a),
            )
            return progress, untotalled, conn.protocol_version

    progress, untotalled, version = backend.run(main)
    assert (version == "2026-07-28") == (era == "modern")
    assert progress == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
    assert untotalled == [(1.0, None, "step 1"), (2.0, None, "step 2")]
    logs = [n for n in notes if isinstance(n, LogMessage)]
    expected = [
        LogMessage(level=level, logger="report", data={"level": level, "n": 1})
        for level in ("info", "warning", "error")  # debug is below the level asked for
    ]
    assert logs == expected * 2
    methods = [entry["rpc"] for entry in requests_logged(server, tag)]
    assert methods.count("logging/setLevel") == (1 if era == "legacy" else 0)  # once per session


def test_legacy_progress_on_the_standalone_stream(backend: Backend, launch: Launcher) -> None:
    server = launch(*ERAS["legacy"])
    tag = uuid.uuid4().hex

    async def main() -> list[Any]:
        progress: list[Any] = []
        config = Config(url=server.url(), headers={"x-test-tag": tag})
        async with backend.Client(allow_loopback=True) as client, client.connect(config) as conn:
            await conn.call_tool(
                "report",
                b'{"steps": 3, "standalone": true}',
                on_progress=lambda *a: progress.append(a),
            )
            await conn.call_tool("report", b'{"steps": 1}', on_progress=lambda *a: None)
        return progress

    assert backend.run(main) == [(float(i), 3.0, f"step {i}") for i in (1, 2, 3)]
    log = requests_logged(server, tag)
    assert [entry["method"] for entry in log].count("GET") == 1  # once per session


def test_without_callbacks_nothing_is_asked(backend: Backend, observed: tuple[str, Server]) -> None:
    _era, server = observed
    tag = uuid.uuid4().hex

    async def main() -> str:
        config = Config(url=server.url(), headers={"x-test-tag": tag})
        async with backend.Client(allow_loopback=True) as client, client.connect(config) as conn:
            result = await conn.call_tool("meta_seen")
            return str(result.content[0].text)

    meta = json.loads(backend.run(main)) or {}
    assert "progress_token" not in meta and "progressToken" not in meta
    assert "io.modelcontextprotocol/logLevel" not in json.dumps(meta)
    methods = [entry["method"] for entry in requests_logged(server, tag)]
    rpcs = [entry["rpc"] for entry in requests_logged(server, tag)]
    assert "GET" not in methods and "logging/setLevel" not in rpcs


def test_the_per_request_cap_drops_and_counts(
    backend: Backend, observed: tuple[str, Server]
) -> None:
    _era, server = observed

    async def main() -> tuple[list[Any], list[Any], int]:
        progress: list[Any] = []
        notes: list[Any] = []
        config = Config(url=server.url(), on_notification=notes.append, log_level="debug")
        limits = Limits(max_notifications=2)
        async with (
            backend.Client(allow_loopback=True, limits=limits) as client,
            client.connect(config) as conn,
        ):
            result = await conn.call_tool(
                "report", b'{"steps": 5}', on_progress=lambda *a: progress.append(a)
            )
            assert not result.is_error
            return progress, notes, conn.notifications_dropped

    progress, notes, dropped = backend.run(main)
    assert progress == [(1.0, 5.0, "step 1"), (2.0, 5.0, "step 2")]
    assert notes == []
    assert dropped == 3 + 4  # three progress, four log messages


@pytest.mark.parametrize("which", ["progress", "notification"])
def test_a_raising_callback_propagates_unchanged_and_closes_the_conn(
    backend: Backend, observed: tuple[str, Server], which: str
) -> None:
    _era, server = observed
    boom = Boom("from the caller's callback")

    def raise_it(*args: Any) -> None:
        raise boom

    async def main() -> None:
        on_notification = raise_it if which == "notification" else None
        config = Config(url=server.url(), on_notification=on_notification, log_level="info")
        on_progress = raise_it if which == "progress" else None
        async with backend.Client(allow_loopback=True) as client, client.connect(config) as conn:
            with pytest.raises(Boom) as caught:
                await conn.call_tool("report", b'{"steps": 2}', on_progress=on_progress)
            assert caught.value is boom
            assert conn.view.closed
            with pytest.raises(UsageError):
                await conn.call_tool("whoami")

    backend.run(main)


def test_legacy_list_changed_on_the_standalone_stream(backend: Backend, launch: Launcher) -> None:
    server = launch(*ERAS["legacy"])

    async def main() -> list[Any]:
        notes: list[Any] = []
        config = Config(url=server.url(), on_notification=notes.append)
        async with backend.Client(allow_loopback=True) as client, client.connect(config) as conn:
            await conn.call_tool("changed")
            await conn.call_tool("whoami")  # anything that came between operations, by now
        return notes

    notes = backend.run(main)
    assert Notification(method="notifications/tools/list_changed", params={}) in notes


def test_progress_never_extends_call_timeout(
    backend: Backend, observed: tuple[str, Server]
) -> None:
    _era, server = observed

    async def main() -> tuple[Any, int]:
        progress: list[Any] = []
        limits = Limits(call_timeout=0.6)
        async with (
            backend.Client(allow_loopback=True, limits=limits) as client,
            client.connect(Config(url=server.url())) as conn,
        ):
            with pytest.raises(ConnectionFailed) as caught:
                await conn.call_tool(
                    "report",
                    b'{"steps": 2000, "interval": 0.05}',
                    on_progress=lambda *a: progress.append(a),
                )
            return caught.value, len(progress)

    # 2000 steps 0.05 s apart would take 100 s: had progress extended the bound, the
    # call would outlive the backend's own 60 s timeout instead of failing by its name
    error, count = backend.run(main)
    assert (error.cause, error.bound, error.limit) == ("timeout", "call_timeout", 0.6)
    assert count >= 3  # progress kept arriving, and the bound held all the same
