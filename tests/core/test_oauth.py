"""The OAuth machine against a scripted world (pure): every step, check and bound."""

from __future__ import annotations

import itertools
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import CallerError, ConnectionFailed, Unauthorized
from sansmcp.core.mcp import Connected, StartExchange, ToolCalled, ToolsListed
from sansmcp.core.oauth.registration import usable_registration
from sansmcp.core.oauth.store import (
    AuthorizationNeeded,
    ClientRegistration,
    MemoryTokenStore,
    OAuth,
    Tokens,
)
from tests.tiers import examples

from .fakemcp import Response, json_response
from .oauth_world import AS, MCP, REDIRECT, Runner, World, reset


def connected(world: World, oauth: OAuth | None = None, **kw: Any) -> Runner:
    runner = Runner(world, oauth, **kw)
    assert isinstance(runner.run(runner.machine.connect), Connected)
    return runner


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


# ------------------------------------------------------------------ the happy paths


def test_discovery_registration_pkce_and_token_then_the_operation_again() -> None:
    world = World()
    runner = connected(world)
    paths = [(host, path) for host, _, path in world.log]
    assert paths[:6] == [
        ("mcp.example.com", "/mcp"),
        ("mcp.example.com", "/.well-known/oauth-protected-resource/mcp"),
        ("auth.example.com", "/.well-known/oauth-authorization-server"),
        ("auth.example.com", "/register"),
        ("auth.example.com", "/token"),
        ("mcp.example.com", "/mcp"),
    ]
    query = query_of(runner.asked[0])
    assert query["code_challenge_method"] == "S256"
    assert query["resource"] == MCP
    assert query["client_id"] == "dcr-client"
    assert "scope" not in query
    form = world.forms[0]
    assert form["resource"] == MCP and form["client_id"] == "dcr-client"
    registration = json.loads(world.bodies[3])
    assert registration["redirect_uris"] == [REDIRECT]
    assert registration["application_type"] == "native"
    assert isinstance(runner.run(runner.machine.list_tools), ToolsListed)
    assert not runner.machine.busy
    # every OAuth fetch names its origin; MCP requests do not
    starts = [o for o in runner.outputs if isinstance(o, StartExchange)]
    assert [s.origin is None for s in starts][:6] == [True, False, False, False, False, True]


def test_a_stored_token_is_sent_from_the_first_request() -> None:
    store = MemoryTokenStore()
    world = World()
    world.issued["kept"] = ""
    store.save_tokens(MCP, Tokens(access_token="kept"))
    runner = connected(world, OAuth(redirect_uri=REDIRECT, store=store))
    assert runner.asked == [] and [p for _, _, p in world.log] == ["/mcp"]


def test_the_named_resource_metadata_url_is_used() -> None:
    world = World(named_prm=True)
    connected(world)
    assert world.log[1][2] == "/.well-known/oauth-protected-resource"
    assert world.log[1][0] == "auth.example.com"


def test_root_prm_after_a_404_at_the_path_based_location() -> None:
    world = World(resource="https://mcp.example.com")
    world.overrides["/.well-known/oauth-protected-resource/mcp"] = lambda r: Response(status=404)
    connected(world)
    assert [p for _, _, p in world.log[1:3]] == [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ]


def test_issuer_with_a_path_inserts_it_and_tries_the_oidc_variants() -> None:
    world = World(authorization_servers=[f"{AS}/tenant"], issuer=f"{AS}/tenant")
    meta = world.metadata

    def oidc(request: Any) -> Response:
        return json_response(meta())

    world.overrides["/tenant/.well-known/openid-configuration"] = oidc
    connected(world)
    assert [p for _, _, p in world.log[2:5]] == [
        "/.well-known/oauth-authorization-server/tenant",
        "/.well-known/openid-configuration/tenant",
        "/tenant/.well-known/openid-configuration",
    ]


def test_no_prm_falls_back_to_the_server_root_then_the_default_endpoints() -> None:
    world = World(issuer="https://mcp.example.com")
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ):
        world.overrides[path] = lambda r: Response(status=404)
    world.overrides["/.well-known/oauth-authorization-server"] = lambda r: Response(status=404)
    world.overrides["/authorize"] = lambda r: Response(status=404)

    def register(request: Any) -> Response:
        return json_response({"client_id": "legacy"}, 201)

    def token(request: Any) -> Response:
        world.issued["legacy-token"] = ""
        return json_response({"access_token": "legacy-token", "token_type": "bearer"})

    world.overrides["/register"] = register
    world.overrides["/token"] = token
    runner = connected(world)
    assert runner.asked[0].startswith("https://mcp.example.com/authorize?")
    assert "resource" not in query_of(runner.asked[0])
    assert [h for h, _, p in world.log if p == "/token"] == ["mcp.example.com"]


def test_no_prm_with_root_metadata() -> None:
    world = World(issuer="https://mcp.example.com")
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ):
        world.overrides[path] = lambda r: Response(status=404)
    world.overrides["/.well-known/oauth-authorization-server"] = lambda r: json_response(
        world.metadata()
    )
    connected(world)
    assert world.log[3][:2] == ("mcp.example.com", "GET")


