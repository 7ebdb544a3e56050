"""Tool definitions, ``x-mcp-header`` parameters, header value encoding, tool results.

Theory of operation
-------------------
Everything here is a pure function over already-parsed JSON values; nothing keeps
state between calls.

* :func:`validate_tool` turns one entry of a ``tools/list`` result into a
  :class:`Tool` or, when the entry breaks a rule, a :class:`SkippedTool` that names
  the rule.  It never raises for server data: a malformed tool is dropped from the
  listing and recorded, never fatal to the listing (spec brief §b.4, §e.4, §k.15).
  Each rule is one predicate of :mod:`sansmcp.core.toolrules`, which the typed
  listing pass asks too.  Schemas are re-serialised once, compactly, from the parsed
  value (key order and every keyword kept); that serialisation is also what the size
  bound measures.  A
  listing the typed decoder accepted (:mod:`sansmcp.core.listing`, the usual case) is
  judged by the same rules on the server's own schema bytes instead.
* :func:`header_params_of` walks an ``inputSchema`` for ``x-mcp-header``
  annotations (spec brief §b.4).  Only a chain made solely of ``properties`` keys
  from the root reaches a valid annotation; an annotation anywhere else, or one
  that breaks a value rule, raises ``ValueError`` with the reason.  The walk is
  bounded in depth and node count.
* :func:`param_headers` mirrors the annotated argument values into
  ``mcp-param-*`` headers, each value passed through :func:`encode_header_value`
  (the base64 sentinel of spec brief §b.3).

Tool results (``tools/call``) are :mod:`sansmcp.core.results`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .http import TOKEN_CHARS
from .jsonvalue import JsonError, decode_kept, dumps_compact
from .toolrules import (
    MISSING,
    annotations_fault,
    description_fault,
    entry_fault,
    execution_fault,
    input_schema_fault,
    kept_task_support,
    kept_title,
    name_fault,
    output_schema_fault,
    schema_root,
    size_fault,
    task_support_of,
)

__all__ = [
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "HeaderParam",
    "SkippedTool",
    "Tool",
    "encode_header_value",
    "header_params_of",
    "param_headers",
    "utf8_len",
    "validate_tool",
]

#: Deepest container nesting :func:`header_params_of` walks before it gives up.
MAX_SCHEMA_DEPTH = 128
#: Most containers (objects and arrays) :func:`header_params_of` visits before it gives up.
MAX_SCHEMA_NODES = 10_000

_ANNOTATION = "x-mcp-header"
_ANNOTATION_BYTES = b'"x-mcp-header"'
_HEADER_TYPES = frozenset({"string", "integer", "boolean"})
# RFC 9110 §5.6.2: token = 1*tchar
# Keywords whose values are instance data, not subschemas: an "x-mcp-header" key in
# there is a value, not an annotation.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Keywords whose value is a map of name -> subschema (the names are not keywords).
_SCHEMA_MAP_KEYWORDS = frozenset(
    {"$defs", "definitions", "dependentSchemas", "patternProperties", "dependencies"}
)
_SENTINEL_PREFIX = "=?base64?"
_SENTINEL_SUFFIX = "?="


def utf8_len(text: str) -> int:
    """The UTF-8 length of ``text`` (a lone surrogate counted as its 3-byte form)."""
    if text.isascii():  # the common case, without making the UTF-8 copy
        return len(text)
    # surrogatepass: a lone surrogate must not make us raise (none comes from a server:
    # the decoder refuses a "\ud800" escape; a value built by hand may hold one).
    return len(text.encode("utf-8", "surrogatepass"))


# --------------------------------------------------------------------------- tools


@dataclass(frozen=True, slots=True, kw_only=True)
class HeaderParam:
    """One ``x-mcp-header`` annotation: mirror ``arguments[path...]`` into a header."""

    header: str  # the {name} of Mcp-Param-{name}, as the server spelled it
    path: tuple[str, ...]  # property path from the arguments root
    type: str  # "string" | "integer" | "boolean"


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """A validated tool definition.

    ``input_schema`` and ``output_schema`` are JSON: the server's bytes (compacted when
    it spaced its tokens) or, from a listing the typed pass declined,
    compact JSON re-serialised from the parsed value; key order and every keyword are
    kept either way.  ``header_params`` is
    empty for a legacy server (which does not define ``x-mcp-header``).
    """

    name: str
    description: str
    input_schema: bytes
    title: str | None = None
    annotations: Mapping[str, Any] | None = None
    output_schema: bytes | None = None
    header_params: tuple[HeaderParam, ...] = ()
    task_support: str | None = None  # "optional" / "required" (None: "forbidden")

    def to_dict(self) -> dict[str, Any]:
        """Exactly ``{"name", "description", "input_schema"}`` (an Anthropic tool definition).

        ``input_schema`` is freshly parsed on each call, so the caller may mutate it.
        """
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": decode_kept(self.input_schema),
        }

    @property
    def idempotent(self) -> bool:
        """True only when ``annotations.idempotentHint`` is the JSON value ``true``.

        A hint from the server, untrusted (spec brief §e.4); it only gates whether a
        broken 2026-07-28 call stream may be re-issued.
        """
        return self.annotations is not None and self.annotations.get("idempotentHint") is True


@dataclass(frozen=True, slots=True, kw_only=True)
class SkippedTool:
    """A listing entry that was dropped, and why."""

    index: int  # position in the whole listing (across pages)
    name: str | None  # when it had a string name
    reason: str  # human-readable, names the rule broken


def header_params_or_fault(schema: Any) -> tuple[tuple[HeaderParam, ...], str | None]:
    """The ``x-mcp-header`` parameters of a parsed ``inputSchema`` (modern revisions), or
    the reason it is skipped (:func:`header_params_of` names the broken rule)."""
    try:
        return header_params_of(schema), None
    except ValueError as exc:
        return (), f"invalid x-mcp-header: {exc}"


def validate_tool(
    index: int, raw: Any, *, modern: bool, max_tool_bytes: int, tasks: bool = False
) -> Tool | SkippedTool:
    """Validate one ``tools/list`` entry; never raises for server data.

    Skipped (with the reason) when: the entry is not an object; ``name`` is missing,
    not a string, empty or holds a lone surrogate; ``description`` is present and not a string;
    ``inputSchema`` is missing, not an object, or has a ``type`` other than
    ``"object"`` (a *missing* ``type`` is tolerated: many servers omit it for
    parameterless tools, and the root of a tool's arguments is an object anyway);
    ``outputSchema`` is present and not an object (legacy revisions also require a
    ``type``, when present, of ``"object"``); ``annotations`` is present and not an
    object; ``execution.taskSupport`` is ``"required"`` and not ``tasks`` (the Conn
    does not run calls as 2025-11-25 tasks); the
    definition is over ``max_tool_bytes``; or (``modern`` only) an ``x-mcp-header``
    annotation is invalid (:func:`header_params_of`).  Each rule is one predicate of
    :mod:`sansmcp.core.toolrules` (``name_fault``, ``input_schema_fault``, ...), asked in
    that order (the last, :func:`header_params_or_fault`, here).

    An ill-typed ``title`` is ignored (``title=None``) rather than fatal: it is
    display-only.  ``execution.taskSupport`` is kept as ``task_support`` when it is
    ``"optional"`` or ``"required"`` (anything else reads as ``"forbidden"``: None).
    Fields we do not keep (``icons``, ``_meta``) are not checked further.

    The size measured against ``max_tool_bytes`` is the UTF-8 length of ``name``,
    ``description`` and ``title`` plus the compact JSON of ``inputSchema``,
    ``outputSchema`` and ``annotations`` -- what a :class:`Tool` keeps, counted from
    the serialisations made anyway.  When the texts alone are over it, the schemas
    are not serialised at all (the entry is skipped at once).
    """
    # A listing may hold 10,000 entries: one dict look-up per field (a missing field reads
    # as MISSING), each text measured once, the Tool built through its slots (a frozen
    # dataclass's __init__ costs ~2 us, as much as validating the rest of the entry).
    reason = entry_fault(raw)
    if reason is not None:
        return SkippedTool(index=index, name=None, reason=reason)
    get = raw.get
    name = get("name", MISSING)
    description = get("description", "")
    reason = name_fault(name) or description_fault(description)
    if reason is not None:
        return SkippedTool(index=index, name=name if isinstance(name, str) else None, reason=reason)
    title = kept_title(get("title"))
    text_size = len(name) if name.isascii() else utf8_len(name)  # no copy for ASCII
    text_size += len(description) if description.isascii() else utf8_len(description)
    if title is not None:
        text_size += len(title) if title.isascii() else utf8_len(title)
    schema = get("inputSchema", MISSING)
    output = get("outputSchema", MISSING)
    annotations = get("annotations", MISSING)
    support = task_support_of(get("execution"))
    reason = (
        input_schema_fault(schema_root(schema))
        or output_schema_fault(schema_root(output), modern)
        or annotations_fault(annotations)
        or execution_fault(support, tasks)
        or size_fault(text_size, text_size, max_tool_bytes)  # before serialising the schemas
    )
    if reason is not None:
        return SkippedTool(index=index, name=name, reason=reason)
    output = None if output is MISSING else output
    annotations = None if annotations is MISSING else annotations
    try:
        input_bytes, output_bytes, size = _serialised(schema, output, annotations, text_size)
    except JsonError as exc:
        return SkippedTool(
            index=index, name=name, reason=f"tool definition is not serialisable JSON: {exc}"
        )
    reason = size_fault(text_size, size, max_tool_bytes)
    params: tuple[HeaderParam, ...] = ()
    if reason is None and modern and _ANNOTATION_BYTES in input_bytes:
        params, reason = header_params_or_fault(schema)
    if reason is not None:
        return SkippedTool(index=index, name=name, reason=reason)
    return built_tool(
        name,
        description,
        input_bytes,
        title,
        annotations,
        output_bytes,
        params,
        kept_task_support(support),
    )


def _serialised(
    schema: Any, output: Any, annotations: Any, size: int
) -> tuple[bytes, bytes | None, int]:
    """The compact JSON a Tool keeps of ``schema`` and ``output``, and ``size`` plus their
    length and that of ``annotations``' JSON (the definition's size); raises JsonError."""
    input_bytes = dumps_compact(schema)
    size += len(input_bytes)
    output_bytes = None
    if output is not None:
        output_bytes = dumps_compact(output)
        size += len(output_bytes)
    if annotations is not None:
        size += len(dumps_compact(annotations))
    return input_bytes, output_bytes, size


def built_tool(
    name: str,
    description: str | None,
    input_schema: bytes,
    title: str | None,
    annotations: Any,
    output_schema: bytes | None,
    header_params: tuple[HeaderParam, ...],
    task_support: str | None = None,
) -> Tool:
    """A checked tool's ``Tool``, filled through the slot setters (``validate_tool``'s and
    the typed listing pass's one constructor)."""
    tool: Tool = _new_tool(Tool)
    _set_name(tool, name)
    _set_description(tool, description)
    _set_input_schema(tool, input_schema)
    _set_title(tool, title)
    _set_annotations(tool, annotations)
    _set_output_schema(tool, output_schema)
    _set_header_params(tool, header_params)
    _set_task_support(tool, task_support)
    return tool


