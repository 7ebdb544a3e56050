"""The rules of one ``tools/list`` entry: one small predicate per field rule, each giving the
reason the entry is skipped (None: accepted).

Theory of operation
-------------------
Both judges of an entry ask these predicates, in the order :func:`~sansmcp.core.tools.validate_tool`
documents: ``validate_tool`` on parsed values, the typed listing pass
(:func:`~sansmcp.core.listing.validate_entry`) on what msgspec decoded.  Each schema is
reduced to what its rules read, its root's ``type`` (:func:`schema_root` for a parsed one),
with three values no JSON document holds: :data:`MISSING` (the member is absent),
:data:`NOT_OBJECT`, :data:`UNTYPED`.  The typed pass holds the type rules of ``name``,
``description`` and ``title`` in its struct (an entry breaking them declines the whole body to
``validate_tool``), and asks a predicate only for a value other than the one it accepts at
sight (``"object"`` as a root type, a dict as annotations, a non-empty str as a name, a size
within the bound): one comparison per field on its happy path.  ``tests/core/test_tool_rules.py``
drives each predicate through a table, those accepted-at-sight values included.  The
``x-mcp-header`` rule is :func:`~sansmcp.core.tools.header_params_or_fault` (its walk lives
there).  Pure functions; nothing here keeps state.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "MISSING",
    "NOT_OBJECT",
    "UNTYPED",
    "annotations_fault",
    "description_fault",
    "entry_fault",
    "execution_fault",
    "input_schema_fault",
    "kept_task_support",
    "kept_title",
    "name_fault",
    "output_schema_fault",
    "schema_root",
    "size_fault",
    "task_support_of",
]


class _Fact:
    """A value no JSON document holds, naming what an entry's member is not."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return self.label


#: A member the entry does not have.
MISSING: Any = _Fact("MISSING")
#: The root of a schema that is not a JSON object.
NOT_OBJECT: Any = _Fact("NOT_OBJECT")
#: The root of a schema object without a ``type``.
UNTYPED: Any = _Fact("UNTYPED")


def entry_fault(entry: Any) -> str | None:
    """An entry must be a JSON object."""
    return None if isinstance(entry, dict) else "tool entry is not a JSON object"


def name_fault(name: Any) -> str | None:
    """``name``: a non-empty string with a UTF-8 form.  A lone surrogate (in an entry built
    by hand: the decoders refuse a ``"\\ud800"`` escape) has none, so no ``Mcp-Name`` header
    could ever equal it."""
    if not isinstance(name, str):
        return "tool name is missing" if name is MISSING else "tool name is not a string"
    if not name:
        return "tool name is empty"
    if not name.isascii():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            return "tool name is not valid Unicode"
    return None


def description_fault(description: Any) -> str | None:
    """``description``: a string when present (absent reads as ``""``)."""
    return None if isinstance(description, str) else "description is not a string"


def kept_title(title: Any) -> str | None:
    """``title`` is display-only: an ill-typed one is dropped (None), never fatal."""
    return title if isinstance(title, str) else None


def schema_root(schema: Any) -> Any:
    """A parsed schema reduced to what the schema rules read: its root's ``type``
    (:data:`UNTYPED` without one), :data:`NOT_OBJECT` or :data:`MISSING`."""
    if isinstance(schema, dict):
        return schema.get("type", UNTYPED)
    return MISSING if schema is MISSING else NOT_OBJECT


def input_schema_fault(root: Any) -> str | None:
    """``inputSchema``: present, an object, of ``type`` ``"object"`` when it has one (many
    servers omit it for parameterless tools: the arguments' root is an object anyway)."""
    if root is MISSING:
        return "inputSchema is missing"
    if root is NOT_OBJECT:
        return "inputSchema is not a JSON object"
    if root is UNTYPED or root == "object":
        return None
    return 'inputSchema has a "type" other than "object"'


def output_schema_fault(root: Any, modern: bool) -> str | None:
    """``outputSchema``: an object when present; the legacy revisions also require its
    ``type``, when present, to be ``"object"``."""
    if root is NOT_OBJECT:
        return "outputSchema is not a JSON object"
    if modern or root is MISSING or root is UNTYPED or root == "object":
        return None
    return 'outputSchema has a "type" other than "object" (legacy revisions)'


def annotations_fault(annotations: Any) -> str | None:
    """``annotations``: an object when present."""
    if annotations is MISSING or isinstance(annotations, dict):
        return None
    return "annotations is not a JSON object"


def task_support_of(execution: Any) -> Any:
    """``execution.taskSupport`` of a parsed ``execution`` (None when it is not an object
    or has none: ``execution`` is not checked further)."""
    return execution.get("taskSupport") if isinstance(execution, dict) else None


def kept_task_support(task_support: Any) -> str | None:
    """The ``taskSupport`` a Tool keeps: ``"optional"`` or ``"required"`` (a call may run as
    a task); anything else reads as the spec's default, ``"forbidden"`` (None)."""
    return task_support if task_support in ("optional", "required") else None


def execution_fault(task_support: Any, tasks: bool = False) -> str | None:
    """``execution.taskSupport`` must not be ``"required"`` unless the Conn runs calls as
    2025-11-25 tasks (``tasks``: ``Config.tasks`` and the server's capability)."""
    if task_support == "required" and not tasks:
        return 'execution.taskSupport is "required" (tasks are not supported)'
    return None


def size_fault(text_size: int, size: int, limit: int) -> str | None:
    """The definition's size bound (``Limits.max_tool_bytes``): ``text_size`` is the UTF-8
    length of name, description and title, ``size`` that plus the kept JSON of the schemas
    and annotations (``text_size`` again when they are not yet serialised: texts over the
    bound already skip the entry before they are)."""
    if text_size > limit:
        how, over = "is over", text_size
    elif size > limit:
        how, over = "is", size
    else:
        return None
    return f"tool definition {how} {over:,} bytes; limit is {limit:,} (Limits.max_tool_bytes)"
