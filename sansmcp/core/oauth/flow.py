"""One OAuth 2.1 authorization as a generator script: discovery, registration, PKCE, tokens.

(Over ~600 lines on purpose: one script whose steps -- discovery, registration, the
authorization code, refresh and the machine grants -- share the same few helpers for
fetching, checking and refusing; splitting them would scatter one reading order over
modules that import each other.)

Theory of operation
-------------------
:func:`authorize` is a generator.  It yields a :class:`Fetch` (one HTTP request to
an absolute URL, which the machine sends through the driver, the pool and the dial
guard, never following a redirect) and is resumed with the :class:`Fetched`
answer, or has the ``ConnectionFailed`` thrown in; it yields an :class:`AskUser`
(the authorization URL a person must visit) and is resumed with the embedder's
answer.  It returns the :class:`~.store.Tokens` or raises ``Unauthorized`` (a flow
that cannot finish, with its ``cause``) or ``ConnectionFailed`` (an authorization
server that cannot be reached or answers unusable documents).

The steps, in the order of the MCP authorization spec (2025-11-25 and 2026-07-28):

1. a stored refresh token is tried first (a 401 for a token we hold);
2. protected resource metadata (RFC 9728): the ``resource_metadata`` URL of the
   challenge, else the path-based, then the root well-known location; its
   ``resource`` must name this server (same origin, a path prefix);
3. authorization server metadata (RFC 8414 path insertion, then the OpenID Connect
   variants); the ``issuer`` must be the one the URL was built from, exactly.  Without
   PRM (2025-03-26) the server's origin is the authorization server, with
   ``/authorize``, ``/token``, ``/register`` as the fallbacks;
4. the client's identity: pre-registered, a client ID metadata document URL, the
   stored registration for this issuer, else dynamic registration (RFC 7591);
5. the authorization request (PKCE S256, ``state``, RFC 8707 ``resource`` exactly as
   published, the scope) and the person's redirect (``state``; RFC 9207 ``iss``
   compared as strings);
6. the token request with the registered authentication method.

Without an authorization step the authorization is left pending in the store, keyed by
its ``state`` and bound to the ``Config`` that began it (:func:`binding_of`); :func:`complete`
takes it once, and only for a ``Config`` with the same binding, before any request.

Randomness comes in as ``random_bytes`` (the adapter's ``secrets.token_bytes``).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from ..errors import AuthCause, CallerError, ConnectionFailed, Unauthorized
from ..http import Headers, header_value
from ..jsonvalue import JsonError, dumps_compact, parse_json_object_strict
from ..limits import Limits
from ..url import Endpoint, is_loopback_host, parse_endpoint
from . import dpop
from .jose import b64url, compact_jws
from .store import TAKEN, Binding, ClientRegistration, OAuth, PendingAuthorization, Tokens

__all__ = [
    "AskUser",
    "Context",
    "Fetch",
    "Fetched",
    "Flow",
    "authorize",
    "binding_of",
    "check_url",
    "complete",
]

MAX_EXPIRES_IN = 31_536_000  # a year: the longest a token answer's expires_in is believed
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
FORM = b"application/x-www-form-urlencoded"
JSON = b"application/json"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetch:
    method: bytes
    endpoint: Endpoint
    what: str  # for messages: "protected resource metadata", "the token endpoint", ...
    headers: Headers = ()
    body: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetched:
    status: int
    headers: Headers
    body: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class AskUser:
    url: str


Flow = Generator["Fetch | AskUser", Any, Tokens]


@dataclass(slots=True, kw_only=True)
class Context:
    """What one Conn's authorizations share."""

    oauth: OAuth
    endpoint: Endpoint  # the MCP server
    limits: Limits
    random_bytes: Callable[[int], bytes]
    now: Callable[[], float]
    wall_clock: Callable[[], float] = lambda: 0.0  # seconds since the epoch (JWT claims)
    granted_scopes: tuple[str, ...] = ()  # asked for by earlier authorizations (step-up)

    @property
    def resource_key(self) -> str:
        return self.endpoint.url


