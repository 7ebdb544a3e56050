"""Past hypercorn's ``keep_alive_max_requests``: its GOAWAY on h2c (issue 16, the bug).
from . import _trace_tmp  # noqa

Hypercorn sends a graceful GOAWAY when a request crosses ``--max-requests``, with that
request's stream as the last stream id, and runs it -- but the GOAWAY closes its h2
state machine (python-hyper/h2#1181, on the server side), so it can send no response any
more and drops the connection: the streams at or below the last id, which RFC 9113 s6.8
lets finish, die unanswered, or (seen here) stay unanswered on a socket it keeps open; any frame
that raced the GOAWAY makes it send GOAWAY (PROTOCOL_ERROR) first.  The server's fault, not ours.  What we owe: streams above the
last id (never processed) are sent again on a new connection; the others fail
classified, each with the server's own act in its message (never "closed mid-response",
which is what main said), and are never retried, since the server may have run them; a stream left hanging ends at
the call's own deadline.
"""

from __future__ import annotations

from sansmcp import Config, ConnectionFailed, Limits

from .conftest import Backend, Launcher

# a stream hypercorn leaves unanswered ends at these deadlines, not the default 120 s
LIMITS = Limits(list_timeout=2.0, call_timeout=2.0)
SERVER_CLOSED = "server closed the connection with 1 HTTP/2 exchange(s) in flight"


async def item(client: object, url: str) -> None:
    async with client.connect(Config(url=url)) as conn:  # type: ignore[attr-defined]
        tools = await conn.list_tools()
        assert "echo" in {tool.name for tool in tools}
        result = await conn.call_tool("echo", b'{"text": "hi"}')
        assert [c.text for c in result.content] == ["hi"]


async def outcome(client: object, url: str) -> str:
    """``"ok"``, or ``"<cause>: <message>"`` of the classified failure."""
    try:
        await item(client, url)
    except ConnectionFailed as exc:
        return f"{exc.cause}: {exc.message}"
    return "ok"


def test_sequential_items_past_max_requests(backend: Backend, launch: Launcher) -> None:
    """The request that crosses the budget (one in three items) gets GOAWAY naming its own
    stream, then no answer: that item fails classified, the next dials anew and succeeds."""
    server = launch("--stateless", "--json", "--h2c", "--max-requests", "5")
    outcomes: list[str] = []

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True, http2_prior_knowledge=True, limits=LIMITS
        ) as client:
            for _ in range(7):  # ~15 requests: two budgets crossed
                outcomes.append(await outcome(client, server.url()))
            await item(client, server.url())  # the pool still serves after the last one

    backend.run(main)
    failures = [text for text in outcomes if text != "ok"]
    assert 1 <= len(failures) <= 3, outcomes
    for text in failures:
        assert text == f"reset: {SERVER_CLOSED}" or text.startswith("timeout: "), outcomes
    assert "ok ok" in " ".join(outcomes)  # between two budgets, items succeed


def test_concurrent_items_past_max_requests_fail_only_as_the_server_says(
    backend: Backend, launch: Launcher
) -> None:
    """10 items in flight: the streams the GOAWAY refused are sent again (items keep
    succeeding); the ones it kept fail with the server's act, never "closed mid-response"
    (the driver used to close the broken socket at the first failure it handed out)."""
    server = launch("--stateless", "--json", "--h2c", "--max-requests", "20")
    outcomes: list[str] = []

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True, http2_prior_knowledge=True, limits=LIMITS
        ) as client:

            async def worker() -> None:
                for _ in range(4):
                    outcomes.append(await outcome(client, server.url()))

            await backend.gather([worker for _ in range(10)])

    backend.run(main)
    assert len(outcomes) == 40 and outcomes.count("ok") >= 10, outcomes
    for text in outcomes:
        assert (
            text == "ok"
            or "GOAWAY" in text
            or "server closed" in text
            or (text.startswith("timeout: "))
        ), text
