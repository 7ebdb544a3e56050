"""The one check for every server-chosen value the client sends back in a header.

Theory of operation
-------------------
Some values a server chooses come back to it in request headers: the SSE event id
(``Last-Event-ID`` when a legacy stream is resumed) and the legacy session id
(``Mcp-Session-Id`` on every later request).  A value that is not a valid
RFC 9110 field value would make the wire machine refuse the request (it raises
``LocalProtocolError``), so each such value passes :func:`echoable` *before* it is
kept; a value that fails is treated as absent (an event id) or ends the exchange
as a classified error (a session id: ``ServerAnswered``), never an exception.

The rule, narrower than RFC 9110 ``field-value`` on purpose:

* 1 to ``limit`` bytes;
* first and last byte visible ASCII (0x21-0x7E): no leading or trailing SP/HTAB;
* bytes inside visible ASCII, SP or HTAB (``spaces=False``: visible ASCII only, the
  rule the MCP spec sets for session ids);
* obs-text (0x80-0xFF) is refused: RFC 9110 keeps it only for compatibility, h11
  and h2 disagree on it, and an event id is text whose bytes on the wire would
  depend on an encoding choice.  CR, LF, NUL and every other control are refused.

Values that go back in the JSON body (cursors, ``requestState``) are not header
values and are not checked here; tool names and ``x-mcp-header`` values sent as
headers are encoded by :func:`~sansmcp.core.tools.encode_header_value`, which
base64-encodes anything outside plain printable ASCII.
"""

from __future__ import annotations

__all__ = ["echoable"]

_VISIBLE = frozenset(range(0x21, 0x7F))
_VISIBLE_BYTES = bytes(sorted(_VISIBLE))
_INSIDE_BYTES = _VISIBLE_BYTES + b" \t"


def echoable(value: str | bytes, limit: int, *, spaces: bool = True) -> bytes | None:
    """``value`` as header-value bytes we may send back, or None when it fails the rule.

    O(1) for a value over ``limit`` (refused before it is copied), C speed otherwise.
    """
    if not 0 < len(value) <= limit:  # a str's length never exceeds its ASCII bytes
        return None
    if isinstance(value, str):
        if not value.isascii():
            return None
        raw = value.encode("ascii")
    else:
        raw = bytes(value)
    if raw[0] not in _VISIBLE or raw[-1] not in _VISIBLE:
        return None
    if raw.translate(None, _INSIDE_BYTES if spaces else _VISIBLE_BYTES):
        return None  # some byte is outside the allowed set
    return raw
