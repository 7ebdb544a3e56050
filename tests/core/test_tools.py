"""Tool validation, x-mcp-header, header value encoding and tool results (sansmcp.core.tools)."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import ServerAnswered
from sansmcp.core.results import CallResult, Content, parse_call_result
from sansmcp.core.tools import (
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_NODES,
    HeaderParam,
    SkippedTool,
    Tool,
    encode_header_value,
    header_params_of,
    param_headers,
    validate_tool,
)
from tests.tiers import examples

BIG = 256 << 10


def ok(raw: Any, *, modern: bool = True, max_tool_bytes: int = BIG) -> Tool:
    tool = validate_tool(0, raw, modern=modern, max_tool_bytes=max_tool_bytes)
    assert isinstance(tool, Tool), tool
    return tool


def skipped(raw: Any, *, modern: bool = True, max_tool_bytes: int = BIG) -> SkippedTool:
    tool = validate_tool(7, raw, modern=modern, max_tool_bytes=max_tool_bytes)
    assert isinstance(tool, SkippedTool), tool
    assert tool.index == 7
    return tool


def tool_with(schema: Any) -> dict[str, Any]:
    return {"name": "t", "inputSchema": schema}


def prop(**kw: Any) -> dict[str, Any]:
    return {"type": "object", "properties": kw}


# ------------------------------------------------------------------ validate_tool


_TEXTS = st.one_of(st.none(), st.text(max_size=8), st.integers())
_SCHEMAS = st.dictionaries(
    st.sampled_from(["type", "properties", "x", "é"]),
    st.one_of(st.text(max_size=4), st.integers(), st.none()),
    max_size=3,
)


@settings(max_examples=examples(200, 60), deadline=None)
@given(
    name=st.text(min_size=1, max_size=8),
    description=_TEXTS,
    title=_TEXTS,
    output=st.one_of(st.none(), _SCHEMAS),
    annotations=st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.booleans())),
    modern=st.booleans(),
)
def test_validated_tool_equals_one_built_by_init(
    name: str, description: Any, title: Any, output: Any, annotations: Any, modern: bool
) -> None:
    """validate_tool fills its Tool through the slots, not __init__: every field is set, and
    the value equals (and reads like) the Tool that __init__ builds from the same fields."""
    raw: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    for key, value in (("description", description), ("title", title)):
        if value is not None:
            raw[key] = value
    if output is not None:
        raw["outputSchema"] = {**output, "type": "object"}
    if annotations is not None:
        raw["annotations"] = annotations
    tool = validate_tool(3, raw, modern=modern, max_tool_bytes=BIG)
    if not isinstance(tool, Tool):
        assert isinstance(description, int) or any(0xD800 <= ord(c) < 0xE000 for c in name)
        return
    fields = {f.name: getattr(tool, f.name) for f in dataclasses.fields(Tool)}
    assert tool == Tool(**fields)
    assert repr(tool) == repr(Tool(**fields))
    assert fields["name"] == name
    assert fields["description"] == ("" if description is None else description)
    assert fields["title"] == (title if isinstance(title, str) else None)
    assert fields["annotations"] == annotations
    assert json.loads(fields["input_schema"]) == raw["inputSchema"]
    expected_output = None if output is None else raw["outputSchema"]
    assert (fields["output_schema"] and json.loads(fields["output_schema"])) == expected_output
    assert fields["header_params"] == ()
    assert (fields["output_schema"] is None) == (output is None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tool.name = "other"  # type: ignore[misc]


def test_minimal_tool() -> None:
    tool = ok({"name": "echo", "inputSchema": {"type": "object"}})
    assert tool == Tool(name="echo", description="", input_schema=b'{"type":"object"}')
    assert tool.title is None and tool.annotations is None and tool.output_schema is None
    assert tool.header_params == ()
    assert not tool.idempotent


def test_full_tool_and_to_dict_shape() -> None:
    schema = {
        "type": "object",
        "properties": {"z": {"type": "string", "description": "é"}, "a": {"type": "integer"}},
        "required": ["z"],
        "$defs": {"X": {"const": 1}},
        "x-custom": [1, {"b": None, "a": True}],
    }
    raw = {
        "name": "weather",
        "title": "Weather",
        "description": "Get the weather",
        "inputSchema": schema,
        "outputSchema": {"type": "object", "properties": {"t": {"type": "number"}}},
        "annotations": {"idempotentHint": True, "title": "W"},
        "icons": [{"src": "https://x/i.png"}],
        "_meta": {"k": 1},
    }
    tool = ok(raw)
    assert tool.title == "Weather"
    assert tool.description == "Get the weather"
    assert tool.annotations == {"idempotentHint": True, "title": "W"}
    assert tool.idempotent
    assert tool.output_schema == b'{"type":"object","properties":{"t":{"type":"number"}}}'
    # compact, every keyword kept, key order preserved, non-ASCII not escaped
    assert tool.input_schema == json.dumps(
        schema, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")
    assert list(json.loads(tool.input_schema)) == [
        "type",
        "properties",
        "required",
        "$defs",
        "x-custom",
    ]
    assert list(json.loads(tool.input_schema)["properties"]) == ["z", "a"]
    d = tool.to_dict()
    assert list(d) == ["name", "description", "input_schema"]
    assert d == {"name": "weather", "description": "Get the weather", "input_schema": schema}
    assert list(d["input_schema"]) == list(schema)
    # a fresh object on each call
    d["input_schema"]["type"] = "mutated"
    assert tool.to_dict()["input_schema"]["type"] == "object"


@pytest.mark.parametrize(
    ("annotations", "idempotent"),
    [
        ({"idempotentHint": True}, True),
        ({"idempotentHint": False}, False),
        ({"idempotentHint": 1}, False),
        ({"idempotentHint": "true"}, False),
        ({}, False),
    ],
)
def test_idempotent_only_for_true(annotations: dict[str, Any], idempotent: bool) -> None:
    tool = ok({"name": "t", "inputSchema": {}, "annotations": annotations})
    assert tool.idempotent is idempotent


def test_missing_type_tolerated() -> None:
    assert ok(tool_with({})).input_schema == b"{}"
    assert ok(tool_with({"properties": {"a": {}}})).input_schema == b'{"properties":{"a":{}}}'


def test_ill_typed_title_ignored() -> None:
    assert ok({"name": "t", "title": 5, "inputSchema": {}}).title is None


@pytest.mark.parametrize(
    ("raw", "name", "reason"),
    [
        ("tool", None, "not a JSON object"),
        (["name"], None, "not a JSON object"),
        (None, None, "not a JSON object"),
        ({"inputSchema": {}}, None, "name is missing"),
        ({"name": 3, "inputSchema": {}}, None, "name is not a string"),
        ({"name": None, "inputSchema": {}}, None, "name is not a string"),
        ({"name": "", "inputSchema": {}}, "", "name is empty"),
        ({"name": "t", "description": 1, "inputSchema": {}}, "t", "description"),
        ({"name": "t", "description": None, "inputSchema": {}}, "t", "description"),
        ({"name": "t"}, "t", "inputSchema is missing"),
        ({"name": "t", "inputSchema": None}, "t", "inputSchema is not a JSON object"),
        ({"name": "t", "inputSchema": []}, "t", "inputSchema is not a JSON object"),
        ({"name": "t", "inputSchema": True}, "t", "inputSchema is not a JSON object"),
        ({"name": "t", "inputSchema": {"type": "string"}}, "t", '"type" other than "object"'),
        ({"name": "t", "inputSchema": {"type": ["object"]}}, "t", '"type" other than "object"'),
        ({"name": "t", "inputSchema": {"type": None}}, "t", '"type" other than "object"'),
        ({"name": "t", "inputSchema": {}, "outputSchema": None}, "t", "outputSchema"),
        ({"name": "t", "inputSchema": {}, "outputSchema": True}, "t", "outputSchema"),
        ({"name": "t", "inputSchema": {}, "outputSchema": "x"}, "t", "outputSchema"),
        ({"name": "t", "inputSchema": {}, "annotations": []}, "t", "annotations"),
        ({"name": "t", "inputSchema": {}, "annotations": None}, "t", "annotations"),
        (
            {"name": "t", "inputSchema": {}, "execution": {"taskSupport": "required"}},
            "t",
            "taskSupport",
        ),
    ],
)
def test_skip_reasons(raw: Any, name: str | None, reason: str) -> None:
    for modern in (True, False):
        skip = skipped(raw, modern=modern)
        assert skip.name == name
        assert reason in skip.reason


@pytest.mark.parametrize("support", ["optional", "forbidden", None])
def test_task_support_other_than_required_is_fine(support: Any) -> None:
    tool = ok({"name": "t", "inputSchema": {}, "execution": {"taskSupport": support}})
    assert tool.task_support == ("optional" if support == "optional" else None)
    assert ok({"name": "t", "inputSchema": {}, "execution": "weird"}).task_support is None


def test_output_schema_root_per_era() -> None:
    arr = {"name": "t", "inputSchema": {}, "outputSchema": {"type": "array"}}
    assert ok(arr, modern=True).output_schema == b'{"type":"array"}'
    assert "legacy" in skipped(arr, modern=False).reason
    untyped = {"name": "t", "inputSchema": {}, "outputSchema": {"properties": {}}}
    assert ok(untyped, modern=False).output_schema == b'{"properties":{}}'
    obj = {"name": "t", "inputSchema": {}, "outputSchema": {"type": "object"}}
    assert ok(obj, modern=False).output_schema == b'{"type":"object"}'


def test_size_bound_counts_kept_fields() -> None:
    raw = {
        "name": "né",  # 3 bytes
        "description": "ü",  # 2 bytes
        "title": "T",  # 1 byte
        "inputSchema": {},  # 2 bytes
        "outputSchema": {},  # 2 bytes
        "annotations": {},  # 2 bytes
        "icons": ["x" * 1000],  # not kept, not counted
    }
    assert isinstance(validate_tool(0, raw, modern=True, max_tool_bytes=12), Tool)
    skip = skipped(raw, max_tool_bytes=11)
    assert skip.name == "né"
    assert "12 bytes" in skip.reason and "11" in skip.reason
    assert "Limits.max_tool_bytes" in skip.reason


def test_size_bound_with_absent_optionals() -> None:
    raw = {"name": "ab", "inputSchema": {}}  # 4 bytes
    ok(raw, max_tool_bytes=4)
    assert "4 bytes" in skipped(raw, max_tool_bytes=3).reason


def test_texts_over_the_size_bound_skip_before_the_schemas_are_serialised() -> None:
    # 1 + 11 bytes of text over a limit of 11: skipped on the texts alone, so the
    # unserialisable schema (which would say "not serialisable") is never encoded.
    raw = {"name": "t", "description": "\U0001f600" * 2 + "abc", "inputSchema": {"x": {1, 2}}}
    skip = skipped(raw, max_tool_bytes=11)
    assert skip.reason == ("tool definition is over 12 bytes; limit is 11 (Limits.max_tool_bytes)")
    assert "not serialisable" in skipped(raw, max_tool_bytes=12).reason


def test_unserialisable_schema_is_skipped() -> None:
    skip = skipped({"name": "t", "inputSchema": {"minimum": float("nan")}})
    assert "not serialisable" in skip.reason
    skip = skipped({"name": "t", "inputSchema": {}, "annotations": {(1, 2): 1}})
    assert "not serialisable" in skip.reason


def test_lone_surrogates() -> None:
    # json.loads('"\\ud800"') yields a lone surrogate; nothing may raise on it.
    lone = json.loads('"a\\ud800"')
    skip = skipped({"name": lone, "inputSchema": {}})
    assert skip.name == lone and "not valid Unicode" in skip.reason
    tool = ok({"name": "t", "description": lone, "title": lone, "inputSchema": {"d": lone}})
    assert tool.description == lone
    assert tool.input_schema == b'{"d":"a\\ud800"}'
    assert json.loads(tool.input_schema) == {"d": lone}
    # the surrogate counts as its 3-byte code unit: 1 + 4 + 2 bytes
    small = {"name": "t", "description": lone, "inputSchema": {}}
    ok(small, max_tool_bytes=7)
    assert "7 bytes" in skipped(small, max_tool_bytes=6).reason
    assert encode_header_value(lone) == b"=?base64?" + base64.b64encode(b"a\xed\xa0\x80") + b"?="


def test_x_mcp_header_only_for_modern() -> None:
    schema = prop(region={"type": "string", "x-mcp-header": "Region"})
    tool = ok(tool_with(schema), modern=True)
    assert tool.header_params == (HeaderParam(header="Region", path=("region",), type="string"),)
    assert ok(tool_with(schema), modern=False).header_params == ()
    bad = prop(region={"type": "number", "x-mcp-header": "Region"})
    skip = skipped(tool_with(bad), modern=True)
    assert skip.name == "t" and skip.reason.startswith("invalid x-mcp-header:")
    assert "number" in skip.reason and "/properties/region" in skip.reason
    assert ok(tool_with(bad), modern=False).header_params == ()


def test_spec_example_tool() -> None:
    raw = {
        "name": "execute_sql",
        "description": "Execute SQL on Google Cloud Spanner",
        "inputSchema": {
            "type": "object",
            "properties": {
                "region": {
                    "type": "string",
                    "description": "The region to execute the query in",
                    "x-mcp-header": "Region",
                },
                "query": {"type": "string", "description": "The SQL query to execute"},
            },
            "required": ["region", "query"],
        },
    }
    tool = ok(raw)
    headers = param_headers(tool.header_params, {"region": "us-west1", "query": "SELECT 1"})
    assert headers == [(b"mcp-param-region", b"us-west1")]


# ------------------------------------------------------------------ header_params_of


def test_header_params_nested_and_ordered() -> None:
    schema = {
        "type": "object",
        "properties": {
            "b": {"type": "boolean", "x-mcp-header": "Flag"},
            "outer": {
                "type": "object",
                "properties": {
                    "inner": {
                        "type": "object",
                        "properties": {"n": {"type": "integer", "x-mcp-header": "Deep-N"}},
                    }
                },
            },
            "x-mcp-header": {"type": "string", "x-mcp-header": "Named_Oddly"},
            "plain": {"type": "string"},
        },
        # instance data may contain the key without it being an annotation
        "default": {"x-mcp-header": "nope"},
        "examples": [{"x-mcp-header": "nope"}],
        "const": {"x-mcp-header": "nope"},
        "enum": [{"x-mcp-header": "nope"}],
        "required": ["x-mcp-header"],
    }
    assert header_params_of(schema) == (
        HeaderParam(header="Flag", path=("b",), type="boolean"),
        HeaderParam(header="Deep-N", path=("outer", "inner", "n"), type="integer"),
        HeaderParam(header="Named_Oddly", path=("x-mcp-header",), type="string"),
    )


def test_header_params_of_non_schema_values() -> None:
    assert header_params_of(True) == ()
    assert header_params_of("x") == ()
    assert header_params_of({}) == ()
    assert header_params_of([{"type": "object"}]) == ()


@pytest.mark.parametrize("header", ["Region", "a", "X-Tenant-Id", "!#$%&'*+-.^_`|~09AZaz", "0"])
def test_valid_header_tokens(header: str) -> None:
    schema = prop(p={"type": "string", "x-mcp-header": header})
    assert header_params_of(schema)[0].header == header


def _invalid(schema: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        header_params_of(schema)
    assert fragment in str(info.value)
    # and the tool is skipped, with that reason
    skip = skipped(tool_with(schema))
    assert fragment in skip.reason


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        ("", "empty"),
        ("Re gion", "not an HTTP token"),
        ("Région", "not an HTTP token"),
        ("a:b", "not an HTTP token"),
        ("a(b)", "not an HTTP token"),
        ('a"b', "not an HTTP token"),
        ("a\r\nb", "control characters"),
        ("a\tb", "control characters"),
        ("a\x7fb", "control characters"),
        ("a\x00", "control characters"),
        (5, "not a string"),
        (None, "not a string"),
        (["Region"], "not a string"),
    ],
)
def test_invalid_header_values(header: Any, fragment: str) -> None:
    _invalid(prop(p={"type": "string", "x-mcp-header": header}), fragment)


@pytest.mark.parametrize(
    "type_",
    [
        "number",
        "object",
        "array",
        "null",
        ["string", "null"],
        ["string"],
        None,
        {"x": 1},
    ],
)
def test_invalid_types(type_: Any) -> None:
    _invalid(prop(p={"type": type_, "x-mcp-header": "P"}), "only a single string")


def test_missing_type_rejected_even_with_enum() -> None:
    _invalid(prop(p={"enum": ["a", "b"], "x-mcp-header": "P"}), "type is missing")


def test_unserialisable_type_is_described() -> None:
    _invalid_direct = prop(p={"type": float("nan"), "x-mcp-header": "P"})
    with pytest.raises(ValueError, match="type is not JSON"):
        header_params_of(_invalid_direct)


def test_duplicates_differing_in_case() -> None:
    schema = prop(
        a={"type": "string", "x-mcp-header": "Region"},
        b={"type": "object", "properties": {"c": {"type": "string", "x-mcp-header": "REGION"}}},
    )
    _invalid(schema, "duplicates the one at /properties/a")


def test_exact_duplicates() -> None:
    _invalid(
        prop(a={"type": "string", "x-mcp-header": "X"}, b={"type": "integer", "x-mcp-header": "X"}),
        "duplicates",
    )


ANN = {"type": "string", "x-mcp-header": "H"}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "x-mcp-header": "H"},  # the root itself
        prop(a={"type": "array", "items": ANN}),
        prop(a={"type": "array", "prefixItems": [ANN]}),
        prop(a={"type": "array", "contains": ANN}),
        {"type": "object", "additionalProperties": ANN},
        {"type": "object", "unevaluatedProperties": ANN},
        {"type": "object", "patternProperties": {"^a": ANN}},
        {"type": "object", "propertyNames": ANN},
        {"type": "object", "anyOf": [prop(a=ANN)]},
        {"type": "object", "oneOf": [prop(a=ANN)]},
        {"type": "object", "allOf": [prop(a=ANN)]},
        {"type": "object", "not": prop(a=ANN)},
        {"type": "object", "if": prop(a=ANN)},
        {"type": "object", "then": prop(a=ANN)},
        {"type": "object", "else": prop(a=ANN)},
        {"type": "object", "$defs": {"A": prop(a=ANN)}, "properties": {"a": {"$ref": "#/$defs/A"}}},
        {
            "type": "object",
            "definitions": {"A": ANN},
            "properties": {"a": {"$ref": "#/definitions/A"}},
        },
        {"type": "object", "dependentSchemas": {"a": prop(b=ANN)}},
        {"type": "object", "dependencies": {"a": prop(b=ANN)}},
        {"type": "object", "x-vendor": {"nested": ANN}},
        prop(a={"anyOf": [ANN, {"type": "null"}]}),
        prop(a={"type": "object", "additionalProperties": prop(b=ANN)}),
        {"type": "object", "items": {"properties": {"a": ANN}}},  # properties below items
        {"type": "object", "properties": [ANN]},  # properties that is not a map
    ],
)
def test_unreachable_placements(schema: Any) -> None:
    _invalid(schema, "not on a property reachable")


def test_ref_sibling_properties_are_reachable() -> None:
    # the chain is properties/a/properties/b: it does not pass through $ref
    schema = prop(a={"$ref": "#/$defs/A", "properties": {"b": ANN}})
    assert header_params_of(schema) == (HeaderParam(header="H", path=("a", "b"), type="string"),)


def test_definitions_without_annotations_do_not_invalidate() -> None:
    schema = {
        "type": "object",
        "$defs": {"A": {"type": "string"}, "B": {"properties": {"c": {"type": "integer"}}}},
        "properties": {"a": {"$ref": "#/$defs/A", "type": "string", "x-mcp-header": "A"}},
        "anyOf": [{"required": ["a"]}],
    }
    assert header_params_of(schema) == (HeaderParam(header="A", path=("a",), type="string"),)


def test_unreachable_message_names_location() -> None:
    with pytest.raises(ValueError, match=r"at /anyOf/0/properties/a~1b~0c "):
        header_params_of({"anyOf": [{"properties": {"a/b~c": ANN}}]})
    with pytest.raises(ValueError, match="at the schema root"):
        header_params_of({"x-mcp-header": "H"})


def test_walk_bound_nodes() -> None:
    schema = prop(a=ANN)
    schema["x-filler"] = [[] for _ in range(MAX_SCHEMA_NODES)]
    _invalid(schema, "more than 10,000")
    # without an annotation the walk is not even attempted by validate_tool
    del schema["properties"]
    assert ok(tool_with(schema)).header_params == ()


def test_walk_bound_depth() -> None:
    deep: Any = ANN
    for _ in range(MAX_SCHEMA_DEPTH // 2 + 1):
        deep = {"type": "object", "properties": {"p": deep}}
    _invalid(deep, "deeper than")
    shallow: Any = ANN
    for _ in range(MAX_SCHEMA_DEPTH // 2 - 1):
        shallow = {"type": "object", "properties": {"p": shallow}}
    (param,) = header_params_of(shallow)
    assert len(param.path) == MAX_SCHEMA_DEPTH // 2 - 1


# ------------------------------------------------------------------ encoding


@pytest.mark.parametrize(
    ("original", "encoded"),
    [
        ("us-west1", b"us-west1"),
        ("Hello, 世界", b"=?base64?SGVsbG8sIOS4lueVjA==?="),
        (" padded ", b"=?base64?IHBhZGRlZCA=?="),
        ("line1\nline2", b"=?base64?bGluZTEKbGluZTI=?="),
        ("=?base64?literal?=", b"=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
    ],
)
def test_spec_encoding_examples(original: str, encoded: bytes) -> None:
    assert encode_header_value(original) == encoded


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ("", True),
        ("a b", True),
        ("~!@#$%^&*()", True),
        ("lead ", False),
        (" trail", False),
        ("tab\there", False),
        ("del\x7f", False),
        ("nul\x00", False),
        ("é", False),
        ("=?base64?", True),  # prefix but no suffix
        ("x?=", True),
        ("=?base64?=", False),  # overlapping prefix and suffix still matches the pattern
        ("=?BASE64?x?=", True),  # markers are case-sensitive
        ("=?base64?x?= ", False),
    ],
)
def test_encoding_rules(value: str, plain: bool) -> None:
    out = encode_header_value(value)
    if plain:
        assert out == value.encode("ascii")
    else:
        assert out.startswith(b"=?base64?") and out.endswith(b"?=")
        assert base64.b64decode(out[9:-2], validate=True).decode("utf-8") == value


@given(st.text(max_size=40))
@settings(max_examples=examples(200), deadline=None)
def test_encoding_round_trips(value: str) -> None:
    out = encode_header_value(value)
    assert all(0x20 <= b <= 0x7E for b in out)
    assert out[:1] != b" " and out[-1:] != b" "
    if out.startswith(b"=?base64?") and out.endswith(b"?="):
        assert base64.b64decode(out[9:-2], validate=True).decode("utf-8") == value
    else:
        assert out.decode("ascii") == value


# ------------------------------------------------------------------ param_headers

PARAMS = (
    HeaderParam(header="Region", path=("region",), type="string"),
    HeaderParam(header="Count", path=("n",), type="integer"),
    HeaderParam(header="Dry-Run", path=("dry",), type="boolean"),
    HeaderParam(header="Tenant", path=("ctx", "tenant"), type="string"),
)


def test_param_headers_all_present() -> None:
    args = {"region": "eu", "n": 42, "dry": False, "ctx": {"tenant": "Acme Ü"}}
    assert param_headers(PARAMS, args) == [
        (b"mcp-param-region", b"eu"),
        (b"mcp-param-count", b"42"),
        (b"mcp-param-dry-run", b"false"),
        (b"mcp-param-tenant", b"=?base64?" + base64.b64encode("Acme Ü".encode()) + b"?="),
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({}, []),
        ({"region": None, "n": None, "dry": None, "ctx": None}, []),
        ({"ctx": {"tenant": None}}, []),
        ({"ctx": "notamap"}, []),
        ({"ctx": ["tenant"]}, []),
        ({"n": -7}, [(b"mcp-param-count", b"-7")]),
        ({"n": 0}, [(b"mcp-param-count", b"0")]),
        ({"n": 42.0}, [(b"mcp-param-count", b"42")]),
        ({"n": -3.0}, [(b"mcp-param-count", b"-3")]),
        ({"n": 2**60}, [(b"mcp-param-count", str(2**60).encode())]),
        ({"n": 1.5}, []),
        ({"n": float("inf")}, []),
        ({"n": float("nan")}, []),
        ({"n": True}, []),
        ({"n": "42"}, []),
        ({"dry": True}, [(b"mcp-param-dry-run", b"true")]),
        ({"dry": 1}, []),
        ({"dry": "true"}, []),
        ({"region": 5}, []),
        ({"region": True}, []),
        ({"region": {"a": 1}}, []),
        ({"region": ""}, [(b"mcp-param-region", b"")]),
        ({"region": " x"}, [(b"mcp-param-region", b"=?base64?IHg=?=")]),
    ],
)
def test_param_headers_conversions(args: dict[str, Any], expected: list[Any]) -> None:
    assert param_headers(PARAMS, args) == expected


def test_param_headers_empty_params() -> None:
    assert param_headers((), {"a": 1}) == []


# ------------------------------------------------------------------ parse_call_result

PNG = b"\x89PNG\r\n\x1a\n\x00"
PNG64 = base64.b64encode(PNG).decode()


def test_five_content_types() -> None:
    ann = {"audience": ["user"], "priority": 0.5}
    result = {
        "resultType": "complete",
        "content": [
            {"type": "text", "text": "hi", "annotations": ann},
            {"type": "image", "data": PNG64, "mimeType": "image/png"},
            {"type": "audio", "data": "AAEC", "mimeType": "audio/wav", "annotations": "bad"},
            {
                "type": "resource",
                "resource": {"uri": "file:///a", "text": "body", "mimeType": "text/plain"},
            },
            {"type": "resource", "resource": {"uri": "file:///b", "blob": "AP8=", "mimeType": 5}},
            {"type": "resource_link", "uri": "file:///c", "name": "c", "mimeType": "text/x"},
            {"type": "resource_link", "uri": "file:///d", "name": "d"},
        ],
    }
    out = parse_call_result(result, modern=True)
    assert out == CallResult(
        content=[
            Content(type="text", text="hi", annotations=ann),
            Content(type="image", data=PNG, mime_type="image/png"),
            Content(type="audio", data=b"\x00\x01\x02", mime_type="audio/wav"),
            Content(type="resource", text="body", uri="file:///a", mime_type="text/plain"),
            Content(type="resource", data=b"\x00\xff", uri="file:///b"),
            Content(type="resource_link", uri="file:///c", name="c", mime_type="text/x"),
            Content(type="resource_link", uri="file:///d", name="d"),
        ],
        is_error=False,
        structured_content=None,
    )


BAD_BLOCKS: list[Any] = [
    "text",
    None,
    {"text": "no type"},
    {"type": "text"},
    {"type": "text", "text": 5},
    {"type": "image", "data": PNG64},
    {"type": "image", "mimeType": "image/png"},
    {"type": "image", "data": 5, "mimeType": "image/png"},
    {"type": "image", "data": "not base64!", "mimeType": "image/png"},
    {"type": "image", "data": "AAE", "mimeType": "image/png"},  # bad padding
    {"type": "image", "data": "AA\nEC", "mimeType": "image/png"},  # whitespace: strict
    {"type": "audio", "data": "AAEC", "mimeType": None},
    {"type": "audio", "data": "AAé=", "mimeType": "audio/wav"},  # non-ASCII
    {"type": "resource"},
    {"type": "resource", "resource": "x"},
    {"type": "resource", "resource": {"text": "no uri"}},
    {"type": "resource", "resource": {"uri": 5, "text": "t"}},
    {"type": "resource", "resource": {"uri": "u"}},
    {"type": "resource", "resource": {"uri": "u", "text": 5}},
    {"type": "resource", "resource": {"uri": "u", "blob": "@@@@"}},
    {"type": "resource_link", "uri": "u"},
    {"type": "resource_link", "name": "n"},
    {"type": "resource_link", "uri": "u", "name": 5},
    {"type": "tool_use", "id": "1", "name": "x", "input": {}},
    {"type": "tool_result", "toolUseId": "1", "content": []},
    {"type": "video", "data": "AAEC"},
]


@pytest.mark.parametrize("block", BAD_BLOCKS)
def test_bad_block_is_dropped(block: Any) -> None:
    good = {"type": "text", "text": "ok"}
    out = parse_call_result({"content": [block, good]}, modern=True)
    assert out.content == [Content(type="text", text="ok")]


def test_some_arrived_none_survived() -> None:
    with pytest.raises(ServerAnswered) as info:
        parse_call_result({"content": BAD_BLOCKS}, modern=False)
    assert info.value.reason == "no_usable_content"
    assert str(len(BAD_BLOCKS)) in info.value.message


def test_empty_content_is_a_valid_result() -> None:
    out = parse_call_result({"content": []}, modern=False)
    assert out == CallResult(content=[], is_error=False, structured_content=None)


@pytest.mark.parametrize(
    "result", [{}, {"content": None}, {"content": {}}, {"content": "x"}, [], "x"]
)
def test_content_must_be_a_list(result: Any) -> None:
    with pytest.raises(ServerAnswered) as info:
        parse_call_result(result, modern=True)
    assert info.value.reason == "malformed_result"


@pytest.mark.parametrize(("value", "expected"), [(True, True), (False, False)])
def test_is_error(value: bool, expected: bool) -> None:
    out = parse_call_result({"content": [], "isError": value}, modern=True)
    assert out.is_error is expected


@pytest.mark.parametrize("value", [None, 0, 1, "true", []])
def test_is_error_ill_typed(value: Any) -> None:
    with pytest.raises(ServerAnswered) as info:
        parse_call_result({"content": [], "isError": value}, modern=True)
    assert info.value.reason == "malformed_result"


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ({"b": 1, "a": [1, 2.5, "é"]}, '{"b":1,"a":[1,2.5,"é"]}'.encode()),
        ([1, 2], b"[1,2]"),
        ("s", b'"s"'),
        (3, b"3"),
        (False, b"false"),
        (None, b"null"),
    ],
)
def test_structured_content_modern_any_json(value: Any, encoded: bytes) -> None:
    out = parse_call_result({"content": [], "structuredContent": value}, modern=True)
    assert out.structured_content == encoded


def test_structured_content_legacy_object_only() -> None:
    out = parse_call_result({"content": [], "structuredContent": {"t": 22.5}}, modern=False)
    assert out.structured_content == b'{"t":22.5}'
    for value in ([1], "s", 3, None, True):
        with pytest.raises(ServerAnswered) as info:
            parse_call_result({"content": [], "structuredContent": value}, modern=False)
        assert info.value.reason == "malformed_structured_content"


def test_structured_content_not_strict_json() -> None:
    with pytest.raises(ServerAnswered) as info:
        parse_call_result({"content": [], "structuredContent": {"x": float("inf")}}, modern=True)
    assert info.value.reason == "malformed_structured_content"


def test_spec_example_result() -> None:
    result = json.loads(
        '{"resultType":"complete","content":[{"type":"text","text":"{\\"temperature\\": 22.5}"}],'
        '"structuredContent":{"temperature":22.5,"conditions":"Partly cloudy","humidity":65}}'
    )
    out = parse_call_result(result, modern=True)
    assert out.content == [Content(type="text", text='{"temperature": 22.5}')]
    assert (
        out.structured_content == b'{"temperature":22.5,"conditions":"Partly cloudy","humidity":65}'
    )
    assert out.is_error is False


# ------------------------------------------------------------------ never raises

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=12)
keys = st.sampled_from(
    [
        "name",
        "description",
        "title",
        "inputSchema",
        "outputSchema",
        "annotations",
        "execution",
        "taskSupport",
        "type",
        "properties",
        "items",
        "anyOf",
        "x-mcp-header",
        "content",
        "isError",
        "structuredContent",
        "text",
        "data",
        "mimeType",
        "uri",
        "resource",
        "blob",
        "required",
        "object",
        "string",
        "integer",
        "idempotentHint",
    ]
) | st.text(max_size=6)
json_values = st.recursive(
    scalars | st.sampled_from(["object", "string", "integer", "text", "image", "resource", "AAEC"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5),
    max_leaves=30,
)


@given(raw=json_values, modern=st.booleans(), limit=st.integers(0, 400))
@settings(max_examples=examples(300), deadline=None)
def test_validate_tool_never_raises(raw: Any, modern: bool, limit: int) -> None:
    out = validate_tool(3, raw, modern=modern, max_tool_bytes=limit)
    assert isinstance(out, (Tool, SkippedTool))
    if isinstance(out, Tool):
        assert json.loads(out.input_schema) == raw["inputSchema"]
        assert not modern or out.header_params == header_params_of(raw["inputSchema"])


@given(result=json_values, modern=st.booleans())
@settings(max_examples=examples(300), deadline=None)
def test_parse_call_result_raises_only_server_answered(result: Any, modern: bool) -> None:
    try:
        out = parse_call_result(result, modern=modern)
    except ServerAnswered as exc:
        assert exc.reason in {
            "malformed_result",
            "no_usable_content",
            "malformed_structured_content",
        }
    else:
        assert isinstance(out, CallResult)
        assert len(out.content) <= len(result["content"])
