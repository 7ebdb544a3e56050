"""The error taxonomy: every failure a caller can see is exactly one of these.

Theory of operation
-------------------
Three classes tell a caller what happened without reading a message:

* ``ConnectionFailed`` -- we could not reach the server or finish talking to it
  (DNS, dial, guard, TLS, deadlines, budgets, malformed framing or JSON-RPC, 3xx,
  non-auth HTTP errors without a JSON-RPC error body).
* ``Unauthorized`` -- the server answered 401 or 403.
* ``ServerAnswered`` -- the server answered and the answer cannot be used (a
  JSON-RPC error for our id, an unusable result, a looping listing, ...).

Caller mistakes (bad arguments, bad URL, a token over clear text) are
``CallerError``, a ``ValueError`` subclass raised before any I/O.  Misuse of a
core machine by its driver is ``LocalProtocolError`` (a bug, not a server fault).
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = [
    "MAX_MESSAGE_CHARS",
    "AuthCause",
    "CallerError",
    "Cause",
    "ConnectionFailed",
    "LocalProtocolError",
    "McpError",
    "Reason",
    "ServerAnswered",
    "Unauthorized",
    "budget_exceeded",
]

Cause = Literal[
    "dns",
    "refused_address",
    "dial",
    "tls",
    "timeout",
    "budget",
    "framing",
    "reset",
    "refused",
    "redirect",
    "http_status",
    "not_jsonrpc",
    "stream_broken",
    "session_expired",
    "bad_document",
    "client_closed",
    "proxy",
    "store",
]
"""Every value of ``ConnectionFailed.cause``; each is described in that class's docstring."""

AuthCause = Literal[
    "authorization_required",
    "authorization_denied",
    "state_mismatch",
    "iss_mismatch",
    "issuer_mismatch",
    "resource_mismatch",
    "discovery_failed",
    "registration_failed",
    "token_failed",
    "refresh_failed",
    "insufficient_scope",
    "token_rejected",
]
"""Every value of ``Unauthorized.cause`` (None when OAuth is not configured)."""

Reason = Literal[
    "jsonrpc_error",
    "unsupported_version",
    "bad_session_id",
    "malformed_result",
    "unknown_result_type",
    "no_usable_content",
    "malformed_structured_content",
    "max_tool_pages",
    "max_tools",
    "oversized_cursor",
    "cursor_cycle",
    "max_call_attempts",
    "bad_request_state",
    "input_required",
    "input_declined",
    "output_schema_mismatch",
    "unusable_output_schema",
    "validation_budget",
    "unexpected_task",
    "malformed_task",
    "task_id_changed",
    "task_transition",
    "task_lost",
    "task_cancelled",
    "task_expired",
    "max_task_polls",
]
"""Every value of ``ServerAnswered.reason``; each is described in that class's docstring."""


MAX_MESSAGE_CHARS = 4_000
"""The longest ``McpError.message``, in characters: a message quotes what a server sent
(a result type, a header, a JSON-RPC error's text), and an embedder logs it.  What is
cut is said; the full values stay in the error's own fields (``rpc_message``, ...)."""


class McpError(Exception):
    """Base of every failure the public API raises (``message`` at most
    :data:`MAX_MESSAGE_CHARS` characters)."""

    def __init__(self, message: str) -> None:
        if len(message) > MAX_MESSAGE_CHARS:
            cut = f"... ({len(message):,} characters in all)"
            message = message[: MAX_MESSAGE_CHARS - len(cut)] + cut
        super().__init__(message)
        self.message = message


