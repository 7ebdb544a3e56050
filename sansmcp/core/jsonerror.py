"""The JSON layer's one error, :class:`JsonError`, and the naming of what msgspec refused:
which ``reason`` and which words (the error path of :mod:`sansmcp.core.jsonvalue` only).

Theory of operation
-------------------
:func:`refusal` turns the exception msgspec raised for a text into a :class:`JsonError`.
The reason is decided by the exception's type and checks of our own on the text (invalid
UTF-8 decoded here, a number out of range, a BOM, a lone surrogate escape near where
msgspec stopped, NaN/Infinity where a value may stand), never by msgspec's wording: the
wording (the ``_MSGSPEC_*`` strings, the only text of its messages read) gives the offset
of a syntax error and the path of a number, and picks the words of our message.
``tests/core/test_msgspec_wording.py`` pins each ``_MSGSPEC_*`` string of this module
against the installed msgspec, and checks that reworded errors keep their reason.  See
:mod:`sansmcp.core.jsonvalue` for what each refusal means.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["JsonError", "refusal"]


class JsonError(ValueError):
    """The text is not acceptable JSON; the message names what was wrong.

    ``reason`` is a short tag: ``"utf8"``, ``"syntax"``, ``"constant"`` (NaN,
    Infinity), ``"number"`` (an integer beyond the digit limit or a float that
    overflows), ``"depth"``, ``"values"``, ``"text"``, ``"duplicate_key"``,
    ``"not_object"``, ``"encode"``.  For ``"depth"``, ``limit`` is ``max_depth`` and
    ``observed`` the depth found (``None`` when the decoder's own recursion guard
    stopped it first); for ``"values"``, ``limit`` is ``max_values`` and ``observed``
    the text's :func:`~sansmcp.core.jsonvalue.value_bound`.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str = "syntax",
        limit: int | None = None,
        observed: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.limit = limit
        self.observed = observed


# msgspec's wording, the only text of its messages read here: the offset of a syntax error,
# the path of a number out of range, and which words a message uses; never the reason
# (see refusal).  tests/core/test_msgspec_wording.py pins every one against the installed
# msgspec (a new one must be added there: the test lists these names).
_MSGSPEC_AT_BYTE = re.compile(r" \(byte (\d+)\)$")  # a DecodeError's offset, at its end
_MSGSPEC_MALFORMED = "JSON is malformed: "  # a DecodeError's prefix, before the detail
_MSGSPEC_TRUNCATED = "Input data was truncated"  # a DecodeError without an offset
_MSGSPEC_INVALID = "invalid character"  # the detail of an unexpected byte
_MSGSPEC_INT_RANGE = "Integer value out of range"  # a ValidationError: too many digits
_MSGSPEC_FLOAT_RANGE = "Number out of range"  # a ValidationError: beyond a double
_MSGSPEC_PATH = " - at `"  # a ValidationError's path, at its end (none at the top level)
# A lone surrogate escape: a high one not followed by a low one, a low one not preceded by
# a high one.  A match starts only on an escape: after no backslash, or after escaped
# backslashes (a high escape before a low one is taken at its word: a message only).
_LONE_HIGH = re.compile(rb"(?<!\\)(?:\\\\)*\\u([dD][89abAB][0-9a-fA-F]{2})(?!\\u[dD][c-fC-F])")
_LONE_LOW = re.compile(
    rb"(?<!\\)(?:\\\\)*(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})"
)


def _where(text: bytes, at: int) -> str:
    line, column = text.count(b"\n", 0, at) + 1, at - text.rfind(b"\n", 0, at)
    return f"at line {line} column {column} (byte {at:,})"


def _lone_surrogate(text: bytes, at: int) -> JsonError | None:
    """The refusal of a lone surrogate escape that starts just before byte ``at``, if there
    is one.  ``at`` is where msgspec stopped: 6 or 12 bytes after the escape it refused, or
    the end of the text when fewer than 6 bytes followed a high one ("truncated"); so only
    the 24 bytes before it are searched (two regex searches, never the whole text)."""
    low, high = max(0, at - 24), min(len(text), at + 12)
    found = [
        match
        for match in (_LONE_HIGH.search(text, low, high), _LONE_LOW.search(text, low, high))
        if match is not None and match.end() - 6 < at
    ]
    if not found:
        return None
    escape = min(found, key=lambda match: match.end())
    return JsonError(
        f"invalid JSON: the escape \\u{escape.group(1).decode()} "
        f"{_where(text, escape.end() - 6)} is a lone UTF-16 surrogate (no pair); "
        "I-JSON (RFC 7493 s2.1) forbids it",
        reason="syntax",
    )


