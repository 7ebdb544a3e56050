"""The pure rules that keep a hostile server's values out of telemetry (issue 26, 6 and 7).

``sansmcp.otel.clip_text`` (every string to OpenTelemetry: at most
``MAX_TELEMETRY_BYTES`` UTF-8 bytes) and ``metric_code`` / ``metric_error_type`` (metric
attributes from a closed set, else ``_OTHER``), over arbitrary strings and codes.
``tests/e2e/test_otel.py`` drives a real server past both with the real SDK.
"""

from __future__ import annotations

from typing import get_args

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import Cause, Reason
from sansmcp.otel import (
    KNOWN_CODES,
    MAX_TELEMETRY_BYTES,
    OTHER,
    clip_text,
    metric_code,
    metric_error_type,
)

# Any code point, lone surrogates included (hypothesis leaves them out of text by default).
any_char = st.one_of(
    st.characters(codec=None),
    st.integers(0xD800, 0xDFFF).map(chr),
    st.sampled_from("\u00e9\u6771\U0001f600\u2026"),
)
limits = st.integers(3, 64) | st.just(MAX_TELEMETRY_BYTES)
# Around the limit: short, exactly at it, just over, and far over (all in one character class).
sized_text = st.builds(
    lambda char, count: char * count, any_char, st.integers(0, 2 * MAX_TELEMETRY_BYTES)
)


def sane(text: str) -> str:
    """``text`` as an exporter can encode it: lone surrogates as U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


@settings(max_examples=200, deadline=None)
@given(st.text(any_char, max_size=80) | sized_text, limits)
@example("x" * 1025, MAX_TELEMETRY_BYTES)
@example("\u6771" * 342, MAX_TELEMETRY_BYTES)  # 1,026 bytes: cut inside the last character
@example("ab\ud800", 3)
def test_clipped_text_fits_in_utf8_bytes_and_is_the_longest_prefix(text: str, limit: int) -> None:
    shown = clip_text(text, limit)
    data = shown.encode()  # encodes: no lone surrogate is left
    assert len(data) <= limit
    whole = sane(text)
    if len(whole.encode()) <= limit:
        assert shown == whole
        return
    assert shown.endswith("\u2026")
    kept = shown[:-1]
    assert whole.startswith(kept)
    # the longest prefix that fits with the ellipsis: one character more would not
    assert len(whole[: len(kept) + 1].encode()) > limit - 3


@settings(max_examples=300, deadline=None)
@given(
    st.integers()
    | st.integers(-32768, -32000)
    | st.sampled_from(sorted(KNOWN_CODES))
    | st.integers(min_value=10**30)
)
def test_a_metric_code_is_documented_or_other(code: int) -> None:
    shown = metric_code(code)
    assert shown == (str(code) if code in KNOWN_CODES else OTHER)
    assert shown in {str(c) for c in KNOWN_CODES} | {OTHER}


TAGS = {*get_args(Cause), *get_args(Reason), "unauthorized", "tool_error", "cancelled"}
CLOSED = TAGS | {str(c) for c in KNOWN_CODES} | {OTHER}


@settings(max_examples=300, deadline=None)
@given(st.text(any_char, max_size=40) | st.integers().map(str) | st.sampled_from(sorted(CLOSED)))
def test_a_metric_error_type_comes_from_the_closed_set(kind: str) -> None:
    shown = metric_error_type(kind)
    assert shown in CLOSED
    assert shown == (kind if kind in CLOSED else OTHER)


def test_the_closed_set_is_small_and_the_spec_codes_are_in_it() -> None:
    assert {-32700, -32600, -32601, -32602, -32603} <= KNOWN_CODES  # JSON-RPC 2.0
    assert {-32020, -32021, -32022} <= KNOWN_CODES  # MCP 2026-07-28 defines these
    assert len(CLOSED) == len(TAGS) + len(KNOWN_CODES) + 1
    assert metric_error_type("-32099") == OTHER  # reserved range, not defined: _OTHER
