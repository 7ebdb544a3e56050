"""The ``sansmcp`` command line: exit statuses, ``--json`` shapes, one-line failures.

Against real servers on loopback: ``examples/demo_server.py`` (the official ``mcp``
package, tools served two per page) in a subprocess, and a tiny scripted HTTP/1.1
server in a thread for what a well-behaved server never does (401, a huge header
block, hostile text, every content block type).  ``main([...])`` runs in-process;
one test runs the installed console script as a real subprocess.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import io
import json
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sansmcp import Config, Limits, ServerAnswered
from sansmcp.cli import main
from sansmcp.core.results import Content
from sansmcp.io_adapters.asyncio import Client

ROOT = Path(__file__).resolve().parent.parent
SANSMCP = Path(sys.executable).parent / "sansmcp"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
LOOP = "--allow-loopback"
DEMO_TOOLS = ["echo", "add", "weather", "pixel", "fail"]


def block(type: str, **fields: Any) -> dict[str, Any]:
    """A content block as ``--json`` prints it: its fields in ``Content``'s order."""
    fields["type"] = type
    return {f.name: fields[f.name] for f in dataclasses.fields(Content) if f.name in fields}


PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABpfZFQAAAAABJRU5ErkJggg=="
)


# --------------------------------------------------------------------------- servers


START_TIMEOUT = 120  # s: for the demo server to print READY on a loaded machine


@pytest.fixture(scope="module")
def demo_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "demo_server.py"), "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # a safety net, not a speed assertion: it missed 30 s at load ~20 (issue 26)
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
        assert ready, f"the demo server printed nothing in {START_TIMEOUT} s"
        word, _, url = proc.stdout.readline().strip().partition(" ")
        assert word == "READY", "the demo server died before READY"
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


Handler = Callable[[bytes, dict[str, str], Any], bytes]


class ScriptedServer:
    """One-thread HTTP/1.1 server on loopback: each request gets ``handler``'s raw bytes.

    ``handler(method, headers, json_body)`` returns a whole response; the connection
    closes after it.  ``requests`` records ``(method, headers, body)``.
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[tuple[bytes, dict[str, str], Any]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/mcp"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.settimeout(5)
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        request_line, *lines = head.split(b"\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            body += chunk
        method = request_line.split(b" ")[0]
        message = json.loads(body) if body else None
        self.requests.append((method, headers, message))
        conn.sendall(self.handler(method, headers, message))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.listener.close()


@pytest.fixture
def scripted() -> Iterator[Callable[[Handler], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(handler: Handler) -> ScriptedServer:
        servers.append(ScriptedServer(handler))
        return servers[-1]

    try:
        yield start
    finally:
        for server in servers:
            server.close()


def http(status: int, body: bytes = b"", headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"content-length: {len(body)}", "connection: close"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def jsonrpc(message: Any, result: dict[str, Any]) -> bytes:
    answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"resultType": "complete", **result}}
    return http(200, json.dumps(answer).encode(), (("content-type", "application/json"),))


def modern_server(tools: list[Any], call_result: dict[str, Any] | None = None) -> Handler:
    """A 2026-07-28 server in a few lines: discover, one page of tools, one call result."""

    def handle(method: bytes, headers: dict[str, str], message: Any) -> bytes:
        if message["method"] == "server/discover":
            return jsonrpc(message, {"supportedVersions": [MODERN], "capabilities": {"tools": {}}})
        if message["method"] == "tools/list":
            return jsonrpc(message, {"tools": tools})
        return jsonrpc(message, call_result or {"content": []})

    return handle


@pytest.fixture(autouse=True)
def _no_stored_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored login is used without ``--oauth``: no test reads the user's token file."""
    monkeypatch.setenv("SANSMCP_TOKEN_FILE", str(tmp_path / "no-tokens.json"))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("sansmcp: ")
    assert "Traceback" not in err
    return err


# --------------------------------------------------------------------------- success