def refusal(data: bytes | bytearray | str, exc: Exception, decode: Any) -> JsonError:
    """The :class:`JsonError` for a text msgspec refused with ``exc``.

    ``decode`` is the decoder that refused it (msgspec's, untyped), for
    :func:`_a_value_at`.  The reason is decided by the exception's type and checks of our own on the text, not
    by msgspec's wording: invalid UTF-8 (decoded here), a number out of range (the only
    ``ValidationError`` an untyped decode raises), a BOM, a lone surrogate escape near
    where msgspec stopped, NaN/Infinity where a value may stand (:func:`_a_value_at`);
    any other refusal is ``"syntax"``.  The wording (the ``_MSGSPEC_*`` strings) only
    gives the offset and picks the words of the message; each is pinned by a test."""
    if isinstance(data, str):
        text = data.encode("utf-8", "surrogatepass")
        if isinstance(exc, UnicodeEncodeError):  # a str input holding a lone surrogate
            return JsonError(
                f"JSON text is not valid Unicode: a lone surrogate at character {exc.start:,}",
                reason="utf8",
            )
    else:
        text = bytes(data)
        if not text.isascii():
            try:
                str(text, "utf-8")
            except UnicodeDecodeError as bad:
                return JsonError(
                    f"JSON text is not valid UTF-8: {bad.reason} at byte offset {bad.start:,}",
                    reason="utf8",
                )
    message = str(exc)
    from msgspec import ValidationError  # (loaded by the decode already)

    if isinstance(exc, ValidationError):
        path = _path(message)
        if message.startswith(_MSGSPEC_INT_RANGE):
            what = f" rejected: an integer of more than 4,300 digits{path} (the int-digit limit)"
        elif message.startswith(_MSGSPEC_FLOAT_RANGE):
            what = f"{path} overflows a double (it would be infinite)"
        else:  # (another wording: still a number msgspec could not build)
            what = f"{path} is out of range"
        return JsonError(f"JSON number{what}", reason="number")
    if text.startswith(b"\xef\xbb\xbf"):
        return JsonError("invalid JSON: unexpected UTF-8 BOM", reason="syntax")
    found = _MSGSPEC_AT_BYTE.search(message)
    at = len(text) if found is None else int(found.group(1))
    lone = _lone_surrogate(text, at)
    if lone is not None:
        return lone
    if found is None:
        if message == _MSGSPEC_TRUNCATED:
            return JsonError(
                f"invalid JSON: the text ends before its value does ({len(text):,} bytes)",
                reason="syntax",
            )
        return JsonError(f"invalid JSON: {message}", reason="syntax")  # (another wording)
    rest = text[at : at + 8]
    literal = b"NaN" if rest.startswith(b"NaN") else b"Infinity"
    if rest.startswith(literal):
        start = at - 1 if text[at - 1 : at] == b"-" else at
        if _a_value_at(text, start, at + len(literal), decode):
            if literal == b"Infinity":
                what = "-Infinity" if start < at else "Infinity"
            else:  # (not a literal of any JSON dialect signed: said as what it is)
                what = "NaN with a minus sign (-NaN)" if start < at else "NaN"
            return JsonError(
                f"JSON text contains the non-standard literal {what} {_where(text, start)}; "
                "only finite numbers are allowed",
                reason="constant",
            )
    detail = message[: found.start()].removeprefix(_MSGSPEC_MALFORMED)
    if detail == _MSGSPEC_INVALID and rest and rest[0] < 0x20:  # (the words only)
        detail = f"an unescaped control character (0x{rest[0]:02x})"
    return JsonError(f"invalid JSON: {detail} {_where(text, at)}", reason="syntax")


def _a_value_at(text: bytes, start: int, end: int, decode: Any) -> bool:
    """Whether a value may stand at ``text[start:end]`` (a literal msgspec stopped on): the
    text with ``[]`` in its place decodes past that ``[]`` (or fully).  msgspec judges,
    not its wording: a literal inside a string (``\\[`` is no escape), after a value or
    as an object's key still stops the decode within it."""
    try:
        decode(text[:start] + b"[]" + text[end:])
    except RecursionError:  # deeper than the interpreter's headroom: past the literal
        return True
    except ValueError as exc:  # msgspec's errors
        found = _MSGSPEC_AT_BYTE.search(str(exc))
        return found is None or int(found.group(1)) >= start + 2
    return True


def _path(message: str) -> str:
    _, at, path = message.partition(_MSGSPEC_PATH)
    return f" at {path.rstrip('`')}" if at else ""
