"""Tool results: a complete ``tools/call`` result as a :class:`CallResult`.

Theory of operation
-------------------
:func:`parse_call_result` turns the parsed result into a :class:`CallResult` with
the flat five-type :class:`Content` (spec brief §f.2-f.4): a block of an unknown
type or with a malformed field is refused, not guessed at; the only exception it
raises is :class:`~sansmcp.core.errors.ServerAnswered`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ServerAnswered
from .jsonvalue import JsonError, dumps_compact

__all__ = ["CallResult", "Content", "parse_call_result"]

_CONTENT_TYPES = ("text", "image", "audio", "resource", "resource_link")


@dataclass(frozen=True, slots=True, kw_only=True)
class Content:
    """One content block of a tool result, flattened over the five allowed types.

    * ``text``: ``text``.
    * ``image`` / ``audio``: ``data`` (decoded base64) and ``mime_type``.
    * ``resource`` (embedded): ``uri``, ``mime_type`` when given, and ``text`` for a
      text resource or ``data`` (decoded ``blob``) for a binary one.
    * ``resource_link``: ``uri``, ``name``, ``mime_type`` when given.

    ``annotations`` is the block's ``annotations`` object, when it is one.
    """

    type: str
    text: str | None = None
    data: bytes | None = None
    mime_type: str | None = None
    uri: str | None = None
    name: str | None = None
    annotations: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CallResult:
    """The outcome of a complete ``tools/call``.  ``is_error`` is the tool's verdict.

    ``validated`` is True when ``structured_content`` was checked against the tool's
    ``outputSchema`` and conforms (a result that does not conform is never returned:
    it raises ``ServerAnswered``); None when no schema was known, validation is off
    (``Config.validate_structured_content``) or the result is ``isError``.
    """

    content: list[Content]
    is_error: bool
    structured_content: bytes | None  # compact JSON, or None when absent
    validated: bool | None = None


def _b64(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _optional_str(block: Mapping[str, Any], key: str) -> str | None:
    value = block.get(key)
    return value if isinstance(value, str) else None


def _content(block: Any) -> Content | None:
    """One block, or None when it is of another type or lacks a required field."""
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    annotations = block.get("annotations")
    if not isinstance(annotations, dict):
        annotations = None
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            return None
        return Content(type="text", text=text, annotations=annotations)
    if kind in ("image", "audio"):
        mime = block.get("mimeType")
        data = _b64(block.get("data"))
        if data is None or not isinstance(mime, str):
            return None
        return Content(type=kind, data=data, mime_type=mime, annotations=annotations)
    if kind == "resource_link":
        uri = block.get("uri")
        name = block.get("name")
        if not isinstance(uri, str) or not isinstance(name, str):
            return None
        return Content(
            type="resource_link",
            uri=uri,
            name=name,
            mime_type=_optional_str(block, "mimeType"),
            annotations=annotations,
        )
    if kind == "resource":
        resource = block.get("resource")
        if not isinstance(resource, dict) or not isinstance(resource.get("uri"), str):
            return None
        text = resource.get("text")
        data = None
        if not isinstance(text, str):
            text = None
            data = _b64(resource.get("blob"))
            if data is None:
                return None
        return Content(
            type="resource",
            text=text,
            data=data,
            uri=resource["uri"],
            mime_type=_optional_str(resource, "mimeType"),
            annotations=annotations,
        )
    return None  # tool_use, tool_result, unknown


def parse_call_result(result: Mapping[str, Any], *, modern: bool) -> CallResult:
    """A complete ``tools/call`` result -> :class:`CallResult` (spec brief §f.2-f.4).

    Raises only :class:`ServerAnswered`: ``reason="malformed_result"`` when
    ``content`` is not a list or ``isError`` is present and not a boolean;
    ``"no_usable_content"`` when blocks arrived and none survived (other types,
    missing or ill-typed required fields, invalid base64 are dropped);
    ``"malformed_structured_content"`` when a legacy ``structuredContent`` is not an
    object (2026-07-28 allows any JSON value, null included) or it cannot be
    re-serialised as strict JSON.
    """
    if not isinstance(result, Mapping):
        raise ServerAnswered("tools/call result is not a JSON object", reason="malformed_result")
    blocks = result.get("content")
    if not isinstance(blocks, list):
        raise ServerAnswered("tools/call result has no content list", reason="malformed_result")
    content = [c for c in map(_content, blocks) if c is not None]
    if blocks and not content:
        raise ServerAnswered(
            f"tools/call result carried {len(blocks)} content block(s) and none was "
            "usable (unknown type, missing field or invalid base64)",
            reason="no_usable_content",
        )
    is_error = result.get("isError", False)
    if not isinstance(is_error, bool):
        raise ServerAnswered(
            "tools/call result has an isError that is not a boolean", reason="malformed_result"
        )
    structured: bytes | None = None
    if "structuredContent" in result:
        value = result["structuredContent"]
        if not modern and not isinstance(value, dict):
            raise ServerAnswered(
                "tools/call result has a structuredContent that is not a JSON object "
                "(required before 2026-07-28)",
                reason="malformed_structured_content",
            )
        try:
            structured = dumps_compact(value)
        except JsonError as exc:
            raise ServerAnswered(
                f"tools/call structuredContent is not strict JSON: {exc}",
                reason="malformed_structured_content",
            ) from None
    return CallResult(content=content, is_error=is_error, structured_content=structured)
