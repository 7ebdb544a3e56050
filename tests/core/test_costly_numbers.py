"""Parse cost is bounded by cost, not by count (issue 26, finding 4).

msgspec converts a float literal of 1e289 and beyond (``1e308``, ``0.8e292``) by a slow
path, ~12 us each against ~50 ns for ``1.5``: a body of them decoded ~30x slower than
``json.loads``.  :func:`~sansmcp.core.jsonvalue.parse_json` now gives msgspec's own
conversion at most one ``e``/``E`` per 256 bytes and converts the floats of any other
text with CPython's ``float``.  These properties generate bodies of costly numbers
(exponents of the slow range, long mantissas, ints up to and past the digit limit,
negative zero, subnormals, the rounding edge of the smallest one, overflows), padded or
not, and check that each decodes to ``json.loads``'s value or raises the documented
error, in CPU time within a fixed multiple of ``json.loads`` on an ordinary body of the
same size.  CPU time (``time.process_time``), never the wall clock.
"""

from __future__ import annotations

import gc
import json
import math
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import ConnectionFailed
from sansmcp.core.jsonvalue import JsonError, decode_kept, parse_json
from sansmcp.core.limits import Limits
from sansmcp.core.listing import parse_page
from sansmcp.core.messages import parse_message

RATIO = 20  # CPU of a costly body against json.loads of an ordinary one of the same size
FLOOR = 0.005  # seconds of CPU: below it, a ratio measures noise

digits = st.integers(0, 10**25).map(str)  # an integer part: no leading zero
fraction = st.text(alphabet="0123456789", min_size=1, max_size=25)
costly_tokens = st.one_of(
    # the slow range of msgspec's own conversion: 1e289 .. 1.8e308
    st.builds(lambda m, e: f"{m}e{e}", st.sampled_from(["1", "9", "0.8", "1.7976931348623157"]),
              st.integers(280, 308)),
    st.builds(lambda m, e: f"{m}E+{e:04d}", digits, st.integers(270, 310)),
    st.builds(lambda m, f, e: f"{m}.{f}e{e}", digits, fraction, st.integers(-330, 330)),
    # long mantissas, many digits, ints at and past msgspec's 4,300-character limit
    st.builds(lambda n, e: "7." + "3" * n + f"e{e}", st.integers(20, 2000), st.integers(-300, 300)),
    st.builds(lambda n: "9" * n, st.integers(1, 4400)),
    st.builds(lambda n: "-" + "1" * n, st.integers(4000, 4300)),
    st.sampled_from(
        [
            "-0.0", "-0", "0e400", "5e-324", "4.9406564584124654e-324",
            "2.4703282292062328e-324", "2.4703282292062327e-324", "2.2250738585072011e-308",
            "1e-400", "1e400", "-1e309", "9007199254740993.0", "1e23", "1.5",
        ]
    ),
)  # fmt: skip


