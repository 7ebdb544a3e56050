"""The guard by construction: embedding forms, the IANA registry, and resolver answers.

* For IPv4 addresses drawn from every class the guard knows, each IPv6 form
  that embeds IPv4 gets exactly the verdict of the embedded address, under
  every combination of ``allow_private`` / ``allow_loopback``; local-use NAT64
  gets the combined verdict of its four RFC 6052 readings plus ``allow_private``.
* Every IPv6 entry of the IANA special-purpose address registry, with its RFC
  and the verdict expected.
* Whatever a resolver hook returns, :func:`dial.vet` returns only canonical IP
  text the guard admits, or raises ``ConnectionFailed`` -- nothing else.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import ConnectionFailed
from sansmcp.core.net import dial
from sansmcp.core.net.guard import refusal_reason
from sansmcp.core.url import Origin
from tests.tiers import examples

NEVER = "refused whatever the settings"
FLAGS = [(p, lo) for p in (False, True) for lo in (False, True)]
ORIGIN = Origin(scheme="https", host="mcp.example.com", port=443)


def verdict(address: str) -> tuple[tuple[bool, ...], bool]:
    """(admitted under each of FLAGS, refused whatever the settings)."""
    admitted = []
    never = False
    for allow_private, allow_loopback in FLAGS:
        reason = refusal_reason(address, allow_private=allow_private, allow_loopback=allow_loopback)
        admitted.append(reason is None)
        never = never or (reason is not None and NEVER in reason)
    return tuple(admitted), never


# -- IPv4 addresses of every class ---------------------------------------------------

V4_CLASSES = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "100.100.100.200/32",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "169.254.169.254/32",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "255.255.255.255/32",
    "8.0.0.0/8",  # global
    "93.184.216.0/24",  # global
    "100.63.255.0/24",  # global, just below shared space
    "172.32.0.0/16",  # global, just above 172.16/12
]


def _in(network: str) -> st.SearchStrategy[int]:
    net = ipaddress.IPv4Network(network)
    return st.integers(int(net.network_address), int(net.broadcast_address))


ipv4s = st.one_of(
    st.sampled_from(V4_CLASSES).flatmap(_in), st.integers(min_value=0, max_value=2**32 - 1)
)
bits32 = st.integers(min_value=0, max_value=2**32 - 1)
bits80 = st.integers(min_value=0, max_value=2**80 - 1)


def _isatap_iid(value: int) -> bool:
    return ((value >> 32) & 0xFCFFFFFF) == 0x00005EFE


def _form(name: str, v4: int, filler: int) -> int:
    """The IPv6 address (as an int) of form ``name`` embedding ``v4``; ``filler`` fills free bits."""
    if name == "mapped":
        return (0xFFFF << 32) | v4
    if name == "nat64":
        return (0x64FF9B << 96) | v4
    if name == "6to4":
        return (0x2002 << 112) | (v4 << 80) | (filler & (2**80 - 1))
    global_client = int(ipaddress.IPv4Address("8.8.8.8")) ^ 0xFFFFFFFF
    if name == "teredo-server":
        return (0x20010000 << 96) | (v4 << 64) | ((filler & 0xFFFFFFFF) << 32) | global_client
    if name == "teredo-client":
        server = int(ipaddress.IPv4Address("65.54.227.120"))
        return (
            (0x20010000 << 96) | (server << 64) | ((filler & 0xFFFFFFFF) << 32) | (v4 ^ 0xFFFFFFFF)
        )
    assert name == "isatap"  # a global prefix in 2606:4700::/32, u/g bits drawn
    prefix = (0x26064700 << 32) | (filler & 0xFFFFFFFF)
    return (prefix << 64) | (((filler >> 32) & 0x03) << 56) | (0x5EFE << 32) | v4


FORMS = ["mapped", "nat64", "6to4", "teredo-server", "teredo-client", "isatap"]


@settings(max_examples=examples(400), deadline=None)
@given(st.sampled_from(FORMS), ipv4s, bits80)
def test_each_embedding_form_gets_the_embedded_verdict(name: str, v4: int, filler: int) -> None:
    address = ipaddress.IPv6Address(_form(name, v4, filler))
    assume(name == "isatap" or not _isatap_iid(int(address) & (2**64 - 1)))  # one form at a time
    embedded = str(ipaddress.IPv4Address(v4))
    assert verdict(str(address)) == verdict(embedded), (name, str(address), embedded)
    reason = refusal_reason(str(address), allow_private=False, allow_loopback=False)
    if reason is not None:
        assert f"embeds IPv4 {embedded}" in reason


def _rfc6052_readings(value: int) -> list[str]:
    """Decoded here from the bit string, independently of the guard's arithmetic."""
    bits = format(value, "0128b")
    readings = [
        bits[48:64] + bits[72:88],  # /48: the u octet (64..71) skipped
        bits[56:64] + bits[72:96],  # /56
        bits[72:104],  # /64
        bits[96:128],  # /96
    ]
    return [str(ipaddress.IPv4Address(int(r, 2))) for r in readings]


