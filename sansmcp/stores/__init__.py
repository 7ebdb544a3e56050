"""Stores a fleet shares, performing the core's store commands (issue 28).

The core (:mod:`sansmcp.core.store`) says *what* to do with shared state as commands;
a store here performs them and answers.  ``Client(store=...)`` takes any
:class:`SharedStore`: :class:`RedisStore` (the ``redis`` extra: redis-py; Redis, Valkey,
a Redis Cluster), :class:`LocalStore` (one process, in memory), or the embedder's own,
keeping the contract written in :mod:`sansmcp.core.store`.  Nothing here is imported by
``import sansmcp``, and redis-py is imported only when a ``RedisStore`` is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..core.store import StoreAnswer, StoreCommand
    from .atrest import AtRest
    from .local import LocalStore
    from .redis_store import RedisStore

__all__ = ["AtRest", "LocalStore", "RedisStore", "SharedStore"]


class SharedStore(Protocol):
    """What a Client's adapter calls: ``execute`` (the blocking adapter, and trio in a
    worker thread; thread-safe) and ``aexecute`` (asyncio).  Each performs one command
    within ``Limits.store_timeout`` and returns its answer; a failure is a
    ``StoreFailed`` answer (an exception is taken as one too, ``reason="failed"``).

    A store may also have ``fleet_secret`` (bytes, the same on every worker): private
    listings are then shared between callers with the same credential, keyed by an
    HMAC under it; without one only public listings are shared."""

    def execute(self, command: StoreCommand) -> StoreAnswer:
        """Perform ``command`` and answer (blocking; called from many threads at once)."""
        ...

    async def aexecute(self, command: StoreCommand) -> StoreAnswer:
        """Perform ``command`` on the running asyncio loop and answer."""
        ...


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from .redis_store import RedisStore

        return RedisStore
    if name == "LocalStore":
        from .local import LocalStore

        return LocalStore
    if name == "AtRest":
        from .atrest import AtRest

        return AtRest
    raise AttributeError(f"module 'sansmcp.stores' has no attribute {name!r}")
