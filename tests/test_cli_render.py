"""What the CLI prints, without a server: escaping (issue 10, G.2) and field coverage (G.3).

``sansmcp.cli.render_listing`` / ``render_call`` are what ``main`` prints for a listing
or a call (``tests/test_cli.py`` drives ``main`` against real servers on loopback);
here they are fed hypothesis-drawn tools, schemas, results and text.

* Names are identifiers: printable ASCII, one-to-one (the escape is Python's, so
  ``unicode_escape`` decodes it back).
* Text keeps every visible character and escapes exactly the hidden classes; the
  oracle below is written from the issue, checked over every code point.
* ``--json`` carries every field of every result dataclass, and decodes back to the
  library's value; the human output shows each field listed in ``HUMAN_SHOWN`` and
  leaves out only those in ``HUMAN_OMITTED`` -- a field in neither fails the test.
"""

from __future__ import annotations

import base64
import codecs
import dataclasses
import json
import unicodedata
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sansmcp import ServerAnswered, cli
from sansmcp.cli import (
    describe_error,
    display_text,
    log_text,
    name_text,
    render_call,
    render_listing,
)
from sansmcp.core.jsonvalue import dumps_compact
from sansmcp.core.mcp.notifications import LogMessage
from sansmcp.core.results import CallResult, Content
from sansmcp.core.tools import (
    HeaderParam,
    SkippedTool,
    Tool,
    validate_tool,
)
from tests.tiers import examples

MODERN = "2026-07-28"

# --------------------------------------------------------------------------- the oracle

HIDDEN_CATEGORIES = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}
# Default_Ignorable_Code_Point, as Unicode's DerivedCoreProperties.txt lists it.
DEFAULT_IGNORABLE = [
    (0x00AD, 0x00AD),  # Cf SOFT HYPHEN
    (0x034F, 0x034F),  # Mn COMBINING GRAPHEME JOINER
    (0x061C, 0x061C),  # Cf ARABIC LETTER MARK
    (0x115F, 0x1160),  # Lo HANGUL CHOSEONG FILLER..HANGUL JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # Mn KHMER VOWEL INHERENT AQ..AA
    (0x180B, 0x180D),  # Mn MONGOLIAN FREE VARIATION SELECTOR ONE..THREE
    (0x180E, 0x180E),  # Cf MONGOLIAN VOWEL SEPARATOR
    (0x180F, 0x180F),  # Mn MONGOLIAN FREE VARIATION SELECTOR FOUR
    (0x200B, 0x200F),  # Cf ZERO WIDTH SPACE..RIGHT-TO-LEFT MARK
    (0x202A, 0x202E),  # Cf LEFT-TO-RIGHT EMBEDDING..RIGHT-TO-LEFT OVERRIDE
    (0x2060, 0x2064),  # Cf WORD JOINER..INVISIBLE PLUS
    (0x2065, 0x2065),  # Cn
    (0x2066, 0x206F),  # Cf LEFT-TO-RIGHT ISOLATE..NOMINAL DIGIT SHAPES
    (0x3164, 0x3164),  # Lo HANGUL FILLER
    (0xFE00, 0xFE0F),  # Mn VARIATION SELECTOR-1..16
    (0xFEFF, 0xFEFF),  # Cf ZERO WIDTH NO-BREAK SPACE
    (0xFFA0, 0xFFA0),  # Lo HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),  # Cn
    (0x1BCA0, 0x1BCA3),  # Cf SHORTHAND FORMAT LETTER OVERLAP..UP STEP
    (0x1D173, 0x1D17A),  # Cf MUSICAL SYMBOL BEGIN BEAM..END PHRASE
    (0xE0000, 0xE0000),  # Cn
    (0xE0001, 0xE0001),  # Cf LANGUAGE TAG
    (0xE0002, 0xE001F),  # Cn
    (0xE0020, 0xE007F),  # Cf TAG SPACE..CANCEL TAG
    (0xE0080, 0xE00FF),  # Cn
    (0xE0100, 0xE01EF),  # Mn VARIATION SELECTOR-17..256
    (0xE01F0, 0xE0FFF),  # Cn
]
IGNORABLE = frozenset(code for low, high in DEFAULT_IGNORABLE for code in range(low, high + 1))
PRESENTATION = {0xFE0E, 0xFE0F}  # text / emoji presentation: kept right after a base