@settings(max_examples=examples(400), deadline=None)
@given(
    st.one_of(
        bits80,  # anything under the /48
        # or a drawn IPv4 address at one RFC 6052 position, the other bits drawn too
        st.tuples(st.sampled_from([48, 56, 64, 96]), ipv4s, bits80).map(lambda t: _place(*t)),
    )
)
def test_local_use_nat64_combines_every_reading(suffix: int) -> None:
    value = (0x0064FF9B0001 << 80) | suffix
    address = str(ipaddress.IPv6Address(value))
    readings = _rfc6052_readings(value)
    judged = [verdict(r) for r in readings]
    admitted, never = verdict(address)
    for index, (allow_private, _) in enumerate(FLAGS):
        expected = allow_private and all(v[0][index] for v in judged)
        assert admitted[index] == expected, (address, readings, FLAGS[index])
    assert never == any(v[1] for v in judged), (address, readings)


def _place(prefix: int, v4: int, filler: int) -> int:
    """An 80-bit suffix of 64:ff9b:1::/48 carrying ``v4`` at the RFC 6052 /``prefix`` position."""
    value = (0x0064FF9B0001 << 80) | filler
    bits = list(format(value, "0128b"))
    v4_bits = format(v4, "032b")
    positions = {
        48: [*range(48, 64), *range(72, 88)],
        56: [*range(56, 64), *range(72, 96)],
        64: list(range(72, 104)),
        96: list(range(96, 128)),
    }[prefix]
    for position, bit in zip(positions, v4_bits, strict=True):
        bits[position] = bit
    return int("".join(bits), 2) & (2**80 - 1)


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from([48, 56, 64, 96]), ipv4s, bits80)
def test_local_use_nat64_is_never_laxer_than_what_it_embeds(
    prefix: int, v4: int, filler: int
) -> None:
    address = str(ipaddress.IPv6Address((0x0064FF9B0001 << 80) | _place(prefix, v4, filler)))
    embedded = str(ipaddress.IPv4Address(v4))
    admitted, never = verdict(address)
    inner_admitted, inner_never = verdict(embedded)
    assert all(inner or not outer for outer, inner in zip(admitted, inner_admitted, strict=True))
    assert never or not inner_never
    assert not admitted[1]  # allow_loopback alone never admits local-use NAT64


# -- the IANA IPv6 special-purpose address registry -----------------------------------

NEVER_V = ((False, False, False, False), True)
LOOPBACK_V = ((False, True, False, True), False)
PRIVATE_V = ((False, False, True, True), False)
GLOBAL_V = ((True, True, True, True), False)

