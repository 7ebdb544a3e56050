"""The store seam's pure parts (issue 28): commands, answers, keys, values, MemoryStore.

The same operations run against a real Redis too, from one fixture, in
``tests/test_stores.py``; here the in-process store's clock is an argument, so expiry
and eviction are checked exactly.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import CallerError, ConnectionFailed
from sansmcp.core.oauth.store import Binding, ClientRegistration, PendingAuthorization, Tokens
from sansmcp.core.store import (
    MAX_STORE_TTL,
    MAX_VERSION,
    Acquired,
    AcquireLease,
    CompareAndSet,
    Conflict,
    Deleted,
    DeleteIfVersion,
    Found,
    Held,
    MemoryStore,
    Missing,
    NotHeld,
    Read,
    Released,
    ReleaseLease,
    StoreFailed,
    Take,
    Written,
    degraded,
    era_key,
    fleet_identity,
    lease_key,
    listing_key,
    pending_key,
    registration_key,
    store_error,
    store_key,
    token_key,
)
from sansmcp.core.store_values import (
    PENDING_SPEC,
    REGISTRATION_SPEC,
    TOKENS_SPEC,
    ValueCodec,
    era_body,
    era_from,
    pending_body,
    pending_from,
    registration_body,
    registration_from,
    tokens_body,
    tokens_from,
)
from tests.tiers import examples

K = "sansmcp:test:k"


def cas(value: bytes, expected: int, ttl: float = 10.0, key: str = K) -> CompareAndSet:
    return CompareAndSet(key=key, value=value, expected=expected, ttl=ttl)


# -- commands check their fields -------------------------------------------------


@pytest.mark.parametrize("key", ["", "k" * 257, b"k", None])
def test_a_key_is_a_bounded_str(key: Any) -> None:
    with pytest.raises(CallerError, match="store key"):
        Read(key=key)


@pytest.mark.parametrize("ttl", [0, -1.0, math.inf, math.nan, True, "1", MAX_STORE_TTL + 1])
def test_a_ttl_is_finite_positive_and_at_most_30_days(ttl: Any) -> None:
    with pytest.raises(CallerError, match="TTL"):
        cas(b"v", 0, ttl=ttl)
    with pytest.raises(CallerError, match="TTL"):
        AcquireLease(key=K, holder="h", ttl=ttl)


@pytest.mark.parametrize("version", [-1, MAX_VERSION + 1, True, 1.0, "1"])
def test_a_version_is_an_int_of_63_bits(version: Any) -> None:
    with pytest.raises(CallerError, match="version"):
        cas(b"v", version)
    with pytest.raises(CallerError, match="version"):
        DeleteIfVersion(key=K, version=version)


@pytest.mark.parametrize("value", ["text", bytearray(b"v"), b"v" * ((64 << 20) + 1)])
def test_a_value_is_bytes_under_the_ceiling(value: Any) -> None:
    with pytest.raises(CallerError, match="store value"):
        cas(value, 0)


@pytest.mark.parametrize("holder", ["", "h" * 129, b"h"])
def test_a_holder_is_a_bounded_str(holder: Any) -> None:
    with pytest.raises(CallerError, match="holder"):
        AcquireLease(key=K, holder=holder, ttl=1.0)
    with pytest.raises(CallerError, match="holder"):
        ReleaseLease(key=K, holder=holder)


def test_the_edges_are_accepted() -> None:
    assert cas(b"", MAX_VERSION, ttl=MAX_STORE_TTL).expected == MAX_VERSION
    assert Take(key="k" * 256).key == "k" * 256
    assert ReleaseLease(key=K, holder="h" * 128).holder == "h" * 128


# -- the in-process store ----------------------------------------------------------


def test_compare_and_set_creates_replaces_and_refuses_a_stale_version() -> None:
    store = MemoryStore()
    assert store.execute(Read(key=K), now=0.0) == Missing()
    first = store.execute(cas(b"a", 0), now=0.0)
    assert isinstance(first, Written) and first.version > 0
    assert store.execute(cas(b"b", 0), now=0.0) == Conflict(version=first.version)
    second = store.execute(cas(b"b", first.version), now=0.0)
    assert isinstance(second, Written) and second.version != first.version
    assert store.execute(cas(b"c", first.version), now=0.0) == Conflict(version=second.version)
    assert store.execute(Read(key=K), now=0.0) == Found(value=b"b", version=second.version)


def test_delete_if_version() -> None:
    store = MemoryStore()
    assert store.execute(DeleteIfVersion(key=K, version=0), now=0.0) == Conflict(version=0)
    written = store.execute(cas(b"a", 0), now=0.0)
    assert isinstance(written, Written)
    assert store.execute(DeleteIfVersion(key=K, version=written.version + 1), now=0.0) == (
        Conflict(version=written.version)
    )
    assert store.execute(DeleteIfVersion(key=K, version=written.version), now=0.0) == Deleted()
    assert store.execute(Read(key=K), now=0.0) == Missing()


def test_a_version_is_never_reused_after_a_delete() -> None:
    store = MemoryStore()
    seen = set()
    for _ in range(5):
        written = store.execute(cas(b"a", 0), now=0.0)
        assert isinstance(written, Written) and written.version not in seen
        seen.add(written.version)
        assert store.execute(DeleteIfVersion(key=K, version=written.version), now=0.0) == Deleted()
    assert len(seen) == 5


def test_take_hands_a_value_to_one_taker() -> None:
    store = MemoryStore()
    written = store.execute(cas(b"verifier", 0), now=0.0)
    assert isinstance(written, Written)
    assert store.execute(Take(key=K), now=1.0) == Found(value=b"verifier", version=written.version)
    assert store.execute(Take(key=K), now=1.0) == Missing()


def test_a_key_expires_at_its_ttl() -> None:
    store = MemoryStore()
    assert isinstance(store.execute(cas(b"a", 0, ttl=5.0), now=100.0), Written)
    assert isinstance(store.execute(Read(key=K), now=104.9), Found)
    assert store.execute(Read(key=K), now=105.0) == Missing()
    assert len(store) == 0  # dropped when touched
    assert isinstance(store.execute(cas(b"b", 0), now=105.0), Written)  # absent again


def test_a_lease_is_held_until_released_by_its_holder_or_expired() -> None:
    store = MemoryStore()
    lease = lease_key(K)
    assert store.execute(AcquireLease(key=lease, holder="one", ttl=3.0), now=0.0) == Acquired()
    assert store.execute(AcquireLease(key=lease, holder="two", ttl=3.0), now=1.0) == Held()
    assert store.execute(ReleaseLease(key=lease, holder="two"), now=1.0) == NotHeld()
    assert store.execute(ReleaseLease(key=lease, holder="one"), now=1.0) == Released()
    assert store.execute(ReleaseLease(key=lease, holder="one"), now=1.0) == NotHeld()
    assert store.execute(AcquireLease(key=lease, holder="two", ttl=3.0), now=1.0) == Acquired()
    # "two" dies holding it: at its expiry another takes it; two's late release is refused
    assert store.execute(AcquireLease(key=lease, holder="three", ttl=3.0), now=3.9) == Held()
    assert store.execute(AcquireLease(key=lease, holder="three", ttl=3.0), now=4.0) == Acquired()
    assert store.execute(ReleaseLease(key=lease, holder="two"), now=4.0) == NotHeld()


def test_the_least_recently_written_key_goes_past_max_entries() -> None:
    store = MemoryStore(max_entries=2)
    for key in ("a", "b", "a", "c"):  # "a" rewritten after "b": "b" is the oldest write
        current = store.execute(Read(key=key), now=0.0)
        expected = current.version if isinstance(current, Found) else 0
        assert isinstance(store.execute(cas(b"v", expected, key=key), now=0.0), Written)
    assert store.execute(Read(key="b"), now=0.0) == Missing()
    assert isinstance(store.execute(Read(key="a"), now=0.0), Found)
    assert (len(store), store.evicted) == (2, 1)
    assert repr(store) == "MemoryStore(2 keys)"


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "9"])
def test_memory_store_max_entries_is_checked(bad: Any) -> None:
    with pytest.raises(CallerError, match="max_entries"):
        MemoryStore(max_entries=bad)


# -- failures and their policies ---------------------------------------------------------


def test_a_failed_store_is_a_miss_for_a_cache_lookup() -> None:
    failed = StoreFailed(reason="unavailable", detail="connection refused")
    assert degraded(failed) == Missing()
    assert degraded(Found(value=b"x", version=1)) == Found(value=b"x", version=1)


def test_a_failed_store_is_a_named_error_for_a_token_operation() -> None:
    error = store_error(StoreFailed(reason="timeout", detail="1.0 s"), "refreshing a token")
    assert isinstance(error, ConnectionFailed)
    assert (error.cause, error.bound) == ("store", "store_timeout")
    assert "refreshing a token" in error.message and "timeout" in error.message
    other = store_error(StoreFailed(reason="refused", detail="OOM"), "reading tokens")
    assert (other.cause, other.bound) == ("store", None)


def test_a_failure_detail_is_bounded() -> None:
    assert len(StoreFailed(reason="failed", detail="x" * 10_000).detail) == 300
    assert StoreFailed(reason="failed", detail="short").detail == "short"


# -- keys ----------------------------------------------------------------------------------


def test_keys_are_bounded_namespaced_and_distinct() -> None:
    keys = {
        token_key("https://as", "client", "https://mcp", None),
        token_key("https://as", "client", "https://mcp", "tenant-a"),
        token_key("https://as", "client", "https://mcp", ""),
        registration_key("https://as", None),
        pending_key("state"),
        listing_key("https://mcp", "2026-07-28", "tools/list", None, None),
        listing_key("https://mcp", "2026-07-28", "tools/list", "", None),
        listing_key("https://mcp", "2026-07-28", "tools/list", None, b""),
        listing_key("https://mcp", "2026-07-28", "tools/list", None, b"id"),
        era_key("https://mcp"),
        era_key("https://mcp", prefix="tenant1"),
    }
    assert len(keys) == 11
    long = era_key("https://mcp/" + "x" * 100_000)
    assert long.startswith("sansmcp:era:") and len(long) < 100
    assert era_key("https://mcp") == era_key("https://mcp")  # pure: the same on every worker
    assert lease_key(era_key("u")) == era_key("u") + ":lease"
    # parts are length-prefixed: no concatenation of two lists digests alike
    assert store_key("x", ["ab", "c"]) != store_key("x", ["a", "bc"])


@pytest.mark.parametrize("prefix", ["", "p" * 65, None])
def test_the_prefix_is_bounded(prefix: Any) -> None:
    with pytest.raises(CallerError, match="prefix"):
        era_key("u", prefix=prefix)


def test_the_listing_identity_is_keyed_by_the_fleet_secret_never_the_token() -> None:
    parts = [(b"bearer", b"tok-123")]
    one = fleet_identity(b"fleet-secret", parts)
    assert one is not None and b"tok-123" not in one
    assert fleet_identity(b"fleet-secret", [(b"bearer", b"tok-123")]) == one  # another worker
    assert fleet_identity(b"other-secret", parts) != one
    assert fleet_identity(b"fleet-secret", [(b"bearer", b"tok-124")]) != one
    assert fleet_identity(b"fleet-secret", [(b"bearer", b"tok-12"), (b"3", b"")]) != one
    assert fleet_identity(b"fleet-secret", []) is None


# -- values ----------------------------------------------------------------------------------

TOKENS = Tokens(
    access_token="at",
    refresh_token="rt",
    expires_at=1_700_000_000.5,
    scope="read",
    issuer="https://as",
    token_endpoint="https://as/token",
)
REGISTRATION = ClientRegistration(
    client_id="c", client_secret="s", auth_method="client_secret_post"
)
PENDING = PendingAuthorization(
    state="st",
    verifier="ver",
    issuer="https://as",
    iss_required=True,
    token_endpoint="https://as/token",
    resource="https://mcp",
    registration=REGISTRATION,
    redirect_uri="http://127.0.0.1/cb",
    bound=Binding(
        url="https://mcp",
        issuer=None,
        client_id="c",
        client_secret_sha256=None,
        client_metadata_url=None,
        redirect_uri="http://127.0.0.1/cb",
    ),
)


def test_records_round_trip() -> None:
    codec = ValueCodec(1 << 20)
    cases: list[tuple[str, dict[str, Any], Any, Any]] = [
        ("tokens", tokens_body(TOKENS), tokens_from, TOKENS),
        ("tokens", tokens_body(Tokens(access_token="a")), tokens_from, Tokens(access_token="a")),
        ("registration", registration_body(REGISTRATION), registration_from, REGISTRATION),
        ("pending", pending_body(PENDING), pending_from, PENDING),
        ("era", era_body("2025-06-18"), era_from, "2025-06-18"),
    ]
    for kind, body, shape, record in cases:
        sealed = codec.seal(kind, body)
        assert sealed is not None and codec.open(kind, sealed, shape) == record
    assert codec.misses == {"oversized": 0, "undecodable": 0, "kind": 0, "shape": 0}


def test_an_integral_expiry_reads_back_as_a_float() -> None:
    codec = ValueCodec(1 << 20)
    body = tokens_body(TOKENS) | {"expires_at": 5}
    opened = codec.open("tokens", codec.seal("tokens", body) or b"", tokens_from)
    assert opened is not None and opened.expires_at == 5.0 and type(opened.expires_at) is float


def test_a_record_too_big_is_not_sealed() -> None:
    codec = ValueCodec(100)
    assert codec.seal("tokens", tokens_body(Tokens(access_token="a" * 200))) is None
    assert codec.unsealed == 1
    assert "max_bytes=100" in repr(codec)


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"x" * 101, "oversized"),
        (b"\xff\xfe not json", "undecodable"),
        (b"[1,2", "undecodable"),
        (b'{"a":1}', "undecodable"),
        (b'[2,"era",{"version":"v"}]', "undecodable"),  # a layout from the future
        (b'[1,7,{"version":"v"}]', "undecodable"),
        (b'[1,"era",[]]', "undecodable"),
        (b'[1,"era",{}, 4]', "undecodable"),
        (b'[1,"tokens",{"version":"v"}]', "kind"),
        (b'[1,"era",{"version":7}]', "shape"),
        (b'[1,"era",{"version":""}]', "shape"),
        (b'[1,"era",{"version":"' + b"v" * 65 + b'"}]', "shape"),
        (
            b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
            "oversized",
        ),
    ],
)
def test_a_value_that_does_not_open_is_a_counted_miss(data: bytes, cause: str) -> None:
    codec = ValueCodec(100)
    assert codec.open("era", data, era_from) is None
    assert codec.misses[cause] == 1 and sum(codec.misses.values()) == 1


def test_a_value_nested_too_deep_is_undecodable() -> None:
    codec = ValueCodec(1 << 20)
    data = b'[1,"era",{"version":"v","x":' + b"[" * 100 + b"]" * 100 + b"}]"
    assert codec.open("era", data, era_from) is None
    assert codec.misses["undecodable"] == 1


JSON_VALUES: tuple[Any, ...] = (None, True, 1, 1.5, "s", [], {})


def wrong(value: Any, nullable: bool) -> list[Any]:
    """JSON values a field holding ``value`` must refuse: every other type (an int for a
    number is fine, None only when the field is ``nullable``)."""
    refused = []
    for other in JSON_VALUES:
        same = type(other) is type(value) or (type(value) is float and type(other) is int)
        if not same and not (other is None and nullable):
            refused.append(other)
    return refused


def test_every_field_of_the_wrong_type_or_missing_is_a_shape_miss() -> None:
    codec = ValueCodec(1 << 20)
    records: list[tuple[str, dict[str, Any], Any, Any]] = [
        ("tokens", tokens_body(TOKENS), tokens_from, TOKENS_SPEC),
        ("registration", registration_body(REGISTRATION), registration_from, REGISTRATION_SPEC),
        ("pending", pending_body(PENDING), pending_from, PENDING_SPEC),
    ]
    misses = 0
    for kind, body, shape, spec in records:
        nullable = {name for name, field_kind in spec if field_kind.endswith("?")}
        for name, value in body.items():
            variants = [{k: v for k, v in body.items() if k != name}]
            variants += [body | {name: other} for other in wrong(value, name in nullable)]
            for variant in variants:
                opened = codec.open(kind, codec.seal(kind, variant) or b"", shape)
                assert opened is None, (name, variant)
                misses += 1
    for part in ("registration", "bound"):  # the nested records, field by field
        for name in pending_body(PENDING)[part]:
            body = pending_body(PENDING)
            body[part] = {k: v for k, v in body[part].items() if k != name}
            assert codec.open("pending", codec.seal("pending", body) or b"", pending_from) is None
            misses += 1
    assert misses > 100
    assert codec.misses == {"oversized": 0, "undecodable": 0, "kind": 0, "shape": misses}


def test_unknown_members_are_ignored() -> None:
    codec = ValueCodec(1 << 20)
    body = tokens_body(TOKENS) | {"added_by_a_newer_worker": [1, 2]}
    assert codec.open("tokens", codec.seal("tokens", body) or b"", tokens_from) == TOKENS


@settings(max_examples=examples(300), deadline=None)
@given(data=st.binary(max_size=300))
def test_any_bytes_open_as_a_record_or_a_counted_miss(data: bytes) -> None:
    codec = ValueCodec(200)
    for kind, shape in (("tokens", tokens_from), ("pending", pending_from), ("era", era_from)):
        opened: Any = codec.open(kind, data, shape)
        assert opened is None or isinstance(opened, Tokens | PendingAuthorization | str)
    assert sum(codec.misses.values()) == 3  # random bytes never decode as a record
