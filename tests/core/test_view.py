"""``ConnView``: what an adapter may read of a Conn, each figure the machine's."""

from __future__ import annotations

from sansmcp.core.mcp import ConnSettings, McpMachine
from sansmcp.core.url import parse_endpoint
from sansmcp.core.view import ConnView

from .oauth_world import Runner, World
from .test_driver import URL


def test_the_view_reads_each_figure_from_its_machine() -> None:
    machine = McpMachine(ConnSettings(endpoint=parse_endpoint(URL)))
    view = ConnView(1, machine)
    assert view.protocol_version == machine.protocol_version
    assert view.ttl_ms == machine.ttl_ms
    assert view.cache_scope == machine.cache_scope
    assert view.tools_from_cache == machine.tools_from_cache
    assert view.notifications_dropped == machine.notifications_dropped
    assert view.busy == machine.busy


def test_an_oauth_conns_view_names_its_authorization_step() -> None:
    auth = Runner(World()).machine
    assert ConnView(1, auth.machine, auth).authorization_step() is auth.oauth.authorize
