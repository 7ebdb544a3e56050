"""The client the official MCP conformance suite drives: ``client.py <server-url>``.

The suite (npm ``@modelcontextprotocol/conformance``) starts a scenario server, then
runs this script with the server's URL as its last argument and these variables set:

* ``MCP_CONFORMANCE_SCENARIO``: the scenario's name;
* ``MCP_CONFORMANCE_PROTOCOL_VERSION``: the revision the scenario runs at; it becomes
  ``Config.protocol_versions`` and sansmcp negotiates inside it (the client never
  hand-rolls a lifecycle);
* ``MCP_CONFORMANCE_CONTEXT`` (some scenarios): JSON with scenario data, such as the
  tool calls ``http-custom-headers`` wants made.

Everything goes through sansmcp's public API.  The embedder's answer to an input
request is part of that API: the elicitation scenarios are answered with the
requested schema's defaults.  Exit status 0 means every step the scenario asks for
completed; the suite itself judges what went over the wire.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import sys
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sansmcp import CallResult, Config, McpError, OAuth, Tool, Unauthorized
from sansmcp.io_adapters.asyncio import Client, Conn

#: Capabilities declared by scenarios whose server asks for input (elicitation).
ELICITATION_CAPABILITIES: Mapping[str, Any] = {"elicitation": {"form": {}}}


def schema_defaults(schema: Any) -> dict[str, Any]:
    """The ``default`` of every top-level property of a requested schema that has one."""
    if not isinstance(schema, Mapping):
        return {}
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {
        name: spec["default"]
        for name, spec in properties.items()
        if isinstance(spec, Mapping) and "default" in spec
    }


async def answer_with_defaults(
    requests: Mapping[str, Mapping[str, Any]],
) -> Mapping[str, Any] | None:
    """An embedder that accepts every form elicitation with the schema's defaults.

    Requests of any other kind (sampling, roots) are left unanswered: this embedder
    has no surface for them, so sansmcp ends the call as it would without a handler.
    """
    answers: dict[str, Any] = {}
    for key, request in requests.items():
        if request.get("method") != "elicitation/create":
            return None
        params = request.get("params")
        schema = params.get("requestedSchema") if isinstance(params, Mapping) else None
        answers[key] = {"action": "accept", "content": schema_defaults(schema)}
    return answers


def arguments(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value).encode()


def tool_named(tools: list[Tool], name: str) -> Tool:
    for tool in tools:
        if tool.name == name:
            return tool
    raise SystemExit(f"the server listed no tool named {name!r}: {[t.name for t in tools]}")


def expect_ok(name: str, result: CallResult) -> None:
    if result.is_error:
        raise SystemExit(f"tool {name!r} answered with isError: {result.content!r}")
    log(f"called {name}: {[block.text for block in result.content]!r}")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- scenarios ------------------------------------------------------------------

Scenario = Callable[[Conn, Mapping[str, Any]], Awaitable[None]]


async def list_only(conn: Conn, context: Mapping[str, Any]) -> None:
    tools = await conn.list_tools()
    log(f"listed {[tool.name for tool in tools]} ({conn.protocol_version})")


async def tools_call(conn: Conn, context: Mapping[str, Any]) -> None:
    tool_named(await conn.list_tools(), "add_numbers")
    expect_ok("add_numbers", await conn.call_tool("add_numbers", arguments({"a": 5, "b": 3})))


async def sse_retry(conn: Conn, context: Mapping[str, Any]) -> None:
    tool_named(await conn.list_tools(), "test_reconnection")
    expect_ok("test_reconnection", await conn.call_tool("test_reconnection"))


async def elicitation_defaults(conn: Conn, context: Mapping[str, Any]) -> None:
    name = "test_client_elicitation_defaults"
    tool_named(await conn.list_tools(), name)
    expect_ok(name, await conn.call_tool(name))


async def standard_headers(conn: Conn, context: Mapping[str, Any]) -> None:
    tools = await conn.list_tools()
    for name in ("test_headers", "my-hyphenated-tool"):
        tool_named(tools, name)
        expect_ok(name, await conn.call_tool(name))


async def custom_headers(conn: Conn, context: Mapping[str, Any]) -> None:
    tools = await conn.list_tools()
    calls = context.get("toolCalls")
    if not isinstance(calls, list) or not calls:
        raise SystemExit("MCP_CONFORMANCE_CONTEXT names no toolCalls")
    for call in calls:
        name = call["name"]
        tool_named(tools, name)
        expect_ok(name, await conn.call_tool(name, arguments(call.get("arguments") or {})))


async def invalid_tool_headers(conn: Conn, context: Mapping[str, Any]) -> None:
    tools = await conn.list_tools()
    log(f"skipped: {[(s.name, s.reason) for s in conn.skipped_tools]}")
    if not any(tool.name == "valid_tool" for tool in tools):
        raise SystemExit("valid_tool was not kept")
    # Call whatever survived validation: a tool with a bad x-mcp-header must not.
    for tool in tools:
        expect_ok(tool.name, await conn.call_tool(tool.name, arguments({"region": "us-west1"})))


async def schema_preservation(conn: Conn, context: Mapping[str, Any]) -> None:
    tools = await conn.list_tools()
    focal = tool_named(tools, "json_schema_2020_12_tool")
    tool_named(tools, "json_schema_echo")
    # The schema goes back as the bytes sansmcp kept, spliced in verbatim.
    body = b'{"schema":' + focal.input_schema + b"}"
    expect_ok("json_schema_echo", await conn.call_tool("json_schema_echo", body))


async def request_state(conn: Conn, context: Mapping[str, Any]) -> None:
    tools = await conn.list_tools()
    for name in (
        "test_mrtr_echo_state",
        "test_mrtr_no_state",
        "test_mrtr_unrelated",
        "test_mrtr_no_result_type",
    ):
        tool_named(tools, name)
        expect_ok(name, await conn.call_tool(name))


async def auth_steps(conn: Conn, context: Mapping[str, Any]) -> None:
    """List the tools, then call ``test-tool`` (a step-up scenario asks more scope for it)."""
    tools = await conn.list_tools()
    log(f"listed {[tool.name for tool in tools]} ({conn.protocol_version})")
    if any(tool.name == "test-tool" for tool in tools):
        expect_ok("test-tool", await conn.call_tool("test-tool"))


def follow_once(url: str) -> str:
    """The embedder's authorization step, as the suite's mock expects it: GET the
    authorization URL, do not follow its redirect, hand back the ``Location``."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname not in ("localhost", "127.0.0.1"):
        raise SystemExit(f"refusing to visit a non-loopback authorization URL {url!r}")
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=10)
    try:
        connection.request("GET", parts.path + ("?" + parts.query if parts.query else ""))
        response = connection.getresponse()
        location = response.getheader("location")
        response.read()
    finally:
        connection.close()
    if not location:
        raise SystemExit(f"the authorization endpoint answered {response.status} without Location")
    log(f"authorized: redirected to {location[:120]}")
    return location


