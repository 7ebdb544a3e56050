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
                               fec0::/10 (site-local), 64:ff9b:1::/48
shared (CGNAT)                 100.64/10                                  allow_private
broadcast                      255.255.255.255                            none
multicast                      224/4, ff00::/8                            none
documentation                  192.0.2/24, 198.51.100/24, 203.0.113/24,   none
                               2001:db8::/32, 3fff::/20
benchmarking                   198.18/15, 2001:2::/48                     none
reserved                       240/4, 192.0.0/24, 192.88.99/24,           none
                               2001::/23, everything outside 2000::/3
=============================  =========================================  ===============

IPv6 addresses that embed an IPv4 address -- IPv4-mapped ``::ffff:a.b.c.d``,
NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo ``2001::/32`` (server and
client) -- are judged by the embedded IPv4 address(es) instead, so
``::ffff:127.0.0.1`` is loopback and ``::ffff:169.254.169.254`` is metadata.

Rules are explicit networks, not :mod:`ipaddress`'s ``is_private`` /
``is_global`` flags, whose definitions changed between Python releases.

Anything that is not an IP literal (a host name, ``127.1``, a bracketed
``[::1]``) is refused with a reason rather than raising: the predicate fails
closed, and a resolver hook handing back junk ends as a named refusal.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
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
    *_rules("allow_private", "local-use NAT64", "64:ff9b:1::/48"),
    *_rules(None, "multicast", "ff00::/8"),
    *_rules(None, "documentation", "2001:db8::/32", "3fff::/20"),
    *_rules(None, "benchmarking", "2001:2::/48"),
    *_rules(None, "reserved (IETF protocol assignments)", "2001::/23"),
)
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


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
    return _judge(parsed, str(address), allow_private=allow_private, allow_loopback=allow_loopback)


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
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            form, inner = embedded
            for ipv4 in inner:
                reason = _judge(
                    ipv4, str(ipv4), allow_private=allow_private, allow_loopback=allow_loopback
                )
                if reason is not None:
                    return f"{text} embeds IPv4 {ipv4} ({form}) and {reason}"
            return None
        rules = _V6_RULES
    else:
        rules = _V4_RULES
    waived = {"allow_private": allow_private, "allow_loopback": allow_loopback}
    for rule in rules:
        if address in rule.network:
            if rule.waiver is None:
                return f"{text} is {rule.kind} ({rule.network}), refused whatever the settings"
            if waived[rule.waiver]:
                return None
            flag = "--" + rule.waiver.replace("_", "-")
            return (
                f"{text} is {rule.kind} ({rule.network}), refused unless "
                f"{rule.waiver}=True (CLI: {flag})"
            )
    if isinstance(address, ipaddress.IPv6Address) and address not in _GLOBAL_UNICAST_V6:
        return f"{text} is reserved (outside global unicast {_GLOBAL_UNICAST_V6}), refused whatever the settings"
    return None


def _embedded_ipv4(
    address: ipaddress.IPv6Address,
) -> tuple[str, tuple[ipaddress.IPv4Address, ...]] | None:
    """The IPv4 address(es) an IPv6 address carries, with the form's name, or None."""
    if address.ipv4_mapped is not None:
        return "IPv4-mapped ::ffff:0:0/96", (address.ipv4_mapped,)
    if address in _NAT64:
        return "NAT64 64:ff9b::/96", (ipaddress.IPv4Address(int(address) & 0xFFFFFFFF),)
    if address.sixtofour is not None:
        return "6to4 2002::/16", (address.sixtofour,)
    if address.teredo is not None:
        server, client = address.teredo
        return "Teredo 2001::/32, server and client", (server, client)
    return None
