"""The ``sansmcp`` command line: list a server's tools, or call one.

::

    sansmcp tools URL [--token T] [--json] [--allow-loopback] [--allow-private]
                      [--backend sync|asyncio|trio] [--protocol-version V ...]
                      [--log-level LEVEL] [--header NAME:VALUE ...]
                      [--timeout S] [--{dial,connect,list,call,auth}-timeout S]
    sansmcp call  URL TOOL [ARGUMENTS_JSON | -] [same options] [--progress | --no-progress]

The token may also come from ``SANSMCP_TOKEN``.  The tokens ``sansmcp login URL``
stored are used (and refreshed) whenever a login for URL is stored and no token is
given; ``--oauth`` asks for OAuth even without one (``sansmcp logout URL`` forgets
them; see :mod:`sansmcp.cli_oauth`).  ``--timeout S`` sets every deadline kind to S
seconds, ``--KIND-timeout S`` one of them.  Output is for people by default
(a table of tools; a call's content blocks; the negotiated protocol version) and
for machines with ``--json`` (one JSON document on one line).  ``--log-level LEVEL``
asks the server for log messages at or above LEVEL and prints each on stderr.  While
a call runs, a terminal stderr shows one progress line (a gauge when the server gives
a total, a counter otherwise, and its message), cleared when the call ends;
``--progress`` / ``--no-progress`` force it on or off.

Exit status: 0 success; 1 the tool ran and reported ``isError``; 2 usage error
(bad options, a bad URL, arguments that are not one JSON object); 3
``ConnectionFailed``; 4 ``Unauthorized``; 5 ``ServerAnswered``; 130 interrupted;
141 the reader of stdout went away.
A failure prints one line on stderr naming the class, its cause and, for a bound,
the limit and the observed figure -- never a traceback; with ``--json`` it is also one
JSON document on stdout (:func:`error_record`).

Everything a server sends is untrusted.  Shown to a person, a tool or parameter
name is printable ASCII with everything else escaped (``\\uXXXX``), one-to-one, and
other text has the characters that hide, reorder or forge text escaped (controls,
format characters such as zero-width, bidi and tag characters, unassigned and
private-use code points, default-ignorable ones such as U+034F, a combining mark with
no base; see "text hygiene" below); a server's log line or a failure is one line of
at most ``MAX_LINE_CHARS`` characters.  ``--json`` carries every field
the library returns (derived from its dataclasses; see "output" below) and is pure
ASCII.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import sys
import unicodedata
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, TextIO, TypeVar, cast

from .core import __version__
from .core.config import Config
from .core.errors import CallerError, ConnectionFailed, McpError, ServerAnswered, Unauthorized
from .core.jsonvalue import JsonError, parse_json_object_strict
from .core.limits import Limits
from .core.mcp.notifications import LOG_LEVELS, LogMessage, Notification
from .core.messages import SUPPORTED_VERSIONS
from .core.oauth.store import OAuth
from .core.results import CallResult, Content
from .core.tools import SkippedTool, Tool

__all__ = [
    "EXIT_CONNECTION_FAILED",
    "EXIT_OK",
    "EXIT_SERVER_ANSWERED",
    "EXIT_TOOL_ERROR",
    "EXIT_UNAUTHORIZED",
    "EXIT_USAGE",
    "display_text",
    "error_json",
    "error_record",
    "main",
    "name_text",
    "render_call",
    "render_listing",
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
    # sync: the fastest cold start (bench/cold_start.py: median wall and CPU of 20 runs)
    common.add_argument("--backend", choices=("asyncio", "trio", "sync"), default="sync")
    common.add_argument(
        "--protocol-version",
        dest="protocol_versions",
        action="append",
        choices=SUPPORTED_VERSIONS,
        metavar="V",
        help="speak only this revision (repeatable, in order of preference; "
        f"one of {', '.join(SUPPORTED_VERSIONS)})",
    )
    common.add_argument(
        "--header",
        dest="headers",
        action="append",
        type=_header,
        default=[],
        metavar="NAME:VALUE",
        help="add a request header (repeatable); its value is sent, never printed",
    )
    common.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="the dial, connect, list, call and authorization deadlines, each SECONDS",
    )
    for kind, what in _TIMEOUTS.items():
        common.add_argument(
            f"--{kind}-timeout",
            dest=f"{kind}_timeout",
            type=_seconds,
            metavar="SECONDS",
            help=f"the {what} deadline (Limits.{kind}_timeout); overrides --timeout",
        )
    common.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        metavar="LEVEL",
        help=f"print the server's log messages at or above LEVEL on stderr ({', '.join(LOG_LEVELS)})",
    )

    parser = _Parser(
        prog="sansmcp",
        description="List the tools of an MCP server, or call one.",
        epilog="exit status: 0 ok, 1 tool error, 2 usage, 3 ConnectionFailed, "
        "4 Unauthorized, 5 ServerAnswered",
    )
    parser.add_argument("--version", action="version", version=f"sansmcp {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common.add_argument(
        "--oauth",
        action="store_true",
        help="use (and refresh) the tokens `sansmcp login URL` stored",
    )
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
    call.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the call's progress on stderr (default: when stderr is a terminal)",
    )
    login = commands.add_parser(
        "login", parents=[common], help="authorize with OAuth (a loopback redirect listener)"
    )
    login.add_argument("--open", action="store_true", help="open the URL in a browser")
    login.add_argument("--client-id", help="a pre-registered client id (default: register)")
    commands.add_parser("logout", parents=[common], help="forget the stored tokens for URL")
    return parser


# The per-kind deadlines the command line sets: --KIND-timeout -> Limits.KIND_timeout.
_TIMEOUTS = {
    "dial": "TCP connect + TLS handshake",
    "connect": "negotiation",
    "list": "whole listing",
    "call": "whole tool call",
    "auth": "OAuth authorization",
}


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"seconds must be a finite number > 0: {text!r}")
    return value


def _header(text: str) -> tuple[str, str]:
    name, colon, value = text.partition(":")
    if not colon or not name.strip():
        raise argparse.ArgumentTypeError("a header is NAME:VALUE")
    return name.strip(), value.strip()


def _limits(args: argparse.Namespace) -> Limits | None:
    """``Limits`` with the deadlines the options set; None when they set none."""
    chosen: dict[str, float] = {}
    for kind in _TIMEOUTS:
        value = getattr(args, f"{kind}_timeout")
        if value is None:
            value = args.timeout
        if value is not None:
            chosen[f"{kind}_timeout"] = value
    return Limits(**cast("dict[str, Any]", chosen)) if chosen else None


# --------------------------------------------------------------------------- running


class _Conn(Protocol):
    @property
    def protocol_version(self) -> str | None: ...

    @property
    def skipped_tools(self) -> list[SkippedTool]: ...

    @property
    def skipped_count(self) -> int: ...

    async def list_tools(self) -> list[Tool]: ...

    async def call_tool(
        self,
        name: str,
        arguments: bytes = ...,
        *,
        on_progress: Callable[[float, float | None, str | None], object] | None = ...,
    ) -> CallResult: ...


@dataclass(frozen=True, slots=True)
class _Listing:
    protocol_version: str | None
    tools: list[Tool]
    skipped: list[SkippedTool]
    skipped_count: int  # every skipped entry; ``skipped`` holds the recorded ones


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
    if backend == "sync":
        from .io_adapters.sync import Client as SyncClient

        with SyncClient(**client_options) as client, client.connect(config) as conn:
            return _at_once(job(_Blocking(conn)))
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


class _Blocking:
    """A blocking ``Conn`` as a ``_Conn`` whose awaitables never suspend."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @property
    def protocol_version(self) -> str | None:
        return self.conn.protocol_version  # type: ignore[no-any-return]

    @property
    def skipped_tools(self) -> list[SkippedTool]:
        return list(self.conn.skipped_tools)

    @property
    def skipped_count(self) -> int:
        return int(self.conn.skipped_count)

    async def list_tools(self) -> list[Tool]:
        return list(self.conn.list_tools())

    async def call_tool(
        self,
        name: str,
        arguments: bytes = b"",
        *,
        on_progress: Callable[[float, float | None, str | None], object] | None = None,
    ) -> CallResult:
        result: CallResult = self.conn.call_tool(name, arguments, on_progress=on_progress)
        return result


