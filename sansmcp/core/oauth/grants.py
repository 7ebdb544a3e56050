"""The token endpoint: one token request with the client's authentication (and a DPoP
proof), its answer checked and saved; the refresh grant and the enterprise token exchange.

Theory of operation
-------------------
:func:`token_request` POSTs a grant's form with the registered authentication method
(``private_key_jwt`` as a signed assertion, ``client_secret_basic``, ``client_secret_post``,
``none``), with a DPoP proof when ``OAuth.dpop_key`` is set (once more with the nonce the
server asks for in a 400 ``use_dpop_nonce``, RFC 9449 s8).  The answer must carry a
sendable ``access_token`` (:func:`sendable_token`) of the expected ``token_type``; a
refresh token not rotated is kept, ``expires_in`` is believed up to a year.  The tokens are
saved in the store under the MCP server (the shared store's grant key, with
``Client(store=...)``).  :func:`refresh` trades a stored refresh token
(``refresh_failed`` when refused: the stored tokens are dropped; with a shared store the
fleet's single flight drives :func:`refresh_grant` instead); :func:`id_jag` trades the
user's ID token at the enterprise IdP for an ID-JAG (RFC 8693).
"""

from __future__ import annotations

import base64
from collections.abc import Generator, Mapping
from typing import Any, TypeGuard
from urllib.parse import quote, urlencode

from ..errors import AuthCause, ConnectionFailed, Unauthorized
from ..jsonvalue import JsonError, parse_json_object_strict
from ..limits import Limits
from ..url import Endpoint
from . import dpop
from .fetching import (
    FORM,
    JSON,
    Context,
    Fetch,
    Fetched,
    Flow,
    Step,
    check_url,
    document,
    unauthorized,
)
from .jose import b64url, compact_jws
from .registration import usable_registration
from .store import ClientRegistration, Tokens

__all__ = [
    "ID_JAG",
    "JWT_BEARER",
    "MAX_EXPIRES_IN",
    "id_jag",
    "jws",
    "refresh",
    "refresh_client",
    "refresh_grant",
    "sendable_token",
    "token_request",
]

MAX_EXPIRES_IN = 31_536_000  # a year: the longest a token answer's expires_in is believed
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"


def jws(ctx: Context, claims: Mapping[str, Any], typ: str = "JWT") -> str:
    """A compact JWS of ``claims``, signed by ``ctx.oauth.signer``."""
    signer = ctx.oauth.signer
    assert signer is not None
    return compact_jws(signer, {"alg": signer.alg, "typ": typ}, claims, who="the OAuth signer")


def _assertion(ctx: Context, client_id: str, audience: str) -> str:
    issued = int(ctx.wall_clock())
    claims = {
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "iat": issued,
        "exp": issued + 300,
        "jti": b64url(ctx.random_bytes(16)),
    }
    return jws(ctx, claims)


def _client_auth(
    ctx: Context, registration: ClientRegistration, form: dict[str, str], audience: str
) -> tuple[tuple[bytes, bytes], ...]:
    method, secret = registration.auth_method, registration.client_secret
    if method == "private_key_jwt":
        form["client_id"] = registration.client_id
        form["client_assertion_type"] = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        form["client_assertion"] = _assertion(ctx, registration.client_id, audience)
        return ()
    if method == "client_secret_basic" and secret is not None:
        pair = f"{quote(registration.client_id, safe='')}:{quote(secret, safe='')}"
        return ((b"authorization", b"Basic " + base64.b64encode(pair.encode())),)
    form["client_id"] = registration.client_id
    if method == "client_secret_post" and secret is not None:
        form["client_secret"] = secret
    return ()


def _asks_nonce(fetched: Fetched, limits: Limits) -> bool:
    """A token endpoint's 400 ``use_dpop_nonce`` with a usable ``DPoP-Nonce``."""
    if fetched.status != 400 or dpop.nonce_of(fetched.headers) is None:
        return False
    try:
        doc = parse_json_object_strict(fetched.body, max_depth=limits.max_json_depth)
    except JsonError:
        return False
    return doc.get("error") == "use_dpop_nonce"


def token_request(
    ctx: Context,
    endpoint: Endpoint,
    registration: ClientRegistration,
    form: dict[str, str],
    issuer: str,
    status: int,
    cause: AuthCause,
    previous: Tokens | None = None,
    *,
    save: bool = True,
) -> Generator[Step, Any, Tokens]:
    key = ctx.oauth.dpop_key
    nonce: str | None = None
    while True:  # once, or twice with a nonce the server asked for
        extra = _client_auth(ctx, registration, form, issuer)
        if key is not None:
            value = dpop.proof(
                key,
                method="POST",
                url=endpoint.url,
                wall_clock=ctx.wall_clock,
                random_bytes=ctx.random_bytes,
                nonce=nonce,
            )
            extra = (*extra, (b"dpop", value))
        fetched: Fetched = yield Fetch(
            method=b"POST",
            endpoint=endpoint,
            what="the token endpoint",
            headers=((b"content-type", FORM), (b"accept", JSON), *extra),
            body=urlencode(form).encode("ascii"),
        )
        if nonce is not None or key is None or not _asks_nonce(fetched, ctx.limits):
            break
        nonce = dpop.nonce_of(fetched.headers)  # RFC 9449 §8: one retry, with the nonce
    if fetched.status != 200:
        raise unauthorized(cause, status, f"the token endpoint answered HTTP {fetched.status}")
    doc = document(fetched, "the token answer", ctx.limits)
    access = doc.get("access_token")
    if not sendable_token(access):
        raise ConnectionFailed("the token answer has no usable access_token", cause="bad_document")
    token_type = doc.get("token_type", "Bearer")
    wanted = "dpop" if key is not None else "bearer"
    if not isinstance(token_type, str) or token_type.lower() != wanted:
        raise ConnectionFailed(
            f"the token answer's token_type {str(token_type)[:40]!r} is not "
            + ("DPoP" if key is not None else "Bearer"),
            cause="bad_document",
        )
    refresh = doc.get("refresh_token")
    if refresh is not None and not isinstance(refresh, str):
        raise ConnectionFailed(
            "the token answer's refresh_token is not a string", cause="bad_document"
        )
    if refresh is None and previous is not None:
        refresh = previous.refresh_token  # not rotated: keep it
    expires = doc.get("expires_in")
    expires_at = (
        ctx.now() + float(min(expires, MAX_EXPIRES_IN))  # a 400-digit int must not overflow
        if isinstance(expires, int | float) and not isinstance(expires, bool) and expires > 0
        else None
    )
    scope = doc.get("scope")
    tokens = Tokens(
        access_token=access,
        token_type="DPoP" if key is not None else "Bearer",
        refresh_token=refresh,
        expires_at=expires_at,
        scope=scope if isinstance(scope, str) else None,
        issuer=issuer,
        token_endpoint=endpoint.url,
    )
    if not save:
        return tokens
    if ctx.shared is not None:
        yield from ctx.shared.save_tokens(ctx, tokens)
    else:
        ctx.oauth.store.save_tokens(ctx.resource_key, tokens)
    return tokens


