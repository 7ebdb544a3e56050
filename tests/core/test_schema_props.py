"""The validator against the ``jsonschema`` library on generated schemas (issue 15, part 2).

Schemas are drawn from the supported subset, in both drafts, and instances from small
JSON values shaped to meet them half-way (the same few property names, small
numbers, short ASCII texts).  Left out, because we differ on purpose: ``multipleOf``
with a float (we are exact), and non-ASCII text under ``pattern`` (ECMA-262 classes
are ASCII, Python's are Unicode).
"""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from sansmcp.core.schema.budget import BudgetExhausted, DepthExceeded
from sansmcp.core.schema.nodes import Mismatch
from sansmcp.core.schema.validator import SchemaError, compile_schema
from tests.tiers import examples

D7 = "http://json-schema.org/draft-07/schema#"
NAMES = ["a", "b", "c"]
PATTERNS = ["^a", "b$", "^[a-c]+$", "\\d", "a|b", "^(ab)*$", "x?y", "^.{2}$"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.5, 1.0, -2.0, 2.5]),
    st.text(alphabet="abc1y", max_size=3),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from([*NAMES, "x-1", "d"]), inner, max_size=3),
    ),
    max_leaves=8,
)
counts = st.integers(0, 3)
numbers = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5, 2.0]))
type_names = st.sampled_from(["null", "boolean", "object", "array", "number", "string", "integer"])


def leaf_keywords(draft7: bool) -> st.SearchStrategy[dict[str, Any]]:
    choices: list[st.SearchStrategy[dict[str, Any]]] = [
        type_names.map(lambda t: {"type": t}),
        st.lists(type_names, min_size=1, max_size=3, unique=True).map(lambda t: {"type": t}),
        st.lists(json_values, min_size=1, max_size=3).map(lambda e: {"enum": e}),
        json_values.map(lambda c: {"const": c}),
        st.tuples(
            st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]), numbers
        ).map(lambda t: {t[0]: t[1]}),
        st.integers(1, 3).map(lambda m: {"multipleOf": m}),
        st.tuples(
            st.sampled_from(
                ["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"]
            ),
            counts,
        ).map(lambda t: {t[0]: t[1]}),
        st.sampled_from(PATTERNS).map(lambda p: {"pattern": p}),
        st.booleans().map(lambda u: {"uniqueItems": u}),
        st.lists(st.sampled_from(NAMES), max_size=3, unique=True).map(lambda r: {"required": r}),
        st.dictionaries(
            st.sampled_from(NAMES),
            st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
            max_size=2,
        ).map(lambda d: {"dependencies" if draft7 else "dependentRequired": d}),
        st.just({"$ref": "#/$defs/d0"}),
        st.just({"title": "t", "format": "email", "x-unknown": 1}),
    ]
    return st.one_of(choices)


def schemas(draft7: bool) -> st.SearchStrategy[Any]:
    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        applicators: list[st.SearchStrategy[dict[str, Any]]] = [
            st.lists(inner, min_size=1, max_size=3).flatmap(
                lambda subs: st.sampled_from(["allOf", "anyOf", "oneOf"]).map(lambda w: {w: subs})
            ),
            inner.map(lambda s: {"not": s}),
            st.tuples(inner, inner, inner).map(lambda t: {"if": t[0], "then": t[1], "else": t[2]}),
            st.dictionaries(st.sampled_from(NAMES), inner, max_size=3).map(
                lambda p: {"properties": p}
            ),
            inner.map(lambda s: {"additionalProperties": s}),
            st.tuples(st.sampled_from(PATTERNS), inner).map(
                lambda t: {"patternProperties": {t[0]: t[1]}}
            ),
            inner.map(lambda s: {"propertyNames": s}),
            inner.map(lambda s: {"items": s}),
            st.tuples(inner, st.none() | counts, st.none() | counts).map(
                lambda t: {
                    "contains": t[0],
                    **({} if t[1] is None or draft7 else {"minContains": t[1]}),
                    **({} if t[2] is None or draft7 else {"maxContains": t[2]}),
                }
            ),
            st.tuples(st.lists(inner, min_size=1, max_size=2), inner).map(
                (lambda t: {"items": t[0], "additionalItems": t[1]})
                if draft7
                else (lambda t: {"prefixItems": t[0], "items": t[1]})
            ),
            st.dictionaries(st.sampled_from(NAMES), inner, max_size=2).map(
                lambda d: {"dependencies" if draft7 else "dependentSchemas": d}
            ),
            st.tuples(inner, inner).map(
                lambda t: (
                    {**t[0], **t[1]} if isinstance(t[0], dict) and isinstance(t[1], dict) else t[0]
                )
            ),
        ]
        return st.one_of(applicators)

    base = st.one_of(st.booleans(), leaf_keywords(draft7))
    body = st.recursive(base, extend, max_leaves=6)
    definition = st.one_of(st.booleans(), leaf_keywords(draft7).filter(lambda s: "$ref" not in s))

    def document(pair: tuple[Any, Any]) -> Any:
        root, d0 = pair
        if not isinstance(root, dict):
            root = {"allOf": [root]}
        root = {**root, "$defs": {"d0": d0}}
        if draft7:
            root = {"$schema": D7, **root}
            if "$ref" in root:  # draft-07 ignores a $ref's siblings: keep both validators honest
                root = {"$schema": D7, "$defs": root["$defs"], "allOf": [{"$ref": root["$ref"]}]}
        return root

    return st.tuples(body, definition).map(document)


