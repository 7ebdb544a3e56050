"""The driver's record of one Conn: :class:`ConnRecord`.

:class:`~sansmcp.core.driver.ClientDriver` keeps one record per open Conn: the adapter's
:class:`~sansmcp.core.view.ConnView`, the machine and -- for a ``Config.oauth`` Conn --
the authorizer in front of it, the exchanges it has in flight, what the caller takes
while an operation runs (and what came between operations), and its entry in the timer
heap.  The record holds state only; what it means is the driver's (the Conn side) and
:mod:`sansmcp.core.sockets`' (the exchanges and their sockets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cache import CallerCache
from .commands import Deliver
from .mcp import McpMachine
from .net.egress import Route
from .view import ConnView

if TYPE_CHECKING:
    from .oauth.machine import OAuthMachine  # only for a Config.oauth Conn

__all__ = ["ConnRecord"]


class ConnRecord:
    """One Conn of a driver (see the module docstring)."""

    __slots__ = (
        "attended",
        "auth",
        "cache",
        "exchanges",
        "front",
        "heap_at",
        "heap_seq",
        "held",
        "http",
        "listen_xid",
        "machine",
        "origin",
        "outputs",
        "route",
        "view",
    )

    def __init__(self, view: ConnView) -> None:
        self.view = view
        self.machine = view.machine
        # an OAuth Conn's authorizer: the operations, events and timers go to it, and the
        # outputs come through it (its own, and the machine's screened)
        self.auth = view.auth
        self.front: McpMachine | OAuthMachine = view.machine if view.auth is None else view.auth
        # the machine's outputs, drained here without a next_output() call each (a Conn
        # without an authorizer)
        self.outputs = view.machine.outputs
        self.origin = view.machine.settings.endpoint.origin  # routed: the route's key
        self.route: Route | None = None  # through a proxy, or an own egress policy
        self.exchanges: set[int] = set()  # started, dialling or waiting for a socket
        self.attended = False  # an operation runs: the caller takes Deliver / Finished
        self.held: list[Deliver] = []  # what came between operations
        self.heap_at: float | None = None  # the deadline of its live heap entry
        self.heap_seq: int | None = None  # and that entry's sequence number
        self.http: str | None = None  # the HTTP version its last exchange began on (telemetry)
        self.listen_xid: int | None = None  # its standalone stream's exchange, once begun
        self.cache: CallerCache | None = None  # its view of the Client-wide listing cache
