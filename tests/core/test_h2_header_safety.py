"""Every server-chosen or hook-returned value that can reach a request header, fed bad over
HTTP/2 through the pure driver: each is refused, classified, before it reaches the wire.

The HTTP/2 wire no longer has h2 validate our request headers (``sansmcp.core.wire.
h2_headers`` checks each field once per connection, as a backstop).  That is safe only
because every value from outside is checked by the layer that takes it; these tests feed a
bad one through each path, over h2c (``http2_prior_knowledge``; the OAuth ones over TLS
with ALPN h2 to the MCP server and h2c to the authorization server), and check the exact
classified error or refusal -- and that every request header the server received is one
``check_field`` accepts (the server is h2's own, validating what it receives).

A server that *sends* bad header values needs an h2 server side that does not check its
own output: :class:`LaxH2Server` (CR, LF and NUL never get past our h2's inbound checks:
``ConnectionFailed(cause="framing")``; other controls, spaces, obs-text reach the layer
that takes the value).
"""

from __future__ import annotations

import re
from typing import Any

import h2.config
import h2.connection
import pytest

from sansmcp import CallerError, ConnectionFailed, OAuth, ServerAnswered, Unauthorized
from sansmcp.core.driver import ClientDriver
from sansmcp.core.http import HttpRequest, header_value
from sansmcp.core.oauth.store import MemoryTokenStore, Tokens
from sansmcp.core.wire.h2_headers import check_field

from . import test_driver
from .fakemcp import FakeServer, Response, json_response, result, sse_response, tool
from .oauth_world import REDIRECT, World, counter_bytes
from .test_driver import URL, Net
from .test_oauth_driver import AS_URL, MCP_URL, OAuthNet, as_side, mcp_side

LEGACY = "2025-11-25"


class LaxH2Server(test_driver.H2ServerSocket):
    """The h2c server of ``test_driver``, sending header values as they are."""

    def __init__(self, handler: Any, scheme: bytes) -> None:
        super().__init__(handler, scheme)
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=False,
                header_encoding=None,
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
            )
        )
        self.h2.initiate_connection()


@pytest.fixture(autouse=True)
def lax_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_driver, "H2ServerSocket", LaxH2Server)


def h2_net(server: Any, **kw: Any) -> Net:
    driver = ClientDriver(allow_loopback=True, http2_prior_knowledge=True)
    return Net(driver, handlers={8000: server}, h2c=True, **kw)


def sent_headers_are_valid(requests: list[HttpRequest]) -> None:
    assert requests
    for request in requests:
        for name, value in request.headers:
            check_field(name, value)


def oauth_net(world: World, seen: list[HttpRequest] | None = None) -> OAuthNet:
    """The MCP server over TLS (ALPN h2), the authorization server over h2c; every request
    either received goes to ``seen``."""
    driver = ClientDriver(
        allow_loopback=True, random_bytes=counter_bytes(), http2_prior_knowledge=True
    )
    log = seen if seen is not None else []

    def recording(handler: Any) -> Any:
        def handle(request: HttpRequest) -> Response:
            log.append(request)
            return handler(request)  # type: ignore[no-any-return]

        return handle

    return OAuthNet(
        driver,
        handlers={443: recording(mcp_side(world)), 9000: recording(as_side(world))},
        dns={"mcp.test": ["93.184.216.34"]},
        world=world,
        h2c=True,
        alpn="h2",
    )


def oauth_world(**kw: Any) -> World:
    return World(
        resource=MCP_URL, authorization_servers=[AS_URL], issuer=AS_URL, as_url=AS_URL, **kw
    )


# ---------------------------------------------------------------- Mcp-Session-Id


@pytest.mark.parametrize("session", ["a b", "a\x01b", "a\x7f", "\u00e9", "a\tb"])
def test_a_session_id_that_is_not_visible_ascii_ends_the_connect(session: str) -> None:
    server = FakeServer(modern=False, legacy=LEGACY, session=session)
    net = h2_net(server)
    error = net.failure("connect", net.open(URL))
    assert isinstance(error, ServerAnswered) and error.reason == "bad_session_id"
    assert str(error) == "the server assigned an unusable session id"
    assert len(server.requests) == 2  # the probe and initialize: nothing carried it
    sent_headers_are_valid(server.requests)


