"""The dial guard's decisions and the dial failures, applied by the driver.

Theory of operation
-------------------
The driver (:mod:`sansmcp.core.driver`) has the adapter resolve a host and open
sockets; this module decides which of the
resolved addresses may be dialled and words each failure as the
``ConnectionFailed`` the caller sees.

:func:`vet` is the one door between a resolver and a socket: the system
resolver's answer and whatever an embedder's hook returns go through it alike.
It parses each answer once, has :mod:`sansmcp.core.net.guard` judge that parse, and
returns its canonical text, which the adapter dials with numeric-host semantics
(``AI_NUMERICHOST``), so no runtime can resolve the text into an address the
guard did not see.  A dial failure is tagged by the phase it happened in --
:func:`connect_error` for TCP, :func:`tls_error` for the handshake -- never by
the exception's class.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterable
from typing import cast

from ..errors import ConnectionFailed
from ..limits import Limits
from ..url import Origin, is_loopback_host
from .guard import vet_addresses

__all__ = [
    "MAX_ANSWERS",
    "connect_error",
    "dns_error",
    "hook_error",
    "literal_address",
    "reset_error",
    "timeout_error",
    "tls_error",
    "vet",
]

MAX_ANSWERS = 32  # resolver answers considered per dial; the rest are ignored (and counted)
_LITERAL_MAX = 100  # longer than any IP literal with a scope id: not parsed at all
_TEXT_SHOWN = 200  # characters of a hook's value or exception text quoted in a message


def literal_address(host: str) -> str | None:
    """``host`` normalised if it is an IP literal, else None (a name to resolve)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def vet(origin: Origin, answers: object, *, allow_private: bool, allow_loopback: bool) -> list[str]:
    """The addresses to dial for ``origin``, in order; ``ConnectionFailed`` when none may be.

    ``answers`` is what the resolver said -- the system resolver's addresses or
    whatever the embedder's ``resolver`` hook returned, any Python value, trusted
    no more than a server's bytes.  It must be an iterable (not text) of ``str``
    IP literals; its first :data:`MAX_ANSWERS` items are considered (iteration
    stops at one more, so an endless generator ends too) and the rest ignored.
    Anything else -- a non-iterable, an iterator that raises, an item that is not
    exactly a ``str`` (``bytes``, ``int``, ``None``, a ``str`` subclass), a host
    name or a non-literal such as ``127.1`` -- fails the whole answer as
    ``ConnectionFailed(cause="dns")``, the exception chained.  A scope id
    (``fe80::1%eth0``) is dropped: the guard judges and the adapter dials the
    address itself (link-local, where a scope means something, is refused whatever
    the settings).

    Each address is parsed once; the guard judges that parse and the returned
    text is exactly its ``str()``, which the adapter must dial with numeric-host
    semantics, so nothing can resolve it again into something the guard did not see.

    A loopback *name* (``localhost``, ``*.localhost``) may only reach loopback
    addresses, whatever the resolver says: the name means this machine (RFC 6761),
    and a bearer token travels over plain http to it on that promise.
    """
    addresses, ignored = _answer_addresses(origin, answers)
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
        raise ConnectionFailed(f"{origin.host} resolved to no address{ignored}", cause="dns")
    # Each reason names its address already: the host is named once more only when it
    # is a name (an IP-literal host is the one address refused).
    detail = "; ".join(reason for _, reason in refused[:4])
    more = f" and {len(refused) - 4} more refused" if len(refused) > 4 else ""
    target = "" if literal_address(origin.host) is not None else f" {origin.host}"
    raise ConnectionFailed(
        f"refusing to connect{target}: {detail}{more}{ignored}",
        cause="refused_address",
    )


