"""The compiled form of a schema, and how a value is applied to it.

Theory of operation
-------------------
A :class:`Node` is one compiled (sub)schema: its checks (closures built by
:mod:`.keywords`) split by the JSON type of value they concern, or ``fixed`` for a
schema that always (``true``, ``{}``) or never (``false``) holds.  :func:`apply`
runs a node on a value under a :class:`Ctx` (the step budget and the nesting
depth) and returns None or the :class:`Mismatch` that names where it failed.
:func:`key_of` gives the hashable JSON-equality form ``enum``, ``const`` and
``uniqueItems`` compare.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .budget import Budget, BudgetExhausted, DepthExceeded

__all__ = ["Check", "Ctx", "Mismatch", "Node", "apply", "decimal", "is_number", "key_of"]


class Mismatch:
    """Where a value fails its schema: the instance path and the failing keyword."""

    __slots__ = ("keyword", "path")

    def __init__(self, keyword: str) -> None:
        self.keyword = keyword
        self.path: list[str | int] = []  # innermost first, while it bubbles up

    def pointer(self, max_chars: int = 200) -> str:
        """The instance path as a JSON pointer, cut to ``max_chars`` characters."""
        parts = []
        for part in reversed(self.path):
            text = str(part).replace("~", "~0").replace("/", "~1")
            parts.append(text if len(text) <= 40 else text[:40] + "...")
        pointer = "/" + "/".join(parts) if parts else ""
        return pointer if len(pointer) <= max_chars else pointer[:max_chars] + "..."


class Ctx(Budget):
    __slots__ = ("depth", "max_depth")

    def __init__(self, max_steps: int, max_depth: int) -> None:
        super().__init__(max_steps)
        self.depth = 0
        self.max_depth = max_depth


Check = Callable[[Any, Ctx], "Mismatch | None"]


class Node:
    """One compiled (sub)schema: ``fixed`` for ``true`` / ``false`` / check-free ones."""

    __slots__ = ("arr", "common", "fixed", "num", "obj", "text")

    def __init__(self) -> None:
        self.fixed: bool | None = None
        self.common: list[Check] = []
        self.obj: list[Check] = []
        self.arr: list[Check] = []
        self.text: list[Check] = []
        self.num: list[Check] = []


def apply(node: Node, value: Any, ctx: Ctx) -> Mismatch | None:
    ctx.left -= 1  # charged for true / false too: an anyOf of 10,000 false is work
    if ctx.left < 0:
        raise BudgetExhausted(ctx.limit)
    fixed = node.fixed
    if fixed is not None:
        return None if fixed else Mismatch("false")
    ctx.depth += 1
    if ctx.depth > ctx.max_depth:
        raise DepthExceeded(ctx.max_depth)
    for check in node.common:
        failed = check(value, ctx)
        if failed is not None:
            ctx.depth -= 1
            return failed
    kind = type(value)
    if kind is dict:
        typed = node.obj
    elif kind is list:
        typed = node.arr
    elif kind is str:
        typed = node.text
    elif kind is int or kind is float:
        typed = node.num
    else:
        typed = []
    for check in typed:
        failed = check(value, ctx)
        if failed is not None:
            ctx.depth -= 1
            return failed
    ctx.depth -= 1
    return None


_CLOSE_ARRAY = ("]", None)
_CLOSE_OBJECT = ("}", None)
_TAG = {str: "s", bool: "b", int: "n", float: "n", type(None): "z"}


def key_of(value: Any, budget: Budget) -> tuple[tuple[str, Any], ...]:
    """A hashable form of a JSON value, equal exactly when the values are JSON-equal.

    A flat tuple of ``(tag, payload)`` tokens (so comparing or hashing two of them
    never recurses, however deep the values), built iteratively; one step per value.
    Numbers share a tag (``1 == 1.0``), booleans have their own (``true != 1``).
    One step per value, and its size beside (hashing and comparing the tokens is work
    too): a string one step per 256 characters, an int one per 4,096 bits, an object
    its member names' characters per 256 times the comparisons of sorting them.
    """
    out: list[tuple[str, Any]] = []
    work: list[tuple[bool, Any]] = [(False, value)]
    while work:
        token, item = work.pop()
        if token:
            out.append(item)
            continue
        budget.spend(1)
        kind = type(item)
        if kind is dict:
            if item:
                budget.spend(sum(map(len, item)) * len(item).bit_length() >> 8)
            out.append(("{", len(item)))
            work.append((True, _CLOSE_OBJECT))
            for name in sorted(item, reverse=True):
                work.append((False, item[name]))
                work.append((True, ("k", name)))
        elif kind is list:
            out.append(("[", len(item)))
            work.append((True, _CLOSE_ARRAY))
            work.extend((False, element) for element in reversed(item))
        else:
            if kind is str:
                budget.spend(len(item) >> 8)
            elif kind is int:
                budget.spend(item.bit_length() >> 12)
            out.append((_TAG[kind], item))
    return tuple(out)


def decimal(number: int | float) -> tuple[int, int]:
    """A finite JSON number as ``(m, e)``, its magnitude ``m x 10**e`` exactly: an int is
    ``(abs(n), 0)``, a float is read from its shortest decimal form (``repr``: at most 17
    digits, ``e`` within about -340..308), so no work grows with its exponent."""
    if type(number) is int:
        return abs(number), 0
    digits, _, power = repr(abs(number)).partition("e")
    whole, _, fraction = digits.partition(".")
    return int(whole + fraction), (int(power) if power else 0) - len(fraction)


def is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float