def check_url(text: object, what: str) -> Endpoint:
    """A URL a server named: absolute, https (or http to loopback); else ``bad_document``."""
    if not isinstance(text, str) or not text:
        raise ConnectionFailed(f"{what}: not a URL string", cause="bad_document")
    try:
        endpoint = parse_endpoint(text)
    except CallerError as exc:
        raise ConnectionFailed(f"{what}: unusable URL ({exc})", cause="bad_document") from None
    origin = endpoint.origin
    if origin.scheme != "https" and not is_loopback_host(origin.host):
        raise ConnectionFailed(
            f"{what}: {text[:200]!r} is not https (only loopback may use http)",
            cause="bad_document",
        )
    return endpoint


def _unauthorized(cause: AuthCause, status: int, message: str, **extra: Any) -> Unauthorized:
    return Unauthorized(message, status=status, cause=cause, **extra)


def _document(fetched: Fetched, what: str, limits: Limits) -> dict[str, Any]:
    try:
        return parse_json_object_strict(fetched.body, max_depth=limits.max_json_depth)
    except JsonError as exc:
        raise ConnectionFailed(f"{what}: not a JSON object ({exc})", cause="bad_document") from None


def _fetch_json(fetch: Fetch, limits: Limits) -> Generator[Fetch, Any, dict[str, Any] | None]:
    """GET a metadata document: the object on 200, None on 4xx/5xx (try the next one)."""
    fetched: Fetched = yield fetch
    if fetched.status != 200:
        return None
    return _document(fetched, fetch.what, limits)


def _get(endpoint: Endpoint, what: str) -> Fetch:
    return Fetch(method=b"GET", endpoint=endpoint, what=what, headers=((b"accept", JSON),))


def _with_path(endpoint: Endpoint, path: str) -> Endpoint:
    origin = endpoint.origin
    return parse_endpoint(f"{origin.scheme}://{endpoint.authority.decode()}{path}")


def _path(endpoint: Endpoint) -> str:
    path = endpoint.target.decode("ascii").split("?", 1)[0]
    return "" if path == "/" else path.rstrip("/")


def _bearer(challenges: list[tuple[str, dict[str, str]]]) -> dict[str, str]:
    for scheme, params in challenges:
        if scheme in ("bearer", "dpop"):
            return params
    return {}


def _str_list(doc: Mapping[str, Any], key: str) -> list[str]:
    value = doc.get(key)
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, str)]


@dataclass(slots=True, kw_only=True)
class _Server:
    issuer: str
    metadata: dict[str, Any]
    authorization_endpoint: Endpoint
    token_endpoint: Endpoint
    registration_endpoint: Endpoint | None


def _resource_matches(resource: str, endpoint: Endpoint) -> bool:
    try:
        named = parse_endpoint(resource)
    except CallerError:
        return False
    if named.origin != endpoint.origin:
        return False
    prefix, path = _path(named), _path(endpoint)
    return path == prefix or path.startswith(prefix + "/")


