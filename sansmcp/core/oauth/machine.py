"""The authorizer of a Conn with ``Config.oauth``: a 401 / 403 runs an authorization.

Theory of operation
-------------------
:class:`OAuthMachine` stands in front of an :class:`~sansmcp.core.mcp.McpMachine` it
holds (composed, as wsproto composes its handshake): the driver keeps it beside the
machine and sends it what the machine would get -- the operations, HTTP events, timers
-- and drains the outputs through it.  It passes the machine's outputs on (adding a DPoP
proof to a request for the endpoint) but one: when an operation ends in
``Unauthorized`` (a 401, or a 403 ``insufficient_scope``), the failure is held back, an
authorization (:func:`.flow.authorize`) runs, and with the new token the machine runs
the operation again from the top -- at most ``Limits.max_auth_attempts`` authorizations
per operation.  The authorization's fetches are ordinary
:class:`~sansmcp.core.mcp.StartExchange` outputs that name their own ``origin`` (the
authorization server): the driver sends them through the pool and the same dial guard
as the MCP endpoint; a 3xx is never followed.  All fetches of one authorization share
``Limits.auth_timeout``; the person's step (:class:`~.store.AuthorizationNeeded`,
delivered to the embedder) is outside it.

With a shared store (``shared``: the fleet's, ``Client(store=...)``) the flow's store
steps come out as :class:`~.store.StoreWanted` (the driver sends each as a ``StoreOp``
and hands the answer to :meth:`OAuthMachine.store_answered`); each waits at most
``Limits.store_timeout`` (then the flow is resumed with ``StoreFailed("timeout")``), and
a waiter's pause ends on the timer.  Like the person's step, store waits are outside
``Limits.auth_timeout``.  The first connect first reads the tokens the fleet holds for
this Conn's grant (no token is read from ``OAuth.store`` then).

A Conn without ``Config.oauth`` has no authorizer: 401 and 403 raise as before.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Generator, Iterator
from typing import Any

from ..errors import AuthCause, CallerError, ConnectionFailed, McpError, Unauthorized
from ..http import (
    DataReceived,
    ExchangeEvent,
    ExchangeFailed,
    HttpRequest,
    ResponseEnded,
    ResponseReceived,
)
from ..mcp import (
    CancelExchange,
    McpMachine,
    OperationFailed,
    Output,
    StartExchange,
    Terminal,
)
from ..store import StoreAnswer, StoreFailed
from . import dpop
from .fetching import (
    AskUser,
    Context,
    Fetch,
    Fetched,
    Pause,
    SharedState,
    Step,
    StoreStep,
    location_of,
)
from .flow import authorize, complete
from .grants import sendable_token
from .store import AuthorizationNeeded, OAuth, StoreWanted, Tokens

__all__ = ["OAuthMachine"]

Run = Generator[Step, Any, "Tokens | None"]  # a flow (or the first read of the shared tokens)

# an operation of the machine, run again once authorized: a function of the machine (a
# closure over it would be a reference cycle) and the time
Operation = Callable[[McpMachine, float], None]


class _Clock:
    """The time an :class:`OAuthMachine` was last told, for its flow's context to read."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = 0.0

    def read(self) -> float:
        return self.at


def _connect(machine: McpMachine, now: float) -> None:
    machine.connect(now=now)


