"""The ``tools/list`` page decoder: one typed msgspec pass, each schema kept as the server's
bytes, for the bodies it can prove clean; the untyped msgspec decode for the rest.

Theory of operation
-------------------
A listing is the largest body a Conn parses, and most of its cost used to be building every
schema as dicts and lists only to re-serialise it.  :func:`parse_page` decodes a
``tools/list`` response with msgspec (``msgspec.json``, C, imported on the first parse) into
typed entries whose ``inputSchema`` / ``outputSchema`` stay bytes; :func:`validate_entry`
turns each entry into a :class:`~sansmcp.core.tools.Tool` or a
:class:`~sansmcp.core.tools.SkippedTool` under the rules of
:func:`~sansmcp.core.tools.validate_tool`.

**One decoder, two shapes.**  msgspec is the only JSON decoder (see
:mod:`sansmcp.core.jsonvalue`).  The typed pass accepts a body only when cheap counts *prove*
that the untyped decode (:func:`~sansmcp.core.messages.parse_message`, i.e.
:func:`~sansmcp.core.jsonvalue.parse_json`) would accept it and build the same values; any
other body gets what ``parse_message`` returns, or raises, by calling it.  So every refusal,
bound and error message is ``parse_json``'s, and a listing that the typed pass declines (a
syntax error, a lone surrogate escape; an ``error`` answer; a batch; a tool entry that is
not an object, whose ``name``/``description``/``title`` has another type or that has a key
the spec does not define; a number that may overflow; a part nested near
``max_json_depth``) costs the untyped decode plus the
declined attempt, a few C passes over the body (on the costliest body the default bounds
accept, 8 MB of nested one-key objects in a schema: ~14 ms over a ~175 ms parse).  A body
under 4 KiB without ``"result"`` (a notification event of the listing's stream) is not
tried.  What the typed pass checks, before or while decoding:

* the value bound (``max_json_values``) and the decoded-text bound, exactly as
  ``parse_json`` counts them (one ``translate`` then one ``count``; over either: declined,
  so the untyped decode raises the budget error);
* UTF-8: ``bytes.isascii()`` or a strict incremental decode, 64 KiB at a time (msgspec
  does not check the bytes of a string it only skips), after the text bound;
* numbers: a number can overflow a double or pass the int-digit limit only with a run of at
  least 210 digits or an exponent of at least three digits; the body, mapped so that digits
  are ``0`` and ``e``/``E`` is ``e`` (signs dropped), is searched for ``0`` * 210 and
  ``e000``: if either is there (the text of a string can match too: only slower), declined,
  before any part is decoded (msgspec's own conversion of ``1e308`` is slow: see
  :mod:`~sansmcp.core.jsonvalue`, "Costly numbers");
* syntax, NaN/Infinity, control characters, bad escapes, lone surrogates: msgspec refuses
  them even in what it skips (declined, and the untyped decode names the fault);
* depth: every part is bounded by its brackets (``[`` + ``{`` in its bytes, counted on the
  part) against what is left of ``max_json_depth``; over: declined.  That includes the
  members of a tool entry sansmcp never reads (``icons``, ``_meta``: kept as Raw only to
  be counted); a key of an entry or of the JSON-RPC envelope that the spec does not define
  (which msgspec would skip unbuilt and unbounded) declines the body, so the pass accepts
  nothing the untyped decode refuses;
* duplicate keys: the last wins, as in the untyped decode; a schema's bytes keep both (its
  consumers decode it again: the same value).

``x-mcp-header`` annotations: the body is searched once for ``"x-mcp-header"`` (or a
``\\u`` escape, which could spell it); without either its entries decode as ``_Plain``, and
no schema of them is searched again (a search per schema was 40 % of ``validate_entry``).

Schemas are the server's bytes: key order, every keyword, escapes and number spellings as
the server wrote them.  A body whose serializer spaced its tokens (a line break anywhere, or
``": "`` in its first bytes: indented output, ``json.dumps``'s default) is compacted first,
once (``msgspec.json.format(indent=-1)``, C); a compact body (what the official SDKs send)
is not copied.  A server that spaces only some tokens keeps those spaces in its schemas:
still JSON, counted in ``max_tool_bytes`` and in the cache's bytes as kept.
``validate_tool`` re-serialises a parsed value instead (a listing the typed pass declined);
both are JSON of the same value.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import Any, cast

import msgspec
from msgspec import UNSET, Raw

from .jsonvalue import decoded_size
from .limits import Limits
from .messages import parse_message
from .toolrules import (
    MISSING,
    NOT_OBJECT,
    UNTYPED,
    annotations_fault,
    execution_fault,
    input_schema_fault,
    kept_task_support,
    name_fault,
    output_schema_fault,
    size_fault,
)
from .tools import (
    _ANNOTATION_BYTES,
    HeaderParam,
    SkippedTool,
    Tool,
    built_tool,
    header_params_or_fault,
    validate_tool,
)

__all__ = ["parse_page", "validate_entry"]

_ABSENT = Raw(b"")  # a member the entry does not have


class _Entry(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """One tool entry as the typed pass decodes it; the Raw members become bytes (untracked
    by the garbage collector: it holds no container).  ``icons`` and ``_meta`` are never
    read, only bounded (their brackets); a key the spec does not define: declined."""

    name: str
    description: str = ""
    title: str | None = None
    inputSchema: Raw = _ABSENT
    outputSchema: Raw = _ABSENT
    annotations: Raw = _ABSENT
    execution: Raw = _ABSENT
    icons: Raw = _ABSENT
    meta: Raw = msgspec.field(default=_ABSENT, name="_meta")


class _Plain(_Entry, gc=False, forbid_unknown_fields=True):
    """An entry of a body with no ``"x-mcp-header"`` in it, spelled plainly or escaped (no
    ``\\u`` escape either): its schema need not be searched for one."""


class _Head(msgspec.Struct):
    """A schema's root ``type`` (other members skipped; UNTYPED without one, as
    :func:`~sansmcp.core.tools.schema_root` reads it); a non-object root fails to decode."""

    type: Any = UNTYPED


class _Execution(msgspec.Struct):
    taskSupport: Any = None


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """A JSON-RPC response with a result; ``error``, ``method`` or another key: declined."""

    result: dict[str, Raw]
    jsonrpc: Any = UNSET
    id: Any = UNSET
    error: Raw = _ABSENT
    method: Raw = _ABSENT


_decode_envelope = msgspec.json.Decoder(_Envelope).decode
_decode_entries = msgspec.json.Decoder(list[_Entry]).decode
_decode_plain = msgspec.json.Decoder(list[_Plain]).decode
_decode_head = msgspec.json.Decoder(_Head).decode
_decode_execution = msgspec.json.Decoder(_Execution).decode
_decode_any = msgspec.json.Decoder().decode
_compact = msgspec.json.format
_DECLINED = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)

# digits -> "0", e/E -> "e", the value-bound bytes [ { , -> ",", everything else -> " "
_CLASSES = bytearray(b" " * 256)
for _byte in b"0123456789":
    _CLASSES[_byte] = ord("0")
_CLASSES[ord("e")] = _CLASSES[ord("E")] = ord("e")
for _byte in b"[{,":
    _CLASSES[_byte] = ord(",")
_CLASS_TABLE = bytes(_CLASSES)
del _CLASSES, _byte
# A body under this many bytes (characters for an event's text) is tried only when it holds
# ``"result"``: each notification event of a listing's stream goes to the untyped decode at
# the cost of one short search, not of a declined typed pass (~3 us); a large body is
# always tried (searching it would cost more than a decline).  Tests set it to 0.
_TYPED_FROM = 4096
_UTF8_CHUNK = 64 << 10  # bytes _utf8 decodes at a time
_HEAD_BYTES = 256  # where _spaced looks for the serializer's separators
_LONG_DIGITS = b"0" * 210  # 10**209 * 10**99 is still finite; a longer run may not be
_BRACE = ord("{")  # the first byte of an object's JSON
_BIG_EXPONENT = b"e000"  # e100 and up (a sign between is dropped by the translation)


def parse_page(data: bytes | bytearray | str, limits: Limits) -> Any:
    """The parsed ``tools/list`` response in ``data``, as :func:`parse_message` would parse it,
    with ``result["tools"]`` a list of typed entries (for :func:`validate_entry`) when the
    typed pass accepted the body.  Raises what ``parse_message`` raises (a ``bytearray`` is
    consumed, as there)."""
    message = _typed(data, limits)
    if message is None:
        return parse_message(bytearray(data) if isinstance(data, bytes) else data, limits)
    if isinstance(data, bytearray):
        data.clear()
    return message


def _typed(data: bytes | bytearray | str, limits: Limits) -> dict[str, Any] | None:
    """The message the typed pass makes of ``data``, or None: declined."""
    body = _body(data, limits)
    if body is None or not _counted(body, limits):
        return None
    try:
        envelope = _decode_envelope(_compact(body, indent=-1) if _spaced(body) else body)
    except _DECLINED:
        return None
    if envelope.error is not _ABSENT or envelope.method is not _ABSENT:
        return None
    rpc_id, jsonrpc = envelope.id, envelope.jsonrpc
    if isinstance(rpc_id, (dict, list)) or isinstance(jsonrpc, (dict, list)):
        return None
    if limits.max_json_depth < 5:  # a tool's schema alone is 5 levels deep in the message
        return None
    # an annotation, or an escape that may spell one: searched once here, not per schema
    result = _result(envelope.result, _may_annotate(body), limits.max_json_depth)
    if result is None:
        return None
    message: dict[str, Any] = {"jsonrpc": jsonrpc, "id": rpc_id, "result": result}
    if jsonrpc is UNSET:
        del message["jsonrpc"]
    if rpc_id is UNSET:
        del message["id"]
    return message


def _body(data: bytes | bytearray | str, limits: Limits) -> bytes | bytearray | None:
    """``data`` as UTF-8 bytes, or None: a small body without a result (an event's
    notification, most likely), over the decoded-text bound, or not UTF-8."""
    small = len(data) < _TYPED_FROM
    if isinstance(data, str):
        if small and '"result"' not in data:
            return None
        try:
            return data.encode("utf-8")
        except UnicodeEncodeError:  # pragma: no cover - SseParser decodes strict UTF-8
            return None
    if small and b'"result"' not in data:
        return None
    # first, as parse_json: the text bound, before anything is decoded or copied
    max_text = 3 * limits.max_response_bytes
    ascii = data.isascii()
    if (
        4 * len(data) > max_text
        and (
            2 * len(data) if ascii else decoded_size(data)  # (what decoded_size finds for ASCII)
        )
        > max_text
    ):
        return None
    return data if ascii or _utf8(data) else None


def _counted(body: bytes | bytearray, limits: Limits) -> bool:
    """Whether ``body`` is within the value bound and holds no number that may be costly:
    both counted on one translation, before anything is decoded."""
    classes = body.translate(_CLASS_TABLE, b"+-")
    if classes.count(b",") + 1 > limits.max_json_values:
        return False
    # msgspec converts a number of 1e289 and beyond in ~12 us (the parts below are decoded
    # untyped), where the untyped decode converts it by CPython's
    return _LONG_DIGITS not in classes and _BIG_EXPONENT not in classes


def _result(members: dict[str, Raw], hinted: bool, max_depth: int) -> dict[str, Any] | None:
    """The response's ``result``: ``tools`` decoded typed (as ``_Plain`` entries unless
    ``hinted``: an annotation may be there), every other member untyped; None when a part
    may nest deeper than ``max_depth`` allows it, or does not decode."""
    result: dict[str, Any] = {}
    try:
        for key, raw in members.items():
            if key == "tools":
                result[key] = entries = (_decode_entries if hinted else _decode_plain)(raw)
                if not _entries_within(entries, max_depth - 4):
                    return None
            elif _deeper(part := bytes(raw), max_depth - 2):
                return None
            else:
                result[key] = _decode_any(part)
    except _DECLINED:
        return None
    return result


def _utf8(data: bytes | bytearray) -> bool:
    """Whether ``data`` is strict UTF-8 (as ``str(data, "utf-8")`` would judge it), decoded
    64 KiB at a time: no decoded copy of the whole body is ever held."""
    decode = codecs.getincrementaldecoder("utf-8")().decode
    try:
        with memoryview(data) as view:
            for start in range(0, len(view), _UTF8_CHUNK):
                decode(view[start : start + _UTF8_CHUNK])
        decode(b"", True)
    except UnicodeDecodeError:
        return False
    return True


def _spaced(body: bytes | bytearray) -> bool:
    """Whether the serializer of ``body`` put whitespace between tokens: a line break, tab or
    carriage return anywhere (none can stand raw inside a string), or a space after or before
    a member's colon in its first bytes (a serializer keeps one style: ``json.dumps``'s
    default shows it in the envelope's first member)."""
    if b"\n" in body or b"\r" in body or b"\t" in body:
        return True
    head = body[:_HEAD_BYTES]
    return b'": ' in head or b'" :' in head


