"""Every test session: SIGINT raises ``KeyboardInterrupt``, as in a foreground process;
and the hypothesis profile of the make target (``tests/tiers.py``): `make check` runs a
test that names no example count at 10 examples instead of hypothesis's 100.

A parent that starts the suite in the background without job control (``sh -c '... &'``,
``nohup``) leaves SIGINT ignored, and Python then installs no handler of its own: the
tests that interrupt a blocked thread (``signal.pthread_kill``, ``_thread.interrupt_main``)
would wait forever for an interrupt that never lands.  (Two `make test` runs hung that way
in ``Bell.wait``: the process's ``SigIgn`` mask held SIGINT.)

Every tier but `make hostile` draws the same examples on every run (``derandomize``, a seed
from each test's own source): the pure tests' 100 % branch gate must not depend on which
examples a run happens to draw, and a loaded machine must not change what a run tests
(issue 26: a loaded `make test` once missed a branch only random examples reached).  No
deadline and no ``too_slow`` health check there either: both read the wall clock.
`make hostile` and ``SANSMCP_RANDOM=1`` draw fresh examples each run (and keep hypothesis's
database of failing ones): the search for new cases lives there, and every case it finds
becomes a deterministic test.

``SANSMCP_MAX_EXAMPLES=N`` caps every hypothesis test's ``max_examples`` at N (its own
settings otherwise kept): ``make test-pythons`` runs the pure tests on the other CPythons
that way, to find what breaks on a version, not to search as deeply as ``make test``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.tiers import QUICK, RANDOM, examples

settings.register_profile(
    "same-every-run",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "quick", settings.get_profile("same-every-run"), max_examples=examples(100)
)
if QUICK:
    settings.load_profile("quick")
elif not RANDOM:
    settings.load_profile("same-every-run")

MAX_EXAMPLES = os.environ.get("SANSMCP_MAX_EXAMPLES")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not MAX_EXAMPLES:
        return
    cap = int(MAX_EXAMPLES)
    for item in items:
        test = getattr(item, "obj", None)
        test = getattr(test, "__func__", test)  # a method's function
        # what hypothesis's @given wrapper reads when the test runs
        current = getattr(test, "_hypothesis_internal_use_settings", None)
        if isinstance(current, settings) and current.max_examples > cap:
            test._hypothesis_internal_use_settings = settings(current, max_examples=cap)


@pytest.fixture(autouse=True, scope="session")
def _sigint_raises_keyboard_interrupt() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
