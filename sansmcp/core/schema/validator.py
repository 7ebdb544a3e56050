"""A bounded JSON Schema validator (drafts 2020-12 and 07) for ``outputSchema``.

Theory of operation
-------------------
:func:`compile_schema` turns a parsed schema into a graph of :class:`Node` s once;
:meth:`Schema.validate` applies it to a parsed JSON value as often as needed.  Each
node keeps its checks (closures) split by the JSON type they apply to, so a value
runs only the checks that concern its type.  ``$ref`` is resolved when the schema is
compiled, to a node of the same graph (cycles included); only references inside
the document are followed -- ``#...`` pointers and anchors, and URIs naming an
``$id`` of the document -- and any other one refuses the schema
(:class:`SchemaError`): nothing is ever fetched.

Drafts: ``$schema`` names 2020-12 (the default when absent) or draft-07; any other
value refuses the schema.  Assertions that change validity and cannot be evaluated
here (``unevaluatedProperties`` / ``unevaluatedItems`` other than ``true``,
``$dynamicRef``, ``$recursiveRef``) refuse it too; annotations (``title``,
``format``, ``default``, ...) and unknown keywords are ignored, as the
specification says.  ``format`` is not asserted.

Numbers follow JSON: a ``bool`` is neither a number nor an integer; ``1.0`` is an
integer; ``enum``, ``const`` and ``uniqueItems`` compare ``1`` and ``1.0`` equal
and ``true`` and ``1`` unequal.  ``multipleOf`` is exact: integers by ``%``, any
float by its shortest decimal form, ``m x 10**e`` (``0.3`` is a multiple of ``0.1``),
in integer arithmetic charged by the operands' bit lengths.  Lengths count code points.

Bounds: compiling and each validation run on their own :class:`~.budget.Budget`
of ``max_steps`` and stop with ``BudgetExhausted``; schemas applied inside one
another (and schemas nested inside one another, when compiled) stop past
``max_depth`` with ``DepthExceeded``.  Every walk of a value is iterative or
bounded by that depth, so no hostile value reaches the interpreter's recursion
limit.  ``pattern`` is :mod:`.regex`, linear in the text and charged to the budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .budget import Budget, DepthExceeded
from .keywords import compile_keywords
from .nodes import Ctx, Mismatch, Node, apply
from .regex import PatternError, Program, compile_pattern

__all__ = ["Mismatch", "Schema", "SchemaError", "compile_schema"]

DRAFT_2020 = "2020-12"
DRAFT_7 = "draft-07"
_DRAFTS = {
    "https://json-schema.org/draft/2020-12/schema": DRAFT_2020,
    "http://json-schema.org/draft-07/schema": DRAFT_7,
    "https://json-schema.org/draft-07/schema": DRAFT_7,
}
# where subschemas sit, for the $id / $anchor scan: one schema, a list, a map of them
_ONE, _MANY, _MAP = "one", "many", "map"
_SUBSCHEMAS = {
    **dict.fromkeys(
        (
            "additionalProperties",
            "propertyNames",
            "items",
            "additionalItems",
            "contains",
            "not",
            "if",
            "then",
            "else",
            "unevaluatedItems",
            "unevaluatedProperties",
            "contentSchema",
        ),
        _ONE,
    ),
    **dict.fromkeys(("allOf", "anyOf", "oneOf", "prefixItems"), _MANY),
    **dict.fromkeys(
        (
            "properties",
            "patternProperties",
            "$defs",
            "definitions",
            "dependentSchemas",
            "dependencies",
        ),
        _MAP,
    ),
}


class SchemaError(ValueError):
    """The schema is malformed, or needs what this validator refuses to do."""


def _join(base: str, ref: str) -> str:
    """``ref`` resolved against ``base`` (RFC 3986); ``SchemaError`` when either is no URI."""
    from urllib.parse import urljoin  # lazy: only a schema with $ref and $id needs it

    try:
        return urljoin(base, ref)
    except ValueError:  # e.g. "http://[::1": an unclosed IPv6 literal
        raise SchemaError(
            f"{ref[:80]!r} against the base {base[:80]!r} is not a valid URI reference"
        ) from None


class Schema:
    """A compiled schema; :meth:`validate` checks one value against it."""

    __slots__ = ("_root", "draft", "steps")

    def __init__(self, root: Node, draft: str, steps: int = 0) -> None:
        self._root = root
        self.draft = draft
        # the steps its compile spent: what it holds grows with them (a counted
        # repetition in a ``pattern`` copies its atom), so ``CompiledSchemas`` charges them
        self.steps = steps

    def validate(self, value: Any, *, max_steps: int, max_depth: int) -> Mismatch | None:
        """None when ``value`` conforms, else where it first fails.

        Raises ``BudgetExhausted`` past ``max_steps`` steps, ``DepthExceeded`` past
        ``max_depth`` nested schema applications.
        """
        return apply(self._root, value, Ctx(max_steps, max_depth))


def compile_schema(raw: Any, *, max_steps: int, max_depth: int) -> Schema:
    """Compile a parsed schema.  ``SchemaError`` when it is malformed or refused;
    ``BudgetExhausted`` / ``DepthExceeded`` when it is too large or too deep."""
    if not isinstance(raw, dict | bool):
        raise SchemaError("the schema is neither an object nor a boolean")
    draft = DRAFT_2020
    if isinstance(raw, dict) and "$schema" in raw:
        name = raw["$schema"]
        draft_of = _DRAFTS.get(name.rstrip("#")) if isinstance(name, str) else None
        if draft_of is None:
            raise SchemaError(f"$schema {str(name)[:80]!r} names a draft we do not support")
        draft = draft_of
    budget = Budget(max_steps)
    compiler = _Compiler(raw, draft, budget, max_depth)
    root = compiler.node(raw, "", 0)
    return Schema(root, draft, budget.spent)


class _Compiler:
    def __init__(self, root: Any, draft: str, budget: Budget, max_depth: int) -> None:
        self.root = root
        self.draft7 = draft == DRAFT_7
        self.budget = budget
        self.max_depth = max_depth
        self.nodes: dict[int, Node] = {}
        self.bases: dict[int, str] = {}
        self.resources: dict[str, Any] = {}
        self.anchors: dict[tuple[str, str], Any] = {}
        self.scanned = False  # the $id / $anchor scan runs at the first $ref (most have none)

    def fail(self, message: str) -> SchemaError:
        return SchemaError(message)

    # ------------------------------------------------------------ $id and $anchor

    def scan(self) -> None:
        """Record every resource (``$id``), anchor and base URI of the document."""
        work: list[tuple[Any, str, int]] = [(self.root, "", 0)]
        while work:
            raw, base, depth = work.pop()
            self.budget.spend(1)
            if not isinstance(raw, dict):
                continue
            if depth > self.max_depth:
                raise DepthExceeded(self.max_depth)
            ident = raw.get("$id")
            if isinstance(ident, str):
                if self.draft7 and ident.startswith("#"):
                    self.anchors[(base, ident[1:])] = raw
                else:
                    base = _join(base, ident).partition("#")[0] if base else ident.partition("#")[0]
                    self.resources[base] = raw
            if raw is self.root:
                self.resources.setdefault(base, raw)
            anchor = raw.get("$anchor")
            if not self.draft7 and isinstance(anchor, str):
                self.anchors[(base, anchor)] = raw
            self.bases[id(raw)] = base
            for word, value in raw.items():
                kind = _SUBSCHEMAS.get(word)
                if kind is None:
                    continue
                if kind is _MAP and isinstance(value, dict):
                    work.extend((item, base, depth + 1) for item in value.values())
                elif isinstance(value, list):  # _MANY, or draft-07 "items"
                    work.extend((item, base, depth + 1) for item in value)
                elif kind is _ONE:
                    work.append((value, base, depth + 1))

    def resolve(self, ref: str, base: str) -> tuple[Any, str]:
        from urllib.parse import unquote

        uri = _join(base, ref) if base else ref
        document, _, fragment = uri.partition("#")
        if document not in self.resources:
            raise self.fail(f"$ref {ref[:80]!r} is not inside the schema (never fetched)")
        target = self.resources[document]
        fragment = unquote(fragment)
        if fragment and not fragment.startswith("/"):
            anchored = self.anchors.get((document, fragment))
            if anchored is None:
                raise self.fail(f"$ref {ref[:80]!r} names no anchor of the schema")
            return anchored, document
        for token in fragment.split("/")[1:]:
            self.budget.spend(1)
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and token in target:
                target = target[token]
            elif (
                isinstance(target, list)
                and token.isascii()
                and token.isdigit()
                and (token == "0" or not token.startswith("0"))
                and int(token) < len(target)
            ):
                target = target[int(token)]
            else:
                raise self.fail(f"$ref {ref[:80]!r} points nowhere in the schema")
        return target, self.bases.get(id(target), document)

    # ------------------------------------------------------------ nodes

    def node(self, raw: Any, base: str, depth: int) -> Node:
        if raw is True or raw is False:
            node = Node()
            node.fixed = raw
            return node
        if not isinstance(raw, dict):
            raise self.fail(f"a subschema is a {type(raw).__name__}, not an object or boolean")
        known = self.nodes.get(id(raw))
        if known is not None:
            return known
        if depth > self.max_depth:
            raise DepthExceeded(self.max_depth)
        self.budget.spend(1 + len(raw))
        node = Node()
        self.nodes[id(raw)] = node
        base = self.bases.get(id(raw), base)
        if self.draft7 and "$ref" in raw:
            self.reference(node, raw, base, depth)  # draft-07: $ref hides its siblings
        else:
            self.refuse_unsupported(raw)
            if "$ref" in raw:
                self.reference(node, raw, base, depth)
            compile_keywords(self, node, raw, base, depth + 1)
        if not (node.common or node.obj or node.arr or node.text or node.num):
            node.fixed = True
        return node

    def reference(self, node: Node, raw: dict[str, Any], base: str, depth: int) -> None:
        ref = raw["$ref"]
        if not isinstance(ref, str):
            raise self.fail("$ref is not a string")
        if not self.scanned:
            self.scanned = True
            self.scan()
            base = self.bases.get(id(raw), base)
        target_raw, target_base = self.resolve(ref, base)
        target = self.node(target_raw, target_base, depth + 1)

        def check_ref(value: Any, ctx: Ctx) -> Mismatch | None:
            return apply(target, value, ctx)

        node.common.append(check_ref)

    def refuse_unsupported(self, raw: Mapping[str, Any]) -> None:
        for word in ("$dynamicRef", "$recursiveRef"):
            if word in raw and not self.draft7:
                raise self.fail(f"{word} is not supported")
        for word in ("unevaluatedProperties", "unevaluatedItems"):
            if not self.draft7 and word in raw and raw[word] is not True and raw[word] != {}:
                raise self.fail(f"{word} is not supported")

    def pattern(self, pattern: Any) -> Program:
        if not isinstance(pattern, str):
            raise self.fail("a pattern is not a string")
        try:
            return compile_pattern(pattern, self.budget)
        except PatternError as exc:
            raise self.fail(f"pattern {pattern[:60]!r} is refused: {exc}") from None
