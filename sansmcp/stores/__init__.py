"""Stores a fleet shares, performing the core's store commands (issue 28).

The core (:mod:`sansmcp.core.store`) says *what* to do with shared state as commands;
a store here performs them on a real service and answers.  :class:`RedisStore` (the
``redis`` extra: redis-py) serves Redis, Valkey and a Redis Cluster.  Nothing here is
imported by ``import sansmcp``, and redis-py is imported only when a ``RedisStore`` is
built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .atrest import AtRest
    from .redis_store import RedisStore

__all__ = ["AtRest", "RedisStore"]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from .redis_store import RedisStore

        return RedisStore
    if name == "AtRest":
        from .atrest import AtRest

        return AtRest
    raise AttributeError(f"module 'sansmcp.stores' has no attribute {name!r}")
