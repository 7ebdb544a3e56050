"""JSON-RPC and Streamable HTTP message rules, as pure functions.

Theory of operation
-------------------
The MCP machine (``core/mcp/``) sequences requests; this module decides what each
request looks like and what each answer means, so every rule is table-testable on
its own:

* :func:`negotiate_version` -- the first of our versions (in preference order)
  that the server lists;
* :func:`build_body` -- a JSON-RPC request body with an optional verbatim
  ``arguments`` splice (never re-encoded through a dict);
* :func:`classify_probe` -- the spec brief's §a.2 decision table for the reply
  to a modern request (``server/discover``, or a hinted request);
* :func:`match_response` -- find the response for our id in a parsed message
  (a batch is accepted only where the revision allows it);
* :func:`parse_message` -- parse one message within ``Limits``' JSON bounds (an
  overrun is a spent budget).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import ConnectionFailed, budget_exceeded
from .jsonvalue import JsonError, dumps_compact, parse_json

if TYPE_CHECKING:
    from .limits import Limits

__all__ = [
    "LEGACY_VERSIONS",
    "MODERN_VERSION",
    "SUPPORTED_VERSIONS",
    "Verdict",
    "build_body",
    "classify_probe",
    "content_type",
    "is_modern",
    "match_response",
    "negotiate_version",
    "parse_message",
]

MODERN_VERSION = "2026-07-28"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
SUPPORTED_VERSIONS = (MODERN_VERSION, *LEGACY_VERSIONS)
BATCH_VERSION = "2025-03-26"

HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
MODERN_ERROR_CODES = frozenset({HEADER_MISMATCH, MISSING_CAPABILITY, UNSUPPORTED_VERSION})


def is_modern(version: str) -> bool:
    return version >= MODERN_VERSION


def negotiate_version(ours: Sequence[str], theirs: object) -> str | None:
    """The first version of ``ours`` (preference order) that ``theirs`` lists.

    ``theirs`` comes from the server: anything but a list of strings counts as no list.
    """
    if not isinstance(theirs, list):
        return None
    offered = {v for v in theirs if isinstance(v, str)}
    for version in ours:
        if version in offered:
            return version
    return None


def build_body(
    request_id: int | None,
    method: str,
    params: Mapping[str, Any] | None,
    *,
    arguments: bytes | None = None,
    meta: bytes | None = None,
) -> bytes:
    """A JSON-RPC request (or notification when ``request_id`` is None).

    ``meta`` (compact JSON of an object, encoded once per connection) becomes
    ``params._meta``, first; ``arguments`` is spliced verbatim as
    ``params.arguments`` (the caller already checked that it is one strict JSON
    object), after every other params key.
    """
    head = b'{"jsonrpc":"2.0",'
    if request_id is not None:
        head += b'"id":%d,' % request_id
    head += b'"method":' + _dumps(method)
    if params is None and arguments is None and meta is None:
        return head + b"}"
    encoded = _dumps(dict(params)) if params else b"{}"
    if meta is not None:
        encoded = b'{"_meta":' + meta + (b"}" if encoded == b"{}" else b"," + encoded[1:])
    if arguments is not None:
        if encoded == b"{}":
            encoded = b'{"arguments":' + arguments + b"}"
        else:
            encoded = encoded[:-1] + b',"arguments":' + arguments + b"}"
    return head + b',"params":' + encoded + b"}"


def _dumps(value: Any) -> bytes:
    # dumps_compact escapes a lone surrogate (a server's "\ud800" cursor or
    # requestState, echoed back) instead of failing to encode it.
    return dumps_compact(value)


def content_type(value: bytes | None) -> str:
    """The media type of a Content-Type value, lower-cased, without parameters."""
    if value is None:
        return ""
    return value.split(b";", 1)[0].strip().lower().decode("latin-1")


class Verdict(enum.Enum):
    """What the reply to a modern request says about the server's era."""

    MODERN = "modern"  # a usable modern result
    RETRY_VERSION = "retry_version"  # -32022 with a supported list
    MODERN_ERROR = "modern_error"  # a modern server rejected the request itself
    LEGACY = "legacy"  # fall back to initialize
    FAILED = "failed"  # neither: a transport failure (e.g. 5xx without JSON-RPC)