def sendable_token(value: object) -> TypeGuard[str]:
    """An access token that can go into an ``Authorization`` header as it is: a non-empty
    string of visible ASCII (no space, no control character)."""
    return isinstance(value, str) and bool(value) and all(0x20 < ord(c) < 0x7F for c in value)


def id_jag(
    ctx: Context, id_token: str, audience: str, resource: str | None, status: int
) -> Generator[Fetch, Any, str]:
    """RFC 8693 at the enterprise IdP: the user's ID token -> an ID-JAG for ``audience``."""
    endpoint = check_url(ctx.oauth.idp_token_endpoint, "OAuth.idp_token_endpoint")
    form = {
        "grant_type": TOKEN_EXCHANGE,
        "requested_token_type": ID_JAG,
        "subject_token": id_token,
        "subject_token_type": ID_TOKEN,
        "audience": audience,
        "resource": resource or ctx.endpoint.url,
    }
    if ctx.oauth.idp_client_id is not None:
        form["client_id"] = ctx.oauth.idp_client_id
    fetched: Fetched = yield Fetch(
        method=b"POST",
        endpoint=endpoint,
        what="the identity provider's token endpoint",
        headers=((b"content-type", FORM), (b"accept", JSON)),
        body=urlencode(form).encode("ascii"),
    )
    if fetched.status != 200:
        raise unauthorized(
            "token_failed", status, f"the identity provider answered HTTP {fetched.status}"
        )
    doc = document(fetched, "the token exchange answer", ctx.limits)
    jag = doc.get("access_token")
    if not isinstance(jag, str) or not jag or doc.get("issued_token_type") != ID_JAG:
        raise ConnectionFailed("the token exchange answer has no ID-JAG", cause="bad_document")
    return jag


def refresh_client(ctx: Context, tokens: Tokens, stored: object) -> ClientRegistration | None:
    """Who refreshes ``tokens``: the ``stored`` registration for their issuer when usable,
    else the pre-registered client (only at its own issuer), else None."""
    registration = usable_registration(stored, ctx.oauth.signer)
    if registration is not None:
        return registration
    oauth = ctx.oauth
    if oauth.client_id is None or oauth.issuer not in (None, tokens.issuer):
        return None  # OAuth.client_secret goes to its own issuer only (as in register)
    return ClientRegistration(
        client_id=oauth.client_id,
        client_secret=oauth.client_secret,
        auth_method="client_secret_basic" if oauth.client_secret else "none",
    )


def no_client(tokens: Tokens, status: int) -> Unauthorized:
    return unauthorized(
        "refresh_failed", status, f"no client registration for {tokens.issuer!r:.200}"
    )


def refresh_grant(
    ctx: Context, tokens: Tokens, registration: ClientRegistration, status: int
) -> Generator[Step, Any, Tokens]:
    """The refresh grant at ``tokens``' token endpoint, as ``registration``: the new
    tokens, not saved (``refresh_failed`` when refused)."""
    assert tokens.refresh_token is not None
    endpoint = check_url(tokens.token_endpoint, "the stored token endpoint")
    form = {"grant_type": "refresh_token", "refresh_token": tokens.refresh_token}
    return (
        yield from token_request(
            ctx,
            endpoint,
            registration,
            form,
            tokens.issuer,
            status,
            "refresh_failed",
            tokens,
            save=False,
        )
    )


def refresh(ctx: Context, tokens: Tokens, status: int) -> Flow:
    """Trade ``tokens.refresh_token`` for new tokens kept in the embedder's
    ``OAuth.store`` (``refresh_failed`` when refused: the stored tokens are dropped)."""
    check_url(tokens.token_endpoint, "the stored token endpoint")
    store = ctx.oauth.store
    registration = refresh_client(ctx, tokens, store.registration(tokens.issuer))
    if registration is None:
        store.save_tokens(ctx.resource_key, None)  # next time: authorize afresh
        raise no_client(tokens, status)
    try:
        fresh = yield from refresh_grant(ctx, tokens, registration, status)
    except Unauthorized:
        store.save_tokens(ctx.resource_key, None)  # next time: authorize afresh
        raise
    store.save_tokens(ctx.resource_key, fresh)
    return fresh
