"""Pure decisions of the MCP machine, each a function of its inputs (tested by table).

The parts that hold state (``transport``, ``operations``, ``machine``) ask these what
to do: how a response head is classified, whether a refused request is sent again,
whether a broken stream may be tried once more, how a listing's cursor advances and
its cache hints combine, the next step of a multi round-trip call, the backoff delay.
The error builders here are the machine's messages, in one place.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..auth import parse_www_authenticate
from ..cache import ttl_of
from ..errors import CallerError, ConnectionFailed, ServerAnswered, Unauthorized
from ..http import Headers, header_value
from ..jsonvalue import JsonError, dumps_compact, parse_json_object_strict
from ..messages import content_type
from ..tools import utf8_len
from .taskwire import requires_tasks

__all__ = [
    "AskInput",
    "Backoff",
    "CallStep",
    "Complete",
    "Head",
    "advance_cursor",
    "backoff_delay",
    "checked_call",
    "classify_head",
    "count_break",
    "initialize_result",
    "listen_accepted",
    "merge_cache",
    "next_call_step",
    "op_timeout",
    "redirect_error",
    "resend_refused",
    "result_kind",
    "result_of",
    "server_error",
    "timeout",
    "unauthorized_error",
    "unusable_head_error",
]


class Head(enum.Enum):
    """What the head of a response the operation waits for says about its body."""

    REDIRECT = "redirect"  # 3xx: never followed
    UNAUTHORIZED = "unauthorized"  # 401, 403
    UNUSABLE = "unusable"  # 2xx that is neither JSON nor an event stream
    JSON = "json"
    SSE = "sse"
    OTHER = "other"  # no body we read (a notification's answer, an error page)


# Members as module constants (a ``Head.X`` lookup runs the enum type's hook on 3.11)
_H_REDIRECT: Final = Head.REDIRECT
_H_UNAUTHORIZED: Final = Head.UNAUTHORIZED
_H_UNUSABLE: Final = Head.UNUSABLE
_H_JSON: Final = Head.JSON
_H_SSE: Final = Head.SSE
_H_OTHER: Final = Head.OTHER


def classify_head(status: int, headers: Headers, *, expects_reply: bool) -> Head:
    """Classify the head of an operation's response; ``expects_reply`` when a JSON-RPC
    request (not a notification or a DELETE) was sent."""
    if 300 <= status < 400:
        return _H_REDIRECT
    if status == 401 or status == 403:
        return _H_UNAUTHORIZED
    if not expects_reply:
        return _H_OTHER
    media = content_type(header_value(headers, b"content-type"))
    ok = 200 <= status < 300
    if media == "text/event-stream" and ok:
        return _H_SSE
    if media == "application/json" or media.endswith("+json"):
        return _H_JSON
    return _H_UNUSABLE if ok else _H_OTHER


def listen_accepted(status: int, headers: Headers) -> bool:
    """The server opened the standalone GET stream (else it refused: 405, 409, ...)."""
    media = content_type(header_value(headers, b"content-type"))
    return status == 200 and media == "text/event-stream"


def redirect_error(status: int, headers: Headers) -> ConnectionFailed:
    location = header_value(headers, b"location")
    where = location.decode("latin-1")[:512] if location is not None else None
    return ConnectionFailed(
        f"the server answered HTTP {status} redirecting to {where!r}; redirects are never followed",
        cause="redirect",
        status=status,
        location=where,
    )


def unauthorized_error(status: int, headers: Headers) -> Unauthorized:
    raw = header_value(headers, b"www-authenticate")
    text = raw.decode("latin-1") if raw is not None else None
    return Unauthorized(
        f"the server answered HTTP {status}"
        + (f" (WWW-Authenticate: {text[:200]})" if text else ""),
        status=status,
        www_authenticate=text,
        challenges=parse_www_authenticate(text) if text else [],
    )


def unusable_head_error(status: int, headers: Headers) -> ConnectionFailed:
    media = content_type(header_value(headers, b"content-type"))
    return ConnectionFailed(
        f"the server answered HTTP {status} with content type {media or 'none'!r}, "
        "not JSON or an event stream",
        cause="not_jsonrpc",
        status=status,
    )


def resend_refused(cause: str, had_head: bool, refusals: int, limit: int) -> bool:
    """A request the server never processed (GOAWAY, REFUSED_STREAM) is sent again,
    at most ``limit`` times."""
    return cause == "refused" and not had_head and refusals < limit


def count_break(retries: int, progressed: bool, limit: int) -> int:
    """Consecutive breaks of one request's stream after one more (reset by progress);
    ``ConnectionFailed`` past ``limit`` (``Limits.max_stream_retries``)."""
    retries = 0 if progressed else retries + 1
    if retries > limit:
        raise ConnectionFailed(
            f"the server broke the response stream {retries} times in a row "
            "(Limits.max_stream_retries)",
            cause="stream_broken",
            bound="max_stream_retries",
            limit=limit,
            observed=retries,
        )
    return retries


def timeout(bound: str, limit: float) -> ConnectionFailed:
    return ConnectionFailed(
        f"the server did not finish within {limit:g} s (Limits.{bound})",
        cause="timeout",
        bound=bound,
        limit=limit,
    )


def server_error(message: Mapping[str, Any]) -> ServerAnswered:
    error = message["error"]
    code = error["code"]
    text = error["message"]
    hint = (
        " (the server runs it only as a task: Config(tasks=True))" if requires_tasks(error) else ""
    )
    return ServerAnswered(
        f"server answered with JSON-RPC error {code}: {text[:200]}{hint}",
        reason="jsonrpc_error",
        code=code,
        rpc_message=text,
        data=error.get("data"),
    )


def result_of(status: int, message: Mapping[str, Any] | None) -> dict[str, Any]:
    """The result object of a reply (HTTP ``status``, JSON-RPC ``message``); a reply
    without a response, an error response or a result that is not an object fails."""
    if message is None:
        raise ConnectionFailed(
            f"the server answered HTTP {status} without a JSON-RPC response",
            cause="http_status",
            status=status,
        )
    if "error" in message:
        raise server_error(message)
    result = message["result"]
    if not isinstance(result, dict):
        raise ServerAnswered("the server's result is not an object", reason="malformed_result")
    return result


def result_kind(result: Mapping[str, Any], *, allow_input: bool) -> str:
    """``"complete"`` or (when ``allow_input``) ``"input_required"``; else ``ServerAnswered``."""
    kind = result.get("resultType", "complete")
    if kind == "complete" or (allow_input and kind == "input_required"):
        return str(kind)
    if kind == "task":  # only a tools/call that declared tasks may get one (taskwire)
        raise ServerAnswered(
            "the server answered with a task handle where none may come",
            reason="unexpected_task",
        )
    raise ServerAnswered(
        f"the server sent a result of unknown type {kind!r}", reason="unknown_result_type"
    )


def initialize_result(message: Mapping[str, Any] | None, legacy: Sequence[str]) -> bool:
    """``message`` is a legacy initialize result at one of ``legacy``'s versions."""
    result = message.get("result") if message is not None else None
    return isinstance(result, Mapping) and result.get("protocolVersion") in legacy


