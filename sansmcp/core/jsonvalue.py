"""Bounded JSON parsing and compact serialisation.

Theory of operation
-------------------
Everything a server sends is parsed by :func:`parse_json` (JSON-RPC bodies and events,
through :func:`~sansmcp.core.messages.parse_message`); the OAuth documents a server
serves and the tool arguments a caller hands us by :func:`parse_json_object_strict`;
values we send are encoded by :func:`dumps_compact`.  All three raise :class:`JsonError`
(a ``ValueError``) and nothing else for bad input.

**One decoder.**  msgspec's JSON decoder (``msgspec.json.Decoder().decode``, C; imported on
the first parse, not at ``import sansmcp``) parses every one of them; ``json.loads`` parses
no server input (the typed listing pass of :mod:`sansmcp.core.listing` is msgspec too).
msgspec is a strict RFC 8259 parser, and what it refuses is what we refused before, with
one decided exception (the lone surrogate below).  The checks around it add no Python
per-byte work on the accepted path; a refusal is classified afterwards, on the error path
only (:func:`~sansmcp.core.jsonerror.refusal`, which owns :class:`JsonError` too), from the
exception's type and checks of our own on the text: msgspec's wording gives only the offset
of a syntax error and the words of our message (the ``_MSGSPEC_*`` strings of
:mod:`~sansmcp.core.jsonerror`, each pinned against the installed msgspec by
``tests/core/test_msgspec_wording.py``; words never seen are still a classified refusal):

* **UTF-8**: msgspec builds every string of an untyped decode with CPython's strict UTF-8
  decoder (overlong forms, encoded surrogates, truncated sequences and bytes above U+10FFFF
  are refused), and a non-ASCII byte outside a string is a syntax error; a refused text that
  is not valid UTF-8 is reported as such (``reason "utf8"``, with the byte offset), whatever
  msgspec tripped on first.  No UTF-16/32 sniffing, no BOM.
* **Non-JSON literals**: ``NaN`` (and ``-NaN``), ``Infinity`` and ``-Infinity`` are refused
  by msgspec's grammar and reported as ``reason "constant"`` where a value may stand (the
  text with ``[]`` in the literal's place decodes past it: ``jsonerror._a_value_at``); a number that
  overflows a double (``1e400``) is refused by msgspec (a ``ValidationError``, "Number out
  of range", ``reason "number"``), since it could never be sent back.
* **Huge integers**: msgspec refuses an integer literal of more than 4,300 characters, its
  sign included ("Integer value out of range", ``reason "number"``), before any quadratic
  conversion, whatever ``sys.set_int_max_str_digits`` says.
* **Lone surrogates**: a ``"\\ud800"`` escape without its pair is refused (``reason
  "syntax"``, the message names the escape and its byte offset).  JSON's grammar allows it,
  but I-JSON (RFC 7493 s2.1) forbids it, msgspec cannot build it, and the official Python
  SDK refuses it too (pydantic-core's jiter: "Invalid JSON: unexpected end of hex escape").
* **Duplicate keys**: in :func:`parse_json` the last one wins (as it did).
  :func:`parse_json_object_strict` refuses them: the colons of the text (``\u003a``
  escapes included) must be as many as in msgspec's re-encoding of the value, which a
  repeated key's lost member makes fewer (:func:`_check_unique`); the repeated key is then
  named (one pass over the text's tokens, the error path only: see :func:`_repeated_key`).
* **Depth**: the depth of a value is the number of nested arrays/objects (``1``
  and ``"x"`` have depth 0, ``[]`` depth 1, ``[{}]`` depth 2).  Three layers:

  1. ``data.count("[") + data.count("{")`` (C speed) bounds the depth from
     above; when it is ``<= max_depth`` nothing else is checked.
  2. Otherwise msgspec runs anyway: it recurses through ``Py_EnterRecursiveCall``,
     so a 100,000-deep nesting stops with ``RecursionError`` after about a thousand
     levels, in microseconds, and we report it as ``JsonError``.  (So the effective
     bound is also capped by the interpreter's recursion headroom at the call site,
     about 900 levels; MCP bodies are a few levels deep.)  msgspec's guard is not our
     bound:
  3. the parsed value is then walked, one step per container element (not per
     byte), stopping at the first level beyond ``max_depth``.

  The walk goes level by level and gathers each level with C iterators only, so it
  runs no bytecode per value: on a chain of 159,000 one-key objects it took 0.15 s as
  a per-container loop, and ~0.02 s so (an 8.7 MB body with 357,000 brackets: 0.09 s;
  a pre-parse scan of the text was measured slower).

* **Parsed size**: the bytes of a message are bounded elsewhere, but a few bytes
  can become a large object graph (``[{},{},...]`` is 3 bytes and ~72 bytes of
  heap per entry; a chain of one-key objects ~190 bytes per 5 bytes).  Every
  JSON value but the top-level one follows one of the structural bytes ``[``,
  ``{`` or ``,`` (an array element follows ``[`` or ``,``; an object member
  follows ``{`` or ``,``), so :func:`value_bound` = ``count("[") + count("{") +
  count(",") + 1`` (three ``bytes.count`` calls, C speed, before any decoding)
  bounds from above the values the decoder could build.  ``max_values``
  refuses a text whose bound is over it before it is decoded (``reason
  "values"``): memory and decode time are then at most a constant per value plus
  a constant per byte.  (Bytes inside strings are counted too: the bound is
  loose for prose with many commas, never too low.)  ``max_text_bytes`` bounds
  the text the value's strings can hold (:func:`decoded_size`), also before decoding.
* **Costly numbers**: msgspec converts a float literal in ~50 ns, but one of 1e289 and
  beyond (``1e308``, ``0.8e292``: past its power-of-ten table) by a slow path, ~12 us:
  0.9 MB of ``1e308`` took ~2 s against ~0.07 s for ``json.loads`` (CPython's ``float``,
  ~0.1 us for any of them, linear in a long mantissa).  msgspec's other numbers stay
  cheap per byte (a rounding edge such as ``1e23``: ~0.6 us; a long mantissa or an int of
  4,300 digits: ~10-25 ns a byte).  Such a short literal needs an exponent, so
  :func:`_decode_numbers` counts ``e`` and ``E`` (two ``bytes.count``, ~0.5 ms/MB each):
  a text with at most one per ``_BYTES_PER_EXPONENT`` (256) bytes is decoded by msgspec as
  it is (at most ~50 ns a byte of slow literals); any other (prose, scientific output,
  a flood of ``1e308``) by msgspec with ``float_hook=float``: CPython's ``float`` on each
  float literal, called from C (the same correctly rounded value, ~0.1 us a float, as
  ``json.loads``; a text of strings pays nothing more).  ``float`` gives an infinity
  where msgspec refuses the literal; only a literal with an exponent of three digits or
  a run of 210 digits can overflow (:func:`_may_overflow`: one ``translate``, two
  searches, ~1-2 ms/MB), so for a text holding one the value is searched for an
  infinity level by level with C iterators (:func:`_has_infinity`, ~0.02-0.1 us a
  value, no Python bytecode per value) and, on the error path only, decoded again with
  :func:`_float`, which refuses the literal in msgspec's words, with its path.  A repeated
  key could hide an infinity (``{"a":1e400,"a":1}``, which msgspec refuses): when the
  re-encoded value has fewer colons than the text (:func:`_lost_members`, msgspec's
  encoder, C) it is decoded again with :func:`_float` too (~0.3 us a float, still
  bounded per byte; CPU of Python code, so a tracer slows that path only).
  Measured on 0.7 MB (120,000 ``1e308``): ~0.07 s, ~5x ``json.loads`` on the same size of
  ordinary objects (``tests/core/test_costly_numbers.py`` holds it to 20x).
"""