@pytest.mark.parametrize(
    ("session", "what"),
    [("a\r\nb", "Illegal character '\r'"), (" a", "surrounded by whitespace"),
     ("a\x00", "Illegal character '\x00'")],
)  # fmt: skip
def test_cr_lf_nul_in_a_session_id_never_get_past_h2(session: str, what: str) -> None:
    server = FakeServer(modern=False, legacy=LEGACY, session=session)
    net = h2_net(server)
    error = net.failure("connect", net.open(URL))
    assert isinstance(error, ConnectionFailed) and error.cause == "framing"
    assert str(error).startswith("server broke the HTTP/2 protocol: ") and what in str(error)
    sent_headers_are_valid(server.requests)


def test_a_session_id_over_the_header_bound_is_refused_by_the_wire() -> None:
    server = FakeServer(modern=False, legacy=LEGACY, session="x" * (64 * 1024 + 1))
    net = h2_net(server)
    error = net.failure("connect", net.open(URL))
    assert isinstance(error, ConnectionFailed) and error.cause == "budget"
    assert error.bound == "max_header_bytes"


def test_a_good_session_id_is_echoed() -> None:  # the path above, when the value is good
    server = FakeServer(modern=False, legacy=LEGACY, session="s-1.~!")
    net = h2_net(server)
    view = net.open(URL)
    net.ok("connect", view)
    net.ok("list_tools", view)
    assert header_value(server.requests[-1].headers, b"mcp-session-id") == b"s-1.~!"
    sent_headers_are_valid(server.requests)


# ---------------------------------------------------------------- MCP-Protocol-Version


@pytest.mark.parametrize("version", [LEGACY + " ", "1\x01", LEGACY + "\r\n", "\u00e9"])
def test_a_chosen_version_we_did_not_offer_ends_the_connect(version: str) -> None:
    server = FakeServer(modern=False, legacy=version)
    net = h2_net(server)
    error = net.failure("connect", net.open(URL))
    assert isinstance(error, ServerAnswered) and error.reason == "unsupported_version"
    assert str(error) == (
        f"the server chose protocol version {version!r}, which we do not speak "
        "(we offered 2025-11-25, 2025-06-18, 2025-03-26)"
    )
    sent_headers_are_valid(server.requests)
    assert all(
        header_value(r.headers, b"mcp-protocol-version") in (None, b"2026-07-28")
        for r in server.requests
    )


def test_modern_versions_the_server_lists_are_matched_not_sent() -> None:
    server = FakeServer()
    server.overrides["server/discover"] = lambda request, body: json_response(
        result(body["id"], {"resultType": "complete", "capabilities": {"tools": {}},
                            "supportedVersions": ["2026-07-28\r\n", "x y"]})
    )  # fmt: skip
    net = h2_net(server)
    error = net.failure("connect", net.open(URL))
    assert isinstance(error, ServerAnswered) and error.reason == "unsupported_version"
    assert str(error).startswith("the server supports no protocol version in common with us")
    assert [header_value(r.headers, b"mcp-protocol-version") for r in server.requests] == [
        b"2026-07-28"
    ]


# ---------------------------------------------------------------- Last-Event-ID


def breaking_listing(server: FakeServer, event_id: bytes) -> list[HttpRequest]:
    """A legacy listing whose stream ends after an event carrying ``event_id``; the
    resumption GET answers it."""
    gets: list[HttpRequest] = []
    ids: dict[str, Any] = {}

    def listing(request: HttpRequest, body: Any) -> Response:
        ids["id"] = body["id"]
        return sse_response(b"id: " + event_id + b"\nretry: 10\ndata:\n\n")

    def get(request: HttpRequest, body: Any) -> Response:
        gets.append(request)
        return sse_response(result(ids["id"], {"tools": []}))

    server.overrides["tools/list"] = listing
    server.overrides["GET"] = get
    return gets


@pytest.mark.parametrize("event_id", [b"ev 1\x01", b"\xe9v", b"a\x7f", b"\x1b[0m"])
def test_an_event_id_that_cannot_be_echoed_is_not_resumed_from(event_id: bytes) -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    gets = breaking_listing(server, event_id)
    net = h2_net(server)
    view = net.open(URL)
    net.ok("connect", view)
    error = net.failure("list_tools", view)
    assert isinstance(error, ConnectionFailed) and error.cause == "stream_broken"
    assert str(error) == "the server ended the event stream without a response"
    assert gets == []  # the id was treated as absent: nothing to resume from
    sent_headers_are_valid(server.requests)


def test_a_good_event_id_is_resumed_from() -> None:
    server = FakeServer(modern=False, legacy=LEGACY)
    gets = breaking_listing(server, b"ev-1")
    net = h2_net(server)
    view = net.open(URL)
    net.ok("connect", view)
    assert net.ok("list_tools", view) == []
    assert [header_value(g.headers, b"last-event-id") for g in gets] == [b"ev-1"]


