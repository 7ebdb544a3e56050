"""Where a response head ends, found by two ``find`` calls when it is whole in one read
(the fast path of ``H1Connection._scan_block``) and byte by byte otherwise: the same
``raw_size`` either way, and h11's rule (the first ``\\n\\r?\\n``) in both; a bare CR
in a head is refused the same way by both scans, as h11 refused it."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.http import DataReceived, HttpRequest, ResponseReceived
from sansmcp.core.limits import Limits
from sansmcp.core.wire.h1 import H1Connection
from tests.tiers import examples

from .test_h1_refusals import check_against_h11, h11_outcome

REQUEST = HttpRequest(method=b"GET", scheme=b"http", authority=b"a.test", target=b"/")
EOL = st.sampled_from([b"\r\n", b"\n"])


def events(response: bytes, split: int | None) -> list[object]:
    wire = H1Connection(limits=Limits(), now=0.0)
    wire.start(1, REQUEST, now=0.0)
    parts = [response] if split is None else [response[:split], response[split:]]
    out: list[object] = []
    for part in parts:
        wire.receive_data(part, now=0.0)
        while (event := wire.next_event()) is not None:
            out.append(event)
    return out


@settings(max_examples=examples(300), deadline=None)
@given(
    eols=st.lists(EOL, min_size=3, max_size=3),
    body=st.sampled_from([b"ok", b"\r\n", b"\n\n", b"\r\n\r\n"]),
    split=st.integers(min_value=0, max_value=80),
)
def test_a_head_ends_where_h11_ends_it_whole_or_split(
    eols: list[bytes], body: bytes, split: int
) -> None:
    head = b"HTTP/1.1 200 OK" + eols[0] + b"Content-Length: %d" % len(body) + eols[1] + eols[2]
    response = head + body
    end = re.search(rb"\n\r?\n", response)
    assert end is not None and end.end() == len(head)  # the rule, on the test's own input
    for cut in (None, min(split, len(response))):
        got = events(response, cut)
        (first,) = [e for e in got if isinstance(e, ResponseReceived)]
        assert first.raw_size == len(head)
        assert b"".join(e.data for e in got if isinstance(e, DataReceived)) == body


def test_a_bare_lf_blank_line_before_a_crlf_body_ends_the_head() -> None:
    # b"\n\n" then b"\r\n": the head ends at the b"\n\n", not at the later b"\n\r\n"
    response = b"HTTP/1.1 200 OK\nContent-Length: 2\n\n\r\n"
    (head, data, *_) = events(response, None)
    assert isinstance(head, ResponseReceived) and head.raw_size == len(response) - 2
    assert isinstance(data, DataReceived) and data.data == b"\r\n"


def outcome(response: bytes, parts: list[bytes]) -> list[tuple[object, ...]]:
    """What the wire makes of ``response`` fed as ``parts`` and then EOF: each event's
    kind, raw size, data and error (cause and message); body data as one event."""
    assert b"".join(parts) == response
    wire = H1Connection(limits=Limits(), now=0.0)
    wire.start(1, REQUEST, now=0.0)
    out: list[tuple[object, ...]] = []
    for part in [*parts, None]:
        if part is None:
            wire.receive_eof(now=0.0)
        else:
            wire.receive_data(part, now=0.0)
        while (event := wire.next_event()) is not None:
            if isinstance(event, DataReceived) and out and out[-1][0] == "DataReceived":
                out[-1] = ("DataReceived", None, out[-1][2] + event.data, None)  # as one read
                continue
            error = getattr(event, "error", None)
            out.append(
                (
                    type(event).__name__,
                    getattr(event, "raw_size", None),
                    getattr(event, "data", None),
                    None if error is None else (error.cause, error.message),
                )
            )
    return out


@settings(max_examples=examples(400, 100), deadline=None)
@given(
    eols=st.lists(EOL, min_size=4, max_size=4),
    body=st.sampled_from([b"ok", b"\r\n", b"\rk"]),
    crs=st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=3),
    split=st.integers(min_value=0, max_value=80),
)
def test_a_bare_cr_in_a_head_is_refused_whole_or_split(
    eols: list[bytes], body: bytes, crs: list[int], split: int
) -> None:
    """A CR not followed by LF, anywhere in a head (status line, field line, line end,
    blank line): the fast scan (the head whole in one read) and the byte-by-byte scan
    (the head split, or fed a byte at a time) find the same block and refuse it the same
    way, and the wire refuses it as h11 did (h11 is the oracle)."""
    head = b"HTTP/1.1 200 OK" + eols[0] + b"X: a" + eols[1]
    head += b"Content-Length: %d" % len(body) + eols[2] + eols[3]
    data = bytearray(head)
    for at in crs:
        at %= len(data) + 1
        data[at:at] = b"\r"
    response = bytes(data) + body
    whole = outcome(response, [response])
    cut = min(split, len(response))
    assert outcome(response, [response[:cut], response[cut:]]) == whole
    assert outcome(response, [response[i : i + 1] for i in range(len(response))]) == whole
    end = re.search(rb"\n\r?\n", response)  # h11's end of a head
    in_head = response if end is None else response[: end.end()]
    if re.search(rb"\r(?!\n)", in_head):  # a bare CR in the head
        assert not h11_outcome(response).accepted
        assert not any(kind == "ResponseReceived" for kind, *_ in whole), whole
        assert whole[-1][0] == "ExchangeFailed", whole
    check_against_h11(response)