def test_pre_registered_client_with_client_secret_basic() -> None:
    world = World(meta_extra={"token_endpoint_auth_methods_supported": ["client_secret_basic"]})
    oauth = OAuth(client_id="pre id", client_secret="s:1", redirect_uri=REDIRECT)
    runner = connected(world, oauth)
    assert "/register" not in [p for _, _, p in world.log]
    assert query_of(runner.asked[0])["client_id"] == "pre id"
    assert "client_id" not in world.forms[0]


def test_pre_registered_client_with_client_secret_post() -> None:
    world = World(meta_extra={"token_endpoint_auth_methods_supported": ["client_secret_post"]})
    connected(world, OAuth(client_id="pre", client_secret="s", redirect_uri=REDIRECT))
    assert world.forms[0]["client_secret"] == "s"


def test_pre_registered_for_another_issuer_registers_here() -> None:
    world = World()
    connected(world, OAuth(client_id="pre", issuer="https://other.example", redirect_uri=REDIRECT))
    assert "/register" in [p for _, _, p in world.log]


def test_pre_registered_public_client_and_unlisted_secret_methods() -> None:
    world = World(meta_extra={"token_endpoint_auth_methods_supported": ["private_key_jwt"]})
    connected(world, OAuth(client_id="pre", client_secret="s", redirect_uri=REDIRECT))
    assert "client_id" not in world.forms[0]  # falls back to basic
    world = World()
    connected(world, OAuth(client_id="pub", redirect_uri=REDIRECT))
    assert world.forms[0]["client_id"] == "pub"


def test_client_id_metadata_document_when_supported() -> None:
    world = World(meta_extra={"client_id_metadata_document_supported": True})
    url = "https://app.example/client.json"
    runner = connected(world, OAuth(client_metadata_url=url, redirect_uri=REDIRECT))
    assert query_of(runner.asked[0])["client_id"] == url
    assert "/register" not in [p for _, _, p in world.log]


def test_a_stored_registration_is_reused_for_the_same_issuer() -> None:
    store = MemoryTokenStore()
    store.save_registration(AS, ClientRegistration(client_id="stored"))
    world = World()
    runner = connected(world, OAuth(store=store, redirect_uri=REDIRECT))
    assert query_of(runner.asked[0])["client_id"] == "stored"
    assert repr(store) == "MemoryTokenStore(1 tokens, 1 clients)"


def test_dcr_answer_decides_the_method() -> None:
    for answer, expected in (
        (
            {
                "client_id": "a",
                "client_secret": "x",
                "token_endpoint_auth_method": "client_secret_post",
            },
            "post",
        ),
        ({"client_id": "a", "client_secret": "x"}, "basic"),
        ({"client_id": "a", "client_secret": "x", "token_endpoint_auth_method": "weird"}, "basic"),
    ):
        world = World(
            meta_extra={
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                ]
            }
        )
        world.overrides["/register"] = lambda r, a=answer: json_response(a, 201)
        connected(world)
        if expected == "post":
            assert world.forms[0]["client_secret"] == "x"
        else:
            assert "client_secret" not in world.forms[0]
        assert json.loads(world.bodies[3])["token_endpoint_auth_method"] == "client_secret_basic"


# ------------------------------------------------------------------ scope


def test_scope_from_the_challenge_then_prm_then_configured() -> None:
    world = World(challenge='Bearer scope="a b"', prm_extra={"scopes_supported": ["p"]})
    assert query_of(connected(world).asked[0])["scope"] == "a b"
    world = World(prm_extra={"scopes_supported": ["p", "q"]})
    assert query_of(connected(world).asked[0])["scope"] == "p q"
    world = World()
    runner = connected(world, OAuth(scope="conf", redirect_uri=REDIRECT))
    assert query_of(runner.asked[0])["scope"] == "conf"


def test_offline_access_only_when_the_server_lists_it() -> None:
    world = World(
        prm_extra={"scopes_supported": ["p"]},
        meta_extra={"scopes_supported": ["p", "offline_access"]},
    )
    assert query_of(connected(world).asked[0])["scope"] == "p offline_access"


def test_step_up_keeps_earlier_scopes() -> None:
    world = World(challenge='Bearer scope="basic"')
    runner = connected(world)
    world.needed_scope = "write"
    assert isinstance(runner.run(runner.machine.call_tool, "echo", b"{}"), ToolCalled)
    assert query_of(runner.asked[1])["scope"] == "write basic"


def test_endless_step_up_stops_after_max_auth_attempts() -> None:
    world = World(needed_scope="never", grant_scopes=False)
    runner = Runner(world, max_auth_attempts=2)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized)
    assert error.cause == "insufficient_scope" and error.status == 403
    assert len(runner.asked) == 2


def test_a_fresh_token_refused_again_is_token_rejected() -> None:
    world = World(refuse_tokens=True, refresh_token=None)
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "token_rejected"
    assert len(runner.asked) == 3


# ------------------------------------------------------------------ refresh


def test_refresh_before_reauthorizing_keeps_a_non_rotated_refresh_token() -> None:
    store = MemoryTokenStore()
    world = World()
    runner = connected(world, OAuth(store=store, redirect_uri=REDIRECT))
    first = store.tokens(MCP)
    assert first is not None and first.refresh_token == "r-1" and first.expires_at == 600.0 + 60
    world.refresh_token = None
    world.issued.clear()  # the server forgets the token: 401
    assert isinstance(runner.run(runner.machine.list_tools), ToolsListed)
    assert len(runner.asked) == 1
    assert world.forms[-1]["grant_type"] == "refresh_token"
    kept = store.tokens(MCP)
    assert kept is not None and kept.refresh_token == "r-1" and kept.access_token != "t-1"
    assert "r-1" not in repr(kept) and kept.access_token not in repr(kept)


