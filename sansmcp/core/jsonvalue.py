"""Bounded JSON parsing and compact serialisation.

Theory of operation
-------------------
Everything a server sends is parsed by :func:`parse_json`; the tool arguments a
caller hands us are validated by :func:`parse_json_object_strict`; values we send
are encoded by :func:`dumps_compact`.  All three raise :class:`JsonError` (a
``ValueError``) and nothing else for bad input.

``json.loads`` (the C scanner) does the parsing, so a large well-formed body is
parsed at C speed.  The checks around it are chosen so that the common path adds
no Python per-byte work:

* **UTF-8**: bytes are decoded strictly by us (``bytes.decode``, C speed), never
  by ``json.loads``'s encoding sniffing, which would also accept UTF-16/32.
* **Non-JSON literals**: ``parse_constant`` rejects ``NaN``, ``Infinity`` and
  ``-Infinity``; ``parse_float`` rejects a number that overflows to infinity
  (``1e400``), since it could never be sent back (``allow_nan=False``).  The float
  hook costs a Python call per float literal only; measured on a 5.9 MB array of
  600,000 floats it adds about a third to ``json.loads``, and nothing to bodies
  without floats.  (A regex gate over the text was measured slower than the hook.)
* **Huge integers**: Python's int-digit limit raises ``ValueError`` inside
  ``json.loads`` before any quadratic conversion; we report it as ``JsonError``.
* **Depth**: the depth of a value is the number of nested arrays/objects (``1``
  and ``"x"`` have depth 0, ``[]`` depth 1, ``[{}]`` depth 2).  Three layers:

  1. ``data.count("[") + data.count("{")`` (C speed) bounds the depth from
     above; when it is ``<= max_depth`` nothing else is checked.
  2. Otherwise ``json.loads`` runs anyway: the C scanner recurses through
     ``Py_EnterRecursiveCall``, so a 100,000-deep nesting stops with
     ``RecursionError`` after about a thousand levels, in microseconds, and we
     report it as ``JsonError``.  (So the effective bound is also capped by the
     interpreter's recursion headroom at the call site, about 900 levels; MCP
     bodies are a few levels deep.)
  3. The parsed value is then walked, one step per container element (not per
     byte), stopping at the first level beyond ``max_depth``.

  Measured on an 8.7 MB ``tools/list`` body with 357,000 brackets: ``json.loads``
  0.20 s, the walk 0.09 s; a pre-parse scan (a regex removing string literals,
  then a C-level prefix sum over the brackets) took 0.18-0.22 s, so the walk
  was chosen.  The walk goes level by level and gathers and sorts each level with
  C iterators only, so it runs no bytecode per value: on a chain of 159,000
  one-key objects it took 0.15 s as a per-container loop, and ~0.02 s so.

* **Parsed size**: the bytes of a message are bounded elsewhere, but a few bytes
  can become a large object graph (``[{},{},...]`` is 3 bytes and ~72 bytes of
  heap per entry; a chain of one-key objects ~190 bytes per 5 bytes).  Every
  JSON value but the top-level one follows one of the structural bytes ``[``,
  ``{`` or ``,`` (an array element follows ``[`` or ``,``; an object member
  follows ``{`` or ``,``), so :func:`value_bound` = ``count("[") + count("{") +
  count(",") + 1`` (three ``bytes.count`` calls, C speed, before any decoding)
  bounds from above the values ``json.loads`` could build.  ``max_values``
  refuses a text whose bound is over it before it is decoded (``reason
  "values"``): memory and decode time are then at most a constant per value plus
  a constant per byte.  (Bytes inside strings are counted too: the bound is
  loose for prose with many commas, never too low.)
"""

from __future__ import annotations

import json
import json.encoder
import math
import operator
import re
from collections import Counter
from itertools import chain, compress
from typing import Any

__all__ = ["JsonError", "dumps_compact", "parse_json", "parse_json_object_strict", "value_bound"]


