"""LocalStore: the in-process :class:`~sansmcp.core.store.MemoryStore` as a
:class:`~sansmcp.stores.SharedStore` (its clock the monotonic one, a lock around it),
for Clients of one process that share a store, and for tests of the seam."""

from __future__ import annotations

import os
import threading
import time

from ..core.store import MemoryStore, StoreAnswer, StoreCommand

__all__ = ["LocalStore"]


class LocalStore:
    """One process's shared store (``Client(store=LocalStore())``); thread-safe."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store if store is not None else MemoryStore()
        self._lock = threading.Lock()
        self.fleet_secret = os.urandom(32)  # (one process: its Clients share private listings)

    def __repr__(self) -> str:
        return f"LocalStore({self.store!r})"

    def execute(self, command: StoreCommand) -> StoreAnswer:
        """Perform ``command`` on the in-memory store, under its lock."""
        with self._lock:
            return self.store.execute(command, now=time.monotonic())

    async def aexecute(self, command: StoreCommand) -> StoreAnswer:
        """Perform ``command`` as :meth:`execute` does (it never waits on I/O)."""
        return self.execute(command)