def test_a_failed_refresh_is_refresh_failed_and_forgets_the_tokens() -> None:
    store = MemoryTokenStore()
    world = World()
    runner = connected(world, OAuth(store=store, redirect_uri=REDIRECT))
    world.issued.clear()
    world.overrides["/token"] = lambda r: json_response({"error": "invalid_grant"}, 400)
    error = runner.fail(runner.run(runner.machine.list_tools))
    assert isinstance(error, Unauthorized) and error.cause == "refresh_failed"
    assert store.tokens(MCP) is None


def test_refresh_without_a_registration_uses_the_configured_client() -> None:
    store = MemoryTokenStore()
    store.save_tokens(
        MCP, Tokens(access_token="old", refresh_token="r", issuer=AS, token_endpoint=f"{AS}/token")
    )
    world = World()
    connected(world, OAuth(client_id="cfg", client_secret="s", store=store, redirect_uri=REDIRECT))
    assert world.forms[0]["grant_type"] == "refresh_token"
    store.save_tokens(
        MCP, Tokens(access_token="old", refresh_token="r", issuer=AS, token_endpoint=f"{AS}/token")
    )
    world2 = World()
    runner = Runner(world2, OAuth(store=store, redirect_uri=REDIRECT))
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "refresh_failed"


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("bend", "cause"),
    [
        (lambda w: setattr(w, "resource", "https://evil.example.com/mcp"), "resource_mismatch"),
        (lambda w: setattr(w, "resource", "https://mcp.example.com/other"), "resource_mismatch"),
        (lambda w: setattr(w, "resource", "not a url"), "resource_mismatch"),
        (lambda w: setattr(w, "authorization_servers", []), "discovery_failed"),
        (lambda w: setattr(w, "issuer", "https://attacker.example"), "issuer_mismatch"),
        (lambda w: w.redirect_extra.update(iss="https://evil.example.com"), "iss_mismatch"),
        (lambda w: w.redirect_extra.update(iss=AS + "/"), "iss_mismatch"),
        (lambda w: setattr(w, "drop", ("iss",)), "iss_mismatch"),
        (lambda w: w.redirect_extra.update(state="forged"), "state_mismatch"),
        (lambda w: w.redirect_extra.update(error="access_denied"), "authorization_denied"),
        (lambda w: setattr(w, "drop", ("code",)), "authorization_denied"),
    ],
)
def test_refusals_are_classified(bend: Any, cause: str) -> None:
    world = World()
    bend(world)
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized), error
    assert error.cause == cause and error.status == 401
    assert "/token" not in [p for _, _, p in world.log]


def test_iss_may_be_absent_when_not_advertised() -> None:
    world = World(
        meta_extra={"authorization_response_iss_parameter_supported": False}, drop=("iss",)
    )
    connected(world)


def test_no_discoverable_metadata_and_no_registration() -> None:
    world = World()
    world.overrides["/.well-known/oauth-authorization-server"] = lambda r: Response(status=404)
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "discovery_failed"
    world = World(meta_extra={"registration_endpoint": None})
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "registration_failed"
    world = World()
    world.overrides["/register"] = lambda r: Response(status=400)
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "registration_failed"


def test_a_token_endpoint_error_is_token_failed() -> None:
    world = World()
    world.overrides["/token"] = lambda r: json_response({"error": "invalid_grant"}, 400)
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "token_failed"


def test_without_an_authorization_step_the_url_is_carried() -> None:
    world = World()
    runner = Runner(world, answer=lambda url: None)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "authorization_required"
    assert error.authorization_url is not None
    assert error.authorization_url.startswith(f"{AS}/authorize?")


def test_the_step_may_answer_a_mapping() -> None:
    world = World()

    def answer(url: str) -> object:
        return dict(query_of(world.person(url)))

    connected(world, answer=answer)


@pytest.mark.parametrize("bad", [42, {"code": 1}, b"x"])
def test_a_bad_answer_from_the_step_is_a_caller_error(bad: object) -> None:
    runner = Runner(World(), answer=lambda url: bad)
    with pytest.raises(CallerError):
        runner.run(runner.machine.connect)
    assert not runner.machine.busy


def test_an_answer_for_another_ask_is_ignored() -> None:
    runner = Runner(World())
    runner.machine.authorized(99, "x", now=0.0)
    assert not runner.machine.busy


# ------------------------------------------------------------------ bad documents, bounds


@pytest.mark.parametrize(
    ("path", "response"),
    [
        ("/.well-known/oauth-protected-resource/mcp", Response(chunks=[b"not json"])),
        ("/token", json_response({"token_type": "Bearer"})),
        ("/token", json_response({"access_token": "a b"})),
        ("/token", json_response({"access_token": "a", "token_type": "mac"})),
        ("/token", json_response({"access_token": "a", "refresh_token": 3})),
        ("/register", json_response({"client_secret": "x"}, 201)),
        ("/register", json_response({"client_id": "a", "client_secret": 5}, 201)),
    ],
)
def test_malformed_documents_are_bad_document(path: str, response: Response) -> None:
    world = World()
    world.overrides[path] = lambda r: response
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.cause == "bad_document", error


