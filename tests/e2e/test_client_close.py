"""Closing a ``Client`` while its work is in flight, on every backend and both eras.

The work ends with ``ConnectionFailed(cause="client_closed")`` -- the embedder closed it,
no server did -- wherever it stood: on the wire, waiting for a socket, or dialling.
"""

from __future__ import annotations

from typing import Any

import pytest

from sansmcp import Config, ConnectionFailed

from .conftest import Backend, Server

SLOW = b'{"seconds": 20}'


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25"])
def test_closing_the_client_ends_in_flight_calls_as_client_closed(
    backend: Backend, plain: Server, version: str
) -> None:
    async def main() -> None:
        client = backend.Client(allow_loopback=True)
        config = Config(url=plain.url(), protocol_versions=[version])
        outcomes: list[BaseException | None] = []

        async def call(conn: Any) -> None:
            try:
                await conn.call_tool("sleep", SLOW)
                outcomes.append(None)
            except BaseException as exc:  # the outcome is the assertion
                outcomes.append(exc)

        async with client.connect(config) as first, client.connect(config) as second:

            async def close_when_started() -> None:
                # both calls started (on the wire, or waiting for a socket: either way
                # their end must name the Client's close)
                while not (first.machine.busy and second.machine.busy):
                    await backend.sleep(0.01)
                await backend.sleep(0.1)
                await client.aclose()

            await backend.gather([lambda: call(first), lambda: call(second), close_when_started])
        assert len(outcomes) == 2
        for outcome in outcomes:
            assert isinstance(outcome, ConnectionFailed), outcome
            assert outcome.cause == "client_closed", outcome

    backend.run(main)
