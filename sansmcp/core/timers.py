"""The driver's deadlines: one heap with lazy deletion.

Each timed thing (a Conn, a dial) has at most one live entry -- the one it was last
armed with, told by its sequence number (``heap_seq``); stale entries are skipped
when they reach the top, and the heap is rebuilt when stale ones outnumber live ones.
:meth:`Timers.first` is O(1) amortised.  What is due is handed out one entry at a
time (:meth:`Timers.due`), so acting on one may re-arm others; an entry armed while
the due ones are handed out waits for the next call, so a deadline already past
never makes a busy loop.  This module owns the heap only; what a deadline means is
the driver's.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

__all__ = ["Timed", "Timers"]


class Timed(Protocol):
    """Something with at most one live heap entry: its deadline and sequence number
    (both None when it has none)."""

    heap_at: float | None
    heap_seq: int | None


T = TypeVar("T", bound=Timed)


class Timers(Generic[T]):
    """The deadlines of the ``T`` s armed here."""

    __slots__ = ("_seq", "heap")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, T]] = []
        self._seq = itertools.count()

    def first(self) -> float | None:
        """The earliest live deadline (None: nothing armed)."""
        heap = self.heap
        while heap and heap[0][2].heap_seq != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def arm(self, timed: T, deadline: float | None, *, live: int) -> None:
        """``timed``'s one live heap entry is for ``deadline`` (none for None); ``live``
        counts what may be armed, for the rebuild."""
        if deadline == timed.heap_at:
            return
        timed.heap_at = deadline
        timed.heap_seq = None
        if deadline is None:
            return
        timed.heap_seq = seq = next(self._seq)
        heap = self.heap
        heapq.heappush(heap, (deadline, seq, timed))
        if len(heap) > 64 + 2 * live:
            self.heap = [entry for entry in heap if entry[2].heap_seq == entry[1]]
            heapq.heapify(self.heap)

    def due(self, now: float) -> Iterator[T]:
        """Each live entry due at or before ``now``, disarmed as it is handed out."""
        heap = self.heap
        limit = next(self._seq)  # what is armed from now on waits for the next call
        later: list[tuple[float, int, T]] = []
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            _, seq, timed = entry
            if timed.heap_seq != seq:
                continue  # stale: re-armed or gone since
            if seq > limit:
                later.append(entry)  # due again already: once per call, never a busy loop
                continue
            timed.heap_at = timed.heap_seq = None
            yield timed
        for entry in later:
            heapq.heappush(heap, entry)