def _at_once(awaitable: Awaitable[T]) -> T:
    """Run a coroutine that never suspends (a job on a :class:`_Blocking` conn)."""
    coroutine = cast("Coroutine[Any, Any, T]", awaitable)
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return cast("T", stop.value)
    coroutine.close()  # pragma: no cover - the jobs await nothing else
    raise AssertionError("a job on the sync backend suspended")  # pragma: no cover


async def _list(conn: _Conn) -> _Listing:
    tools = await conn.list_tools()
    # skipped_count counts the skips past Limits.max_recorded_skips too
    return _Listing(conn.protocol_version, tools, list(conn.skipped_tools), conn.skipped_count)


def _caller(
    name: str, arguments: bytes, line: ProgressLine | None
) -> Callable[[_Conn], Awaitable[_Called]]:
    async def call(conn: _Conn) -> _Called:
        try:
            result = await conn.call_tool(
                name, arguments, on_progress=None if line is None else line.show
            )
        finally:
            if line is not None:
                line.clear()
        return _Called(conn.protocol_version, result)

    return call


class ProgressLine:
    """One line of progress on a terminal ``stream``, redrawn in place and cleared at
    the end: ``[#####-----]  50% message`` with a total, ``progress 3  message`` without.
    The message is the server's: shown escaped and clipped to the terminal's width."""

    GAUGE = 20

    def __init__(self, stream: TextIO, width: int | None = None) -> None:
        self.stream = stream
        self.width = width or shutil.get_terminal_size((80, 24)).columns
        self.shown = ""

    def show(self, progress: float, total: float | None, message: str | None) -> None:
        if total is not None and total > 0:
            ratio = min(max(progress / total, 0.0), 1.0)
            filled = int(ratio * self.GAUGE)
            head = f"[{'#' * filled}{'-' * (self.GAUGE - filled)}] {ratio:4.0%}"
        else:
            head = f"progress {_figure(progress)}"
        text = head if not message else f"{head}  {message}"
        self.shown = _clip(text, max(self.width - 1, 10))
        self._write("\r\x1b[K" + self.shown)

    def clear(self) -> None:
        if self.shown:
            self.shown = ""
            self._write("\r\x1b[K")

    def above(self, text: str) -> None:
        """Print ``text`` as its own line, the progress line redrawn below it."""
        shown = self.shown
        self.clear()
        _emit(self.stream, text)
        if shown:
            self.shown = shown
            self._write(shown)

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def log_text(note: LogMessage | Notification) -> str | None:
    """A server log message as one line for stderr (None for other notifications)."""
    if not isinstance(note, LogMessage):
        return None
    data = note.data
    shown = data if isinstance(data, str) else _dumps(data)
    logger = "" if note.logger is None else f" {note.logger}:"
    return _clip(f"sansmcp: server log [{note.level}]{logger} {shown}", MAX_LINE_CHARS)


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
    client_options: dict[str, Any] = {
        "allow_loopback": args.allow_loopback,
        "allow_private": args.allow_private,
    }
    line: ProgressLine | None = None
    if args.command == "call":
        shown = args.progress if args.progress is not None else _is_terminal(err)
        line = ProgressLine(err) if shown else None

    def on_notification(note: LogMessage | Notification) -> None:
        text = log_text(note)
        if text is not None:
            if line is not None:
                line.above(text)
            else:
                _emit(err, text)

    try:
        limits = _limits(args)
        if limits is not None:
            client_options["limits"] = limits
        if args.command in ("login", "logout"):
            return _login(args, client_options) if args.command == "login" else _logout(args)
        oauth = _stored_login(args.url, wanted=args.oauth and token is None)
        config = Config(
            url=args.url,
            bearer_token=token,
            headers=dict(args.headers) or None,
            protocol_versions=args.protocol_versions,
            on_notification=on_notification if args.log_level else None,
            log_level=args.log_level,
            oauth=oauth,
        )
        if args.command == "tools":
            listing = _run(args.backend, client_options, config, _list)
            _emit(out, _listing_json(listing) if args.json else _listing_text(listing))
            return EXIT_OK
        arguments = _arguments(args.arguments, sys.stdin)
        called = _run(args.backend, client_options, config, _caller(args.tool, arguments, line))
        _emit(out, _call_json(called) if args.json else _call_text(args.tool, called))
        if called.result.is_error:
            name = name_text(args.tool)
            _emit(err, f"sansmcp: the tool '{name}' reported an error (isError)")
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
        if getattr(args, "json", False):
            _emit(out, error_json(exc))
        _emit(err, describe_error(exc, url=args.url))
        return exit_status(exc)


