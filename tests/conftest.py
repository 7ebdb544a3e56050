"""Every test session: SIGINT raises ``KeyboardInterrupt``, as in a foreground process;
and the hypothesis profile of the make target (``tests/tiers.py``): `make check` runs a
test that names no example count at 10 examples instead of hypothesis's 100.

A parent that starts the suite in the background without job control (``sh -c '... &'``,
``nohup``) leaves SIGINT ignored, and Python then installs no handler of its own: the
tests that interrupt a blocked thread (``signal.pthread_kill``, ``_thread.interrupt_main``)
would wait forever for an interrupt that never lands.  (Two `make test` runs hung that way
in ``Bell.wait``: the process's ``SigIgn`` mask held SIGINT.)
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.tiers import QUICK, examples

settings.register_profile("quick", max_examples=examples(100))
if QUICK:
    settings.load_profile("quick")


@pytest.fixture(autouse=True, scope="session")
def _sigint_raises_keyboard_interrupt() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