@pytest.mark.parametrize(
    ("where", "url"),
    [
        ("authorization_servers", "http://auth.example.com"),
        ("token_endpoint", 5),
        ("token_endpoint", "http://auth.example.com/token"),
        ("token_endpoint", "ftp://x"),
        ("registration_endpoint", "http://10.0.0.1/register"),
    ],
)
def test_urls_must_be_https_except_loopback(where: str, url: Any) -> None:
    world = World()
    if where == "authorization_servers":
        world.authorization_servers = [url]
    else:
        world.meta_extra[where] = url
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.cause == "bad_document"


def test_http_to_loopback_is_allowed() -> None:
    world = World(authorization_servers=["http://127.0.0.1:8/"], issuer="http://127.0.0.1:8/")
    connected(world)
    assert world.log[2][0] == "127.0.0.1:8"


def test_named_prm_url_must_be_https() -> None:
    world = World(challenge='Bearer resource_metadata="http://evil.example/prm"')
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.cause == "bad_document"


def test_a_redirect_is_never_followed() -> None:
    world = World()
    world.overrides["/.well-known/oauth-authorization-server"] = lambda r: Response(
        status=302, headers=[(b"location", b"https://elsewhere.example/")]
    )
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.cause == "redirect"
    assert error.location == "https://elsewhere.example/"
    assert runner.cancelled


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(min_value=2, max_value=6000),
    chunk=st.integers(min_value=1, max_value=1500),
    framing=st.integers(min_value=0, max_value=300),
)
def test_the_document_bound_counts_the_bodys_wire_bytes(
    size: int, chunk: int, framing: int
) -> None:
    """Issue 26: every byte bound counts bytes on the wire.  A token document of
    ``size`` bytes in pieces of ``chunk`` bytes, each carried with ``framing`` bytes of
    chunked framing (a chunk-size line, its extensions, the CRLF): the fetch fails as a
    budget exactly when data plus framing pass the bound, observed at the piece that
    passes it; the body kept never passes it either."""
    limit = 4096
    world = World()
    body = json.dumps({"access_token": "t-x", "token_type": "Bearer"}).encode()
    body = body.ljust(size, b" ")

    def token(request: Any) -> Response:
        world.issued["t-x"] = ""
        runner.framing = framing  # the token document only: the others come unframed
        return Response(headers=[(b"content-type", b"application/json")], chunks=[body])

    world.overrides["/token"] = token
    runner = Runner(world, chunk=chunk, max_auth_document_bytes=limit)
    outcome = runner.run(runner.machine.connect)
    pieces = [len(body[i : i + chunk]) + framing for i in range(0, len(body), chunk)]
    totals = list(itertools.accumulate(pieces))
    if totals[-1] <= limit:
        assert isinstance(outcome, Connected), outcome
        return
    error = runner.fail(outcome)
    assert isinstance(error, ConnectionFailed) and error.cause == "budget"
    assert error.bound == "max_auth_document_bytes" and error.limit == limit
    assert error.observed == next(total for total in totals if total > limit)
    assert len(runner.machine._body) <= limit


def test_an_oversized_document_is_a_budget_failure() -> None:
    world = World()
    world.overrides["/token"] = lambda r: Response(chunks=[b" " * 5000])
    runner = Runner(world, chunk=1000, max_auth_document_bytes=4096)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.cause == "budget"
    assert error.bound == "max_auth_document_bytes" and error.limit == 4096


def test_a_slow_authorization_server_hits_auth_timeout() -> None:
    world = World()
    runner = Runner(world, auth_timeout=5.0)
    runner.stall.add("/token")
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.cause == "timeout"
    assert error.bound == "auth_timeout"
    # the person's 600 s were not charged: the fetches after the redirect had their 5 s
    assert runner.now == pytest.approx(600.0 + 5.0)
    assert runner.cancelled


def test_an_unreachable_authorization_server_is_connection_failed() -> None:
    world = World()
    world.overrides["/register"] = lambda r: Response(head=False, fail=reset("dial"), end=False)
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.cause == "reset"


def test_informational_and_trailers_are_ignored() -> None:
    from sansmcp.core.http import InformationalReceived, TrailersReceived

    world = World()
    runner = Runner(world)
    runner.machine.connect(now=0.0)
    # drive by hand to the first OAuth fetch
    while True:
        out = runner.machine.next_output()
        assert out is not None
        if isinstance(out, StartExchange) and out.origin is not None:
            break
        if isinstance(out, StartExchange):
            runner.deliver(out.exchange_id, world(out))
    eid = out.exchange_id
    runner.machine.receive(
        InformationalReceived(exchange_id=eid, status=103, headers=(), raw_size=10), now=0.0
    )
    runner.machine.receive(TrailersReceived(exchange_id=eid, headers=(), raw_size=1), now=0.0)
    assert runner.machine.busy
    assert runner.machine.wanted(AuthorizationNeeded(auth_id=1, url="x")) is False
    assert runner.machine.wanted(out)


