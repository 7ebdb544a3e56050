"""The dial guard's decisions and the dial failures, shared by every adapter.

The adapter resolves a host and opens sockets; this module decides which of the
resolved addresses may be dialled (through :mod:`sansmcp.core.guard`'s pure
predicate, so a DNS answer cannot slip a refused address past the check: the
adapter connects to the vetted address itself) and words each failure as the
``ConnectionFailed`` the caller sees.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from .errors import ConnectionFailed
from .guard import vet_addresses
from .limits import Limits
from .url import Origin, is_loopback_host

__all__ = [
    "connect_error",
    "dns_error",
    "literal_address",
    "reset_error",
    "timeout_error",
    "unique_addresses",
    "vet",
]


def literal_address(host: str) -> str | None:
    """``host`` normalised if it is an IP literal, else None (a name to resolve)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def unique_addresses(addresses: Iterable[str]) -> list[str]:
    """Resolver answers in order, duplicates and IPv6 scope ids dropped."""
    seen: dict[str, None] = {}
    for address in addresses:
        seen.setdefault(address.split("%", 1)[0], None)
    return list(seen)


def vet(
    origin: Origin, addresses: list[str], *, allow_private: bool, allow_loopback: bool
) -> list[str]:
    """The addresses that may be dialled, in order; ``ConnectionFailed`` when none may.

    A loopback *name* (``localhost``, ``*.localhost``) may only reach loopback
    addresses, whatever the resolver says: the name means this machine (RFC 6761),
    and a bearer token travels over plain http to it on that promise.
    """
    allowed, refused = vet_addresses(
        addresses, allow_private=allow_private, allow_loopback=allow_loopback
    )
    if literal_address(origin.host) is None and is_loopback_host(origin.host):
        refused += [
            (address, f"{address} is not loopback, yet {origin.host} is a loopback name")
            for address in allowed
            if not is_loopback_host(address)
        ]
        allowed = [address for address in allowed if is_loopback_host(address)]
    if allowed:
        return allowed
    if not refused:
        raise ConnectionFailed(f"{origin.host} resolved to no address", cause="dns")
    detail = "; ".join(f"{address} ({reason})" for address, reason in refused[:4])
    raise ConnectionFailed(
        f"refusing to connect to {origin.host}: {detail}", cause="refused_address"
    )


def dns_error(origin: Origin, exc: BaseException) -> ConnectionFailed:
    return ConnectionFailed(f"could not resolve {origin.host}: {exc}", cause="dns")


def connect_error(origin: Origin, exc: BaseException | None) -> ConnectionFailed:
    name = type(exc).__name__ if exc is not None else "no address"
    cause = "tls" if "SSL" in name or "Certificate" in name else "dial"
    return ConnectionFailed(
        f"could not connect to {origin.host}:{origin.port}: {exc or name}", cause=cause
    )


def timeout_error(limits: Limits) -> ConnectionFailed:
    return ConnectionFailed(
        f"could not connect within {limits.dial_timeout:g} s (Limits.dial_timeout)",
        cause="timeout",
        bound="dial_timeout",
        limit=limits.dial_timeout,
    )


def reset_error() -> ConnectionFailed:
    return ConnectionFailed("the connection closed mid-response", cause="reset")