def _stored_login(url: str, *, wanted: bool) -> OAuth | None:
    """OAuth on the tokens ``sansmcp login`` stored: with ``--oauth``, or without it
    when a login for ``url`` is stored and no bearer token was given."""
    from .cli_oauth import FileTokenStore, token_file
    from .core.url import parse_endpoint

    store = FileTokenStore(token_file())
    if wanted or store.tokens(parse_endpoint(url).url) is not None:
        return OAuth(store=store)
    return None


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        return False


def _login(args: argparse.Namespace, client_options: dict[str, Any]) -> int:
    """``sansmcp login URL``: authorize, list the tools once, keep the tokens."""
    from .cli_oauth import FileTokenStore, RedirectListener, announce, token_file

    listener = RedirectListener()
    try:
        store = FileTokenStore(token_file())
        backend = args.backend

        def wait(url: str) -> str | None:
            announce(url, open_browser=args.open)
            return listener.wait()

        async def authorize(url: str) -> str | None:
            announce(url, open_browser=args.open)
            if backend == "trio":
                import trio

                return await trio.to_thread.run_sync(listener.wait)
            import asyncio

            return await asyncio.to_thread(listener.wait)

        oauth = OAuth(
            client_id=args.client_id,
            client_name="sansmcp command line",
            redirect_uri=listener.redirect_uri,
            authorize=wait if backend == "sync" else authorize,
            store=store,
        )
        config = Config(url=args.url, protocol_versions=args.protocol_versions, oauth=oauth)
        listing = _run(backend, client_options, config, _list)
    finally:
        listener.close()
    _emit(sys.stderr, f"sansmcp: logged in; {len(listing.tools)} tools; tokens in {store.path}")
    return EXIT_OK