def _deeper(part: Any, left: int) -> bool:
    """Whether ``part`` (JSON bytes) may be nested more than ``left`` deep: by its brackets,
    counted only when it is long enough to hold more than ``left`` pairs of them."""
    return len(part) > 2 * left + 1 and part.count(b"[") + part.count(b"{") > left


def _entries_within(entries: Sequence[_Entry], left: int) -> bool:
    """Turn each entry's present Raw members into bytes (a Raw holds the whole body) and
    check that each is nested at most ``left`` deep (:func:`_deeper`, inlined: this runs
    for every member of every entry of every listing)."""
    absent = _ABSENT
    long = 2 * left + 1
    for entry in entries:
        one: Any = entry
        raw = one.inputSchema
        if raw is not absent:
            part = bytes(raw)
            if len(part) > long and part.count(b"[") + part.count(b"{") > left:
                return False
            one.inputSchema = part
        raw = one.outputSchema
        if raw is not absent:
            part = bytes(raw)
            if len(part) > long and part.count(b"[") + part.count(b"{") > left:
                return False
            one.outputSchema = part
        raw = one.annotations
        if raw is not absent:
            part = bytes(raw)
            if len(part) > long and part.count(b"[") + part.count(b"{") > left:
                return False
            one.annotations = part
        raw = one.execution
        if raw is not absent:
            part = bytes(raw)
            if len(part) > long and part.count(b"[") + part.count(b"{") > left:
                return False
            one.execution = part
        raw = one.icons  # only bounded, then let go (a Raw holds the whole body)
        if raw is not absent:
            if len(raw) > long and (part := bytes(raw)).count(b"[") + part.count(b"{") > left:
                return False
            one.icons = absent
        raw = one.meta
        if raw is not absent:
            if len(raw) > long and (part := bytes(raw)).count(b"[") + part.count(b"{") > left:
                return False
            one.meta = absent
    return True


