"""Input the server asks for, answered by the embedder's ``input_handler``.

2026-07-28: the tool answers ``input_required`` with an elicitation in
``inputRequests`` and a ``requestState``; the client retries with the answer.
2025-11-25 (stateful, SSE): the SDK sends ``elicitation/create`` on the call's
stream; the client answers it with a POST.  Without a handler nothing is
declared and the ask is refused.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from typing import Any

import pytest

from sansmcp import CallerError, Config, ConnectionFailed, Limits, ServerAnswered

from ..timing import Stopwatch, assert_span_within
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


class HandlerFault(Exception):
    """The embedder's own bug, raised inside its input handler."""


@pytest.mark.parametrize("era", list(ERAS))
def test_an_exception_the_handler_raises_propagates_and_closes_the_conn(
    backend: Backend, stateful_sse: Server, era: str
) -> None:
    """The caller's own callback failing is not the server's fault: its exception comes out
    of call_tool unchanged (not wrapped, not classified), the Conn is closed (its closing
    is a no-op, a later operation says it is closed), and the Client's pool stays usable."""
    tool, versions = ERAS[era]

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        raise HandlerFault("the embedder's handler broke")

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True, input_handler=handler, capabilities=CAPABILITIES
        ) as client:
            config = Config(url=stateful_sse.url(), protocol_versions=versions)
            async with client.connect(config) as conn:
                with pytest.raises(HandlerFault, match="handler broke"):
                    await conn.call_tool(tool, b"{}")
                with pytest.raises(RuntimeError, match="closed"):
                    await conn.call_tool("echo", b'{"text": "after"}')
            async with client.connect(config) as conn:
                again = await conn.call_tool("echo", b'{"text": "next work item"}')
                assert again.content[0].text == "next work item"

    backend.run(main)


@pytest.mark.parametrize("era", list(ERAS))
@pytest.mark.parametrize("bad", [["accept"], {"confirm": {"n": float("nan")}}, {1: {}}])
def test_an_unsendable_handler_answer_is_a_caller_error_and_closes_the_conn(
    backend: Backend, stateful_sse: Server, era: str, bad: Any
) -> None:
    """A value the handler returns is checked before it is used: not a mapping, not
    JSON, or not string-keyed is the caller's mistake (CallerError), never an escape from
    deep in a request; like the handler's own exception it closes the Conn."""
    tool, versions = ERAS[era]

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Any:
        return bad

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True, input_handler=handler, capabilities=CAPABILITIES
        ) as client:
            config = Config(url=stateful_sse.url(), protocol_versions=versions)
            async with client.connect(config) as conn:
                with pytest.raises(CallerError, match="input handler"):
                    await conn.call_tool(tool, b"{}")
                with pytest.raises(RuntimeError, match="closed"):
                    await conn.call_tool("echo", b'{"text": "after"}')
            async with client.connect(config) as conn:
                again = await conn.call_tool("echo", b'{"text": "next work item"}')
                assert again.content[0].text == "next work item"

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
            watch = Stopwatch()
            with pytest.raises(ConnectionFailed) as failed:
                await conn.call_tool(tool, b"{}")
            took = watch.read()
            assert (failed.value.cause, failed.value.bound) == ("timeout", "call_timeout")
            assert took.wall >= 0.48
            assert_span_within(took, 1.5, "the call")

    backend.run(main)


# -- issue 10: one standalone stream per legacy session; answers pending at close ----------

ROOTS = {"roots": [{"uri": "file:///work/a", "name": "a"}]}


@pytest.fixture(scope="module")
def back_channel(launch: Launcher) -> Server:
    """Stateful, SSE, with the ``roots`` and ``pings`` tools."""
    return launch("--back-channel")