# Tool's slot setters: validate_tool fills a new Tool through them (what the frozen
# dataclass's __init__ does through object.__setattr__, at less than half the cost).
# test_tools checks that a Tool built so equals one built by __init__, field by field.
_new_tool: Any = object.__new__
_SLOT_SETTERS: tuple[Any, ...] = tuple(
    Tool.__dict__[field].__set__
    for field in (
        "name",
        "description",
        "input_schema",
        "title",
        "annotations",
        "output_schema",
        "header_params",
        "task_support",
    )
)
(
    _set_name,
    _set_description,
    _set_input_schema,
    _set_title,
    _set_annotations,
    _set_output_schema,
    _set_header_params,
    _set_task_support,
) = _SLOT_SETTERS


# ------------------------------------------------------------------ x-mcp-header


def _pointer(location: tuple[str, ...]) -> str:
    if not location:
        return "the schema root"
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in location)


class _HeaderWalk:
    """One bounded walk over a schema, collecting valid annotations."""

    __slots__ = ("nodes", "params", "seen")

    def __init__(self) -> None:
        self.nodes = 0
        self.params: list[HeaderParam] = []
        self.seen: dict[str, str] = {}  # lower-cased header -> location where first seen

    def visit(
        self,
        node: Any,
        *,
        reachable: bool,
        path: tuple[str, ...],
        location: tuple[str, ...],
    ) -> None:
        """Walk ``node`` in schema position; ``path`` is its property path when reachable."""
        if isinstance(node, list):
            self._count(location)
            for i, item in enumerate(node):
                self.visit(item, reachable=False, path=(), location=(*location, str(i)))
            return
        if not isinstance(node, dict):
            return
        self._count(location)
        if _ANNOTATION in node:
            self._annotation(node, reachable=reachable, path=path, location=location)
        for key, value in node.items():
            if key == _ANNOTATION or key in _DATA_KEYWORDS:
                continue
            here = (*location, key)
            if key == "properties" and isinstance(value, dict):
                self._count(here)
                for prop, sub in value.items():
                    self.visit(
                        sub,
                        reachable=reachable,
                        path=(*path, prop),
                        location=(*here, prop),
                    )
            elif key in _SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
                self._count(here)
                for member, sub in value.items():
                    self.visit(sub, reachable=False, path=(), location=(*here, member))
            else:
                # items, prefixItems, anyOf, not, if/then/else, additionalProperties,
                # unknown keywords...: anything below is not statically reachable.
                self.visit(value, reachable=False, path=(), location=here)

    def _count(self, location: tuple[str, ...]) -> None:
        self.nodes += 1
        if self.nodes > MAX_SCHEMA_NODES:
            raise ValueError(
                f"inputSchema has more than {MAX_SCHEMA_NODES:,} objects and arrays; "
                "too large to check for x-mcp-header annotations"
            )
        if len(location) > MAX_SCHEMA_DEPTH:
            raise ValueError(
                f"inputSchema nests deeper than {MAX_SCHEMA_DEPTH} levels; "
                "too deep to check for x-mcp-header annotations"
            )

    def _annotation(
        self,
        node: dict[str, Any],
        *,
        reachable: bool,
        path: tuple[str, ...],
        location: tuple[str, ...],
    ) -> None:
        where = _pointer(location)
        if not reachable or not path:
            raise ValueError(
                f"annotation at {where} is not on a property reachable from the root "
                'through "properties" keys only'
            )
        header = node[_ANNOTATION]
        if not isinstance(header, str):
            raise ValueError(f"annotation at {where} is not a string")
        if not header:
            raise ValueError(f"annotation at {where} is empty")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in header):
            raise ValueError(f"annotation {header!r} at {where} contains control characters")
        if not header.isascii() or header.encode().translate(None, TOKEN_CHARS):
            raise ValueError(f"annotation {header!r} at {where} is not an HTTP token (RFC 9110)")
        folded = header.lower()
        first = self.seen.get(folded)
        if first is not None:
            raise ValueError(
                f"annotation {header!r} at {where} duplicates the one at {first} "
                "(header names are case-insensitive)"
            )
        kind = node.get("type")
        if not isinstance(kind, str) or kind not in _HEADER_TYPES:
            raise ValueError(
                f"annotation {header!r} at {where} is on a property whose type is "
                f"{_describe_type(node)}; only a single string, integer or boolean type "
                "is allowed"
            )
        self.seen[folded] = where
        self.params.append(HeaderParam(header=header, path=path, type=kind))


