"""OAuth state a fleet shares: one Conn's tokens, client registrations and pending
authorizations in the shared store, as store steps its authorization flow yields.

Theory of operation
-------------------
With ``Client(store=...)`` the driver gives each ``Config.oauth`` Conn a
:class:`SharedAuth` (the flow's :class:`~sansmcp.core.oauth.fetching.SharedState`).  Its
methods are sub-scripts the flow runs with ``yield from``: each yields
:class:`~sansmcp.core.oauth.fetching.StoreStep`\\ s (a command, resumed with the answer)
and :class:`~sansmcp.core.oauth.fetching.Pause`\\ s, and never calls a store.  The store
is the one truth for tokens then: ``OAuth.store`` is neither read nor told.

* **Tokens** live under :func:`~sansmcp.core.store.token_key` of the issuer and the
  client the ``OAuth`` names (``issuer``, ``client_id`` or ``client_metadata_url``;
  ``""`` when it names none: the same for every worker with that ``Config``), the MCP
  server and ``OAuth.tenant``.  The version read is kept; a new grant is written by
  compare-and-set on it (on a conflict, over the version found: a grant just made is
  the newest).  A refresh is a :class:`~sansmcp.core.fleet_tokens.RefreshFlight`:
  single-flight across the fleet, ``invalid_grant`` re-read before anything is deleted.
* **Registrations** live under :func:`~sansmcp.core.store.registration_key` (issuer,
  tenant); a worker that registered second uses the registration stored first.
* **Pending authorizations** live under :func:`~sansmcp.core.store.pending_key` of
  their ``state`` for :data:`PENDING_TTL`, and are completed by :class:`Take`: one
  worker gets it, a second completion finds nothing and is refused.

Values are sealed and opened by :class:`~sansmcp.core.store_values.ValueCodec`
(anything unreadable is absent).  Any failure of the store ends the flow as
``ConnectionFailed(cause="store")`` (:func:`~sansmcp.core.store.store_error`), with
nothing deleted and nothing older written.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from .errors import ConnectionFailed, McpError, Unauthorized
from .fleet_tokens import TOKENS_TTL, Failed, Issue, Refresh, RefreshFlight, Sleep, Use
from .limits import Limits
from .oauth.fetching import Context, Flow, Pause, Step, Steps, StoreStep, unauthorized
from .oauth.grants import no_client, refresh_client, refresh_grant, sendable_token
from .oauth.registration import usable_registration
from .oauth.store import ClientRegistration, OAuth, PendingAuthorization, Tokens
from .store import (
    DEFAULT_PREFIX,
    MAX_STORE_TTL,
    CompareAndSet,
    Conflict,
    Found,
    Missing,
    Read,
    ReleaseLease,
    StoreAnswer,
    StoreCommand,
    StoreFailed,
    Take,
    Written,
    pending_key,
    registration_key,
    store_error,
    token_key,
)
from .store_values import (
    ValueCodec,
    pending_body,
    pending_from,
    registration_body,
    registration_from,
    tokens_body,
    tokens_from,
)

__all__ = ["MAX_SAVE_TRIES", "PENDING_TTL", "SharedAuth"]

PENDING_TTL = 3600.0  # a person has an hour to authorize; then the state is forgotten
MAX_SAVE_TRIES = 3  # compare-and-sets of a new grant that another write beat


def _failure(answer: StoreAnswer, what: str) -> ConnectionFailed:
    if isinstance(answer, StoreFailed):
        return store_error(answer, what)
    return ConnectionFailed(
        f"the store answered {type(answer).__name__} while {what}; no token was written or deleted",
        cause="store",
    )


def _read(answer: StoreAnswer, what: str) -> Found | Missing:
    if isinstance(answer, Found | Missing):
        return answer
    raise _failure(answer, what)


class SharedAuth:
    """One Conn's OAuth state in the fleet's store (see the module docstring);
    ``holder``: this Conn's lease token (unique in the fleet)."""

    def __init__(
        self,
        oauth: OAuth,
        resource: str,
        *,
        limits: Limits,
        holder: str,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        client = oauth.client_id or oauth.client_metadata_url or ""
        self.key = token_key(oauth.issuer or "", client, resource, oauth.tenant, prefix=prefix)
        self.tenant = oauth.tenant
        self.prefix = prefix
        self.limits = limits
        self.holder = holder
        self.codec = ValueCodec(limits.max_store_value_bytes)
        self.version = 0  # of the tokens last read or written
        self._registrations: dict[str, int] = {}  # issuer -> version read

    def __repr__(self) -> str:
        return f"SharedAuth({self.key}, version {self.version})"

    def _seal(self, kind: str, body: dict[str, Any]) -> bytes:
        data = self.codec.seal(kind, body)
        if data is None:
            raise ConnectionFailed(
                f"the {kind} are over Limits.max_store_value_bytes; nothing was stored",
                cause="store",
                bound="max_store_value_bytes",
            )
        return data

    # -- tokens ----------------------------------------------------------------

    def tokens(self, ctx: Context) -> Generator[Step, Any, Tokens | None]:
        """The tokens stored for this Conn's grant (their version kept), or None."""
        found = _read((yield StoreStep(Read(key=self.key))), "reading tokens")
        self.version = found.version
        if isinstance(found, Missing):
            return None
        tokens = self.codec.open("tokens", found.value, tokens_from)
        return tokens if tokens is not None and sendable_token(tokens.access_token) else None

    def save_tokens(self, ctx: Context, tokens: Tokens) -> Generator[Step, Any, None]:
        """Store a new grant over the version read (over the one found on a conflict)."""
        expected = self.version
        data = self._seal("tokens", tokens_body(tokens))
        for _ in range(MAX_SAVE_TRIES):
            command = CompareAndSet(key=self.key, value=data, expected=expected, ttl=TOKENS_TTL)
            answer = yield StoreStep(command)
            if isinstance(answer, Written):
                self.version = answer.version
                return
            if not isinstance(answer, Conflict):
                raise _failure(answer, "storing new tokens")
            expected = answer.version
        raise ConnectionFailed(
            f"the stored tokens changed under {MAX_SAVE_TRIES} writes in a row; "
            "the new ones were not stored",
            cause="store",
        )

    def refresh(self, ctx: Context, tokens: Tokens, status: int) -> Flow:
        """Refresh ``tokens`` as one flight of the fleet: the tokens to use (this worker's
        or another's); ``refresh_failed`` when refused and gone."""
        stored = yield from self.registration(ctx, tokens.issuer)
        registration = refresh_client(ctx, tokens, stored)
        if registration is None:
            raise no_client(tokens, status)  # nothing deleted: another worker may hold one
        flight = RefreshFlight(
            self.key,
            tokens,
            self.version,
            holder=self.holder,
            limits=self.limits,
            codec=self.codec,
            now=ctx.now(),
        )
        step = flight.start()
        while True:
            if isinstance(step, Issue):
                step = flight.answer((yield StoreStep(step.command)), ctx.now())
            elif isinstance(step, Sleep):
                yield Pause(step.until)
                step = flight.woke(ctx.now())
            elif isinstance(step, Refresh):
                try:
                    fresh = yield from refresh_grant(ctx, step.tokens, registration, status)
                except Unauthorized:
                    step = flight.refused()
                except McpError:  # the token endpoint unreachable: the others may try
                    yield StoreStep(ReleaseLease(key=flight.lease, holder=self.holder))
                    raise
                else:
                    step = flight.refreshed(fresh)
            else:
                if step.release is not None:
                    yield StoreStep(step.release)  # (its answer does not matter)
                outcome = step.outcome
                if isinstance(outcome, Use):
                    self.version = outcome.version
                    return outcome.tokens
                if isinstance(outcome, Failed):
                    raise outcome.error
                raise unauthorized(
                    "refresh_failed",
                    status,
                    "the refresh was refused and no stored grant is left: authorize again",
                )

    # -- registrations ---------------------------------------------------------

    def _registration_key(self, issuer: str) -> str:
        return registration_key(issuer, self.tenant, prefix=self.prefix)

    def registration(
        self, ctx: Context, issuer: str
    ) -> Generator[Step, Any, ClientRegistration | None]:
        """The client registration stored for ``issuer`` (its version kept), or None."""
        command = Read(key=self._registration_key(issuer))
        found = _read((yield StoreStep(command)), "reading the client registration")
        self._registrations[issuer] = found.version
        if isinstance(found, Missing):
            return None
        return self.codec.open("registration", found.value, registration_from)

    def save_registration(
        self, ctx: Context, issuer: str, registration: ClientRegistration
    ) -> Generator[Step, Any, ClientRegistration]:
        """Store ``registration``; when another worker stored one first, that one."""
        command = CompareAndSet(
            key=self._registration_key(issuer),
            value=self._seal("registration", registration_body(registration)),
            expected=self._registrations.get(issuer, 0),
            ttl=MAX_STORE_TTL,
        )
        answer = yield StoreStep(command)
        if isinstance(answer, Written):
            return registration
        if not isinstance(answer, Conflict):
            raise _failure(answer, "storing the client registration")
        theirs = yield from self.registration(ctx, issuer)
        return usable_registration(theirs, ctx.oauth.signer) or registration

    # -- pending authorizations ------------------------------------------------

    def keep_pending(self, ctx: Context, pending: PendingAuthorization) -> Steps:
        """Store ``pending`` under its ``state`` (for :data:`PENDING_TTL`)."""
        command: StoreCommand = CompareAndSet(
            key=pending_key(pending.state, prefix=self.prefix),
            value=self._seal("pending", pending_body(pending)),
            expected=0,
            ttl=PENDING_TTL,
        )
        answer = yield StoreStep(command)
        if not isinstance(answer, Written):
            raise _failure(answer, "keeping the pending authorization")

    def take_pending(
        self, ctx: Context, state: str
    ) -> Generator[Step, Any, PendingAuthorization | None]:
        """The pending authorization of ``state``, taken (one taker gets it), or None."""
        command = Take(key=pending_key(state, prefix=self.prefix))
        found = _read((yield StoreStep(command)), "taking the pending authorization")
        if isinstance(found, Missing):
            return None
        return self.codec.open("pending", found.value, pending_from)
