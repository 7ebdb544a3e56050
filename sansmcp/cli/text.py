"""The command line's text hygiene: what of a server's text may reach a terminal.

Owns the two escapes (a *name* as printable ASCII, one-to-one; *text* with the
characters that hide, reorder or forge text escaped), clipping to a width never inside
an escape, the figures of a bound, and :func:`_emit`, the one writer of a line.  Pure
functions over ``str``; the rest of :mod:`sansmcp.cli` renders through them.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from typing import TextIO

# --------------------------------------------------------------------------- text hygiene
#
# Two escapes, both in Python's own notation (``\xNN``, ``\uXXXX``, ``\UXXXXXXXX``):
#
# * a *name* (a tool's, a parameter's, a type's) is an identifier: every character
#   outside printable ASCII is escaped, and so is the backslash (``\\``), so two
#   different names never print alike (``codecs.decode(s, "unicode_escape")`` gives
#   the name back);
# * *text* (descriptions, content, reasons, URIs) keeps every visible character and
#   escapes the ones that hide, reorder or forge text, chosen by Unicode property, not
#   by a list of examples: every code point of category Cc (controls, CR, ESC, NEL), Cf
#   (format: zero-width, word joiner, soft hyphen, BOM, bidi controls, tags), Co
#   (private use), Cs (lone surrogates), Cn (unassigned, as of the running Python's
#   Unicode database), Zl or Zp, and every Default_Ignorable_Code_Point (Unicode's
#   derived property of the code points a renderer shows as nothing; beyond those
#   categories it holds the combining grapheme joiner U+034F, the Hangul fillers, the
#   Khmer inherent vowels and the variation selectors, and it keeps the tag block and
#   U+2065, U+FFF0..FFF8 escaped under any Unicode version).  Two rules by position:
#   a combining mark (category M) with no base -- first in its field, or after an
#   escape -- is escaped, since it would otherwise combine with sansmcp's own text or
#   alter an escape; and one text/emoji presentation selector (U+FE0E, U+FE0F) right
#   after a visible base character stays as it is (the emoji ``❤️``), while any other
#   variation selector, or a second one, is escaped (a run of them can carry hidden
#   data).  A backslash in text is left alone, so text escaping is not reversible:
#   ``--json`` is the exact form.  In multi-line content (a text block), newline and
#   tab stay as they are -- the text keeps its lines and indentation; each line and
#   each tab-separated part is a field of its own -- while CR, vertical tab, form
#   feed, NEL, U+2028 and U+2029 are escaped, so no line can overwrite or hide
#   another; a one-line field (a description's first line, a reason) escapes newline
#   and tab too.

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
#: Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties.txt; ``unicodedata``
#: does not expose it), as inclusive ranges.
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_IGNORABLE = re.compile(
    "[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in _DEFAULT_IGNORABLE) + "]"
)
_PRESENTATION = frozenset("\ufe0e\ufe0f")  # text / emoji presentation selectors
# What a character is to the text hygiene: shown as itself when it has what it needs.
_BASE, _MARK, _SELECTOR, _HIDE = range(4)
_ANNOTATIONS_WIDTH = 120
#: The most characters (escapes counted as shown) of one line of server text on
#: stderr -- a server log message, a failure's message; the rest is cut at ``…``.
MAX_LINE_CHARS = 2_000


def _escape(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def name_text(name: str) -> str:
    """``name`` as printable ASCII, one-to-one: non-ASCII, controls and ``\\`` escaped."""
    if name.isascii() and name.isprintable() and "\\" not in name:
        return name
    return "".join(_name_token(char) for char in name)


def _name_token(char: str) -> str:
    if char == "\\":
        return "\\\\"
    code = ord(char)
    return char if 0x20 <= code < 0x7F else _escape(code)


@functools.lru_cache(maxsize=4096)
def _kind(char: str) -> int:
    category = unicodedata.category(char)
    if category in _HIDDEN_CATEGORIES:
        return _HIDE
    if char in _PRESENTATION:
        return _SELECTOR
    if _IGNORABLE.match(char):
        return _HIDE
    return _MARK if category[0] == "M" else _BASE


def _tokens(text: str) -> Iterator[str]:
    """Each character of the field ``text`` as it is shown: itself or its escape."""
    before = _HIDE  # the field's start: no base for a mark
    for char in text:
        kind = _kind(char)
        if (
            kind == _BASE
            or (kind == _MARK and before != _HIDE)
            or (kind == _SELECTOR and before == _BASE)
        ):
            before = kind
            yield char
        else:
            before = _HIDE
            yield _escape(ord(char))


def _text_line(text: str) -> str:
    # str.isprintable() is False for every hidden category (and for Zs spaces other
    # than U+0020, which are not hidden): plain text, with no default-ignorable and no
    # leading mark, skips the per-character walk.
    if (
        text.isprintable()
        and _IGNORABLE.search(text) is None
        and (not text or _kind(text[0]) != _MARK)
    ):
        return text
    return "".join(_tokens(text))


def display_text(text: str, *, multiline: bool = False) -> str:
    """``text`` with the characters that hide or forge text escaped (see above).

    ``multiline`` keeps newline and tab (a text content block); otherwise they are
    escaped too.
    """
    if not multiline:
        return _text_line(text)
    return "\n".join("\t".join(map(_text_line, line.split("\t"))) for line in text.split("\n"))


def _line(text: str) -> str:
    return display_text(text)


def _first_line(text: str) -> str:
    # Only a newline ends the line: a CR or U+2028 is shown escaped, not taken as an end.
    return text.strip().split("\n", 1)[0]


def _clip(text: str, width: int) -> str:
    """``text`` escaped as one line and cut to ``width`` characters, never inside an escape."""
    out: list[str] = []
    used = 0
    for token in _tokens(text[: width + 1]):
        if used + len(token) > width:
            while used + 1 > width:
                used -= len(out.pop())
            out.append("…")
            break
        out.append(token)
        used += len(token)
    return "".join(out)


def _figure(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0")


def _emit(stream: TextIO, text: str) -> None:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    # A terminal that cannot show a character gets an escape, not a UnicodeEncodeError.
    text = text.encode(encoding, "backslashreplace").decode(encoding, "replace")
    stream.write(text + "\n")
    stream.flush()