async def authorize_step(url: str) -> str:
    return await asyncio.to_thread(follow_once, url)


#: auth scenarios whose correct outcome is a refusal: scenario -> Unauthorized.cause
AUTH_REFUSALS: dict[str, str] = {
    "auth/resource-mismatch": "resource_mismatch",
    "auth/scope-retry-limit": "insufficient_scope",
    "auth/iss-supported-missing": "iss_mismatch",
    "auth/iss-wrong-issuer": "iss_mismatch",
    "auth/iss-unexpected": "iss_mismatch",
    "auth/iss-normalized": "iss_mismatch",
    "auth/metadata-issuer-mismatch": "issuer_mismatch",
}

#: the client ID metadata document URL the suite's basic-cimd scenario expects
CIMD_URL = "https://conformance-test.local/client-metadata.json"

AUTH_SCENARIOS = (
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/wif-jwt-bearer",
    "auth/enterprise-managed-authorization",
    "auth/dpop",
    "auth/dpop-nonce",
)


def oauth_for(scenario: str, context: Mapping[str, Any]) -> OAuth:
    """The embedder's OAuth configuration for one auth scenario."""
    if scenario == "auth/client-credentials-basic":
        return OAuth(
            grant="client_credentials",
            client_id=context["client_id"],
            client_secret=context["client_secret"],
        )
    if scenario == "auth/enterprise-managed-authorization":
        return OAuth(
            grant="enterprise",
            client_id=context["client_id"],
            client_secret=context["client_secret"],
            assertion=context["idp_id_token"],
            idp_token_endpoint=context["idp_token_endpoint"],
            idp_client_id=context["idp_client_id"],
        )
    if scenario == "auth/wif-jwt-bearer":
        return OAuth(
            grant="jwt_bearer", client_id=context["client_id"], assertion=context["valid_jwt"]
        )
    if scenario == "auth/client-credentials-jwt":
        from sansmcp.oauth_keys import Es256Key

        return OAuth(
            grant="client_credentials",
            client_id=context["client_id"],
            signer=Es256Key.from_pem(context["private_key_pem"]),
        )
    if scenario == "auth/pre-registration":
        return OAuth(
            client_id=context["client_id"],
            client_secret=context["client_secret"],
            issuer=context.get("issuer"),
            redirect_uri="http://localhost:3000/callback",
            authorize=authorize_step,
        )
    dpop_key = None
    if scenario in ("auth/dpop", "auth/dpop-nonce"):
        from sansmcp.oauth_keys import Es256Key

        dpop_key = Es256Key.generate()
    return OAuth(
        client_name="sansmcp conformance client",
        client_metadata_url=CIMD_URL if scenario == "auth/basic-cimd" else None,
        redirect_uri="http://localhost:3000/callback",
        authorize=authorize_step,
        dpop_key=dpop_key,
    )