def _logout(args: argparse.Namespace) -> int:
    from .cli_oauth import FileTokenStore, token_file
    from .core.url import parse_endpoint

    store = FileTokenStore(token_file())
    found = store.forget(parse_endpoint(args.url).url)
    shown = display_text(args.url)
    _emit(
        sys.stderr,
        f"sansmcp: logged out of {shown}" if found else f"sansmcp: no stored tokens for {shown}",
    )
    return EXIT_OK


def exit_status(exc: BaseException) -> int:
    """The exit status for a failure of the public API."""
    if isinstance(exc, CallerError):
        return EXIT_USAGE
    if isinstance(exc, Unauthorized):
        return EXIT_UNAUTHORIZED
    if isinstance(exc, ServerAnswered):
        return EXIT_SERVER_ANSWERED
    return EXIT_CONNECTION_FAILED  # ConnectionFailed (and, defensively, a bare McpError)


def error_record(exc: CallerError | McpError) -> dict[str, Any]:
    """What ``--json`` prints for a failure: the class and every field it carries."""
    record: dict[str, Any] = {"class": type(exc).__name__}
    for field in ("cause", "reason", "code", "status", "bound", "limit", "observed"):
        value = getattr(exc, field, None)
        if value is not None:
            record[field] = value
    if isinstance(exc, Unauthorized) and exc.www_authenticate:
        record["www_authenticate"] = exc.www_authenticate
    if isinstance(exc, ConnectionFailed) and exc.location is not None:
        record["location"] = exc.location
    record["message"] = exc.message if isinstance(exc, McpError) else str(exc)
    return record


def error_json(exc: CallerError | McpError) -> str:
    """One JSON document on one line: ``{"error": {...}}`` (see :func:`error_record`)."""
    return _dumps({"error": error_record(exc)})