# (registry entry, RFC, addresses in it, the verdict each gets)
IANA_V6 = [
    ("::1/128 Loopback Address", "RFC 4291", ["::1"], LOOPBACK_V),
    ("::/128 Unspecified Address", "RFC 4291", ["::"], NEVER_V),
    ("::ffff:0:0/96 IPv4-mapped Address", "RFC 4291", ["::ffff:8.8.8.8"], GLOBAL_V),
    ("::ffff:0:0/96, embedding loopback", "RFC 4291", ["::ffff:127.0.0.1"], LOOPBACK_V),
    ("::ffff:0:0/96, embedding private", "RFC 4291", ["::ffff:10.0.0.1"], PRIVATE_V),
    ("::ffff:0:0/96, embedding metadata", "RFC 4291", ["::ffff:169.254.169.254"], NEVER_V),
    ("64:ff9b::/96 IPv4-IPv6 Translat.", "RFC 6052", ["64:ff9b::808:808"], GLOBAL_V),
    ("64:ff9b::/96, embedding loopback", "RFC 6052", ["64:ff9b::7f00:1"], LOOPBACK_V),
    ("64:ff9b::/96, embedding metadata", "RFC 6052", ["64:ff9b::a9fe:a9fe"], NEVER_V),
    (
        "64:ff9b:1::/48 IPv4-IPv6 Translat. (local use)",
        "RFC 8215",
        ["64:ff9b:1:abcd:1234:5678:808:808"],  # all four readings global
        PRIVATE_V,
    ),
    (
        "64:ff9b:1::/48, a reading refused whatever the settings",
        "RFC 8215",
        ["64:ff9b:1::a9fe:a9fe", "64:ff9b:1::", "64:ff9b:1:a9fe:ff:a9fe::"],
        NEVER_V,
    ),
    (
        "64:ff9b:1::/48, a loopback reading",
        "RFC 8215",
        ["64:ff9b:1:abcd:1234:5678:7f00:1"],
        ((False, False, False, True), False),
    ),
    (
        "100::/64 Discard-Only Address Block",
        "RFC 6666",
        ["100::", "100::ffff:ffff:ffff:ffff"],
        NEVER_V,
    ),
    ("100:0:0:1::/64 Dummy IPv6 Prefix", "RFC 9780", ["100:0:0:1::1"], NEVER_V),
    ("2001::/23 IETF Protocol Assignments", "RFC 2928", ["2001:100::1", "2001:1ff::1"], NEVER_V),
    (
        "2001::/32 TEREDO (server 65.54.227.120, client 8.8.8.8)",
        "RFC 4380",
        ["2001:0:4136:e378:8000:63bf:f7f7:f7f7"],
        GLOBAL_V,
    ),
    (
        "2001::/32 TEREDO (client 192.0.2.45)",
        "RFC 4380",
        ["2001:0:4136:e378:8000:63bf:3fff:fdd2"],
        NEVER_V,
    ),
    ("2001:1::1/128 Port Control Protocol Anycast", "RFC 7723", ["2001:1::1"], NEVER_V),
    ("2001:1::2/128 TURN Anycast", "RFC 8155", ["2001:1::2"], NEVER_V),
    (
        "2001:1::3/128 DNS-SD Service Registration Protocol Anycast",
        "RFC 9665",
        ["2001:1::3"],
        NEVER_V,
    ),
    ("2001:2::/48 Benchmarking", "RFC 5180", ["2001:2::1", "2001:2:0:ffff::1"], NEVER_V),
    ("2001:3::/32 AMT", "RFC 7450", ["2001:3::1"], NEVER_V),
    ("2001:4:112::/48 AS112-v6", "RFC 7535", ["2001:4:112::1"], NEVER_V),
    ("2001:10::/28 Deprecated (previously ORCHID)", "RFC 4843", ["2001:10::1"], NEVER_V),
    ("2001:20::/28 ORCHIDv2", "RFC 7343", ["2001:20::1", "2001:2f::1"], NEVER_V),
    ("2001:30::/28 Drone Remote ID Protocol Entity Tags", "RFC 9374", ["2001:30::1"], NEVER_V),
    ("2001:db8::/32 Documentation", "RFC 3849", ["2001:db8::1", "2001:db8:ffff::1"], NEVER_V),
    ("2002::/16 6to4 (embedding 8.8.8.8)", "RFC 3056", ["2002:808:808::1"], GLOBAL_V),
    ("2002::/16 6to4 (embedding 10.0.0.1)", "RFC 3056", ["2002:a00:1::1"], PRIVATE_V),
    ("2002::/16 6to4 (embedding 127.0.0.1)", "RFC 3056", ["2002:7f00:1::1"], LOOPBACK_V),
    # IANA marks it globally reachable: an ordinary global destination
    (
        "2620:4f:8000::/48 Direct Delegation AS112 Service",
        "RFC 7534",
        ["2620:4f:8000::1"],
        GLOBAL_V,
    ),
    ("3fff::/20 Documentation", "RFC 9637", ["3fff::1", "3fff:fff::1"], NEVER_V),
    ("5f00::/16 Segment Routing (SRv6) SIDs", "RFC 9602", ["5f00::1", "5f00:ffff::1"], NEVER_V),
    ("fc00::/7 Unique-Local", "RFC 4193", ["fc00::1", "fdff:ffff::1"], PRIVATE_V),
    ("fe80::/10 Link-Local Unicast", "RFC 4291", ["fe80::1", "febf:ffff::1"], NEVER_V),
]


