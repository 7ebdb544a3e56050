"""Byte-level HTTP/1.1 (h11) and HTTP/2 (h2) machines that count before they parse."""

from __future__ import annotations

import contextlib
from typing import Any

from ..errors import ConnectionFailed

__all__ = ["reader_fault"]


def reader_fault(wire: Any, exc: Exception) -> None:
    """The last resort of a socket's reader in every adapter: the wire machines never
    raise on server input, but should anything on the way (the machine, the delivery)
    raise, the socket's exchanges fail classified (framing) and the socket closes."""
    error = ConnectionFailed(
        f"the socket reader failed ({type(exc).__name__}: {exc}); the socket was closed",
        cause="framing",
    )
    with contextlib.suppress(Exception):
        wire.abort(error)
