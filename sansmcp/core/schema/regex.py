"""A linear-time matcher for JSON Schema ``pattern`` (an ECMA-262 subset).

Theory of operation
-------------------
:func:`compile_pattern` parses a pattern into a Thompson NFA program (a list of
instructions) and :meth:`Program.search` runs it as a Pike VM: every position of the
input advances the whole set of live threads at once, each instruction at most once
per position, so a search costs at most ``2 * len(program) * (len(text) + 1)`` steps
(each instruction reached once per position, and each thread that reads a character
once more) plus ``1 + len(program) // 16`` for its mark table -- there is no backtracking, ``(a+)+$`` costs what ``a+$`` costs.  Every step is charged
to the caller's :class:`~sansmcp.core.schema.budget.Budget`, which raises when it is
spent; compiling charges one step per instruction emitted.

The subset is what schemas use in practice: literals, ``.``, classes ``[...]`` with
ranges and negation, the escapes ``\\d \\D \\w \\W \\s \\S \\b \\B \\t \\n \\v \\f \\r
\\0 \\cX \\xHH \\uHHHH \\u{H...}`` and identity escapes of punctuation, groups
``(...)``, ``(?:...)``, ``(?<name>...)``, alternation and the quantifiers ``* + ?
{n} {n,} {n,m}`` (greedy or lazy: for a yes/no answer they match alike).  ``^`` and
``$`` are the input's ends (no multiline flag in a schema).  Matching is over code
points, as the ECMA-262 ``u`` flag does.  What needs backtracking or is not in the
subset -- backreferences, lookahead and lookbehind, ``\\p{...}`` -- raises
:class:`PatternError` when the pattern is compiled, so a schema using it is refused
rather than matched wrongly.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from .budget import Budget

__all__ = ["PatternError", "Program", "compile_pattern"]

#: The largest ``{n,m}`` count accepted (each repetition copies the atom's program).
MAX_REPEAT = 1000
#: The deepest nesting of groups accepted (the parser and the emitter recurse on it).
MAX_GROUP_DEPTH = 32

# opcodes
_CHAR = 0  # a: the character
_SET = 1  # a: sorted range starts, b: range ends
_ANY = 2  # any character but a line terminator
_SPLIT = 3  # a, b: the two next pcs
_JMP = 4  # a: the next pc
_MATCH = 5
_BOL = 6
_EOL = 7
_WORDB = 8
_NWORDB = 9

_LINE_TERMINATORS = frozenset("\n\r\u2028\u2029")
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_DIGITS = ((0x30, 0x39),)
_WORD_RANGES = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE_RANGES = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
)
_SYNTAX = frozenset("^$\\.*+?()[]{}|/-")
_CONTROL_ESCAPES = {"t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r"}
_MAX_CODE_POINT = 0x10FFFF


class PatternError(ValueError):
    """The pattern is malformed or outside the supported subset (the message says which)."""


Ranges = tuple[tuple[int, int], ...]


def _negate(ranges: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    low = 0
    for start, end in ranges:
        if start > low:
            out.append((low, start - 1))
        low = end + 1
    if low <= _MAX_CODE_POINT:
        out.append((low, _MAX_CODE_POINT))
    return tuple(out)


def _normalise(ranges: list[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1] + 1:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return tuple(out)


def _count(digits: str) -> int:
    """A repetition count; a long one is just "too many" (``int()`` of 4,300+ digits
    raises, and any count over ``MAX_REPEAT`` is refused anyway)."""
    return int(digits) if len(digits) <= 6 else MAX_REPEAT + 1


# ---------------------------------------------------------------- the parse tree
# Nodes are tuples: ("char", c) ("set", ranges) ("any",) ("cat", [nodes]) ("alt", [nodes])
# ("rep", node, min, max|None) ("bol",) ("eol",) ("wordb",) ("nwordb",) ("empty",)
Node = tuple[Any, ...]


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.pos = 0
        self.depth = 0

    def fail(self, what: str) -> PatternError:
        return PatternError(f"{what} at offset {self.pos}")

    def peek(self) -> str | None:
        return self.text[self.pos] if self.pos < len(self.text) else None

    def take(self) -> str:
        if self.pos >= len(self.text):
            raise self.fail("the pattern ends early")
        char = self.text[self.pos]
        self.pos += 1
        return char

    def parse(self) -> Node:
        node = self.disjunction()
        if self.pos < len(self.text):
            raise self.fail("unbalanced ')'")
        return node

    def disjunction(self) -> Node:
        branches = [self.alternative()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.alternative())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def alternative(self) -> Node:
        items: list[Node] = []
        while True:
            char = self.peek()
            if char is None or char in "|)":
                break
            items.append(self.term())
        if not items:
            return ("empty",)
        return items[0] if len(items) == 1 else ("cat", items)

    def term(self) -> Node:
        char = self.take()
        atom: Node
        if char == "^":
            return self.no_quantifier(("bol",))
        if char == "$":
            return self.no_quantifier(("eol",))
        if char == "\\" and self.peek() in ("b", "B"):
            return self.no_quantifier(("wordb",) if self.take() == "b" else ("nwordb",))
        if char == "(":
            atom = self.group()
        elif char == ".":
            atom = ("any",)
        elif char == "[":
            atom = ("set", self.char_class())
        elif char == "\\":
            atom = self.atom_escape()
        elif char in "*+?":
            raise self.fail(f"nothing to repeat before {char!r}")
        elif char == "{" and self.quantifier_ahead(self.pos - 1):
            raise self.fail("nothing to repeat before '{'")
        else:  # ] } and { that is not a quantifier are literals (ECMA-262 Annex B)
            atom = ("char", char)
        return self.quantified(atom)

    def no_quantifier(self, node: Node) -> Node:
        char = self.peek()
        if char is not None and (
            char in "*+?" or (char == "{" and self.quantifier_ahead(self.pos))
        ):
            raise self.fail("a quantifier after an assertion")
        return node

    def quantifier_ahead(self, at: int) -> bool:
        return self.read_braces(at) is not None

    def read_braces(self, at: int) -> tuple[int, int | None, int] | None:
        """``{n}``, ``{n,}`` or ``{n,m}`` at ``at``: (min, max, end offset), else None."""
        text = self.text
        index = at + 1
        start = index
        while index < len(text) and text[index].isascii() and text[index].isdigit():
            index += 1
        if index == start:
            return None
        low = _count(text[start:index])
        high: int | None = low
        if index < len(text) and text[index] == ",":
            index += 1
            start = index
            while index < len(text) and text[index].isascii() and text[index].isdigit():
                index += 1
            high = _count(text[start:index]) if index > start else None
        if index >= len(text) or text[index] != "}":
            return None
        return low, high, index + 1

    def quantified(self, atom: Node) -> Node:
        char = self.peek()
        low: int
        high: int | None
        if char == "*":
            low, high = 0, None
            self.pos += 1
        elif char == "+":
            low, high = 1, None
            self.pos += 1
        elif char == "?":
            low, high = 0, 1
            self.pos += 1
        elif char == "{" and (braces := self.read_braces(self.pos)) is not None:
            low, high, self.pos = braces
            if high is not None and high < low:
                raise self.fail(f"the repetition {{{low},{high}}} is out of order")
            if max(low, high or 0) > MAX_REPEAT:
                raise self.fail(f"a repetition count over {MAX_REPEAT}")
        else:
            return atom
        if self.peek() == "?":  # lazy: the same yes/no answer
            self.pos += 1
        return ("rep", atom, low, high)

    def group(self) -> Node:
        self.depth += 1
        if self.depth > MAX_GROUP_DEPTH:
            raise self.fail(f"groups nested deeper than {MAX_GROUP_DEPTH}")
        if self.peek() == "?":
            self.pos += 1
            kind = self.take()
            if kind == "<" and self.peek() not in ("=", "!"):
                while self.take() != ">":
                    pass
            elif kind != ":":
                raise self.fail("lookaround and inline flags are not supported")
        node = self.disjunction()
        if self.peek() != ")":
            raise self.fail("unbalanced '('")
        self.pos += 1
        self.depth -= 1
        return node

    def hex_digits(self, count: int) -> int | None:
        digits = self.text[self.pos : self.pos + count]
        if len(digits) == count and all(c in "0123456789abcdefABCDEF" for c in digits):
            self.pos += count
            return int(digits, 16)
        return None

    def escape_char(self, in_class: bool) -> str | Ranges:
        """The escape after a backslash: one character, or the ranges of a class escape."""
        char = self.take()
        if char in "dDwWsS":
            ranges = {"d": _DIGITS, "w": _WORD_RANGES, "s": _SPACE_RANGES}[char.lower()]
            return _negate(ranges) if char.isupper() else ranges
        if char in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[char]
        if char == "b" and in_class:
            return "\b"
        if char == "0" and not (self.peek() or "x").isdigit():
            return "\0"
        if char == "c":
            letter = self.peek()
            if letter is not None and letter.isascii() and letter.isalpha():
                self.pos += 1
                return chr(ord(letter) % 32)
            raise self.fail("\\c without a control letter")
        if char == "x":
            value = self.hex_digits(2)
            if value is None:
                raise self.fail("\\x without two hex digits")
            return chr(value)
        if char == "u":
            if self.peek() == "{":
                end = self.text.find("}", self.pos)
                digits = self.text[self.pos + 1 : end] if end > 0 else ""
                if (
                    not digits
                    or len(digits) > 6
                    or any(c not in "0123456789abcdefABCDEF" for c in digits)
                ):
                    raise self.fail("\\u{...} without hex digits")
                value = int(digits, 16)
                if value > _MAX_CODE_POINT:
                    raise self.fail("\\u{...} past U+10FFFF")
                self.pos = end + 1
                return chr(value)
            value = self.hex_digits(4)
            if value is None:
                raise self.fail("\\u without four hex digits")
            return chr(value)
        if char.isdigit():
            raise self.fail("backreferences are not supported")
        if char.isascii() and char.isalnum():
            raise self.fail(f"the escape \\{char} is not supported")
        return char  # an identity escape of punctuation (or any non-ASCII character)

    def atom_escape(self) -> Node:
        value = self.escape_char(in_class=False)
        return ("char", value) if isinstance(value, str) else ("set", value)

    def char_class(self) -> Ranges:
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while True:
            char = self.take()
            if char == "]":
                break
            low = self.class_atom(char)
            if self.peek() == "-" and self.text[self.pos + 1 : self.pos + 2] not in ("]", ""):
                self.pos += 1
                high = self.class_atom(self.take())
                if not isinstance(low, str) or not isinstance(high, str):
                    raise self.fail("a class escape as a range end")
                if ord(high) < ord(low):
                    raise self.fail("a character range out of order")
                ranges.append((ord(low), ord(high)))
            elif isinstance(low, str):
                ranges.append((ord(low), ord(low)))
            else:
                ranges.extend(low)
        result = _normalise(ranges)
        return _negate(result) if negated else result

    def class_atom(self, char: str) -> str | Ranges:
        return self.escape_char(in_class=True) if char == "\\" else char


# ---------------------------------------------------------------- the program


@dataclass(slots=True)
class Program:
    """A compiled pattern; :meth:`search` says whether it matches anywhere in a text."""

    ops: list[tuple[int, Any, Any]]
    anchored: bool  # begins with ^: only a thread started at offset 0 can match

    def search(self, text: str, budget: Budget) -> bool:
        """Whether the pattern matches somewhere in ``text``; steps go to ``budget``."""
        ops = self.ops
        size = len(ops)
        mark = [-1] * size
        current: list[int] = []
        end = len(text)
        steps = 1 + size // 16  # the mark table: a large program costs even on a short text
        index = -1
        while True:
            index += 1
            char = text[index] if index < end else None
            stack = [0] if index == 0 or not self.anchored else []
            stack.extend(reversed(current))  # keeps the threads' order (irrelevant: yes/no)
            live: list[int] = []
            while stack:
                pc = stack.pop()
                if mark[pc] == index:
                    continue
                mark[pc] = index
                steps += 1
                op, a, b = ops[pc]
                if op == _SPLIT:
                    stack.append(b)
                    stack.append(a)
                elif op == _JMP:
                    stack.append(a)
                elif op == _MATCH:
                    budget.spend(steps)
                    return True
                elif op == _BOL:
                    if index == 0:
                        stack.append(pc + 1)
                elif op == _EOL:
                    if index == end:
                        stack.append(pc + 1)
                elif op in (_WORDB, _NWORDB):
                    before = index > 0 and text[index - 1] in _WORD
                    after = char is not None and char in _WORD
                    if (before != after) == (op == _WORDB):
                        stack.append(pc + 1)
                else:
                    live.append(pc)
            if steps > 4096:
                budget.spend(steps)
                steps = 0
            if char is None:
                break
            current = []
            code = ord(char)
            for pc in live:
                steps += 1
                op, a, b = ops[pc]
                if op == _CHAR:
                    ok = a == char
                elif op == _ANY:
                    ok = char not in _LINE_TERMINATORS
                else:
                    slot = bisect_right(a, code) - 1  # a: range starts, b: range ends
                    ok = slot >= 0 and code <= b[slot]
                if ok:
                    current.append(pc + 1)
            if not current and self.anchored:
                break
        budget.spend(steps)
        return False


class _Emitter:
    def __init__(self, budget: Budget) -> None:
        self.ops: list[tuple[int, Any, Any]] = []
        self.budget = budget
        # a set's (starts, ends), built once per set node: a counted repetition emits its
        # atom again and again, and each copy shares them (else each copy held its own)
        self.sets: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def emit(self, op: int, a: object = None, b: object = None) -> int:
        self.budget.spend(1)
        self.ops.append((op, a, b))
        return len(self.ops) - 1

    def patch(self, pc: int, a: object, b: object = None) -> None:
        self.ops[pc] = (self.ops[pc][0], a, b)

    def node(self, node: Node) -> None:
        kind = node[0]
        if kind == "char":
            self.emit(_CHAR, node[1])
        elif kind == "set":
            bounds = self.sets.get(id(node))
            if bounds is None:
                ranges: Ranges = node[1]
                starts = tuple(start for start, _ in ranges)
                ends = tuple(end for _, end in ranges)
                bounds = self.sets[id(node)] = (starts, ends)
            self.emit(_SET, *bounds)
        elif kind == "any":
            self.emit(_ANY)
        elif kind == "cat":
            for item in node[1]:
                self.node(item)
        elif kind == "alt":
            branches: list[Node] = node[1]
            jumps: list[int] = []
            for branch in branches[:-1]:
                split = self.emit(_SPLIT)
                self.node(branch)
                jumps.append(self.emit(_JMP))
                self.patch(split, split + 1, len(self.ops))
            self.node(branches[-1])
            for jump in jumps:
                self.patch(jump, len(self.ops))
        elif kind == "rep":
            self.repeat(node[1], node[2], node[3])
        elif kind == "bol":
            self.emit(_BOL)
        elif kind == "eol":
            self.emit(_EOL)
        elif kind == "wordb":
            self.emit(_WORDB)
        elif kind == "nwordb":
            self.emit(_NWORDB)
        # "empty" emits nothing

    def repeat(self, atom: Node, low: int, high: int | None) -> None:
        for _ in range(low):
            self.node(atom)
        if high is None:
            # L: split body, out; body; jmp L   (an empty-matching body cannot loop:
            # the Pike VM visits each pc once per position)
            split = self.emit(_SPLIT)
            self.node(atom)
            self.emit(_JMP, split)
            self.patch(split, split + 1, len(self.ops))
            return
        splits: list[int] = []
        for _ in range(high - low):
            splits.append(self.emit(_SPLIT))
            self.node(atom)
        for split in splits:
            self.patch(split, split + 1, len(self.ops))


def compile_pattern(pattern: str, budget: Budget) -> Program:
    """Compile ``pattern``; ``PatternError`` when it is malformed or outside the subset.

    One budget step per instruction emitted (a ``{1000}`` copies its atom a thousand
    times, so the budget bounds the program's size).
    """
    tree = _Parser(pattern).parse()
    emitter = _Emitter(budget)
    emitter.node(tree)
    emitter.emit(_MATCH)
    first = tree[1][0] if tree[0] == "cat" else tree
    return Program(ops=emitter.ops, anchored=first[0] == "bol")
