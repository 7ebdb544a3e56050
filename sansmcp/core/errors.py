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

from typing import Any

__all__ = [
    "CallerError",
    "ConnectionFailed",
    "LocalProtocolError",
    "McpError",
    "ServerAnswered",
    "Unauthorized",
    "budget_exceeded",
]


class McpError(Exception):
    """Base of every failure the public API raises."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConnectionFailed(McpError):
    """Could not reach the server or finish talking to it.

    ``cause`` is a short machine-readable tag (``"dns"``, ``"refused_address"``,
    ``"timeout"``, ``"budget"``, ``"framing"``, ``"http_status"``, ``"redirect"``,
    ``"not_jsonrpc"``, ``"stream_broken"``, ``"reset"``, ``"tls"``, ``"dial"``...).
    For a deadline or a budget, ``bound`` names the ``Limits`` field and ``limit`` /
    ``observed`` give the figures.
    """

    def __init__(
        self,
        message: str,
        *,
        cause: str,
        bound: str | None = None,
        limit: float | None = None,
        observed: float | None = None,
        status: int | None = None,
        location: str | None = None,
    ) -> None:
        super().__init__(message)
        self.cause = cause
        self.bound = bound
        self.limit = limit
        self.observed = observed
        self.status = status
        self.location = location


class Unauthorized(McpError):
    """The server answered 401 or 403: the credential was refused or is required.

    ``challenges`` is the parsed ``WWW-Authenticate`` header: a list of
    ``(scheme, {param: value})`` pairs, lower-cased parameter names.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        www_authenticate: str | None = None,
        challenges: list[tuple[str, dict[str, str]]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.www_authenticate = www_authenticate
        self.challenges = challenges or []


class ServerAnswered(McpError):
    """The server answered, and the answer cannot be used.

    A JSON-RPC error carries ``code``, ``message`` (as ``rpc_message``) and ``data``;
    an unusable result carries ``reason`` (a short tag) and, where a bound applied,
    ``bound`` / ``limit``.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
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
