"""sansmcp.core.auth: WWW-Authenticate challenges, best effort and bounded."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.auth import MAX_WWW_AUTHENTICATE, parse_www_authenticate
from tests.tiers import examples

Challenges = list[tuple[str, dict[str, str]]]

CASES: list[tuple[str, str, Challenges]] = [
    (
        "mcp bearer",
        'Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource",'
        ' scope="files:read files:write", error="insufficient_scope"',
        [
            (
                "bearer",
                {
                    "resource_metadata": "https://mcp.example.com/.well-known/oauth-protected-resource",
                    "scope": "files:read files:write",
                    "error": "insufficient_scope",
                },
            )
        ],
    ),
    ("bare scheme", "Bearer", [("bearer", {})]),
    ("scheme case", "BEARER Realm=x", [("bearer", {"realm": "x"})]),
    ("token value", "Bearer error=invalid_token", [("bearer", {"error": "invalid_token"})]),
    ("BWS around =", 'Bearer realm = x ,scope\t=\t"a"', [("bearer", {"realm": "x", "scope": "a"})]),
    (
        "RFC 9110 example",
        'Basic realm="simple", Newauth realm="apps", type=1, title="Login to \\"apps\\""',
        [
            ("basic", {"realm": "simple"}),
            ("newauth", {"realm": "apps", "type": "1", "title": 'Login to "apps"'}),
        ],
    ),
    ("token68", "Basic YWxhZGRpbjpvcGVuc2VzYW1l", [("basic", {"": "YWxhZGRpbjpvcGVuc2VzYW1l"})]),
    (
        "token68 padding",
        "Negotiate a+b/c==  , Bearer",
        [("negotiate", {"": "a+b/c=="}), ("bearer", {})],
    ),
    (
        "comma inside quotes",
        'Bearer realm="a, b=c", x=y',
        [("bearer", {"realm": "a, b=c", "x": "y"})],
    ),
    ("escaped backslash", 'Bearer realm="a\\\\b"', [("bearer", {"realm": "a\\b"})]),
    ("unterminated quote", 'Bearer realm="abc, def', [("bearer", {"realm": "abc, def"})]),
    ("trailing backslash", 'Bearer realm="abc\\', [("bearer", {"realm": "abc"})]),
    ("junk after quote", 'Bearer realm="a"junk', [("bearer", {"realm": "a"})]),
    ("unquoted value cut at space", "Bearer realm=a b", [("bearer", {"realm": "a"})]),
    ("empty quoted", 'Bearer realm=""', [("bearer", {"realm": ""})]),
    ("first duplicate wins", "Bearer a=1, a=2, A=3", [("bearer", {"a": "1"})]),
    ("empty list elements", ", ,Bearer a=1,, ,b=2,", [("bearer", {"a": "1", "b": "2"})]),
    ("params after comma-ended scheme", "Bearer, realm=x", [("bearer", {"realm": "x"})]),
    ("param without scheme", "realm=x, Bearer", [("bearer", {})]),
    ("param after token68 dropped", "Basic abc=, realm=x", [("basic", {"": "abc="})]),
    ("garbage item skipped", 'Bearer a=1, "quoted", =x, b=2', [("bearer", {"a": "1", "b": "2"})]),
    ("scheme with junk", "Bearer @@@, Basic", [("bearer", {}), ("basic", {})]),
    ("non-ASCII", "B\u00e9arer x=1, Bearer y=\u00e9", [("bearer", {"y": "\u00e9"})]),
    ("empty", "", []),
    ("whitespace", " \t ", []),
    ("only commas", ",,,", []),
    ("lone quote", '"', []),
]


@pytest.mark.parametrize(("value", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_challenges(value: str, expected: Challenges) -> None:
    assert parse_www_authenticate(value) == expected


def test_input_is_truncated_at_8_kib() -> None:
    padding = "x" * (MAX_WWW_AUTHENTICATE - len("Bearer realm=") - 1)
    value = f"Bearer realm={padding}y, Basic"
    [(scheme, params)] = parse_www_authenticate(value)
    assert scheme == "bearer"
    assert params["realm"] == padding + "y"
    assert MAX_WWW_AUTHENTICATE == 8192


def test_many_challenges_are_bounded_by_the_truncation() -> None:
    challenges = parse_www_authenticate("B, " * 100_000)
    assert 0 < len(challenges) <= MAX_WWW_AUTHENTICATE // 3 + 1


@pytest.mark.parametrize("value", [None, b"Bearer", 42])
def test_non_string_gives_empty_list(value: Any) -> None:
    assert parse_www_authenticate(value) == []


@settings(max_examples=examples(400, 100), deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list('Bb ,="\\\t=a/+é')), max_size=60) | st.text(max_size=60)
)
def test_never_raises_and_shapes_are_right(value: str) -> None:
    challenges = parse_www_authenticate(value)
    assert isinstance(challenges, list)
    for scheme, params in challenges:
        assert scheme and scheme == scheme.lower()
        assert all(name == name.lower() for name in params)
        assert all(isinstance(v, str) for v in params.values())