def hidden(code: int) -> bool:
    """The issue's classes: categories Cc Cf Co Cs Cn Zl Zp, and the default-ignorables
    (tag characters, Hangul fillers, U+034F, variation selectors among them)."""
    return unicodedata.category(chr(code)) in HIDDEN_CATEGORIES or code in IGNORABLE


def is_mark(code: int) -> bool:
    return unicodedata.category(chr(code)).startswith("M")


def expected_field(text: str) -> str:
    """One field as the issue says it is shown: a hidden character escaped, except a
    presentation selector right after a base; a mark with no base (at the start, after
    an escape) escaped; everything else as it is."""
    out: list[str] = []
    before = "none"  # what the previous character was shown as
    for char in text:
        code = ord(char)
        if code in PRESENTATION:
            raw = before == "base"
        elif hidden(code):
            raw = False
        else:
            raw = not is_mark(code) or before != "none"
        out.append(char if raw else python_escape(code))
        before = ("mark" if is_mark(code) else "base") if raw else "none"
    return "".join(out)


def expected_text(text: str, multiline: bool) -> str:
    if not multiline:
        return expected_field(text)
    return "\n".join("\t".join(map(expected_field, line.split("\t"))) for line in text.split("\n"))


def leaks(line: str) -> list[str]:
    """What a rendered line shows that a terminal would hide or attach to other text: a
    hidden code point (a presentation selector right after a base excepted) or a mark
    first on the line."""
    found = []
    for i, char in enumerate(line):
        code = ord(char)
        before = ord(line[i - 1]) if i else None
        after_base = before is not None and not hidden(before) and not is_mark(before)
        selector_kept = code in PRESENTATION and after_base
        if (hidden(code) and not selector_kept) or (i == 0 and is_mark(code)):
            found.append(char)
    return found


