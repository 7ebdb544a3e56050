"""A call's or a listing's own deadline (``timeout=``) on real sockets, every backend.

It shortens the ``Limits`` ceiling for one operation and is reported as that ceiling's
bound with the shorter limit; it never lengthens it.  Only lower bounds on wall time
are asserted (load can only make them truer).
"""

from __future__ import annotations

import time

import pytest

from sansmcp import CallerError, Config, ConnectionFailed, Limits

from .conftest import Backend, Server

EARLY = 0.02  # clocks differ slightly between the runtime and time.monotonic()


def test_a_call_s_own_timeout_binds_and_the_conn_goes_on(backend: Backend, plain: Server) -> None:
    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, limits=Limits(call_timeout=30.0)) as client,
            client.connect(Config(url=plain.url())) as conn,
        ):
            started = time.monotonic()
            with pytest.raises(ConnectionFailed) as failed:
                await conn.call_tool("sleep", b'{"seconds": 20}', timeout=0.3)
            assert time.monotonic() - started >= 0.3 - EARLY
            error = failed.value
            assert (error.cause, error.bound, error.limit) == ("timeout", "call_timeout", 0.3)
            with pytest.raises(CallerError, match="timeout must be a number of seconds > 0"):
                await conn.call_tool("echo", b"{}", timeout=0)
            result = await conn.call_tool("echo", b'{"text": "in time"}', timeout=3600)
            assert result.content[0].text == "in time"
            tools = await conn.list_tools(timeout=30)
            assert "echo" in [tool.name for tool in tools]

    backend.run(main)
