"""The e2e suite's MCP server: ``tests/servers/official.py``'s app plus three probe tools.

Run: ``python -m tests.e2e.server PORT [--host H] [--stateless] [--json]
[--tools N] [--h2c | --tls CERT KEY [--alpn P ...]]``.  Prints ``READY`` before it starts
serving (the fixture then polls the port).  Extra tools:

* ``sleep(seconds)`` -- awaits, then answers; for cancellation and deadlines;
* ``rpc_error()`` -- raises the SDK's ``MCPError`` (-32602), which the SDK sends
  as a JSON-RPC error, unlike an unknown tool or a failing one (``isError``);
* ``whoami()`` -- the HTTP version the server saw and the revision it negotiated.

With ``--back-channel``, two more (so the other suites' tool counts stay put):

* ``roots()`` -- asks the client for its roots with no related request, so the SDK
  sends ``roots/list`` on the session's standalone GET stream (legacy sessions);
* ``pings(count)`` -- sends ``count`` pings on the call's own stream, answers
  without waiting for their answers.

Every request carrying an ``x-test-tag`` header is logged (HTTP method, JSON-RPC
method or ``"response"``, status); ``GET /_log?TAG`` returns that tag's log as JSON,
so a test counts exactly the requests its own client sent.  ``--legacy-only`` puts
the SDK behind a filter that answers every 2026-07-28 request as a legacy-only server
does (HTTP 400 with a JSON-RPC error), so the SDK server speaks only the legacy era.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import warnings
from typing import Any
from urllib.parse import unquote

import anyio
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import EmptyResult, InputRequiredResult, PingRequest
from pydantic import BaseModel

from tests.servers.official import build

ALLOWED_NAMES = (
    "127.0.0.1",
    "127.0.0.2",
    "[::1]",
    "[::ffff:7f00:1]",  # how sansmcp normalises [::ffff:127.0.0.1]
    "localhost",
    "svc.localhost",
    "mcp.test",
    "mix.test",
)


def _describe(body: bytes) -> str | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if isinstance(message, dict):
        if isinstance(message.get("method"), str):
            return str(message["method"])
        return "response" if "result" in message or "error" in message else None
    return "batch" if isinstance(message, list) else None


class RequestLog:
    """ASGI middleware: logs tagged requests, serves ``/_log``, filters modern requests."""

    def __init__(self, app: Any, *, legacy_only: bool) -> None:
        self.app = app
        self.legacy_only = legacy_only
        self.entries: dict[str, list[dict[str, Any]]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/_log":
            tag = unquote(scope["query_string"].decode())
            await self._answer(send, 200, json.dumps(self.entries.get(tag, [])).encode())
            return
        headers = dict(scope["headers"])
        if self.legacy_only and headers.get(b"mcp-protocol-version") == b"2026-07-28":
            # As the TypeScript SDK 1.x answers a request it cannot place in a session.
            await self._drain(receive)
            body = b'{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}'
            self._log(headers, {"method": scope["method"], "rpc": None, "status": 400})
            await self._answer(send, 400, body)
            return
        entry: dict[str, Any] = {"method": scope["method"], "rpc": None, "status": None}
        self._log(headers, entry)
        chunks: list[bytes] = []

        async def logged_receive() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    entry["rpc"] = _describe(b"".join(chunks))
            return message

        async def logged_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                entry["status"] = message["status"]
            await send(message)

        await self.app(scope, logged_receive, logged_send)

    def _log(self, headers: dict[bytes, bytes], entry: dict[str, Any]) -> None:
        tag = headers.get(b"x-test-tag")
        if tag is not None:
            self.entries.setdefault(tag.decode(), []).append(entry)

    @staticmethod
    async def _drain(receive: Any) -> None:
        while True:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body"):
                return

    @staticmethod
    async def _answer(send: Any, status: int, body: bytes) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class BearerGate:
    """ASGI middleware (``--oauth AS_URL``): a resource server in front of the app.

    Serves protected resource metadata (RFC 9728) at the path-based well-known location,
    naming ``AS_URL``; answers a request to ``/mcp`` without a bearer token the test
    authorization server issued (``e2e-`` tokens) with 401 and ``resource_metadata``.
    """

    PRM = "/.well-known/oauth-protected-resource/mcp"

    def __init__(self, app: Any, issuer: str) -> None:
        self.app = app
        self.issuer = issuer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        base = f"http://{headers.get(b'host', b'').decode()}"
        if scope["path"] == self.PRM:
            body = json.dumps({"resource": f"{base}/mcp", "authorization_servers": [self.issuer]})
            await RequestLog._answer(send, 200, body.encode())
            return
        if scope["path"] == "/mcp" and not headers.get(b"authorization", b"").startswith(
            b"Bearer e2e-"
        ):
            await RequestLog._drain(receive)
            challenge = f'Bearer resource_metadata="{base}{self.PRM}"'.encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"www-authenticate", challenge), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--h2c", action="store_true")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--alpn", nargs="+", default=["h2", "http/1.1"])
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--legacy-only", action="store_true")
    parser.add_argument("--back-channel", action="store_true")
    parser.add_argument("--oauth", metavar="AS_URL")
    args = parser.parse_args()

    server = build(args.tools)
    # The SDK renders a rich traceback for every failing tool (~0.4 s each); the
    # suite calls ``fail`` on purpose, so keep the SDK's logs to critical ones.
    logging.getLogger("mcp").setLevel(logging.CRITICAL)

    @server.tool(description="Sleep for a while, then answer.")
    async def sleep(seconds: float) -> str:
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="Answer with a JSON-RPC error.")
    def rpc_error() -> str:
        raise MCPError(code=-32602, message="rpc_error always answers -32602")

    class Name(BaseModel):
        name: str

    @server.tool(description="Ask the user for a name (elicitation), then greet.")
    async def ask(ctx: Context) -> str:
        answer = await ctx.elicit("Who is there?", Name)
        if answer.action == "accept":
            return f"hello {answer.data.name}"
        return answer.action

    @server.tool(description="Ask for a name by a multi round-trip input request (2026-07-28).")
    async def ask_mrtr(ctx: Context) -> Any:
        responses = ctx.input_responses or {}
        answer = responses.get("name")
        if answer is None:
            return InputRequiredResult.model_validate(
                {
                    "inputRequests": {
                        "name": {
                            "method": "elicitation/create",
                            "params": {
                                "mode": "form",
                                "message": "Who is there?",
                                "requestedSchema": Name.model_json_schema(),
                            },
                        }
                    },
                    "requestState": "round-1",
                }
            )
        if ctx.request_state != "round-1":
            return f"lost state {ctx.request_state!r}"
        if getattr(answer, "action", None) == "accept":
            return f"hello {answer.content['name']}"  # type: ignore[union-attr]
        return str(getattr(answer, "action", "?"))

    @server.tool(description="The HTTP version and the protocol revision of this request.")
    def whoami(ctx: Context) -> str:
        request = ctx.request_context.request
        http = request.scope.get("http_version") if request is not None else None
        return f"{http} {ctx.request_context.protocol_version}"

    if args.back_channel:

        @server.tool(description="Ask the client for its roots (no related request), list them.")
        async def roots(ctx: Context) -> str:
            with warnings.catch_warnings():  # roots are deprecated as of 2026-07-28; legacy here
                warnings.simplefilter("ignore")
                listed = await ctx.session.list_roots()
            return ",".join(str(root.uri) for root in listed.roots)

        background: set[asyncio.Task[Any]] = set()

        @server.tool(description="Send pings on this call's stream; answer without awaiting them.")
        async def pings(ctx: Context, count: int) -> str:
            metadata = ServerMessageMetadata(related_request_id=ctx.request_id)

            async def ping() -> None:
                with contextlib.suppress(Exception):  # the outcome is the client's to show
                    await ctx.session.send_request(PingRequest(), EmptyResult, metadata=metadata)

            for _ in range(count):
                task = asyncio.ensure_future(ping())
                background.add(task)
                task.add_done_callback(background.discard)
            for _ in range(3):  # the pings go on the stream before the answer, at once
                await asyncio.sleep(0)
            return f"sent {count}"

    # The SDK's DNS-rebinding protection, widened to the names the suite maps to
    # loopback with its resolver hook.
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in ALLOWED_NAMES],
    )
    app = RequestLog(
        server.streamable_http_app(
            stateless_http=args.stateless, json_response=args.json, transport_security=security
        ),
        legacy_only=args.legacy_only,
    )
    if args.oauth:
        app = BearerGate(app, args.oauth)  # type: ignore[assignment]
    if args.h2c or args.tls:
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"{args.host}:{args.port}"]
        config.loglevel = "WARNING"
        config.graceful_timeout = 0.2  # a tool still sleeping must not hold up the teardown
        if args.tls:
            config.certfile, config.keyfile = args.tls
            config.alpn_protocols = args.alpn
        print("READY", flush=True)
        asyncio.run(serve(app, config))  # type: ignore[arg-type]
        return
    import uvicorn

    uvicorn_config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=0.2
    )
    print("READY", flush=True)
    uvicorn.Server(uvicorn_config).run()


if __name__ == "__main__":
    main()