from __future__ import annotations

import json
import json.encoder
import operator
import re
from itertools import chain, compress
from typing import Any

from .jsonerror import _MSGSPEC_FLOAT_RANGE, JsonError, refusal

__all__ = [
    "JsonError",
    "decode_kept",
    "dumps_compact",
    "parse_json",
    "parse_json_object_strict",
    "value_bound",
]


def _first_decode(data: Any) -> Any:
    """msgspec's decoder, imported on the first parse (not at ``import sansmcp``)."""
    global _decode, _decode_floats, _decode_checked, _encode
    from msgspec.json import Decoder, Encoder  # lazy: ~12 ms of import, once

    _decode, _encode = Decoder().decode, Encoder().encode
    _decode_floats = Decoder(float_hook=float).decode
    _decode_checked = Decoder(float_hook=_float).decode
    return _decode(data)


_decode: Any = _first_decode  # msgspec.json.Decoder().decode once bound
_encode: Any = None  # msgspec.json.Encoder().encode, bound with _decode (for _check_unique)
# msgspec's decoder with CPython's float for float literals (C only), and the same with
# _float (the error path: msgspec names the literal that overflows); bound with _decode
_decode_floats: Any = None
_decode_checked: Any = None


def _float(text: str) -> float:
    """A float literal's value by CPython's ``float``, refused in msgspec's words when it
    overflows a double (as msgspec refuses it)."""
    value = float(text)
    if value - value != 0.0:  # inf (a literal cannot spell nan)
        raise ValueError(_MSGSPEC_FLOAT_RANGE)
    return value