def ordinary(size: int) -> bytes:
    """A structured tool result of about ``size`` bytes: small objects of ints, short
    floats, short strings and booleans (what a tool's ``structuredContent`` holds)."""
    row = b'{"id":123456,"name":"item number 12","score":12.25,"ok":true,"tags":["a","b"]}'
    count = max(1, size // (len(row) + 1))
    return b"[" + b",".join([row] * count) + b"]"


RUNS = 3  # a step's CPU time: the least of this many runs


def cpu(function: Any, data: Any) -> tuple[float, Any]:
    """The CPU time of ``function(data)`` (the collector paused: its pauses are not the
    decoder's), the least of :data:`RUNS` runs (a one-off stall -- a page fault, the
    process's other threads -- is not the decoder's cost either: a loaded run once
    charged 10.7 ms to a 4.6 KB body that takes 0.1 ms), and its value or documented
    error."""
    parse_json(b"[0]", max_depth=1)  # the decoders bound (msgspec imported) outside the count
    least = math.inf
    for _ in range(RUNS):
        gc.disable()
        start = time.process_time()
        try:
            value = function(data)
        except (JsonError, ConnectionFailed) as exc:
            value = exc
        finally:
            least = min(least, time.process_time() - start)
            gc.enable()
    return least, value


def body_of(tokens: list[str], copies: int, padding: int) -> bytes:
    """The tokens repeated ``copies`` times (fewer for long ones), beside a string of ``padding`` bytes without
    an ``e`` (so that a few costly numbers can stand in a large text)."""
    copies = max(1, min(copies, (256 << 10) // sum(len(token) + 1 for token in tokens)))
    numbers = ",".join(tokens * copies)  # at most ~256 KiB of them
    return f'{{"pad":"{"x" * padding}","numbers":[{numbers}]}}'.encode()


@settings(max_examples=25, deadline=None)
@given(
    tokens=st.lists(costly_tokens, min_size=1, max_size=6),
    copies=st.integers(1, 4000),
    padding=st.sampled_from([0, 0, 1 << 10, 64 << 10, 256 << 10]),
)
def test_costly_numbers_decode_within_a_multiple_of_json_loads(
    tokens: list[str], copies: int, padding: int
) -> None:
    data = body_of(tokens, copies, padding)
    limits = Limits()
    assert len(data) <= limits.max_response_bytes  # within the byte budget
    spent, value = cpu(lambda body: parse_message(bytearray(body), limits), data)
    reference, _ = cpu(json.loads, ordinary(len(data)))
    assert spent <= max(FLOOR, RATIO * reference), (spent, reference, len(data))
    if any(len(token) > 4300 and token.lstrip("-").isdigit() for token in tokens):
        # msgspec's int limit: 4,300 characters, the sign included (json.loads: 4,300 digits)
        assert isinstance(value, JsonError) and value.reason == "number", value
        assert "an integer of more than 4,300 digits" in str(value) or (
            "overflows a double" in str(value)  # (an overflow before it)
        )
        return
    expected = json.loads(data)
    if isinstance(value, ConnectionFailed):  # more values than the budget
        assert value.bound == "max_json_values"
        return
    overflow = any(abs(number) == float("inf") for number in expected["numbers"])
    if overflow:  # json.loads says inf; we refuse it, as msgspec did
        assert isinstance(value, JsonError) and value.reason == "number", value
        assert "overflows a double" in str(value)
        return
    assert value == expected
    # the same value, bit for bit: -0.0 and 0.0 are ==, so compare their spelling too
    assert json.dumps(value) == json.dumps(expected)
    assert decode_kept(data) == expected


@settings(max_examples=40, deadline=None)
@given(
    number=st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**40), 10**40),
    padding=st.sampled_from([0, 300, 5000]),
)
def test_both_conversions_give_the_value_json_loads_gives(number: float, padding: int) -> None:
    """A text with few ``e``s (padded) goes to msgspec's conversion, one with many to
    CPython's; both give ``json.loads``'s value (``repr`` round-trips, so both spellings)."""
    for spelling in {json.dumps(number), repr(number).replace("inf", "0")}:
        data = f'["{"y" * padding}",{spelling}, -0.0, 1E5]'.encode()
        expected = json.dumps(json.loads(data))
        assert json.dumps(parse_json(data, max_depth=4)) == expected
        assert json.dumps(parse_json(data.decode(), max_depth=4)) == expected  # (an SSE event)


def test_a_body_of_1e308_decodes_within_the_ratio_and_keeps_its_values() -> None:
    """The finding's example: 0.7 MB of ``1e308`` (~1.5 s of one step before, ~0.08 s now)."""
    data = b"[" + b",".join([b"1e308"] * 120_000) + b"]"
    spent, value = cpu(lambda body: parse_message(bytearray(body), Limits()), data)
    reference, _ = cpu(json.loads, ordinary(len(data)))
    assert spent <= max(FLOOR, RATIO * reference), (spent, reference)
    assert value == [1e308] * 120_000


@pytest.mark.parametrize(
    ("data", "at"),
    [
        (b'["' + b"z" * 1000 + b'", 1e400]', "$[1]"),  # msgspec's conversion
        (b'["' + b"e" * 1000 + b'", 1e400]', "$[1]"),  # CPython's
        (
            b'["' + b"e" * 1000 + b'", 1.5, {"a": [2.5e300, -1E+0400]}]',
            "$[2][...][1]",
        ),  # (msgspec names no key)
        (b"[-1E+400]", "$[0]"),
    ],
)
def test_an_overflow_is_refused_by_either_conversion(data: bytes, at: str) -> None:
    with pytest.raises(JsonError) as caught:
        parse_json(data, max_depth=4)
    assert caught.value.reason == "number"
    assert str(caught.value) == f"JSON number at {at} overflows a double (it would be infinite)"


def test_a_listing_of_costly_numbers_is_declined_before_msgspec_converts_them() -> None:
    """The typed ``tools/list`` pass decoded a part it does not type (``_meta``) with
    msgspec's own conversion before it screened the big exponents: ~1.5 s of ``1e308``."""
    numbers = b",".join([b"1e308"] * 100_000)
    data = b'{"jsonrpc":"2.0","id":1,"result":{"tools":[],"_meta":{"x":[' + numbers + b"]}}}"
    spent, value = cpu(lambda body: parse_page(body, Limits()), data)
    reference, _ = cpu(json.loads, ordinary(len(data)))
    assert spent <= max(FLOOR, RATIO * reference), (spent, reference)
    assert value["result"]["_meta"]["x"] == [1e308] * 100_000