class ConnectionFailed(McpError):
    """Could not reach the server or finish talking to it.

    ``cause`` is a short machine-readable tag, one of :data:`Cause`:

    * ``"dns"`` -- the name did not resolve, resolved to no address, or the resolver's
      answer (or the embedder's resolver hook) was unusable;
    * ``"refused_address"`` -- every address the name resolved to is one the guard
      refuses (loopback, private, link-local, ... unless allowed);
    * ``"dial"`` -- the TCP connect failed;
    * ``"tls"`` -- the TLS handshake failed after TCP connected (certificate, ALPN, ...);
    * ``"timeout"`` -- a deadline passed (``bound`` names the ``Limits`` field);
    * ``"budget"`` -- the server sent more than a bound allows (``bound``, ``limit``,
      ``observed``);
    * ``"framing"`` -- malformed HTTP/1.1 or HTTP/2, or an unusable event stream;
    * ``"reset"`` -- the connection or the stream closed before the response was complete
      (EOF, RST_STREAM, GOAWAY with an error);
    * ``"refused"`` -- the server refused the stream unprocessed (RST_STREAM
      REFUSED_STREAM, or GOAWAY before it): a retry is safe;
    * ``"redirect"`` -- a 3xx answer (``status``, ``location``); redirects are never
      followed;
    * ``"http_status"`` -- a non-auth HTTP error status without a JSON-RPC answer
      (``status``);
    * ``"not_jsonrpc"`` -- the body is not JSON, not JSON-RPC, or not the response to our
      request;
    * ``"stream_broken"`` -- an event stream ended without the response, too many times
      in a row (``bound="max_stream_retries"``) or for good;
    * ``"session_expired"`` -- the server expired the session again at once (404) after
      it was renewed;
    * ``"bad_document"`` -- an OAuth document (metadata, registration or token answer)
      is malformed, not JSON, or names a URL that is not https (except on loopback);
    * ``"client_closed"`` -- the ``Client`` was closed (from another task or thread)
      while this work was in flight: no fault of the server's;
    * ``"proxy"`` -- the egress proxy refused the ``CONNECT`` (``status``; for 407 its
      ``Proxy-Authenticate`` challenge in ``proxy_authenticate``), or misbehaved before the
      tunnel was up (a malformed answer, an answer with a body, bytes before the target
      spoke, the connection closed).
    * ``"store"`` -- the shared store (``Client(store=...)``, e.g. Redis) failed or timed
      out during an operation that cannot go on safely without it (a token's read,
      refresh lease or write); nothing was written or deleted.

    For a deadline or a budget, ``bound`` names the ``Limits`` field and ``limit`` /
    ``observed`` give the figures.
    """

    cause: Cause

    def __init__(
        self,
        message: str,
        *,
        cause: Cause,
        bound: str | None = None,
        limit: float | None = None,
        observed: float | None = None,
        status: int | None = None,
        location: str | None = None,
        proxy_authenticate: str | None = None,
    ) -> None:
        super().__init__(message)
        self.cause = cause
        self.bound = bound
        self.limit = limit
        self.observed = observed
        self.status = status
        self.location = location
        self.proxy_authenticate = proxy_authenticate


