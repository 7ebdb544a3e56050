"""The rules of one ``tools/list`` entry, one predicate per field (sansmcp.core.toolrules), driven
through a table: each with the values it accepts (None) and those it refuses, with the exact
skip reason.  Both judges (``validate_tool`` and the typed ``listing.validate_entry``) ask
these predicates; the typed one skips the question for a value it accepts at sight, and the
rows marked ``at sight`` pin that each such value is accepted indeed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sansmcp.core.toolrules import (
    MISSING,
    NOT_OBJECT,
    UNTYPED,
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
from sansmcp.core.tools import HeaderParam, header_params_or_fault

_TYPE = 'inputSchema has a "type" other than "object"'
_LEGACY = 'outputSchema has a "type" other than "object" (legacy revisions)'
_LIMIT = "limit is 10 (Limits.max_tool_bytes)"

# (predicate, its arguments, the reason: None when accepted)
_RULES: list[tuple[Callable[..., str | None], tuple[Any, ...], str | None]] = [
    (entry_fault, ({},), None),
    (entry_fault, ({"name": "t"},), None),
    (entry_fault, ([],), "tool entry is not a JSON object"),
    (entry_fault, (None,), "tool entry is not a JSON object"),
    (entry_fault, ("t",), "tool entry is not a JSON object"),
    (name_fault, ("t",), None),  # at sight: a non-empty str
    (name_fault, ("météo",), None),
    (name_fault, ("\U0001f600",), None),
    (name_fault, (MISSING,), "tool name is missing"),
    (name_fault, (None,), "tool name is not a string"),
    (name_fault, (7,), "tool name is not a string"),
    (name_fault, (b"t",), "tool name is not a string"),
    (name_fault, ("",), "tool name is empty"),
    (name_fault, ("a\ud800",), "tool name is not valid Unicode"),
    (description_fault, ("",), None),
    (description_fault, ("does things",), None),
    (description_fault, (None,), "description is not a string"),
    (description_fault, (["a"],), "description is not a string"),
    (input_schema_fault, ("object",), None),  # at sight
    (input_schema_fault, (UNTYPED,), None),
    (input_schema_fault, (MISSING,), "inputSchema is missing"),
    (input_schema_fault, (NOT_OBJECT,), "inputSchema is not a JSON object"),
    (input_schema_fault, ("array",), _TYPE),
    (input_schema_fault, (None,), _TYPE),
    (input_schema_fault, (["object"],), _TYPE),
    (input_schema_fault, ("Object",), _TYPE),
    (output_schema_fault, ("object", False), None),  # at sight
    (output_schema_fault, ("object", True), None),  # at sight
    (output_schema_fault, (MISSING, False), None),
    (output_schema_fault, (MISSING, True), None),
    (output_schema_fault, (UNTYPED, False), None),
    (output_schema_fault, ("array", True), None),
    (output_schema_fault, (None, True), None),
    (output_schema_fault, (NOT_OBJECT, True), "outputSchema is not a JSON object"),
    (output_schema_fault, (NOT_OBJECT, False), "outputSchema is not a JSON object"),
    (output_schema_fault, ("array", False), _LEGACY),
    (output_schema_fault, (None, False), _LEGACY),
    (annotations_fault, ({},), None),  # at sight: a dict
    (annotations_fault, ({"readOnlyHint": True},), None),
    (annotations_fault, (MISSING,), None),
    (annotations_fault, (None,), "annotations is not a JSON object"),
    (annotations_fault, ([],), "annotations is not a JSON object"),
    (annotations_fault, ("x",), "annotations is not a JSON object"),
    (execution_fault, (None,), None),
    (execution_fault, ("forbidden",), None),
    (execution_fault, ("optional",), None),
    (execution_fault, (["required"],), None),
    (
        execution_fault,
        ("required",),
        'execution.taskSupport is "required" (tasks are not supported)',
    ),
    (size_fault, (10, 10, 10), None),  # at sight: a size within the bound
    (size_fault, (3, 8, 10), None),
    (size_fault, (10, 11, 10), f"tool definition is 11 bytes; {_LIMIT}"),
    (size_fault, (11, 11, 10), f"tool definition is over 11 bytes; {_LIMIT}"),
    (size_fault, (11, 5000, 10), f"tool definition is over 11 bytes; {_LIMIT}"),
    (
        size_fault,
        (1, 1_234_567, 1_000_000),
        "tool definition is 1,234,567 bytes; limit is 1,000,000 (Limits.max_tool_bytes)",
    ),
]


@pytest.mark.parametrize(("rule", "args", "reason"), _RULES)
def test_rule(rule: Callable[..., str | None], args: tuple[Any, ...], reason: str | None) -> None:
    assert rule(*args) == reason


@pytest.mark.parametrize(
    ("title", "kept"),
    [("Weather", "Weather"), ("", ""), (None, None), (3, None), ({"a": 1}, None), (MISSING, None)],
)
def test_title_is_kept_only_as_a_string(title: Any, kept: str | None) -> None:
    assert kept_title(title) == kept


@pytest.mark.parametrize(
    ("schema", "root"),
    [
        ({"type": "object"}, "object"),
        ({"type": None}, None),
        ({"type": ["object", "null"]}, ["object", "null"]),
        ({}, UNTYPED),
        ({"properties": {}}, UNTYPED),
        (MISSING, MISSING),
        (None, NOT_OBJECT),
        ([], NOT_OBJECT),
        ("object", NOT_OBJECT),
    ],
)
def test_schema_root(schema: Any, root: Any) -> None:
    assert schema_root(schema) == root


@pytest.mark.parametrize(
    ("execution", "support"),
    [
        ({"taskSupport": "required"}, "required"),
        ({"taskSupport": 1}, 1),
        ({}, None),
        (None, None),
        (["required"], None),
        ("required", None),
    ],
)
def test_task_support_of(execution: Any, support: Any) -> None:
    assert task_support_of(execution) == support


@pytest.mark.parametrize(
    ("support", "kept"),
    [
        ("optional", "optional"),
        ("required", "required"),
        ("forbidden", None),
        (1, None),
        (None, None),
    ],
)
def test_kept_task_support(support: Any, kept: Any) -> None:
    assert kept_task_support(support) == kept


def test_header_params_or_fault() -> None:
    good = {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": "R"}}}
    assert header_params_or_fault(good) == (
        (HeaderParam(header="R", path=("r",), type="string"),),
        None,
    )
    assert header_params_or_fault({"type": "object"}) == ((), None)
    bad = {"type": "object", "properties": {"r": {"type": "number", "x-mcp-header": "R"}}}
    params, reason = header_params_or_fault(bad)
    assert params == ()
    assert reason == (
        "invalid x-mcp-header: annotation 'R' at /properties/r is on a property whose type is "
        '"number"; only a single string, integer or boolean type is allowed'
    )


def test_the_facts_read_as_their_names() -> None:
    assert [repr(fact) for fact in (MISSING, NOT_OBJECT, UNTYPED)] == [
        "MISSING",
        "NOT_OBJECT",
        "UNTYPED",
    ]


# Entries breaking one rule each: both judges (the typed listing pass, and validate_tool on
# the parsed entry) skip them with the same reason; ``typed`` says the typed pass judged it
# itself (the struct did not decline the body to validate_tool).
_OBJECT = {"type": "object"}
_HEADER = {"type": "object", "properties": {"r": {"type": "number", "x-mcp-header": "R"}}}
_JUDGED: list[tuple[dict[str, Any], bool, bool, str]] = [
    ({"name": "", "inputSchema": _OBJECT}, True, True, "tool name is empty"),
    ({"name": 3, "inputSchema": _OBJECT}, True, False, "tool name is not a string"),
    ({"inputSchema": _OBJECT}, True, False, "tool name is missing"),
    ({"name": "t", "description": 1, "inputSchema": _OBJECT}, True, False, "description is"),
    ({"name": "t"}, True, True, "inputSchema is missing"),
    ({"name": "t", "inputSchema": []}, True, True, "inputSchema is not a JSON object"),
    ({"name": "t", "inputSchema": {"type": "array"}}, True, True, _TYPE),
    ({"name": "t", "inputSchema": {}, "outputSchema": 1}, True, True, "outputSchema is not"),
    ({"name": "t", "inputSchema": {}, "outputSchema": {"type": "x"}}, False, True, _LEGACY),
    ({"name": "t", "inputSchema": {}, "annotations": []}, True, True, "annotations is not"),
    (
        {"name": "t", "inputSchema": {}, "execution": {"taskSupport": "required"}},
        True,
        True,
        'execution.taskSupport is "required" (tasks are not supported)',
    ),
    ({"name": "t" * 40, "inputSchema": {}}, True, True, "tool definition is over 40 bytes"),
    ({"name": "t", "inputSchema": {"a": "b" * 40}}, True, True, "tool definition is 49 bytes"),
    ({"name": "t", "inputSchema": _HEADER}, True, True, "invalid x-mcp-header: annotation 'R'"),
]


@pytest.mark.parametrize(("entry", "modern", "typed", "reason"), _JUDGED)
def test_both_judges_give_each_rules_reason(
    entry: dict[str, Any], modern: bool, typed: bool, reason: str
) -> None:
    import json

    from sansmcp.core.limits import Limits
    from sansmcp.core.listing import _Entry, parse_page, validate_entry
    from sansmcp.core.tools import SkippedTool, validate_tool

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": [entry]}}).encode()
    (raw,) = parse_page(body, Limits())["result"]["tools"]
    assert isinstance(raw, _Entry) is typed
    limit = 39 if reason.startswith("tool definition") else 1 << 20
    fast = validate_entry(4, raw, modern=modern, max_tool_bytes=limit)
    slow = validate_tool(4, entry, modern=modern, max_tool_bytes=limit)
    assert isinstance(fast, SkippedTool) and fast == slow
    assert fast.reason.startswith(reason)
