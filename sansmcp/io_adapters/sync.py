"""The blocking adapter: ``Client``, ``Conn``, ``connect`` and ``input_deadline`` for code
without an event loop -- threads take turns to ``select`` over the sockets, and the
``Client`` is thread-safe (one Conn: one thread at a time).

This is the adapter's public name; its code lives in :mod:`sansmcp.io_adapters.blocking`
(:mod:`~sansmcp.io_adapters.blocking.sync` and the runtime it carries).
"""

from __future__ import annotations

from ._tasks import BlockingTaskHandle as TaskHandle
from .blocking.sync import RESOLVERS as RESOLVERS
from .blocking.sync import Client, Conn, connect, input_deadline

__all__ = ["Client", "Conn", "TaskHandle", "connect", "input_deadline"]