class Unauthorized(McpError):
    """The server answered 401 or 403: the credential was refused or is required.

    ``challenges`` is the parsed ``WWW-Authenticate`` header: a list of
    ``(scheme, {param: value})`` pairs, lower-cased parameter names.

    With ``Config.oauth``, an authorization that cannot finish sets ``cause`` (one of
    :data:`AuthCause`): ``"authorization_required"`` (no authorization step; the URL to
    send a person to is ``authorization_url``), ``"authorization_denied"`` (the
    redirect carried an ``error``), ``"state_mismatch"``, ``"iss_mismatch"`` (RFC 9207:
    missing when advertised, or not the issuer exactly), ``"issuer_mismatch"`` (the
    metadata's ``issuer``), ``"resource_mismatch"`` (the protected resource metadata
    names another resource), ``"discovery_failed"``, ``"registration_failed"``,
    ``"token_failed"``, ``"refresh_failed"``, ``"insufficient_scope"`` (step-up past
    ``Limits.max_auth_attempts``) or ``"token_rejected"`` (a fresh token refused again,
    as many times).  ``status`` is the MCP server's answer that started the flow.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        www_authenticate: str | None = None,
        challenges: list[tuple[str, dict[str, str]]] | None = None,
        cause: AuthCause | None = None,
        authorization_url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.www_authenticate = www_authenticate
        self.challenges = challenges or []
        self.cause = cause
        self.authorization_url = authorization_url


class ServerAnswered(McpError):
    """The server answered, and the answer cannot be used.

    A JSON-RPC error carries ``code``, ``message`` (as ``rpc_message``) and ``data``;
    an unusable result carries ``reason`` and, where a bound applied, ``bound`` /
    ``limit``.  ``reason`` is a short machine-readable tag, one of :data:`Reason`:

    * ``"jsonrpc_error"`` -- the server answered with a JSON-RPC error (``code``,
      ``rpc_message``, ``data``);
    * ``"unsupported_version"`` -- the server speaks no protocol revision we may use
      (``Config.protocol_versions``);
    * ``"bad_session_id"`` -- the session id the server assigned cannot be echoed back;
    * ``"malformed_result"`` -- a result that is not an object, or lacks or mistypes a
      required member (``tools``, ``content``, ``isError``, ``nextCursor``, input requests);
    * ``"unknown_result_type"`` -- a result of a ``resultType`` we do not know;
    * ``"no_usable_content"`` -- a tool result whose content blocks are all unusable;
    * ``"malformed_structured_content"`` -- a tool result's ``structuredContent`` is not
      an object (before 2026-07-28) or not strict JSON;
    * ``"max_tool_pages"`` / ``"max_tools"`` -- the tool listing exceeds
      ``Limits.max_tool_pages`` / ``Limits.max_tools`` (``bound``, ``limit``);
    * ``"oversized_cursor"`` -- a ``nextCursor`` over ``Limits.max_echo_bytes``;
    * ``"cursor_cycle"`` -- the listing loops (a cursor came back);
    * ``"max_call_attempts"`` -- the server asked for input more than
      ``Limits.max_call_attempts`` times;
    * ``"bad_request_state"`` -- a ``requestState`` that is not a string of at most
      ``Limits.max_echo_bytes``;
    * ``"input_required"`` -- the server needs input and no input handler is configured
      (``data`` holds the requests);
    * ``"input_declined"`` -- the input handler declined to answer;
    * ``"output_schema_mismatch"`` -- a tool result (not ``isError``) whose
      ``structuredContent`` is missing or does not conform to the tool's
      ``outputSchema`` (the message names the first failing path and keyword);
    * ``"unusable_output_schema"`` -- the tool's ``outputSchema`` is malformed or needs
      what sansmcp refuses to do (a remote ``$ref``, another draft than 2020-12 or 07,
      ``unevaluated*``, a ``pattern`` outside the linear-time subset);
    * ``"validation_budget"`` -- compiling the schema or checking the result took more
      than ``Limits.max_validation_steps`` steps or nested past
      ``Limits.max_validation_depth`` (``bound``, ``limit``);
    * ``"unexpected_task"`` -- a task handle where none may come: to a request that did
      not declare tasks, or on a method other than ``tools/call``;
    * ``"malformed_task"`` -- a task (created, polled, cancelled or notified) that lacks or
      mistypes a member, has a status we do not know, or an unusable input request;
    * ``"task_id_changed"`` -- an answer about the task names another ``taskId``;
    * ``"task_transition"`` -- the task moved against the status table: out of a terminal
      status, or back to asking for input it was given after it resumed work;
    * ``"task_lost"`` -- the server does not know the task it created (``-32602``;
      ``code``, ``rpc_message``, ``data``);
    * ``"task_cancelled"`` -- the task ended ``cancelled`` without our asking;
    * ``"task_expired"`` -- the task's ``ttlMs`` ran out (counted from when we first saw
      it, on our clock) before it ended;
    * ``"max_task_polls"`` -- the task did not end within ``Limits.max_task_polls`` polls
      (``bound``, ``limit``).
    """

    reason: Reason

    def __init__(
        self,
        message: str,
        *,
        reason: Reason,
        code: int | None = None,
        rpc_message: str | None = None,
        data: Any = None,
        bound: str | None = None,
        limit: float | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = code
        self.rpc_message = rpc_message
        self.data = data
        self.bound = bound
        self.limit = limit


class CallerError(ValueError):
    """The caller's input is unusable (raised before any I/O)."""


class LocalProtocolError(RuntimeError):
    """A core machine was driven in a way its contract forbids (a bug in the driver)."""


def budget_exceeded(message: str, bound: str, limit: float, observed: float) -> ConnectionFailed:
    """The ``ConnectionFailed`` for a spent budget: ``bound`` names the ``Limits`` field."""
    return ConnectionFailed(message, cause="budget", bound=bound, limit=limit, observed=observed)


class UsageError(RuntimeError):
    """The API was used in a state that forbids it: the ``Conn`` is closed (or an operation
    on it was cancelled), it is busy with another operation, or the ``Client`` is closed.

    A ``RuntimeError`` (so ``except RuntimeError`` keeps working), neither an ``McpError``
    nor a ``CallerError``: nothing was sent and nothing the server did is at fault.
    """
