"""Our HPACK request encoder and its field check, against hpack's decoder (the oracle)."""

from __future__ import annotations

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import LocalProtocolError
from sansmcp.core.wire.h2_headers import TABLE_SIZE, RequestEncoder, check_field, check_pseudo
from tests.tiers import examples

PSEUDO = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"h:1"),
          (b":path", b"/mcp")]  # fmt: skip

NAMES = [b"accept", b"content-type", b"mcp-method", b"mcp-name", b"x-custom", b"authorization",
         b"dpop", b"content-length", b"mcp-param-region", b"cookie", b"last-event-id",
         b"mcp-session-id"]  # fmt: skip


def decoder(table: int = TABLE_SIZE) -> hpack.Decoder:
    dec = hpack.Decoder()
    dec.max_allowed_table_size = table
    return dec


def decoded(dec: hpack.Decoder, block: bytes) -> list[tuple[bytes, bytes]]:
    return [(bytes(n), bytes(v)) for n, v in dec.decode(block, raw=True)]


def test_repeated_fields_shrink_to_indices() -> None:
    enc, dec = RequestEncoder(), decoder()
    fields = [*PSEUDO, (b"accept", b"application/json, text/event-stream"),
              (b"authorization", b"Bearer abc"), (b"content-length", b"12")]  # fmt: skip
    first = enc.block(fields)
    assert decoded(dec, first) == fields
    again = [*fields[:-1], (b"content-length", b"345")]
    second = enc.block(again)
    assert decoded(dec, second) == again
    # pseudo-headers and accept by index (1 byte each: static POST/https, then the dynamic
    # entries newest first), authorization never indexed, content-length a literal
    assert second == b"\x83\x87\xc0\xbf\xbe" + b"\x1f\x08\x0aBearer abc" + b"\x0f\x0d\x03345"
    assert len(second) < len(first) // 2


def test_never_indexed_fields_stay_out_of_the_table() -> None:
    enc, dec = RequestEncoder(), decoder()
    fields = [*PSEUDO, (b"authorization", b"Bearer t"), (b"dpop", b"proof"), (b"cookie", b"a=b")]
    assert decoded(dec, enc.block(fields)) == fields
    assert [bytes(n) for n, _ in dec.header_table.dynamic_entries] == [b":path", b":authority"]
    (proof,) = dec.decode(enc.block([(b"dpop", b"p2")]), raw=True)
    assert isinstance(proof, hpack.NeverIndexedHeaderTuple)


def test_table_size_changes_are_announced() -> None:
    enc, dec = RequestEncoder(), decoder(65536)
    enc.peer_table_size(65536)  # more than we use: nothing changes
    assert enc.table_size == TABLE_SIZE
    fields = [*PSEUDO, (b"x-a", b"1" * 100)]
    assert decoded(dec, enc.block(fields)) == fields
    enc.peer_table_size(0)
    enc.peer_table_size(100)  # lowered, then raised: both sizes go out, smallest first
    block = enc.block(fields)
    assert block[:2] == b"\x20\x3f" and block[2] == 0x45  # 0, then 100 (31 + 69)
    assert decoded(dec, block) == fields
    assert dec.header_table_size == 100
    assert decoded(dec, enc.block(fields)) == fields  # and the table works at 100 bytes


def test_a_field_bigger_than_the_table_is_not_indexed() -> None:
    enc, dec = RequestEncoder(), decoder()
    huge = [(b"x-big", b"v" * TABLE_SIZE)]
    assert decoded(dec, enc.block(huge)) == huge
    assert dec.header_table.dynamic_entries == type(dec.header_table.dynamic_entries)()
    long_name = [(b"x-" + b"n" * 200, b"w" * 200)]  # multi-byte lengths both ways
    for _ in range(2):
        assert decoded(dec, enc.block(long_name)) == long_name


@pytest.mark.parametrize(
    ("name", "value"),
    [(b"", b"v"), (b"X-Upper", b"v"), (b":path", b"/"), (b"a b", b"v"), (b"a:b", b"v"),
     (b"\xe9", b"v"), (b"a", b"v\r\n"), (b"a", b"v\nw"), (b"a", b"\x00"), (b"a", b"\x7f"),
     (b"a", b"\x1b[0m"), (b"a", b" v"), (b"a", b"v\t")],
)  # fmt: skip
def test_check_field_refuses(name: bytes, value: bytes) -> None:
    with pytest.raises(LocalProtocolError):
        check_field(name, value)


def test_check_field_and_pseudo_accept() -> None:
    check_field(b"x-a!#$%&'*+-.^_`|~09", b"")
    check_field(b"a", b"v \t w \xe9")  # HTAB and SP inside, obs-text (Config allows Latin-1)
    check_pseudo(b":path", b"/p?q=%20")
    for bad in (b"", b"/a b", b"/\xe9", b"/\r"):
        with pytest.raises(LocalProtocolError):
            check_pseudo(b":path", bad)


def test_a_refused_block_leaves_the_encoder_as_it_was() -> None:
    enc, dec = RequestEncoder(), decoder()
    enc.peer_table_size(200)
    dec.header_table_size = 200
    good = [*PSEUDO, (b"x-a", b"1" * 60)]
    assert decoded(dec, enc.block(good)) == good
    # the refused block would have inserted (and evicted) entries before the bad field
    with pytest.raises(LocalProtocolError):
        enc.block([(b"x-b", b"2" * 60), (b"x-c", b"3" * 60), (b"x-d", b"4" * 90),
                   (b"bad", b"\r")])  # fmt: skip
    assert decoded(dec, enc.block(good)) == good
    assert len(enc.block(good)) == len(good)  # all indexed: the table is as it was


field = st.tuples(
    st.sampled_from(NAMES), st.sampled_from([b"a", b"bb", b"v" * 40, b"w" * 300, b"\r"])
)
step = st.one_of(
    st.lists(field, max_size=12),
    st.sampled_from([0, 64, 100, 300, 4096, 65536]),
)


@settings(max_examples=examples(200, 60), deadline=None)
@given(steps=st.lists(step, max_size=30))
def test_every_block_decodes_to_its_fields(steps: list[list[tuple[bytes, bytes]] | int]) -> None:
    enc, dec = RequestEncoder(), decoder(65536)
    for item in steps:
        if isinstance(item, int):
            enc.peer_table_size(item)
            dec.max_allowed_table_size = item
            continue
        fields = [*PSEUDO, *item]
        if any(v == b"\r" for _, v in item):
            with pytest.raises(LocalProtocolError):
                enc.block(fields)
            continue
        assert decoded(dec, enc.block(fields)) == fields
        assert dec.header_table_size == enc.table_size


def test_the_memos_stay_bounded() -> None:
    enc, dec = RequestEncoder(), decoder()
    for i in range(1200):  # distinct credentials (memoised) and distinct unindexed names
        fields = [(b"authorization", b"Bearer %d" % i), (b"mcp-param-p%d" % i, b"v")]
        assert decoded(dec, enc.block(fields)) == fields
    assert len(enc._memo) <= 512 and len(enc._names) <= 512
