"""How the tests bound time on shared, loaded machines (issue 26).

`make test` asserts **no wall-clock upper bound**: load stretches every wall span (a
2-core machine at load 8 gives a process about a quarter of a core), so "ended within
X s" or "the loop never stalled more than X s" measures the neighbours as much as the
code.  Such a step is bounded instead by the **CPU time** the process spent on it
(``time.process_time``: every thread of the process, and nothing while it waits for a
core), which load does not stretch; or by a count (the bound the error names, requests,
iterations).  A lower bound ("a deadline fired no earlier than its limit") stays: load
only makes it truer.

`make hostile` (``SANSMCP_HOSTILE_FULL=1``, meant for a quiet machine) asserts the wall
time as well, with the tolerances the cases were calibrated with.

``Span`` measures a step both ways; :func:`assert_within` applies the rule.  Harness
timeouts (a child or a test body killed past a hard limit) are safety nets, not
assertions: they are set generously enough for load 8.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# Wall-clock upper bounds are asserted only here (`make hostile`).
WALL = os.environ.get("SANSMCP_HOSTILE_FULL") == "1"


@dataclass(slots=True)
class Span:
    """A step's wall time (``time.monotonic``) and the CPU time the process spent in it
    (``time.process_time``), seconds; filled in when :func:`span`'s block ends."""

    wall: float = 0.0
    cpu: float = 0.0


@contextmanager
def span() -> Iterator[Span]:
    out = Span()
    wall, cpu = time.monotonic(), time.process_time()
    try:
        yield out
    finally:
        out.wall = time.monotonic() - wall
        out.cpu = time.process_time() - cpu


class Stopwatch:
    """Started when made; :meth:`read` gives the :class:`Span` since then."""

    __slots__ = ("_cpu", "_wall")

    def __init__(self) -> None:
        self._wall, self._cpu = time.monotonic(), time.process_time()

    def read(self) -> Span:
        return Span(time.monotonic() - self._wall, time.process_time() - self._cpu)


def assert_within(wall: float, cpu: float, limit: float, what: str = "the step") -> None:
    """``what`` took at most ``limit`` seconds: its CPU time always, its wall time only
    under `make hostile` (``WALL``)."""
    assert cpu <= limit, f"{what} spent {cpu:.3f} s of CPU (> {limit:g} s)"
    if WALL:
        assert wall <= limit, f"{what} took {wall:.3f} s of wall time (> {limit:g} s)"


def assert_span_within(measured: Span, limit: float, what: str = "the step") -> None:
    assert_within(measured.wall, measured.cpu, limit, what)