def _answer_addresses(origin: Origin, answers: object) -> tuple[list[str], str]:
    """(distinct normalised addresses in order, a note on answers ignored or "")."""
    host = origin.host
    try:
        if isinstance(answers, str | bytes | bytearray | memoryview):
            raise TypeError(f"one {_describe(answers)}, not a list of address strings")
        head = list(itertools.islice(iter(cast("Iterable[object]", answers)), MAX_ANSWERS + 1))
    except Exception as exc:
        raise ConnectionFailed(
            f"the resolver's answer for {host} is unusable: {_exception_text(exc)}", cause="dns"
        ) from exc
    ignored = ""
    if len(head) > MAX_ANSWERS:
        count = None
        if type(answers) is list or type(answers) is tuple:
            count = len(answers) - MAX_ANSWERS
        ignored = (
            f" ({count if count is not None else 'some'} more answers ignored: "
            f"at most {MAX_ANSWERS} are considered)"
        )
        del head[MAX_ANSWERS:]
    addresses: dict[str, None] = {}
    for index, item in enumerate(head):
        if type(item) is not str:
            raise ConnectionFailed(
                f"the resolver's answer #{index} for {host} is {_describe(item)}, "
                f"not an IP address string{ignored}",
                cause="dns",
            )
        try:
            if len(item) > _LITERAL_MAX:
                raise ValueError("too long for an IP address literal")
            parsed = ipaddress.ip_address(item)
        except ValueError as exc:
            raise ConnectionFailed(
                f"the resolver's answer #{index} for {host} is {_describe(item)}, "
                f"not an IP address literal{ignored}",
                cause="dns",
            ) from exc
        if isinstance(parsed, ipaddress.IPv6Address) and parsed.scope_id is not None:
            parsed = ipaddress.IPv6Address(int(parsed))
        addresses.setdefault(str(parsed), None)
    return list(addresses), ignored


def _describe(value: object) -> str:
    """A short, safe description of a hook's value: its type, and the text of str/bytes."""
    if type(value) is str or type(value) is bytes:
        more = "..." if len(value) > _TEXT_SHOWN else ""
        return f"{type(value).__name__} {value[:_TEXT_SHOWN]!r}{more}"
    try:
        name = type(value).__qualname__
    except Exception:
        name = None
    return f"a {name[:_TEXT_SHOWN]}" if type(name) is str else "an object"


def _exception_text(exc: BaseException) -> str:
    """``TypeName: text`` of an exception a hook raised, bounded; never raises."""
    try:
        text = str(exc)
    except Exception:  # str() itself insists on a str result
        text = ""
    name = type(exc).__qualname__
    shown = text[:_TEXT_SHOWN] + ("..." if len(text) > _TEXT_SHOWN else "")
    return f"{name}: {shown}" if shown else name


def dns_error(origin: Origin, exc: BaseException) -> ConnectionFailed:
    """The system resolver failed (``OSError`` from ``getaddrinfo``)."""
    return ConnectionFailed(f"could not resolve {origin.host}: {exc}", cause="dns")


def hook_error(origin: Origin, exc: BaseException) -> ConnectionFailed:
    """The embedder's resolver hook raised ``exc`` (raise this ``from exc``)."""
    return ConnectionFailed(
        f"the resolver hook failed for {origin.host}: {_exception_text(exc)}", cause="dns"
    )


def connect_error(origin: Origin, address: str, exc: BaseException) -> ConnectionFailed:
    """The TCP connect to ``address`` failed: ``cause="dial"``."""
    where = f"{origin.host}:{origin.port}"
    if literal_address(origin.host) != address:
        where += f" at {address}"  # a name (or another spelling): the address that failed
    return ConnectionFailed(f"could not connect to {where}: {_exception_text(exc)}", cause="dial")


def tls_error(origin: Origin, address: str, exc: BaseException) -> ConnectionFailed:
    """The TLS handshake with ``address`` failed after TCP connected: ``cause="tls"``.

    Tagged by the phase, whatever the exception's class; the detail is the TLS
    library's own reason (``verify_message``, ``reason``) when it gives one.
    """
    reasons: list[str] = []
    for attribute in ("verify_message", "reason"):
        value = getattr(exc, attribute, None)
        if type(value) is str and value and value not in reasons:
            reasons.append(value)
    detail = ", ".join(reasons) or "the TLS library gave no reason"
    return ConnectionFailed(
        f"TLS handshake with {origin.host}:{origin.port} at {address} failed: {detail} "
        f"({_exception_text(exc)})",
        cause="tls",
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
