"""The client's identity at an authorization server: pre-registered, a client ID metadata
document, a stored registration, else dynamic registration (RFC 7591).

Theory of operation
-------------------
:func:`register` takes the first that applies: ``OAuth.client_id`` (for its own issuer
only), ``OAuth.client_metadata_url`` when the server supports client ID metadata
documents, the registration the token store holds for this issuer (when
:func:`usable_registration` accepts it: the store is the embedder's, its values are
checked; with ``Client(store=...)`` the fleet's store, keyed by issuer and tenant), else a
POST to the server's registration endpoint, whose answer is checked and saved in the
store (in a shared store, a registration another worker stored first is used instead).  The token endpoint's authentication method is chosen from what the
server supports (``private_key_jwt`` with a signer, ``client_secret_basic`` before
``client_secret_post`` with a secret, else ``none``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ..errors import ConnectionFailed
from ..jsonvalue import dumps_compact
from .discovery import Server
from .fetching import JSON, Context, Fetch, Fetched, Step, document, str_list, unauthorized
from .store import ClientRegistration

__all__ = ["AUTH_METHODS", "register", "usable_registration"]

AUTH_METHODS = frozenset({"none", "client_secret_basic", "client_secret_post", "private_key_jwt"})


def _choose_method(server: Server, has_secret: bool, signer: object = None) -> str:
    supported = str_list(server.metadata, "token_endpoint_auth_methods_supported")
    if signer is not None and (not supported or "private_key_jwt" in supported):
        return "private_key_jwt"
    if not has_secret:
        return "none"
    if not supported or "client_secret_basic" in supported:
        return "client_secret_basic"
    if "client_secret_post" in supported:
        return "client_secret_post"
    return "client_secret_basic"


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


def register(ctx: Context, server: Server, status: int) -> Generator[Step, Any, ClientRegistration]:
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
    shared = ctx.shared
    if shared is None:
        stored = usable_registration(oauth.store.registration(server.issuer), oauth.signer)
    else:
        stored = usable_registration(
            (yield from shared.registration(ctx, server.issuer)), oauth.signer
        )
    if stored is not None:
        return stored
    if server.registration_endpoint is None:
        raise unauthorized(
            "registration_failed",
            status,
            f"{server.issuer!r} offers no dynamic registration and no client id is configured",
        )
    supported = str_list(server.metadata, "token_endpoint_auth_methods_supported")
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
        raise unauthorized(
            "registration_failed",
            status,
            f"the registration endpoint answered HTTP {fetched.status}",
        )
    doc = document(fetched, "the registration answer", ctx.limits)
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
    if shared is not None:
        return (yield from shared.save_registration(ctx, server.issuer, registration))
    oauth.store.save_registration(server.issuer, registration)
    return registration