def advance_cursor(cursor: object, seen: set[str], page: int, max_echo_bytes: int) -> str | None:
    """The next page's cursor (None: the listing is complete); it is added to ``seen``.

    ``ServerAnswered`` for a cursor that is not a string, too long to send back, or one
    that came before (a loop).
    """
    if cursor is None:
        return None
    if not isinstance(cursor, str):
        raise ServerAnswered("the server sent a non-string nextCursor", reason="malformed_result")
    if utf8_len(cursor) > max_echo_bytes:
        raise ServerAnswered(
            f"the server sent a cursor longer than {max_echo_bytes:,} bytes "
            "(Limits.max_echo_bytes)",
            reason="oversized_cursor",
            bound="max_echo_bytes",
            limit=max_echo_bytes,
        )
    if cursor in seen:
        raise ServerAnswered(
            f"the server's listing loops: cursor {cursor[:80]!r} came back on page {page}",
            reason="cursor_cycle",
        )
    seen.add(cursor)
    return cursor


def merge_cache(
    ttl: int | None, scope: str | None, result: Mapping[str, Any]
) -> tuple[int, str | None]:
    """The listing's cache hints after one more page: the smallest ``ttlMs`` as the cache
    reads it (:func:`~..cache.ttl_of`: a missing or unusable one counts as 0, a huge one
    is capped), the last ``cacheScope`` unless one said ``private``."""
    page_ttl = ttl_of(result)
    page_scope = result.get("cacheScope")
    if isinstance(page_scope, str) and scope != "private":
        scope = page_scope
    return (page_ttl if ttl is None else min(ttl, page_ttl)), scope


@dataclass(frozen=True, slots=True)
class Complete:
    """The call is done: its result is in hand."""


