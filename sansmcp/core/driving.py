"""What every runtime adapter does the same way, kept pure: routing and Conn state.

Theory of operation
-------------------
An adapter owns sockets, tasks and timers; everything else it would otherwise
write twice lives here:

* :class:`Router` -- which MCP machine (an :class:`Owner`) owns which exchange on
  which pooled socket.  It starts exchanges on wire machines, delivers each wire
  event to its owner, ends leases in the pool on terminal events and
  cancellations, and fails the exchanges of a socket that died.  Every method
  returns the pool connection ids the adapter must close now.
* :class:`ClientCore` -- the runtime-free half of a ``Client``: its limits, guard
  settings, pool and router, and the machine a new ``Conn`` runs (configured from
  the caller's ``Config``, with the pool's era hint for the endpoint).
* :class:`ConnCore` -- the runtime-free half of a ``Conn``: its machine and
  exchanges, the operation's terminal output turned into a result or a raised
  error, and what a finished operation teaches the pool (the endpoint's era).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .config import Config, conn_settings
from .errors import ConnectionFailed
from .http import ExchangeEvent, ExchangeFailed, ResponseEnded
from .limits import Limits
from .mcp import (
    Connected,
    McpMachine,
    OperationFailed,
    Output,
    StartExchange,
    ToolCalled,
    ToolsListed,
)
from .net.dial import reset_error
from .net.pool import DialNeeded, Pool
from .tools import CallResult, SkippedTool, Tool

__all__ = ["ClientCore", "ConnCore", "Owner", "Router", "dial_failure"]


class Owner(Protocol):
    """A Conn as the router sees it."""

    exchanges: set[int]

    def feed(self, event: ExchangeEvent) -> None: ...


class Router:
    """Exchanges in flight: exchange id -> (owner, pool connection id)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._routes: dict[int, tuple[Owner, int]] = {}

    def begin(
        self, owner: Owner, start: StartExchange, conn_id: int, wire: Any, *, now: float
    ) -> None:
        """Start ``start`` on ``wire`` (the pool's connection ``conn_id``, leased) and tell
        the pool it started (see :meth:`Pool.started`)."""
        wire.start(start.exchange_id, start.request, now=now)
        self.pool.started(conn_id, now=now)
        self._routes[start.exchange_id] = (owner, conn_id)
        owner.exchanges.add(start.exchange_id)

    def cancel(
        self, exchange_id: int, wire_of: Callable[[int], Any], *, now: float
    ) -> tuple[int | None, list[int]]:
        """The owner gave up on an exchange.  Returns (the connection whose wire may
        have bytes to flush, or None; the connection ids to close)."""
        route = self._routes.pop(exchange_id, None)
        if route is None:
            return None, []
        owner, conn_id = route
        owner.exchanges.discard(exchange_id)
        wire = wire_of(conn_id)
        if wire is not None:
            wire.cancel(exchange_id, now=now)
        return (conn_id if wire is not None else None), self.pool.release(conn_id, now=now)

    def deliver(self, conn_id: int, wire: Any, *, now: float) -> list[int]:
        """Hand every event the wire has to its owner; returns the ids to close."""
        doomed: list[int] = []
        while (event := wire.next_event()) is not None:
            route = self._routes.get(event.exchange_id)
            if route is None:
                continue  # cancelled
            owner = route[0]
            if isinstance(event, ResponseEnded | ExchangeFailed):
                del self._routes[event.exchange_id]
                owner.exchanges.discard(event.exchange_id)
                owner.feed(event)
                doomed.extend(self.pool.release(conn_id, now=now))
            else:
                owner.feed(event)
        return doomed

    def socket_gone(self, conn_id: int, *, now: float) -> None:
        """The adapter closed the socket: its live exchanges fail (reset), leases end."""
        self.pool.discard(conn_id, now=now)
        for exchange_id, (owner, owning) in list(self._routes.items()):
            if owning == conn_id:
                del self._routes[exchange_id]
                owner.exchanges.discard(exchange_id)
                owner.feed(ExchangeFailed(exchange_id=exchange_id, error=reset_error()))
                self.pool.release(conn_id, now=now)


def dial_failure(
    start: StartExchange, checkout: DialNeeded, failure: ConnectionFailed
) -> ConnectionFailed | None:
    """What a failed dial means to the exchange that asked for it.

    When the dial ran out of time because the exchange's own, tighter deadline
    passed (``connect_timeout``, ``call_timeout``...), None: the machine's timer
    reports that bound by its name.  Otherwise the failure itself.
    """
    if failure.bound == "dial_timeout" and checkout.deadline > start.deadline:
        return None
    return failure


