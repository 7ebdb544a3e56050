"""sansmcp.core.sse: WHATWG event-stream parsing, chunking invariance and the byte bound."""

from __future__ import annotations

import itertools
from dataclasses import FrozenInstanceError

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.sse import SseError, SseEvent, SseParser
from tests.tiers import examples

BIG = 1 << 20


def ev(data: str, event: str | None = None, id: str | None = None) -> SseEvent:
    return SseEvent(data=data, event=event, id=id)


def parse_whole(stream: bytes, limit: int = BIG) -> tuple[list[SseEvent], SseParser]:
    parser = SseParser(max_event_bytes=limit)
    events = parser.feed(stream)
    parser.finish()
    return events, parser


def parse_bytewise(stream: bytes, limit: int = BIG) -> tuple[list[SseEvent], SseParser]:
    parser = SseParser(max_event_bytes=limit)
    events: list[SseEvent] = []
    for i in range(len(stream)):
        events += parser.feed(stream[i : i + 1])
        assert parser.buffered <= limit
    parser.finish()
    return events, parser


def parse_split(
    stream: bytes, cuts: list[int], limit: int = BIG
) -> tuple[list[SseEvent], SseParser]:
    parser = SseParser(max_event_bytes=limit)
    events: list[SseEvent] = []
    bounds = [0, *sorted({c % (len(stream) + 1) for c in cuts}), len(stream)]
    for start, end in itertools.pairwise(bounds):
        events += parser.feed(stream[start:end])
        assert parser.buffered <= limit
    parser.finish()
    return events, parser


