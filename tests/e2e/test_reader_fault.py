"""No socket reader task dies of an exception (issue 10 D), on every backend.

The wire machines never raise on server input (tests/wire/test_accounting.py proves it
for them); this checks the adapters' last resort behind that: should anything on the
reader's path raise anyway (here an injected fault in the wire machine's entry point),
the socket's exchanges fail classified (``ConnectionFailed(cause="framing")``), the
run goes on (no ``TrioInternalError``), and asyncio logs no "Task exception was never
retrieved" (a loop exception handler records every such report and the test fails on it).
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from sansmcp import Config, ConnectionFailed
from sansmcp.core.wire.h1 import H1Connection
from tests.hostile.server_h1 import H1Server
from tests.hostile.serving import ServerThread

from .conftest import Backend


def test_a_fault_in_the_reader_fails_its_exchanges_classified(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported: list[dict[str, Any]] = []

    def broken(self: H1Connection, data: bytes, *, now: float) -> None:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(H1Connection, "receive_data", broken)

    async def main(url: str) -> ConnectionFailed:
        if backend.name == "asyncio":
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(lambda _loop, context: reported.append(context))
        async with backend.Client(allow_loopback=True) as client:
            with pytest.raises(ConnectionFailed) as caught:
                async with client.connect(Config(url=url)):
                    pass
            # the Client still works: a second attempt fails the same way, classified
            with pytest.raises(ConnectionFailed):
                async with client.connect(Config(url=url)):
                    pass
        gc.collect()  # a task that died unretrieved is reported when it is collected
        await backend.sleep(0)
        return caught.value

    with ServerThread(H1Server()) as server:
        error = backend.run(lambda: main(f"http://127.0.0.1:{server.port}/mcp"))
    assert error.cause == "framing", error
    assert "RuntimeError: injected fault" in error.message
    assert reported == []