def test_a_caller_error_at_the_start_keeps_nothing() -> None:
    runner = connected(World())
    with pytest.raises(CallerError):
        runner.machine.call_tool("", b"{}", now=0.0)
    assert not runner.machine.busy
    with pytest.raises(CallerError, match="tasks=True"):  # a task handle's, passed through
        runner.machine.task("poll", "task-7", now=0.0)
    assert not runner.machine.busy


def test_a_root_endpoint_asks_only_the_root_prm() -> None:
    world = World(resource="https://mcp.example.com/")
    runner = Runner(world, url="https://mcp.example.com/")
    assert isinstance(runner.run(runner.machine.connect), Connected)
    assert world.log[1][2] == "/.well-known/oauth-protected-resource"


@pytest.mark.parametrize(
    "challenge", ['Basic realm="x", Bearer scope="s"', 'Basic realm="x"', "Negotiate abc"]
)
def test_only_a_bearer_challenge_is_read(challenge: str) -> None:
    world = World(challenge=challenge)
    runner = connected(world)
    assert query_of(runner.asked[0]).get("scope") == ("s" if "Bearer" in challenge else None)


def test_a_mapping_answer_without_iss_when_not_advertised() -> None:
    world = World(meta_extra={"authorization_response_iss_parameter_supported": None})

    def answer(url: str) -> object:
        world.person(url)  # the authorization server records the challenge
        return {"code": "c-1", "state": query_of(url)["state"], "iss": None}

    connected(world, answer=answer)


def test_the_mcp_machines_own_deadlines_still_fire() -> None:
    store = MemoryTokenStore()
    store.save_tokens(MCP, Tokens(access_token="kept"))
    runner = Runner(World(), OAuth(store=store), connect_timeout=3.0)
    runner.stall.add("/mcp")
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.bound == "connect_timeout"


def test_wanted_for_the_mcp_machines_own_outputs() -> None:
    from sansmcp.core.mcp import CancelExchange

    runner = Runner(World())
    assert runner.machine.wanted(CancelExchange(exchange_id=5))
    # (a plain McpMachine is never asked about an AuthorizationNeeded: only an
    # authorizer emits one, and the driver delivers it at once, never holds it)
    assert runner.machine.wanted(AuthorizationNeeded(auth_id=1, url="u")) is False


def test_reauthorizing_for_the_same_scope_asks_it_once() -> None:
    world = World(challenge='Bearer scope="a"', refuse_tokens=True, refresh_token=None)
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "token_rejected"
    assert [query_of(url)["scope"] for url in runner.asked] == ["a", "a", "a"]


# ------------------------------------------------------------------ client credentials


class FakeSigner:
    alg = "ES256"

    def __init__(self, signature: object = b"sig") -> None:
        self.signed: list[bytes] = []
        self.signature = signature

    def sign(self, data: bytes) -> Any:
        self.signed.append(data)
        return self.signature

    def public_jwk(self) -> dict[str, Any]:
        return {"kty": "EC"}


def _claims(assertion: str) -> tuple[dict[str, Any], dict[str, Any]]:
    import base64

    def part(text: str) -> dict[str, Any]:
        return dict(json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))))

    head, body, _ = assertion.split(".")
    return part(head), part(body)


def test_client_credentials_with_a_secret_needs_no_person() -> None:
    world = World(challenge='Bearer scope="m2m"')
    oauth = OAuth(grant="client_credentials", client_id="svc", client_secret="s")
    runner = connected(world, oauth)
    assert runner.asked == []
    form = world.forms[0]
    assert form["grant_type"] == "client_credentials"
    assert form["scope"] == "m2m" and form["resource"] == MCP


def test_client_credentials_with_private_key_jwt() -> None:
    signer = FakeSigner()
    world = World(meta_extra={"token_endpoint_auth_methods_supported": ["private_key_jwt"]})
    oauth = OAuth(grant="client_credentials", client_id="svc", signer=signer)
    runner = Runner(world, oauth, wall_clock=lambda: 1_700_000_000.5)
    assert isinstance(runner.run(runner.machine.connect), Connected)
    form = world.forms[0]
    assert form["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    header, claims = _claims(form["client_assertion"])
    assert header == {"alg": "ES256", "typ": "JWT"}
    assert claims["iss"] == claims["sub"] == "svc" and claims["aud"] == AS
    assert claims["iat"] == 1_700_000_000 and claims["exp"] == 1_700_000_300
    assert form["client_assertion"].rsplit(".", 1)[0].encode() == signer.signed[0]
    assert "resource" in form and "scope" not in form


def test_a_signer_is_not_used_where_the_server_does_not_take_it() -> None:
    world = World(meta_extra={"token_endpoint_auth_methods_supported": ["client_secret_post"]})
    oauth = OAuth(
        grant="client_credentials", client_id="svc", client_secret="s", signer=FakeSigner()
    )
    connected(world, oauth)
    assert "client_assertion" not in world.forms[0] and world.forms[0]["client_secret"] == "s"


def test_a_signer_returning_no_bytes_is_a_caller_error() -> None:
    world = World()
    oauth = OAuth(grant="client_credentials", client_id="svc", signer=FakeSigner(signature="x"))
    runner = Runner(world, oauth)
    with pytest.raises(CallerError, match="signer"):
        runner.run(runner.machine.connect)


def test_client_credentials_without_prm_names_no_resource() -> None:
    world = World()
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-authorization-server",
    ):
        world.overrides[path] = lambda r: Response(status=404)
    connected(world, OAuth(grant="client_credentials", client_id="svc", client_secret="s"))
    assert "resource" not in world.forms[0]
    assert world.log[-2][:3] == ("mcp.example.com", "POST", "/token")


