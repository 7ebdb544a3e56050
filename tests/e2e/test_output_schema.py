"""``structuredContent`` checked against ``outputSchema`` (issue 15, part 2), every backend.

Against the official Python SDK server (``tests/e2e/server.py --output-schemas``) in
both eras: a pydantic-typed tool the SDK validates itself (conforms: ``validated`` is
True), a tool whose hand-set ``outputSchema`` its raw result breaks
(``ServerAnswered``, reason ``output_schema_mismatch``, naming ``/total`` and
``minimum``), one with no ``structuredContent`` at all, an ``isError`` result (not
validated), the switch that turns validation off, and ``Config.output_schemas``
for a Conn that calls without listing.
"""

from __future__ import annotations

import json

import pytest

from sansmcp import Config, ServerAnswered
from sansmcp.core.limits import Limits

from .conftest import Backend, Launcher, Server

VERSIONS = {"modern": None, "legacy": ["2025-11-25"]}


@pytest.fixture(scope="module", params=["stateless-json", "stateful-sse"])
def shaped_server(request: pytest.FixtureRequest, launch: Launcher) -> Server:
    mode = ("--stateless", "--json") if request.param == "stateless-json" else ()
    return launch(*mode, "--output-schemas")


@pytest.mark.parametrize("era", list(VERSIONS))
def test_results_are_checked_against_the_listed_output_schema(
    backend: Backend, shaped_server: Server, era: str
) -> None:
    async def main() -> None:
        config = Config(url=shaped_server.url(), protocol_versions=VERSIONS[era])
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(config) as conn,
        ):
            tools = {tool.name: tool for tool in await conn.list_tools()}
            assert tools["shaped"].output_schema is not None
            assert tools["misshaped"].output_schema is not None

            shaped = await conn.call_tool("shaped", b'{"count": 3}')
            assert shaped.validated is True
            assert json.loads(shaped.structured_content or b"") == {
                "name": "report",
                "items": [0, 1, 2],
            }
            good = await conn.call_tool("misshaped", b'{"mode": "good"}')
            assert good.validated is True

            with pytest.raises(ServerAnswered) as bad:
                await conn.call_tool("misshaped", b'{"mode": "bad"}')
            assert bad.value.reason == "output_schema_mismatch"
            assert "at '/total' it fails 'minimum'" in str(bad.value)

            with pytest.raises(ServerAnswered) as missing:
                await conn.call_tool("misshaped", b'{"mode": "missing"}')
            assert missing.value.reason == "output_schema_mismatch"
            assert "has no structuredContent" in str(missing.value)

            error = await conn.call_tool("misshaped", b'{"mode": "error"}')
            assert error.is_error and error.validated is None  # isError: not validated

            echo = await conn.call_tool("echo", b'{"text": "x"}')  # an SDK-made schema too
            assert echo.validated is True
            whoami = await conn.call_tool("whoami", b"{}")
            assert whoami.validated is True

    backend.run(main)


def test_validation_can_be_turned_off(backend: Backend, shaped_server: Server) -> None:
    async def main() -> None:
        config = Config(url=shaped_server.url(), validate_structured_content=False)
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(config) as conn,
        ):
            await conn.list_tools()
            bad = await conn.call_tool("misshaped", b'{"mode": "bad"}')
            assert bad.validated is None
            assert json.loads(bad.structured_content or b"") == {"total": -1}

    backend.run(main)


@pytest.mark.parametrize("era", list(VERSIONS))
def test_config_output_schemas_serve_a_conn_that_does_not_list(
    backend: Backend, shaped_server: Server, era: str
) -> None:
    schema = {"type": "object", "properties": {"total": {"const": 3}}, "required": ["total"]}

    async def main() -> None:
        config = Config(
            url=shaped_server.url(),
            protocol_versions=VERSIONS[era],
            output_schemas={"misshaped": schema, "echo": json.dumps({"type": "object"}).encode()},
        )
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(config) as conn,
        ):
            good = await conn.call_tool("misshaped", b'{"mode": "good"}')
            assert good.validated is True
            with pytest.raises(ServerAnswered) as bad:
                await conn.call_tool("misshaped", b'{"mode": "bad"}')
            assert bad.value.reason == "output_schema_mismatch"
            assert "at '/total' it fails 'const'" in str(bad.value)
            plain = await conn.call_tool("add", b'{"a": 1, "b": 2}')
            assert plain.validated is None  # no schema known for it without a listing
            # once listed, the listing's schema is the one used
            await conn.list_tools()
            with pytest.raises(ServerAnswered) as listed:
                await conn.call_tool("misshaped", b'{"mode": "bad"}')
            assert "fails 'minimum'" in str(listed.value)

    backend.run(main)


def test_a_tight_budget_ends_a_conforming_check(backend: Backend, shaped_server: Server) -> None:
    async def main() -> None:
        config = Config(url=shaped_server.url())
        limits = Limits(max_validation_steps=40)
        async with (
            backend.Client(allow_loopback=True, limits=limits) as client,
            client.connect(config) as conn,
        ):
            await conn.list_tools()
            small = await conn.call_tool("shaped", b'{"count": 1}')
            assert small.validated is True
            with pytest.raises(ServerAnswered) as spent:
                await conn.call_tool("shaped", b'{"count": 200}')
            assert spent.value.reason == "validation_budget"
            assert (spent.value.bound, spent.value.limit) == ("max_validation_steps", 40)

    backend.run(main)
