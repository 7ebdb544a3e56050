"""The assertion keywords: each compiled once into a check on the node it belongs to.

Theory of operation
-------------------
:func:`compile_keywords` reads one schema object and appends to its
:class:`~.nodes.Node` one closure per assertion, in the list of the JSON type the
assertion concerns (``minLength`` only ever runs on strings, ``required`` on
objects), so applying a node to a value costs nothing for keywords that do not
concern it.  A keyword whose value is malformed raises
:class:`~.validator.SchemaError` (through ``compiler.fail``) naming it.  Each check
returns None or a :class:`~.nodes.Mismatch`; a check that descends into a member or
an element adds that step to the mismatch's path.  Work proportional to a value's
size (members, elements, compared values, regex threads) is charged to the budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from .budget import Budget
from .nodes import Ctx, Mismatch, Node, apply, decimal, is_number, key_of
from .regex import Program

__all__ = ["Compiler", "compile_keywords"]


class Compiler(Protocol):
    """What the keywords ask of the compiler that calls them (``validator._Compiler``):
    named here, so this module never imports the one that imports it."""

    budget: Budget
    draft7: bool

    def fail(self, message: str) -> Exception: ...

    def node(self, raw: Any, base: str, depth: int) -> Node: ...

    def pattern(self, pattern: Any) -> Program: ...


_TYPE_NAMES = frozenset({"null", "boolean", "object", "array", "number", "string", "integer"})
_NAME_OF: dict[type, str] = {
    type(None): "null",
    bool: "boolean",
    dict: "object",
    list: "array",
    str: "string",
    int: "integer",
    float: "number",
}


def _count(compiler: Compiler, raw: Mapping[str, Any], word: str) -> int | None:
    """A non-negative integer keyword (``1.0`` accepted, as JSON has one number type)."""
    if word not in raw:
        return None
    value = raw[word]
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or value < 0:
        raise compiler.fail(f"{word} is not a non-negative integer")
    return value


def _number(compiler: Compiler, raw: Mapping[str, Any], word: str) -> int | float | None:
    if word not in raw:
        return None
    value = raw[word]
    if not is_number(value):
        raise compiler.fail(f"{word} is not a number")
    return value  # type: ignore[no-any-return]


def _schemas(
    compiler: Compiler, raw: Mapping[str, Any], word: str, base: str, depth: int
) -> list[Node]:
    value = raw[word]
    if not isinstance(value, list):
        raise compiler.fail(f"{word} is not an array of schemas")
    return [compiler.node(item, base, depth) for item in value]


def _names(compiler: Compiler, value: Any, word: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise compiler.fail(f"{word} is not an array of strings")
    return tuple(value)


def compile_keywords(
    compiler: Compiler, node: Node, raw: Mapping[str, Any], base: str, depth: int
) -> None:
    """Append the checks of every assertion keyword of ``raw`` to ``node``."""
    words = raw.keys()
    if not words.isdisjoint(_GENERIC):
        _generic(compiler, node, raw, base, depth)
    if not words.isdisjoint(_NUMERIC):
        _numeric(compiler, node, raw)
    if not words.isdisjoint(_TEXT):
        _text(compiler, node, raw)
    if not words.isdisjoint(_ARRAY):
        _array(compiler, node, raw, base, depth)
    if not words.isdisjoint(_OBJECT):
        _object(compiler, node, raw, base, depth)


_GENERIC = frozenset({"type", "enum", "const", "allOf", "anyOf", "oneOf", "not", "if"})
_NUMERIC = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_TEXT = frozenset({"minLength", "maxLength", "pattern"})
_ARRAY = frozenset(
    {"minItems", "maxItems", "uniqueItems", "items", "prefixItems", "additionalItems", "contains"}
)
_OBJECT = frozenset(
    {
        "minProperties",
        "maxProperties",
        "required",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "properties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
    }
)


# ---------------------------------------------------------------- any type


def _generic(compiler: Compiler, node: Node, raw: Mapping[str, Any], base: str, depth: int) -> None:
    common = node.common
    if "type" in raw:
        wanted = raw["type"]
        names = (wanted,) if isinstance(wanted, str) else wanted
        if not isinstance(names, list | tuple) or not all(
            isinstance(name, str) and name in _TYPE_NAMES for name in names
        ):
            raise compiler.fail("type names no JSON Schema type")
        allowed = frozenset(names)
        if "number" in allowed:
            allowed |= {"integer"}

        def check_type(value: Any, ctx: Ctx) -> Mismatch | None:
            name = _NAME_OF.get(type(value))
            if name in allowed:
                return None
            if name == "number" and "integer" in allowed and value.is_integer():
                return None
            return Mismatch("type")

        common.append(check_type)
    budget = compiler.budget
    if "enum" in raw:
        if not isinstance(raw["enum"], list):
            raise compiler.fail("enum is not an array")
        members = frozenset(key_of(item, budget) for item in raw["enum"])

        def check_enum(value: Any, ctx: Ctx) -> Mismatch | None:
            return None if key_of(value, ctx) in members else Mismatch("enum")

        common.append(check_enum)
    if "const" in raw:
        constant = key_of(raw["const"], budget)

        def check_const(value: Any, ctx: Ctx) -> Mismatch | None:
            return None if key_of(value, ctx) == constant else Mismatch("const")

        common.append(check_const)
    if "allOf" in raw:
        every = _schemas(compiler, raw, "allOf", base, depth)

        def check_all(value: Any, ctx: Ctx) -> Mismatch | None:
            for sub in every:
                failed = apply(sub, value, ctx)
                if failed is not None:
                    return failed
            return None

        common.append(check_all)
    if "anyOf" in raw:
        some = _schemas(compiler, raw, "anyOf", base, depth)

        def check_any(value: Any, ctx: Ctx) -> Mismatch | None:
            for sub in some:
                if apply(sub, value, ctx) is None:
                    return None
            return Mismatch("anyOf")

        common.append(check_any)
    if "oneOf" in raw:
        one = _schemas(compiler, raw, "oneOf", base, depth)

        def check_one(value: Any, ctx: Ctx) -> Mismatch | None:
            passed = 0
            for sub in one:
                if apply(sub, value, ctx) is None:
                    passed += 1
                    if passed > 1:
                        break
            return None if passed == 1 else Mismatch("oneOf")

        common.append(check_one)
    if "not" in raw:
        negated = compiler.node(raw["not"], base, depth)

        def check_not(value: Any, ctx: Ctx) -> Mismatch | None:
            return Mismatch("not") if apply(negated, value, ctx) is None else None

        common.append(check_not)
    if "if" in raw:
        condition = compiler.node(raw["if"], base, depth)
        then = compiler.node(raw["then"], base, depth) if "then" in raw else None
        otherwise = compiler.node(raw["else"], base, depth) if "else" in raw else None
        if then is not None or otherwise is not None:

            def check_if(value: Any, ctx: Ctx) -> Mismatch | None:
                branch = then if apply(condition, value, ctx) is None else otherwise
                return None if branch is None else apply(branch, value, ctx)

            common.append(check_if)


# ---------------------------------------------------------------- numbers


def _numeric(compiler: Compiler, node: Node, raw: Mapping[str, Any]) -> None:
    checks = node.num
    for word, holds in (
        ("minimum", lambda value, bound: value >= bound),
        ("maximum", lambda value, bound: value <= bound),
        ("exclusiveMinimum", lambda value, bound: value > bound),
        ("exclusiveMaximum", lambda value, bound: value < bound),
    ):
        bound = _number(compiler, raw, word)
        if bound is not None:
            checks.append(_bound_check(word, holds, bound))
    divisor = _number(compiler, raw, "multipleOf")
    if divisor is not None:
        if not divisor > 0 or divisor - divisor != 0:  # (a caller's inf or nan too)
            raise compiler.fail("multipleOf is not a finite number > 0")
        checks.append(_multiple_check(divisor))


def _arithmetic_steps(bits: int, other: int) -> int:
    """Steps for one division of a ``bits``-bit integer by an ``other``-bit one: CPython's
    long division is ~(bits x other) / 30**2 digit operations; one step per 2**18 of the
    product (~0.3 us measured: 4,300 by 2,100 decimal digits, ~100 us, is ~380 steps) and
    one per KiB of bits."""
    return 1 + (bits * other >> 18) + ((bits + other) >> 10)


_DECIMAL_STEPS = 5  # nodes.decimal of a number, beside the arithmetic


def _multiple_check(divisor: int | float) -> Any:
    """``multipleOf``, exactly: a number is ``m x 10**e`` (an int with ``e = 0``, a float by
    its shortest decimal form), so ``value / divisor`` is an integer exactly when
    ``m2 x 10**(e1-e2)`` divides ``m1`` (``e1 < e2``) or ``m2`` divides
    ``m1 x 10**(e1-e2)`` (taken modulo ``m2``).  Never a fraction of a float's full
    exponent (``1e308 / 5e-324`` is 2,100 bits as a Fraction): the work is a division of
    the operands as they are plus a power of ten below the value's own digits, charged
    to the budget by their bit lengths before it is done (:func:`_arithmetic_steps`)."""
    whole, power = decimal(divisor)
    whole_bits = whole.bit_length()
    power_steps = whole_bits * whole_bits >> 20  # per squaring of pow(10, shift, whole)

    def check_multiple(value: Any, ctx: Ctx) -> Mismatch | None:
        if type(value) is int and type(divisor) is int:
            ctx.spend(_arithmetic_steps(value.bit_length(), whole_bits))
            return None if value % divisor == 0 else Mismatch("multipleOf")
        ctx.spend(_DECIMAL_STEPS)  # a float's repr, read back (~1.5-3 us)
        digits, exponent = decimal(value)
        shift = exponent - power
        bits = digits.bit_length()
        if shift >= 0:  # m2 | m1 x 10**shift, modulo m2
            ctx.spend(_arithmetic_steps(bits, whole_bits) + power_steps * shift.bit_length())
            held = digits % whole * pow(10, shift, whole) % whole == 0
        elif bits <= 3 * -shift:  # 0 < m1 < 8**-shift < 10**-shift <= m2 x 10**-shift
            held = digits == 0
        else:  # -shift < bits / 3: 10**-shift is smaller than m1
            ctx.spend(_arithmetic_steps(bits, whole_bits + 4 * -shift))
            held = digits % (whole * 10**-shift) == 0
        return None if held else Mismatch("multipleOf")

    return check_multiple


def _bound_check(word: str, holds: Any, bound: int | float) -> Any:
    def check_bound(value: Any, ctx: Ctx) -> Mismatch | None:
        return None if holds(value, bound) else Mismatch(word)

    return check_bound


# ---------------------------------------------------------------- strings


def _text(compiler: Compiler, node: Node, raw: Mapping[str, Any]) -> None:
    checks = node.text
    shortest = _count(compiler, raw, "minLength")
    if shortest:

        def check_min_length(value: str, ctx: Ctx) -> Mismatch | None:
            return None if len(value) >= shortest else Mismatch("minLength")

        checks.append(check_min_length)
    longest = _count(compiler, raw, "maxLength")
    if longest is not None:

        def check_max_length(value: str, ctx: Ctx) -> Mismatch | None:
            return None if len(value) <= longest else Mismatch("maxLength")

        checks.append(check_max_length)
    if "pattern" in raw:
        program = compiler.pattern(raw["pattern"])

        def check_pattern(value: str, ctx: Ctx) -> Mismatch | None:
            return None if program.search(value, ctx) else Mismatch("pattern")

        checks.append(check_pattern)


# ---------------------------------------------------------------- arrays


def _array(compiler: Compiler, node: Node, raw: Mapping[str, Any], base: str, depth: int) -> None:
    checks = node.arr
    fewest = _count(compiler, raw, "minItems")
    if fewest:
        checks.append(_size_check("minItems", fewest, None))
    most = _count(compiler, raw, "maxItems")
    if most is not None:
        checks.append(_size_check("maxItems", 0, most))
    if raw.get("uniqueItems") is True:

        def check_unique(value: list[Any], ctx: Ctx) -> Mismatch | None:
            seen = {key_of(item, ctx) for item in value}
            return None if len(seen) == len(value) else Mismatch("uniqueItems")

        checks.append(check_unique)
    prefix: list[Node] = []
    rest: Node | None = None
    rest_word = "items"
    if compiler.draft7:
        items = raw.get("items")
        if isinstance(items, list):
            prefix = _schemas(compiler, raw, "items", base, depth)
            if "additionalItems" in raw:
                rest = compiler.node(raw["additionalItems"], base, depth)
                rest_word = "additionalItems"
        elif "items" in raw:
            rest = compiler.node(items, base, depth)
    else:
        if "prefixItems" in raw:
            prefix = _schemas(compiler, raw, "prefixItems", base, depth)
        if "items" in raw:
            rest = compiler.node(raw["items"], base, depth)
    if prefix or rest is not None:
        checks.append(_items_check(prefix, rest, rest_word))
    if "contains" in raw:
        wanted = compiler.node(raw["contains"], base, depth)
        least = 1
        greatest: int | None = None
        if not compiler.draft7:
            given = _count(compiler, raw, "minContains")
            least = 1 if given is None else given
            greatest = _count(compiler, raw, "maxContains")
        checks.append(_contains_check(wanted, least, greatest))


def _size_check(word: str, least: int, most: int | None) -> Any:
    def check_size(value: Any, ctx: Ctx) -> Mismatch | None:
        size = len(value)
        return None if size >= least and (most is None or size <= most) else Mismatch(word)

    return check_size


def _items_check(prefix: list[Node], rest: Node | None, rest_word: str) -> Any:
    def check_items(value: list[Any], ctx: Ctx) -> Mismatch | None:
        for index, (sub, item) in enumerate(zip(prefix, value, strict=False)):
            failed = apply(sub, item, ctx)
            if failed is not None:
                failed.path.append(index)
                return failed
        if rest is not None:
            for index in range(len(prefix), len(value)):
                failed = apply(rest, value[index], ctx)
                if failed is not None:
                    if failed.keyword == "false":
                        failed.keyword = rest_word
                    failed.path.append(index)
                    return failed
        return None

    return check_items


def _contains_check(wanted: Node, least: int, most: int | None) -> Any:
    def check_contains(value: list[Any], ctx: Ctx) -> Mismatch | None:
        found = 0
        for item in value:
            if apply(wanted, item, ctx) is None:
                found += 1
                if most is None and found >= least:
                    return None
        if found < least:
            return Mismatch("contains" if least == 1 else "minContains")
        return None if most is None or found <= most else Mismatch("maxContains")

    return check_contains


# ---------------------------------------------------------------- objects


def _object(compiler: Compiler, node: Node, raw: Mapping[str, Any], base: str, depth: int) -> None:
    checks = node.obj
    fewest = _count(compiler, raw, "minProperties")
    if fewest:
        checks.append(_size_check("minProperties", fewest, None))
    most = _count(compiler, raw, "maxProperties")
    if most is not None:
        checks.append(_size_check("maxProperties", 0, most))
    if "required" in raw:
        required = _names(compiler, raw["required"], "required")
        if required:

            def check_required(value: dict[str, Any], ctx: Ctx) -> Mismatch | None:
                ctx.spend(len(required))
                for name in required:
                    if name not in value:
                        failed = Mismatch("required")
                        failed.path.append(name)
                        return failed
                return None

            checks.append(check_required)
    dependent: dict[str, tuple[str, ...]] = {}
    schemas: dict[str, Node] = {}
    for word in ("dependentRequired", "dependentSchemas", "dependencies"):
        if word not in raw or (word == "dependencies") != compiler.draft7:
            continue
        table = raw[word]
        if not isinstance(table, dict):
            raise compiler.fail(f"{word} is not an object")
        for name, then in table.items():
            if word == "dependentRequired" or (word == "dependencies" and isinstance(then, list)):
                dependent[name] = _names(compiler, then, word)
            else:
                schemas[name] = compiler.node(then, base, depth)
    if dependent or schemas:
        checks.append(_dependent_check(dependent, schemas))
    properties: dict[str, Node] = {}
    if "properties" in raw:
        if not isinstance(raw["properties"], dict):
            raise compiler.fail("properties is not an object")
        properties = {
            name: compiler.node(sub, base, depth) for name, sub in raw["properties"].items()
        }
        members = [(name, sub) for name, sub in properties.items() if sub.fixed is not True]
        if members:
            checks.append(_properties_check(members))
    patterns: list[tuple[Any, Node]] = []
    if "patternProperties" in raw:
        if not isinstance(raw["patternProperties"], dict):
            raise compiler.fail("patternProperties is not an object")
        patterns = [
            (compiler.pattern(pattern), compiler.node(sub, base, depth))
            for pattern, sub in raw["patternProperties"].items()
        ]
    extra = (
        compiler.node(raw["additionalProperties"], base, depth)
        if "additionalProperties" in raw
        else None
    )
    if patterns or (extra is not None and extra.fixed is not True):
        checks.append(_members_check(properties, patterns, extra))
    if "propertyNames" in raw:
        names = compiler.node(raw["propertyNames"], base, depth)

        def check_names(value: dict[str, Any], ctx: Ctx) -> Mismatch | None:
            for name in value:
                failed = apply(names, name, ctx)
                if failed is not None:
                    failed.keyword = "propertyNames"
                    failed.path = [name]
                    return failed
            return None

        checks.append(check_names)


def _dependent_check(dependent: dict[str, tuple[str, ...]], schemas: dict[str, Node]) -> Any:
    def check_dependent(value: dict[str, Any], ctx: Ctx) -> Mismatch | None:
        ctx.spend(len(dependent) + len(schemas))
        for name, needed in dependent.items():
            if name in value:
                ctx.spend(len(needed))
                for other in needed:
                    if other not in value:
                        failed = Mismatch("dependentRequired")
                        failed.path.append(other)
                        return failed
        for name, sub in schemas.items():
            if name in value:
                mismatch = apply(sub, value, ctx)
                if mismatch is not None:
                    return mismatch
        return None

    return check_dependent


def _properties_check(members: list[tuple[str, Node]]) -> Any:
    table = dict(members)
    size = len(table)

    def check_properties(value: dict[str, Any], ctx: Ctx) -> Mismatch | None:
        # walk the smaller side, and pay for it: 10,000 names against 10,000 small objects
        # must not be 10**8 free lookups
        if len(value) < size:
            ctx.spend(1 + len(value))
            present = [(name, table[name]) for name in value if name in table]
        else:
            ctx.spend(size)
            present = [(name, sub) for name, sub in members if name in value]
        for name, sub in present:
            failed = apply(sub, value[name], ctx)
            if failed is not None:
                failed.path.append(name)
                return failed
        return None

    return check_properties


def _members_check(
    properties: dict[str, Node], patterns: list[tuple[Any, Node]], extra: Node | None
) -> Any:
    def check_members(value: dict[str, Any], ctx: Ctx) -> Mismatch | None:
        for name, member in value.items():
            ctx.spend(1)
            matched = name in properties
            for program, sub in patterns:
                if program.search(name, ctx):
                    matched = True
                    failed = apply(sub, member, ctx)
                    if failed is not None:
                        failed.path.append(name)
                        return failed
            if not matched and extra is not None:
                failed = apply(extra, member, ctx)
                if failed is not None:
                    if failed.keyword == "false":
                        failed.keyword = "additionalProperties"
                    failed.path.append(name)
                    return failed
        return None

    return check_members