class JsonError(ValueError):
    """The text is not acceptable JSON; the message names what was wrong.

    ``reason`` is a short tag: ``"utf8"``, ``"syntax"``, ``"constant"`` (NaN,
    Infinity), ``"number"`` (an integer beyond the digit limit or a float that
    overflows), ``"depth"``, ``"values"``, ``"duplicate_key"``, ``"not_object"``,
    ``"encode"``.  For ``"depth"``, ``limit`` is ``max_depth`` and ``observed`` the
    depth found (``None`` when the parser's own recursion limit stopped it first);
    for ``"values"``, ``limit`` is ``max_values`` and ``observed`` the text's
    :func:`value_bound`.
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


def _reject_constant(name: str) -> Any:
    raise JsonError(
        f"JSON text contains the non-standard literal {name}; only finite numbers are allowed",
        reason="constant",
    )


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise JsonError(
            f"JSON number {shown} overflows a double (it would be infinite)", reason="number"
        )
    return value


def _to_text(data: bytes | bytearray | memoryview | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return str(data, "utf-8")  # any buffer, decoded without an extra copy
    except UnicodeDecodeError as exc:
        raise JsonError(
            f"JSON text is not valid UTF-8: {exc.reason} at byte offset {exc.start:,}",
            reason="utf8",
        ) from None


def _bracket_count(data: bytes | bytearray | str) -> int:
    # '[' and '{' are ASCII, and no byte of a multi-byte UTF-8 sequence is ASCII, so
    # the count over the bytes equals the count over the decoded text.
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return data.count(b"[") + data.count(b"{")


def _depth_error(max_depth: int, observed: int | None) -> JsonError:
    if observed is None:
        what = "deeper than the parser's recursion limit"
    else:
        what = f"at least {observed:,} levels deep"
    return JsonError(
        f"JSON nesting is {what}; the limit is {max_depth:,} levels (max_json_depth)",
        reason="depth",
        limit=max_depth,
        observed=observed,
    )


_is_container = frozenset({dict, list}).__contains__
_members_of: Any = {dict: dict.values, list: iter}.__getitem__  # a container's values
_call: Any = operator.call


def _check_depth(value: Any, max_depth: int) -> None:
    """Walk containers level by level; raise at the first level deeper than max_depth.

    Each level is a list of containers; the next one is gathered with C iterators
    only (``map``, ``chain``, ``compress``, ``operator.call``): the members of
    every container of the level (``dict.values`` or ``iter``, picked by type), of
    which the containers are kept, so no Python bytecode runs per container or per
    value.  Empty containers count for the depth (and add no members).
    """
    if not isinstance(value, (dict, list)):
        return
    if max_depth < 1:
        raise _depth_error(max_depth, 1)
    level: list[Any] = [value]
    depth = 1  # the depth of the containers in `level`
    while level:
        members: list[Any] = list(
            chain.from_iterable(map(_call, map(_members_of, map(type, level)), level))
        )
        level = list(compress(members, map(_is_container, map(type, members))))
        if level and depth == max_depth:
            raise _depth_error(max_depth, depth + 1)
        depth += 1


def value_bound(data: bytes | bytearray | str) -> int:
    """An upper bound on the JSON values in ``data``, counted before decoding.

    ``count("[") + count("{") + count(",") + 1`` (see the module docstring): every
    value but the top-level one follows one of those bytes.  C speed, no copy for
    ``bytes``/``bytearray``/``str``.
    """
    return _value_bound(data, _bracket_count(data))


def _value_bound(data: bytes | bytearray | str, brackets: int) -> int:
    return brackets + (data.count(",") if isinstance(data, str) else data.count(b",")) + 1


def _check_values(data: bytes | bytearray | str, max_values: int | None, brackets: int) -> None:
    if max_values is None:
        return
    if max_values < 1:
        raise ValueError(f"max_values must be >= 1, got {max_values}")
    bound = _value_bound(data, brackets)
    if bound > max_values:
        raise JsonError(
            f"JSON text may hold up to {bound:,} values (by its brackets and commas); "
            f"the limit is {max_values:,} values per message (max_json_values)",
            reason="values",
            limit=max_values,
            observed=bound,
        )


def _loads(text: str, max_depth: int, pairs_hook: Any = None, brackets: int | None = None) -> Any:
    if max_depth < 0:
        raise ValueError(f"max_depth must be >= 0, got {max_depth}")
    if text.startswith("\ufeff"):  # json.loads refuses it; the bare decoder would not
        raise JsonError("invalid JSON: unexpected UTF-8 BOM", reason="syntax")
    try:
        value = (_STRICT_DECODER if pairs_hook is not None else _DECODER).decode(text)
    except JsonError:
        raise
    except RecursionError:
        raise _depth_error(max_depth, None) from None
    except json.JSONDecodeError as exc:
        raise JsonError(
            f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} (char {exc.pos:,})",
            reason="syntax",
        ) from None
    except ValueError as exc:
        # The int-digit limit ("Exceeds the limit (4300 digits) for integer string conversion").
        raise JsonError(f"JSON number rejected: {exc}", reason="number") from None
    if (_bracket_count(text) if brackets is None else brackets) > max_depth:
        _check_depth(value, max_depth)
    return value


# A lead byte of a 4-byte UTF-8 sequence: a character beyond U+FFFF, which makes CPython
# store the whole decoded text (and each string holding one) at 4 bytes a character.
_ASTRAL_LEAD = re.compile(rb"[\xf0-\xf4]")


_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 continuation bytes: no character of their own


def decoded_size(data: bytes | bytearray) -> int:
    """An upper bound on the bytes the decoded text of ``data`` occupies (CPython stores
    one, two or four bytes a character), taken at C speed before decoding.  Only a
    character beyond U+FFFF can make it exceed twice the UTF-8 bytes: then it is four
    bytes times the characters (the bytes that start one)."""
    if _ASTRAL_LEAD.search(data) is None:
        return 2 * len(data)
    return 4 * len(data.translate(None, _CONTINUATION))


def parse_json(
    data: bytes | bytearray | str,
    *,
    max_depth: int,
    max_values: int | None = None,
    max_text_bytes: int | None = None,
) -> Any:
    """Parse one JSON text a server sent.

    Rejects invalid JSON and invalid UTF-8, ``NaN``/``Infinity``/``-Infinity``,
    numbers beyond the int-digit limit or overflowing a double, nesting deeper
    than ``max_depth``, and, when ``max_values`` is given, a text whose
    :func:`value_bound` is over it -- checked first, before anything is decoded --
    and, when ``max_text_bytes`` is given, bytes whose decoded text would occupy more
    (:func:`decoded_size`; the value built from the text may be as large again).
    Duplicate object keys are accepted; the last one wins.  A ``bytearray`` is
    consumed: it is cleared once decoded to text, so its memory is free while
    the value is built.  Raises :class:`JsonError` only (``ValueError`` for a
    negative ``max_depth`` or a ``max_values`` below 1).
    """
    if not isinstance(data, (bytes, bytearray, str)):  # another buffer: copied, to count it
        data = bytes(data)
    brackets = _bracket_count(data)  # counted once, for both bounds
    _check_values(data, max_values, brackets)
    # A str arrives decoded (an SSE event's data: SseParser bounds it the same way); the
    # bytes are searched only when even 4 bytes a character could exceed the bound.
    if (
        max_text_bytes is not None
        and not isinstance(data, str)
        and 4 * len(data) > max_text_bytes
        and (size := decoded_size(data)) > max_text_bytes
    ):
        raise JsonError(
            f"JSON text of {len(data):,} bytes would decode to up to {size:,} bytes "
            f"(characters beyond U+FFFF take 4 bytes each); the limit is {max_text_bytes:,}",
            reason="text",
            limit=max_text_bytes,
            observed=size,
        )
    text = _to_text(data)
    if isinstance(data, bytearray):
        data.clear()
    return _loads(text, max_depth, brackets=brackets)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        counts = Counter(key for key, _ in pairs)
        duplicate = max(counts, key=counts.__getitem__)
        raise JsonError(
            f"JSON object has the key {json.dumps(duplicate)} more than once",
            reason="duplicate_key",
        )
    return result


# Built once: json.loads with hooks would build a decoder on every call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_STRICT_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_unique_pairs
)
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_ASCII_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _not_serialisable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# ``JSONEncoder.encode`` builds a new C encoder on every call (~2 us), which was most
# of the cost of a listing of many small tools; this one is built once, with the same
# settings as _ENCODER.  It keeps no cycle markers (a shared marker table could keep
# stale entries after an error): a cycle ends in RecursionError like runaway nesting.
# None where the interpreter has no C accelerator; _ENCODER is used then.
_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_FAST_ENCODE: Any = (
    None
    if _C_MAKE_ENCODER is None
    else _C_MAKE_ENCODER(
        None, _not_serialisable, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)


def parse_json_object_strict(data: bytes, *, max_depth: int) -> dict[str, Any]:
    """Validate caller-supplied tool arguments: one JSON object, strictly.

    On top of :func:`parse_json`'s rules: the top level must be an object, and no
    object at any level may repeat a key.  Empty or whitespace-only input is
    rejected (map an empty argument to ``{}`` before calling).  Raises
    :class:`JsonError`.
    """
    value = _loads(_to_text(data), max_depth, _unique_pairs)
    if not isinstance(value, dict):
        raise JsonError(
            f"tool arguments must be a JSON object, not {_json_type(value)}",
            reason="not_object",
        )
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def dumps_compact(value: Any) -> bytes:
    """Encode ``value`` as compact UTF-8 JSON (no spaces, non-ASCII kept as is).

    A string holding a lone surrogate (which ``parse_json`` accepts from a
    ``"\\ud800"`` escape) cannot be UTF-8 encoded; such a value is emitted with
    ASCII escapes instead, so the output is always valid UTF-8 JSON.  NaN,
    infinities, unserialisable objects, cycles and runaway nesting raise
    :class:`JsonError`.
    """
    try:
        # (inline, not a helper: a listing encodes two schemas per tool)
        text = _ENCODER.encode(value) if _FAST_ENCODE is None else "".join(_FAST_ENCODE(value, 0))
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return _ASCII_ENCODER.encode(value).encode("ascii")
    except RecursionError:
        raise JsonError(
            "value cannot be encoded as JSON: it is nested too deeply or holds a cycle",
            reason="encode",
        ) from None
    except (TypeError, ValueError) as exc:
        raise JsonError(f"value cannot be encoded as JSON: {exc}", reason="encode") from None