def python_escape(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


# Any code point, surrogates included (hypothesis leaves them out of text by default).
any_char = st.one_of(
    st.characters(codec=None),
    st.integers(0xD800, 0xDFFF).map(chr),
    st.integers(0xE0000, 0xE007F).map(chr),
    st.sampled_from("\\\n\t\r\x00\x1b\x7f\x85\u00ad\u200b\u2060\ufeff\u2028\u202e\u3164"),
    # marks, joiners and selectors: what combines with the character before
    st.sampled_from("\u034f\u0301\u0338\u20e3\u17b4\u180b\ufe00\ufe0e\ufe0f\U000e0100e\u2764"),
)
any_text = st.text(any_char, max_size=40)


# --------------------------------------------------------------------------- names


@settings(max_examples=examples(500), deadline=None)
@given(any_text)
@example("caf\u00e9")
@example("caf\\xe9")
@example("\\")
@example("\U0001f600\ud800")
def test_a_name_prints_as_printable_ascii_and_decodes_back(name: str) -> None:
    shown = name_text(name)
    assert all(0x20 <= ord(c) < 0x7F for c in shown), shown
    assert codecs.decode(shown, "unicode_escape") == name  # so no two names print alike


@given(any_text, any_text)
def test_two_different_names_never_print_alike(a: str, b: str) -> None:
    assert (name_text(a) == name_text(b)) is (a == b)


def test_name_escapes_by_plane() -> None:
    assert name_text("caf\u00e9") == "caf\\xe9"
    assert name_text("caf\\xe9") == "caf\\\\xe9"
    assert name_text("a\u200bb\U000e0041\U0001f600") == "a\\u200bb\\U000e0041\\U0001f600"
    assert name_text("plain_name-1.x") == "plain_name-1.x"


# --------------------------------------------------------------------------- text


def test_every_code_point_after_a_base_and_every_mark_with_none() -> None:
    """All 1,114,112 code points after a visible base, and every mark (category M, the
    only ones whose showing depends on what precedes) after an escape: escaped iff the
    issue's classes say so."""
    every = [chr(code) for code in range(0x110000)]
    categories = [unicodedata.category(c) for c in every]
    marks = [c for c, cat in zip(every, categories, strict=True) if cat.startswith("M")]
    cases = {
        "a": (  # after a base: hidden ones escaped, a presentation selector kept
            every,
            [
                c
                if ord(c) in PRESENTATION or not (cat in HIDDEN_CATEGORIES or ord(c) in IGNORABLE)
                else python_escape(ord(c))
                for c, cat in zip(every, categories, strict=True)
            ],
        ),
        "\x00": (marks, [python_escape(ord(c)) for c in marks]),  # no base: every mark escaped
    }
    for before, (chars, tokens) in cases.items():
        lead = display_text(before)
        shown = display_text("".join(before + c for c in chars))
        if shown != "".join(lead + token for token in tokens):  # name the first that differs
            wrong = next(
                c
                for c, t in zip(chars, tokens, strict=True)
                if display_text(before + c) != lead + t
            )
            pytest.fail(f"after {before!r}: wrong at U+{ord(wrong):04X}")
    assert len(marks) > 2_000  # Mn, Mc and Me, variation selectors among them
    assert display_text("a\u034fb") == "a\\u034fb"  # default-ignorable, not in the categories


@pytest.mark.parametrize(
    ("char", "escape"),
    [
        ("\u200b", "\\u200b"),  # zero-width space
        ("\u2060", "\\u2060"),  # word joiner
        ("\u00ad", "\\xad"),  # soft hyphen
        ("\ufeff", "\\ufeff"),  # BOM
        ("\U000e0041", "\\U000e0041"),  # tag LATIN CAPITAL A
        ("\U000e0000", "\\U000e0000"),  # unassigned, in the tag block
        ("\u3164", "\\u3164"),  # Hangul filler
        ("\u115f", "\\u115f"),
        ("\u1160", "\\u1160"),
        ("\uffa0", "\\uffa0"),
        ("\ue000", "\\ue000"),  # private use
        ("\U0010fffd", "\\U0010fffd"),  # private use, plane 16
        ("\u0378", "\\u0378"),  # unassigned
        ("\u202e", "\\u202e"),  # bidi override
        ("\u2028", "\\u2028"),
        ("\r", "\\x0d"),
        ("\x85", "\\x85"),
        ("\u034f", "\\u034f"),  # combining grapheme joiner (Mn, default-ignorable)
        ("\u17b4", "\\u17b4"),  # Khmer inherent vowel (Mn, default-ignorable)
        ("\u180b", "\\u180b"),  # Mongolian free variation selector
        ("\ufe00", "\\ufe00"),  # variation selector 1
        ("\U000e0100", "\\U000e0100"),  # variation selector 17
    ],
)
def test_the_issue_examples_are_escaped(char: str, escape: str) -> None:
    assert display_text(f"a{char}b") == f"a{escape}b"
    assert display_text(f"a{char}b", multiline=True) == f"a{escape}b"


def test_visible_text_is_left_alone() -> None:
    text = "Grüße, 東京 \U0001f600 \\n \u00a0 x\u0301 \u2764\ufe0f 1\ufe0f\u20e3 \u0915\u094d\u0937"
    assert display_text(text) == text
    assert display_text("a\nb\tc") == "a\\x0ab\\x09c"
    assert display_text("a\nb\tc\r\n", multiline=True) == "a\nb\tc\\x0d\n"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\u0301x", "\\u0301x"),  # a mark first in the field: it has no base
        ("\u200b\u0301", "\\u200b\\u0301"),  # after an escape: it would alter the escape
        ("a\t\u0301", "a\t\\u0301"),  # first after a tab (multi-line: a field of its own)
        ("\u2764\ufe0f\ufe0f", "\u2764\ufe0f\\ufe0f"),  # one selector per base
        ("\ufe0fa", "\\ufe0fa"),  # a selector with no base
        ("x\u0301\ufe0f", "x\u0301\\ufe0f"),  # after a mark: not a base
    ],
)
def test_marks_and_selectors_without_a_base_are_escaped(text: str, shown: str) -> None:
    assert display_text(text, multiline=True) == shown


