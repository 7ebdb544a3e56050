"""The dial guard's pure predicate: may we connect to this IP address?

Theory of operation
-------------------
The adapters resolve a host, pass *every* address to :func:`vet_addresses`,
and connect only to an address it allowed (TLS still verifies the hostname), so
a DNS rebind between check and connect cannot happen.  This module only
judges IP literals; it never resolves.

By default only globally routable unicast addresses pass.  Each address is
matched against an ordered table of ranges (first match wins); every range has
a *waiver*: none (refused whatever the settings), ``allow_loopback`` or
``allow_private``.

=============================  =========================================  ===============
kind                           ranges                                     waiver
=============================  =========================================  ===============
cloud metadata                 169.254.169.254, 100.100.100.200,          none
                               fd00:ec2::254
link-local                     169.254/16, fe80::/10                      none
unspecified / "this network"   0/8, ``::``                                none
loopback                       127/8, ``::1``                             allow_loopback
private                        10/8, 172.16/12, 192.168/16, fc00::/7,     allow_private
                               fec0::/10 (site-local)
shared (CGNAT)                 100.64/10                                  allow_private
broadcast                      255.255.255.255                            none
multicast                      224/4, ff00::/8                            none
documentation                  192.0.2/24, 198.51.100/24, 203.0.113/24,   none
                               2001:db8::/32, 3fff::/20
benchmarking                   198.18/15, 2001:2::/48                     none
reserved                       240/4, 192.0.0/24, 192.88.99/24,           none
                               2001::/23, everything outside 2000::/3
=============================  =========================================  ===============

IPv6 addresses that embed an IPv4 address a translator or tunnel may reach are
also judged by that IPv4 address, through one table (``_EMBEDDINGS``):

=================================  ==========================  ===================
form                               IPv4 taken from             the IPv6 ranges
=================================  ==========================  ===================
IPv4-mapped ``::ffff:0:0/96``      the last 32 bits            replaced
NAT64 ``64:ff9b::/96`` (RFC 6052)  the last 32 bits            replaced
local-use NAT64 ``64:ff9b:1::/48`` every RFC 6052 position:    replaced; the form
(RFC 8215)                         /48, /56, /64, /96 (the     itself needs
                                   u octet, bits 64..71,       ``allow_private``
                                   skipped whatever it holds)
6to4 ``2002::/16``                 bits 16..47                 replaced
Teredo ``2001::/32``               the server (bits 32..63)    replaced
                                   and the client (the last
                                   32 bits, XOR'd)
ISATAP (RFC 5214), any prefix      interface id ``0:5efe``     still judge the
                                   or ``200:5efe``: the last   prefix
                                   32 bits
=================================  ==========================  ===================

The verdict: refused whatever the settings if any judged address is; otherwise
admitted when every setting that any of them (or the form) needs is set.  So
``::ffff:127.0.0.1`` is loopback, ``::ffff:169.254.169.254`` is metadata, and
``64:ff9b:1::a9fe:a9fe`` is refused outright (its /48 reading is 0.0.0.0).
IPv4-compatible ``::a.b.c.d`` (deprecated by RFC 4291) and SIIT
``::ffff:0:a.b.c.d`` are not decoded: they lie outside global unicast and are
refused whatever the settings.

Rules are explicit networks, not :mod:`ipaddress`'s ``is_private`` /
``is_global`` flags, whose definitions changed between Python releases.

Anything that is not an IP literal (a host name, ``127.1``, a bracketed
``[::1]``) is refused with a reason rather than raising: the predicate fails
closed.  (Resolver answers never get that far as junk: :func:`sansmcp.core.net.dial.vet`
accepts only ``str`` IP literals and hands this module their canonical text.)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["refusal_reason", "vet_addresses"]

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class _Rule:
    network: _Network
    kind: str
    waiver: str | None  # "allow_loopback", "allow_private", or None: refused whatever the settings


def _rules(waiver: str | None, kind: str, *networks: str) -> list[_Rule]:
    return [_Rule(ipaddress.ip_network(net), kind, waiver) for net in networks]


_METADATA = "a cloud metadata address"
_V4_RULES: tuple[_Rule, ...] = (
    *_rules(None, _METADATA, "169.254.169.254/32", "100.100.100.200/32"),
    *_rules(None, "link-local", "169.254.0.0/16"),
    *_rules(None, "unspecified ('this network')", "0.0.0.0/8"),
    *_rules("allow_loopback", "loopback", "127.0.0.0/8"),
    *_rules("allow_private", "private (RFC 1918)", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
    *_rules("allow_private", "shared address space (RFC 6598)", "100.64.0.0/10"),
    *_rules(None, "broadcast", "255.255.255.255/32"),
    *_rules(None, "multicast", "224.0.0.0/4"),
    *_rules(None, "documentation", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"),
    *_rules(None, "benchmarking", "198.18.0.0/15"),
    *_rules(None, "reserved", "240.0.0.0/4", "192.0.0.0/24", "192.88.99.0/24"),
)
_V6_RULES: tuple[_Rule, ...] = (
    *_rules(None, _METADATA, "fd00:ec2::254/128"),
    *_rules(None, "link-local", "fe80::/10"),
    *_rules(None, "unspecified", "::/128"),
    *_rules("allow_loopback", "loopback", "::1/128"),
    *_rules("allow_private", "unique local (fc00::/7)", "fc00::/7"),
    *_rules("allow_private", "site-local (deprecated)", "fec0::/10"),
    *_rules(None, "multicast", "ff00::/8"),
    *_rules(None, "documentation", "2001:db8::/32", "3fff::/20"),
    *_rules(None, "benchmarking", "2001:2::/48"),
    *_rules(None, "reserved (IETF protocol assignments)", "2001::/23"),
)
_OUTSIDE_GLOBAL_UNICAST = _Rule(
    ipaddress.IPv6Network("2000::/3"), "reserved, outside global unicast", None
)
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")


def _bits(value: int, start: int, length: int) -> int:
    """Bits ``start .. start+length-1`` of a 128-bit value, bit 0 the most significant."""
    return (value >> (128 - start - length)) & ((1 << length) - 1)


def _rfc6052(value: int, prefix: int) -> ipaddress.IPv4Address:
    """The IPv4 address RFC 6052 places after a /``prefix`` (bits 64..71, the "u" octet, skipped).

    The u octet is skipped whatever it holds: a translator that ignores it must not
    reach an address the guard did not judge.
    """
    if prefix == 96:
        return ipaddress.IPv4Address(_bits(value, 96, 32))
    if prefix == 64:
        return ipaddress.IPv4Address(_bits(value, 72, 32))
    head = 64 - prefix  # 16 bits before the u octet for /48, 8 for /56
    tail = 32 - head
    return ipaddress.IPv4Address((_bits(value, prefix, head) << tail) | _bits(value, 72, tail))


def _mapped(value: int) -> tuple[ipaddress.IPv4Address, ...]:
    return (ipaddress.IPv4Address(value & 0xFFFFFFFF),)


def _local_nat64(value: int) -> tuple[ipaddress.IPv4Address, ...]:
    return tuple(_rfc6052(value, prefix) for prefix in (48, 56, 64, 96))


def _sixtofour(value: int) -> tuple[ipaddress.IPv4Address, ...]:
    return (ipaddress.IPv4Address(_bits(value, 16, 32)),)


def _teredo(value: int) -> tuple[ipaddress.IPv4Address, ...]:
    server = ipaddress.IPv4Address(_bits(value, 32, 32))
    client = ipaddress.IPv4Address(_bits(value, 96, 32) ^ 0xFFFFFFFF)  # stored XOR'd
    return (server, client)


def _is_isatap(address: ipaddress.IPv6Address) -> bool:
    # interface id 0000:5efe or 0200:5efe (RFC 5214), the u and g bits either way
    return (_bits(int(address), 64, 32) & 0xFCFFFFFF) == 0x00005EFE


@dataclass(frozen=True, slots=True)
class _Embedding:
    """An IPv6 form that carries IPv4 address(es) a translator or tunnel may reach."""

    name: str
    applies: Callable[[ipaddress.IPv6Address], bool]
    decode: Callable[[int], tuple[ipaddress.IPv4Address, ...]]
    waiver: str | None  # a setting the form itself needs, on top of what its IPv4 needs
    replaces_outer: bool  # True: the IPv6 ranges do not judge it (its IPv4 does, alone)


def _within(network: str) -> Callable[[ipaddress.IPv6Address], bool]:
    net = ipaddress.IPv6Network(network)
    return lambda address: address in net


_EMBEDDINGS: tuple[_Embedding, ...] = (
    _Embedding("IPv4-mapped ::ffff:0:0/96", _within("::ffff:0:0/96"), _mapped, None, True),
    _Embedding("NAT64 64:ff9b::/96", _within("64:ff9b::/96"), _mapped, None, True),
    _Embedding(
        "local-use NAT64 64:ff9b:1::/48, at /48, /56, /64 and /96",
        _within("64:ff9b:1::/48"),
        _local_nat64,
        "allow_private",
        True,
    ),
    _Embedding("6to4 2002::/16", _within("2002::/16"), _sixtofour, None, True),
    _Embedding("Teredo 2001::/32, server and client", _within("2001::/32"), _teredo, None, True),
    _Embedding("ISATAP interface id 0:5efe, RFC 5214", _is_isatap, _mapped, None, False),
)


def refusal_reason(address: str, *, allow_private: bool, allow_loopback: bool) -> str | None:
    """Why ``address`` (an IP literal) must not be dialled, or None if it may be.

    Never raises: a string that is not an IPv4 or IPv6 literal is refused with
    a reason.  The reason names the address, its kind and range, and which
    setting (if any) would admit it.
    """
    try:
        parsed: _Address = ipaddress.ip_address(address)
    except ValueError:
        return (
            f"{address!r} is not an IP address literal (the guard judges resolved addresses only)"
        )
    return _judge(parsed, address, allow_private=allow_private, allow_loopback=allow_loopback)


def vet_addresses(
    addresses: Sequence[str], *, allow_private: bool, allow_loopback: bool
) -> tuple[list[str], list[tuple[str, str]]]:
    """Split resolved addresses into (allowed, in order; [(refused, reason)], in order).

    Duplicates (a resolver lists one address per socket type) appear once.
    """
    allowed: list[str] = []
    refused: list[tuple[str, str]] = []
    seen: set[str] = set()
    for address in addresses:
        if address in seen:
            continue
        seen.add(address)
        reason = refusal_reason(address, allow_private=allow_private, allow_loopback=allow_loopback)
        if reason is None:
            allowed.append(address)
        else:
            refused.append((address, reason))
    return allowed, refused


def _judge(
    address: _Address, text: str, *, allow_private: bool, allow_loopback: bool
) -> str | None:
    # (what is refused, the setting that admits it or None: refused whatever the settings)
    findings: list[tuple[str, str | None]] = []
    judge_outer = True
    if isinstance(address, ipaddress.IPv6Address):
        for form in _EMBEDDINGS:
            if not form.applies(address):
                continue
            judge_outer = judge_outer and not form.replaces_outer
            if form.waiver is not None:
                findings.append((f"{text} is {form.name}", form.waiver))
            for ipv4 in form.decode(int(address)):
                rule = _match(ipv4)
                if rule is not None:
                    what = f"{text} embeds IPv4 {ipv4} ({form.name}) and {ipv4} is {rule.kind}"
                    findings.append((f"{what} ({rule.network})", rule.waiver))
    if judge_outer:
        rule = _match(address)
        if rule is not None:
            findings.insert(0, (f"{text} is {rule.kind} ({rule.network})", rule.waiver))
    for what, waiver in findings:
        if waiver is None:
            return f"{what}, refused whatever the settings"
    granted = {"allow_private": allow_private, "allow_loopback": allow_loopback}
    for what, waiver in findings:
        assert waiver is not None
        if not granted[waiver]:
            flag = "--" + waiver.replace("_", "-")
            return f"{what}, refused unless {waiver}=True (CLI: {flag})"
    return None


def _match(address: _Address) -> _Rule | None:
    """The first rule ``address`` falls in, ignoring embedded IPv4; None: globally routable."""
    rules = _V6_RULES if isinstance(address, ipaddress.IPv6Address) else _V4_RULES
    for rule in rules:
        if address in rule.network:
            return rule
    if isinstance(address, ipaddress.IPv6Address) and address not in _GLOBAL_UNICAST_V6:
        return _OUTSIDE_GLOBAL_UNICAST
    return None
