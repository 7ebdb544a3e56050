"""OAuth through the pure ClientDriver: the fetches go to the authorization server's
origin through the pool and the dial guard; the person's step is a Deliver."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from sansmcp import CallerError, Config, ConnectionFailed, OAuth, Unauthorized
from sansmcp.core.driver import ClientDriver, Connect, Deliver
from sansmcp.core.http import HttpRequest
from sansmcp.core.mcp import StartExchange
from sansmcp.core.oauth.store import AuthorizationNeeded
from sansmcp.core.url import Origin

from .fakemcp import Response
from .oauth_world import REDIRECT, World, counter_bytes
from .test_driver import Net

MCP_URL = "https://mcp.test/mcp"
AS_URL = "http://127.0.0.1:9000"
ANY = Origin(scheme="http", host="x", port=1)


@dataclass
class OAuthNet(Net):
    world: World | None = None
    has_step: bool = True  # the embedder has an authorization step

    def answer(self, command: Deliver) -> None:
        item = command.item
        if not isinstance(item, AuthorizationNeeded):  # pragma: no cover - OAuth tests only
            super().answer(command)
            return
        assert self.world is not None
        reply = self.world.person(item.url) if self.has_step else None
        self.driver.authorized(command.conn_id, item.auth_id, reply, now=self.now)


def mcp_side(world: World) -> Any:
    def handle(request: HttpRequest) -> Response:
        path = request.target.decode()
        origin = ANY if path.startswith("/.well-known/") else None
        return world(StartExchange(exchange_id=0, request=request, deadline=0.0, origin=origin))

    return handle


def as_side(world: World) -> Any:
    def handle(request: HttpRequest) -> Response:
        return world(StartExchange(exchange_id=0, request=request, deadline=0.0, origin=ANY))

    return handle


def make_net(world: World, *, allow_loopback: bool = True, **kw: Any) -> OAuthNet:
    driver = ClientDriver(allow_loopback=allow_loopback, random_bytes=counter_bytes())
    return OAuthNet(
        driver,
        handlers={443: mcp_side(world), 9000: as_side(world)},
        dns={"mcp.test": ["93.184.216.34"]},
        world=world,
        **kw,
    )


def oauth_world(**kw: Any) -> World:
    return World(
        resource=MCP_URL, authorization_servers=[AS_URL], issuer=AS_URL, as_url=AS_URL, **kw
    )


def test_the_authorization_rides_the_driver_to_the_servers_origin() -> None:
    world = oauth_world()
    net = make_net(world)
    view = net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT))
    assert net.ok("connect", view) is None
    assert net.ok("list_tools", view)
    connects = [(c.address, c.port) for c in net.sockets(Connect)]
    assert ("127.0.0.1", 9000) in connects and ("93.184.216.34", 443) in connects
    (deliver,) = net.delivered
    assert isinstance(deliver.item, AuthorizationNeeded) and deliver.deadline == math.inf
    assert [p for _, _, p in world.log].count("/token") == 1


def test_the_guard_refuses_an_authorization_server_on_loopback_before_any_packet() -> None:
    world = oauth_world()
    net = make_net(world, allow_loopback=False)
    view = net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT))
    error = net.failure("connect", view)
    assert isinstance(error, ConnectionFailed) and error.cause == "refused_address"
    assert all(c.address != "127.0.0.1" for c in net.sockets(Connect))
    assert [h for h, _, _ in world.log] == ["mcp.test", "mcp.test"]  # never the AS


@pytest.mark.parametrize("address", ["169.254.169.254", "10.1.2.3", "[fd00::1]"])
def test_the_guard_refuses_metadata_private_and_link_local_endpoints(address: str) -> None:
    world = oauth_world()
    world.meta_extra["token_endpoint"] = f"https://{address}/token"
    net = make_net(world)
    view = net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT))
    error = net.failure("connect", view)
    assert isinstance(error, ConnectionFailed) and error.cause == "refused_address"
    assert "/token" not in [p for _, _, p in world.log]


def test_without_a_step_the_driver_fails_with_the_url() -> None:
    world = oauth_world()
    net = make_net(world, has_step=False)
    view = net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT))
    error = net.failure("connect", view)
    assert isinstance(error, Unauthorized) and error.cause == "authorization_required"
    assert error.authorization_url and error.authorization_url.startswith(AS_URL + "/authorize?")


def test_an_answer_for_a_gone_conn_is_ignored() -> None:
    net = make_net(oauth_world())
    net.driver.authorized(12345, 1, None, now=0.0)
    assert net.driver.next_command() is None


def test_oauth_needs_randomness_and_an_oauth_value() -> None:
    with pytest.raises(CallerError, match="randomness"):
        ClientDriver().open(Config(url=MCP_URL, oauth=OAuth()), now=0.0)
    with pytest.raises(CallerError, match="must be an OAuth"):
        ClientDriver().open(Config(url=MCP_URL, oauth="token"), now=0.0)  # type: ignore[arg-type]
    with pytest.raises(CallerError, match="plain http"):
        ClientDriver(random_bytes=counter_bytes()).open(
            Config(url="http://mcp.test/mcp", oauth=OAuth()), now=0.0
        )


def test_without_oauth_a_401_raises_as_before() -> None:
    world = oauth_world()
    net = make_net(world)
    view = net.open(MCP_URL)
    error = net.failure("connect", view)
    assert isinstance(error, Unauthorized) and error.cause is None and error.status == 401
    assert len(world.log) == 1


def test_complete_authorization_through_the_driver() -> None:
    world = oauth_world()
    net = make_net(world, has_step=False)
    oauth = OAuth(redirect_uri=REDIRECT)
    view = net.open(MCP_URL, oauth=oauth)
    error = net.failure("connect", view)
    assert isinstance(error, Unauthorized) and error.authorization_url is not None
    redirect = world.person(error.authorization_url)
    later = net.open(MCP_URL, oauth=oauth)
    assert net.run("complete_authorization", later, redirect).error is None
    assert net.ok("list_tools", later)
    plain = net.open(MCP_URL)
    with pytest.raises(CallerError, match="needs a Config with oauth"):
        net.driver.complete_authorization(plain.conn_id, redirect, now=net.now)