def validate_entry(
    index: int, raw: Any, *, modern: bool, max_tool_bytes: int, tasks: bool = False
) -> Tool | SkippedTool:
    """One listing entry judged by the rules of :func:`~sansmcp.core.tools.validate_tool`: a
    typed entry from :func:`parse_page` here, anything else (an entry the untyped decode
    built) by ``validate_tool`` itself.  The rules are the predicates of
    :mod:`~sansmcp.core.toolrules`, asked in its order, each only for a value it does not
    accept at sight; the struct holds the type rules of the texts."""
    kind = type(raw)
    if kind is not _Plain and kind is not _Entry:
        return validate_tool(index, raw, modern=modern, max_tool_bytes=max_tool_bytes, tasks=tasks)
    entry: Any = raw  # its present Raw members are bytes now (_entries_within)
    absent = _ABSENT
    name = entry.name
    if not name:  # (refused: the only name a msgspec str can be that the rule refuses)
        return SkippedTool(index=index, name=name, reason=cast(str, name_fault(name)))
    schema: bytes = entry.inputSchema
    root = MISSING if schema is absent else _root(schema)
    if root != "object" and (reason := input_schema_fault(root)) is not None:
        return SkippedTool(index=index, name=name, reason=reason)
    description, title = entry.description, entry.title
    text_size = _text_size(name, description, title)
    size = text_size + len(schema)

    output: Any = entry.outputSchema
    if output is absent:
        output = None
    else:
        # the modern rule reads only whether it is an object: its first byte says so
        root = (UNTYPED if output[0] == _BRACE else NOT_OBJECT) if modern else _root(output)
        if root != "object" and (reason := output_schema_fault(root, modern)) is not None:
            return SkippedTool(index=index, name=name, reason=reason)
        size += len(output)

    annotations: Any = entry.annotations
    if annotations is absent:
        annotations = None
    else:
        size += len(annotations)
        annotations = _decode_any(annotations)
        if type(annotations) is not dict:  # (refused: it is present)
            return SkippedTool(
                index=index, name=name, reason=cast(str, annotations_fault(annotations))
            )

    execution = entry.execution
    support = None
    if execution is not absent:
        support = _task_support(execution)
        if reason := execution_fault(support, tasks):
            return SkippedTool(index=index, name=name, reason=reason)
        support = kept_task_support(support)
    if size > max_tool_bytes:  # (refused: size counts text_size in)
        reason = cast(str, size_fault(text_size, size, max_tool_bytes))
        return SkippedTool(index=index, name=name, reason=reason)

    params: tuple[HeaderParam, ...] = ()
    if modern and kind is _Entry and _may_annotate(schema):
        params, reason = header_params_or_fault(_decode_any(schema))
        if reason is not None:
            return SkippedTool(index=index, name=name, reason=reason)
    return built_tool(name, description, schema, title, annotations, output, params, support)