class ClientCore:
    """The runtime-free half of a ``Client``; the adapters' ``Client`` arguments:

    ``limits`` bounds everything (:class:`~sansmcp.core.limits.Limits`);
    ``allow_loopback`` / ``allow_private`` widen the address guard.
    ``ssl_context`` (default: the system's trust store, TLS >= 1.2) verifies every
    server; its ALPN protocols are set to ``h2`` and ``http/1.1`` on each dial.
    ``http2_prior_knowledge`` speaks h2c to ``http://`` origins (tests).
    ``resolver(host, port)`` replaces DNS (tests); every address it returns is still
    vetted by the guard.  ``input_handler`` answers what servers ask for
    (``{key: {"method", "params"}}`` -> ``{key: result}``, or None to decline) and
    ``capabilities`` is what is declared for it; without a handler nothing is
    declared and every ask is refused.  ``client_info`` replaces sansmcp's own
    ``clientInfo``.
    """

    def __init__(
        self,
        *,
        limits: Limits | None,
        allow_loopback: bool,
        allow_private: bool,
        http2_prior_knowledge: bool,
        answers_input: bool,
        capabilities: Mapping[str, Any] | None,
        client_info: Mapping[str, Any] | None,
    ) -> None:
        self.limits = limits or Limits()
        self.allow_loopback = allow_loopback
        self.allow_private = allow_private
        # Capabilities are declared only by an embedder that can answer what they invite.
        self.capabilities = (capabilities or {}) if answers_input else None
        self.client_info = client_info
        self.pool = Pool(limits=self.limits, http2_prior_knowledge=http2_prior_knowledge)
        self.router = Router(self.pool)
        self._exchange_ids = iter(range(1, 1 << 62))  # unique across Conns sharing sockets
        self._closed = False

    def _machine(self, config: Config) -> McpMachine:
        """The machine for a new ``Conn`` (``CallerError`` for an unusable ``config``)."""
        if self._closed:
            raise RuntimeError("this Client is closed")
        settings = conn_settings(
            config, client_info=self.client_info, capabilities=self.capabilities, era_hint=None
        )
        hint = self.pool.era_hint(settings.endpoint.url)
        if hint is not None:
            settings = dataclasses.replace(settings, era_hint=hint)
        return McpMachine(settings, limits=self.limits, exchange_ids=self._exchange_ids)


class ConnCore:
    """The runtime-free half of a ``Conn`` (one work item; not for concurrent use)."""

    def __init__(self, pool: Pool, machine: McpMachine) -> None:
        self.pool = pool
        self.machine = machine
        self.exchanges: set[int] = set()
        self.skipped_tools: list[SkippedTool] = []
        # every entry the last listing skipped; ``skipped_tools`` records the first
        # ``Limits.max_recorded_skips`` of them
        self.skipped_count = 0
        self._closed = False

    @property
    def protocol_version(self) -> str | None:
        """The negotiated protocol revision."""
        return self.machine.protocol_version

    @property
    def tools_ttl_ms(self) -> int:
        """The last listing's ``ttlMs`` (0 when absent or negative)."""
        return self.machine.ttl_ms

    @property
    def tools_cache_scope(self) -> str | None:
        """The last listing's ``cacheScope`` (None for legacy servers)."""
        return self.machine.cache_scope

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Conn is closed (closed, or an operation on it was cancelled)")

    def _begin(self, start: Callable[..., None], *, now: float) -> None:
        """Start an operation on the machine (``start`` is one of its commands)."""
        if self.machine.busy:
            raise RuntimeError("a Conn runs one operation at a time")
        start(now=now)

    def _finished(self, output: Output) -> Output:
        """The operation's terminal output: raise its error, or learn from it."""
        if isinstance(output, OperationFailed):
            raise output.error
        if isinstance(output, Connected | ToolsListed | ToolCalled):
            version = self.machine.protocol_version
            if version is not None:
                self.pool.remember_era(self.machine.settings.endpoint.url, version)
        return output

    def _tools(self, output: Output) -> list[Tool]:
        assert isinstance(output, ToolsListed)
        self.skipped_tools = list(output.skipped)
        self.skipped_count = output.skipped_count
        return list(output.tools)

    @staticmethod
    def _result(output: Output) -> CallResult:
        assert isinstance(output, ToolCalled)
        return output.result

    def _queued_wake(self, deadline: float, kept: float) -> float:
        """When a checkout of this Conn waiting in the pool's queue until ``deadline``
        should wake to let the machine act on its own deadlines (a stream drained after
        its answer is dropped at its ``cancel_grace``, which may free the very socket the
        checkout waits for): the machine's next deadline, unless there is none before
        ``deadline`` or it is no later than ``kept`` (acted on then without moving, so not
        waited for again)."""
        wake = self.machine.next_deadline()
        if wake is None or wake >= deadline or wake <= kept:
            return deadline
        return wake

    def _abandoned(self) -> list[int]:
        """After a cancellation: the Conn is closed (its operation cannot resume; a legacy
        session gets no DELETE, nothing may be awaited now) and these exchanges must be
        cancelled."""
        self._closed = True
        return list(self.exchanges)