def request_log(server: Server, tag: str) -> list[dict[str, Any]]:
    """The requests tagged ``tag`` that the server saw, in arrival order."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        connection.request("GET", f"/_log?{tag}")
        entries: list[dict[str, Any]] = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    return entries


def tagged(server: Server, tag: str, **kwargs: Any) -> Config:
    return Config(
        url=server.url(),
        protocol_versions=["2025-11-25"],
        headers={"x-test-tag": tag},
        **kwargs,
    )


def test_a_request_on_the_standalone_stream_reaches_the_second_call(
    backend: Backend, back_channel: Server
) -> None:
    """Issue 10 H.1: ``roots/list`` with no related request rides the session's GET
    stream; it was lost after the first call (a second GET got 409) and the call hung."""
    tag = f"h1-{backend.name}"
    asked: list[str] = []

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        asked.extend(request["method"] for request in requests.values())
        return {key: ROOTS for key in requests}

    async def main() -> list[str]:
        async with (
            backend.Client(
                allow_loopback=True,
                input_handler=handler,
                capabilities={"roots": {}},
                limits=Limits(call_timeout=10),
            ) as client,
            client.connect(tagged(back_channel, tag)) as conn,
        ):
            texts = []
            for name, arguments in (
                ("echo", b'{"text": "one"}'),
                ("roots", b"{}"),
                ("roots", b"{}"),
            ):
                result = await conn.call_tool(name, arguments)
                assert not result.is_error, result
                texts.append(result.content[0].text or "")
            return texts

    assert backend.run(main) == ["one", "file:///work/a", "file:///work/a"]
    assert asked == ["roots/list", "roots/list"]
    log = request_log(back_channel, tag)
    gets = [entry for entry in log if entry["method"] == "GET"]
    assert len(gets) == 1 and gets[0]["status"] == 200
    assert [entry["rpc"] for entry in log if entry["method"] == "POST"].count("response") == 2


@pytest.mark.parametrize("handler", [False, True])
def test_ping_answers_pending_at_close_are_sent_before_the_delete(
    backend: Backend, back_channel: Server, handler: bool
) -> None:
    """Issue 10 E: on trio 1-2 of 5 ping answers were lost when the Conn closed."""
    tag = f"pings-{backend.name}-{handler}"

    async def answer(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        return {key: ROOTS for key in requests}

    async def main() -> None:
        async with (
            backend.Client(
                allow_loopback=True,
                input_handler=answer if handler else None,
                capabilities={"roots": {}} if handler else None,
            ) as client,
            client.connect(tagged(back_channel, tag)) as conn,
        ):
            result = await conn.call_tool("pings", b'{"count": 5}')
            assert result.content[0].text == "sent 5"

    backend.run(main)
    log = request_log(back_channel, tag)
    kinds = [entry["rpc"] if entry["method"] == "POST" else entry["method"] for entry in log]
    assert kinds.count("response") == 5
    assert kinds[-1] == "DELETE"
    assert all(entry["status"] is not None for entry in log)


# -- issue 10 E: server-chosen values sent back, over a real socket -------------------


def _legacy_sse_server(event_id: bytes, session: str) -> Any:
    """A legacy server whose tools/list stream breaks after one event with ``event_id``;
    a resumption (GET with Last-Event-ID) gets the listing."""
    from tests.hostile import answers
    from tests.hostile.server_h1 import H1Reply, H1Server

    listing: dict[str, Any] = {}

    async def handler(request: answers.Request, reply: H1Reply) -> None:
        if request.rpc_method == "initialize":
            answer = answers.well_behaved(request, legacy=True)
            answer.headers = [(k, v) for k, v in answer.headers if k != "mcp-session-id"]
            answer.headers.append(("mcp-session-id", session))
            await reply.answer(answer)
        elif request.rpc_method == "tools/list":
            listing["id"] = request.rpc_id
            note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {}}
            await reply.answer(
                answers.sse_answer(b"id: " + event_id + b"\n" + answers.sse_event(note))
            )
        elif request.method == "GET" and "last-event-id" in request.headers:
            listed = answers.list_result([answers.tool("echo")], modern=False)
            await reply.answer(
                answers.sse_answer(answers.sse_event(answers.result(listing["id"], listed)))
            )
        else:
            await reply.answer(answers.well_behaved(request, legacy=True))

    return H1Server(handler)


@pytest.mark.parametrize(
    ("event_id", "resumed"), [(b"abc ", False), (b"abc\t", False), (b"ab c", True)]
)
def test_an_event_id_that_is_no_header_value_is_treated_as_absent(
    backend: Backend, event_id: bytes, resumed: bool
) -> None:
    """``id: abc `` was echoed as Last-Event-ID and h11 raised out of list_tools."""
    from tests.hostile.serving import ServerThread

    with ServerThread(_legacy_sse_server(event_id, "s-1")) as server:

        async def main() -> None:
            config = Config(
                url=f"http://127.0.0.1:{server.port}/mcp", protocol_versions=["2025-06-18"]
            )
            async with (
                backend.Client(allow_loopback=True) as client,
                client.connect(config) as conn,
            ):
                if resumed:
                    assert [tool.name for tool in await conn.list_tools()] == ["echo"]
                else:
                    with pytest.raises(ConnectionFailed) as broken:
                        await conn.list_tools()
                    assert broken.value.cause == "stream_broken"

        backend.run(main)
        gets = [r for r in server.stats.requests if r.method == "GET"]
    assert [g.headers["last-event-id"] for g in gets] == ([event_id.decode()] if resumed else [])


def test_a_session_id_that_is_not_visible_ascii_fails_the_connect(backend: Backend) -> None:
    from tests.hostile.serving import ServerThread

    with ServerThread(_legacy_sse_server(b"1", "a b")) as server:

        async def main() -> None:
            config = Config(
                url=f"http://127.0.0.1:{server.port}/mcp", protocol_versions=["2025-06-18"]
            )
            async with backend.Client(allow_loopback=True) as client:
                with pytest.raises(ServerAnswered) as refused:
                    async with client.connect(config):
                        raise AssertionError("connected with an unusable session id")
                assert refused.value.reason == "bad_session_id"

        backend.run(main)


@pytest.mark.parametrize("era", list(ERAS))
def test_a_plain_handler_on_an_async_client_is_a_caller_error(
    backend: Backend, stateful_sse: Server, era: str
) -> None:
    """An async Client awaits what its input handler returns: a plain function's mapping
    is the embedder's mistake, refused as ``CallerError``, and the Client stays usable."""
    if backend.name == "sync":
        pytest.skip("the blocking Client takes a plain function: there is nothing to await")
    tool, versions = ERAS[era]

    def plain(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        return {key: {"action": "decline"} for key in requests}

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True, input_handler=plain, capabilities=CAPABILITIES
        ) as client:
            config = Config(url=stateful_sse.url(), protocol_versions=versions)
            with pytest.raises(CallerError, match="plain must be async on this adapter"):
                async with client.connect(config) as conn:
                    await conn.call_tool(tool, b"{}")
            async with client.connect(config) as conn:
                assert (await conn.call_tool("echo", b'{"text": "ok"}')).content[0].text == "ok"

    backend.run(main)