def agree(schema: Any, instance: Any) -> None:
    ours = compile_schema(schema, max_steps=10**6, max_depth=64)
    mine = ours.validate(instance, max_steps=10**6, max_depth=64) is None
    library = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    assert mine is library(schema).is_valid(instance), (schema, instance)


@hsettings(max_examples=examples(600), deadline=None)
@given(schemas(draft7=False), st.lists(json_values, min_size=1, max_size=4))
def test_2020_12_agrees_with_jsonschema(schema: Any, instances: list[Any]) -> None:
    for instance in instances:
        agree(schema, instance)


@hsettings(max_examples=examples(400), deadline=None)
@given(schemas(draft7=True), st.lists(json_values, min_size=1, max_size=4))
def test_draft_07_agrees_with_jsonschema(schema: Any, instances: list[Any]) -> None:
    for instance in instances:
        agree(schema, instance)


# ---------------------------------------------------------------- garbage in

WORDS = [
    "type", "enum", "const", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern", "minItems", "maxItems", "uniqueItems", "items",
    "prefixItems", "additionalItems", "contains", "minContains", "maxContains",
    "minProperties", "maxProperties", "required", "dependentRequired", "dependentSchemas",
    "dependencies", "properties", "patternProperties", "additionalProperties",
    "propertyNames", "$ref", "$id", "$anchor", "$defs", "definitions", "$schema",
    "unevaluatedItems", "unevaluatedProperties", "$dynamicRef", "a", "n0",
]  # fmt: skip
garbage_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["#", "#/$defs/a", "#/properties/a", "x.json", "#a", "(", "^a+$"]),
    st.sampled_from(["http://[::1", "http://e.com/", "urn:x", "http://e.com/a#/b", "%zz"]),
    st.sampled_from([D7, "https://json-schema.org/draft/2020-12/schema", "string", "integer"]),
    st.text(max_size=6),
)
garbage = st.recursive(
    garbage_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(WORDS), inner, max_size=5)
    ),
    max_leaves=25,
)


@hsettings(max_examples=examples(1500, 300), deadline=None)
@given(garbage, st.lists(json_values, max_size=3))
def test_any_json_as_a_schema_gives_only_the_documented_outcomes(
    schema: Any, instances: list[Any]
) -> None:
    """A hostile outputSchema: compiled or refused (SchemaError) or out of budget; and a
    compiled one answers each value with None, a Mismatch or a budget error."""
    try:
        compiled = compile_schema(schema, max_steps=20_000, max_depth=16)
    except (SchemaError, BudgetExhausted, DepthExceeded):
        return
    for instance in instances:
        try:
            outcome = compiled.validate(instance, max_steps=20_000, max_depth=16)
        except (BudgetExhausted, DepthExceeded):
            continue
        assert outcome is None or isinstance(outcome, Mismatch)
        if outcome is not None:
            assert isinstance(outcome.keyword, str) and isinstance(outcome.pointer(), str)
