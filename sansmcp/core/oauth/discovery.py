"""Where the authorization server is: protected resource metadata (RFC 9728), then the
authorization server's metadata (RFC 8414, OpenID Connect discovery).

Theory of operation
-------------------
:func:`discover_prm` fetches the protected resource metadata from the challenge's
``resource_metadata`` URL, else the path-based, then the root well-known location (the
first 200 wins; another status tries the next).  :func:`discover_server` checks that its
``resource`` names this server (same origin, a path prefix: :func:`resource_matches`),
then fetches the metadata of its first authorization server by RFC 8414 path insertion and
the OpenID Connect variants; the ``issuer`` must be the one the URL was built from, exactly,
and every endpoint it names must pass :func:`~.fetching.check_url`.  Without PRM
(2025-03-26) the MCP server's origin is the authorization server, with ``/authorize``,
``/token``, ``/register`` as the fallbacks.  The result is a :class:`Server`.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import CallerError
from ..url import Endpoint, parse_endpoint
from .fetching import Context, Fetch, check_url, fetch_json, json_get, str_list, unauthorized

__all__ = ["Server", "discover_prm", "discover_server", "resource_matches"]


def _with_path(endpoint: Endpoint, path: str) -> Endpoint:
    origin = endpoint.origin
    return parse_endpoint(f"{origin.scheme}://{endpoint.authority.decode()}{path}")


def _path(endpoint: Endpoint) -> str:
    path = endpoint.target.decode("ascii").split("?", 1)[0]
    return "" if path == "/" else path.rstrip("/")


@dataclass(slots=True, kw_only=True)
class Server:
    issuer: str
    metadata: dict[str, Any]
    authorization_endpoint: Endpoint
    token_endpoint: Endpoint
    registration_endpoint: Endpoint | None


def resource_matches(resource: str, endpoint: Endpoint) -> bool:
    try:
        named = parse_endpoint(resource)
    except CallerError:
        return False
    if named.origin != endpoint.origin:
        return False
    prefix, path = _path(named), _path(endpoint)
    return path == prefix or path.startswith(prefix + "/")


def discover_prm(
    ctx: Context, params: Mapping[str, str]
) -> Generator[Fetch, Any, dict[str, Any] | None]:
    candidates: list[Endpoint] = []
    named = params.get("resource_metadata")
    if named:
        candidates.append(check_url(named, "the resource_metadata URL"))
    else:
        path = _path(ctx.endpoint)
        if path:
            candidates.append(
                _with_path(ctx.endpoint, "/.well-known/oauth-protected-resource" + path)
            )
        candidates.append(_with_path(ctx.endpoint, "/.well-known/oauth-protected-resource"))
    for candidate in candidates:
        doc = yield from fetch_json(json_get(candidate, "protected resource metadata"), ctx.limits)
        if doc is not None:
            return doc
    return None


def _as_candidates(issuer: Endpoint) -> list[Endpoint]:
    path = _path(issuer)
    if path:
        return [
            _with_path(issuer, "/.well-known/oauth-authorization-server" + path),
            _with_path(issuer, "/.well-known/openid-configuration" + path),
            _with_path(issuer, path + "/.well-known/openid-configuration"),
        ]
    return [
        _with_path(issuer, "/.well-known/oauth-authorization-server"),
        _with_path(issuer, "/.well-known/openid-configuration"),
    ]


def _server_from(issuer: str, doc: dict[str, Any], status: int) -> Server:
    if doc.get("issuer") != issuer:
        raise unauthorized(
            "issuer_mismatch",
            status,
            f"the authorization server metadata names issuer {str(doc.get('issuer'))[:200]!r},"
            f" not {issuer!r}; none of its endpoints are used",
        )
    registration = doc.get("registration_endpoint")
    return Server(
        issuer=issuer,
        metadata=doc,
        authorization_endpoint=check_url(
            doc.get("authorization_endpoint"), "the authorization_endpoint"
        ),
        token_endpoint=check_url(doc.get("token_endpoint"), "the token_endpoint"),
        registration_endpoint=(
            None if registration is None else check_url(registration, "the registration_endpoint")
        ),
    )


def discover_server(
    ctx: Context, prm: dict[str, Any] | None, status: int
) -> Generator[Fetch, Any, tuple[Server, str | None]]:
    """The authorization server, and the resource to name (None: no PRM)."""
    if prm is None:  # 2025-03-26: the MCP server's origin is the authorization server
        root = _with_path(ctx.endpoint, "/")
        issuer = root.url.rstrip("/")
        doc = yield from fetch_json(
            json_get(
                _with_path(root, "/.well-known/oauth-authorization-server"),
                "authorization server metadata",
            ),
            ctx.limits,
        )
        if doc is not None:
            return _server_from(issuer, doc, status), None
        return (
            Server(
                issuer=issuer,
                metadata={},
                authorization_endpoint=_with_path(root, "/authorize"),
                token_endpoint=_with_path(root, "/token"),
                registration_endpoint=_with_path(root, "/register"),
            ),
            None,
        )
    resource = prm.get("resource")
    if not isinstance(resource, str) or not resource_matches(resource, ctx.endpoint):
        raise unauthorized(
            "resource_mismatch",
            status,
            f"the protected resource metadata names resource {str(resource)[:200]!r}, "
            f"not this server ({ctx.endpoint.url})",
        )
    servers = str_list(prm, "authorization_servers")
    if not servers:
        raise unauthorized(
            "discovery_failed",
            status,
            "the protected resource metadata names no authorization server",
        )
    issuer = servers[0]
    issuer_endpoint = check_url(issuer, "the authorization server")
    for candidate in _as_candidates(issuer_endpoint):
        doc = yield from fetch_json(
            json_get(candidate, "authorization server metadata"), ctx.limits
        )
        if doc is not None:
            return _server_from(issuer, doc, status), resource
    raise unauthorized(
        "discovery_failed", status, f"no authorization server metadata found for {issuer!r}"
    )
