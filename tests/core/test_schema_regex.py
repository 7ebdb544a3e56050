"""The linear-time ``pattern`` matcher against Python's ``re`` (issue 15, part 2).

Python's ``re`` agrees with ECMA-262 on the generated subset once ``$`` is read as
the end of the text (``\\Z``; Python's ``$`` also matches before a final newline)
and the texts are ASCII (``re.ASCII``: ECMA's ``\\d \\w`` are ASCII-only).
"""

from __future__ import annotations

import contextlib
import re
import time

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from sansmcp.core.schema.budget import Budget, BudgetExhausted
from sansmcp.core.schema.regex import MAX_GROUP_DEPTH, MAX_REPEAT, PatternError, compile_pattern
from tests.tiers import examples


def search(pattern: str, text: str, steps: int = 10**7) -> bool:
    budget = Budget(steps)
    return compile_pattern(pattern, budget).search(text, budget)


def python(pattern: str, text: str) -> bool:
    return re.search(pattern.replace("$", r"\Z"), text, re.ASCII) is not None


TABLE = [
    ("a", "xa", True),
    ("^a$", "a", True),
    ("^a$", "ab", False),
    ("^a|b$", "xb", True),
    ("(a+)+$", "a" * 20 + "b", False),
    ("(a+)+$", "aaa", True),
    ("[a-c]+x", "zzbbx", True),
    ("[^a-c]", "abc", False),
    ("[^a-c]", "abcd", True),
    (r"\d{3}-\d{2}", "12-123-45", True),
    ("^(foo|bar)*baz", "foofoobarbaz", True),
    (r"\bfoo\b", "a foo b", True),
    (r"\bfoo\b", "afoo", False),
    (r"\Bfoo", "afoo", True),
    ("a{2,3}", "ba", False),
    ("a{2,3}", "baab", True),
    ("^a{2,}$", "aaaaa", True),
    ("^a{2}$", "aaa", False),
    ("x*", "", True),
    ("^colou?r$", "color", True),
    ("^colou?r$", "colouur", False),
    ("(?:ab|a)*c$", "ababac", True),
    (r"[\w-]+@", "a-b@", True),
    ("(a*)*b", "aaa", False),
    ("a+?b", "aab", True),
    ("a{1,2}?", "a", True),
    ("(?<year>\\d{4})-", "2024-", True),
    (".", "\n", False),
    (".", "x", True),
    (r"\s", "\t", True),
    (r"\S", " \t", False),
    (r"\D", "123", False),
    (r"\W", "a_1", False),
    (r"[\d.]+", ".5", True),
    (r"\x41\u0042", "AB", True),
    (r"\t\n\v\f\r\0", "\t\n\v\f\r\0", True),
    (r"\cJ", "\n", True),
    (r"\.\*\+\?\(\)\[\]\{\}\|\/\-\^\$\\", ".*+?()[]{}|/-^$\\", True),
    ("[a-]", "-", True),
    ("[-a]", "-", True),
    ("[]a]", "]", False),  # ECMA: [] is an empty class, then a literal "a]"
    ("a{", "a{", True),
    ("a{1", "a{1", True),
    ("a{1,", "a{1,", True),
    ("a{,2}", "a{,2}", True),
    ("a{" + "9" * 5000, "a{" + "9" * 5000, True),
    ("}", "}", True),
    ("]", "]", True),
    ("[\\b]", "\b", True),
    ("()", "", True),
    ("a|", "b", True),
    ("[^\\0-a]", "a", False),
    ("[^\\0-a]", "b", True),
    ("[^\\0-\\u{10FFFF}]", "abc", False),
    ("[a-za-c]", "b", True),
    ("[a-cb-e]", "e", True),
    ("[a-zc-d]", "q", True),
]


@pytest.mark.parametrize(("pattern", "text", "expected"), TABLE)
def test_table(pattern: str, text: str, expected: bool) -> None:
    assert search(pattern, text) is expected


def test_non_ascii_classes_follow_ecma() -> None:
    assert search(r"\s", "\u00a0") and search(r"\s", "\ufeff") and search(r"\s", "\u3000")
    assert not search(r"\d", "\u0663")  # ARABIC-INDIC DIGIT THREE: not \d in ECMA-262
    assert not search(r"\w", "\u00e9")
    assert search(r"^\u{1F600}$", "\U0001f600") and search("^.$", "\U0001f600")
    assert not search(".", "\u2028") and not search(".", "\r")
    assert search("[\u00e0-\u00ff]", "\u00e9") and search("\\é", "é")
    assert search("[^\\d]", "\U0001f600")


