"""What an authorization flow yields and is resumed with, the context its steps share, and
the few helpers every step uses to fetch, check and refuse.

Theory of operation
-------------------
A flow (:mod:`.flow`) is a generator script: it yields a :class:`Fetch` (one HTTP request
to an absolute URL; the :class:`~.machine.OAuthMachine` sends it through the driver, the
pool and the dial guard, never following a redirect) and is resumed with the
:class:`Fetched` answer, or has the ``ConnectionFailed`` thrown in; it yields an
:class:`AskUser` and is resumed with the embedder's answer.  Its steps -- discovery
(:mod:`.discovery`), the client's identity (:mod:`.registration`), the token endpoint
(:mod:`.grants`) -- share the :class:`Context` of one Conn and these helpers: a URL a
server named is usable only as https or http to loopback (:func:`check_url`), a document
is a strict JSON object under ``Limits.max_json_depth`` (:func:`document`), and a refusal
is an ``Unauthorized`` naming its ``cause`` (:func:`unauthorized`).

With a shared store (``Client(store=...)``) the context carries its :class:`SharedState`
(``sansmcp.core.fleet_auth.SharedAuth``): tokens, registrations and pending
authorizations are then read and written by yielding a :class:`StoreStep` (resumed
with the store's answer) or a :class:`Pause` (resumed at its time), never by a call.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import AuthCause, CallerError, ConnectionFailed, Unauthorized
from ..http import Headers, header_value
from ..jsonvalue import JsonError, parse_json_object_strict
from ..limits import Limits
from ..store import StoreCommand
from ..url import Endpoint, is_loopback_host, parse_endpoint
from .store import ClientRegistration, OAuth, PendingAuthorization, Taken, Tokens

__all__ = [
    "FORM",
    "JSON",
    "AskUser",
    "Context",
    "Fetch",
    "Fetched",
    "Flow",
    "Pause",
    "SharedState",
    "Step",
    "Steps",
    "StoreStep",
    "check_url",
    "document",
    "fetch_json",
    "json_get",
    "location_of",
    "str_list",
    "unauthorized",
]

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


@dataclass(frozen=True, slots=True)
class StoreStep:
    """Perform ``command`` on the shared store; resumed with its answer (a
    ``StoreFailed`` when it did not come within ``Limits.store_timeout``)."""

    command: StoreCommand


@dataclass(frozen=True, slots=True)
class Pause:
    """Resume at ``until`` (the driver's clock): a waiter's pause between two reads."""

    until: float


Step = Fetch | AskUser | StoreStep | Pause
Flow = Generator[Step, Any, Tokens]
Steps = Generator[Step, Any, Any]


class SharedState(Protocol):
    """What a flow asks of the shared store (``sansmcp.core.fleet_auth.SharedAuth``):
    each method is a sub-script to ``yield from``; a store failure raises
    ``ConnectionFailed(cause="store")``."""

    def tokens(self, ctx: Context) -> Generator[Step, Any, Tokens | None]:
        """The tokens stored for this Conn's grant (their version kept), or None."""
        ...

    def save_tokens(self, ctx: Context, tokens: Tokens) -> Generator[Step, Any, None]:
        """Store the tokens of a new grant (the newest: they replace what is stored)."""
        ...

    def refresh(self, ctx: Context, tokens: Tokens, status: int) -> Flow:
        """Refresh ``tokens`` single-flight across the fleet: the tokens to use."""
        ...

    def registration(
        self, ctx: Context, issuer: str
    ) -> Generator[Step, Any, ClientRegistration | None]:
        """The client registration stored for ``issuer``, or None."""
        ...

    def save_registration(
        self, ctx: Context, issuer: str, registration: ClientRegistration
    ) -> Generator[Step, Any, ClientRegistration]:
        """Store ``registration``: the one to use (another worker's, stored first)."""
        ...

    def keep_pending(self, ctx: Context, pending: PendingAuthorization) -> Steps:
        """Store a pending authorization under its ``state``."""
        ...

    def take_pending(
        self, ctx: Context, state: str
    ) -> Generator[Step, Any, PendingAuthorization | Taken | None]:
        """The pending authorization of ``state``, taken once (None: none)."""
        ...


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
    shared: SharedState | None = None  # the fleet's store (Client(store=...)), else OAuth.store
    sent: str | None = None  # the access token this Conn sends (None: none yet)

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


def unauthorized(cause: AuthCause, status: int, message: str, **extra: Any) -> Unauthorized:
    return Unauthorized(message, status=status, cause=cause, **extra)


def document(fetched: Fetched, what: str, limits: Limits) -> dict[str, Any]:
    try:
        return parse_json_object_strict(fetched.body, max_depth=limits.max_json_depth)
    except JsonError as exc:
        raise ConnectionFailed(f"{what}: not a JSON object ({exc})", cause="bad_document") from None


def fetch_json(fetch: Fetch, limits: Limits) -> Generator[Fetch, Any, dict[str, Any] | None]:
    """GET a metadata document: the object on 200, None on 4xx/5xx (try the next one)."""
    fetched: Fetched = yield fetch
    if fetched.status != 200:
        return None
    return document(fetched, fetch.what, limits)


def json_get(endpoint: Endpoint, what: str) -> Fetch:
    return Fetch(method=b"GET", endpoint=endpoint, what=what, headers=((b"accept", JSON),))


def str_list(doc: Mapping[str, Any], key: str) -> list[str]:
    value = doc.get(key)
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, str)]


def location_of(headers: Headers) -> str | None:
    raw = header_value(headers, b"location")
    return raw.decode("latin-1")[:512] if raw is not None else None