#: scenario name -> (steps, whether the embedder answers elicitations)
SCENARIOS: dict[str, tuple[Scenario, bool]] = {
    "initialize": (list_only, False),
    "tools_call": (tools_call, False),
    "sse-retry": (sse_retry, False),
    "elicitation-sep1034-client-defaults": (elicitation_defaults, True),
    "request-metadata": (list_only, False),
    "http-standard-headers": (standard_headers, False),
    "http-custom-headers": (custom_headers, False),
    "http-invalid-tool-headers": (invalid_tool_headers, False),
    "json-schema-ref-no-deref": (list_only, False),
    "json-schema-2020-12-preservation": (schema_preservation, False),
    "sep-2322-client-request-state": (request_state, True),
    **{name: (auth_steps, False) for name in AUTH_SCENARIOS},
}


async def run(url: str, scenario: str, version: str | None, context: Mapping[str, Any]) -> None:
    steps, answers_input = SCENARIOS[scenario]
    client = (
        Client(
            allow_loopback=True,
            input_handler=answer_with_defaults,
            capabilities=ELICITATION_CAPABILITIES,
        )
        if answers_input
        else Client(allow_loopback=True)
    )
    oauth = oauth_for(scenario, context) if scenario.startswith("auth/") else None
    config = Config(url=url, protocol_versions=[version] if version else None, oauth=oauth)
    async with client, client.connect(config) as conn:
        log(f"connected to {url} at {conn.protocol_version}")
        await steps(conn, context)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        log("usage: client.py <server-url>  (MCP_CONFORMANCE_SCENARIO names the scenario)")
        return 2
    url = argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    if scenario not in SCENARIOS:
        log(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
        return 2
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") or None
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    try:
        asyncio.run(run(url, scenario, version, context))
    except Unauthorized as error:
        expected = AUTH_REFUSALS.get(scenario)
        if expected is not None and error.cause == expected:
            log(f"{scenario}: refused as expected: {error.cause}: {error}")
            return 0
        log(f"{scenario}: Unauthorized(cause={error.cause!r}): {error!r}")
        return 1
    except McpError as error:
        log(f"{scenario}: {type(error).__name__}: {error!r}")
        return 1
    if scenario in AUTH_REFUSALS:
        log(f"{scenario}: expected a refusal ({AUTH_REFUSALS[scenario]}), the steps completed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