REFUSED = [
    ("(a)\\1", "backreferences"),
    ("(?=a)", "lookaround"),
    ("(?!a)", "lookaround"),
    ("(?<=a)", "lookaround"),
    ("(?<!a)", "lookaround"),
    ("(?i)a", "lookaround and inline flags"),
    ("\\p{L}", "the escape \\p is not supported"),
    ("\\k<a>", "the escape \\k"),
    ("(a", "unbalanced '('"),
    ("a)", "unbalanced ')'"),
    ("*a", "nothing to repeat"),
    ("a|+", "nothing to repeat"),
    ("{2}", "nothing to repeat"),
    ("^*", "a quantifier after an assertion"),
    ("$+", "a quantifier after an assertion"),
    ("\\b{2}", "a quantifier after an assertion"),
    ("a{3,2}", "out of order"),
    (f"a{{{MAX_REPEAT + 1}}}", "a repetition count over"),
    ("[z-a]", "a character range out of order"),
    ("a{" + "9" * 5000 + "}", "a repetition count over"),
    ("a{1," + "9" * 5000 + "}", "a repetition count over"),
    ("[\\d-z]", "a class escape as a range end"),
    ("[a", "the pattern ends early"),
    ("\\", "the pattern ends early"),
    ("\\x4", "\\x without two hex digits"),
    ("\\u12", "\\u without four hex digits"),
    ("\\u{}", "\\u{...} without hex digits"),
    ("\\u{110000}", "past U+10FFFF"),
    ("\\c1", "\\c without a control letter"),
    ("(" * (MAX_GROUP_DEPTH + 1) + ")" * (MAX_GROUP_DEPTH + 1), "groups nested deeper"),
]


@pytest.mark.parametrize(("pattern", "message"), REFUSED)
def test_refused(pattern: str, message: str) -> None:
    with pytest.raises(PatternError) as refused:
        compile_pattern(pattern, Budget(10**6))
    assert message in str(refused.value)


def test_nesting_at_the_cap_compiles() -> None:
    nested = "(" * MAX_GROUP_DEPTH + "a" + ")" * MAX_GROUP_DEPTH
    assert search(nested, "a")


# ---------------------------------------------------------------- generated patterns

ATOMS = st.sampled_from(["a", "b", "c", ".", "[ab]", "[^a]", "[a-c]", r"\d", r"\w", r"\s", "x"])


def patterns() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map("|".join),
            inner.map(lambda p: f"(?:{p})"),
            inner.map(lambda p: f"({p})"),
            st.tuples(
                inner, st.sampled_from(["*", "+", "?", "{2}", "{1,3}", "{2,}", "*?", "+?"])
            ).map(lambda t: f"(?:{t[0]}){t[1]}"),
        )

    body = st.recursive(ATOMS, extend, max_leaves=8)
    return st.tuples(
        st.sampled_from(["", "^"]), body, st.sampled_from(["", "$"]), st.sampled_from(["", r"\b"])
    ).map(lambda t: t[0] + t[3] + t[1] + t[2])


TEXTS = st.text(alphabet="abcx1 _-", max_size=12)


@hsettings(max_examples=examples(400), deadline=None)
@given(patterns(), TEXTS)
def test_generated_patterns_agree_with_re(pattern: str, text: str) -> None:
    assert search(pattern, text) is python(pattern, text), pattern


# ---------------------------------------------------------------- the bound


def test_search_is_linear_and_charged() -> None:
    """Steps grow with the text, never exponentially; a spent budget raises."""
    budget = Budget(10**8)
    program = compile_pattern("(a+)+$", budget)
    spent = []
    for size in (1_000, 2_000, 4_000):
        budget = Budget(10**8)
        assert not program.search("a" * size + "!", budget)
        spent.append(budget.spent)
    assert spent[1] / spent[0] == pytest.approx(2, rel=0.01)
    assert spent[2] / spent[0] == pytest.approx(4, rel=0.01)
    with pytest.raises(BudgetExhausted):
        program.search("a" * 65_536 + "!", Budget(500_000))


def test_compiling_is_charged_per_instruction() -> None:
    with pytest.raises(BudgetExhausted):
        compile_pattern("(?:abc){1000}", Budget(2_000))
    budget = Budget(10**6)
    compile_pattern("(?:abc){1000}", budget)
    assert 3_000 <= budget.spent < 3_100


def test_an_anchored_pattern_stops_when_no_thread_is_left() -> None:
    budget = Budget(10**6)
    assert not compile_pattern("^ab", budget).search("x" * 100_000, budget)
    assert budget.spent < 20


def test_catastrophic_pattern_cpu_is_reported() -> None:
    """The issue's hostile pattern on 64 KiB: ended by the default budget (CPU printed)."""
    budget = Budget(500_000)
    program = compile_pattern("(a+)+$", budget)
    start = time.process_time()
    with pytest.raises(BudgetExhausted):
        program.search("a" * 65_536 + "!", budget)
    print(f"(a+)+$ on 64 KiB: budget spent after {time.process_time() - start:.3f} s CPU")


PATTERN_CHARS = st.sampled_from(
    list("ab.|*+?()[]{}^$\\-,:<>=!0123456789dDwWsSbBuxck\u00e9\U0001f600")
)


@hsettings(max_examples=examples(1500, 400), deadline=None)
@given(st.text(PATTERN_CHARS, max_size=24) | st.text(max_size=12), st.text(max_size=16))
def test_any_pattern_compiles_or_is_refused(pattern: str, text: str) -> None:
    """A hostile pattern: a Program or PatternError (a budget error if it is huge); a
    compiled one answers any text with a bool, never anything else."""
    budget = Budget(20_000)
    try:
        program = compile_pattern(pattern, budget)
    except (PatternError, BudgetExhausted):
        return
    with contextlib.suppress(BudgetExhausted):
        assert program.search(text, Budget(20_000)) in (True, False)
