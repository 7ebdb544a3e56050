"""What the command line prints: a listing, a call's result, a failure, progress.

Owns the exit statuses, the two records a job hands back (``_Listing``, ``_Called``),
their human text and their ``--json`` documents (derived from the library's
dataclasses), a failure as one line and as a JSON record, a server's log line, and the
progress line a terminal shows during a call.  Everything a server wrote goes through
:mod:`sansmcp.cli.text` before it is shown.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ..core.errors import CallerError, ConnectionFailed, McpError, ServerAnswered, Unauthorized
from ..core.mcp.notifications import LogMessage, Notification
from ..core.mcp.taskwire import requires_tasks
from ..core.results import CallResult, Content
from ..core.tools import SkippedTool, Tool
from .text import (
    _ANNOTATIONS_WIDTH,
    MAX_LINE_CHARS,
    _clip,
    _emit,
    _figure,
    _first_line,
    display_text,
    name_text,
)

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECTION_FAILED = 3
EXIT_UNAUTHORIZED = 4
EXIT_SERVER_ANSWERED = 5
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it

_DESCRIPTION_WIDTH = 72
_PARAMS_WIDTH = 44
_CHALLENGE_WIDTH = 200


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
    task_id: str | None = None  # the call ran as this task (``--tasks``)


class ProgressLine:
    """One line of progress on a terminal ``stream``, redrawn in place and cleared at
    the end: ``[#####-----]  50% message`` with a total, ``progress 3  message`` without,
    ``task ID STATUS  message`` for the task a call runs as.
    The server's words are shown escaped and clipped to the terminal's width."""

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
        self._draw(head, message)

    def task(self, task_id: str, status: str, message: str | None) -> None:
        """The call's task (``on_task``): its id, its status and the server's message."""
        self._draw(f"task {name_text(task_id)} {name_text(status)}", message)

    def _draw(self, head: str, message: str | None) -> None:
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
    step (``sansmcp login URL``, then ``--oauth``), a tool served only as a task
    ``--tasks``."""
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
    elif isinstance(exc, ServerAnswered) and requires_tasks({"code": exc.code, "data": exc.data}):
        hint = " (next: call it again with --tasks)"
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
    tool: str,
    protocol_version: str | None,
    result: CallResult,
    *,
    as_json: bool = False,
    task_id: str | None = None,
) -> str:
    """What ``sansmcp call`` prints for a result (``as_json``: the ``--json`` document);
    ``task_id``: the call ran as that task (``--tasks``)."""
    called = _Called(protocol_version, result, task_id)
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
    if called.task_id is not None:
        lines[0] += f" · task {name_text(called.task_id)}"
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