def _describe_type(node: dict[str, Any]) -> str:
    if "type" not in node:
        return "missing"
    try:
        return dumps_compact(node["type"]).decode()[:80]
    except JsonError:
        return "not JSON"


def header_params_of(schema: Any) -> tuple[HeaderParam, ...]:
    """The ``x-mcp-header`` parameters of an ``inputSchema`` (spec brief §b.4).

    Raises ``ValueError(reason)`` when an annotation is invalid: not a string,
    empty, containing control characters, not an RFC 9110 token, a
    case-insensitive duplicate of another, on a property whose ``type`` is not
    exactly one of ``"string"``, ``"integer"``, ``"boolean"`` (``number``, a
    missing ``type`` -- even with an ``enum`` -- and a type array such as
    ``["string", "null"]`` are all rejected: the spec allows primitive types only,
    and rejecting is the safe reading), on the root itself, or anywhere not
    reached from the root through a chain of ``properties`` keys only (inside
    ``items``, ``prefixItems``, ``additionalProperties``, ``oneOf``/``anyOf``/
    ``allOf``/``not``, ``if``/``then``/``else``, ``$defs``/``definitions``,
    ``dependentSchemas``, ``patternProperties``, unknown keywords, ...; ``$ref``
    is never followed, so a target reached only through it is not reachable).
    ``"x-mcp-header"`` keys inside instance data (``const``, ``enum``,
    ``default``, ``examples``) and property *names* are not annotations.

    The walk visits at most :data:`MAX_SCHEMA_NODES` objects and arrays, at most
    :data:`MAX_SCHEMA_DEPTH` deep; a larger schema is reported invalid.
    """
    walk = _HeaderWalk()
    walk.visit(schema, reachable=True, path=(), location=())
    return tuple(walk.params)


