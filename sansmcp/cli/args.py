"""The command line's arguments: the parser, the deadline options, the argument JSON.

Owns what a command line *means* before anything is dialled: the subcommands and
their options (the ``--backend`` choices are the keys of
:data:`sansmcp.cli.backends.BACKENDS`), the ``--timeout`` / ``--KIND-timeout`` options
as a ``Limits``, and the tool's argument bytes, checked to be one JSON object so a bad
one costs no connection.  A usage error is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn, TextIO, cast

from ..core import __version__
from ..core.errors import CallerError
from ..core.jsonvalue import JsonError, parse_json_object_strict
from ..core.limits import Limits
from ..core.mcp.notifications import LOG_LEVELS
from ..core.messages import SUPPORTED_VERSIONS
from ..core.net.egress import GUARD_MODES
from .backends import BACKENDS, DEFAULT_BACKEND
from .render import EXIT_USAGE
from .text import _emit, _line

TOKEN_ENV = "SANSMCP_TOKEN"


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
    common.add_argument(
        "--proxy",
        metavar="URL",
        help="send every request through this HTTP proxy's CONNECT tunnels "
        "(http[s]://[user:password@]host[:port])",
    )
    common.add_argument(
        "--proxy-guard",
        choices=GUARD_MODES,
        help="who vets the destination: local (default: resolve and vet here, tunnel to "
        "the vetted address) or proxy (the proxy resolves)",
    )
    common.add_argument("--backend", choices=tuple(BACKENDS), default=DEFAULT_BACKEND)
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
    call.add_argument(
        "--tasks",
        action="store_true",
        help="let the server run the call as a task (polled to its end; its status is "
        "shown like progress, its id is in --json)",
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


def _egress(args: argparse.Namespace) -> dict[str, Any]:
    """The Client's ``proxy`` and ``guard`` options (the URL is checked by the Client)."""
    if args.proxy is None:
        if args.proxy_guard is not None:
            raise CallerError("--proxy-guard needs --proxy")
        return {}
    return {"proxy": args.proxy, "guard": args.proxy_guard or "local"}


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