def test_jwt_bearer_trades_the_workload_assertion() -> None:
    world = World()
    oauth = OAuth(grant="jwt_bearer", client_id="workload", assertion="a.b.c")
    runner = connected(world, oauth)
    assert runner.asked == []
    form = world.forms[0]
    assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert form["assertion"] == "a.b.c" and form["client_id"] == "workload"
    assert "a.b.c" not in repr(oauth)


def test_jwt_bearer_without_an_assertion_is_a_caller_error() -> None:
    runner = Runner(World(), OAuth(grant="jwt_bearer", client_id="workload"))
    with pytest.raises(CallerError, match="assertion"):
        runner.run(runner.machine.connect)


# ------------------------------------------------------------------ enterprise-managed

IDP = "https://idp.example.com/token"
JAG = "urn:ietf:params:oauth:token-type:id-jag"


def _enterprise(world: World, answer: Response, **extra: Any) -> Runner:
    seen: list[dict[str, str]] = []

    def idp(request: Any) -> Response:
        seen.append({k: v[0] for k, v in parse_qs(request.body.decode()).items()})
        return answer

    world.overrides["/idp-token"] = idp
    oauth = OAuth(
        grant="enterprise",
        client_id="xaa",
        client_secret="s",
        assertion="id.token.jwt",
        idp_token_endpoint="https://idp.example.com/idp-token",
        **extra,
    )
    runner = Runner(world, oauth)
    runner.seen = seen  # type: ignore[attr-defined]
    return runner


def test_enterprise_exchanges_the_id_token_for_an_id_jag_then_trades_it() -> None:
    world = World()
    answer = json_response({"access_token": "the.id.jag", "issued_token_type": JAG})
    runner = _enterprise(world, answer, idp_client_id="idp-client")
    assert isinstance(runner.run(runner.machine.connect), Connected)
    (exchange,) = runner.seen  # type: ignore[attr-defined]
    assert exchange["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"
    assert exchange["subject_token"] == "id.token.jwt" and exchange["audience"] == AS
    assert exchange["resource"] == MCP and exchange["client_id"] == "idp-client"
    form = world.forms[0]
    assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert form["assertion"] == "the.id.jag"


def test_enterprise_without_prm_names_the_server_as_resource() -> None:
    world = World(issuer="https://mcp.example.com")
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-authorization-server",
    ):
        world.overrides[path] = lambda r: Response(status=404)
    answer = json_response({"access_token": "jag", "issued_token_type": JAG})
    runner = _enterprise(world, answer)
    assert isinstance(runner.run(runner.machine.connect), Connected)
    (exchange,) = runner.seen  # type: ignore[attr-defined]
    assert exchange["resource"] == MCP and "client_id" not in exchange


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (json_response({"error": "invalid_grant"}, 400), "token_failed"),
        (json_response({"access_token": "x", "issued_token_type": "other"}), "bad_document"),
        (json_response({"issued_token_type": JAG}), "bad_document"),
    ],
)
def test_enterprise_refusals(answer: Response, kind: str) -> None:
    runner = _enterprise(World(), answer)
    error = runner.fail(runner.run(runner.machine.connect))
    assert getattr(error, "cause", None) == kind, error


# ------------------------------------------------------------------ completing later


