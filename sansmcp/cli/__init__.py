"""The ``sansmcp`` command line: list a server's tools, or call one.

::

    sansmcp tools URL [--token T] [--json] [--allow-loopback] [--allow-private]
                      [--backend sync|asyncio|trio] [--protocol-version V ...]
                      [--log-level LEVEL] [--header NAME:VALUE ...]
                      [--timeout S] [--{dial,connect,list,call,auth}-timeout S]
                      [--proxy URL [--proxy-guard local|proxy]]
    sansmcp call  URL TOOL [ARGUMENTS_JSON | -] [same options] [--progress | --no-progress]
                  [--tasks]

The token may also come from ``SANSMCP_TOKEN``.  The tokens ``sansmcp login URL``
stored are used (and refreshed) whenever a login for URL is stored and no token is
given; ``--oauth`` asks for OAuth even without one (``sansmcp logout URL`` forgets
them; see :mod:`sansmcp.cli.oauth`).  ``--proxy URL`` and ``--proxy-guard local|proxy``
are ``Client(proxy=, guard=)`` (a bad proxy URL is a usage error).  ``--timeout S`` sets
every deadline kind to S seconds, ``--KIND-timeout S`` one of them.  Output is for people by default
(a table of tools; a call's content blocks; the negotiated protocol version) and
for machines with ``--json`` (one JSON document on one line).  ``--log-level LEVEL``
asks the server for log messages at or above LEVEL and prints each on stderr.  While
a call runs, a terminal stderr shows one progress line (a gauge when the server gives
a total, a counter otherwise, and its message), cleared when the call ends;
``--progress`` / ``--no-progress`` force it on or off.  ``call --tasks`` lets the
server run the call as a task: the same line shows the task's status while it waits,
and ``--json`` carries its ``task_id``.

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

The package, one module per job: :mod:`.args` (parsing), :mod:`.backends` (the table
of runtimes: a new one is one row), :mod:`.command` (:func:`main`), :mod:`.render`
(what is printed), :mod:`.text` (text hygiene), :mod:`.oauth` (``login``, ``logout``
and the token file).  This module re-exports their public names.
"""

from __future__ import annotations

# Beside __all__, the names the tests and the docs reach as sansmcp.cli.NAME.
from .args import TOKEN_ENV, _limits, _parser  # noqa: F401
from .command import main
from .render import (  # noqa: F401
    _JSON_BYTES,
    EXIT_BROKEN_PIPE,
    EXIT_CONNECTION_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SERVER_ANSWERED,
    EXIT_TOOL_ERROR,
    EXIT_UNAUTHORIZED,
    EXIT_USAGE,
    ProgressLine,
    describe_error,
    error_json,
    error_record,
    exit_status,
    log_text,
    render_call,
    render_listing,
)
from .text import MAX_LINE_CHARS, display_text, name_text  # noqa: F401

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