def _text_size(name: str, description: str, title: str | None) -> int:
    """The UTF-8 length of the texts (a msgspec str holds no lone surrogate: each has a
    UTF-8 form), without a copy for ASCII."""
    size = len(name) if name.isascii() else len(name.encode())
    size += len(description) if description.isascii() else len(description.encode())
    if title is not None:
        size += len(title) if title.isascii() else len(title.encode())
    return size


def _root(schema: bytes) -> Any:
    """A schema's bytes reduced as :func:`~sansmcp.core.toolrules.schema_root` reduces a
    parsed schema: its root's ``type`` (UNTYPED without one), or NOT_OBJECT."""
    try:
        return _decode_head(schema).type
    except msgspec.ValidationError:
        return NOT_OBJECT


def _task_support(execution: bytes) -> Any:
    """``execution.taskSupport`` (None when ``execution`` is not an object or has none)."""
    try:
        return _decode_execution(execution).taskSupport
    except msgspec.ValidationError:  # not an object: not checked further
        return None


def _may_annotate(schema: bytes | bytearray) -> bool:
    """Whether ``schema`` may hold an ``x-mcp-header`` annotation: spelled plainly, or a
    ``\\u`` escape that could spell it."""
    return _ANNOTATION_BYTES in schema or (b"\\" in schema and b"\\u" in schema)