def _discover_prm(
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
        doc = yield from _fetch_json(_get(candidate, "protected resource metadata"), ctx.limits)
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


def _server_from(issuer: str, doc: dict[str, Any], status: int) -> _Server:
    if doc.get("issuer") != issuer:
        raise _unauthorized(
            "issuer_mismatch",
            status,
            f"the authorization server metadata names issuer {str(doc.get('issuer'))[:200]!r},"
            f" not {issuer!r}; none of its endpoints are used",
        )
    registration = doc.get("registration_endpoint")
    return _Server(
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


def _discover_server(
    ctx: Context, prm: dict[str, Any] | None, status: int
) -> Generator[Fetch, Any, tuple[_Server, str | None]]:
    """The authorization server, and the resource to name (None: no PRM)."""
    if prm is None:  # 2025-03-26: the MCP server's origin is the authorization server
        root = _with_path(ctx.endpoint, "/")
        issuer = root.url.rstrip("/")
        doc = yield from _fetch_json(
            _get(
                _with_path(root, "/.well-known/oauth-authorization-server"),
                "authorization server metadata",
            ),
            ctx.limits,
        )
        if doc is not None:
            return _server_from(issuer, doc, status), None
        return (
            _Server(
                issuer=issuer,
                metadata={},
                authorization_endpoint=_with_path(root, "/authorize"),
                token_endpoint=_with_path(root, "/token"),
                registration_endpoint=_with_path(root, "/register"),
            ),
            None,
        )
    resource = prm.get("resource")
    if not isinstance(resource, str) or not _resource_matches(resource, ctx.endpoint):
        raise _unauthorized(
            "resource_mismatch",
            status,
            f"the protected resource metadata names resource {str(resource)[:200]!r}, "
            f"not this server ({ctx.endpoint.url})",
        )
    servers = _str_list(prm, "authorization_servers")
    if not servers:
        raise _unauthorized(
            "discovery_failed",
            status,
            "the protected resource metadata names no authorization server",
        )
    issuer = servers[0]
    issuer_endpoint = check_url(issuer, "the authorization server")
    for candidate in _as_candidates(issuer_endpoint):
        doc = yield from _fetch_json(_get(candidate, "authorization server metadata"), ctx.limits)
        if doc is not None:
            return _server_from(issuer, doc, status), resource
    raise _unauthorized(
        "discovery_failed", status, f"no authorization server metadata found for {issuer!r}"
    )


def _choose_method(server: _Server, has_secret: bool, signer: object = None) -> str:
    supported = _str_list(server.metadata, "token_endpoint_auth_methods_supported")
    if signer is not None and (not supported or "private_key_jwt" in supported):
        return "private_key_jwt"
    if not has_secret:
        return "none"
    if not supported or "client_secret_basic" in supported:
        return "client_secret_basic"
    if "client_secret_post" in supported:
        return "client_secret_post"
    return "client_secret_basic"


AUTH_METHODS = frozenset({"none", "client_secret_basic", "client_secret_post", "private_key_jwt"})


def usable_registration(value: object, signer: object) -> ClientRegistration | None:
    """A registration the embedder's token store returned, if it can be used: a non-empty
    str ``client_id``, a str or None ``client_secret``, a known ``auth_method`` (and
    ``private_key_jwt`` only with a signer).  Anything else is ignored, as absent (the
    store's contract): the client registers again."""
    if not isinstance(value, ClientRegistration):
        return None
    if not isinstance(value.client_id, str) or not value.client_id:
        return None
    secret, method = value.client_secret, value.auth_method
    if secret is not None and not isinstance(secret, str):
        return None
    if not isinstance(method, str) or method not in AUTH_METHODS:
        return None
    if method == "private_key_jwt" and signer is None:
        return None
    return value


def _register(
    ctx: Context, server: _Server, status: int
) -> Generator[Fetch, Any, ClientRegistration]:
    oauth = ctx.oauth
    if oauth.client_id is not None and oauth.issuer in (None, server.issuer):
        secret = oauth.client_secret
        return ClientRegistration(
            client_id=oauth.client_id,
            client_secret=secret,
            auth_method=_choose_method(server, secret is not None, oauth.signer),
        )
    if (
        oauth.client_metadata_url is not None
        and server.metadata.get("client_id_metadata_document_supported") is True
    ):
        return ClientRegistration(client_id=oauth.client_metadata_url)
    stored = usable_registration(oauth.store.registration(server.issuer), oauth.signer)
    if stored is not None:
        return stored
    if server.registration_endpoint is None:
        raise _unauthorized(
            "registration_failed",
            status,
            f"{server.issuer!r} offers no dynamic registration and no client id is configured",
        )
    supported = _str_list(server.metadata, "token_endpoint_auth_methods_supported")
    method = "none" if not supported or "none" in supported else supported[0]
    body = {
        "client_name": oauth.client_name,
        "redirect_uris": [oauth.redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
        "application_type": "native",
    }
    fetched: Fetched = yield Fetch(
        method=b"POST",
        endpoint=server.registration_endpoint,
        what="the registration endpoint",
        headers=((b"content-type", JSON), (b"accept", JSON)),
        body=dumps_compact(body),
    )
    if fetched.status not in (200, 201):
        raise _unauthorized(
            "registration_failed",
            status,
            f"the registration endpoint answered HTTP {fetched.status}",
        )
    doc = _document(fetched, "the registration answer", ctx.limits)
    client_id = doc.get("client_id")
    secret = doc.get("client_secret")
    if not isinstance(client_id, str) or not client_id:
        raise ConnectionFailed("the registration answer has no client_id", cause="bad_document")
    if secret is not None and not isinstance(secret, str):
        raise ConnectionFailed(
            "the registration answer's client_secret is not a string", cause="bad_document"
        )
    answered = doc.get("token_endpoint_auth_method")
    if isinstance(answered, str) and answered in (
        "none",
        "client_secret_basic",
        "client_secret_post",
    ):
        method = answered
    elif secret is not None:
        method = _choose_method(server, True)
    else:
        method = "none"
    registration = ClientRegistration(client_id=client_id, client_secret=secret, auth_method=method)
    oauth.store.save_registration(server.issuer, registration)
    return registration


def _scope(
    ctx: Context, params: Mapping[str, str], prm: dict[str, Any] | None, server: _Server
) -> str | None:
    wanted: list[str] = []
    challenge = params.get("scope")
    if challenge:
        wanted = challenge.split()
    elif prm is not None and _str_list(prm, "scopes_supported"):
        wanted = _str_list(prm, "scopes_supported")
    elif ctx.oauth.scope:
        wanted = ctx.oauth.scope.split()
    for earlier in ctx.granted_scopes:
        if earlier not in wanted:
            wanted.append(earlier)
    if (
        wanted
        and "offline_access" in _str_list(server.metadata, "scopes_supported")
        and "offline_access" not in wanted
    ):
        wanted.append("offline_access")
    ctx.granted_scopes = tuple(s for s in wanted if s != "offline_access")
    return " ".join(wanted) or None


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


def _token_request(
    ctx: Context,
    endpoint: Endpoint,
    registration: ClientRegistration,
    form: dict[str, str],
    issuer: str,
    status: int,
    cause: AuthCause,
    previous: Tokens | None = None,
) -> Generator[Fetch, Any, Tokens]:
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
        raise _unauthorized(cause, status, f"the token endpoint answered HTTP {fetched.status}")
    doc = _document(fetched, "the token answer", ctx.limits)
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
    ctx.oauth.store.save_tokens(ctx.resource_key, tokens)
    return tokens


TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"


def _id_jag(
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
        raise _unauthorized(
            "token_failed", status, f"the identity provider answered HTTP {fetched.status}"
        )
    doc = _document(fetched, "the token exchange answer", ctx.limits)
    jag = doc.get("access_token")
    if not isinstance(jag, str) or not jag or doc.get("issued_token_type") != ID_JAG:
        raise ConnectionFailed("the token exchange answer has no ID-JAG", cause="bad_document")
    return jag


def refresh(ctx: Context, tokens: Tokens, status: int) -> Flow:
    """Trade ``tokens.refresh_token`` for new tokens (``refresh_failed`` when refused)."""
    assert tokens.refresh_token is not None
    endpoint = check_url(tokens.token_endpoint, "the stored token endpoint")
    registration = usable_registration(
        ctx.oauth.store.registration(tokens.issuer), ctx.oauth.signer
    )
    if registration is None:
        oauth = ctx.oauth
        if oauth.client_id is None or oauth.issuer not in (None, tokens.issuer):
            # OAuth.client_secret goes to its own issuer only (as in _register)
            ctx.oauth.store.save_tokens(ctx.resource_key, None)  # next time: authorize afresh
            raise _unauthorized(
                "refresh_failed", status, f"no client registration for {tokens.issuer!r:.200}"
            )
        registration = ClientRegistration(
            client_id=oauth.client_id,
            client_secret=oauth.client_secret,
            auth_method="client_secret_basic" if oauth.client_secret else "none",
        )
    form = {"grant_type": "refresh_token", "refresh_token": tokens.refresh_token}
    try:
        return (
            yield from _token_request(
                ctx, endpoint, registration, form, tokens.issuer, status, "refresh_failed", tokens
            )
        )
    except Unauthorized:
        ctx.oauth.store.save_tokens(ctx.resource_key, None)  # next time: authorize afresh
        raise


def _redirect_params(answer: object) -> dict[str, str]:
    if isinstance(answer, str):
        query = urlsplit(answer).query
        return {key: values[0] for key, values in parse_qs(query).items()}
    if isinstance(answer, Mapping):
        out: dict[str, str] = {}
        for key in ("code", "state", "iss", "error", "error_description"):
            value = answer.get(key)
            if value is not None:
                if not isinstance(value, str):
                    raise CallerError(f"the authorization step's {key!r} must be a str")
                out[key] = value
        return out
    raise CallerError(
        "the authorization step must return the redirect URL (str), a mapping of "
        f"code / state / iss, or None; got {type(answer).__name__}"
    )


def sendable_token(value: object) -> TypeGuard[str]:
    """An access token that can go into an ``Authorization`` header as it is: a non-empty
    string of visible ASCII (no space, no control character)."""
    return isinstance(value, str) and bool(value) and all(0x20 < ord(c) < 0x7F for c in value)


def authorize(ctx: Context, error: Unauthorized) -> Flow:
    """Authorize after ``error`` (the MCP server's 401 or 403); see the module docstring."""
    status = error.status
    params = _bearer(error.challenges)
    stored = ctx.oauth.store.tokens(ctx.resource_key)
    if (
        status == 401
        and isinstance(stored, Tokens)
        and isinstance(stored.refresh_token, str)
        and params.get("error") != "insufficient_scope"
    ):
        return (yield from refresh(ctx, stored, status))
    prm = yield from _discover_prm(ctx, params)
    server, resource = yield from _discover_server(ctx, prm, status)
    registration = yield from _register(ctx, server, status)
    scope = _scope(ctx, params, prm, server)
    if ctx.oauth.grant != "authorization_code":
        if ctx.oauth.grant in ("jwt_bearer", "enterprise"):
            assertion = ctx.oauth.assertion
            if not isinstance(assertion, str) or not assertion:
                raise CallerError(f"OAuth(grant={ctx.oauth.grant!r}) needs the assertion (a JWT)")
            if ctx.oauth.grant == "enterprise":
                assertion = yield from _id_jag(ctx, assertion, server.issuer, resource, status)
            form = {"grant_type": JWT_BEARER, "assertion": assertion}
        else:
            form = {"grant_type": "client_credentials"}
        if scope is not None:
            form["scope"] = scope
        if resource is not None:
            form["resource"] = resource
        return (
            yield from _token_request(
                ctx,
                server.token_endpoint,
                registration,
                form,
                server.issuer,
                status,
                "token_failed",
            )
        )
    verifier = b64url(ctx.random_bytes(32))
    challenge = b64url(hashlib.sha256(verifier.encode("ascii")).digest())
    state = b64url(ctx.random_bytes(16))
    query = {
        "response_type": "code",
        "client_id": registration.client_id,
        "redirect_uri": ctx.oauth.redirect_uri,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": state,
    }
    if scope is not None:
        query["scope"] = scope
    if resource is not None:
        query["resource"] = resource
    base = server.authorization_endpoint.url
    url = base + ("&" if "?" in base else "?") + urlencode(query)
    pending = PendingAuthorization(
        state=state,
        verifier=verifier,
        issuer=server.issuer,
        iss_required=server.metadata.get("authorization_response_iss_parameter_supported") is True,
        token_endpoint=server.token_endpoint.url,
        resource=resource,
        registration=registration,
        redirect_uri=ctx.oauth.redirect_uri,
        bound=binding_of(ctx),
    )
    answer = yield AskUser(url=url)
    if answer is None:
        keep = getattr(ctx.oauth.store, "save_pending", None)
        if callable(keep):
            keep(pending)
        raise _unauthorized(
            "authorization_required",
            status,
            "a person must authorize this client at authorization_url",
            authorization_url=url,
        )
    return (yield from _redeem(ctx, pending, _redirect_params(answer), status))


def binding_of(ctx: Context) -> Binding:
    """What binds an authorization begun (or completed) with ``ctx``: its ``Config``'s
    server and client identity (see :class:`~.store.Binding`)."""
    oauth = ctx.oauth
    secret = oauth.client_secret
    return Binding(
        url=ctx.endpoint.url,
        issuer=oauth.issuer,
        client_id=oauth.client_id,
        client_secret_sha256=(
            None
            if secret is None
            else hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
        ),
        client_metadata_url=oauth.client_metadata_url,
        redirect_uri=oauth.redirect_uri,
    )


_BOUND = (
    ("url", "Config.url"),
    ("issuer", "OAuth.issuer"),
    ("client_id", "OAuth.client_id"),
    ("client_secret_sha256", "OAuth.client_secret"),
    ("client_metadata_url", "OAuth.client_metadata_url"),
    ("redirect_uri", "OAuth.redirect_uri"),
)


def _show(value: str | None) -> str:
    return repr(value if value is None else value[:200])


def _differences(began: Binding, completing: Binding) -> list[str]:
    """What ``completing`` says otherwise than ``began`` (a secret is named, never shown)."""
    out: list[str] = []
    for name, what in _BOUND:
        was, now = getattr(began, name), getattr(completing, name)
        if was == now:
            continue
        if name == "client_secret_sha256":
            out.append(f"{what} is not the one it was begun with")
        else:
            out.append(f"{what} is {_show(now)}, not {_show(was)}")
    return out


def _opt_str(value: object) -> bool:
    return value is None or isinstance(value, str)


def usable_pending(value: PendingAuthorization, signer: object) -> bool:
    """A pending authorization the embedder's store returned, if every field has its type
    and its registration is usable."""
    bound = value.bound
    return (
        all(
            isinstance(text, str)
            for text in (value.state, value.verifier, value.issuer, value.token_endpoint)
        )
        and isinstance(value.redirect_uri, str)
        and isinstance(value.iss_required, bool)
        and usable_registration(value.registration, signer) is not None
        and _opt_str(value.resource)
        and isinstance(bound, Binding)
        and isinstance(bound.url, str)
        and isinstance(bound.redirect_uri, str)
        and all(
            _opt_str(getattr(bound, name))
            for name in ("issuer", "client_id", "client_secret_sha256", "client_metadata_url")
        )
    )


def complete(ctx: Context, redirect: object) -> Flow:
    """Finish an authorization a person made later: ``redirect`` is what they came back
    with; the pending authorization is found by its ``state``, taken once, and completed
    only with the ``Config`` that began it (else ``CallerError``, nothing sent, and it is
    put back for its own ``Config``)."""
    got = _redirect_params(redirect)
    store = ctx.oauth.store
    take = getattr(store, "take_pending", None)
    pending = take(got.get("state", "")) if callable(take) else None
    if pending is TAKEN:
        raise CallerError(
            "the authorization of this redirect's state was completed already: a pending "
            "authorization is completed once (nothing was sent)"
        )
    if not isinstance(pending, PendingAuthorization):
        raise _unauthorized(
            "state_mismatch", 401, "no pending authorization has the redirect's state"
        )
    if not usable_pending(pending, ctx.oauth.signer):
        raise CallerError(
            "the token store returned a pending authorization that cannot be used "
            "(nothing was sent)"
        )
    differ = _differences(pending.bound, binding_of(ctx))
    if differ:
        keep = getattr(store, "save_pending", None)
        if callable(keep):
            keep(pending)  # its own Config may still complete it
        raise CallerError(
            "this redirect's authorization was begun with another Config: "
            + "; ".join(differ)
            + ". Nothing was sent; complete it with the Config that began it"
        )
    if pending.resource is not None and not _resource_matches(pending.resource, ctx.endpoint):
        raise CallerError(  # only a store can say so: this Config's discovery named it
            f"the token store's pending authorization names resource {pending.resource[:200]!r},"
            f" not this server ({ctx.endpoint.url}); nothing was sent"
        )
    return (yield from _redeem(ctx, pending, got, 401))


def _redeem(ctx: Context, pending: PendingAuthorization, got: dict[str, str], status: int) -> Flow:
    """Check the redirect's parameters (RFC 9207 ``iss``, ``state``) and trade the code."""
    if "error" in got:
        raise _unauthorized(
            "authorization_denied",
            status,
            f"the authorization server answered error {got['error'][:100]!r}",
        )
    if got.get("state") != pending.state:
        raise _unauthorized("state_mismatch", status, "the redirect's state is not the one sent")
    iss = got.get("iss")
    if iss is not None and iss != pending.issuer:
        raise _unauthorized(
            "iss_mismatch", status, f"the redirect's iss {iss[:200]!r} is not {pending.issuer!r}"
        )
    if iss is None and pending.iss_required:
        raise _unauthorized(
            "iss_mismatch", status, "the authorization server advertises iss, the redirect has none"
        )
    code = got.get("code")
    if not code:
        raise _unauthorized("authorization_denied", status, "the redirect carries no code")
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": pending.redirect_uri,
        "code_verifier": pending.verifier,
    }
    if pending.resource is not None:
        form["resource"] = pending.resource
    endpoint = check_url(pending.token_endpoint, "the token endpoint")
    return (
        yield from _token_request(
            ctx, endpoint, pending.registration, form, pending.issuer, status, "token_failed"
        )
    )


def location_of(headers: Headers) -> str | None:
    raw = header_value(headers, b"location")
    return raw.decode("latin-1")[:512] if raw is not None else None