@pytest.mark.parametrize(
    ("entry", "rfc", "addresses", "expected"), IANA_V6, ids=[e[0] for e in IANA_V6]
)
def test_iana_ipv6_special_purpose_registry(
    entry: str, rfc: str, addresses: list[str], expected: tuple[tuple[bool, ...], bool]
) -> None:
    for address in addresses:
        assert verdict(address) == expected, (entry, rfc, address)


# -- resolver answers: any Python value ----------------------------------------------

TRICKY_TEXT = [
    "127.0.0.1",
    "127.000000000001",
    "127.1",
    "0x7f.0.0.1",
    "2130706433",
    "::1",
    "::ffff:127.0.0.1",
    "[::1]",
    "localhost",
    "fe80::1%lo",
    "169.254.169.254",
    "10.0.0.1",
    " 127.0.0.1",
    "127.0.0.1\x00",
    "64:ff9b:1::a9fe:a9fe",
    "::ffff:7f00:1",
    "0.0.0.0",
    "::",
    "64:ff9b::7f00:1",
    "2002:7f00:1::1",
]

ip_text = st.ip_addresses().map(str)
leaves: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(TRICKY_TEXT),
    ip_text,
    st.sampled_from(TRICKY_TEXT).map(str.encode),
    st.ip_addresses().map(lambda a: a.packed),
    st.ip_addresses(),  # an ipaddress object, not a str
    st.ip_addresses().map(int),
    st.text(max_size=50),
    st.from_type(type).flatmap(st.from_type),
)


class _StrLike(str):
    """A str subclass: the guard wants exactly ``str``."""


def _raising_after(items: list[Any]) -> Iterator[Any]:
    yield from items
    raise RuntimeError("the resolver's iterator broke")


def _endless(item: Any) -> Iterator[Any]:
    while True:
        yield item


class _BadIter:
    def __iter__(self) -> Any:
        return 42  # not an iterator


class _Explodes:
    def __iter__(self) -> Iterator[Any]:
        raise OSError("boom")


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=40),
        st.tuples(children, children),
        st.lists(children, max_size=5).map(iter),
        st.lists(children, max_size=5).map(_raising_after),
        st.dictionaries(st.text(max_size=5), children, max_size=3),
        children.map(_endless),
    )


# answers made only of IP text, so that many are dialled and the 32 bound is crossed
ip_answers = st.lists(st.one_of(ip_text, st.sampled_from(TRICKY_TEXT)), min_size=1, max_size=40)
answers = st.one_of(
    st.recursive(leaves, _containers, max_leaves=20),
    ip_answers,
    ip_answers.map(tuple),
    ip_answers.map(iter),
    st.lists(st.sampled_from(TRICKY_TEXT).map(_StrLike), min_size=1, max_size=3),
    st.just(_BadIter()),
    st.just(_Explodes()),
    st.builds(lambda n: range(n), st.integers(0, 10**18)),
)


def _considered(value: Any) -> set[str] | None:
    """The canonical text of every str among the first 32 items, when the value is a list/tuple."""
    if type(value) not in (list, tuple):
        return None
    seen = set()
    for item in value[: dial.MAX_ANSWERS]:
        if type(item) is str:
            try:
                parsed = ipaddress.ip_address(item)
            except ValueError:
                continue
            # the scope id of fe80::1%lo is dropped
            seen.add(
                str(
                    ipaddress.ip_address(int(parsed))
                    if parsed.version == 4
                    else ipaddress.IPv6Address(int(parsed))
                )
            )
    return seen


@settings(max_examples=examples(500), deadline=None)
@given(answers, st.sampled_from(FLAGS))
def test_any_resolver_answer_is_vetted_or_refused(value: Any, flags: tuple[bool, bool]) -> None:
    allow_private, allow_loopback = flags
    considered = _considered(value)
    try:
        out = dial.vet(ORIGIN, value, allow_private=allow_private, allow_loopback=allow_loopback)
    except ConnectionFailed as failed:
        assert failed.cause in ("dns", "refused_address")
        event(f"refused: {failed.cause}")
        return
    event("addresses returned")
    assert out, "vet returns at least one address or raises"
    for address in out:
        assert type(address) is str
        assert str(ipaddress.ip_address(address)) == address  # canonical: dialled as parsed
        assert (
            refusal_reason(address, allow_private=allow_private, allow_loopback=allow_loopback)
            is None
        )
        if considered is not None:
            assert address in considered


