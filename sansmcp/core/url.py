"""Endpoint URLs: parse once, strictly, into what the pool and the wire need.

Theory of operation
-------------------
A caller hands us a customer-supplied URL.  :func:`parse_endpoint` accepts only
``http://`` and ``https://`` URLs with a host, and refuses -- with a
:class:`~sansmcp.core.errors.CallerError`, before any I/O -- everything that is
ambiguous or dangerous to pass on: userinfo (``user:pass@``), a fragment,
a bad port, control / format / whitespace characters anywhere, IPv6 zone ids,
numeric hosts that are not a canonical dotted quad (``127.1``, ``0x7f.1``,
``2130706433`` -- different parsers read those differently), and URLs over
8 KiB.  It is a hand-written splitter rather than :func:`urllib.parse.urlsplit`,
which silently strips characters and accepts much of the above.

The result is an :class:`Endpoint`: the :class:`Origin` the pool keys sockets
on (scheme, lower-case IDNA-encoded host or compressed IPv6, port), the
``authority`` for ``Host`` / ``:authority`` (IPv6 bracketed, default port
omitted), the request ``target`` (``/`` when empty, non-ASCII characters
percent-encoded as UTF-8, everything else verbatim), and the normalised
``url`` -- the key of the pool's era hints.

:func:`is_loopback_host` says whether a host names the local machine
(``localhost``, ``*.localhost``, 127.0.0.0/8, ``::1``, IPv4-mapped 127/8): the
one case where a bearer token may travel over plain http.  Whether a dialled
address really is loopback is the guard's job (:mod:`sansmcp.core.net.guard`); the
adapters must resolve ``localhost`` names to loopback only.
"""

from __future__ import annotations

import functools
import ipaddress
import unicodedata
from dataclasses import dataclass

from .errors import CallerError

__all__ = ["MAX_URL_BYTES", "Endpoint", "Origin", "is_loopback_host", "parse_endpoint"]

MAX_URL_BYTES = 8 * 1024
"""The longest endpoint URL accepted, in UTF-8 bytes."""

_DEFAULT_PORTS = {"http": 80, "https": 443}
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")
_HEX_DIGITS = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    """Where sockets go: the pool keeps connections per origin."""

    scheme: str
    """``"http"`` or ``"https"``."""
    host: str
    """Lower-case; IDNA-encoded ASCII for names; IPv6 compressed, without brackets."""
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """A parsed, normalised MCP endpoint URL."""

    url: str
    """Normalised (``scheme://authority/target``); the era-hint key."""
    origin: Origin
    authority: bytes
    """The ``Host`` / ``:authority`` value: brackets for IPv6, port omitted when default."""
    target: bytes
    """Path and query; ``/`` when empty."""


def parse_endpoint(url: str) -> Endpoint:
    """Parse ``url`` into an :class:`Endpoint`, or raise :class:`CallerError` saying why not.

    Results are memoised (a platform reaches the same endpoints again and again;
    an ``Endpoint`` is immutable); failures are not.
    """
    if not isinstance(url, str):
        raise CallerError(f"endpoint URL must be a str, not {type(url).__name__}")
    return _parse_endpoint(url)


