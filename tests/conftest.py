"""Every test session: SIGINT raises ``KeyboardInterrupt``, as in a foreground process.

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


@pytest.fixture(autouse=True, scope="session")
def _sigint_raises_keyboard_interrupt() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
