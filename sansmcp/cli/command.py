"""The command line's one entry point: :func:`main` runs a parsed command.

Owns the flow of a run -- the token, the progress line and the server's log lines,
the stored login, which job runs on which backend, what is printed and the exit
status -- and the mapping of every failure to one line and a status, never a
traceback.  Parsing is :mod:`.args`, runtimes :mod:`.backends`, output :mod:`.render`,
OAuth :mod:`.oauth` (imported when a command runs).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from ..core.config import Config
from ..core.errors import CallerError, McpError
from ..core.mcp.notifications import LogMessage, Notification
from .args import TOKEN_ENV, _arguments, _egress, _limits, _parser
from .backends import _caller, _list, _run
from .render import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TOOL_ERROR,
    EXIT_USAGE,
    ProgressLine,
    _call_json,
    _call_text,
    _listing_json,
    _listing_text,
    describe_error,
    error_json,
    exit_status,
    log_text,
)
from .text import _emit, name_text


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
        client_options.update(_egress(args))
        from .oauth import login, logout, stored_login

        if args.command in ("login", "logout"):
            return login(args, client_options) if args.command == "login" else logout(args)
        oauth = stored_login(args.url, wanted=args.oauth and token is None)
        config = Config(
            url=args.url,
            bearer_token=token,
            headers=dict(args.headers) or None,
            protocol_versions=args.protocol_versions,
            on_notification=on_notification if args.log_level else None,
            log_level=args.log_level,
            oauth=oauth,
            tasks=getattr(args, "tasks", False),  # (call only)
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


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        return False