@settings(max_examples=examples(300), deadline=None)
@given(any_text, st.booleans())
def test_text_is_shown_as_the_issue_says(text: str, multiline: bool) -> None:
    shown = display_text(text, multiline=multiline)
    assert shown == expected_text(text, multiline)
    for line in shown.split("\n") if multiline else [shown]:
        for field in line.split("\t") if multiline else [line]:
            assert leaks(field) == [], field


CATEGORIES = sorted(
    {unicodedata.category(chr(code)) for code in range(0x110000)}
)  # all 30 of them, Cs and Cn included
characters_of_every_category = st.sampled_from(CATEGORIES).flatmap(
    lambda category: (
        st.integers(0xD800, 0xDFFF).map(chr)
        if category == "Cs"
        else st.characters(categories=[category], codec=None)
    )  # type: ignore[list-item]
)


@settings(max_examples=examples(300), deadline=None)
@given(st.text(characters_of_every_category | any_char, max_size=30), st.booleans())
def test_no_rendered_character_is_hidden_whatever_its_category(text: str, multiline: bool) -> None:
    """Characters drawn category by category: the output holds none of Cc Cf Co Cs Cn Zl
    Zp (newline and tab of multi-line text aside), no default-ignorable but a presentation
    selector after a base, and no field starts with a mark."""
    shown = display_text(text, multiline=multiline)
    kept = shown.replace("\n", "").replace("\t", "") if multiline else shown
    assert not any(unicodedata.category(c) in HIDDEN_CATEGORIES for c in kept), shown
    for line in shown.split("\n") if multiline else [shown]:
        for field in line.split("\t") if multiline else [line]:
            assert leaks(field) == [], field
    visible = [c for c in text if not hidden(ord(c)) and not is_mark(ord(c))]
    assert all(c in shown for c in visible)  # ordinary text stays as it is


def test_a_server_line_on_stderr_is_clipped() -> None:
    """A server log message or failure of 3 MB is one line of at most MAX_LINE_CHARS."""
    huge = "\u034f" + "m" * 3_000_000 + "\n"
    line = log_text(LogMessage(level="error", logger="l\u034f" * 5_000, data=huge))
    assert line is not None and line.endswith("…")
    assert cli.MAX_LINE_CHARS - 10 < len(line) <= cli.MAX_LINE_CHARS  # not inside an escape
    assert line.startswith("sansmcp: server log [error] l\\u034fl\\u034f")
    error = ServerAnswered(huge, reason="unknown_result_type")
    described = describe_error(error)
    assert len(described) == cli.MAX_LINE_CHARS and described.endswith("…")
    assert described.startswith("sansmcp: ServerAnswered [reason=unknown_result_type]: \\u034fmm")
    short = log_text(LogMessage(level="info", logger=None, data={"k": 1}))
    assert short == 'sansmcp: server log [info] {"k": 1}'


@settings(max_examples=100, deadline=None)
@given(any_text | st.builds(lambda text, n: text * n, any_text, st.integers(0, 300)), any_text)
def test_any_server_log_line_is_one_clean_bounded_line(data: str, logger: str) -> None:
    line = log_text(LogMessage(level="warning", logger=logger, data=data))
    assert line is not None and len(line) <= cli.MAX_LINE_CHARS
    assert "\n" not in line and leaks(line) == []


