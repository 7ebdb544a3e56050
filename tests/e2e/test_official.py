"""The contract against real official-SDK servers over HTTP/1.1, on every backend.

Four server modes (stateless / stateful sessions x JSON / SSE responses), two
version sets (the default, which negotiates 2026-07-28; and ``["2025-11-25"]``,
the legacy flow with ``initialize`` and, on a stateful server, a session).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from sansmcp import CallerError, Config, ConnectionFailed, ServerAnswered, Tool
from sansmcp.core.url import parse_endpoint

from .conftest import MODES, Backend, Launcher, Relay, Server
from .test_input import request_log

VERSIONS = {"default": None, "legacy": ["2025-11-25"]}
EXPECTED = {"default": "2026-07-28", "legacy": "2025-11-25"}
OUR_TOOLS = {"echo", "add", "fail", "sleep", "rpc_error", "whoami", "ask", "ask_mrtr"}


@pytest.fixture(scope="module", params=list(MODES))
def official(request: pytest.FixtureRequest, launch: Launcher) -> Server:
    return launch(*MODES[request.param])


@pytest.mark.parametrize("versions", list(VERSIONS))
def test_contract(backend: Backend, official: Server, versions: str) -> None:
    async def main() -> None:
        config = Config(url=official.url(), protocol_versions=VERSIONS[versions])
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(config) as conn,
        ):
            assert conn.protocol_version == EXPECTED[versions]

            tools = await conn.list_tools()
            assert all(isinstance(tool, Tool) for tool in tools)
            assert {tool.name for tool in tools} == OUR_TOOLS
            assert conn.skipped_tools == []
            echo = next(tool for tool in tools if tool.name == "echo")
            assert echo.description == "Echo the text back."
            schema = json.loads(echo.input_schema)
            assert schema["type"] == "object"
            assert schema["properties"]["text"]["type"] == "string"
            assert schema["required"] == ["text"]
            assert set(echo.to_dict()) == {"name", "description", "input_schema"}

            result = await conn.call_tool("echo", b'{"text": "h\\u00e9llo"}')
            assert not result.is_error
            assert [(c.type, c.text) for c in result.content] == [("text", "h\u00e9llo")]
            assert json.loads(result.structured_content or b"") == {"result": "h\u00e9llo"}

            added = await conn.call_tool("add", b'{"a": 2, "b": 40}')
            assert [c.text for c in added.content] == ["42"]

            failed = await conn.call_tool("fail", b"")
            assert failed.is_error
            assert failed.content and failed.content[0].type == "text"

            # The official SDK answers an unknown tool with an isError result, not a
            # JSON-RPC error; either is the server's verdict, and it is passed on.
            unknown = await conn.call_tool("no_such_tool", b"{}")
            assert unknown.is_error
            assert [c.text for c in unknown.content] == ["Unknown tool: no_such_tool"]

            # A JSON-RPC error for our id is ServerAnswered with the code, and the
            # Conn stays usable afterwards.
            with pytest.raises(ServerAnswered) as answered:
                await conn.call_tool("rpc_error", b"{}")
            assert answered.value.code == -32602
            assert answered.value.reason == "jsonrpc_error"
            assert answered.value.rpc_message == "rpc_error always answers -32602"

            seen = await conn.call_tool("whoami", b"")
            assert [c.text for c in seen.content] == [f"1.1 {EXPECTED[versions]}"]

            with pytest.raises(CallerError):
                await conn.call_tool("echo", b"[1, 2]")
            again = await conn.call_tool("echo", b'{"text": "still here"}')
            assert [c.text for c in again.content] == ["still here"]

    backend.run(main)


@pytest.mark.parametrize("mode", ["stateful-json", "stateful-sse"])
def test_legacy_session_is_carried_and_deleted(
    backend: Backend, launch: Launcher, relay: Callable[..., Relay], mode: str
) -> None:
    """Restricted to 2025-11-25 on a stateful server: initialize, the session id on
    every later request, MCP-Protocol-Version, and a DELETE on close."""
    server = launch(*MODES[mode])
    proxy = relay(server.address)

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            config = Config(url=proxy.url(), protocol_versions=["2025-11-25"])
            async with client.connect(config) as conn:
                assert conn.protocol_version == "2025-11-25"
                result = await conn.call_tool("echo", b'{"text": "s"}')
                assert [c.text for c in result.content] == ["s"]
            # Every socket is idle again (a lingering SSE stream may have cost a second).
            origin = parse_endpoint(config.url).origin
            assert client.pool.idle_count(origin) == client.pool.socket_count >= 1

    backend.run(main)
    sent = bytes(proxy.from_client).lower()
    requests = re.findall(rb"(post|delete|get) /mcp http/1\.1\r\n", sent)
    assert requests == [b"post", b"post", b"post", b"delete"]  # initialize, initialized, call
    assert b"server/discover" not in sent  # a legacy-only set skips the probe
    assert sent.count(b"mcp-session-id: ") == 3
    assert sent.count(b"mcp-protocol-version: 2025-11-25") == 3
    assert proxy.accepts in (1, 2)


def test_stateless_server_has_no_session(
    backend: Backend, plain: Server, relay: Callable[..., Relay]
) -> None:
    proxy = relay(plain.address)

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            for versions in (None, ["2025-11-25"]):
                config = Config(url=proxy.url(), protocol_versions=versions)
                async with client.connect(config) as conn:
                    await conn.call_tool("echo", b'{"text": "x"}')

    backend.run(main)
    sent = bytes(proxy.from_client).lower()
    assert b"mcp-session-id" not in sent
    assert b"delete /mcp" not in sent
    assert b"mcp-method: tools/call" in sent  # the 2026-07-28 call's routing headers
    assert b"mcp-name: echo" in sent
    assert proxy.accepts == 1


def test_era_cache_skips_the_probe(
    backend: Backend, plain: Server, relay: Callable[..., Relay]
) -> None:
    """A second work item to a known modern endpoint sends its request directly."""
    proxy = relay(plain.address)

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            for _ in range(2):
                async with client.connect(Config(url=proxy.url())) as conn:
                    assert conn.protocol_version == "2026-07-28"
                    await conn.call_tool("echo", b'{"text": "x"}')

    backend.run(main)
    sent = bytes(proxy.from_client)
    assert sent.count(b'"method":"server/discover"') == 1
    assert sent.count(b'"method":"tools/call"') == 2


def test_module_level_connect(backend: Backend, plain: Server, relay: Callable[..., Relay]) -> None:
    """``connect()`` runs on a default Client per event loop / trio run, with the default
    guard: loopback is refused before any connection, and a second run gets a fresh one."""
    proxy = relay(plain.address)

    async def main() -> None:
        with pytest.raises(ConnectionFailed) as refused:
            async with backend.connect(Config(url=proxy.url())):
                raise AssertionError("connected to loopback through the default client")
        assert refused.value.cause == "refused_address"
        with pytest.raises(CallerError):
            async with backend.connect(Config(url="http://mcp.example/mcp", bearer_token="t")):
                raise AssertionError("unreachable")

    backend.run(main)
    backend.run(main)
    assert proxy.accepts == 0


@pytest.mark.parametrize("answers_input", [False, True])
def test_a_remembered_legacy_era_skips_the_probe(
    backend: Backend, launch: Launcher, answers_input: bool
) -> None:
    """Issue 10 H.2, counted at the SDK server behind its legacy-only filter: three work
    items, one ``server/discover`` (its 400 teaches the pool the era), then per item
    initialize, initialized, the call, (the one GET,) the DELETE."""
    server = launch("--legacy-only")
    tag = f"h2-{backend.name}-{answers_input}"

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        return {key: {"roots": []} for key in requests}

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True,
            input_handler=handler if answers_input else None,
            capabilities={"roots": {}} if answers_input else None,
        ) as client:
            for _ in range(3):
                config = Config(url=server.url(), headers={"x-test-tag": tag})
                async with client.connect(config) as conn:
                    assert conn.protocol_version == "2025-11-25"
                    result = await conn.call_tool("echo", b'{"text": "x"}')
                    assert [c.text for c in result.content] == ["x"]

    backend.run(main)
    log = request_log(server, tag)
    kinds = [entry["rpc"] if entry["method"] == "POST" else entry["method"] for entry in log]
    probe = [entry for entry in log if entry["rpc"] is None and entry["method"] == "POST"]
    assert len(probe) == 1 and probe[0]["status"] == 400 and kinds[0] is None
    item = ["initialize", "notifications/initialized", "tools/call", "DELETE"]
    item += ["GET"] if answers_input else []
    assert sorted(kinds[1:]) == sorted(item * 3)
    assert len(kinds) == 1 + 3 * len(item)
