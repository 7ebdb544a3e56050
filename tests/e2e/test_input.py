"""Input the server asks for, answered by the embedder's ``input_handler``.

2026-07-28: the tool answers ``input_required`` with an elicitation in
``inputRequests`` and a ``requestState``; the client retries with the answer.
2025-11-25 (stateful, SSE): the SDK sends ``elicitation/create`` on the call's
stream; the client answers it with a POST.  Without a handler nothing is
declared and the ask is refused.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest

from sansmcp import Config, ConnectionFailed, Limits, ServerAnswered

from .conftest import MODES, Backend, Launcher, Server

CAPABILITIES = {"elicitation": {"form": {}}}
ERAS = {"modern": ("ask_mrtr", None), "legacy": ("ask", ["2025-11-25"])}


@pytest.fixture(scope="module")
def stateful_sse(launch: Launcher) -> Server:
    return launch(*MODES["stateful-sse"])


@pytest.mark.parametrize("era", list(ERAS))
def test_handler_answers_an_elicitation(backend: Backend, stateful_sse: Server, era: str) -> None:
    tool, versions = ERAS[era]
    asked: list[Mapping[str, Mapping[str, Any]]] = []

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        asked.append(requests)
        await backend.sleep(0.01)  # a real await inside the handler
        return {key: {"action": "accept", "content": {"name": "Ada"}} for key in requests}

    async def main() -> None:
        async with (
            backend.Client(
                allow_loopback=True, input_handler=handler, capabilities=CAPABILITIES
            ) as client,
            client.connect(Config(url=stateful_sse.url(), protocol_versions=versions)) as conn,
        ):
            result = await conn.call_tool(tool, b"{}")
            assert not result.is_error
            assert [c.text for c in result.content] == ["hello Ada"]
            again = await conn.call_tool("echo", b'{"text": "after"}')
            assert again.content[0].text == "after"

    backend.run(main)
    assert len(asked) == 1
    ((key, request),) = asked[0].items()
    assert key == ("name" if era == "modern" else "request")
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Who is there?"


@pytest.mark.parametrize("era", list(ERAS))
def test_without_a_handler_the_ask_is_refused(
    backend: Backend, stateful_sse: Server, era: str
) -> None:
    tool, versions = ERAS[era]

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(Config(url=stateful_sse.url(), protocol_versions=versions)) as conn,
        ):
            with pytest.raises(ServerAnswered) as refused:
                await conn.call_tool(tool, b"{}")
            if era == "legacy":  # the SDK turns our refusal into the call's JSON-RPC error
                assert refused.value.code == -32601
            else:
                assert "elicitation/create" in refused.value.message
            again = await conn.call_tool("echo", b'{"text": "after"}')
            assert again.content[0].text == "after"

    backend.run(main)


@pytest.mark.parametrize("era", list(ERAS))
def test_a_slow_handler_is_bounded_by_the_call_deadline(
    backend: Backend, stateful_sse: Server, era: str
) -> None:
    tool, versions = ERAS[era]

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        await backend.sleep(10)
        raise AssertionError("the handler outlived the call deadline")

    async def main() -> None:
        async with (
            backend.Client(
                allow_loopback=True,
                input_handler=handler,
                capabilities=CAPABILITIES,
                limits=Limits(call_timeout=0.5),
            ) as client,
            client.connect(Config(url=stateful_sse.url(), protocol_versions=versions)) as conn,
        ):
            started = time.monotonic()
            with pytest.raises(ConnectionFailed) as failed:
                await conn.call_tool(tool, b"{}")
            elapsed = time.monotonic() - started
            assert (failed.value.cause, failed.value.bound) == ("timeout", "call_timeout")
            assert 0.48 <= elapsed <= 1.5

    backend.run(main)