@functools.lru_cache(maxsize=1024)
def _parse_endpoint(url: str) -> Endpoint:
    try:
        size = len(url.encode("utf-8"))
    except UnicodeEncodeError:
        raise CallerError("endpoint URL is not valid Unicode (lone surrogate)") from None
    if size > MAX_URL_BYTES:
        raise CallerError(f"endpoint URL is {size:,} bytes; limit is {MAX_URL_BYTES:,} bytes")
    for offset, char in enumerate(url):
        if unicodedata.category(char)[0] in "CZ":
            raise CallerError(
                f"endpoint URL contains {char!r} at offset {offset}: control, format and "
                "whitespace characters are not allowed (percent-encode them)"
            )
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in _DEFAULT_PORTS:
        raise CallerError(f"endpoint URL must start with http:// or https://, got {url[:40]!r}")
    if "#" in rest:
        raise CallerError("endpoint URL must not contain a fragment ('#...')")
    end = len(rest)
    for delimiter in "/?":
        index = rest.find(delimiter)
        if index != -1:
            end = min(end, index)
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        raise CallerError(
            "endpoint URL must not contain userinfo ('user:password@'); "
            "pass credentials as a bearer token"
        )
    host, bracketed, port = _split_authority(authority, scheme)
    origin = Origin(scheme=scheme, host=host, port=port)
    authority_text = bracketed if port == _DEFAULT_PORTS[scheme] else f"{bracketed}:{port}"
    if not tail.startswith("/"):
        tail = "/" + tail
    target = "".join(
        char if char.isascii() else "".join(f"%{b:02X}" for b in char.encode("utf-8"))
        for char in tail
    )
    return Endpoint(
        url=f"{scheme}://{authority_text}{target}",
        origin=origin,
        authority=authority_text.encode("ascii"),
        target=target.encode("ascii"),
    )


def is_loopback_host(host: str) -> bool:
    """True if ``host`` names this machine: ``localhost``, ``*.localhost``, 127/8, ``::1``.

    Accepts an :attr:`Origin.host` (or a bracketed IPv6 literal); case and one
    trailing dot are ignored.  IPv4-mapped IPv6 (``::ffff:127.0.0.1``) counts.
    """
    name = host.lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    name = name.removesuffix(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _split_authority(authority: str, scheme: str) -> tuple[str, str, int]:
    """(host, host as written in an authority, port) from ``host[:port]``."""
    if authority.startswith("["):
        close = authority.find("]")
        if close == -1:
            raise CallerError("endpoint URL has an unterminated IPv6 literal ('[' without ']')")
        host = _ipv6_host(authority[1:close])
        after = authority[close + 1 :]
        if after and not after.startswith(":"):
            raise CallerError(f"endpoint URL has {after!r} after an IPv6 literal")
        return host, f"[{host}]", _port(after[1:], scheme)
    name, _, port_text = authority.partition(":")
    host = _name_host(name)
    return host, host, _port(port_text, scheme)


def _ipv6_host(literal: str) -> str:
    if "%" in literal:
        raise CallerError("endpoint URL has an IPv6 zone id; zone ids are not supported")
    try:
        return ipaddress.IPv6Address(literal).compressed
    except ValueError:
        raise CallerError(f"endpoint URL has an invalid IPv6 literal [{literal}]") from None


def _port(text: str, scheme: str) -> int:
    if not text:
        return _DEFAULT_PORTS[scheme]
    if not (text.isascii() and text.isdigit() and len(text) <= 5) or not (0 < int(text) < 65536):
        raise CallerError(f"endpoint URL has a bad port {text[:20]!r} (want 1-65535)")
    return int(text)


def _name_host(name: str) -> str:
    if not name:
        raise CallerError("endpoint URL has no host")
    name = name.lower()
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise CallerError(
                f"endpoint URL host {name!r} is not a valid IDNA name: {exc}"
            ) from None
    bad = sorted(set(name) - _NAME_CHARS)
    if bad:
        raise CallerError(f"endpoint URL host {name!r} contains {''.join(bad)!r}")
    labels = name.removesuffix(".").split(".")
    if len(name) > 253 or any(not 0 < len(label) <= 63 for label in labels):
        raise CallerError(
            f"endpoint URL host {name[:80]!r} has an empty label or a label over 63 bytes"
            " (or is over 253 bytes)"
        )
    last = labels[-1]
    numeric = last.isdigit() or (last.startswith("0x") and set(last[2:]) <= _HEX_DIGITS)
    if numeric:
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            raise CallerError(
                f"endpoint URL host {name!r} looks numeric but is not a dotted-quad IPv4 "
                "address (write IPv4 as four decimal parts without leading zeros)"
            ) from None
    return name
