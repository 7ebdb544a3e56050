"""Hostile OAuth: an MCP server that demands a bearer token and an authorization server
(the same loopback origin) that lies, bloats, stalls, redirects or points elsewhere.

:func:`oauth_h1` builds the server: ``/mcp`` answers as a correct 2026-07-28 server
once the request carries a token it issued (else 401 with ``resource_metadata``);
``/.well-known/oauth-protected-resource/mcp``, ``/.well-known/oauth-authorization-server``,
``/authorize`` (redirects straight back), ``/register`` and ``/token`` behave unless a
bend replaces one.  The client (``client_host``) runs with ``Config.oauth`` whose
authorization step GETs the authorization URL and hands back its ``Location``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from .answers import Answer, Request, json_answer, well_behaved
from .server_h1 import H1Reply, H1Server

Bend = Callable[[Request, H1Reply, dict[str, Any]], Awaitable[bool]]  # True: answered


def _json(value: Any, status: int = 200) -> Answer:
    return Answer(status, [("content-type", "application/json")], json.dumps(value).encode())


def oauth_h1(
    *,
    prm: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    redirect: Mapping[str, str] | None = None,
    bends: Mapping[str, Bend] | None = None,
    forbid: bool = False,
) -> Callable[[], H1Server]:
    """The server; ``prm`` / ``metadata`` / ``redirect`` override document members (a
    value ``"{base}..."`` is formatted with the server's own base URL), ``bends`` replace
    a path's answer, ``forbid`` answers every token with 403 ``insufficient_scope``."""

    def make() -> H1Server:
        state: dict[str, Any] = {"issued": set()}

        def fill(value: Any, base: str) -> Any:
            return value.format(base=base) if isinstance(value, str) else value

        async def handler(request: Request, reply: H1Reply) -> None:
            base = f"http://{request.headers.get('host', '')}"
            path = urlsplit(request.target).path
            bend = (bends or {}).get(path)
            if bend is not None and await bend(request, reply, state):
                return
            if path == "/.well-known/oauth-protected-resource/mcp":
                doc = {"resource": f"{base}/mcp", "authorization_servers": [base]}
                doc.update({k: fill(v, base) for k, v in (prm or {}).items()})
                await reply.answer(_json(doc))
            elif path == "/.well-known/oauth-authorization-server":
                doc = {
                    "issuer": base,
                    "authorization_endpoint": f"{base}/authorize",
                    "token_endpoint": f"{base}/token",
                    "registration_endpoint": f"{base}/register",
                    "code_challenge_methods_supported": ["S256"],
                    "authorization_response_iss_parameter_supported": True,
                }
                doc.update({k: fill(v, base) for k, v in (metadata or {}).items()})
                await reply.answer(_json(doc))
            elif path == "/authorize":
                query = {k: v[0] for k, v in parse_qs(urlsplit(request.target).query).items()}
                back = {"code": "code-1", "state": query.get("state", ""), "iss": base}
                back.update({k: fill(v, base) for k, v in (redirect or {}).items()})
                location = f"{query.get('redirect_uri', base)}?{urlencode(back)}"
                await reply.answer(Answer(302, [("location", location)], b""))
            elif path == "/register":
                await reply.answer(_json({"client_id": "hostile-client"}, 201))
            elif path == "/token":
                token = f"tok-{len(state['issued']) + 1}"
                state["issued"].add(token)
                await reply.answer(
                    _json({"access_token": token, "token_type": "Bearer", "expires_in": 60})
                )
            else:
                auth = request.headers.get("authorization", "")
                token = auth[7:] if auth.startswith("Bearer ") else None
                if token not in state["issued"]:
                    challenge = f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
                    await reply.answer(Answer(401, [("www-authenticate", challenge)], b""))
                elif forbid:
                    challenge = 'Bearer error="insufficient_scope", scope="never"'
                    await reply.answer(Answer(403, [("www-authenticate", challenge)], b""))
                else:
                    await reply.answer(well_behaved(request))

        return H1Server(handler)

    return make


def oversized(size: int) -> Bend:
    async def bend(request: Request, reply: H1Reply, state: dict[str, Any]) -> bool:
        await reply.answer(json_answer({"issuer": "x", "pad": "a" * size}))
        return True

    return bend


async def stall(request: Request, reply: H1Reply, state: dict[str, Any]) -> bool:
    await reply.hang()
    return True  # pragma: no cover - hangs until the server stops


def redirect_to(location: str) -> Bend:
    async def bend(request: Request, reply: H1Reply, state: dict[str, Any]) -> bool:
        await reply.answer(Answer(302, [("location", location)], b""))
        return True

    return bend
