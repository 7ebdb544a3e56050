"""Egress policy: where one work item may connect, and who vets the destination.

Theory of operation
-------------------
The Client's guard (``allow_private``, ``allow_loopback``) is the default; a
``Config`` may carry an :class:`Egress` that widens it for one work item -- a
self-hosted tenant's ``allow_private``, or only some ``allowed_networks`` /
``allowed_hosts`` -- or narrows it to ``only_hosts``.  :func:`egress_policy` checks
it (``CallerError``) into a :class:`Policy`, which :func:`vet_target` and
:func:`check_target` apply.  Whatever the policy, what the guard refuses whatever the
settings stays refused: cloud metadata, link-local, unspecified, multicast,
documentation and reserved ranges (:mod:`sansmcp.core.net.guard`).

With a proxy, :data:`GuardMode` says who vets the destination:

* ``"local"`` (the default): sansmcp resolves the target and vets every address as
  for a direct dial, then asks the proxy to ``CONNECT`` to the vetted address, so a
  DNS rebind at the proxy cannot happen (TLS still verifies the host name);
* ``"proxy"``: the proxy resolves and enforces (``CONNECT host:port``); sansmcp still
  applies ``only_hosts`` and refuses an IP-literal target the guard refuses whatever
  the settings.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..errors import CallerError, ConnectionFailed
from ..url import Origin, parse_endpoint
from . import dial as dialing
from .guard import refusal_reason
from .tunnel import Proxy, parse_proxy

__all__ = ["GUARD_MODES", "Egress", "GuardMode", "Policy", "Route", "RoutedOrigin"]
__all__ += ["check_target", "default_route", "egress_policy", "guard_mode", "route", "routed"]
__all__ += ["vet_target"]

GuardMode = Literal["local", "proxy"]
GUARD_MODES: tuple[GuardMode, ...] = ("local", "proxy")
_MAX_ENTRIES = 1_000  # networks or hosts in one Egress
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True, kw_only=True)
class Egress:
    """One work item's egress policy, on top of the Client's guard.

    ``allow_private`` (None: the Client's) admits private and shared addresses;
    ``allowed_networks`` (CIDR strings) admit the addresses in them that a setting could
    admit (loopback, private, shared); ``allowed_hosts`` admit the private addresses
    of those host names; ``only_hosts`` (None: no narrowing) is the list of host
    names (``*.example.com`` for a domain's subdomains) the work item may reach at all.
    Metadata, link-local and the other ranges refused whatever the settings stay refused.
    """

    allow_private: bool | None = None
    allowed_networks: Sequence[str] = ()
    allowed_hosts: Sequence[str] = ()
    only_hosts: Sequence[str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """A checked egress policy (see :class:`Egress`); hashable."""

    allow_private: bool = False
    allow_loopback: bool = False
    networks: tuple[_Network, ...] = ()
    hosts: frozenset[str] = frozenset()
    only_hosts: frozenset[str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """How one work item's sockets go out: through ``proxy`` (None: direct) with the
    guard ``mode``, under ``policy``.  Equal routes share pooled sockets."""

    proxy: Proxy | None
    guard: GuardMode
    policy: Policy


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutedOrigin(Origin):
    """An origin reached by a :class:`Route`: the pool's key, so a socket dialled for one
    route (a proxy, a credential, a policy) never serves another."""

    route: Route


def routed(origin: Origin, route: Route) -> Origin:
    """``origin`` as reached by ``route`` (the pool keys sockets by both)."""
    return RoutedOrigin(scheme=origin.scheme, host=origin.host, port=origin.port, route=route)


def guard_mode(value: object, where: str) -> GuardMode:
    """``value`` as a :data:`GuardMode`, else ``CallerError`` naming ``where`` it came from."""
    for mode in GUARD_MODES:
        if value == mode and type(value) is str:
            return mode
    raise CallerError(f"{where} must be 'local' or 'proxy', not {value!r:.40}")


def default_route(
    proxy: object, guard: object, *, allow_private: bool, allow_loopback: bool
) -> Route:
    """The Client's route (``Client(proxy=, guard=)`` checked), the default of each work item."""
    return Route(
        proxy=None if proxy is None else _proxy(proxy),
        guard="local" if guard is None else guard_mode(guard, "Client guard"),
        policy=Policy(allow_private=allow_private, allow_loopback=allow_loopback),
    )


def route(proxy: object, guard: object, egress: object, *, default: Route) -> Route | None:
    """A work item's route: ``proxy`` (a URL; None: ``default.proxy``), ``guard`` (None:
    ``default.guard``) and ``egress`` (None: ``default.policy``) checked; None when it is
    a plain direct dial under the default policy (the driver's fast path)."""
    if proxy is None and guard is None and egress is None:
        return None if default.proxy is None else default
    via = default.proxy if proxy is None else _proxy(proxy)
    mode = default.guard if guard is None else guard_mode(guard, "Config.guard")
    if egress is None:
        policy = default.policy
    else:
        base = default.policy
        policy = egress_policy(
            egress, allow_private=base.allow_private, allow_loopback=base.allow_loopback
        )
    if via is None and policy == default.policy:
        return None
    return Route(proxy=via, guard=mode, policy=policy)


def _proxy(url: object) -> Proxy:
    return parse_proxy(url)


def egress_policy(egress: object, *, allow_private: bool, allow_loopback: bool) -> Policy:
    """The policy of a work item: the Client's guard, with ``egress`` (or None) applied."""
    if egress is None:
        return Policy(allow_private=allow_private, allow_loopback=allow_loopback)
    if not isinstance(egress, Egress):
        raise CallerError(f"Config.egress must be an Egress, not {type(egress).__name__}")
    if egress.allow_private is not None and not isinstance(egress.allow_private, bool):
        raise CallerError("Egress.allow_private must be a bool or None")
    networks = tuple(_network(item) for item in _entries("allowed_networks", egress))
    hosts = frozenset(_host(item, "allowed_hosts") for item in _entries("allowed_hosts", egress))
    only = None
    if egress.only_hosts is not None:
        only = frozenset(_host(item, "only_hosts") for item in _entries("only_hosts", egress))
    return Policy(
        allow_private=allow_private if egress.allow_private is None else egress.allow_private,
        allow_loopback=allow_loopback,
        networks=networks,
        hosts=hosts,
        only_hosts=only,
    )


def _entries(name: str, egress: Egress) -> list[str]:
    value = getattr(egress, name)
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise CallerError(f"Egress.{name} must be a list of str")
    if len(value) > _MAX_ENTRIES:
        raise CallerError(f"Egress.{name} has {len(value):,} entries; at most {_MAX_ENTRIES:,}")
    for item in value:
        if not isinstance(item, str):
            raise CallerError(f"Egress.{name} must be a list of str, not of {type(item).__name__}")
    return list(value)


def _network(text: str) -> _Network:
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise CallerError(f"Egress.allowed_networks: {text[:100]!r} is not a CIDR: {exc}") from None


def _host(text: str, name: str) -> str:
    """A host name as ``Origin.host`` spells it (``*.`` kept in front of a domain)."""
    wildcard = name == "only_hosts" and text.startswith("*.")
    bare = text[2:] if wildcard else text
    if not bare or any(char in bare for char in "/?#@:[]"):
        raise CallerError(f"Egress.{name}: {text[:100]!r} is not a host name")
    try:
        host = parse_endpoint(f"http://{bare}/").origin.host
    except CallerError as exc:
        raise CallerError(f"Egress.{name}: {text[:100]!r} is not a host name ({exc})") from None
    host = host.removesuffix(".")
    return "*." + host if wildcard else host


def _named(host: str, names: frozenset[str]) -> bool:
    """``host`` is one of ``names`` (``*.domain`` matches every name under the domain)."""
    host = host.removesuffix(".")
    if host in names:
        return True
    labels = host.split(".")
    return any("*." + ".".join(labels[i:]) in names for i in range(1, len(labels)))


def check_target(policy: Policy, mode: GuardMode, origin: Origin) -> None:
    """What is decided before any resolve: ``only_hosts``, and -- with ``mode="proxy"``
    -- an IP-literal target the guard refuses whatever the settings.  Raises
    ``ConnectionFailed(cause="refused_address")``."""
    if policy.only_hosts is not None and not _named(origin.host, policy.only_hosts):
        raise ConnectionFailed(
            f"refusing to connect to {origin.host}: not in this work item's Egress.only_hosts",
            cause="refused_address",
        )
    literal = dialing.literal_address(origin.host)
    if mode == "proxy" and literal is not None:
        reason = refusal_reason(literal, allow_private=True, allow_loopback=True)
        if reason is not None:
            raise ConnectionFailed(f"refusing to connect: {reason}", cause="refused_address")


def vet_target(policy: Policy, origin: Origin, answers: object) -> list[str]:
    """The addresses ``origin`` may be dialled at under ``policy``, in order (the guard
    mode ``"local"``, or a direct dial): :func:`sansmcp.core.net.dial.vet` with the
    policy's settings, plus the addresses of ``allowed_networks`` that a setting could
    admit.  ``ConnectionFailed`` as ``vet`` raises it when none may be dialled."""
    wide = policy.allow_private or _named(origin.host, policy.hosts)
    strict = {"allow_private": wide, "allow_loopback": policy.allow_loopback}
    if not policy.networks:
        return dialing.vet(origin, answers, **strict)
    # one reading of the answer (it may be a generator): what any setting could admit
    admissible = dialing.vet(origin, answers, allow_private=True, allow_loopback=True)
    reasons: list[str] = []
    kept: list[str] = []
    for address in admissible:
        reason = refusal_reason(address, **strict)
        if reason is None or any(ipaddress.ip_address(address) in net for net in policy.networks):
            kept.append(address)
        else:
            reasons.append(reason)
    if kept:
        return kept
    more = f" and {len(reasons) - 4} more refused" if len(reasons) > 4 else ""
    target = "" if dialing.literal_address(origin.host) is not None else f" {origin.host}"
    raise ConnectionFailed(
        f"refusing to connect{target}: {'; '.join(reasons[:4])}{more} "
        "(and not in Egress.allowed_networks)",
        cause="refused_address",
    )