def describe_error(exc: CallerError | McpError, *, url: str | None = None) -> str:
    """One line: ``sansmcp: Class [field=value ...]: message``; a 401/403 names the next
    step (``sansmcp login URL``, then ``--oauth``)."""
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
        if exc.cause is not None:
            fields.append(f"cause={exc.cause}")
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
    hint = ""
    if isinstance(exc, Unauthorized) and (
        exc.cause == "authorization_required" or (exc.cause is None and exc.status == 401)
    ):
        target = "URL" if url is None else _clip(url, _CHALLENGE_WIDTH)
        hint = f" (next: run `sansmcp login {target}`; later commands use the stored login)"
    return _clip(f"sansmcp: {label}: {message}", MAX_LINE_CHARS - len(hint)) + hint


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
#
# ``--json`` is derived from the dataclass fields of what the library returns
# (``Tool``, ``SkippedTool``, ``CallResult``, ``Content`` and whatever they nest), so a
# field added there reaches the JSON with no change here: keys are the field names,
# a ``None`` field (absent) is left out, ``bytes`` holding compact JSON (the names in ``_JSON_BYTES``) are embedded parsed,
# any other ``bytes`` are standard base64, mappings become objects and tuples arrays.
# The human output shows every field a person needs (``tests/test_cli.py`` lists the
# ones it leaves to ``--json``, and fails on a field that is in neither list).

# Fields whose bytes are compact JSON re-serialised by the core: embedded as JSON values.
_JSON_BYTES = frozenset({"input_schema", "output_schema", "structured_content"})


def render_listing(
    protocol_version: str | None,
    tools: Sequence[Tool],
    skipped: Sequence[SkippedTool],
    *,
    skipped_count: int | None = None,
    as_json: bool = False,
) -> str:
    """What ``sansmcp tools`` prints for a listing (``as_json``: the ``--json`` document).

    ``skipped_count`` is the number of skipped entries when only the first of them
    were recorded in ``skipped`` (default: ``len(skipped)``).
    """
    count = len(skipped) if skipped_count is None else max(skipped_count, len(skipped))
    listing = _Listing(protocol_version, list(tools), list(skipped), count)
    return _listing_json(listing) if as_json else _listing_text(listing)


def render_call(
    tool: str, protocol_version: str | None, result: CallResult, *, as_json: bool = False
) -> str:
    """What ``sansmcp call`` prints for a result (``as_json``: the ``--json`` document)."""
    called = _Called(protocol_version, result)
    return _call_json(called) if as_json else _call_text(tool, called)


def _listing_json(listing: _Listing) -> str:
    return _dumps(_record(listing))


def _call_json(called: _Called) -> str:
    document = _record(called)
    document.update(_record(document.pop("result")))  # the result's fields at the top level
    return _dumps(document)


def _record(value: Any) -> dict[str, Any]:
    """A dataclass instance as a JSON object, one member per field, in field order.

    A field that is ``None`` (absent) is left out, so a JSON ``null`` the server sent
    (a 2026-07-28 ``structuredContent`` may be one) stays distinct from no value.
    """
    out: dict[str, Any] = {}
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        if item is None:
            continue
        if isinstance(item, bytes) and field.name in _JSON_BYTES:
            item = json.loads(item)
        out[field.name] = item
    return out