@pytest.mark.parametrize(
    ("backend", "versions", "expected"),
    [
        ("asyncio", [], MODERN),
        ("trio", ["--protocol-version", LEGACY], LEGACY),
        ("sync", [], MODERN),
        ("sync", ["--protocol-version", LEGACY], LEGACY),
    ],
)
def test_tools_json(
    capsys: pytest.CaptureFixture[str],
    demo_url: str,
    backend: str,
    versions: list[str],
    expected: str,
) -> None:
    status, out, err = run(
        capsys, "tools", demo_url, LOOP, "--json", "--backend", backend, *versions
    )
    assert (status, err) == (0, "")
    document = json.loads(out)
    assert list(document) == ["protocol_version", "tools", "skipped", "skipped_count"]
    assert document["protocol_version"] == expected
    assert (document["skipped"], document["skipped_count"]) == ([], 0)
    # All five tools, though the server serves two per page.
    assert [tool["name"] for tool in document["tools"]] == DEMO_TOOLS
    # The fields of a Tool, in field order (absent ones left out); the first three are an
    # Anthropic tool definition.
    assert all(
        list(tool) == ["name", "description", "input_schema", "header_params"]
        for tool in document["tools"]
    )
    header_params = [{"header": "City", "path": ["city"], "type": "string"}]
    assert document["tools"][2] == {
        "name": "weather",
        "description": "A (made-up) forecast for a city.",
        "input_schema": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "x-mcp-header": "City"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
        },
        # x-mcp-header is a 2026-07-28 feature: a legacy server's tool has none.
        "header_params": header_params if expected == MODERN else [],
    }


def test_demo_server_really_paginates(demo_url: str) -> None:
    """Five tools two per page is three pages: a two-page bound must trip."""

    async def list_with_two_pages() -> None:
        limits = Limits(max_tool_pages=2)
        async with (
            Client(allow_loopback=True, limits=limits) as client,
            client.connect(Config(url=demo_url)) as conn,
        ):
            await conn.list_tools()

    with pytest.raises(ServerAnswered) as caught:
        asyncio.run(list_with_two_pages())
    assert (caught.value.reason, caught.value.bound) == ("max_tool_pages", "max_tool_pages")


def test_tools_human(capsys: pytest.CaptureFixture[str], demo_url: str) -> None:
    status, out, err = run(capsys, "tools", demo_url, LOOP)
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"protocol {MODERN} · 5 tools"
    assert lines[1].split() == ["NAME", "PARAMETERS", "DESCRIPTION"]
    assert lines[2].split() == ["echo", "text:", "string", "Echo", "the", "text", "back."]
    assert lines[4].split()[:5] == ["weather", "city:", "string,", "days?:", "integer"]
    assert len(lines) == 7


@pytest.mark.parametrize("backend", ["asyncio", "trio", "sync"])
def test_call_json(capsys: pytest.CaptureFixture[str], demo_url: str, backend: str) -> None:
    status, out, err = run(
        capsys, "call", demo_url, "add", '{"a": 2, "b": 40}', LOOP, "--json", "--backend", backend
    )
    assert (status, err) == (0, "")
    assert json.loads(out) == {
        "protocol_version": MODERN,
        "content": [block("text", text="42")],
        "is_error": False,
        "structured_content": {"sum": 42},
    }

    status, out, err = run(capsys, "call", demo_url, "pixel", LOOP, "--json", "--backend", backend)
    assert (status, err) == (0, "")
    content = json.loads(out)["content"]
    assert content[0] == block("text", text="a 1x1 transparent pixel")
    assert content[1] == block("image", data=content[1]["data"], mime_type="image/png")
    assert base64.b64decode(content[1]["data"]) == PIXEL_PNG


def test_call_human_legacy_and_stdin(
    capsys: pytest.CaptureFixture[str], demo_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b'{"city": "Oslo", "days": 2}'), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    status, out, err = run(
        capsys, "call", demo_url, "weather", "-", LOOP, "--protocol-version", LEGACY
    )
    assert (status, err) == (0, "")
    assert out == (
        f"protocol {LEGACY} · weather → ok\n"
        "[text] Oslo, day 1: sunny, 21 °C\nOslo, day 2: sunny, 21 °C\n"
    )
    status, out, err = run(capsys, "call", demo_url, "pixel", LOOP)
    assert (status, err) == (0, "")
    assert out.splitlines()[1:] == ["[text] a 1x1 transparent pixel", "[image image/png 70 bytes]"]


def test_call_tool_error_exits_1(capsys: pytest.CaptureFixture[str], demo_url: str) -> None:
    status, out, err = run(capsys, "call", demo_url, "fail", LOOP, "--json")
    assert status == 1
    assert json.loads(out) == {
        "protocol_version": MODERN,
        "content": [block("text", text="this tool always fails")],
        "is_error": True,
    }
    assert one_line(err) == "sansmcp: the tool 'fail' reported an error (isError)\n"