# --------------------------------------------------------------------------- schemas

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    any_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=20,
).map(lambda value: json.loads(json.dumps(value)))  # as a parse gives it: no split pairs
property_schemas = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {}, optional={"type": json_values | st.lists(json_values | st.text(), max_size=3)}
    ),
)
input_schemas = st.fixed_dictionaries(
    {},
    optional={
        "type": st.just("object"),
        "properties": json_values | st.dictionaries(any_text, property_schemas, max_size=6),
        "required": json_values | st.lists(any_text | json_values, max_size=4),
        "description": json_values,
    },
).map(lambda value: json.loads(json.dumps(value)))


def listing_lines(text: str) -> list[str]:
    lines = text.split("\n")
    for line in lines:  # every line: nothing hidden, so nothing can forge another line
        assert leaks(line) == [], line
    return lines


@settings(max_examples=examples(150), deadline=None)
@given(name=any_text, description=any_text, schema=input_schemas | json_values)
@example(name="t", description="", schema={"type": "object", "required": [{"x": 1}]})
@example(name="t", description="", schema={"properties": {"x": {}}, "required": [[1], {}]})
@example(name="t", description="", schema={"properties": {"x": {"type": [{"a": 1}, [2]]}}})
@example(name="0", description="", schema={"properties": {"": {}}, "required": [""]})
def test_any_input_schema_renders(name: str, description: str, schema: Any) -> None:
    raw = {"name": name, "description": description, "inputSchema": schema}
    entry = validate_tool(0, raw, modern=True, max_tool_bytes=1 << 20)
    tools = [entry] if isinstance(entry, Tool) else []
    skipped = [entry] if isinstance(entry, SkippedTool) else []
    lines = listing_lines(render_listing(MODERN, tools, skipped))
    document = json.loads(render_listing(MODERN, tools, skipped, as_json=True))
    if tools:
        assert lines[2].startswith(f"  {name_text(name)} ")
        assert document["tools"][0]["name"] == name
        assert document["tools"][0]["input_schema"] == schema
    else:
        assert lines[-1].startswith("  #0")
        assert document["skipped"][0]["reason"] == skipped[0].reason


@settings(max_examples=examples(200), deadline=None)
@given(json_values)
def test_a_tool_whose_schema_is_any_json_value_renders(schema: Any) -> None:
    """Not only what ``validate_tool`` lets through: any schema bytes a Tool can hold."""
    tool = Tool(name="t", description="d", input_schema=dumps_compact(schema))
    lines = listing_lines(render_listing(MODERN, [tool], []))
    assert lines[2].startswith("  t  ")
    assert len(lines[2]) < 2 + 1 + 2 + 44 + 2 + 1  # the parameters column is clipped
    document = json.loads(render_listing(MODERN, [tool], [], as_json=True))
    assert document["tools"][0]["input_schema"] == schema


def test_a_wide_schema_is_clipped_and_cheap() -> None:
    schema = {"properties": {f"p{i}": {"type": "string"} for i in range(50_000)}}
    tool = Tool(name="t", description="d", input_schema=dumps_compact(schema))
    row = render_listing(MODERN, [tool], []).split("\n")[2]
    assert row == "  t     p0?: string, p1?: string, p2?: string, p3?:…  d"


# --------------------------------------------------------------------------- every field
#
# One sample value per field (distinctive, so the human output can be searched for it),
# and for each field either the text the human output must show for it or the reason
# it is left to --json.  A field added to a result type and to neither table fails
# test_every_field_is_shown_or_left_out_on_purpose.