def _json_default(value: Any) -> Any:
    """``json.dumps``'s hook for what JSON has no type for (dicts, lists, tuples pass)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")  # pragma: no cover - a bug


def _dumps(value: Any) -> str:
    # ASCII only: a lone surrogate or a terminal escape in server text stays an escape.
    return json.dumps(value, ensure_ascii=True, allow_nan=False, default=_json_default)


def _listing_text(listing: _Listing) -> str:
    count = len(listing.tools)
    lines = [
        f"protocol {listing.protocol_version} · {count} tool{'' if count == 1 else 's'}",
    ]
    if listing.tools:
        rows = [("NAME", "PARAMETERS", "DESCRIPTION")]
        rows += [
            (
                name_text(tool.name),
                _parameters(tool.input_schema),
                _clip(_first_line(tool.description), _DESCRIPTION_WIDTH),
            )
            for tool in listing.tools
        ]
        name_width = max(len(row[0]) for row in rows)
        params_width = max(len(row[1]) for row in rows)
        lines += [
            f"  {n.ljust(name_width)}  {p.ljust(params_width)}  {d}".rstrip() for n, p, d in rows
        ]
    if listing.skipped_count:
        unlisted = listing.skipped_count - len(listing.skipped)
        more = f" ({unlisted:,} more not recorded)" if unlisted else ""
        lines.append(f"skipped {listing.skipped_count:,} unusable tool definition(s){more}:")
        lines += [
            f"  #{s.index}{'' if s.name is None else ' ' + name_text(s.name)}: "
            f"{display_text(s.reason)}"
            for s in listing.skipped
        ]
    return "\n".join(lines)


def _parameters(schema: bytes) -> str:
    """``city: string, days?: integer`` from an input schema's top-level properties.

    Any JSON value may stand where a schema keyword is expected: what is not of the
    expected shape is left out (a ``required`` that is not a list of strings marks
    nothing required; a ``type`` that is neither a string nor a list is not shown).
    Names and types are identifiers (:func:`name_text`); the result is clipped.
    """
    try:
        value = json.loads(schema)
    except ValueError:  # pragma: no cover - the core re-serialised it from a parsed value
        return "?"
    properties = value.get("properties") if isinstance(value, dict) else None
    if not isinstance(properties, dict) or not properties:
        return "-"
    required = value.get("required")
    wanted = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    parts = []
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if isinstance(kind, list):
            kind = "|".join(k if isinstance(k, str) else _dumps(k) for k in kind)
        # an empty name is shown as "" (a blank column would hide a required parameter)
        label = (name_text(name) if name else '""') + ("" if name in wanted else "?")
        parts.append(f"{label}: {name_text(kind)}" if isinstance(kind, str) else label)
        if sum(len(part) + 2 for part in parts) > _PARAMS_WIDTH:
            break  # the rest would be clipped anyway: a huge schema costs no more
    text = ", ".join(parts)
    return text if len(text) <= _PARAMS_WIDTH else text[: _PARAMS_WIDTH - 1] + "…"


def _call_text(tool: str, called: _Called) -> str:
    result = called.result
    verdict = "the tool reported an error" if result.is_error else "ok"
    lines = [f"protocol {called.protocol_version} · {name_text(tool)} → {verdict}"]
    if not result.content:
        lines.append("(no content)")
    for block in result.content:
        lines.append(_block_text(block))
    if result.structured_content is not None:
        structured = result.structured_content.decode("utf-8", "replace")
        lines.append(f"structured content: {display_text(structured)}")
    if result.validated:
        lines.append("(structured content conforms to the tool's outputSchema)")
    return "\n".join(lines)


def _block_text(block: Content) -> str:
    head = [block.type]
    if block.name is not None:
        head.append(display_text(block.name))
    if block.uri is not None:
        head.append(display_text(block.uri))
    if block.mime_type is not None:
        head.append(display_text(block.mime_type))
    if block.data is not None:
        head.append(f"{len(block.data):,} bytes")
    if block.annotations is not None:
        head.append("annotations=" + _clip(_dumps(block.annotations), _ANNOTATIONS_WIDTH))
    label = "[" + " ".join(head) + "]"
    if block.text is None:
        return label
    return f"{label} {display_text(block.text, multiline=True)}"


# --------------------------------------------------------------------------- text hygiene
#
# Two escapes, both in Python's own notation (``\xNN``, ``\uXXXX``, ``\UXXXXXXXX``):
#
# * a *name* (a tool's, a parameter's, a type's) is an identifier: every character
#   outside printable ASCII is escaped, and so is the backslash (``\\``), so two
#   different names never print alike (``codecs.decode(s, "unicode_escape")`` gives
#   the name back);
# * *text* (descriptions, content, reasons, URIs) keeps every visible character and
#   escapes the ones that hide, reorder or forge text, chosen by Unicode property, not
#   by a list of examples: every code point of category Cc (controls, CR, ESC, NEL), Cf
#   (format: zero-width, word joiner, soft hyphen, BOM, bidi controls, tags), Co
#   (private use), Cs (lone surrogates), Cn (unassigned, as of the running Python's
#   Unicode database), Zl or Zp, and every Default_Ignorable_Code_Point (Unicode's
#   derived property of the code points a renderer shows as nothing; beyond those
#   categories it holds the combining grapheme joiner U+034F, the Hangul fillers, the
#   Khmer inherent vowels and the variation selectors, and it keeps the tag block and
#   U+2065, U+FFF0..FFF8 escaped under any Unicode version).  Two rules by position:
#   a combining mark (category M) with no base -- first in its field, or after an
#   escape -- is escaped, since it would otherwise combine with sansmcp's own text or
#   alter an escape; and one text/emoji presentation selector (U+FE0E, U+FE0F) right
#   after a visible base character stays as it is (the emoji ``❤️``), while any other
#   variation selector, or a second one, is escaped (a run of them can carry hidden
#   data).  A backslash in text is left alone, so text escaping is not reversible:
#   ``--json`` is the exact form.  In multi-line content (a text block), newline and
#   tab stay as they are -- the text keeps its lines and indentation; each line and
#   each tab-separated part is a field of its own -- while CR, vertical tab, form
#   feed, NEL, U+2028 and U+2029 are escaped, so no line can overwrite or hide
#   another; a one-line field (a description's first line, a reason) escapes newline
#   and tab too.

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
#: Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties.txt; ``unicodedata``
#: does not expose it), as inclusive ranges.
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_IGNORABLE = re.compile(
    "[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in _DEFAULT_IGNORABLE) + "]"
)
_PRESENTATION = frozenset("\ufe0e\ufe0f")  # text / emoji presentation selectors
# What a character is to the text hygiene: shown as itself when it has what it needs.
_BASE, _MARK, _SELECTOR, _HIDE = range(4)
_ANNOTATIONS_WIDTH = 120
#: The most characters (escapes counted as shown) of one line of server text on
#: stderr -- a server log message, a failure's message; the rest is cut at ``…``.
MAX_LINE_CHARS = 2_000


def _escape(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def name_text(name: str) -> str:
    """``name`` as printable ASCII, one-to-one: non-ASCII, controls and ``\\`` escaped."""
    if name.isascii() and name.isprintable() and "\\" not in name:
        return name
    return "".join(_name_token(char) for char in name)


def _name_token(char: str) -> str:
    if char == "\\":
        return "\\\\"
    code = ord(char)
    return char if 0x20 <= code < 0x7F else _escape(code)


@functools.lru_cache(maxsize=4096)
def _kind(char: str) -> int:
    category = unicodedata.category(char)
    if category in _HIDDEN_CATEGORIES:
        return _HIDE
    if char in _PRESENTATION:
        return _SELECTOR
    if _IGNORABLE.match(char):
        return _HIDE
    return _MARK if category[0] == "M" else _BASE


def _tokens(text: str) -> Iterator[str]:
    """Each character of the field ``text`` as it is shown: itself or its escape."""
    before = _HIDE  # the field's start: no base for a mark
    for char in text:
        kind = _kind(char)
        if (
            kind == _BASE
            or (kind == _MARK and before != _HIDE)
            or (kind == _SELECTOR and before == _BASE)
        ):
            before = kind
            yield char
        else:
            before = _HIDE
            yield _escape(ord(char))


def _text_line(text: str) -> str:
    # str.isprintable() is False for every hidden category (and for Zs spaces other
    # than U+0020, which are not hidden): plain text, with no default-ignorable and no
    # leading mark, skips the per-character walk.
    if (
        text.isprintable()
        and _IGNORABLE.search(text) is None
        and (not text or _kind(text[0]) != _MARK)
    ):
        return text
    return "".join(_tokens(text))


def display_text(text: str, *, multiline: bool = False) -> str:
    """``text`` with the characters that hide or forge text escaped (see above).

    ``multiline`` keeps newline and tab (a text content block); otherwise they are
    escaped too.
    """
    if not multiline:
        return _text_line(text)
    return "\n".join("\t".join(map(_text_line, line.split("\t"))) for line in text.split("\n"))


def _line(text: str) -> str:
    return display_text(text)


def _first_line(text: str) -> str:
    # Only a newline ends the line: a CR or U+2028 is shown escaped, not taken as an end.
    return text.strip().split("\n", 1)[0]


def _clip(text: str, width: int) -> str:
    """``text`` escaped as one line and cut to ``width`` characters, never inside an escape."""
    out: list[str] = []
    used = 0
    for token in _tokens(text[: width + 1]):
        if used + len(token) > width:
            while used + 1 > width:
                used -= len(out.pop())
            out.append("…")
            break
        out.append(token)
        used += len(token)
    return "".join(out)


def _emit(stream: TextIO, text: str) -> None:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    # A terminal that cannot show a character gets an escape, not a UnicodeEncodeError.
    text = text.encode(encoding, "backslashreplace").decode(encoding, "replace")
    stream.write(text + "\n")
    stream.flush()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