def test_every_content_type_and_hostile_text(
    capsys: pytest.CaptureFixture[str], scripted: Callable[[Handler], ScriptedServer]
) -> None:
    blob = bytes(range(256))
    b64 = base64.b64encode(blob).decode()
    evil = "\x1b]0;pwned\x07\x1b[31mred\r\u202etxt.exe"  # a lone surrogate: refused, below
    hidden = "zero\u200bwidth\u2060joiner\u00adsoft\ufeffbom\U000e0041tag\u3164filler"
    cafe = "caf\u00e9\u200b"
    tools = [
        {"name": "ok", "description": evil, "inputSchema": {"type": "object"}},
        {"description": "no name", "inputSchema": {"type": "object"}},
        {
            "name": cafe,
            "title": "Caf\u00e9",
            "description": hidden,
            "inputSchema": {
                "type": "object",
                "properties": {"x": {"type": ["string", {"a": 1}]}, "y": 3, "\u00e9": {}},
                "required": [{"x": 1}, "x"],  # a dict in "required" raised TypeError once
            },
            "annotations": {"readOnlyHint": True},
            "outputSchema": {"type": "object"},
        },
        {
            "name": "caf\\u00e9",  # spells the escape of "caf\u00e9": must print differently
            "description": "",
            "inputSchema": {"type": "object", "properties": {"a": {}}, "required": [[1], {}]},
        },
    ]
    call = {
        "content": [
            {
                "type": "text",
                "text": evil + "\nline two\tcol",
                "annotations": {"audience": ["user"]},
            },
            {"type": "audio", "data": b64, "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "A"}},
            {"type": "resource", "resource": {"uri": "file:///b", "mimeType": "x/y", "blob": b64}},
            {
                "type": "resource_link",
                "uri": "https://example.com/r",
                "name": "r\u200b",
                "mimeType": "text/plain",
            },
        ],
        "isError": False,
        "structuredContent": {"k": "v\u200b"},
    }
    server = scripted(modern_server(tools, call))

    status, out, err = run(capsys, "tools", server.url, LOOP, "--json")
    assert (status, err) == (0, "")
    assert out.isascii()
    document = json.loads(out)
    assert document["tools"] == [
        {
            "name": "ok",
            "description": evil,
            "input_schema": {"type": "object"},
            "header_params": [],
        },
        {
            "name": cafe,
            "description": hidden,
            "input_schema": tools[2]["inputSchema"],
            "title": "Caf\u00e9",
            "annotations": {"readOnlyHint": True},
            "output_schema": {"type": "object"},
            "header_params": [],
        },
        {
            "name": "caf\\u00e9",
            "description": "",
            "input_schema": tools[3]["inputSchema"],
            "header_params": [],
        },
    ]
    assert document["skipped"] == [{"index": 1, "reason": "tool name is missing"}]
    assert document["skipped_count"] == 1

    status, out, err = run(capsys, "tools", server.url, LOOP)
    assert (status, err) == (0, "")
    for raw in (
        "\x1b",
        "\x07",
        "\r",
        "\u202e",
        "\ud800",
        "\u200b",
        "\u2060",
        "\u00ad",
        "\ufeff",
        "\U000e0041",
        "\u3164",
        "\u00e9",
    ):
        assert raw not in out
    rows = [line.split("  ") for line in out.splitlines()[2:5]]
    assert [[cell.strip() for cell in row if cell.strip()] for row in rows] == [
        ["ok", "-", "\\x1b]0;pwned\\x07\\x1b[31mred\\x0d\\u202etxt.exe"],
        [
            "caf\\xe9\\u200b",
            'x: string|{"a": 1}, y?, \\xe9?',
            "zero\\u200bwidth\\u2060joiner\\xadsoft\\ufeffbom\\U000e0041tag\\u3164filler",
        ],
        ["caf\\\\u00e9", "a?"],
    ]
    assert out.splitlines()[5:] == [
        "skipped 1 unusable tool definition(s):",
        "  #1: tool name is missing",
    ]

    status, out, err = run(capsys, "call", server.url, "ok", LOOP, "--json")
    assert (status, err) == (0, "")
    assert json.loads(out) == {
        "protocol_version": MODERN,
        "content": [
            block("text", text=evil + "\nline two\tcol", annotations={"audience": ["user"]}),
            block("audio", data=b64, mime_type="audio/wav"),
            block("resource", text="A", uri="file:///a.txt"),
            block("resource", data=b64, mime_type="x/y", uri="file:///b"),
            block(
                "resource_link", uri="https://example.com/r", name="r\u200b", mime_type="text/plain"
            ),
        ],
        "is_error": False,
        "structured_content": {"k": "v\u200b"},
    }
    status, out, err = run(capsys, "call", server.url, cafe, LOOP)
    assert (status, err) == (0, "")
    assert "\x1b" not in out and "\u202e" not in out and "\u200b" not in out
    assert out.splitlines() == [
        f"protocol {MODERN} · caf\\xe9\\u200b → ok",
        '[text annotations={"audience": ["user"]}] '
        "\\x1b]0;pwned\\x07\\x1b[31mred\\x0d\\u202etxt.exe",
        "line two\tcol",  # a text block keeps its lines and tabs
        "[audio audio/wav 256 bytes]",
        "[resource file:///a.txt] A",
        "[resource file:///b x/y 256 bytes]",
        "[resource_link r\\u200b https://example.com/r text/plain]",
        'structured content: {"k":"v\\u200b"}',
    ]


@pytest.mark.parametrize("where", ["tools", "call"])
def test_a_lone_surrogate_from_the_server_is_refused(
    where: str, capsys: pytest.CaptureFixture[str], scripted: Callable[[Handler], ScriptedServer]
) -> None:
    """A lone surrogate escape (``"\\ud800"``) in a listing or a call result: the answer is
    refused as invalid JSON (I-JSON, RFC 7493 s2.1), exit 3, one line naming the escape.  It
    used to be accepted and printed as ``\\ud800``."""
    lone = "txt.exe\ud800"
    tools = [{"name": "ok", "description": lone if where == "tools" else "", "inputSchema": {}}]
    call = {"content": [{"type": "text", "text": lone}], "isError": False}
    server = scripted(modern_server(tools, call))
    argv = ["tools", server.url] if where == "tools" else ["call", server.url, "ok"]
    status, out, err = run(capsys, *argv, LOOP)
    assert (status, out) == (3, "")
    assert "the escape \\ud800 at line 1 column " in one_line(err)
    assert "is a lone UTF-16 surrogate" in err


# --------------------------------------------------------------------------- usage: 2


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "--help")
    assert status == 0 and "exit status: 0 ok, 1 tool error" in out
    status, out, _ = run(capsys, "--version")
    assert status == 0 and out.startswith("sansmcp ")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "usage error: the following arguments are required: COMMAND"),
        (["tools"], "usage error: the following arguments are required: URL"),
        (["call", "http://127.0.0.1:1/"], "required: TOOL"),
        (["list", "http://x/"], "usage error: argument COMMAND: invalid choice"),
        (["tools", "http://x/", "--backend", "curio"], "argument --backend: invalid choice"),
        (["tools", "http://x/", "--protocol-version", "2024-11-05"], "invalid choice"),
        (["tools", "ftp://x/"], "CallerError: endpoint URL must start with http:// or https://"),
        (["tools", "http://x/#f"], "CallerError: endpoint URL must not contain a fragment"),
        (["tools", "http://example.com/", "--token", "t"], "never sent over plain http"),
    ],
)
def test_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    status, out, err = run(capsys, *argv)
    assert (status, out) == (2, "")
    assert expected in one_line(err)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("[1, 2]", "not an array"),
        ('{"a": 1, "a": 2}', 'the key "a" more than once'),
        ('{"a": NaN}', "NaN"),
        ("{bad", "invalid JSON"),
        ('{"a": 1} {}', "invalid JSON"),
    ],
)
def test_bad_arguments_are_refused_before_any_connection(
    capsys: pytest.CaptureFixture[str], arguments: str, expected: str
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        status, out, err = run(capsys, "call", url, "add", arguments, LOOP)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected: the kernel queued no handshake
    assert (status, out) == (2, "")
    line = one_line(err)
    assert line.startswith("sansmcp: CallerError: ARGUMENTS_JSON")
    assert expected in line


# --------------------------------------------------------------------------- failures: 3, 4, 5


@pytest.mark.parametrize("backend", ["asyncio", "trio", "sync"])
def test_connection_refused_exits_3(capsys: pytest.CaptureFixture[str], backend: str) -> None:
    url = f"http://127.0.0.1:{closed_port()}/mcp"
    status, out, err = run(capsys, "tools", url, LOOP, "--backend", backend)
    assert (status, out) == (3, "")
    assert one_line(err).startswith("sansmcp: ConnectionFailed [cause=dial]: ")


def test_loopback_refused_by_default_exits_3(
    capsys: pytest.CaptureFixture[str], demo_url: str
) -> None:
    status, out, err = run(capsys, "call", demo_url, "echo", '{"text": "x"}')
    assert (status, out) == (3, "")
    line = one_line(err)
    assert line.startswith("sansmcp: ConnectionFailed [cause=refused_address]: ")
    assert "loopback" in line


def test_bound_names_limit_and_figure(
    capsys: pytest.CaptureFixture[str], scripted: Callable[[Handler], ScriptedServer]
) -> None:
    huge = ("x-padding", "p" * 70_000)
    server = scripted(lambda method, headers, message: http(200, b"{}", (huge,)))
    status, out, err = run(capsys, "tools", server.url, LOOP)
    assert (status, out) == (3, "")
    line = one_line(err)
    assert "ConnectionFailed [cause=" in line
    assert "bound=Limits.max_header_bytes limit=65536 observed=" in line
    observed = int(line.split("observed=")[1].split()[0].rstrip("]:"))
    assert observed > 65536


@pytest.mark.parametrize("token_flag", [[], ["--token", "from-flag"]])
def test_unauthorized_exits_4(
    capsys: pytest.CaptureFixture[str],
    scripted: Callable[[Handler], ScriptedServer],
    monkeypatch: pytest.MonkeyPatch,
    token_flag: list[str],
) -> None:
    challenge = 'Bearer error="invalid_token", resource_metadata="http://127.0.0.1/.well-known/x"'
    server = scripted(
        lambda method, headers, message: http(401, b"no", (("www-authenticate", challenge),))
    )
    monkeypatch.setenv("SANSMCP_TOKEN", "from-env")
    status, out, err = run(capsys, "tools", server.url, LOOP, *token_flag)
    assert (status, out) == (4, "")
    line = one_line(err)
    assert line.startswith(f"sansmcp: Unauthorized [status=401 www-authenticate={challenge}]: ")
    expected = "from-flag" if token_flag else "from-env"
    assert server.requests[0][1]["authorization"] == f"Bearer {expected}"
    assert line.endswith(
        f"(next: run `sansmcp login {server.url}`; later commands use the stored login)\n"
    )


# --------------------------------------------------------------------------- --json failures


def json_failure(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    """Run with ``--json``: the failure is one JSON document on stdout (and one line on
    stderr for a person)."""
    status, out, err = run(capsys, *argv, "--json")
    one_line(err)
    assert out.endswith("\n") and out.count("\n") == 1 and out.isascii()
    document = json.loads(out)
    assert list(document) == ["error"]
    return status, document["error"]


def test_json_failures_carry_every_field(
    capsys: pytest.CaptureFixture[str], scripted: Callable[[Handler], ScriptedServer]
) -> None:
    status, error = json_failure(capsys, "tools", f"http://127.0.0.1:{closed_port()}/mcp", LOOP)
    assert status == 3
    assert error["class"] == "ConnectionFailed" and error["cause"] == "dial"
    assert error["message"].startswith("could not connect to 127.0.0.1:")

    huge = ("x-padding", "p" * 70_000)
    server = scripted(lambda method, headers, message: http(200, b"{}", (huge,)))
    status, error = json_failure(capsys, "tools", server.url, LOOP)
    assert status == 3
    assert (error["class"], error["bound"], error["limit"]) == (
        "ConnectionFailed",
        "max_header_bytes",
        65536,
    )
    assert error["observed"] > 65536

    challenge = 'Bearer error="invalid_token"'
    server = scripted(
        lambda method, headers, message: http(401, b"no", (("www-authenticate", challenge),))
    )
    status, error = json_failure(capsys, "tools", server.url, LOOP)
    assert status == 4
    assert (error["class"], error["status"], error["www_authenticate"]) == (
        "Unauthorized",
        401,
        challenge,
    )

    status, error = json_failure(capsys, "call", server.url, "t", "[1]", LOOP)
    assert (status, error["class"]) == (2, "CallerError")
    assert error["message"].startswith("ARGUMENTS_JSON")


def test_json_server_answered(capsys: pytest.CaptureFixture[str], demo_url: str) -> None:
    status, error = json_failure(capsys, "call", demo_url, "no_such_tool", LOOP)
    assert status == 5
    assert (error["class"], error["reason"], error["code"]) == (
        "ServerAnswered",
        "jsonrpc_error",
        -32602,
    )


# --------------------------------------------------------------------------- headers, deadlines


def test_header_option_is_sent(
    capsys: pytest.CaptureFixture[str], scripted: Callable[[Handler], ScriptedServer]
) -> None:
    server = scripted(modern_server([]))
    status, _, _ = run(
        capsys, "tools", server.url, LOOP, "--header", "X-Tenant: acme", "--header", "X-B:2"
    )
    assert status == 0
    assert all(
        headers["x-tenant"] == "acme" and headers["x-b"] == "2" for _, headers, _ in server.requests
    )


def test_an_authorization_header_is_sent_without_a_token(
    capsys: pytest.CaptureFixture[str],
    scripted: Callable[[Handler], ScriptedServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SANSMCP_TOKEN", raising=False)
    server = scripted(modern_server([]))
    status, _, _ = run(capsys, "tools", server.url, LOOP, "--header", "Authorization: Basic dTpw")
    assert status == 0
    assert {headers["authorization"] for _, headers, _ in server.requests} == {"Basic dTpw"}
    status, _, err = run(
        capsys, "tools", server.url, LOOP, "--header", "Authorization: Basic x", "--token", "t"
    )
    assert status == 2
    assert "Config.bearer_token is set" in one_line(err)


def test_timeout_options_set_the_deadlines() -> None:
    from sansmcp.cli import _limits, _parser

    def limits(*argv: str) -> Limits | None:
        return _limits(_parser().parse_args(["tools", "http://h/", *argv]))

    assert limits() is None
    every = limits("--timeout", "7")
    assert every is not None
    assert (every.dial_timeout, every.connect_timeout, every.list_timeout) == (7, 7, 7)
    assert (every.call_timeout, every.auth_timeout) == (7, 7)
    assert every.close_timeout == Limits().close_timeout
    one = limits("--timeout", "7", "--call-timeout", "300")
    assert one is not None and (one.call_timeout, one.list_timeout) == (300, 7)
    alone = limits("--list-timeout", "0.5")
    assert alone is not None and alone.list_timeout == 0.5
    assert alone.call_timeout == Limits().call_timeout


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_a_bad_timeout_is_a_usage_error(capsys: pytest.CaptureFixture[str], value: str) -> None:
    status, out, err = run(capsys, "tools", "http://127.0.0.1:9/", "--call-timeout", value)
    assert (status, out) == (2, "")
    assert "argument --call-timeout: " in one_line(err)


def test_the_list_timeout_binds(capsys: pytest.CaptureFixture[str]) -> None:
    """A server that accepts and never answers: the deadline the option set ends it."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        status, error = json_failure(capsys, "tools", url, LOOP, "--timeout", "0.3")
    assert status == 3
    assert (error["class"], error["cause"], error["limit"]) == ("ConnectionFailed", "timeout", 0.3)
    assert error["bound"] in ("connect_timeout", "dial_timeout")


def test_python_dash_m_sansmcp() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sansmcp", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.split()[0]) == (0, "sansmcp")


def test_unknown_tool_exits_5(capsys: pytest.CaptureFixture[str], demo_url: str) -> None:
    status, out, err = run(capsys, "call", demo_url, "no_such_tool", LOOP, "--backend", "trio")
    assert (status, out) == (5, "")
    assert one_line(err) == (
        "sansmcp: ServerAnswered [reason=jsonrpc_error code=-32602]: "
        "server answered with JSON-RPC error -32602: Unknown tool: no_such_tool\n"
    )


# --------------------------------------------------------------------------- console script


def test_installed_console_script(demo_url: str) -> None:
    assert SANSMCP.exists(), f"{SANSMCP} is missing: the package is not installed in this venv"
    env = {k: v for k, v in os.environ.items() if k != "SANSMCP_TOKEN"}
    done = subprocess.run(
        [str(SANSMCP), "call", demo_url, "fail", LOOP, "--json", "--protocol-version", LEGACY],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 1
    assert json.loads(done.stdout)["is_error"] is True
    assert done.stderr == "sansmcp: the tool 'fail' reported an error (isError)\n"
    done = subprocess.run(
        [str(SANSMCP), "tools", f"http://127.0.0.1:{closed_port()}/", LOOP],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr.startswith("sansmcp: ConnectionFailed [cause=dial]: ")
    assert done.stderr.count("\n") == 1


def test_console_script_reader_gone(demo_url: str) -> None:
    """``sansmcp tools URL --json | true``: exit 141 quietly, no BrokenPipeError traceback."""
    proc = subprocess.Popen(
        [str(SANSMCP), "tools", demo_url, LOOP, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the child can have written anything
    try:
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 141
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert err == b""
