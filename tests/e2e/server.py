"""The e2e suite's MCP server: ``tests/servers/official.py``'s app plus three probe tools.

Run: ``python -m tests.e2e.server PORT [--host H] [--stateless] [--json]
[--tools N [--description-bytes B]] [--h2c | --tls CERT KEY [--alpn P ...]] [--max-requests N]``
(``--max-requests``: hypercorn's ``keep_alive_max_requests``, 1,000 by default).
Prints ``READY`` before it starts serving (the fixture then polls the port).  Extra tools:

* ``sleep(seconds)`` -- awaits, then answers; for cancellation and deadlines;
* ``rpc_error()`` -- raises the SDK's ``MCPError`` (-32602), which the SDK sends
  as a JSON-RPC error, unlike an unknown tool or a failing one (``isError``);
* ``whoami()`` -- the HTTP version the server saw and the revision it negotiated.

With ``--back-channel``, two more (so the other suites' tool counts stay put):

* ``roots()`` -- asks the client for its roots with no related request, so the SDK
  sends ``roots/list`` on the session's standalone GET stream (legacy sessions);
* ``pings(count)`` -- sends ``count`` pings on the call's own stream, answers
  without waiting for their answers.

With ``--output-schemas``, two tools with an ``outputSchema`` (issue 15):

* ``shaped(count)`` -- a pydantic-typed result the SDK validates itself: conforms;
* ``misshaped(mode)`` -- an ``outputSchema`` set by hand (the SDK advertises it and
  does not check it) and a raw ``CallToolResult``: ``mode`` ``"good"`` conforms,
  ``"bad"`` breaks ``minimum`` at ``/total``, ``"missing"`` has no
  ``structuredContent``, ``"error"`` is an ``isError`` result that would not conform.
With ``--observe`` (issue 14), a ``logging/setLevel`` handler (so the server declares
``logging`` to legacy clients) and two more tools:

* ``report(steps, with_total, standalone, interval)`` -- ``steps`` progress
  notifications (with or without a total, each with a message, ``interval`` s apart), then log messages at debug, info, warning
  and error (logger ``"report"``, data an object); a legacy session's messages are
  filtered by the level its ``logging/setLevel`` asked for (a 2026-07-28 server filters
  by the request's ``_meta``).  ``standalone`` sends the progress with no related
  request, so a legacy session gets it on its standalone GET stream;
* ``changed()`` -- sends ``notifications/tools/list_changed`` with no related request
  (a legacy session gets it on its standalone GET stream);
* ``meta_seen()`` -- the ``_meta`` of the call as the server received it, as JSON.

Every request carrying an ``x-test-tag`` header is logged (HTTP method, JSON-RPC
method or ``"response"``, status); ``GET /_log?TAG`` returns that tag's log as JSON,
so a test counts exactly the requests its own client sent.  ``--legacy-only`` puts
the SDK behind a filter that answers every 2026-07-28 request as a legacy-only server
does (HTTP 400 with a JSON-RPC error), so the SDK server speaks only the legacy era.
With ``--tasks`` (issue 30), the tasks extension and its two task tools
(``tests/e2e/tasks_server.py``); with ``--tasks-2025`` (and ``--legacy-only --json``), the
2025-11-25 task shape served by hand in front of the SDK (``tasks_server.LegacyTasks``).  ``--cache-ttl MS [--cache-scope public|private]`` sets the SDK's cache hints on
``tools/list`` and ``server/discover`` (``ttlMs`` / ``cacheScope``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import time
import warnings
from typing import Any
from urllib.parse import unquote

import anyio
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import CallToolResult, EmptyResult, InputRequiredResult, PingRequest, TextContent
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


class Report(BaseModel):
    """The structured output of ``shaped`` (module level: the SDK resolves the annotation)."""

    name: str
    items: list[int]


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


LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def add_observe_tools(server: Any) -> None:
    from mcp_types import SetLevelRequestParams

    levels: dict[str, str] = {}  # session id -> the level its logging/setLevel asked for

    def session_of(ctx: Any) -> str:
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None) or {}
        return str(headers.get("mcp-session-id"))

    async def set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        levels[session_of(ctx)] = params.level
        return EmptyResult()

    with warnings.catch_warnings():  # logging is deprecated as of 2026-07-28; legacy here
        warnings.simplefilter("ignore")
        server._lowlevel_server.add_request_handler(
            "logging/setLevel", SetLevelRequestParams, set_level
        )

    @server.tool(description="Report progress, then send log messages.")
    async def report(
        ctx: Context,
        steps: int = 3,
        with_total: bool = True,
        standalone: bool = False,
        interval: float = 0.0,
    ) -> str:
        total = float(steps) if with_total else None
        meta: Any = ctx.request_context.meta or {}
        token = meta.get("progress_token", meta.get("progressToken"))
        for step in range(1, steps + 1):
            if standalone:
                if token is not None:
                    await ctx.session.send_progress_notification(
                        token, float(step), total, f"step {step}"
                    )
            else:
                await ctx.report_progress(float(step), total, f"step {step}")
            if interval:
                await anyio.sleep(interval)
        floor = levels.get(session_of(ctx.request_context), "debug")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for level in ("debug", "info", "warning", "error"):
                if LEVELS.index(level) >= LEVELS.index(floor):
                    await ctx.log(level, {"level": level, "n": 1}, logger_name="report")  # type: ignore[arg-type]
        await anyio.sleep(0.05)  # standalone notifications go out before the answer
        return f"reported {steps}"

    @server.tool(description="Tell the session its tool list changed (no related request).")
    async def changed(ctx: Context) -> str:
        await ctx.session.send_tool_list_changed()
        await anyio.sleep(0.05)  # on the standalone stream before the answer
        return "changed"

    @server.tool(description="The _meta of this call as received.")
    def meta_seen(ctx: Context) -> str:
        return json.dumps(ctx.request_context.meta)


class BearerGate:
    """ASGI middleware (``--oauth AS_URL``): a resource server in front of the app.

    Serves protected resource metadata (RFC 9728) at the path-based well-known location,
    naming ``AS_URL``; answers a request to ``/mcp`` without a bearer token the test
    authorization server issued (``e2e-`` tokens) with 401 and ``resource_metadata``, and
    one whose expiry it carries (``e2e-exp-``) once expired, with ``invalid_token`` too.
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
        if scope["path"] == "/mcp" and headers.get(b"authorization", b"").startswith(
            b"DPoP e2e-dpop-"
        ):
            await self._dpop(scope, receive, send, headers, base)
            return
        authorization = headers.get(b"authorization", b"")
        expired = self._expired(authorization)
        if scope["path"] == "/mcp" and (not authorization.startswith(b"Bearer e2e-") or expired):
            await RequestLog._drain(receive)
            challenge = f'Bearer resource_metadata="{base}{self.PRM}"'.encode()
            if expired:
                challenge += b', error="invalid_token"'
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

    @staticmethod
    def _expired(authorization: bytes) -> bool:
        """A token that carries its expiry (``Bearer e2e-exp-<unix ms>-<n>``, from
        ``AuthServer(lifetime=...)``) past it."""
        if not authorization.startswith(b"Bearer e2e-exp-"):
            return False
        until = authorization.split(b"-")[2]
        return not until.isdigit() or time.time() * 1000 >= int(until)

    async def _dpop(self, scope: Any, receive: Any, send: Any, headers: Any, base: str) -> None:
        """A DPoP-bound token (RFC 9449 §7): a valid proof with the nonce ``rs-nonce``."""
        from .dpop_check import verify

        token = headers[b"authorization"].decode()[5:]
        try:
            claims = verify(
                headers.get(b"dpop", b"").decode(), scope["method"], f"{base}/mcp", token
            )
        except (ValueError, KeyError):
            claims = {}
        if claims.get("nonce") == "rs-nonce":
            await self.app(scope, receive, send)
            return
        await RequestLog._drain(receive)
        challenge = b'DPoP error="use_dpop_nonce"' if claims else b'DPoP error="invalid_token"'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"www-authenticate", challenge),
                    (b"dpop-nonce", b"rs-nonce"),
                    (b"content-length", b"0"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


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
    parser.add_argument("--description-bytes", type=int, default=0)
    parser.add_argument("--legacy-only", action="store_true")
    parser.add_argument("--back-channel", action="store_true")
    parser.add_argument("--cache-ttl", type=int, default=None)
    parser.add_argument("--cache-scope", default="public")
    parser.add_argument("--max-requests", type=int, default=0)
    parser.add_argument("--output-schemas", action="store_true")
    parser.add_argument("--observe", action="store_true")
    parser.add_argument("--tasks", action="store_true")
    parser.add_argument("--tasks-2025", action="store_true")
    parser.add_argument("--oauth", metavar="AS_URL")
    args = parser.parse_args()

    server = build(args.tools, args.description_bytes)
    if args.cache_ttl is not None:
        from mcp.server.caching import CacheHint, validate_cache_hints

        hint = CacheHint(ttl_ms=args.cache_ttl, scope=args.cache_scope)
        server._lowlevel_server.cache_hints = validate_cache_hints(
            {"tools/list": hint, "server/discover": hint}
        )
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

    if args.output_schemas:

        @server.tool(description="A structured report (conforms to its outputSchema).")
        def shaped(count: int) -> Report:
            return Report(name="report", items=list(range(count)))

        @server.tool(description="A raw result against a hand-set outputSchema.")
        def misshaped(mode: str) -> CallToolResult:
            content = [TextContent(type="text", text=mode)]
            if mode == "missing":
                return CallToolResult(content=content)
            total = -1 if mode in ("bad", "error") else 3
            return CallToolResult(
                content=content, structured_content={"total": total}, is_error=mode == "error"
            )

        metadata = server._tool_manager.get_tool("misshaped").fn_metadata
        metadata.output_model = None
        metadata.output_schema = {
            "type": "object",
            "properties": {"total": {"type": "integer", "minimum": 0}},
            "required": ["total"],
        }
    if args.observe:
        add_observe_tools(server)
    if args.tasks:
        from .tasks_server import install

        install(server)

    # The SDK's DNS-rebinding protection, widened to the names the suite maps to
    # loopback with its resolver hook.
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in ALLOWED_NAMES],
    )
    sdk_app = server.streamable_http_app(
        stateless_http=args.stateless, json_response=args.json, transport_security=security
    )
    if args.tasks_2025:
        from .tasks_server import LegacyTasks

        sdk_app = LegacyTasks(sdk_app)
    app = RequestLog(sdk_app, legacy_only=args.legacy_only)
    if args.oauth:
        app = BearerGate(app, args.oauth)  # type: ignore[assignment]
    if args.h2c or args.tls:
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"{args.host}:{args.port}"]
        config.loglevel = "WARNING"
        config.graceful_timeout = 0.2  # a tool still sleeping must not hold up the teardown
        if args.max_requests:
            config.keep_alive_max_requests = args.max_requests
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