CASES: list[tuple[str, bytes, list[SseEvent], str | None, int | None]] = [
    # (name, stream, events, last_event_id after, retry_ms after)
    ("simple", b"data: hello\n\n", [ev("hello")], None, None),
    ("no space", b"data:hello\n\n", [ev("hello")], None, None),
    ("only one space stripped", b"data:  two\n\n", [ev(" two")], None, None),
    ("tab kept", b"data:\tx\n\n", [ev("\tx")], None, None),
    ("multi-line", b"data: a\ndata: b\ndata:\n\n", [ev("a\nb\n")], None, None),
    ("empty data line inside", b"data: a\ndata\ndata: b\n\n", [ev("a\n\nb")], None, None),
    ("CRLF", b"data: a\r\ndata: b\r\n\r\n", [ev("a\nb")], None, None),
    ("CR", b"data: a\rdata: b\r\r", [ev("a\nb")], None, None),
    ("mixed", b"data: a\r\ndata: b\rdata: c\n\r\n", [ev("a\nb\nc")], None, None),
    ("CR then LF is one end", b"data: a\r\n\r\ndata: b\n\n", [ev("a"), ev("b")], None, None),
    ("LF CR is two ends", b"data: a\n\rdata: b\n\n", [ev("a"), ev("b")], None, None),
    ("comment", b": hi\ndata: x\n:\n\n", [ev("x")], None, None),
    ("keep-alive only", b":\r\n:\r\n", [], None, None),
    ("colon in value", b'data: {"a":"b:c"}\n\n', [ev('{"a":"b:c"}')], None, None),
    ("event field", b"event: ping\ndata: 1\n\n", [ev("1", "ping")], None, None),
    ("empty event", b"event:\ndata: 1\n\n", [ev("1")], None, None),
    (
        "event type resets",
        b"event: a\ndata: 1\n\ndata: 2\n\n",
        [ev("1", "a"), ev("2")],
        None,
        None,
    ),
    ("id", b"id: 7\ndata: x\n\n", [ev("x", id="7")], "7", None),
    (
        "id persists",
        b"id: 7\ndata: x\n\ndata: y\n\n",
        [ev("x", id="7"), ev("y", id="7")],
        "7",
        None,
    ),
    ("id cleared", b"id: 7\ndata: x\n\nid\ndata: y\n\n", [ev("x", id="7"), ev("y")], None, None),
    ("id with NUL ignored", b"id: 1\n\nid: a\x00b\ndata: y\n\n", [ev("y", id="1")], "1", None),
    ("id last wins", b"id: 1\nid: 2\ndata: y\n\n", [ev("y", id="2")], "2", None),
    ("priming event", b"id: p0\ndata:\n\n", [], "p0", None),
    ("priming then event", b"id: p0\ndata:\n\ndata: x\n\n", [ev("x", id="p0")], "p0", None),
    ("id without data", b"id: 9\n\n", [], "9", None),
    ("event without data", b"event: e\n\ndata: x\n\n", [ev("x")], None, None),
    ("retry", b"retry: 1500\n", [], None, 1500),
    ("retry zero-padded", b"retry: 0042\n", [], None, 42),
    ("retry bad", b"retry: 1500\nretry: 12x\nretry: -1\nretry:\nretry: 1.5\n", [], None, 1500),
    ("retry non-ASCII digit", "retry: \u0661\n".encode(), [], None, None),
    ("retry huge", b"retry: " + b"9" * 5000 + b"\n", [], None, 10**18 - 1),
    ("retry many zeros", b"retry: " + b"0" * 5000 + b"7\n", [], None, 7),
    ("retry applies without dispatch", b"retry: 5\ndata: x", [], None, 5),
    ("unknown field", b"foo: bar\nDATA: no\ndata : no\ndata: x\n\n", [ev("x")], None, None),
    ("BOM", b"\xef\xbb\xbfdata: x\n\n", [ev("x")], None, None),
    ("only one BOM", b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n", [], None, None),
    ("BOM-like start", b"\xef\xbbdata: x\n\n", [], None, None),
    ("invalid UTF-8 replaced", b"data: \xff\xfe\n\n", [ev("\ufffd\ufffd")], None, None),
    ("UTF-8", "data: caf\u00e9 \u20ac\n\n".encode(), [ev("caf\u00e9 \u20ac")], None, None),
    ("partial event discarded", b"data: x\n\ndata: y\n", [ev("x")], None, None),
    ("partial line discarded", b"data: x\n\ndata: y", [ev("x")], None, None),
    ("id at EOF not committed", b"data: x\n\nid: 5\n", [ev("x")], None, None),
    ("blank lines", b"\n\n\r\n\r", [], None, None),
    ("empty stream", b"", [], None, None),
]


@pytest.mark.parametrize(
    ("stream", "expected", "last_id", "retry"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_cases_whole_and_bytewise(
    stream: bytes, expected: list[SseEvent], last_id: str | None, retry: int | None
) -> None:
    for run in (parse_whole, parse_bytewise):
        events, parser = run(stream)
        assert events == expected
        assert parser.last_event_id == last_id
        assert parser.retry_ms == retry
        assert parser.buffered == 0


def test_mcp_streams_from_the_spec_brief() -> None:
    modern = (
        b'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n'
        b":\n\n"
        b'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'
    )
    events, _ = parse_whole(modern)
    assert [e.data for e in events] == [
        '{"jsonrpc":"2.0","method":"notifications/progress","params":{}}',
        '{"jsonrpc":"2.0","id":1,"result":{}}',
    ]
    legacy = (
        b'id: 7f1c-0\ndata:\n\nid: 7f1c-1\ndata: {"id":"srv-1"}\n\nid: 7f1c-2\ndata: {"id":1}\n\n'
    )
    events, parser = parse_whole(legacy)
    assert events == [ev('{"id":"srv-1"}', id="7f1c-1"), ev('{"id":1}', id="7f1c-2")]
    assert parser.last_event_id == "7f1c-2"


def test_event_is_frozen() -> None:
    event = ev("x")
    with pytest.raises(FrozenInstanceError):
        event.data = "y"  # type: ignore[misc]


def test_cr_at_chunk_end_followed_by_lf() -> None:
    parser = SseParser(max_event_bytes=100)
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"") == []  # an empty chunk keeps the pending CR
    assert parser.feed(b"\n") == []  # swallowed: CRLF is one line end
    assert parser.feed(b"\r") == [ev("a")]
    assert parser.feed(b"data: b\r") == []
    assert parser.feed(b"\r") == [ev("b")]  # CR after CR is a second line end


def test_bom_split_across_chunks() -> None:
    parser = SseParser(max_event_bytes=100)
    assert parser.feed(b"\xef") == []
    assert parser.buffered == 1
    assert parser.feed(b"\xbb") == []
    assert parser.feed(b"\xbfdata: x\n\n") == [ev("x")]
    assert parser.buffered == 0


def test_finish_readies_the_parser_for_a_resumed_stream() -> None:
    parser = SseParser(max_event_bytes=100)
    assert parser.feed(b"retry: 10\nid: a\ndata: x\n\nid: b\ndata: partial\r") == [ev("x", id="a")]
    parser.finish()
    assert parser.buffered == 0
    assert parser.last_event_id == "a"
    assert parser.retry_ms == 10
    # The next stream: a BOM is skipped again, the pending CR does not swallow its LF,
    # and an event without an id keeps the last one.
    assert parser.feed(b"\xef\xbb\xbf\ndata: y\n\n") == [ev("y", id="a")]
    assert parser.last_event_id == "a"


def test_max_event_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_event_bytes"):
        SseParser(max_event_bytes=0)


# -- the bound -------------------------------------------------------------------


def feed_until_error(parser: SseParser, stream: bytes) -> tuple[int, SseError]:
    """Feed byte by byte; return the index of the byte that raised, and the error."""
    for i in range(len(stream)):
        try:
            parser.feed(stream[i : i + 1])
        except SseError as exc:
            return i, exc
    raise AssertionError("no SseError")


def test_line_at_the_limit_passes_one_more_byte_raises() -> None:
    limit = 20
    line = b"data: " + b"x" * (limit - 6)
    assert len(line) == limit
    events, _ = parse_bytewise(line + b"\n\n", limit)
    assert events == [ev("x" * (limit - 6))]
    parser = SseParser(max_event_bytes=limit)
    index, exc = feed_until_error(parser, line + b"x\n\n")
    assert index == limit  # the (limit + 1)-th byte of the line
    assert exc.limit == limit
    assert exc.observed == limit + 1
    assert parser.buffered == limit  # nothing past the crossing byte was kept
    assert f"{limit:,}" in str(exc)


def test_comment_line_is_bounded_too() -> None:
    parser = SseParser(max_event_bytes=10)
    index, _ = feed_until_error(parser, b":" + b"k" * 50)
    assert index == 10


def test_accumulated_data_is_bounded() -> None:
    # Each data line is small, but the event keeps growing: value bytes + 1 per line.
    limit = 50
    parser = SseParser(max_event_bytes=limit)
    stream = b"data: 123456789\n" * 10  # each line leaves 10 bytes in the data buffer
    index, exc = feed_until_error(parser, stream)
    # After 4 lines the data buffer holds 40 bytes; the 11th byte of the 5th line
    # (16 bytes per line with its LF) makes 51.
    assert parser.buffered <= limit
    assert exc.observed == limit + 1
    assert index == 4 * 16 + 10
    whole = SseParser(max_event_bytes=limit)
    with pytest.raises(SseError) as info:
        whole.feed(stream)
    assert info.value.limit == limit
    assert whole.buffered <= limit


def test_event_type_counts_toward_the_bound() -> None:
    parser = SseParser(max_event_bytes=20)
    assert parser.feed(b"event: abcdefghij\n") == []
    assert parser.buffered == 10
    with pytest.raises(SseError):
        parser.feed(b"data: 12345")  # 10 + 11 > 20


def test_events_completed_before_the_error_ride_on_it() -> None:
    parser = SseParser(max_event_bytes=16)
    with pytest.raises(SseError) as info:
        parser.feed(b"data: a\n\ndata: b\n\ndata: " + b"x" * 100)
    assert info.value.events == (ev("a"), ev("b"))


def test_parser_stays_broken_after_an_error() -> None:
    parser = SseParser(max_event_bytes=8)
    with pytest.raises(SseError):
        parser.feed(b"data: 123456789")
    with pytest.raises(SseError) as info:
        parser.feed(b"\n\n")
    assert info.value.limit == 8
    assert info.value.events == ()


def test_bound_applies_to_a_split_bom() -> None:
    parser = SseParser(max_event_bytes=1)
    with pytest.raises(SseError):
        parser.feed(b"\xef\xbb")


def test_big_stream_in_one_chunk_is_linear() -> None:
    # 40,000 events in one chunk and in 4 KiB chunks: no quadratic rescans.
    stream = b"id: 1\ndata: {}\n\n" * 40_000
    events, parser = parse_whole(stream, limit=64)
    assert len(events) == 40_000
    assert parser.last_event_id == "1"
    chunked = SseParser(max_event_bytes=64)
    count = 0
    for start in range(0, len(stream), 4096):
        count += len(chunked.feed(stream[start : start + 4096]))
    assert count == 40_000


def test_long_line_in_many_chunks_is_linear() -> None:
    # A 4 MiB data line fed 1 KiB at a time: the pending line is appended, not copied.
    size = 4 << 20
    parser = SseParser(max_event_bytes=size + 16)
    chunk = b"x" * 1024
    assert parser.feed(b"data: ") == []
    for _ in range(size // 1024):
        assert parser.feed(chunk) == []
    assert parser.buffered == size + 6
    [event] = parser.feed(b"\n\n")
    assert len(event.data) == size


# -- chunking invariance ---------------------------------------------------------

sse_lines = st.lists(
    st.one_of(
        st.sampled_from(
            [
                b"",
                b":",
                b": keep-alive",
                b"data",
                b"data:",
                b"data: ",
                b"id",
                b"id: 1",
                b"id:\x00",
                b"event: e",
                b"retry: 10",
                b"retry: x",
                b"\xef\xbb\xbf",
            ]
        ),
        st.builds(
            lambda name, value: name + b":" + value,
            st.sampled_from([b"data", b"id", b"event", b"retry", b"other", b""]),
            st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
        ),
    ),
    max_size=25,
)
line_ends = st.sampled_from([b"\n", b"\r", b"\r\n"])


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    lines = draw(sse_lines)
    out = b"\xef\xbb\xbf" if draw(st.booleans()) else b""
    for line in lines:
        out += line + draw(line_ends)
    return out


def outcome(
    run: object, stream: bytes, *args: object
) -> tuple[list[SseEvent], str | None, int | None] | str:
    try:
        events, parser = run(stream, *args)  # type: ignore[operator]
    except SseError:
        return "error"
    return events, parser.last_event_id, parser.retry_ms


@settings(max_examples=examples(200), deadline=None)
@given(sse_streams(), st.lists(st.integers(min_value=0, max_value=10_000), max_size=8))
def test_chunking_invariance(stream: bytes, cuts: list[int]) -> None:
    whole = outcome(parse_whole, stream)
    assert outcome(parse_bytewise, stream) == whole
    assert outcome(parse_split, stream, cuts) == whole


@settings(max_examples=examples(200), deadline=None)
@given(sse_streams(), st.lists(st.integers(min_value=0, max_value=10_000), max_size=8))
def test_chunking_invariance_with_a_small_bound(stream: bytes, cuts: list[int]) -> None:
    # With a tight bound, every chunking fails or succeeds alike, and the events
    # delivered before the failure (returned, or carried by the error) agree.
    def delivered(chunks: list[bytes]) -> tuple[list[SseEvent], bool]:
        parser = SseParser(max_event_bytes=12)
        got: list[SseEvent] = []
        for chunk in chunks:
            try:
                got += parser.feed(chunk)
            except SseError as exc:
                got += exc.events
                return got, True
            assert parser.buffered <= 12
        return got, False

    bounds = [0, *sorted({c % (len(stream) + 1) for c in cuts}), len(stream)]
    split = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    whole = delivered([stream])
    assert delivered([stream[i : i + 1] for i in range(len(stream))]) == whole
    assert delivered(split) == whole


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=8), st.integers(min_value=1, max_value=64))
def test_arbitrary_bytes_give_only_events_or_sse_error(chunks: list[bytes], limit: int) -> None:
    parser = SseParser(max_event_bytes=limit)
    for chunk in chunks:
        try:
            events = parser.feed(chunk)
        except SseError as exc:
            assert exc.limit == limit
            assert exc.observed > limit
            return
        assert all(isinstance(e, SseEvent) and e.data for e in events)
        assert 0 <= parser.buffered <= limit
    parser.finish()
    assert parser.buffered == 0


# -- the data buffer is bytes, decoded once per event ------------------------------------

line_values = st.lists(
    st.binary(max_size=6).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")), max_size=8
)


@settings(max_examples=examples(300), deadline=None)
@given(line_values)
def test_data_decoded_once_equals_each_line_decoded_on_its_own(values: list[bytes]) -> None:
    # Invalid UTF-8 at a line's end (a truncated sequence) must give the same replacement
    # characters as decoding that line alone: the LF between lines ends every sequence.
    parser = SseParser(max_event_bytes=1 << 16)
    events = parser.feed(b"".join(b"data: " + value + b"\n" for value in values) + b"\n")
    expected = "\n".join(value.decode("utf-8", "replace") for value in values)
    assert [e.data for e in events] == ([expected] if expected else [])


def test_many_short_data_lines_cost_their_bytes() -> None:
    # 100,000 lines of 2 bytes: the buffer holds 3 bytes per line (value and LF), not a
    # string object per line.
    parser = SseParser(max_event_bytes=1 << 20)
    assert parser.feed(b"data:ab\n" * 100_000) == []
    assert parser.buffered == 300_000
    (event,) = parser.feed(b"\n")
    assert event.data == "\n".join(["ab"] * 100_000)
    assert parser.buffered == 0


def test_an_event_whose_text_would_widen_past_three_bounds_is_refused() -> None:
    """One character beyond U+FFFF makes an event's whole decoded text 4 bytes a character:
    an event that would then take more than 3 x max_event_bytes is refused before it is
    decoded (reason "text"); the same bytes without one pass."""
    astral = "\U0001f600".encode()
    parser = SseParser(max_event_bytes=1000)
    with pytest.raises(SseError) as refused:
        parser.feed(b"data: " + astral + b"a" * 800 + b"\n\n")
    assert refused.value.reason == "text"
    assert (refused.value.limit, refused.value.observed) == (3000, 4 * 801)  # characters
    with pytest.raises(SseError):  # the parser stays broken
        parser.feed(b"data: a\n\n")
    narrow = SseParser(max_event_bytes=1000)
    (event,) = narrow.feed(b"data: " + "é".encode() * 400 + b"\n\n")
    assert event.data == "é" * 400
    small = SseParser(max_event_bytes=1000)
    (event,) = small.feed(b"data: " + astral + b"a" * 700 + b"\n\n")  # 4 x 704 <= 3000
    assert event.data == "\U0001f600" + "a" * 700
