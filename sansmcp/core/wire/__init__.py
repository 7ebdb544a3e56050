"""Byte-level HTTP/1.1 (llhttp) and HTTP/2 (h2) machines that count before they parse.

:class:`Wire` is what both machines (``h1.H1Connection``, ``h2.H2Connection``) offer
their driver -- the pool, the MCP driver, the adapters -- so that nothing above this
package holds a wire machine as ``Any``.  Each machine's module checks itself against
it with a typed module-level assignment (``_WIRE: type[Wire] = H1Connection``), so mypy
fails on any drift between the two.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

from ..errors import ConnectionFailed
from ..http import ExchangeEvent, HttpRequest

__all__ = ["Wire", "reader_fault"]


class Wire(Protocol):
    """One socket's HTTP machine, sans I/O (see ``h1`` and ``h2`` for the contracts).

    Server faults never raise: they become ``ExchangeFailed`` events and make the machine
    broken.  Driver misuse (``start`` when ``can_start()`` is false, a request the machine
    does not send) raises ``LocalProtocolError``.
    """

    @property
    def http_version(self) -> str:
        """The HTTP version it speaks, as telemetry labels it: ``"1.1"`` or ``"2"``."""

    @property
    def is_broken(self) -> bool:
        """The socket must be closed and never reused."""

    @property
    def is_idle(self) -> bool:
        """No exchange in flight."""

    @property
    def active_exchanges(self) -> int:
        """Exchanges in flight."""

    @property
    def unowned_bytes(self) -> int:
        """Bytes received that no exchange was charged for."""

    @property
    def unsettled_bytes(self) -> int:
        """Bytes of exchanges in flight that no event carries yet."""

    def can_start(self) -> bool:
        """``start`` would be accepted now."""

    def buffered_bytes(self) -> int:
        """Bytes held inside the machine right now."""

    def start(self, exchange_id: int, request: HttpRequest, *, now: float) -> None:
        """Begin an exchange; its bytes go to ``data_to_send()``."""

    def cancel(self, exchange_id: int, *, now: float) -> None:
        """No further events for ``exchange_id``."""

    def close(self, *, now: float) -> None:
        """No more starts; exchanges in flight may finish."""

    def data_to_send(self) -> bytes:
        """Drain the outbox."""

    def next_event(self) -> ExchangeEvent | None:
        """The next event, or None."""

    def receive_data(self, data: bytes, *, now: float) -> None:
        """Feed bytes read from the socket."""

    def receive_eof(self, *, now: float) -> None:
        """The server closed its side."""

    def abort(self, error: ConnectionFailed) -> None:
        """Give up on the socket: every exchange in flight fails with ``error``."""


def reader_fault(wire: Wire, exc: Exception) -> None:
    """The last resort of a socket's reader in every adapter: the wire machines never
    raise on server input, but should anything on the way (the machine, the delivery)
    raise, the socket's exchanges fail classified (framing) and the socket closes."""
    error = ConnectionFailed(
        f"the socket reader failed ({type(exc).__name__}: {exc}); the socket was closed",
        cause="framing",
    )
    with contextlib.suppress(Exception):
        wire.abort(error)
