"""Where a response head ends, found by two ``find`` calls when it is whole in one read
(the fast path of ``H1Connection._scan_block``) and byte by byte otherwise: the same
``raw_size`` either way, and h11's rule (the first ``\\n\\r?\\n``) in both."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.http import DataReceived, HttpRequest, ResponseReceived
from sansmcp.core.limits import Limits
from sansmcp.core.wire.h1 import H1Connection

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


@settings(max_examples=300, deadline=None)
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
