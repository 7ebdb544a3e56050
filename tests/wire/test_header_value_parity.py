"""The last guard of both wires takes the same request header values: what h1 writes and
what h2 encodes are one grammar (RFC 9110 field-content: VCHAR and obs-text, SP/HTAB only
inside), checked here byte by byte, and at the edges."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import LocalProtocolError
from sansmcp.core.wire.h1 import _header_line
from sansmcp.core.wire.h2_headers import check_field
from tests.tiers import examples


def sendable(check: object, value: bytes) -> bool:
    try:
        check(b"x-tenant", value)  # type: ignore[operator]
    except LocalProtocolError:
        return False
    return True


@pytest.mark.parametrize("byte", range(256))
def test_a_byte_inside_a_value_is_sent_by_h1_exactly_when_h2_sends_it(byte: int) -> None:
    value = b"a" + bytes([byte]) + b"b"
    expected = byte == 0x09 or byte == 0x20 or 0x21 <= byte <= 0x7E or byte >= 0x80
    assert sendable(check_field, value) is expected
    assert sendable(_header_line, value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"", True),
        (b"a", True),
        (b" a", False),
        (b"a ", False),
        (b"\ta", False),
        (b"a\t", False),
        (b"a \t b", True),
        (b"\x80\xff", True),
        (b"\x7f", False),
        (b"\x01", False),
    ],
)
def test_the_edges_of_a_value_agree_on_both_wires(value: bytes, expected: bool) -> None:
    assert sendable(check_field, value) is expected
    assert sendable(_header_line, value) is expected


@settings(max_examples=examples(500), deadline=None)
@given(value=st.binary(max_size=24) | st.text(max_size=12).map(str.encode))
def test_any_value_is_sent_by_both_wires_or_by_neither(value: bytes) -> None:
    assert sendable(check_field, value) is sendable(_header_line, value)