def encode_header_value(value: str) -> bytes:
    """Encode a header value per spec brief §b.3.

    Plain when every character is in 0x20-0x7E, there is no leading or trailing
    space, and the value does not match the sentinel pattern (starts ``=?base64?``,
    ends ``?=``); otherwise ``=?base64?`` + standard padded base64 of the UTF-8
    bytes + ``?=``.  HTAB, though legal in a field value, is encoded (the spec's
    examples encode control characters).  A lone surrogate (which a caller's
    argument may hold; the decoder refuses a ``"\\ud800"`` escape from a server) is
    encoded as its surrogate code unit in UTF-8 form ("surrogatepass") rather than
    raising; no server can match it anyway.
    """
    if (
        value.isascii()
        and value.isprintable()
        and not value.startswith(" ")
        and not value.endswith(" ")
        and not (value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX))
    ):
        return value.encode("ascii")
    return b"=?base64?" + base64.b64encode(value.encode("utf-8", "surrogatepass")) + b"?="


def _header_text(param: HeaderParam, value: Any) -> str | None:
    if param.type == "string":
        return value if isinstance(value, str) else None
    if param.type == "boolean":
        if isinstance(value, bool):
            return "true" if value else "false"
        return None
    # integer
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return None


def param_headers(
    params: tuple[HeaderParam, ...], arguments: Mapping[str, Any]
) -> list[tuple[bytes, bytes]]:
    """``[(b"mcp-param-region", b"us-west1"), ...]`` for the given call arguments.

    A header is sent for each parameter whose value is present at its exact path
    and not null (spec brief §b.4).  Conversion: a string as-is; an integer as its
    decimal (``True``/``False`` are not integers); a float with an integral value
    for an integer parameter as its integer decimal (``42.0`` -> ``42``, which the
    server compares numerically); a boolean as ``true``/``false``.  A value whose
    runtime type does not fit the declared type (say ``"42"`` for an integer, or
    ``1.5``) is *omitted*: no header is better than one that disagrees with the
    body, and the server's own validation will name the bad argument.  Integers
    outside the 2^53 safe range are sent as their exact decimal, like the body.
    Values go through :func:`encode_header_value`; names are lower-cased.
    """
    out: list[tuple[bytes, bytes]] = []
    for param in params:
        value: Any = arguments
        for key in param.path:
            if not isinstance(value, Mapping):
                value = None
                break
            value = value.get(key)
        if value is None:
            continue
        text = _header_text(param, value)
        if text is None:
            continue
        name = b"mcp-param-" + param.header.lower().encode("ascii")
        out.append((name, encode_header_value(text)))
    return out
