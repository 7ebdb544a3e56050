"""The JSON Schema validator, keyword by keyword and draft by draft (issue 15, part 2).

Each case is (schema, instance, valid), written from the specification (the ideas of
the official JSON-Schema-Test-Suite, not its files).  Every case is also checked
against the ``jsonschema`` library, except the few where we differ on purpose
(``DIVERGENT``: exact ``multipleOf`` on floats).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from sansmcp.core.schema.budget import Budget, BudgetExhausted, DepthExceeded
from sansmcp.core.schema.nodes import key_of
from sansmcp.core.schema.validator import SchemaError, compile_schema

D7 = "http://json-schema.org/draft-07/schema#"
D2020 = "https://json-schema.org/draft/2020-12/schema"
STEPS = 1_000_000
DEPTH = 64


def d7(schema: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": D7, **schema}


CASES: list[tuple[Any, Any, bool]] = [
    # boolean schemas and the empty one
    (True, 1, True),
    (False, 1, False),
    ({}, {"a": [1]}, True),
    ({"not": {}}, None, False),
    # type: bool is no number, 1.0 is an integer
    ({"type": "integer"}, 1, True),
    ({"type": "integer"}, 1.0, True),
    ({"type": "integer"}, 1.5, False),
    ({"type": "integer"}, True, False),
    ({"type": "number"}, 1, True),
    ({"type": "number"}, 2.5, True),
    ({"type": "number"}, False, False),
    ({"type": "boolean"}, False, True),
    ({"type": "boolean"}, 0, False),
    ({"type": "null"}, None, True),
    ({"type": "null"}, 0, False),
    ({"type": "string"}, "x", True),
    ({"type": "array"}, [], True),
    ({"type": "object"}, [], False),
    ({"type": ["string", "null"]}, None, True),
    ({"type": ["string", "null"]}, 1, False),
    ({"type": ["integer", "string"]}, 3.0, True),
    # enum / const: JSON equality
    ({"enum": [1, "a", None]}, 1.0, True),
    ({"enum": [1, "a", None]}, True, False),
    ({"enum": [False]}, 0, False),
    ({"enum": [[1, {"a": True}]]}, [1.0, {"a": True}], True),
    ({"enum": [[1, {"a": True}]]}, [1, {"a": 1}], False),
    ({"const": {"a": [1, 2]}}, {"a": [1, 2.0]}, True),
    ({"const": {"a": [1, 2]}}, {"a": [2, 1]}, False),
    ({"const": {"a": 1}}, {"a": 1, "b": 2}, False),
    ({"const": None}, None, True),
    ({"const": "1"}, 1, False),
    # numbers
    ({"minimum": 2}, 2, True),
    ({"minimum": 2}, 1.9, False),
    ({"maximum": 2.5}, 2.5, True),
    ({"maximum": 2.5}, 3, False),
    ({"exclusiveMinimum": 2}, 2, False),
    ({"exclusiveMinimum": 2}, 2.01, True),
    ({"exclusiveMaximum": 2}, 2, False),
    ({"exclusiveMaximum": 2}, 1, True),
    (d7({"exclusiveMaximum": 2}), 2, False),
    (d7({"exclusiveMinimum": 0}), 1, True),
    ({"minimum": 0}, "not a number", True),
    ({"multipleOf": 3}, 9, True),
    ({"multipleOf": 3}, 10, False),
    ({"multipleOf": 3}, 9.0, True),
    ({"multipleOf": 0.5}, 1.5, True),
    ({"multipleOf": 0.5}, 1.25, False),
    ({"multipleOf": 0.1}, 0.3, True),  # DIVERGENT: jsonschema's float division says no
    ({"multipleOf": 0.01}, 19.99, True),  # DIVERGENT
    ({"multipleOf": 2}, 10**30, True),
    ({"multipleOf": 1e-308}, 1e308, True),
    ({"multipleOf": 1}, 1e308, True),
    # strings: code points
    ({"minLength": 2}, "ab", True),
    ({"minLength": 2}, "a", False),
    ({"minLength": 2}, "\U0001f600", False),
    ({"maxLength": 2}, "\U0001f600\U0001f600", True),
    ({"maxLength": 2}, "abc", False),
    ({"minLength": 2.0}, "ab", True),
    ({"maxLength": 0}, 12, True),
    ({"pattern": "^[a-z]+$"}, "abc", True),
    ({"pattern": "^[a-z]+$"}, "ab1", False),
    ({"pattern": "b"}, "abc", True),
    ({"pattern": "^\\d{3}-\\d{4}$"}, "555-1234", True),
    ({"pattern": "^\\d{3}-\\d{4}$"}, "555-12345", False),
    ({"format": "email"}, "not an email", True),  # format is an annotation
    # arrays, 2020-12
    ({"prefixItems": [{"type": "string"}], "items": False}, ["a"], True),
    ({"prefixItems": [{"type": "string"}], "items": False}, ["a", 1], False),
    ({"prefixItems": [{"type": "string"}]}, [1], False),
    ({"prefixItems": [{"type": "string"}]}, ["a", 1], True),
    ({"items": {"type": "integer"}}, [1, 2, 3], True),
    ({"items": {"type": "integer"}}, [1, "2"], False),
    # arrays, draft-07
    (d7({"items": [{"type": "string"}], "additionalItems": False}), ["a"], True),
    (d7({"items": [{"type": "string"}], "additionalItems": False}), ["a", 1], False),
    (d7({"items": [{"type": "string"}], "additionalItems": {"type": "integer"}}), ["a", 1], True),
    (d7({"items": {"type": "string"}}), ["a", "b"], True),
    (d7({"items": [{"type": "string"}]}), ["a", 1], True),
    (d7({"items": {"type": "string"}}), ["a", 1], False),
    (d7({"items": {"type": "string"}, "additionalItems": False}), ["a", "b"], True),
    (d7({"prefixItems": [{"type": "string"}]}), [1], True),  # not a draft-07 keyword
    ({"minItems": 2}, [1], False),
    ({"minItems": 2}, [1, 2], True),
    ({"maxItems": 1}, [1, 2], False),
    ({"uniqueItems": True}, [1, 1.0], False),
    ({"uniqueItems": True}, [1, True], True),
    ({"uniqueItems": True}, [[1], [1]], False),
    ({"uniqueItems": True}, [{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
    ({"uniqueItems": True}, [{"a": 1}, {"a": 2}], True),
    ({"uniqueItems": False}, [1, 1], True),
    ({"contains": {"type": "integer"}}, ["a", 2], True),
    ({"contains": {"type": "integer"}}, ["a"], False),
    ({"contains": {"type": "integer"}}, [], False),
    ({"contains": {"type": "integer"}, "minContains": 2}, [1, "a"], False),
    ({"contains": {"type": "integer"}, "minContains": 2}, [1, 2], True),
    ({"contains": {"type": "integer"}, "maxContains": 1}, [1, 2], False),
    ({"contains": {"type": "integer"}, "maxContains": 1}, [1, "a"], True),
    ({"contains": {"type": "integer"}, "minContains": 0}, [], True),
    ({"contains": {"type": "integer"}, "minContains": 0, "maxContains": 0}, [1], False),
    (d7({"contains": {"type": "integer"}, "minContains": 2}), [1], True),
    # objects
    ({"properties": {"a": {"type": "integer"}}}, {"a": 1}, True),
    ({"properties": {"a": {"type": "integer"}}}, {"a": "x"}, False),
    ({"properties": {"a": {"type": "integer"}}}, {"b": "x"}, True),
    ({"properties": {"a": True, "b": False}}, {"a": 1}, True),
    ({"properties": {"a": True, "b": False}}, {"b": 1}, False),
    ({"required": ["a", "b"]}, {"a": 1}, False),
    ({"required": ["a"]}, {"a": None}, True),
    ({"required": []}, {}, True),
    ({"required": ["a"]}, ["a"], True),
    ({"additionalProperties": False, "properties": {"a": {}}}, {"a": 1}, True),
    ({"additionalProperties": False, "properties": {"a": {}}}, {"a": 1, "b": 2}, False),
    ({"additionalProperties": {"type": "string"}}, {"x": "y"}, True),
    ({"additionalProperties": {"type": "string"}}, {"x": 1}, False),
    ({"additionalProperties": True}, {"x": 1}, True),
    ({"patternProperties": {"^x-": {"type": "integer"}}}, {"x-a": 1, "y": "s"}, True),
    ({"patternProperties": {"^x-": {"type": "integer"}}}, {"x-a": "s"}, False),
    (
        {"patternProperties": {"^x-": {}}, "additionalProperties": False, "properties": {"a": {}}},
        {"x-1": 1, "a": 2},
        True,
    ),
    ({"patternProperties": {"^x-": {}}, "additionalProperties": False}, {"y": 1}, False),
    ({"propertyNames": {"maxLength": 2}}, {"ab": 1}, True),
    ({"propertyNames": {"maxLength": 2}}, {"abc": 1}, False),
    ({"propertyNames": {"pattern": "^[a-z]+$"}}, {"Ab": 1}, False),
    ({"minProperties": 1}, {}, False),
    ({"minProperties": 1}, {"a": 1}, True),
    ({"maxProperties": 1}, {"a": 1, "b": 2}, False),
    ({"dependentRequired": {"a": ["b"]}}, {"a": 1}, False),
    ({"dependentRequired": {"a": ["b"]}}, {"a": 1, "b": 1}, True),
    ({"dependentRequired": {"a": ["b"]}}, {"b": 1}, True),
    ({"dependentSchemas": {"c": {"required": ["d"]}}}, {"c": 1}, False),
    ({"dependentSchemas": {"c": {"required": ["d"]}}}, {"c": 1, "d": 2}, True),
    ({"dependentSchemas": {"c": {"required": ["d"]}}}, {"e": 1}, True),
    ({"dependencies": {"a": ["b"]}}, {"a": 1}, True),  # not a 2020-12 keyword
    (d7({"dependencies": {"a": ["b"]}}), {"a": 1}, False),
    (d7({"dependencies": {"a": ["b"]}}), {"a": 1, "b": 2}, True),
    (d7({"dependencies": {"c": {"required": ["d"]}}}), {"c": 1}, False),
    (d7({"dependencies": {"c": {"required": ["d"]}}}), {"c": 1, "d": 1}, True),
    (d7({"dependentRequired": {"a": ["b"]}}), {"a": 1}, True),  # not a draft-07 keyword
    # applicators
    ({"allOf": [{"type": "integer"}, {"minimum": 2}]}, 3, True),
    ({"allOf": [{"type": "integer"}, {"minimum": 2}]}, 1, False),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, "a", True),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, None, False),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, 1, True),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, 3, False),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, 1.5, False),
    ({"oneOf": [{}, {}, {}]}, 1, False),
    ({"not": {"type": "string"}}, "a", False),
    ({"not": {"type": "string"}}, 1, True),
    ({"if": {"type": "integer"}, "then": {"minimum": 5}, "else": {"type": "string"}}, 6, True),
    ({"if": {"type": "integer"}, "then": {"minimum": 5}, "else": {"type": "string"}}, 3, False),
    ({"if": {"type": "integer"}, "then": {"minimum": 5}, "else": {"type": "string"}}, "a", True),
    ({"if": {"type": "integer"}, "then": {"minimum": 5}, "else": {"type": "string"}}, 1.5, False),
    ({"if": {"type": "integer"}, "then": {"minimum": 5}}, "a", True),
    ({"if": {"type": "integer"}, "else": {"type": "string"}}, 1, True),
    ({"if": False}, 1, True),
    ({"then": False}, 1, True),  # without if, then and else are ignored
    # $ref
    (
        {"$defs": {"pos": {"type": "integer", "exclusiveMinimum": 0}}, "$ref": "#/$defs/pos"},
        0,
        False,
    ),
    (
        {"$defs": {"pos": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/pos"}}},
        {"n": 1},
        True,
    ),
    (
        {"$ref": "#/$defs/a", "$defs": {"a": {"type": "integer"}}, "minimum": 5},
        3,
        False,
    ),  # 2020: siblings
    (
        d7({"$ref": "#/definitions/a", "definitions": {"a": {"type": "integer"}}, "minimum": 5}),
        3,
        True,
    ),
    (
        d7({"definitions": {"a~b/c": {"type": "string"}}, "$ref": "#/definitions/a~0b~1c"}),
        "x",
        True,
    ),
    (d7({"definitions": {"a~b/c": {"type": "string"}}, "$ref": "#/definitions/a~0b~1c"}), 1, False),
    ({"$defs": {"a b": {"type": "string"}}, "$ref": "#/$defs/a%20b"}, 1, False),
    ({"prefixItems": [{"type": "string"}, {"$ref": "#/prefixItems/0"}]}, ["a", 1], False),
    ({"properties": {"a": {"type": "string"}, "b": {"$ref": "#/properties/a"}}}, {"b": "x"}, True),
    (
        {
            "$defs": {
                "tree": {
                    "type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}},
                }
            },
            "$ref": "#/$defs/tree",
        },
        {"kids": [{"kids": []}, {"kids": [{}]}]},
        True,
    ),
    (
        {
            "$defs": {
                "tree": {
                    "type": "object",
                    "properties": {"kids": {"items": {"$ref": "#/$defs/tree"}}},
                }
            },
            "$ref": "#/$defs/tree",
        },
        {"kids": [{"kids": [1]}]},
        False,
    ),
    ({"$defs": {"a": {"$anchor": "foo", "type": "string"}}, "$ref": "#foo"}, 1, False),
    ({"$defs": {"a": {"$anchor": "foo", "type": "string"}}, "$ref": "#foo"}, "x", True),
    (d7({"definitions": {"a": {"$id": "#foo", "type": "string"}}, "$ref": "#foo"}), 1, False),
    (
        {
            "$id": "http://example.com/root.json",
            "$defs": {"i": {"$id": "item.json", "type": "string"}},
            "items": {"$ref": "item.json"},
        },
        ["x", 1],
        False,
    ),
    (
        {
            "$id": "http://example.com/root.json",
            "$defs": {"i": {"$id": "item.json", "type": "string"}},
            "items": {"$ref": "item.json"},
        },
        ["x"],
        True,
    ),
    (
        {
            "$id": "http://example.com/root.json",
            "items": {"$ref": "http://example.com/root.json#/$defs/s"},
            "$defs": {"s": {"type": "string"}},
        },
        [1],
        False,
    ),
    (
        {
            "$id": "http://example.com/r",
            "$defs": {"i": {"$id": "sub/", "$defs": {"j": {"$id": "leaf", "type": "integer"}}}},
            "$ref": "sub/leaf",
        },
        "x",
        False,
    ),
    (
        {
            "$defs": {"i": {"$id": "http://e.com/x", "$anchor": "a", "type": "integer"}},
            "$ref": "http://e.com/x#a",
        },
        "s",
        False,
    ),
    # annotations and unknown keywords are ignored
    (
        {"title": "t", "description": "d", "default": 1, "examples": [2], "x-extra": {"type": 1}},
        "s",
        True,
    ),
    ({"unevaluatedProperties": True, "unevaluatedItems": {}}, {"a": 1}, True),
    (d7({"unevaluatedProperties": False}), {"a": 1}, True),
    (
        {"$comment": "c", "deprecated": True, "readOnly": True, "contentMediaType": "text/plain"},
        1,
        True,
    ),
    ({"$schema": D2020, "type": "string"}, 1, False),
    ({"$schema": D2020 + "#", "type": "string"}, "a", True),
]

# Where the jsonschema library answers otherwise, and why we do not follow it.
DIVERGENT = {
    (repr({"multipleOf": 0.1}), repr(0.3)): "float division: 0.3 / 0.1 = 2.9999999999999996",
    (repr({"multipleOf": 0.01}), repr(19.99)): "float division",
    (repr({"multipleOf": 1e-308}), repr(1e308)): "float division overflows",
}


def valid(schema: Any, instance: Any) -> bool:
    compiled = compile_schema(schema, max_steps=STEPS, max_depth=DEPTH)
    return compiled.validate(instance, max_steps=STEPS, max_depth=DEPTH) is None


@pytest.mark.parametrize(
    ("schema", "instance", "expected"), CASES, ids=[str(i) for i in range(len(CASES))]
)
def test_case(schema: Any, instance: Any, expected: bool) -> None:
    assert valid(schema, instance) is expected
    library = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if (repr(schema), repr(instance)) not in DIVERGENT:
        assert library(schema).is_valid(instance) is expected
    else:
        assert library(schema).is_valid(instance) is not expected


REFUSED: list[tuple[Any, str]] = [
    (1, "neither an object nor a boolean"),
    ({"$schema": "http://json-schema.org/draft-04/schema#"}, "names a draft we do not support"),
    ({"$schema": 7}, "names a draft we do not support"),
    ({"$ref": "http://example.com/other.json"}, "is not inside the schema (never fetched)"),
    ({"$ref": "other.json#/a"}, "is not inside the schema"),
    ({"$ref": "#/$defs/missing"}, "points nowhere in the schema"),
    ({"$ref": "#/items/5", "items": [1]}, "points nowhere"),
    ({"$ref": "#/x/01", "x": [True, True]}, "points nowhere"),
    ({"$ref": "#/x/-1", "x": [True]}, "points nowhere"),
    ({"$ref": "#/type/a", "type": "string"}, "points nowhere"),
    ({"$ref": "#nothere"}, "names no anchor of the schema"),
    ({"$ref": 5}, "$ref is not a string"),
    (
        {"$id": "http://[::1", "$ref": "#"},
        "'#' against the base 'http://[::1' is not a valid URI reference",
    ),
    (
        {"$id": "http://x/", "$ref": "http://[::1/#"},
        "'http://[::1/#' against the base 'http://x/' is not a valid URI",
    ),
    (
        {"$id": "http://x/", "$defs": {"a": {"$id": "http://[::1"}}, "$ref": "#"},
        "is not a valid URI",
    ),
    ({"$ref": "#/x", "x": 5}, "a subschema is a int, not an object or boolean"),
    ({"$dynamicRef": "#a"}, "$dynamicRef is not supported"),
    ({"$recursiveRef": "#"}, "$recursiveRef is not supported"),
    ({"unevaluatedProperties": False}, "unevaluatedProperties is not supported"),
    ({"unevaluatedItems": {"type": "string"}}, "unevaluatedItems is not supported"),
    ({"type": "float"}, "type names no JSON Schema type"),
    ({"type": 5}, "type names no JSON Schema type"),
    ({"type": ["string", 1]}, "type names no JSON Schema type"),
    ({"enum": 5}, "enum is not an array"),
    ({"minimum": "1"}, "minimum is not a number"),
    ({"maximum": True}, "maximum is not a number"),
    ({"multipleOf": 0}, "multipleOf is not a finite number > 0"),
    ({"multipleOf": -2}, "multipleOf is not a finite number > 0"),
    ({"minLength": -1}, "minLength is not a non-negative integer"),
    ({"maxLength": 1.5}, "maxLength is not a non-negative integer"),
    ({"maxItems": True}, "maxItems is not a non-negative integer"),
    ({"pattern": 5}, "a pattern is not a string"),
    ({"pattern": "(a)\\1"}, "backreferences are not supported"),
    ({"pattern": "(?=a)"}, "lookaround"),
    ({"patternProperties": {"(?<=a)b": {}}}, "lookaround"),
    ({"patternProperties": []}, "patternProperties is not an object"),
    ({"properties": []}, "properties is not an object"),
    ({"required": "a"}, "required is not an array of strings"),
    ({"required": [1]}, "required is not an array of strings"),
    ({"dependentRequired": []}, "dependentRequired is not an object"),
    ({"dependentRequired": {"a": "b"}}, "dependentRequired is not an array of strings"),
    ({"allOf": {}}, "allOf is not an array of schemas"),
    ({"$ref": "#/$defs/a", "$defs": {"a": {}}, "anyOf": {}}, "anyOf is not an array of schemas"),
    ({"anyOf": [1]}, "a subschema is a int"),
    ({"not": "x"}, "a subschema is a str"),
    (d7({"items": [5]}), "a subschema is a int"),
    (d7({"dependencies": {"a": 5}}), "a subschema is a int"),
    ({"items": [{"type": "string"}]}, "a subschema is a list"),  # 2020-12: prefixItems
]


@pytest.mark.parametrize(("schema", "message"), REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_refused(schema: Any, message: str) -> None:
    with pytest.raises(SchemaError) as refused:
        compile_schema(schema, max_steps=STEPS, max_depth=DEPTH)
    assert message in str(refused.value)


def test_the_draft_is_read_from_schema() -> None:
    assert compile_schema({}, max_steps=10, max_depth=4).draft == "2020-12"
    assert compile_schema(d7({}), max_steps=10, max_depth=4).draft == "draft-07"
    assert (
        compile_schema(
            {"$schema": "https://json-schema.org/draft-07/schema"}, max_steps=10, max_depth=4
        ).draft
        == "draft-07"
    )
    assert compile_schema(True, max_steps=10, max_depth=4).draft == "2020-12"


MISMATCHES: list[tuple[Any, Any, str, str]] = [
    ({"type": "object"}, 1, "type", ""),
    (
        {"properties": {"a": {"properties": {"b/c~": {"minimum": 0}}}}},
        {"a": {"b/c~": -1}},
        "minimum",
        "/a/b~1c~0",
    ),
    ({"items": {"required": ["id"]}}, [{"id": 1}, {}], "required", "/1/id"),
    ({"prefixItems": [{}], "items": False}, [1, 2], "items", "/1"),
    (d7({"items": [{}], "additionalItems": False}), [1, 2], "additionalItems", "/1"),
    ({"additionalProperties": False}, {"zz": 1}, "additionalProperties", "/zz"),
    ({"patternProperties": {"^a": {"type": "string"}}}, {"ab": 1}, "type", "/ab"),
    ({"propertyNames": {"maxLength": 1}}, {"long": 1}, "propertyNames", "/long"),
    ({"dependentRequired": {"a": ["b"]}}, {"a": 1}, "dependentRequired", "/b"),
    ({"dependentSchemas": {"a": {"required": ["c"]}}}, {"a": 1}, "required", "/c"),
    ({"allOf": [{"properties": {"x": False}}]}, {"x": 1}, "false", "/x"),
    ({"anyOf": [False]}, 1, "anyOf", ""),
    ({"contains": {"type": "string"}}, [1], "contains", ""),
    ({"contains": {"type": "string"}, "minContains": 2}, ["a"], "minContains", ""),
    ({"contains": {"type": "string"}, "maxContains": 1}, ["a", "b"], "maxContains", ""),
    ({"uniqueItems": True}, [1, 1], "uniqueItems", ""),
    (
        {"properties": {"k" * 100: {"type": "string"}}},
        {"k" * 100: 1},
        "type",
        "/" + "k" * 40 + "...",
    ),
]


@pytest.mark.parametrize(("schema", "instance", "keyword", "pointer"), MISMATCHES)
def test_the_mismatch_names_the_path_and_keyword(
    schema: Any, instance: Any, keyword: str, pointer: str
) -> None:
    mismatch = compile_schema(schema, max_steps=STEPS, max_depth=DEPTH).validate(
        instance, max_steps=STEPS, max_depth=DEPTH
    )
    assert mismatch is not None
    assert (mismatch.keyword, mismatch.pointer()) == (keyword, pointer)


def test_a_long_pointer_is_cut() -> None:
    schema: Any = {"type": "string"}
    instance: Any = 1
    for _ in range(30):
        schema = {"properties": {"abcdefghij": schema}}
        instance = {"abcdefghij": instance}
    mismatch = compile_schema(schema, max_steps=STEPS, max_depth=DEPTH).validate(
        instance, max_steps=STEPS, max_depth=DEPTH
    )
    assert mismatch is not None
    assert len(mismatch.pointer()) == 203 and mismatch.pointer().endswith("...")


# ---------------------------------------------------------------- bounds


def test_steps_are_bounded_when_validating() -> None:
    schema = compile_schema({"items": {"type": "integer"}}, max_steps=100, max_depth=8)
    assert schema.validate(list(range(50)), max_steps=100, max_depth=8) is None
    with pytest.raises(BudgetExhausted) as spent:
        schema.validate(list(range(200)), max_steps=100, max_depth=8)
    assert spent.value.limit == 100
    assert str(spent.value) == "more than 100 steps"


def test_compiling_is_bounded() -> None:
    wide = {"properties": {f"p{i}": {"type": "string"} for i in range(500)}}
    compile_schema(wide, max_steps=10_000, max_depth=8)
    with pytest.raises(BudgetExhausted):
        compile_schema(wide, max_steps=500, max_depth=8)
    with pytest.raises(BudgetExhausted):  # the scan alone
        compile_schema(
            {"$ref": "#/$defs/d0", "$defs": {f"d{i}": {} for i in range(100)}},
            max_steps=50,
            max_depth=8,
        )
    with pytest.raises(BudgetExhausted):  # a pointer walk
        compile_schema(
            {"$ref": "#/a/b/c/d", "a": {"b": {"c": {"d": True}}}}, max_steps=4, max_depth=8
        )


def deep(levels: int, leaf: Any = True) -> Any:
    schema = leaf
    for _ in range(levels):
        schema = {"items": schema}
    return schema


def test_nesting_is_bounded_when_compiling() -> None:
    compile_schema(deep(30), max_steps=STEPS, max_depth=32)
    with pytest.raises(DepthExceeded):  # a $ref: the scan of the document counts too
        compile_schema(
            {"$ref": "#/$defs/a", "$defs": {"a": deep(40)}}, max_steps=STEPS, max_depth=32
        )
    with pytest.raises(DepthExceeded):  # under an unknown keyword: no scan, the compiler counts
        compile_schema({"$ref": "#/x", "x": deep(40)}, max_steps=STEPS, max_depth=32)
    with pytest.raises(DepthExceeded) as deeper:
        compile_schema(deep(40), max_steps=STEPS, max_depth=32)
    assert deeper.value.limit == 32 and str(deeper.value) == "nested deeper than 32 levels"
    # the deepest the Limits allow compiles and validates without reaching the recursion limit
    for wrap in ("items", "allOf", "not"):
        schema: Any = {"type": "integer"}
        for _ in range(200):
            schema = {wrap: [schema]} if wrap == "allOf" else {wrap: schema}
        with pytest.raises(DepthExceeded):
            compile_schema(schema, max_steps=STEPS, max_depth=128)


def test_nesting_is_bounded_when_validating() -> None:
    itself = compile_schema({"$ref": "#"}, max_steps=STEPS, max_depth=128)
    with pytest.raises(DepthExceeded):
        itself.validate(1, max_steps=STEPS, max_depth=128)
    looping = compile_schema(
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, max_steps=STEPS, max_depth=128
    )
    with pytest.raises(DepthExceeded):
        looping.validate(1, max_steps=STEPS, max_depth=128)
    tree = compile_schema({"items": {"$ref": "#"}}, max_steps=STEPS, max_depth=128)
    value: Any = []
    for _ in range(60):  # two schemas a level: the root and its items
        value = [value]
    assert tree.validate(value, max_steps=STEPS, max_depth=128) is None
    for _ in range(10):
        value = [value]
    with pytest.raises(DepthExceeded):
        tree.validate(value, max_steps=STEPS, max_depth=128)


def test_equality_keys_are_iterative_and_charged() -> None:
    value: Any = 1
    for _ in range(2000):  # deeper than the recursion limit
        value = [{"a": value}]
    assert key_of(value, Budget(10**6)) == key_of(value, Budget(10**6))
    with pytest.raises(BudgetExhausted):
        key_of(value, Budget(100))
    assert key_of([True, 1.0, {"b": "1", "a": None}], Budget(10)) == (
        ("[", 3),
        ("b", True),
        ("n", 1.0),
        ("{", 2),
        ("k", "a"),
        ("z", None),
        ("k", "b"),
        ("s", "1"),
        ("}", None),
        ("]", None),
    )
    assert key_of([1], Budget(5)) == key_of([1.0], Budget(5)) != key_of([True], Budget(5))
    assert key_of([[1], 2], Budget(9)) != key_of([[1, 2]], Budget(9))
    assert key_of({"a": [1]}, Budget(9)) != key_of([{"a": 1}], Budget(9))


def _spent_out(schema: Any, instance: Any, steps: int) -> bool:
    compiled = compile_schema(schema, max_steps=10**6, max_depth=DEPTH)
    try:
        compiled.validate(instance, max_steps=steps, max_depth=DEPTH)
    except BudgetExhausted:
        return True
    return False


def test_work_a_schema_multiplies_is_charged() -> None:
    """Schema-sized loops run per instance value are paid for, so a wide schema against a
    wide instance ends by the budget instead of doing (schema x instance) free work."""
    names = [f"n{i}" for i in range(300)]
    full = {name: 0 for name in names}
    objects = [full] * 300  # 300 x 300 lookups of "required"
    assert _spent_out({"items": {"required": names}}, objects, 50_000)
    assert not _spent_out({"items": {"required": names}}, objects[:10], 50_000)
    assert _spent_out(
        {"items": {"dependentRequired": {n: names for n in names[:3]}}}, objects, 50_000
    )
    assert _spent_out({"items": {"not": {"anyOf": [False] * 1000}}}, [0] * 1000, 50_000)
    assert _spent_out({"items": {"oneOf": [*[False] * 999, True]}}, [0] * 1000, 50_000)
    wide = {"properties": {name: {"type": "integer"} for name in names}}
    assert _spent_out({"items": wide}, objects, 50_000)  # 300 present members each
    small = [{"n1": 0}] * 10_000  # the smaller side is walked: 10,000 x 1, not x 300
    assert not _spent_out({"items": wide}, small, 50_000)