class OAuthMachine:
    """The authorizer in front of ``machine`` (see the module docstring); ``exchange_ids``
    is the machine's own counter (its fetches are numbered among the machine's)."""

    def __init__(
        self,
        machine: McpMachine,
        *,
        oauth: OAuth,
        random_bytes: Callable[[int], bytes],
        wall_clock: Callable[[], float] | None = None,
        exchange_ids: Iterator[int],
        shared: SharedState | None = None,
    ) -> None:
        self.machine = machine
        self._ids = exchange_ids
        self.oauth = oauth
        self.limits = limits = machine.limits
        # the time last told, which the flow's context reads: through this clock, not a
        # reader of this object (a closure over it would be a reference cycle)
        self._clock = _Clock()
        self._ctx = Context(
            oauth=oauth,
            endpoint=machine.settings.endpoint,
            limits=limits,
            random_bytes=random_bytes,
            now=self._clock.read,
        )
        if wall_clock is not None:
            self._ctx.wall_clock = wall_clock
        self._ctx.shared = shared
        self._extra: deque[Output | AuthorizationNeeded | StoreWanted] = deque()
        self._replay: Operation | None = None  # the operation to run again once authorized
        self._attempts = 0
        self._flow: Run | None = None
        self._deadline: float | None = None  # of the authorization's fetches
        self._remaining = 0.0  # of that budget, while a person authorizes
        self._fetch_id: int | None = None
        self._fetch: Fetch | None = None
        self._status = 0
        self._headers: tuple[tuple[bytes, bytes], ...] = ()
        self._body = bytearray()
        # the body's wire bytes (data plus chunked / DATA-frame framing), charged to
        # Limits.max_auth_document_bytes: framing is bytes the server sent too
        self._body_wire = 0
        self._asking: int | None = None
        self._ask_ids = iter(range(1, 1 << 62))
        self._dpop_key = oauth.dpop_key
        self._dpop_token: str | None = None  # sent as ``Authorization: DPoP`` with a proof
        self._rs_nonce: str | None = None  # the MCP server's latest DPoP-Nonce
        self._rs_nonce_fresh = False  # one came with the last 401: retry once with it
        self._store_ids = iter(range(1, 1 << 62))
        self._store_wait: int | None = None  # the store step the flow waits for
        self._wait_until: float | None = None  # the end of that wait, or of a pause
        self._load = shared is not None  # the first connect reads the fleet's tokens
        stored = None if shared is not None else oauth.store.tokens(self._ctx.resource_key)
        if isinstance(stored, Tokens):
            if not sendable_token(stored.access_token):  # the embedder's store: checked
                raise CallerError("the token store returned an access token that cannot be sent")
            self._use(stored)

    def _use(self, tokens: Tokens) -> None:
        self._ctx.sent = tokens.access_token
        token_type = tokens.token_type
        if (
            self._dpop_key is not None
            and isinstance(token_type, str)
            and token_type.lower() == "dpop"
        ):
            self._dpop_token = tokens.access_token
            self.machine.use_bearer_token(None)
        else:
            self._dpop_token = None
            self.machine.use_bearer_token(tokens.access_token)

    # ------------------------------------------------------------ operations

    def _operation(self, run: Operation, now: float) -> None:
        self._clock.at = now
        run(self.machine, now)  # CallerError / UsageError before anything is kept
        self._replay = run
        self._attempts = 0

    def connect(self, *, now: float) -> None:
        shared = self._ctx.shared
        if shared is None or not self._load:
            self._operation(_connect, now)
            return
        self._load = False  # once per Conn; a 401 later reads the store again
        self._clock.at = now
        self._replay = _connect
        self._attempts = 0
        self._deadline = now + self.limits.auth_timeout
        self._flow = shared.tokens(self._ctx)
        self._step(None)

    def list_tools(self, *, now: float, fresh: bool = False, timeout: float | None = None) -> None:
        self._operation(
            lambda machine, at: machine.list_tools(now=at, fresh=fresh, timeout=timeout),
            now,
        )

    def call_tool(
        self,
        name: str,
        arguments: bytes = b"",
        *,
        now: float,
        progress: bool = False,
        timeout: float | None = None,
    ) -> None:
        self._operation(
            lambda machine, at: machine.call_tool(
                name, arguments, now=at, progress=progress, timeout=timeout
            ),
            now,
        )

    def task(self, action: str, subject: str, *, now: float, **more: Any) -> None:
        self._operation(lambda machine, at: machine.task(action, subject, now=at, **more), now)

    def complete_authorization(self, redirect: object, *, now: float) -> None:
        """Finish an authorization a person made later (``redirect``: the URL they came
        back with, or a mapping of ``code`` / ``state`` / ``iss``), then connect."""
        self._clock.at = now
        self._replay = _connect
        self._attempts = 1
        self._deadline = now + self.limits.auth_timeout
        self._flow = complete(self._ctx, redirect)
        self._step(None)

    @property
    def busy(self) -> bool:
        return self._flow is not None or self.machine.busy

    # ------------------------------------------------------------ outputs

    def next_output(self) -> Output | AuthorizationNeeded | StoreWanted | None:
        """The next output to act on: this authorizer's own first, then the machine's,
        screened (an ``Unauthorized`` held back for an authorization, DPoP added)."""
        machine = self.machine
        while True:
            if self._extra:
                return self._extra.popleft()
            output = machine.next_output()
            if (
                isinstance(output, OperationFailed)
                and isinstance(output.error, Unauthorized)
                and output.error.cause is None
                and self._replay is not None
            ):
                if self._nonce_retry(output.error):
                    continue
                self._begin(output.error)
                continue
            if self._dpop_token is not None and isinstance(output, StartExchange):
                output = self._with_proof(output)  # the MCP machine's: to the endpoint
            if isinstance(output, Terminal):
                self._replay = None
            return output

    def wanted(self, output: Output | AuthorizationNeeded) -> bool:
        if isinstance(output, AuthorizationNeeded):
            return output.auth_id == self._asking
        if isinstance(output, StartExchange) and output.exchange_id == self._fetch_id:
            return True
        return self.machine.wanted(output)

    def next_deadline(self) -> float | None:
        own = self.machine.next_deadline()
        mine = self._deadline if self._wait_until is None else self._wait_until
        if mine is None:
            return own
        return mine if own is None else min(own, mine)

    def handle_timer(self, *, now: float) -> None:
        self._clock.at = now
        if self._wait_until is not None:
            if now >= self._wait_until:
                limit = self.limits.store_timeout
                self._resume(
                    now,
                    None
                    if self._store_wait is None
                    else StoreFailed(
                        reason="timeout", detail=f"no answer in {limit:g}s (Limits.store_timeout)"
                    ),
                )
                return
        elif self._deadline is not None and now >= self._deadline:
            limit = self.limits.auth_timeout
            self._abort(
                ConnectionFailed(
                    f"the authorization's fetches took over {limit:g}s (Limits.auth_timeout)",
                    cause="timeout",
                    bound="auth_timeout",
                    limit=limit,
                )
            )
            return
        self.machine.handle_timer(now=now)

    # ------------------------------------------------------------ DPoP (RFC 9449)

    def _with_proof(self, output: StartExchange) -> StartExchange:
        """The request with ``Authorization: DPoP`` and a fresh proof for it."""
        token, key = self._dpop_token, self._dpop_key
        assert token is not None and key is not None
        request = output.request
        value = dpop.proof(
            key,
            method=request.method.decode("ascii"),
            url=self.machine.settings.endpoint.url,
            wall_clock=self._ctx.wall_clock,
            random_bytes=self._ctx.random_bytes,
            access_token=token,
            nonce=self._rs_nonce,
        )
        headers = (
            *request.headers,
            (b"authorization", b"DPoP " + token.encode()),
            (b"dpop", value),
        )
        return dataclasses.replace(output, request=dataclasses.replace(request, headers=headers))

    def _nonce_retry(self, error: Unauthorized) -> bool:
        """RFC 9449 §9: a 401 ``use_dpop_nonce`` with a new nonce -> the operation again,
        once, counted in ``Limits.max_auth_attempts``."""
        if not self._rs_nonce_fresh or self._attempts >= self.limits.max_auth_attempts:
            return False
        self._rs_nonce_fresh = False
        if not any(
            scheme == "dpop" and params.get("error") == "use_dpop_nonce"
            for scheme, params in error.challenges
        ):
            return False
        self._attempts += 1
        replay = self._replay
        assert replay is not None
        replay(self.machine, self._clock.at)
        return True

    # ------------------------------------------------------------ the authorization

    def _begin(self, error: Unauthorized) -> None:
        self._attempts += 1
        if self._attempts > self.limits.max_auth_attempts:
            cause: AuthCause = "insufficient_scope" if error.status == 403 else "token_rejected"
            self._replay = None
            self._extra.append(
                OperationFailed(
                    error=Unauthorized(
                        f"the server refused the token after {self._attempts - 1} "
                        f"authorizations (Limits.max_auth_attempts): {error.message}",
                        status=error.status,
                        www_authenticate=error.www_authenticate,
                        challenges=error.challenges,
                        cause=cause,
                    )
                )
            )
            return
        self._deadline = self._clock.at + self.limits.auth_timeout
        self._flow = authorize(self._ctx, error)
        self._step(None)

    def _step(self, value: object, failure: BaseException | None = None) -> None:
        flow = self._flow
        assert flow is not None
        try:
            request = flow.send(value) if failure is None else flow.throw(failure)
        except StopIteration as stop:
            self._flow = None
            self._deadline = None
            tokens: Tokens | None = stop.value
            if tokens is not None:  # (None: the fleet holds no tokens for this Conn yet)
                self._use(tokens)
            replay = self._replay
            assert replay is not None
            replay(self.machine, self._clock.at)
            return
        except McpError as error:
            self._flow = None
            self._deadline = None
            self._replay = None
            self._extra.append(OperationFailed(error=error))
            return
        except BaseException:
            self._flow = None
            self._deadline = None
            self._replay = None
            raise
        if isinstance(request, Fetch):
            self._send(request)
            return
        assert self._deadline is not None
        self._remaining = max(self._deadline - self._clock.at, 0.0)
        self._deadline = None  # the person's time is the embedder's; the store's is its own
        if isinstance(request, AskUser):
            self._asking = next(self._ask_ids)
            self._extra.append(AuthorizationNeeded(auth_id=self._asking, url=request.url))
        elif isinstance(request, StoreStep):
            self._store_wait = next(self._store_ids)
            self._wait_until = self._clock.at + self.limits.store_timeout
            self._extra.append(StoreWanted(request_id=self._store_wait, command=request.command))
        else:
            assert isinstance(request, Pause)
            self._wait_until = request.until

    def _resume(self, now: float, value: object) -> None:
        """A store step answered (or timed out), or a pause over: the flow goes on."""
        self._store_wait = self._wait_until = None
        self._deadline = now + self._remaining
        self._step(value)

    def store_answered(self, request_id: int, answer: StoreAnswer, *, now: float) -> None:
        """The shared store's answer to :class:`~.store.StoreWanted` ``request_id`` (one
        that comes after its wait ended is dropped)."""
        self._clock.at = now
        if request_id == self._store_wait and self._flow is not None:
            self._resume(now, answer)

    def _send(self, fetch: Fetch) -> None:
        endpoint = fetch.endpoint
        exchange_id = next(self._ids)
        self._fetch_id, self._fetch = exchange_id, fetch
        self._status, self._headers, self._body, self._body_wire = 0, (), bytearray(), 0
        request = HttpRequest(
            method=fetch.method,
            scheme=endpoint.origin.scheme.encode(),
            authority=endpoint.authority,
            target=endpoint.target,
            headers=((b"user-agent", self.machine.settings.user_agent.encode()), *fetch.headers),
            body=fetch.body,
        )
        assert self._deadline is not None
        self._extra.append(
            StartExchange(
                exchange_id=exchange_id,
                request=request,
                deadline=self._deadline,
                origin=endpoint.origin,
            )
        )

    def _abort(self, error: McpError) -> None:
        """End the authorization while its fetch is outstanding (the only time a bound
        can fire: between fetches the flow runs synchronously, and the person's step
        has no deadline)."""
        assert self._fetch_id is not None and self._flow is not None
        self._extra.append(CancelExchange(exchange_id=self._fetch_id))
        self._fetch_id = None
        self._flow.close()
        self._flow = None
        self._deadline = None
        self._replay = None
        self._extra.append(OperationFailed(error=error))

    def authorized(self, auth_id: int, answer: object, *, now: float) -> None:
        """The embedder's answer to :class:`AuthorizationNeeded` ``auth_id``."""
        self._clock.at = now
        if auth_id != self._asking or self._flow is None:
            return
        self._asking = None
        self._deadline = now + self._remaining
        self._step(answer)

    def receive(self, event: ExchangeEvent, *, now: float) -> None:
        self._clock.at = now
        if event.exchange_id != self._fetch_id:
            if self._dpop_key is not None and isinstance(event, ResponseReceived):
                nonce = dpop.nonce_of(event.headers)
                if nonce is not None:
                    self._rs_nonce = nonce
                    self._rs_nonce_fresh = event.status == 401
            self.machine.receive(event, now=now)
            return
        fetch = self._fetch
        assert fetch is not None
        if isinstance(event, ResponseReceived):
            self._status, self._headers = event.status, event.headers
            if 300 <= event.status < 400:
                where = location_of(event.headers)
                self._abort(
                    ConnectionFailed(
                        f"{fetch.what} answered HTTP {event.status} redirecting to {where!r}; "
                        "redirects are never followed",
                        cause="redirect",
                        status=event.status,
                        location=where,
                    )
                )
        elif isinstance(event, DataReceived):
            limit = self.limits.max_auth_document_bytes
            # wire bytes, not only the document's: checked before the body grows
            size = self._body_wire + len(event.data) + event.overhead
            if size <= limit:
                self._body_wire = size
                self._body += event.data
            else:
                self._abort(
                    ConnectionFailed(
                        f"{fetch.what} sent over {limit:,} bytes (Limits.max_auth_document_bytes)",
                        cause="budget",
                        bound="max_auth_document_bytes",
                        limit=limit,
                        observed=size,
                    )
                )
        elif isinstance(event, ResponseEnded):
            self._fetch_id = None
            self._step(Fetched(status=self._status, headers=self._headers, body=bytes(self._body)))
        elif isinstance(event, ExchangeFailed):
            self._fetch_id = None
            self._step(None, event.error)
