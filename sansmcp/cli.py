"""The ``sansmcp`` command line: list a server's tools, or call one.

::

    sansmcp tools URL [--token T] [--json] [--allow-loopback] [--allow-private]
                      [--backend asyncio|trio] [--protocol-version V ...]
    sansmcp call  URL TOOL [ARGUMENTS_JSON | -] [same options]

The token may also come from ``SANSMCP_TOKEN``.  Output is for people by default
(a table of tools; a call's content blocks; the negotiated protocol version) and
for machines with ``--json`` (one JSON document on one line).

Exit status: 0 success; 1 the tool ran and reported ``isError``; 2 usage error
(bad options, a bad URL, arguments that are not one JSON object); 3
``ConnectionFailed``; 4 ``Unauthorized``; 5 ``ServerAnswered``; 130 interrupted;
141 the reader of stdout went away.
A failure prints one line on stderr naming the class, its cause and, for a bound,
the limit and the observed figure -- never a traceback.

Everything a server sends is untrusted: text shown to a person has its control
characters (terminal escapes, carriage returns, bidi overrides) escaped, and
``--json`` output is pure ASCII.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, TextIO, TypeVar

from .core import __version__
from .core.config import Config
from .core.errors import CallerError, ConnectionFailed, McpError, ServerAnswered, Unauthorized
from .core.jsonvalue import JsonError, parse_json_object_strict
from .core.limits import Limits
from .core.messages import SUPPORTED_VERSIONS
from .core.tools import CallResult, Content, SkippedTool, Tool

__all__ = [
    "EXIT_CONNECTION_FAILED",
    "EXIT_OK",
    "EXIT_SERVER_ANSWERED",
    "EXIT_TOOL_ERROR",
    "EXIT_UNAUTHORIZED",
    "EXIT_USAGE",
    "main",
]

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECTION_FAILED = 3
EXIT_UNAUTHORIZED = 4
EXIT_SERVER_ANSWERED = 5
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it

TOKEN_ENV = "SANSMCP_TOKEN"
_DESCRIPTION_WIDTH = 72
_PARAMS_WIDTH = 44
_CHALLENGE_WIDTH = 200

T = TypeVar("T")


# --------------------------------------------------------------------------- parsing


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (and exit status 2)."""

    def error(self, message: str) -> NoReturn:
        _emit(sys.stderr, _line(f"sansmcp: usage error: {message} (see '{self.prog} --help')"))
        raise SystemExit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("url", metavar="URL", help="the MCP endpoint, e.g. https://host/mcp")
    common.add_argument(
        "--token", help=f"bearer token (default: ${TOKEN_ENV}); never sent over plain http"
    )
    common.add_argument("--json", action="store_true", help="print one JSON document")
    common.add_argument(
        "--allow-loopback", action="store_true", help="allow loopback addresses (127/8, ::1)"
    )
    common.add_argument(
        "--allow-private",
        action="store_true",
        help="allow private addresses (10/8, 172.16/12, 192.168/16, fc00::/7, ...)",
    )
    common.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    common.add_argument(
        "--protocol-version",
        dest="protocol_versions",
        action="append",
        choices=SUPPORTED_VERSIONS,
        metavar="V",
        help="speak only this revision (repeatable, in order of preference; "
        f"one of {', '.join(SUPPORTED_VERSIONS)})",
    )

    parser = _Parser(
        prog="sansmcp",
        description="List the tools of an MCP server, or call one.",
        epilog="exit status: 0 ok, 1 tool error, 2 usage, 3 ConnectionFailed, "
        "4 Unauthorized, 5 ServerAnswered",
    )
    parser.add_argument("--version", action="version", version=f"sansmcp {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("tools", parents=[common], help="list the server's tools")
    call = commands.add_parser("call", parents=[common], help="call one tool")
    call.add_argument("tool", metavar="TOOL")
    call.add_argument(
        "arguments",
        metavar="ARGUMENTS_JSON",
        nargs="?",
        default=None,
        help="one JSON object (default {}); '-' reads it from stdin",
    )
    return parser


# --------------------------------------------------------------------------- running


class _Conn(Protocol):
    @property
    def protocol_version(self) -> str | None: ...

    @property
    def skipped_tools(self) -> list[SkippedTool]: ...

    async def list_tools(self) -> list[Tool]: ...

    async def call_tool(self, name: str, arguments: bytes = ...) -> CallResult: ...


@dataclass(frozen=True, slots=True)
class _Listing:
    protocol_version: str | None
    tools: list[Tool]
    skipped: list[SkippedTool]


@dataclass(frozen=True, slots=True)
class _Called:
    protocol_version: str | None
    result: CallResult


def _run(
    backend: str,
    client_options: dict[str, Any],
    config: Config,
    job: Callable[[_Conn], Awaitable[T]],
) -> T:
    """Open a client and one ``Conn`` on ``backend``, run ``job`` on it, close both."""
    if backend == "trio":
        try:
            import trio
        except ImportError:
            raise CallerError("the trio backend needs trio: pip install 'sansmcp[trio]'") from None
        from .io_adapters.trio import Client as TrioClient

        async def trio_main() -> T:
            async with TrioClient(**client_options) as client, client.connect(config) as conn:
                return await job(conn)

        return trio.run(trio_main)

    import asyncio

    from .io_adapters.asyncio import Client as AsyncioClient

    async def asyncio_main() -> T:
        async with AsyncioClient(**client_options) as client, client.connect(config) as conn:
            return await job(conn)

    return asyncio.run(asyncio_main())


async def _list(conn: _Conn) -> _Listing:
    tools = await conn.list_tools()
    return _Listing(conn.protocol_version, tools, list(conn.skipped_tools))


def _caller(name: str, arguments: bytes) -> Callable[[_Conn], Awaitable[_Called]]:
    async def call(conn: _Conn) -> _Called:
        result = await conn.call_tool(name, arguments)
        return _Called(conn.protocol_version, result)

    return call


def _arguments(text: str | None, stdin: TextIO) -> bytes:
    """The argument bytes, verbatim (checked here so a bad JSON costs no connection)."""
    if text is None:
        return b""
    if text == "-":
        data = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
    else:
        # surrogateescape gives back the exact bytes of a non-UTF-8 argv.
        data = text.encode("utf-8", "surrogateescape")
    if data.strip():
        try:
            parse_json_object_strict(data, max_depth=Limits().max_json_depth)
        except JsonError as exc:
            raise CallerError(f"ARGUMENTS_JSON: {exc}") from None
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help / --version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    out, err = sys.stdout, sys.stderr
    token = args.token
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    client_options = {"allow_loopback": args.allow_loopback, "allow_private": args.allow_private}
    try:
        config = Config(url=args.url, bearer_token=token, protocol_versions=args.protocol_versions)
        if args.command == "tools":
            listing = _run(args.backend, client_options, config, _list)
            _emit(out, _listing_json(listing) if args.json else _listing_text(listing))
            return EXIT_OK
        arguments = _arguments(args.arguments, sys.stdin)
        called = _run(args.backend, client_options, config, _caller(args.tool, arguments))
        _emit(out, _call_json(called) if args.json else _call_text(args.tool, called))
        if called.result.is_error:
            _emit(err, f"sansmcp: the tool {_line(args.tool)!r} reported an error (isError)")
            return EXIT_TOOL_ERROR
        return EXIT_OK
    except KeyboardInterrupt:
        _emit(err, "sansmcp: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader left (``sansmcp tools URL | head``): no traceback now, and none at
        # exit when Python flushes stdout again.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, out.fileno())
            finally:
                os.close(devnull)
        return EXIT_BROKEN_PIPE
    except (CallerError, McpError) as exc:
        _emit(err, describe_error(exc))
        return exit_status(exc)


def exit_status(exc: BaseException) -> int:
    """The exit status for a failure of the public API."""
    if isinstance(exc, CallerError):
        return EXIT_USAGE
    if isinstance(exc, Unauthorized):
        return EXIT_UNAUTHORIZED
    if isinstance(exc, ServerAnswered):
        return EXIT_SERVER_ANSWERED
    return EXIT_CONNECTION_FAILED  # ConnectionFailed (and, defensively, a bare McpError)


def describe_error(exc: CallerError | McpError) -> str:
    """One line: ``sansmcp: Class [field=value ...]: message``."""
    fields: list[str] = []
    if isinstance(exc, ConnectionFailed):
        fields.append(f"cause={exc.cause}")
        fields += _bound_fields(exc.bound, exc.limit, exc.observed)
        if exc.status is not None:
            fields.append(f"status={exc.status}")
        if exc.location is not None:
            fields.append(f"location={_clip(exc.location, _CHALLENGE_WIDTH)}")
    elif isinstance(exc, Unauthorized):
        fields.append(f"status={exc.status}")
        if exc.www_authenticate:
            fields.append(f"www-authenticate={_clip(exc.www_authenticate, _CHALLENGE_WIDTH)}")
    elif isinstance(exc, ServerAnswered):
        fields.append(f"reason={exc.reason}")
        if exc.code is not None:
            fields.append(f"code={exc.code}")
        fields += _bound_fields(exc.bound, exc.limit, None)
    label = type(exc).__name__
    if fields:
        label += " [" + " ".join(fields) + "]"
    message = exc.message if isinstance(exc, McpError) else str(exc)
    return _line(f"sansmcp: {label}: {message}")


def _bound_fields(bound: str | None, limit: float | None, observed: float | None) -> list[str]:
    fields = []
    if bound is not None:
        fields.append(f"bound=Limits.{bound}")
    if limit is not None:
        fields.append(f"limit={_figure(limit)}")
    if observed is not None:
        fields.append(f"observed={_figure(observed)}")
    return fields


def _figure(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0")


# --------------------------------------------------------------------------- output


def _listing_json(listing: _Listing) -> str:
    return _dumps(
        {
            "protocol_version": listing.protocol_version,
            "tools": [tool.to_dict() for tool in listing.tools],
            "skipped": [{"name": s.name, "reason": s.reason} for s in listing.skipped],
        }
    )


def _call_json(called: _Called) -> str:
    return _dumps(
        {
            "is_error": called.result.is_error,
            "content": [_content_dict(block) for block in called.result.content],
        }
    )


def _content_dict(block: Content) -> dict[str, Any]:
    item: dict[str, Any] = {"type": block.type}
    if block.text is not None:
        item["text"] = block.text
    if block.data is not None:
        item["data"] = base64.b64encode(block.data).decode("ascii")
    if block.mime_type is not None:
        item["mime_type"] = block.mime_type
    if block.uri is not None:
        item["uri"] = block.uri
    return item


def _dumps(value: Any) -> str:
    # ASCII only: a lone surrogate or a terminal escape in server text stays an escape.
    return json.dumps(value, ensure_ascii=True, allow_nan=False)


def _listing_text(listing: _Listing) -> str:
    count = len(listing.tools)
    lines = [
        f"protocol {listing.protocol_version} · {count} tool{'' if count == 1 else 's'}",
    ]
    if listing.tools:
        rows = [("NAME", "PARAMETERS", "DESCRIPTION")]
        rows += [
            (
                _line(tool.name),
                _clip(_parameters(tool.input_schema), _PARAMS_WIDTH),
                _clip(_first_line(tool.description), _DESCRIPTION_WIDTH),
            )
            for tool in listing.tools
        ]
        name_width = max(len(row[0]) for row in rows)
        params_width = max(len(row[1]) for row in rows)
        lines += [
            f"  {n.ljust(name_width)}  {p.ljust(params_width)}  {d}".rstrip() for n, p, d in rows
        ]
    if listing.skipped:
        lines.append(f"skipped {len(listing.skipped)} unusable tool definition(s):")
        lines += [
            f"  {_line(s.name) if s.name is not None else f'#{s.index}'}: {_line(s.reason)}"
            for s in listing.skipped
        ]
    return "\n".join(lines)


def _parameters(schema: bytes) -> str:
    """``city: string, days?: integer`` from an input schema's top-level properties."""
    try:
        value = json.loads(schema)
    except ValueError:  # pragma: no cover - the core re-serialised it from a parsed value
        return "?"
    properties = value.get("properties") if isinstance(value, dict) else None
    if not isinstance(properties, dict) or not properties:
        return "-"
    required = value.get("required")
    required = set(required) if isinstance(required, list) else set()
    parts = []
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if isinstance(kind, list):
            kind = "|".join(str(k) for k in kind)
        mark = "" if name in required else "?"
        label = f"{_line(name)}{mark}"
        parts.append(f"{label}: {_line(kind)}" if isinstance(kind, str) else label)
    return ", ".join(parts)


def _call_text(tool: str, called: _Called) -> str:
    result = called.result
    verdict = "the tool reported an error" if result.is_error else "ok"
    lines = [f"protocol {called.protocol_version} · {_line(tool)} → {verdict}"]
    if not result.content:
        lines.append("(no content)")
    for block in result.content:
        lines.append(_block_text(block))
    if result.structured_content is not None:
        structured = result.structured_content.decode("utf-8", "replace")
        lines.append(f"structured content: {_line(structured)}")
    return "\n".join(lines)


def _block_text(block: Content) -> str:
    head = [block.type]
    if block.name is not None:
        head.append(_line(block.name))
    if block.uri is not None:
        head.append(_line(block.uri))
    if block.mime_type is not None:
        head.append(_line(block.mime_type))
    if block.data is not None:
        head.append(f"{len(block.data):,} bytes")
    label = "[" + " ".join(head) + "]"
    if block.text is None:
        return label
    return f"{label} {_printable(block.text, multiline=True)}"


# --------------------------------------------------------------------------- text hygiene

# Invisible characters that reorder or hide text (Trojan Source), escaped like controls.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _printable(text: str, *, multiline: bool = False) -> str:
    """``text`` with control, bidi, separator and surrogate characters escaped."""
    out = []
    for char in text:
        if multiline and char in "\n\t":
            out.append(char)
        elif char in _BIDI or unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp"):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def _line(text: str) -> str:
    return _printable(text)


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0]


def _clip(text: str, width: int) -> str:
    text = _line(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _emit(stream: TextIO, text: str) -> None:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    # A terminal that cannot show a character gets an escape, not a UnicodeEncodeError.
    text = text.encode(encoding, "backslashreplace").decode(encoding, "replace")
    stream.write(text + "\n")
    stream.flush()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