# One float literal per this many bytes at most goes to msgspec's own conversion (see the
# module docstring, "Costly numbers"); a text with more ``e``/``E`` goes to CPython's.
_BYTES_PER_EXPONENT = 256
_INFINITY = float("inf")


def _decode_numbers(data: bytes | bytearray | str) -> Any:
    """msgspec's value for ``data``, each float literal converted where its cost is bounded:
    by msgspec (~50 ns a literal, ~12 us for one of 1e289 and beyond) when the text has
    at most one ``e``/``E`` per _BYTES_PER_EXPONENT bytes, else by CPython's ``float``
    (an infinity it gave is then refused as msgspec refuses the literal)."""
    if _decode_floats is None:
        _first_decode(b"0")
    room = len(data) // _BYTES_PER_EXPONENT
    if isinstance(data, str):
        few = (letters := data.count("e")) <= room and letters + data.count("E") <= room
    else:
        few = (letters := data.count(b"e")) <= room and letters + data.count(b"E") <= room
    if few:
        return _decode(data)
    value = _decode_floats(data)
    if _may_overflow(data) and (_has_infinity(value) or _lost_members(data, value)):
        # raises msgspec's refusal, with the literal's path (or, when an overflow was only
        # possible, decodes again what a repeated key may have hidden: ~0.3 us a float)
        return _decode_checked(data)
    return value


def _lost_members(data: bytes | bytearray | str, value: Any) -> bool:
    """Whether an object member of ``data`` may be missing from ``value`` (a repeated key's
    first member, whose number could have overflowed): its re-encoding has fewer colons
    (see :func:`_check_unique`; an escaped colon only makes this say yes)."""
    colons = data.count(":") if isinstance(data, str) else data.count(b":")
    return colons > 0 and _encode(value).count(b":") != colons


# digits -> "0", e/E -> "e", anything else -> " " (and + - dropped: see _may_overflow)
_NUMBER_CLASSES = bytes(
    ord("0") if byte in b"0123456789" else ord("e") if byte in b"eE" else ord(" ")
    for byte in range(256)
)
_LONG_DIGITS = b"0" * 210  # 10**209 * 10**99 is still finite; a longer run may not be
_BIG_EXPONENT = b"e000"  # e100 and up (a sign between is dropped by the translation)


def _may_overflow(data: bytes | bytearray | str) -> bool:
    """Whether a number literal of ``data`` may overflow a double: only one with an exponent
    of three digits or more (``1e308``, ``1e+400``, ``1e0400``) or with a run of more than
    209 digits before a shorter one can, so the text with its digits mapped to ``0`` and
    ``e``/``E`` to ``e`` (signs dropped) is searched for ``e000`` and 210 ``0``.  The
    text of a string can match too (then only the value is searched, for nothing)."""
    text = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    classes = text.translate(_NUMBER_CLASSES, b"+-")
    return _BIG_EXPONENT in classes or _LONG_DIGITS in classes


