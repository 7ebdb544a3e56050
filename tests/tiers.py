"""How much each make target runs of a property test (issue 26).

* `make check` (``SANSMCP_QUICK=1``): the pure tests, a quick gate while working (about
  2 minutes): every property, a few examples each.
* `make test`: every test, at the counts below (about 10 minutes on a quiet 2-core machine).
* `make hostile` (``SANSMCP_HOSTILE_FULL=1``): the property tests whose examples are slow
  (real sockets, big inputs) at their full counts, every hostile case, and the wall-clock
  bounds (``tests/timing.py``).

A property keeps running in every tier; only its example count changes.  The hypothesis
profile (``tests/conftest.py``) does the same for a test that names no count.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

FULL = os.environ.get("SANSMCP_HOSTILE_FULL") == "1"
QUICK = os.environ.get("SANSMCP_QUICK") == "1" and not FULL
# fresh examples each run (``tests/conftest.py``): `make hostile`, or asked for
RANDOM = FULL or os.environ.get("SANSMCP_RANDOM") == "1"
QUICK_SHARE = 10  # `make check` runs a tenth of a test's `make test` count ...
QUICK_FLOOR = 5  # ... and at least this many


def examples(full: int, test: int | None = None) -> int:
    """A property's example count: ``full`` under `make hostile`, ``test`` (default
    ``full``) under `make test`, a tenth of that (at least 5) under `make check`."""
    count = full if test is None else test
    if FULL:
        return full
    if QUICK:
        return min(count, max(QUICK_FLOOR, count // QUICK_SHARE))
    return count


def missing_server(reason: str) -> NoReturn:
    """A real server a test needs is not on this machine: skip, naming it -- or, where
    it must be (``SANSMCP_REQUIRE_SERVERS=1``: CI, which installs every one), fail."""
    if os.environ.get("SANSMCP_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{reason} (SANSMCP_REQUIRE_SERVERS=1: this machine must have it)")
    pytest.skip(reason)