@pytest.mark.parametrize(
    "value",
    [
        [b"127.000000000001"],  # the case: 16 bytes, a packed global IPv6 address
        b"127.000000000001",
        "127.0.0.1",  # one str, not a list of them
        [2130706433],
        [None],
        [ipaddress.IPv4Address("127.0.0.1")],
        ["127.1"],
        ["localhost"],
        [_StrLike("8.8.8.8")],
        ["8.8.8.8", b"8.8.4.4"],  # one bad item fails the whole answer
        ["8" * 1000],
        None,
        42,
        _BadIter(),
        _Explodes(),
        _raising_after(["8.8.8.8"]),
    ],
    ids=repr,
)
def test_unusable_answers_are_dns_failures(value: Any) -> None:
    for allow_private, allow_loopback in FLAGS:
        if isinstance(value, Iterator):
            value = _raising_after(["8.8.8.8"])  # a fresh one each time
        with pytest.raises(ConnectionFailed) as failed:
            dial.vet(ORIGIN, value, allow_private=allow_private, allow_loopback=allow_loopback)
        assert failed.value.cause == "dns", failed.value.message
        assert "mcp.example.com" in failed.value.message


def test_an_exception_while_iterating_is_chained() -> None:
    with pytest.raises(ConnectionFailed) as failed:
        dial.vet(ORIGIN, _Explodes(), allow_private=True, allow_loopback=True)
    assert isinstance(failed.value.__cause__, OSError)
    assert "OSError: boom" in failed.value.message
    with pytest.raises(ConnectionFailed) as failed:
        dial.vet(ORIGIN, ["10.0.0.1", "127.1"], allow_private=True, allow_loopback=True)
    assert isinstance(failed.value.__cause__, ValueError)
    assert "answer #1" in failed.value.message and "'127.1'" in failed.value.message


def test_hook_error_names_the_exception() -> None:
    error = dial.hook_error(ORIGIN, KeyError("x" * 500))
    assert error.cause == "dns"
    assert "KeyError" in error.message and len(error.message) < 300

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert dial.hook_error(ORIGIN, Unprintable()).message.endswith("Unprintable")


def test_only_the_first_32_answers_are_considered() -> None:
    answer = [f"10.0.0.{n}" for n in range(32)] + ["8.8.8.8"] * 8
    with pytest.raises(ConnectionFailed) as failed:
        dial.vet(ORIGIN, answer, allow_private=False, allow_loopback=False)
    assert failed.value.cause == "refused_address"
    assert "8 more answers ignored: at most 32 are considered" in failed.value.message
    assert dial.vet(ORIGIN, answer, allow_private=True, allow_loopback=False)[-1] == "10.0.0.31"
    # what lies past the 32nd is not even looked at
    assert dial.vet(
        ORIGIN, ["8.8.8.8"] * 32 + [b"junk"], allow_private=False, allow_loopback=False
    ) == ["8.8.8.8"]


def test_an_endless_answer_is_read_33_items_deep() -> None:
    pulled = itertools.count()

    def endless() -> Iterator[str]:
        while True:
            next(pulled)
            yield "10.0.0.1"

    with pytest.raises(ConnectionFailed) as failed:
        dial.vet(ORIGIN, endless(), allow_private=False, allow_loopback=False)
    assert failed.value.cause == "refused_address"
    assert "some more answers ignored" in failed.value.message
    assert next(pulled) == dial.MAX_ANSWERS + 1


def test_no_answer_is_a_dns_failure() -> None:
    for empty in ([], (), iter(()), {}):
        with pytest.raises(ConnectionFailed) as failed:
            dial.vet(ORIGIN, empty, allow_private=True, allow_loopback=True)
        assert failed.value.cause == "dns" and "resolved to no address" in failed.value.message


def test_describe_is_safe_for_any_type() -> None:
    class Meta(type):
        def __getattribute__(cls, name: str) -> Any:
            raise RuntimeError("no attributes")

    class Odd(metaclass=Meta):
        pass

    with pytest.raises(ConnectionFailed) as failed:
        dial.vet(ORIGIN, [Odd()], allow_private=True, allow_loopback=True)
    assert "is an object, not an IP address string" in failed.value.message
    with pytest.raises(ConnectionFailed) as failed:
        dial.vet(ORIGIN, [b"x" * 300], allow_private=True, allow_loopback=True)
    assert "bytes b'xxx" in failed.value.message and "'..." in failed.value.message
