"""One OAuth 2.1 authorization as a generator script: the order of its steps, PKCE and the
authorization code, and the completion of a pending authorization.

The script is read here, in order; its steps live beside it, each over the shared
vocabulary of :mod:`.fetching` (what a flow yields, the context, fetching, checking,
refusing): :mod:`.discovery` (where the authorization server is), :mod:`.registration`
(the client's identity), :mod:`.grants` (the token endpoint, refresh, the machine grants'
token exchange).  No step imports the script.

Theory of operation
-------------------
:func:`authorize` is a generator.  It yields a :class:`~.fetching.Fetch` (one HTTP
request to an absolute URL, which the machine sends through the driver, the pool and the
dial guard, never following a redirect) and is resumed with the
:class:`~.fetching.Fetched` answer, or has the ``ConnectionFailed`` thrown in; it yields
an :class:`~.fetching.AskUser`
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

With a shared store (``Context.shared``) tokens, registrations and pending
authorizations are the fleet's: read and written through it (store steps the flow
yields), the refresh single-flight across the fleet, and a 401 for a token other than
the one stored first uses the stored one (another worker refreshed already).

Randomness comes in as ``random_bytes`` (the adapter's ``secrets.token_bytes``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from ..errors import CallerError, ConnectionFailed, Unauthorized
from .discovery import Server, discover_prm, discover_server, resource_matches
from .fetching import (
    AskUser,
    Context,
    Fetch,
    Fetched,
    Flow,
    Steps,
    check_url,
    str_list,
    unauthorized,
)
from .grants import JWT_BEARER, id_jag, refresh, token_request
from .jose import b64url
from .registration import register, usable_registration
from .store import TAKEN, Binding, PendingAuthorization, Tokens

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


def _bearer(challenges: list[tuple[str, dict[str, str]]]) -> dict[str, str]:
    for scheme, params in challenges:
        if scheme in ("bearer", "dpop"):
            return params
    return {}


def _scope(
    ctx: Context, params: Mapping[str, str], prm: dict[str, Any] | None, server: Server
) -> str | None:
    wanted: list[str] = []
    challenge = params.get("scope")
    if challenge:
        wanted = challenge.split()
    elif prm is not None and str_list(prm, "scopes_supported"):
        wanted = str_list(prm, "scopes_supported")
    elif ctx.oauth.scope:
        wanted = ctx.oauth.scope.split()
    for earlier in ctx.granted_scopes:
        if earlier not in wanted:
            wanted.append(earlier)
    if (
        wanted
        and "offline_access" in str_list(server.metadata, "scopes_supported")
        and "offline_access" not in wanted
    ):
        wanted.append("offline_access")
    ctx.granted_scopes = tuple(s for s in wanted if s != "offline_access")
    return " ".join(wanted) or None


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


def authorize(ctx: Context, error: Unauthorized) -> Flow:
    """Authorize after ``error`` (the MCP server's 401 or 403); see the module docstring."""
    status = error.status
    params = _bearer(error.challenges)
    shared = ctx.shared
    refusal = status == 401 and params.get("error") != "insufficient_scope"
    if shared is None:
        stored = ctx.oauth.store.tokens(ctx.resource_key)
    else:
        stored = yield from shared.tokens(ctx)
        if refusal and stored is not None and stored.access_token != ctx.sent:
            return stored  # another worker refreshed (or authorized): no refresh here
    if refusal and isinstance(stored, Tokens) and isinstance(stored.refresh_token, str):
        if shared is not None:
            return (yield from shared.refresh(ctx, stored, status))
        return (yield from refresh(ctx, stored, status))
    prm = yield from discover_prm(ctx, params)
    server, resource = yield from discover_server(ctx, prm, status)
    registration = yield from register(ctx, server, status)
    scope = _scope(ctx, params, prm, server)
    if ctx.oauth.grant != "authorization_code":
        if ctx.oauth.grant in ("jwt_bearer", "enterprise"):
            assertion = ctx.oauth.assertion
            if not isinstance(assertion, str) or not assertion:
                raise CallerError(f"OAuth(grant={ctx.oauth.grant!r}) needs the assertion (a JWT)")
            if ctx.oauth.grant == "enterprise":
                assertion = yield from id_jag(ctx, assertion, server.issuer, resource, status)
            form = {"grant_type": JWT_BEARER, "assertion": assertion}
        else:
            form = {"grant_type": "client_credentials"}
        if scope is not None:
            form["scope"] = scope
        if resource is not None:
            form["resource"] = resource
        return (
            yield from token_request(
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
        yield from _keep(ctx, pending)
        raise unauthorized(
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
        tenant=oauth.tenant,
    )


def _keep(ctx: Context, pending: PendingAuthorization) -> Steps:
    """Keep ``pending`` for a later completion (in the shared store, else in the
    embedder's store when it has ``save_pending``)."""
    if ctx.shared is not None:
        yield from ctx.shared.keep_pending(ctx, pending)
        return
    keep = getattr(ctx.oauth.store, "save_pending", None)
    if callable(keep):
        keep(pending)


_BOUND = (
    ("url", "Config.url"),
    ("issuer", "OAuth.issuer"),
    ("client_id", "OAuth.client_id"),
    ("client_secret_sha256", "OAuth.client_secret"),
    ("client_metadata_url", "OAuth.client_metadata_url"),
    ("redirect_uri", "OAuth.redirect_uri"),
    ("tenant", "OAuth.tenant"),
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
            for name in (
                "issuer",
                "client_id",
                "client_secret_sha256",
                "client_metadata_url",
                "tenant",
            )
        )
    )


def complete(ctx: Context, redirect: object) -> Flow:
    """Finish an authorization a person made later: ``redirect`` is what they came back
    with; the pending authorization is found by its ``state``, taken once, and completed
    only with the ``Config`` that began it (else ``CallerError``, nothing sent, and it is
    put back for its own ``Config``)."""
    got = _redirect_params(redirect)
    state = got.get("state", "")
    pending: object
    if ctx.shared is not None:
        pending = yield from ctx.shared.take_pending(ctx, state)
    else:
        take = getattr(ctx.oauth.store, "take_pending", None)
        pending = take(state) if callable(take) else None
    if pending is TAKEN:
        raise CallerError(
            "the authorization of this redirect's state was completed already: a pending "
            "authorization is completed once (nothing was sent)"
        )
    if not isinstance(pending, PendingAuthorization):
        raise unauthorized(
            "state_mismatch", 401, "no pending authorization has the redirect's state"
        )
    if not usable_pending(pending, ctx.oauth.signer):
        raise _refusal(
            ctx,
            "the token store returned a pending authorization that cannot be used "
            "(nothing was sent)",
        )
    differ = _differences(pending.bound, binding_of(ctx))
    if differ:
        yield from _keep(ctx, pending)  # its own Config may still complete it
        raise _refusal(
            ctx,
            "this redirect's authorization was begun with another Config: "
            + "; ".join(differ)
            + ". Nothing was sent; complete it with the Config that began it",
            by_store=False,
        )
    if pending.resource is not None and not resource_matches(pending.resource, ctx.endpoint):
        raise _refusal(  # only a store can say so: this Config's discovery named it
            ctx,
            f"the token store's pending authorization names resource {pending.resource[:200]!r},"
            f" not this server ({ctx.endpoint.url}); nothing was sent",
        )
    return (yield from _redeem(ctx, pending, got, 401))


def _refusal(ctx: Context, message: str, *, by_store: bool = True) -> Exception:
    """A completion refused before anything is sent: the caller's mistake (``CallerError``,
    raised from ``complete_authorization``), but with a shared store the refusal comes
    after the store answered, so it ends the operation as an ``McpError``: the store's
    (``ConnectionFailed(cause="store")``) or the redirect's (``state_mismatch``)."""
    if ctx.shared is None:
        return CallerError(message)
    if by_store:
        return ConnectionFailed(message, cause="store")
    return unauthorized("state_mismatch", 401, message)


def _redeem(ctx: Context, pending: PendingAuthorization, got: dict[str, str], status: int) -> Flow:
    """Check the redirect's parameters (RFC 9207 ``iss``, ``state``) and trade the code."""
    if "error" in got:
        raise unauthorized(
            "authorization_denied",
            status,
            f"the authorization server answered error {got['error'][:100]!r}",
        )
    if got.get("state") != pending.state:
        raise unauthorized("state_mismatch", status, "the redirect's state is not the one sent")
    iss = got.get("iss")
    if iss is not None and iss != pending.issuer:
        raise unauthorized(
            "iss_mismatch", status, f"the redirect's iss {iss[:200]!r} is not {pending.issuer!r}"
        )
    if iss is None and pending.iss_required:
        raise unauthorized(
            "iss_mismatch", status, "the authorization server advertises iss, the redirect has none"
        )
    code = got.get("code")
    if not code:
        raise unauthorized("authorization_denied", status, "the redirect carries no code")
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
        yield from token_request(
            ctx, endpoint, pending.registration, form, pending.issuer, status, "token_failed"
        )
    )
