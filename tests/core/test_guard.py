"""The dial guard's predicate: every refused range, both families, embedded IPv4."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.net.guard import refusal_reason, vet_addresses
from tests.tiers import examples

NEVER = "refused whatever the settings"

# (address, kind that must appear in the reason, the setting that admits it or None)
REFUSED = [
    # IPv4
    ("169.254.169.254", "metadata", None),
    ("100.100.100.200", "metadata", None),
    ("169.254.0.1", "link-local", None),
    ("169.254.255.255", "link-local", None),
    ("0.0.0.0", "unspecified", None),
    ("0.1.2.3", "unspecified", None),
    ("127.0.0.1", "loopback", "allow_loopback"),
    ("127.255.255.254", "loopback", "allow_loopback"),
    ("10.0.0.1", "private", "allow_private"),
    ("10.255.255.255", "private", "allow_private"),
    ("172.16.0.1", "private", "allow_private"),
    ("172.31.255.255", "private", "allow_private"),
    ("192.168.1.1", "private", "allow_private"),
    ("100.64.0.1", "shared", "allow_private"),
    ("100.127.255.255", "shared", "allow_private"),
    ("255.255.255.255", "broadcast", None),
    ("224.0.0.1", "multicast", None),
    ("239.255.255.250", "multicast", None),
    ("192.0.2.1", "documentation", None),
    ("198.51.100.7", "documentation", None),
    ("203.0.113.9", "documentation", None),
    ("198.18.0.1", "benchmarking", None),
    ("198.19.255.255", "benchmarking", None),
    ("240.0.0.1", "reserved", None),
    ("192.0.0.8", "reserved", None),
    ("192.88.99.1", "reserved", None),
    # IPv6
    ("fd00:ec2::254", "metadata", None),
    ("fe80::1", "link-local", None),
    ("febf:ffff::1", "link-local", None),
    ("fe80::1%eth0", "link-local", None),
    ("::", "unspecified", None),
    ("::1", "loopback", "allow_loopback"),
    ("fc00::1", "unique local", "allow_private"),
    ("fd12:3456::1", "unique local", "allow_private"),
    ("fec0::1", "site-local", "allow_private"),
    # local-use NAT64 (RFC 8215): the form needs allow_private, and each RFC 6052 reading
    # (/48, /56, /64, /96) is judged too; here 171.205.52.86, 205.52.86.120, 52.86.120.8, 8.8.8.8
    ("64:ff9b:1:abcd:1234:5678:808:808", "local-use NAT64", "allow_private"),
    ("64:ff9b:1::a00:1", "unspecified", None),  # its /48 reading is 0.0.0.0
    ("64:ff9b:1::a9fe:a9fe", "unspecified", None),  # the 169.254.169.254 at /96
    ("64:ff9b:1:a9fe:ff:a9fe::", "link-local", None),  # 169.254.255.169 at /48
    ("ff02::1", "multicast", None),
    ("ff0e::1", "multicast", None),
    ("2001:db8::1", "documentation", None),
    ("3fff::1", "documentation", None),
    ("2001:2::1", "benchmarking", None),
    ("2001:10::1", "reserved", None),
    ("::a00:1", "reserved", None),  # IPv4-compatible (deprecated)
    ("::ffff:0:a00:1", "reserved", None),  # SIIT
    ("100::1", "reserved", None),  # discard-only
    ("4000::1", "reserved", None),
    ("5f00::1", "reserved", None),
    # IPv4 embedded in IPv6: judged by the IPv4 address
    ("::ffff:127.0.0.1", "loopback", "allow_loopback"),
    ("::ffff:10.1.2.3", "private", "allow_private"),
    ("::ffff:169.254.169.254", "metadata", None),
    ("::ffff:0.0.0.0", "unspecified", None),
    ("64:ff9b::7f00:1", "loopback", "allow_loopback"),
    ("64:ff9b::a9fe:a9fe", "metadata", None),
    ("64:ff9b::c0a8:101", "private", "allow_private"),
    ("2002:7f00:1::1", "loopback", "allow_loopback"),
    ("2002:a9fe:a9fe::", "metadata", None),
    ("2002:6464:64c8::", "metadata", None),  # 100.100.100.200
    # ISATAP interface id (any prefix): the embedded IPv4 is judged, and the prefix too
    ("2606:4700:1:2:0:5efe:a9fe:a9fe", "metadata", None),
    ("2606:4700:1:2:200:5efe:7f00:1", "loopback", "allow_loopback"),
    ("fc00::5efe:808:808", "unique local", "allow_private"),
    # Teredo: server 65.54.227.120, client 192.0.2.45 (obfuscated) -> refused by the client
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "documentation", None),
    # Teredo: server 127.0.0.1 -> refused by the server
    ("2001:0:7f00:1:8000:63bf:f7f7:f7f7", "loopback", "allow_loopback"),
]

ALLOWED = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "100.63.255.255",  # just below 100.64/10
    "100.128.0.0",  # just above
    "172.15.255.255",
    "172.32.0.0",
    "169.253.255.255",
    "223.255.255.255",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
    "2001:0:4136:e378:8000:63bf:f7f7:f7f7",  # Teredo: server 65.54.227.120, client 8.8.8.8
    "2606:4700:1:2:0:5efe:808:808",  # ISATAP, embedding 8.8.8.8
    "2606:4700:1:2:0:5eff:a9fe:a9fe",  # not an ISATAP interface id
]


@pytest.mark.parametrize(("address", "kind", "waiver"), REFUSED)
def test_refused_by_default(address: str, kind: str, waiver: str | None) -> None:
    reason = refusal_reason(address, allow_private=False, allow_loopback=False)
    assert reason is not None
    assert address in reason
    assert kind in reason
    if waiver is None:
        assert NEVER in reason
    else:
        assert f"refused unless {waiver}=True" in reason


@pytest.mark.parametrize(("address", "kind", "waiver"), REFUSED)
def test_waivers_admit_exactly_their_ranges(address: str, kind: str, waiver: str | None) -> None:
    for allow_private in (False, True):
        for allow_loopback in (False, True):
            reason = refusal_reason(
                address, allow_private=allow_private, allow_loopback=allow_loopback
            )
            admitted = (waiver == "allow_private" and allow_private) or (
                waiver == "allow_loopback" and allow_loopback
            )
            assert (reason is None) == admitted, (address, allow_private, allow_loopback, reason)


@pytest.mark.parametrize("address", ALLOWED)
def test_globally_routable_addresses_pass(address: str) -> None:
    assert refusal_reason(address, allow_private=False, allow_loopback=False) is None


@pytest.mark.parametrize(
    "address",
    ["169.254.169.254", "100.100.100.200", "fd00:ec2::254", "::ffff:169.254.169.254", "fe80::1"],
)
def test_metadata_and_link_local_refused_even_with_both_allows(address: str) -> None:
    reason = refusal_reason(address, allow_private=True, allow_loopback=True)
    assert reason is not None
    assert NEVER in reason


def test_embedded_reason_names_the_form_and_the_ipv4_address() -> None:
    reason = refusal_reason("::ffff:127.0.0.1", allow_private=False, allow_loopback=False)
    assert reason is not None
    assert "embeds IPv4 127.0.0.1" in reason
    assert "IPv4-mapped" in reason
    reason = refusal_reason("64:ff9b::7f00:1", allow_private=False, allow_loopback=False)
    assert reason is not None
    assert "NAT64" in reason
    reason = refusal_reason("2002:7f00:1::1", allow_private=False, allow_loopback=False)
    assert reason is not None
    assert "6to4" in reason
    reason = refusal_reason(
        "2001:0:4136:e378:8000:63bf:3fff:fdd2", allow_private=False, allow_loopback=False
    )
    assert reason is not None
    assert "Teredo" in reason
    assert "192.0.2.45" in reason


@pytest.mark.parametrize(
    "text",
    [
        "example.com",
        "localhost",
        "127.1",
        "0x7f.0.0.1",
        "2130706433",
        "[::1]",
        "",
        " 8.8.8.8",
        "010.0.0.1",
        "1.2.3.4:80",
    ],
)
def test_non_ip_literals_are_refused_not_raised(text: str) -> None:
    for allow in (False, True):
        reason = refusal_reason(text, allow_private=allow, allow_loopback=allow)
        assert reason is not None
        assert "not an IP address literal" in reason


def test_vet_addresses_splits_in_order_and_dedupes() -> None:
    addresses = [
        "127.0.0.1",
        "8.8.8.8",
        "10.0.0.1",
        "8.8.8.8",
        "2606:4700:4700::1111",
        "169.254.169.254",
        "127.0.0.1",
        "resolver-junk",
    ]
    allowed, refused = vet_addresses(addresses, allow_private=True, allow_loopback=False)
    assert allowed == ["8.8.8.8", "10.0.0.1", "2606:4700:4700::1111"]
    assert [address for address, _ in refused] == ["127.0.0.1", "169.254.169.254", "resolver-junk"]
    assert "loopback" in refused[0][1]
    assert "metadata" in refused[1][1]
    assert vet_addresses([], allow_private=False, allow_loopback=False) == ([], [])


def test_vet_addresses_all_refused() -> None:
    allowed, refused = vet_addresses(["::1", "127.0.0.1"], allow_private=True, allow_loopback=False)
    assert allowed == []
    assert len(refused) == 2


_V4_ALWAYS = [
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "169.254.0.0/16",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "192.0.2.0/24",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "198.18.0.0/15",
        "192.0.0.0/24",
        "192.88.99.0/24",
        "100.100.100.200/32",
    )
]
_V4_WAIVABLE = [
    ipaddress.ip_network(n)
    for n in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
]


@settings(max_examples=examples(300), deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_ipv4_and_its_mapped_and_nat64_forms_agree(value: int) -> None:
    """Every IPv4 address is judged the same bare, IPv4-mapped, NAT64 and 6to4."""
    ipv4 = ipaddress.IPv4Address(value)
    forms = [
        str(ipv4),
        f"::ffff:{ipv4}",
        str(ipaddress.IPv6Address((0x64FF9B << 96) | value)),
        str(ipaddress.IPv6Address((0x2002 << 112) | (value << 80) | 1)),
    ]
    for allow in (False, True):
        verdicts = {
            refusal_reason(form, allow_private=allow, allow_loopback=allow) is None
            for form in forms
        }
        assert len(verdicts) == 1, forms
    bare = refusal_reason(str(ipv4), allow_private=True, allow_loopback=True)
    if any(ipv4 in net for net in _V4_ALWAYS):
        assert bare is not None
    elif any(ipv4 in net for net in _V4_WAIVABLE):
        assert bare is None
        assert refusal_reason(str(ipv4), allow_private=False, allow_loopback=False) is not None
    else:
        assert refusal_reason(str(ipv4), allow_private=False, allow_loopback=False) is None


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_ipv6_outside_global_unicast_never_passes(value: int) -> None:
    address = ipaddress.IPv6Address(value)
    reason = refusal_reason(str(address), allow_private=False, allow_loopback=False)
    if (
        address not in ipaddress.IPv6Network("2000::/3")
        and address.ipv4_mapped is None
        and address not in ipaddress.IPv6Network("64:ff9b::/96")
    ):
        assert reason is not None