def classify_probe(status: int, message: Mapping[str, Any] | None, *, method: str) -> Verdict:
    """The spec brief's §a.2 decision table for the reply to a modern request.

    ``message`` is the JSON-RPC response for our id (or an id-less error), or None
    when the body held none.  401/403 never reach here (they are ``Unauthorized``).
    """
    error = message.get("error") if message is not None else None
    if isinstance(error, Mapping):
        code = error.get("code")
        if code == UNSUPPORTED_VERSION:
            data = error.get("data")
            if isinstance(data, Mapping) and isinstance(data.get("supported"), list):
                return Verdict.RETRY_VERSION
            return Verdict.MODERN_ERROR
        if code in MODERN_ERROR_CODES and status in (200, 400):
            return Verdict.MODERN_ERROR
        if code == METHOD_NOT_FOUND and status == 404 and method != "server/discover":
            return Verdict.MODERN_ERROR
        if status == 200 or status in (400, 404, 405):
            return Verdict.LEGACY
        return Verdict.FAILED
    if message is not None and status == 200:
        result = message.get("result")
        if (
            isinstance(result, Mapping)
            and "resultType" in result
            and (method != "server/discover" or isinstance(result.get("supportedVersions"), list))
        ):
            return Verdict.MODERN
        return Verdict.LEGACY
    if status in (400, 404, 405):
        return Verdict.LEGACY
    return Verdict.FAILED


def _valid_response(message: Any) -> bool:
    if not isinstance(message, dict) or "id" not in message:
        return False
    has_result = "result" in message
    has_error = "error" in message
    if has_result == has_error:
        return False
    if has_error:
        error = message["error"]
        return (
            isinstance(error, dict)
            and type(error.get("code")) is int
            and isinstance(error.get("message"), str)
        )
    return True


def _same_id(value: Any, request_id: int) -> bool:
    return type(value) is int and value == request_id


def match_response(
    parsed: Any, request_id: int, *, batch_allowed: bool, idless_ok: bool
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Split one parsed JSON-RPC payload into (our response, other messages).

    Other messages are notifications and server requests, in order.  Raises
    ``ConnectionFailed`` (cause ``not_jsonrpc``) for a response to another id, a
    malformed response, or a batch where none is allowed.  ``idless_ok`` accepts an
    error response whose id is null or absent as ours (an error body on a 4xx).
    """
    if isinstance(parsed, list):
        if not batch_allowed:
            raise ConnectionFailed(
                "server sent a JSON-RPC batch, which this protocol revision does not allow",
                cause="not_jsonrpc",
            )
        items: list[Any] = parsed
    else:
        items = [parsed]
    ours: dict[str, Any] | None = None
    others: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            raise ConnectionFailed(
                "server sent a JSON-RPC message that is not an object", cause="not_jsonrpc"
            )
        if "method" in item:
            if not isinstance(item["method"], str):
                raise ConnectionFailed(
                    "server sent a message with a non-string method", cause="not_jsonrpc"
                )
            others.append(item)
            continue
        if idless_ok and item.get("id") is None and isinstance(item.get("error"), dict):
            item = {**item, "id": request_id}
        if not _valid_response(item):
            raise ConnectionFailed("server sent a malformed JSON-RPC response", cause="not_jsonrpc")
        if not _same_id(item["id"], request_id):
            raise ConnectionFailed(
                f"server answered request id {item['id']!r}; we asked with id {request_id}",
                cause="not_jsonrpc",
            )
        ours = item
    return ours, others


def parse_message(data: bytearray | str, limits: Limits) -> Any:
    """Parse one message; a text over ``max_json_values``, or one whose decoded text
    would take more than 3 x ``max_response_bytes`` (so that text and the value built
    from it stay within 6 x the budget), fails the exchange as a spent budget before it
    is decoded (any other ``JsonError`` is the caller's)."""
    try:
        return parse_json(
            data,
            max_depth=limits.max_json_depth,
            max_values=limits.max_json_values,
            max_text_bytes=3 * limits.max_response_bytes,
        )
    except JsonError as exc:
        if exc.reason not in ("values", "text"):
            raise
        assert exc.limit is not None and exc.observed is not None
        if exc.reason == "values":
            message = (
                f"the server sent a message of up to {exc.observed:,} JSON values; the "
                f"limit is {exc.limit:,} (Limits.max_json_values)"
            )
            bound = "max_json_values"
        else:
            message = f"{exc} (3 x Limits.max_response_bytes)"
            bound = "max_response_bytes"
        raise budget_exceeded(message, bound, exc.limit, exc.observed) from None