PARAMS_SCHEMA = dumps_compact({"type": "object", "properties": {"p_param": {"type": "string"}}})
SAMPLES: dict[type, dict[str, Any]] = {
    Tool: {
        "name": "tool_name",
        "description": "D-DESCRIPTION",
        "input_schema": PARAMS_SCHEMA,
        "title": "T-TITLE",
        "annotations": {"readOnlyHint": True},
        "output_schema": dumps_compact({"type": "object"}),
        "header_params": (HeaderParam(header="H-Header", path=("p_param",), type="string"),),
        "task_support": "optional",
    },
    HeaderParam: {"header": "H-Header", "path": ("p_param", "q"), "type": "string"},
    SkippedTool: {"index": 7, "name": "skipped_name", "reason": "R-REASON"},
    Content: {
        "type": "resource",
        "text": "T-TEXT",
        "data": b"\x00\x01\x02",
        "mime_type": "M-TYPE",
        "uri": "U-URI",
        "name": "N-NAME",
        "annotations": {"A-KEY": 1},
    },
    CallResult: {
        "content": [Content(type="text", text="C-CONTENT")],
        "is_error": True,
        "structured_content": dumps_compact({"S-KEY": None}),
        "validated": True,
    },
}
HUMAN_SHOWN: dict[type, dict[str, str]] = {
    Tool: {"name": "tool_name", "description": "D-DESCRIPTION", "input_schema": "p_param?: string"},
    SkippedTool: {"index": "#7", "name": "skipped_name", "reason": "R-REASON"},
    Content: {
        "type": "[resource",
        "text": "] T-TEXT",
        "data": "3 bytes",
        "mime_type": "M-TYPE",
        "uri": "U-URI",
        "name": "N-NAME",
        "annotations": 'annotations={"A-KEY": 1}',
    },
    CallResult: {
        "content": "[text] C-CONTENT",
        "is_error": "the tool reported an error",
        "structured_content": 'structured content: {"S-KEY":null}',
        "validated": "conforms to the tool's outputSchema",
    },
}
_TABLE = "the tools table shows what picks a tool and calls it; --json has the rest"
HUMAN_OMITTED: dict[type, dict[str, str]] = {
    Tool: {
        "title": _TABLE,
        "annotations": _TABLE,
        "output_schema": _TABLE,
        "header_params": _TABLE,
        "task_support": _TABLE,
    },
    HeaderParam: {
        "header": "part of Tool.header_params",
        "path": "part of Tool.header_params",
        "type": "part of Tool.header_params",
    },
}


def sample(cls: type) -> Any:
    values = {}
    for field in dataclasses.fields(cls):
        if field.name in SAMPLES[cls]:
            values[field.name] = SAMPLES[cls][field.name]
        else:
            has_default = field.default is not dataclasses.MISSING
            assert has_default, f"add a sample for {cls.__name__}.{field.name} to SAMPLES"
    return cls(**values)


