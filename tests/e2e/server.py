"""The e2e suite's MCP server: ``tests/servers/official.py``'s app plus three probe tools.

Run: ``python -m tests.e2e.server PORT [--host H] [--stateless] [--json]
[--tools N] [--h2c | --tls CERT KEY [--alpn P ...]]``.  Prints ``READY`` before it starts
serving (the fixture then polls the port).  Extra tools:

* ``sleep(seconds)`` -- awaits, then answers; for cancellation and deadlines;
* ``rpc_error()`` -- raises the SDK's ``MCPError`` (-32602), which the SDK sends
  as a JSON-RPC error, unlike an unknown tool or a failing one (``isError``);
* ``whoami()`` -- the HTTP version the server saw and the revision it negotiated.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import InputRequiredResult
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

    # The SDK's DNS-rebinding protection, widened to the names the suite maps to
    # loopback with its resolver hook.
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in ALLOWED_NAMES],
    )
    app = server.streamable_http_app(
        stateless_http=args.stateless, json_response=args.json, transport_security=security
    )
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