def test_an_authorization_completed_later_from_the_redirect() -> None:
    store = MemoryTokenStore()
    world = World()
    first = Runner(world, OAuth(redirect_uri=REDIRECT, store=store), answer=lambda url: None)
    error = first.fail(first.run(first.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "authorization_required"
    assert error.authorization_url is not None
    redirect = world.person(error.authorization_url)  # the person, minutes later
    later = Runner(world, OAuth(redirect_uri=REDIRECT, store=store))
    assert isinstance(later.run(later.machine.complete_authorization, redirect), Connected)
    assert store.tokens(MCP) is not None and later.asked == []
    # the pending authorization is used once
    again = Runner(world, OAuth(redirect_uri=REDIRECT, store=store))
    with pytest.raises(CallerError, match="completed already"):
        again.run(again.machine.complete_authorization, redirect)


class BareStore:
    """A TokenStore without the optional pending-authorization methods."""

    def __init__(self) -> None:
        self.inner = MemoryTokenStore()

    def tokens(self, resource: str) -> Tokens | None:
        return self.inner.tokens(resource)

    def save_tokens(self, resource: str, tokens: Tokens | None) -> None:
        self.inner.save_tokens(resource, tokens)

    def registration(self, issuer: str) -> ClientRegistration | None:
        return self.inner.registration(issuer)

    def save_registration(self, issuer: str, registration: ClientRegistration) -> None:
        self.inner.save_registration(issuer, registration)


def test_a_store_without_pending_support_cannot_complete_later() -> None:
    world = World()
    oauth = OAuth(redirect_uri=REDIRECT, store=BareStore())
    first = Runner(world, oauth, answer=lambda url: None)
    error = first.fail(first.run(first.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "authorization_required"
    assert error.authorization_url is not None
    later = Runner(world, oauth)
    redirect = world.person(error.authorization_url)
    error = later.fail(later.run(later.machine.complete_authorization, redirect))
    assert isinstance(error, Unauthorized) and error.cause == "state_mismatch"


def test_the_memory_store_keeps_at_most_64_pending() -> None:
    from sansmcp.core.oauth.store import Binding, PendingAuthorization

    bound = Binding(
        url=MCP,
        issuer=None,
        client_id=None,
        client_secret_sha256=None,
        client_metadata_url=None,
        redirect_uri=REDIRECT,
    )
    store = MemoryTokenStore()
    for n in range(70):
        store.save_pending(
            PendingAuthorization(
                state=str(n),
                verifier="v",
                issuer=AS,
                iss_required=False,
                token_endpoint=f"{AS}/token",
                resource=None,
                registration=ClientRegistration(client_id="c"),
                redirect_uri=REDIRECT,
                bound=bound,
            )
        )
    assert store.take_pending("5") is None and store.take_pending("69") is not None


@settings(max_examples=examples(300), deadline=None)
@given(token=st.one_of(st.text(max_size=40), st.integers(), st.none(), st.binary(max_size=8)))
def test_a_token_the_store_returns_is_sent_only_when_sendable(token: Any) -> None:
    """The token store is the embedder's hook: whatever access token it returns either goes
    out exactly as ``Authorization: Bearer <token>`` or is a CallerError before any request."""
    store = MemoryTokenStore()
    store.save_tokens(MCP, Tokens(access_token=token))
    sendable = isinstance(token, str) and token != "" and all(0x20 < ord(c) < 0x7F for c in token)
    if not sendable:
        with pytest.raises(CallerError, match="token store"):
            Runner(World(), OAuth(redirect_uri=REDIRECT, store=store))
        return
    world = World()
    world.issued[token] = ""
    runner = connected(world, OAuth(redirect_uri=REDIRECT, store=store))
    assert runner.asked == []
    assert world.log[0][2] == "/mcp"


# ------------------------------------------------------------------ the token answer's values


def _answering(world: World, extra: dict[str, Any]) -> None:
    def token(request: Any) -> Response:
        world.issued["t-x"] = ""
        return json_response({"access_token": "t-x", **extra})

    world.overrides["/token"] = token


def test_a_400_digit_expires_in_is_capped_at_a_year() -> None:
    store = MemoryTokenStore()
    world = World()
    _answering(world, {"token_type": "Bearer", "expires_in": 10**400})
    connected(world, OAuth(store=store, redirect_uri=REDIRECT))
    kept = store.tokens(MCP)
    assert kept is not None and kept.expires_at == 600.0 + 31_536_000


_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["Bearer", "bearer", "DPoP", "", "read write"]),
)
_json_value = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=examples(300), deadline=None)
@given(
    answer=st.fixed_dictionaries(
        {}, optional={"expires_in": _json_value, "token_type": _json_value, "scope": _json_value}
    )
)
def test_any_token_answer_values_connect_or_fail_classified(answer: dict[str, Any]) -> None:
    """Whatever JSON the token endpoint puts in expires_in, token_type and scope: the
    connection succeeds with a finite expiry, or fails as a classified error."""
    store = MemoryTokenStore()
    world = World()
    _answering(world, answer)
    runner = Runner(world, OAuth(store=store, redirect_uri=REDIRECT))
    outcome = runner.run(runner.machine.connect)
    if isinstance(outcome, Connected):
        kept = store.tokens(MCP)
        assert kept is not None and kept.token_type == "Bearer"
        assert kept.expires_at is None or 600.0 <= kept.expires_at <= 600.0 + 31_536_000
        assert kept.scope is None or isinstance(kept.scope, str)
        return
    error = runner.fail(outcome)
    assert isinstance(error, ConnectionFailed | Unauthorized), error
    assert str(answer.get("token_type", "Bearer")).lower() != "bearer" or not isinstance(
        answer.get("token_type", "Bearer"), str
    )


# ------------------------------------------------------------------ a stored registration


def test_a_stored_registration_with_a_non_str_secret_registers_again() -> None:
    store = MemoryTokenStore()
    store.save_registration(
        AS,
        ClientRegistration(client_id="stored", client_secret=5, auth_method="client_secret_basic"),  # type: ignore[arg-type]
    )
    world = World()
    runner = connected(world, OAuth(store=store, redirect_uri=REDIRECT))
    assert query_of(runner.asked[0])["client_id"] == "dcr-client"
    assert "/register" in [p for _, _, p in world.log]


def test_a_stored_private_key_jwt_registration_without_a_signer_registers_again() -> None:
    store = MemoryTokenStore()
    store.save_registration(
        AS, ClientRegistration(client_id="stored", auth_method="private_key_jwt")
    )
    world = World()
    runner = connected(world, OAuth(store=store, redirect_uri=REDIRECT))
    assert query_of(runner.asked[0])["client_id"] == "dcr-client"


def test_a_refresh_with_an_unusable_stored_registration_uses_the_configured_client() -> None:
    store = MemoryTokenStore()
    store.save_registration(AS, ClientRegistration(client_id="stored", auth_method="bogus"))
    store.save_tokens(
        MCP, Tokens(access_token="old", refresh_token="r", issuer=AS, token_endpoint=f"{AS}/token")
    )
    world = World()
    connected(world, OAuth(client_id="cfg", store=store, redirect_uri=REDIRECT))
    assert world.forms[0]["grant_type"] == "refresh_token" and world.forms[0]["client_id"] == "cfg"


_anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
)
_registration = st.one_of(
    _anything,
    st.builds(
        ClientRegistration,
        client_id=st.one_of(st.just("stored"), _anything),
        client_secret=st.one_of(st.just("s3cret"), _anything),
        auth_method=st.one_of(
            st.sampled_from(
                ["none", "client_secret_basic", "client_secret_post", "private_key_jwt", "x"]
            ),
            _anything,
        ),
    ),
)