def decoded(cls: type, document: dict[str, Any]) -> Any:
    """The library value a --json object stands for (the inverse of the documented mapping)."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in document:
            values[field.name] = None  # absent: the field was None
            continue
        item = document[field.name]
        kind = str(field.type)
        if kind.startswith("bytes"):
            item = dumps_compact(item) if field.name in cli._JSON_BYTES else base64.b64decode(item)
        elif kind.startswith("list[Content]"):
            item = [decoded(Content, block) for block in item]
        elif kind.startswith("tuple[HeaderParam"):
            item = tuple(decoded(HeaderParam, param) for param in item)
        elif kind.startswith("tuple"):
            item = tuple(item)
        values[field.name] = item
    return cls(**values)


def listing_of(tool: Tool, skipped: SkippedTool) -> tuple[str, dict[str, Any]]:
    text = render_listing(MODERN, [tool], [skipped])
    return text, json.loads(render_listing(MODERN, [tool], [skipped], as_json=True))


def call_of(result: CallResult) -> tuple[str, dict[str, Any]]:
    return render_call("tool_name", MODERN, result), json.loads(
        render_call("tool_name", MODERN, result, as_json=True)
    )


def test_every_field_is_shown_or_left_out_on_purpose() -> None:
    for cls in (Tool, HeaderParam, SkippedTool, Content, CallResult):
        names = {field.name for field in dataclasses.fields(cls)}
        shown = set(HUMAN_SHOWN.get(cls, {}))
        omitted = set(HUMAN_OMITTED.get(cls, {}))
        assert shown & omitted == set(), cls
        assert names - shown - omitted == set(), f"{cls.__name__}: say how the human output shows"
        assert (shown | omitted) - names == set(), cls


def test_json_carries_every_field_and_decodes_back() -> None:
    tool, skipped, result = sample(Tool), sample(SkippedTool), sample(CallResult)
    _, listing = listing_of(tool, skipped)
    assert list(listing) == ["protocol_version", "tools", "skipped", "skipped_count"]
    assert listing["skipped_count"] == 1
    assert listing["protocol_version"] == MODERN
    # Every field present (no sample is None), in field order, and decoding gives the value.
    assert list(listing["tools"][0]) == [f.name for f in dataclasses.fields(Tool)]
    assert list(listing["tools"][0]["header_params"][0]) == ["header", "path", "type"]
    assert decoded(Tool, listing["tools"][0]) == tool
    assert list(listing["skipped"][0]) == [f.name for f in dataclasses.fields(SkippedTool)]
    assert decoded(SkippedTool, listing["skipped"][0]) == skipped
    assert listing["tools"][0]["input_schema"] == json.loads(PARAMS_SCHEMA)  # embedded, parsed

    block = sample(Content)
    _, called = call_of(CallResult(content=[block], is_error=False, structured_content=None))
    assert list(called["content"][0]) == [f.name for f in dataclasses.fields(Content)]
    assert decoded(Content, called["content"][0]) == block
    assert called["content"][0]["data"] == "AAEC"  # binary bytes are base64
    _, called = call_of(result)
    result_fields = [f.name for f in dataclasses.fields(CallResult)]
    assert list(called) == ["protocol_version", *result_fields]
    assert decoded(CallResult, called) == result


def test_human_output_shows_each_field() -> None:
    text, _ = listing_of(sample(Tool), sample(SkippedTool))
    for cls in (Tool, SkippedTool):
        for field, shown in HUMAN_SHOWN[cls].items():
            assert shown in text, (cls.__name__, field)
    text, _ = call_of(
        CallResult(content=[sample(Content)], is_error=False, structured_content=None)
    )
    for field, shown in HUMAN_SHOWN[Content].items():
        assert shown in text, ("Content", field)
    text, _ = call_of(sample(CallResult))
    for field, shown in HUMAN_SHOWN[CallResult].items():
        assert shown in text, ("CallResult", field)
    assert text.startswith(f"protocol {MODERN} · tool_name → ")


def test_json_null_is_not_absent() -> None:
    """A 2026-07-28 structuredContent may be JSON null: it is not the same as none at all."""
    absent = CallResult(content=[], is_error=False, structured_content=None)
    null = CallResult(content=[], is_error=False, structured_content=b"null")
    (absent_text, absent_json), (null_text, null_json) = call_of(absent), call_of(null)
    assert "structured_content" not in absent_json and "structured content" not in absent_text
    assert null_json["structured_content"] is None and "structured content: null" in null_text


# Strings as a JSON parse gives them (a surrogate pair is always one character there).
parsed_text = any_text.map(lambda text: json.loads(json.dumps(text)))
optional_text = st.none() | parsed_text
annotation_maps = st.none() | st.dictionaries(parsed_text, json_values, max_size=3)
contents = st.builds(
    Content,
    type=st.sampled_from(["text", "image", "audio", "resource", "resource_link"]),
    text=optional_text,
    data=st.none() | st.binary(max_size=20),
    mime_type=optional_text,
    uri=optional_text,
    name=optional_text,
    annotations=annotation_maps,
)
results = st.builds(
    CallResult,
    content=st.lists(contents, max_size=4),
    is_error=st.booleans(),
    structured_content=st.none() | json_values.map(dumps_compact),
)


@settings(max_examples=examples(300), deadline=None)
@given(results, any_text)
def test_any_result_prints_and_its_json_decodes_back(result: CallResult, tool: str) -> None:
    text = render_call(tool, MODERN, result)
    for line in text.split("\n"):
        assert all(leaks(field) == [] for field in line.split("\t")), line
    assert text.split("\n")[0].startswith(f"protocol {MODERN} · {name_text(tool)} → ")
    document = render_call(tool, MODERN, result, as_json=True)
    assert document.isascii()
    assert decoded(CallResult, json.loads(document)) == result


def test_skips_past_the_recorded_ones_are_counted() -> None:
    """Only the first ``Limits.max_recorded_skips`` skips carry details; the rest are a count."""
    skipped = [SkippedTool(index=i, name=None, reason="tool name is missing") for i in range(2)]
    text = render_listing(MODERN, [], skipped, skipped_count=1234)
    assert text.split("\n")[1:] == [
        "skipped 1,234 unusable tool definition(s) (1,232 more not recorded):",
        "  #0: tool name is missing",
        "  #1: tool name is missing",
    ]
    document = json.loads(render_listing(MODERN, [], skipped, skipped_count=1234, as_json=True))
    assert (len(document["skipped"]), document["skipped_count"]) == (2, 1234)
    assert render_listing(MODERN, [], [], skipped_count=0) == f"protocol {MODERN} · 0 tools"


class Sink:
    """A terminal stream: what was written, in order."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def test_a_task_on_the_status_line_is_escaped_clipped_and_redrawn() -> None:
    """``sansmcp call --tasks`` draws the task's id, status and message on the progress
    line; all three are the server's, shown escaped and clipped to the terminal."""
    sink = Sink()
    line = cli.ProgressLine(sink, width=40)  # type: ignore[arg-type]
    line.task("task-7", "working", None)
    assert sink.text == "\r\x1b[Ktask task-7 working"
    task_id, status = "t\u202e\x1b", "input\u200brequired"
    line.task(task_id, status, "\x1b[31m" + "x" * 100)
    shown = sink.text.rsplit("\r\x1b[K", 1)[1]
    assert "\x1b" not in shown and "\u202e" not in shown and "\u200b" not in shown
    assert len(shown) <= 39 and shown.endswith("…")
    assert shown.startswith(f"task {name_text(task_id)} {name_text(status)}  ")
    line.clear()
    assert sink.text.endswith("\r\x1b[K") and line.shown == ""