# ---------------------------------------------------------------- x-mcp-header, Mcp-Name


@pytest.mark.parametrize("annotation", ["Reg ion", "a\x01", "\u00e9", "a:b", ""])
def test_an_x_mcp_header_name_that_is_not_a_token_skips_its_tool(annotation: str) -> None:
    schema = {"type": "object",
              "properties": {"region": {"type": "string", "x-mcp-header": annotation}}}  # fmt: skip
    server = FakeServer(tools=[tool("echo"), tool("geo", inputSchema=schema)])
    net = h2_net(server)
    view = net.open(URL)
    net.ok("connect", view)
    assert [t.name for t in net.ok("list_tools", view)] == ["echo"]
    (skipped,) = view.skipped_tools
    assert skipped.name == "geo" and skipped.reason.startswith("invalid x-mcp-header: ")
    net.ok("call_tool", view, "geo", b'{"region": "x"}')  # called anyway: no Mcp-Param
    assert [n for n, _ in server.requests[-1].headers if n.startswith(b"mcp-param-")] == []
    sent_headers_are_valid(server.requests)


def test_param_values_and_tool_names_are_encoded_not_sent_raw() -> None:
    schema = {"type": "object",
              "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}  # fmt: skip
    server = FakeServer(tools=[tool("geo", inputSchema=schema)])
    net = h2_net(server)
    view = net.open(URL)
    net.ok("connect", view)
    net.ok("list_tools", view)
    net.ok("call_tool", view, "geo", b'{"region": "us\\r\\nwest\\u0000 "}')
    net.ok("call_tool", view, "a\r\nb\x01", b"{}")
    geo, other = server.requests[-2:]
    assert header_value(geo.headers, b"mcp-param-region") == b"=?base64?dXMNCndlc3QAIA==?="
    assert header_value(other.headers, b"mcp-name") == b"=?base64?YQ0KYgE=?="
    sent_headers_are_valid(server.requests)


# ---------------------------------------------------------------- the caller's values


@pytest.mark.parametrize(
    ("headers", "message"),
    [({"X-A": "v\r\n"}, "header 'X-A' has a control character in its value"),
     ({"X A": "v"}, "header name 'X A' is not an HTTP token"),
     ({":path": "/"}, "header name ':path' is not an HTTP token"),
     ({"x-a": "\x01"}, "header 'x-a' has a control character in its value"),
     ({"x-a": "a\x00b"}, "header 'x-a' has a control character in its value"),
     ({"x-a": " v"}, "header 'x-a' has whitespace at the start or end of its value"),
     ({"\u00e9": "v"}, "header '\u00e9' is not ASCII / Latin-1"),
     ({"x-a": "\u20ac"}, "header 'x-a' is not ASCII / Latin-1")],
)  # fmt: skip
def test_config_headers_are_checked_before_any_io(headers: dict[str, str], message: str) -> None:
    net = h2_net(FakeServer())
    with pytest.raises(CallerError) as caught:
        net.open(URL, headers=headers)
    assert str(caught.value) == message
    assert net.log == []


def test_config_headers_go_out_lower_cased() -> None:
    server = FakeServer()
    net = h2_net(server)
    view = net.open(URL, headers={"X-Tenant": "a b\t\u00e9"})  # Latin-1 obs-text is allowed
    net.ok("connect", view)
    assert header_value(server.requests[-1].headers, b"x-tenant") == b"a b\t\xe9"
    sent_headers_are_valid(server.requests)


@pytest.mark.parametrize("token", ["a b", "a\r\n", "", "\u00e9", "a\x7f"])
def test_a_bearer_token_that_is_not_visible_ascii_is_a_caller_error(token: str) -> None:
    net = h2_net(FakeServer())
    with pytest.raises(CallerError, match=r"^the bearer token must be non-empty visible ASCII$"):
        net.open(URL, bearer_token=token)


# ---------------------------------------------------------------- OAuth


def test_oauth_over_h2_sends_only_valid_headers() -> None:  # the paths below, when good
    world = oauth_world()
    seen: list[HttpRequest] = []
    net = oauth_net(world, seen)
    view = net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT))
    assert net.ok("connect", view) is None
    assert [p for _, _, p in world.log] == [
        "/mcp", "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-authorization-server", "/register", "/token", "/mcp",
    ]  # fmt: skip
    assert header_value(world.mcp.requests[-1].headers, b"authorization") == b"Bearer t-1"
    sent_headers_are_valid(world.mcp.requests)
    sent_headers_are_valid(seen)