def _usable(value: object, signer: object) -> bool:
    return (
        isinstance(value, ClientRegistration)
        and isinstance(value.client_id, str)
        and value.client_id != ""
        and (value.client_secret is None or isinstance(value.client_secret, str))
        and value.auth_method
        in ("none", "client_secret_basic", "client_secret_post", "private_key_jwt")
        and (value.auth_method != "private_key_jwt" or signer is not None)
    )


@settings(max_examples=examples(200), deadline=None)
@given(
    registration=_registration, signer=st.sampled_from([None, FakeSigner()]), refresh=st.booleans()
)
def test_whatever_registration_the_store_returns_is_used_or_ignored(
    registration: Any, signer: Any, refresh: bool
) -> None:
    """The store is the embedder's hook: a registration it returns is used when usable, else
    ignored as absent (register again; a refresh without one is refresh_failed)."""
    store = MemoryTokenStore()
    store._registrations[AS] = registration
    if refresh:
        store.save_tokens(
            MCP,
            Tokens(access_token="old", refresh_token="r", issuer=AS, token_endpoint=f"{AS}/token"),
        )
    world = World()
    runner = Runner(world, OAuth(store=store, redirect_uri=REDIRECT, signer=signer))
    outcome = runner.run(runner.machine.connect)
    usable = _usable(registration, signer)
    if refresh and not usable:
        error = runner.fail(outcome)
        assert isinstance(error, Unauthorized) and error.cause == "refresh_failed"
        return
    if not isinstance(outcome, Connected):
        error = runner.fail(outcome)
        assert isinstance(error, ConnectionFailed | Unauthorized | CallerError), error
        assert usable  # an ignored registration registers again, which the world allows
        return
    registered = "/register" in [p for _, _, p in world.log]
    assert registered is (not usable)
    if usable and not refresh:
        assert query_of(runner.asked[0])["client_id"] == registration.client_id


@pytest.mark.parametrize("extra", [0, 1])
def test_a_document_of_exactly_the_limit_is_read_and_one_byte_more_is_not(extra: int) -> None:
    """The bound is checked before the body grows, over a body split into chunks."""
    limit = 4096
    world = World()
    body = json.dumps({"access_token": "t-x", "token_type": "Bearer"}).encode()
    body = body.ljust(limit + extra, b" ")

    def token(request: Any) -> Response:
        world.issued["t-x"] = ""
        return Response(headers=[(b"content-type", b"application/json")], chunks=[body])

    world.overrides["/token"] = token
    runner = Runner(world, chunk=1000, max_auth_document_bytes=limit)
    outcome = runner.run(runner.machine.connect)
    if not extra:
        assert isinstance(outcome, Connected)
        return
    error = runner.fail(outcome)
    assert isinstance(error, ConnectionFailed) and error.cause == "budget"
    assert error.bound == "max_auth_document_bytes" and error.limit == limit
    assert error.observed == limit + 1
    assert len(runner.machine._body) <= limit  # the chunk past the bound was never kept


def test_an_oauth_machine_is_freed_without_the_cyclic_collector() -> None:
    """Issue 26: the flow context's clock and the operation kept for a replay are not
    closures over the machine, so a finished OAuth Conn's machine (and its listing) goes
    with its last reference, the collector off; nothing of it is left for the collector."""
    import gc
    import weakref

    from sansmcp.core.oauth.machine import OAuthMachine

    gc.collect()
    gc.disable()
    try:
        world = World()
        runner = connected(world)
        assert isinstance(runner.run(runner.machine.list_tools), ToolsListed)
        assert isinstance(runner.machine, OAuthMachine) and not runner.machine.busy
        replayed = Runner(world, runner.oauth)  # the stored token: sent, no flow
        assert isinstance(replayed.run(replayed.machine.connect), Connected)
        refs = [weakref.ref(runner.machine), weakref.ref(replayed.machine)]
        del runner, replayed
        assert [ref() for ref in refs] == [None, None]
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = [o for o in gc.garbage if type(o).__module__.startswith("sansmcp")]
        assert ours == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize(
    "registration",
    [
        "not a registration",
        ClientRegistration(client_id=""),
        ClientRegistration(client_id=5),  # type: ignore[arg-type]
        ClientRegistration(client_id="c", client_secret=b"s"),  # type: ignore[arg-type]
        ClientRegistration(client_id="c", auth_method="client_secret_jwt"),
        ClientRegistration(client_id="c", auth_method="private_key_jwt"),
    ],
)
def test_a_stored_registration_that_cannot_be_used_is_absent(registration: object) -> None:
    assert usable_registration(registration, signer=None) is None
    assert usable_registration(ClientRegistration(client_id="c"), signer=None) is not None