def test_a_call_that_ran_as_a_task_names_it_in_both_outputs() -> None:
    result = CallResult(content=[], is_error=False, structured_content=None)
    text = render_call("tool_name", MODERN, result, task_id="task-\u202e7")
    assert text.split("\n")[0] == f"protocol {MODERN} · tool_name → ok · task task-\\u202e7"
    document = json.loads(render_call("tool_name", MODERN, result, as_json=True, task_id="t-7"))
    assert list(document)[:2] == ["protocol_version", "task_id"]
    assert document["task_id"] == "t-7" and document["content"] == []
    # a call that did not run as a task has no task_id at all
    plain = json.loads(render_call("tool_name", MODERN, result, as_json=True))
    assert "task_id" not in plain and "· task" not in render_call("tool_name", MODERN, result)


def test_a_tool_served_only_as_a_task_names_the_option() -> None:
    """-32021 naming the tasks extension: the next step is ``--tasks``; another -32021
    (another capability) and another code name nothing."""
    extension = {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    hint = "(next: call it again with --tasks)"
    refused = ServerAnswered("x", reason="jsonrpc_error", code=-32021, data=extension)
    assert describe_error(refused).endswith(hint)
    other = {"requiredCapabilities": {"sampling": {}}}
    for code, data in ((-32021, other), (-32603, extension), (-32021, None)):
        error = ServerAnswered("x", reason="jsonrpc_error", code=code, data=data)
        assert hint not in describe_error(error)
