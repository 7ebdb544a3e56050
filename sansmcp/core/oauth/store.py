"""What the embedder configures for OAuth, and where tokens and registrations are kept.

``OAuth`` goes in ``Config.oauth``: the client's identity at authorization servers
(pre-registered credentials, a client ID metadata document URL, or the metadata
sent for dynamic registration), the redirect URI, and the embedder's two hooks --
the :class:`TokenStore` and the authorization step.  Both are the embedder's code:
what they return is checked before use.

Secrets (access and refresh tokens, client secrets) never appear in a ``repr``.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from ..store import StoreCommand

__all__ = [
    "TAKEN",
    "AuthorizationNeeded",
    "Binding",
    "ClientRegistration",
    "MemoryTokenStore",
    "OAuth",
    "PendingAuthorization",
    "Signer",
    "StoreWanted",
    "Taken",
    "TokenStore",
    "Tokens",
]

MAX_PENDING = 64  # pending authorizations a MemoryTokenStore keeps (abandoned ones: oldest out)
MAX_TAKEN = 256  # states it remembers as completed, to refuse a second completion


@dataclass(frozen=True, slots=True, kw_only=True)
class Tokens:
    """What a token endpoint granted for one resource (the MCP server's URL)."""

    access_token: str = field(repr=False)
    token_type: str = "Bearer"
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None  # on the driver's clock; None when not given
    scope: str | None = None
    issuer: str = ""  # the authorization server that issued them
    token_endpoint: str = ""  # where a refresh goes


@dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    """Whose a pending authorization is: what the ``Config`` that began it said about the
    server and the client.  Only a ``Config`` that says the same may complete it (the
    ``state`` that finds it comes from a redirect, which anyone can hand over).

    ``url`` is the normalised ``Config.url`` (where the token is stored and sent); the
    others are ``Config.oauth``'s fields of those names, the secret as a SHA-256 digest.
    """

    url: str
    issuer: str | None
    client_id: str | None
    client_secret_sha256: str | None = field(repr=False)
    client_metadata_url: str | None
    redirect_uri: str
    tenant: str | None = None  # OAuth.tenant: whose grant it becomes in a shared store


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingAuthorization:
    """An authorization a person has yet to make (kept by ``state`` until the embedder
    completes it from the redirect with ``complete_authorization``, with the ``Config``
    that began it: ``bound``)."""

    state: str
    verifier: str = field(repr=False)
    issuer: str
    iss_required: bool
    token_endpoint: str
    resource: str | None
    registration: ClientRegistration
    redirect_uri: str
    bound: Binding


class Taken(enum.Enum):
    """What ``take_pending`` returns for a state whose authorization was already taken."""

    TAKEN = "taken"


TAKEN = Taken.TAKEN


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientRegistration:
    """The client's identity at one authorization server (keyed by its issuer)."""

    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    auth_method: str = "none"  # none | client_secret_basic | client_secret_post


class TokenStore(Protocol):
    """Where tokens (by resource) and client registrations (by issuer) are kept.

    Called synchronously by the core; a store backed by a file or a database does its
    own I/O.  Every value it returns is checked (anything else is ignored, as absent).
    Tokens are keyed by the MCP server's URL alone (they go only there and to their
    issuer's token endpoint): one store holds one user's tokens, so share a store only
    between ``Config`` values that act for the same user.
    """

    def tokens(self, resource: str) -> Tokens | None:
        """The tokens kept for ``resource`` (the MCP server's canonical URI), or None."""
        ...

    def save_tokens(self, resource: str, tokens: Tokens | None) -> None:
        """Keep ``tokens`` for ``resource``; None forgets them (a refused refresh, logout)."""
        ...

    def registration(self, issuer: str) -> ClientRegistration | None:
        """The client registration kept for the authorization server ``issuer``, or None."""
        ...

    def save_registration(self, issuer: str, registration: ClientRegistration) -> None:
        """Keep ``registration`` for ``issuer`` (a client id never goes to another one)."""
        ...


class MemoryTokenStore:
    """The default :class:`TokenStore`: two dicts, for the life of the ``OAuth`` value."""

    def __init__(self) -> None:
        self._tokens: dict[str, Tokens] = {}
        self._registrations: dict[str, ClientRegistration] = {}
        self._pending: dict[str, PendingAuthorization] = {}
        self._taken: OrderedDict[str, None] = OrderedDict()

    def __repr__(self) -> str:
        return f"MemoryTokenStore({len(self._tokens)} tokens, {len(self._registrations)} clients)"

    def tokens(self, resource: str) -> Tokens | None:
        """The tokens kept for ``resource``, or None."""
        return self._tokens.get(resource)

    def save_tokens(self, resource: str, tokens: Tokens | None) -> None:
        """Keep ``tokens`` for ``resource``; None forgets them."""
        if tokens is None:
            self._tokens.pop(resource, None)
        else:
            self._tokens[resource] = tokens

    def registration(self, issuer: str) -> ClientRegistration | None:
        """The client registration kept for ``issuer``, or None."""
        return self._registrations.get(issuer)

    def save_registration(self, issuer: str, registration: ClientRegistration) -> None:
        """Keep ``registration`` for ``issuer``."""
        self._registrations[issuer] = registration

    def save_pending(self, pending: PendingAuthorization) -> None:
        """Optional in a :class:`TokenStore`: without it, an authorization cannot be
        completed later (the URL is still carried by the error).  Also called to put
        back one that a ``Config`` other than its own tried to complete."""
        self._taken.pop(pending.state, None)
        if len(self._pending) >= MAX_PENDING:  # abandoned ones: the oldest goes
            del self._pending[next(iter(self._pending))]
        self._pending[pending.state] = pending

    def take_pending(self, state: str) -> PendingAuthorization | Taken | None:
        """Optional, with ``save_pending``: the pending authorization of ``state``, once;
        :data:`TAKEN` for a state already taken (the last ``MAX_TAKEN`` are remembered),
        None for one never kept (or forgotten)."""
        pending = self._pending.pop(state, None)
        if pending is None:
            return TAKEN if state in self._taken else None
        self._taken[state] = None
        if len(self._taken) > MAX_TAKEN:
            self._taken.popitem(last=False)
        return pending


class Signer(Protocol):
    """A private key the embedder holds (e.g. ``sansmcp.oauth_keys.Es256Key``): the core
    assembles a JWS and asks it to sign; it never sees the key or a crypto library."""

    @property
    def alg(self) -> str: ...  # the JWS "alg", e.g. "ES256"

    def sign(self, data: bytes) -> bytes: ...  # the raw JWS signature of data

    def public_jwk(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class OAuth:
    """OAuth 2.1 for one MCP endpoint (``Config.oauth``).

    * ``client_id`` / ``client_secret``: pre-registered credentials (used at every
      authorization server unless ``issuer`` names the one they belong to);
    * ``client_metadata_url``: an https URL the embedder hosts, holding the client's
      metadata document; used as the client id where the server supports it;
    * otherwise the client registers dynamically (RFC 7591) with ``client_name``;
    * ``redirect_uri``: where the authorization server sends the user back;
    * ``scope``: scopes to ask for when the server names none;
    * ``authorize``: the embedder's authorization step, given the authorization URL,
      returns the redirect URL it received (a ``str``) or a mapping with ``code``,
      ``state`` and ``iss`` -- an ``async`` callable on the async adapters, a plain one
      on the blocking adapter.  Without it, an authorization that needs a person fails
      with ``Unauthorized(cause="authorization_required")`` carrying the URL;
    * ``store``: tokens and registrations (default: in memory, for this value's life);
      with a shared store (``Client(store=...)``) that store holds them instead, and
      this one is neither read nor told (the fleet's store is the one truth: a second
      copy no other worker coordinates with would bring the refresh race back);
    * ``tenant``: the embedder's subject key (the user or workspace the grant acts
      for): in a shared store tokens are keyed by the issuer and client named here
      (``issuer``, ``client_id`` or ``client_metadata_url``), the MCP server and this
      key, and registrations by issuer and this key, so Configs of two tenants never
      share a grant; None is one tenant.  A pending authorization is completed only
      with the same ``tenant``;
    * ``grant``: ``"client_credentials"`` for a machine client (no person: the
      pre-registered ``client_id`` authenticates with ``client_secret`` or, with
      ``signer``, an RFC 7523 ``private_key_jwt`` assertion); ``"jwt_bearer"`` trades
      ``assertion`` (a workload identity JWT, RFC 7523 §2.1) for the token;
      ``"enterprise"`` (enterprise-managed authorization) first exchanges ``assertion``
      (the user's ID token) at ``idp_token_endpoint`` (RFC 8693, as ``idp_client_id``)
      for an ID-JAG, then trades that as a jwt-bearer assertion;
    * ``dpop_key``: a :class:`Signer` whose key binds the tokens (DPoP, RFC 9449): each
      token request and each request to the MCP server carries a fresh proof, the
      token goes as ``Authorization: DPoP``, and a server's ``use_dpop_nonce`` is
      answered by one retry with its nonce.
    """

    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    issuer: str | None = None
    client_metadata_url: str | None = None
    client_name: str = "sansmcp"
    redirect_uri: str = "http://127.0.0.1/callback"
    scope: str | None = None
    authorize: Callable[[str], Any] | None = None
    store: TokenStore = field(default_factory=MemoryTokenStore)
    grant: Literal["authorization_code", "client_credentials", "jwt_bearer", "enterprise"] = (
        "authorization_code"
    )
    signer: Signer | None = None
    assertion: str | None = field(default=None, repr=False)
    idp_token_endpoint: str | None = None
    idp_client_id: str | None = None
    dpop_key: Signer | None = None
    tenant: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthorizationNeeded:
    """A person must authorize at ``url``; answer with ``ClientDriver.authorized``
    (the redirect URL, a mapping of ``code`` / ``state`` / ``iss``, or None)."""

    auth_id: int
    url: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreWanted:
    """The authorizer needs ``command`` performed on the shared store; the driver sends
    it as a ``StoreOp`` and answers ``OAuthMachine.store_answered(request_id, ...)``."""

    request_id: int
    command: StoreCommand


Answer = str | Mapping[str, Any] | None