@pytest.mark.parametrize("token", ["t\r\n1", "t 1", "t\x01", "\u00e9", ""])
def test_a_token_answer_that_cannot_be_sent_is_a_bad_document(token: str) -> None:
    world = oauth_world()
    world.overrides["/token"] = lambda request: json_response(
        {"access_token": token, "token_type": "Bearer"}
    )
    net = oauth_net(world)
    error = net.failure("connect", net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT)))
    assert isinstance(error, ConnectionFailed) and error.cause == "bad_document"
    assert str(error) == "the token answer has no usable access_token"
    assert [p for _, _, p in world.log][-1] == "/token"  # never sent to the MCP server


class BadStore(MemoryTokenStore):
    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def tokens(self, resource: str) -> Tokens | None:
        return Tokens(access_token=self.token)


@pytest.mark.parametrize("token", ["t\r\n1", "t 1", "\u00e9", "t\x00"])
def test_a_token_store_returning_an_unsendable_token_is_a_caller_error(token: str) -> None:
    world = oauth_world()
    net = oauth_net(world)
    with pytest.raises(
        CallerError, match=r"^the token store returned an access token that cannot be sent$"
    ):
        net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT, store=BadStore(token)))
    assert world.log == []


@pytest.mark.parametrize(
    ("url", "char"),
    [("https://mcp.test/.well-known/x\x01y", "'\\x01' at offset 30"),
     ("https://mcp.test/a b", "' ' at offset 18"), ("https://mc\x7fp.test/x", "'\\x7f'")],
)  # fmt: skip
def test_a_resource_metadata_url_with_controls_is_a_bad_document(url: str, char: str) -> None:
    world = oauth_world(challenge=f'Bearer resource_metadata="{url}"')
    net = oauth_net(world)
    error = net.failure("connect", net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT)))
    assert isinstance(error, ConnectionFailed) and error.cause == "bad_document"
    assert str(error).startswith(
        f"the resource_metadata URL: unusable URL (endpoint URL contains {char}"
    )
    assert [p for _, _, p in world.log] == ["/mcp"]  # nothing was fetched from it


def test_a_resource_metadata_url_outside_ascii_is_percent_encoded() -> None:
    world = oauth_world(challenge='Bearer resource_metadata="https://mcp.test/\u00e9"')
    net = oauth_net(world)
    error = net.failure("connect", net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT)))
    assert isinstance(error, Unauthorized) and error.cause == "issuer_mismatch"
    # the header's UTF-8 bytes, read as Latin-1, went out percent-encoded in :path
    assert [p for _, _, p in world.log][1] == "/%C3%83%C2%A9"


# ---------------------------------------------------------------- DPoP


def dpop_world(nonce: str) -> Any:
    from .test_oauth_dpop import DpopWorld

    return DpopWorld(resource=MCP_URL, authorization_servers=[AS_URL], issuer=AS_URL,
                     as_url=AS_URL, rs_nonces=[nonce])  # fmt: skip


def proofs_are_jws(seen: list[HttpRequest]) -> None:
    """Every DPoP header the servers received is a compact JWS: base64url parts."""
    proofs = [p for r in seen if (p := header_value(r.headers, b"dpop")) is not None]
    assert len(proofs) >= 3
    for proof in proofs:
        assert re.fullmatch(rb"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", proof)


@pytest.mark.parametrize("nonce", ["n\x01", "n \u00e9", "n\x7f", "n" * 513])
def test_a_dpop_nonce_that_cannot_be_kept_is_never_sent(nonce: str) -> None:
    from .test_oauth_dpop import Key

    world = dpop_world(nonce)
    seen: list[HttpRequest] = []
    net = oauth_net(world, seen)
    view = net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT, dpop_key=Key()))
    error = net.failure("connect", view)
    assert isinstance(error, Unauthorized) and error.cause == "token_rejected"
    assert str(error).startswith("the server refused the token after 3 authorizations")
    assert [claims.get("nonce") for _, claims in world.mcp_proofs] == [None, None, None]
    proofs_are_jws(seen)
    sent_headers_are_valid(seen)


def test_a_good_dpop_nonce_goes_into_the_proof_not_a_header() -> None:
    from .test_oauth_dpop import Key

    world = dpop_world("n-1")
    seen: list[HttpRequest] = []
    net = oauth_net(world, seen)
    view = net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT, dpop_key=Key()))
    assert net.ok("connect", view) is None
    assert [claims.get("nonce") for _, claims in world.mcp_proofs] == [None, "n-1"]
    proofs_are_jws(seen)
    sent_headers_are_valid(seen)