def _has_infinity(value: Any) -> bool:
    """Whether ``value`` holds an infinite float: level by level, with C iterators only (as
    :func:`_next_level`), each level compared with both infinities (``in``, C)."""
    level: list[Any] = [value]
    while level:
        if _INFINITY in level or -_INFINITY in level:
            return True
        containers = list(compress(level, map(_is_container, map(type, level))))
        level = list(
            chain.from_iterable(map(_call, map(_members_of, map(type, containers)), containers))
        )
    return False


def _bracket_count(data: bytes | bytearray | str) -> int:
    # '[' and '{' are ASCII, and no byte of a multi-byte UTF-8 sequence is ASCII, so
    # the count over the bytes equals the count over the decoded text.
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return data.count(b"[") + data.count(b"{")


def _depth_error(max_depth: int, observed: int | None) -> JsonError:
    if observed is None:
        what = "deeper than the decoder's recursion limit"
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


def _next_level(level: list[Any]) -> list[Any]:
    """The containers among the members of every container of ``level``, gathered with C
    iterators only (``map``, ``chain``, ``compress``, ``operator.call``): the members of
    each (``dict.values`` or ``iter``, picked by type), of which the containers are kept,
    so no Python bytecode runs per container or per value."""
    members: list[Any] = list(
        chain.from_iterable(map(_call, map(_members_of, map(type, level)), level))
    )
    return list(compress(members, map(_is_container, map(type, members))))


def _check_depth(value: Any, max_depth: int) -> None:
    """Walk containers level by level; raise at the first level deeper than max_depth.

    Each level is a list of containers (:func:`_next_level`).  Empty containers count
    for the depth (and add no members).
    """
    if not isinstance(value, (dict, list)):
        return
    if max_depth < 1:
        raise _depth_error(max_depth, 1)
    level: list[Any] = [value]
    depth = 1  # the depth of the containers in `level`
    while level:
        level = _next_level(level)
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


def _loads(
    data: bytes | bytearray | str,
    max_depth: int,
    brackets: int | None = None,
    unique: bool = False,
) -> Any:
    """msgspec's value for ``data``, its keys checked unique when ``unique`` (first, as a
    decoder's object hook would refuse them) and its depth against ``max_depth``."""
    if max_depth < 0:
        raise ValueError(f"max_depth must be >= 0, got {max_depth}")
    try:
        value = _decode_numbers(data)
    except RecursionError:
        raise _depth_error(max_depth, None) from None
    except (ValueError, UnicodeEncodeError) as exc:  # msgspec's errors are ValueErrors
        raise refusal(data, exc, _decode) from None
    if unique:
        _check_unique(data, value, max_depth)  # type: ignore[arg-type]
    if (_bracket_count(data) if brackets is None else brackets) > max_depth:
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

    Rejects invalid JSON and invalid UTF-8, ``NaN``/``-NaN``/``Infinity``/``-Infinity``, lone
    surrogate escapes, integers beyond the digit limit and numbers overflowing a double,
    nesting deeper than ``max_depth``, and, when ``max_values`` is given, a text whose
    :func:`value_bound` is over it -- checked first, before anything is decoded --
    and, when ``max_text_bytes`` is given, bytes whose decoded text would occupy more
    (:func:`decoded_size`; the value built from the text may be as large again).
    Duplicate object keys are accepted; the last one wins.  A ``bytearray`` is
    consumed: it is cleared once decoded (not when a bound refused it).  Raises
    :class:`JsonError` only (``ValueError`` for a negative ``max_depth`` or a
    ``max_values`` below 1).
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
    if isinstance(data, bytearray):
        try:
            return _loads(data, max_depth, brackets)
        finally:
            data.clear()
    return _loads(data, max_depth, brackets)


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


def decode_kept(data: bytes) -> Any:
    """The value of JSON bytes this library kept once they passed :func:`parse_json`'s rules
    (a tool's schema: the server's bytes from the typed listing pass, or what
    :func:`dumps_compact` wrote for it): msgspec's decode, without counting the bounds again
    (its float literals converted as :func:`parse_json` converts them)."""
    return _decode_numbers(data)