@dataclass(frozen=True, slots=True)
class AskInput:
    """Ask the embedder ``requests``, then call again with the answers (and ``state``)."""

    requests: dict[str, Any]
    state: str | None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Call again after a delay, sending ``state`` back (if any)."""

    state: str | None


CallStep = Complete | AskInput | Backoff


def next_call_step(result: Mapping[str, Any], *, can_answer: bool, max_echo_bytes: int) -> CallStep:
    """What a ``tools/call`` result asks for next; ``ServerAnswered`` when it is malformed
    or asks for input no handler can give."""
    if result_kind(result, allow_input=True) == "complete":
        return Complete()
    requests = result.get("inputRequests")
    state = result.get("requestState")
    if requests is None and state is None:
        raise ServerAnswered(
            "the server asked for input without inputRequests or requestState",
            reason="malformed_result",
        )
    if state is not None and (not isinstance(state, str) or utf8_len(state) > max_echo_bytes):
        raise ServerAnswered(
            "the server sent a requestState that is not a string of at most "
            f"{max_echo_bytes:,} bytes (Limits.max_echo_bytes)",
            reason="bad_request_state",
            bound="max_echo_bytes",
            limit=max_echo_bytes,
        )
    if not requests:
        return Backoff(state)
    if not isinstance(requests, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("method"), str) for v in requests.values()
    ):
        raise ServerAnswered("the server sent malformed inputRequests", reason="malformed_result")
    if not can_answer:
        raise ServerAnswered(
            "the server needs input ("
            + ", ".join(sorted({str(v["method"]) for v in requests.values()}))
            + ") and no input handler is configured",
            reason="input_required",
            data=requests,
        )
    return AskInput(requests, state)


def backoff_delay(shed: int, jitter: float) -> float:
    """Seconds before calling again after the ``shed``-th (from 0) bare ``requestState``:
    50 ms doubling to 500 ms, times 0.5 to 1.5 by ``jitter`` in [0, 1)."""
    return min(0.05 * 2.0**shed, 0.5) * (0.5 + jitter)


def checked_answers(answers: object) -> Mapping[str, Any] | None:
    """What the embedder's input handler returned, checked before it is used: None (a
    decline) or a mapping of string keys whose values can be sent as JSON; anything else
    is the caller's mistake (``CallerError``), never an escape from deep in a request."""
    if answers is None:
        return None
    if not isinstance(answers, Mapping):
        raise CallerError(
            "the input handler must return a mapping of the asked keys to their results, "
            f"or None to decline; it returned {type(answers).__name__}"
        )
    try:
        dumps_compact(dict(answers))
    except JsonError as exc:
        raise CallerError(f"the input handler's answer cannot be sent: {exc}") from None
    if not all(isinstance(key, str) for key in answers):
        raise CallerError("the input handler's answer must have string keys")
    return answers


def checked_call(name: object, arguments: object, max_depth: int) -> tuple[bytes, dict[str, Any]]:
    """A tool call's name and arguments, checked before the call starts: the arguments
    as bytes (empty: ``{}``) and as the JSON object they hold; a name that is not a
    non-empty string or arguments that are not bytes holding one strict JSON object
    are the caller's mistake (``CallerError``)."""
    if not isinstance(name, str) or not name:
        raise CallerError("tool name must be a non-empty string")
    if not isinstance(arguments, bytes | bytearray | memoryview):
        # checked here, before the operation starts: a str got as far as building the
        # request and raised TypeError there, leaving the Conn busy for good
        raise CallerError(
            f"tool arguments must be bytes (one JSON object), not {type(arguments).__name__}"
        )
    raw = bytes(arguments)
    if not raw.strip():
        raw = b"{}"
    try:
        parsed = parse_json_object_strict(raw, max_depth=max_depth)
    except JsonError as exc:
        raise CallerError(f"tool arguments must be one JSON object: {exc}") from None
    return raw, parsed


def op_timeout(timeout: float | None, ceiling: float) -> float:
    """An operation's own deadline: ``timeout`` seconds, never past the ``Limits`` ceiling."""
    if timeout is None:
        return ceiling
    if type(timeout) not in (int, float) or not 0 < timeout < float("inf"):
        raise CallerError(f"timeout must be a number of seconds > 0, not {timeout!r}")
    return float(min(timeout, ceiling))  # (an int past float range compares, then clamps)


def declares_task_calls(result: Mapping[str, Any]) -> bool:
    """A 2025-11-25 initialize ``result`` declares that ``tools/call`` may be run as a
    task (``capabilities.tasks.requests.tools.call``, an object)."""
    node: Any = result.get("capabilities")
    for key in ("tasks", "requests", "tools", "call"):
        if not isinstance(node, dict):
            return False
        node = node.get(key)
    return isinstance(node, dict)


def declares(result: Mapping[str, Any], capability: str) -> bool:
    """An initialize ``result`` declares the server ``capability`` (an object)."""
    capabilities = result.get("capabilities")
    return isinstance(capabilities, dict) and isinstance(capabilities.get(capability), dict)