def parse_json_object_strict(data: bytes, *, max_depth: int) -> dict[str, Any]:
    """One JSON object, strictly: an OAuth document a server serves, or the tool arguments
    a caller hands us.

    On top of :func:`parse_json`'s rules: the top level must be an object, and no
    object at any level may repeat a key.  Empty or whitespace-only input is
    rejected (map an empty argument to ``{}`` before calling).  Raises
    :class:`JsonError`.
    """
    value = _loads(data, max_depth, unique=True)
    if not isinstance(value, dict):
        raise JsonError(
            f"the JSON text must be an object, not {_json_type(value)}",
            reason="not_object",
        )
    return value


# Naming the repeated key (the error path only) is one pass over the text's tokens, in
# Python, one decode per key: O(text) time, and a list of the tokens (8 bytes each, a key's
# bytes beside) plus the keys of the open objects.  The worst measured (CPython 3.12, 2
# cores under load) is [{},{},...] (a token every 1.5 bytes) and one object of distinct
# keys: <= 10 ms at a server's OAuth document of max_auth_document_bytes (64 KiB), ~1 s and
# ~50 MB of tokens for 8 MiB (a caller raising that bound, or its own tool arguments),
# beside the ~180 MB the decoded value already holds.
# In a compact valid JSON text: a string (a key with its colon), a bracket.
# A \u003a escape (a colon), after no backslash or after escaped backslashes.
_ESCAPED_COLON = re.compile(rb"(?<!\\)(?:\\\\)*\\u003[aA]")
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*":?|[\[\]{}]')


def _check_unique(data: bytes, value: Any, max_depth: int) -> None:
    """Refuse ``value`` when an object of the text ``data`` (which it was decoded from)
    repeats a key.

    Outside strings a colon is a member's; the strings' colons are in the decoded value.
    msgspec re-encodes ``value`` with every colon of its strings as a colon, and ``data``
    spells one either so or as a ``\\u003a`` escape: the two counts agree exactly when
    nothing of ``data`` was lost in ``value``.  A repeated key loses its first member (key,
    colon and value), so ``data`` then has more.  Three C calls on the accepted path."""
    colons = data.count(b":")
    if not colons:
        return
    if b"\\u003" in data:
        colons += len(_ESCAPED_COLON.findall(data))
    try:
        if colons == _encode(value).count(b":"):
            return
    except RecursionError:  # (deeper than the interpreter's headroom here)
        raise _depth_error(max_depth, None) from None
    key = _repeated_key(_format(data))  # (the counts differ only when a key repeats)
    raise JsonError(
        "a JSON object in the text has a key more than once"
        if key is None
        else f"JSON object has the key {json.dumps(key)} more than once",
        reason="duplicate_key",
    )


def _repeated_key(compact: bytes) -> str | None:
    """The first key an object of ``compact`` (valid JSON, no whitespace between tokens)
    has twice: its strings and brackets read in order, each object's keys (escapes
    decoded) kept while it is open.  A token at a time (the error path only)."""
    objects: list[set[str] | None] = []  # the open containers: an object's keys, or None
    for token in _TOKEN.findall(compact):
        first = token[0]
        if first == 0x7B:  # {
            objects.append(set())
        elif first == 0x5B:  # [
            objects.append(None)
        elif first == 0x7D or first == 0x5D:  # } ]
            objects.pop()
        elif token[-1] == 0x3A:  # a string then a colon: a key of the innermost object
            key: str = _decode(token[:-1])
            keys = objects[-1]
            assert keys is not None
            if key in keys:
                return key
            keys.add(key)
    return None


def _format(data: bytes) -> bytes:
    """``data`` without whitespace between its tokens (msgspec's formatter, C)."""
    from msgspec.json import format as compact  # (loaded by the decode already)

    result: bytes = compact(data, indent=-1)
    return result


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

    A string holding a lone surrogate (a caller's value: ``parse_json`` refuses a
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
