"""A pending authorization is bound to the Config that began it, and taken once (pure).

The redirect's ``state`` finds a pending authorization in the token store; whoever
hands the redirect over chooses it.  Completing it with a Config that names another
server (``Config.url``) or another client (``OAuth.issuer`` / ``client_id`` /
``client_secret`` / ``client_metadata_url`` / ``redirect_uri``) is a ``CallerError``
before any request; a second completion of the same state is one too.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import CallerError, Unauthorized
from sansmcp.core.mcp import Connected
from sansmcp.core.oauth.store import (
    MAX_TAKEN,
    TAKEN,
    Binding,
    ClientRegistration,
    MemoryTokenStore,
    OAuth,
    PendingAuthorization,
    Tokens,
)
from sansmcp.core.url import parse_endpoint

from .oauth_world import AS, MCP, REDIRECT, Runner, World

OTHER = "https://other.example.com/mcp"


def begin(world: World, oauth: OAuth, url: str = MCP) -> str:
    """An authorization begun with ``oauth`` at ``url`` and left to a person: the redirect
    the person comes back with."""
    first = Runner(world, oauth, answer=lambda url: None, url=url)
    error = first.fail(first.run(first.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "authorization_required"
    assert error.authorization_url is not None
    return world.person(error.authorization_url)


def refused(world: World, oauth: OAuth, redirect: str, url: str = MCP) -> CallerError:
    """Completing with ``oauth`` at ``url`` is refused before any request."""
    later = Runner(world, oauth, url=url)
    seen = len(world.log)
    with pytest.raises(CallerError) as caught:
        later.machine.complete_authorization(redirect, now=later.now)
    assert len(world.log) == seen  # nothing went out
    assert later.machine.next_output() is None and not later.machine.busy
    return caught.value


def completes(world: World, oauth: OAuth, redirect: str, url: str = MCP) -> None:
    later = Runner(world, oauth, url=url)
    tokens_before = len(world.forms)
    assert isinstance(later.run(later.machine.complete_authorization, redirect), Connected)
    assert len(world.forms) == tokens_before + 1  # one token request, for the code
    assert world.forms[-1]["grant_type"] == "authorization_code"


# ------------------------------------------------------------------ examples


def test_a_redirect_begun_for_one_server_is_refused_for_another_and_nothing_is_sent() -> None:
    store = MemoryTokenStore()
    world = World()
    redirect = begin(world, OAuth(redirect_uri=REDIRECT, store=store))
    error = refused(world, OAuth(redirect_uri=REDIRECT, store=store), redirect, url=OTHER)
    assert f"Config.url is {OTHER!r}, not {MCP!r}" in str(error)
    assert "Nothing was sent" in str(error)
    assert world.forms == [] and store.tokens(OTHER) is None and store.tokens(MCP) is None
    # put back: the Config that began it completes it, once
    completes(world, OAuth(redirect_uri=REDIRECT, store=store), redirect)
    assert store.tokens(MCP) is not None and store.tokens(OTHER) is None
    again = refused(world, OAuth(redirect_uri=REDIRECT, store=store), redirect)
    assert "completed already" in str(again)
    assert len(world.forms) == 1


def test_another_client_secret_is_named_but_never_shown() -> None:
    store = MemoryTokenStore()
    world = World()
    began = OAuth(client_id="cfg", client_secret="s3cret-A", redirect_uri=REDIRECT, store=store)
    redirect = begin(world, began)
    error = refused(world, dataclasses.replace(began, client_secret="s3cret-B"), redirect)
    message = str(error)
    assert "OAuth.client_secret is not the one it was begun with" in message
    assert "s3cret" not in message and "cfg" not in message  # only what differs is named
    error = refused(world, dataclasses.replace(began, client_id="other-client"), redirect)
    assert "OAuth.client_id is 'other-client', not 'cfg'" in str(error)
    assert "client_secret" not in str(error)
    completes(world, began, redirect)


def test_the_memory_store_remembers_the_last_taken_states() -> None:
    store = MemoryTokenStore()
    bound = Binding(
        url=MCP,
        issuer=None,
        client_id=None,
        client_secret_sha256=None,
        client_metadata_url=None,
        redirect_uri=REDIRECT,
    )
    for n in range(MAX_TAKEN + 1):
        store.save_pending(_pending(str(n), bound))
        assert isinstance(store.take_pending(str(n)), PendingAuthorization)
    assert store.take_pending("0") is None  # forgotten: the oldest beyond the bound
    assert store.take_pending("1") is TAKEN and store.take_pending(str(MAX_TAKEN)) is TAKEN
    assert store.take_pending("never") is None


def _pending(key: str, binding: Binding, **changes: Any) -> PendingAuthorization:
    pending = PendingAuthorization(
        state=key,
        verifier="v" * 43,
        issuer=AS,
        iss_required=False,
        token_endpoint=f"{AS}/token",
        resource=MCP,
        registration=ClientRegistration(client_id="c"),
        redirect_uri=REDIRECT,
        bound=binding,
    )
    return dataclasses.replace(pending, **changes)


class OneShotStore(MemoryTokenStore):
    """A store whose ``take_pending`` hands out what a test put in ``handed`` (and that
    cannot put one back: no ``save_pending``)."""

    handed: object = None

    def take_pending(self, state: str) -> Any:
        return self.handed

    def __getattribute__(self, name: str) -> Any:
        if name == "save_pending":
            raise AttributeError(name)
        return super().__getattribute__(name)


_JUNK = st.one_of(st.none(), st.integers(), st.binary(max_size=4), st.just(["x"]))


@settings(max_examples=150, deadline=None)
@given(
    field=st.sampled_from(
        [
            "state",
            "verifier",
            "issuer",
            "iss_required",
            "token_endpoint",
            "resource",
            "registration",
            "redirect_uri",
            "bound",
            "bound.url",
            "bound.issuer",
            "bound.client_id",
            "bound.client_secret_sha256",
            "bound.client_metadata_url",
            "bound.redirect_uri",
        ]
    ),
    junk=_JUNK,
)
def test_a_pending_authorization_the_store_returns_is_checked_before_use(
    field: str, junk: Any
) -> None:
    """The store is the embedder's hook: a pending authorization with any field of the wrong
    type (or a resource that is not this server's) is a CallerError, and nothing is sent."""
    world = World()
    oauth = OAuth(redirect_uri=REDIRECT, store=OneShotStore())
    runner = Runner(world, oauth)
    state = "s-1"
    bound = _binding_now(runner)
    if field.startswith("bound."):
        pending = _pending(state, dataclasses.replace(bound, **{field[6:]: junk}))
    else:
        pending = _pending(state, bound, **{field: junk})
    allowed = {
        "resource": junk is None,
        "bound.issuer": junk is None,
        "bound.client_id": junk is None,
        "bound.client_secret_sha256": junk is None,
        "bound.client_metadata_url": junk is None,
    }.get(field, False)
    store = oauth.store
    assert isinstance(store, OneShotStore)
    store.handed = pending
    redirect = f"{REDIRECT}?code=c-1&state={state}&iss={AS}"
    if allowed:  # a value of its type: the pending one is usable, and bound to this Config
        world.last_query["code_challenge"] = "x"  # the fake AS refuses the verifier: fine
        runner.run(runner.machine.complete_authorization, redirect)
        assert [p for _, _, p in world.log][:1] == ["/token"]
        return
    with pytest.raises(CallerError, match="pending authorization that cannot be used"):
        runner.machine.complete_authorization(redirect, now=runner.now)
    assert world.log == [] and runner.machine.next_output() is None


def _binding_now(runner: Runner) -> Binding:
    from sansmcp.core.oauth.flow import binding_of

    return binding_of(runner.machine._ctx)


def test_a_resource_the_store_returns_for_another_server_is_refused() -> None:
    world = World()
    store = OneShotStore()
    runner = Runner(world, OAuth(redirect_uri=REDIRECT, store=store))
    store.handed = _pending("s-1", _binding_now(runner), resource=OTHER)
    with pytest.raises(CallerError, match=re.escape(f"names resource {OTHER!r}")):
        runner.machine.complete_authorization(f"{REDIRECT}?code=c&state=s-1", now=0.0)
    assert world.log == []


def test_a_store_that_cannot_put_back_still_refuses_and_sends_nothing() -> None:
    world = World()
    store = OneShotStore()
    runner = Runner(world, OAuth(redirect_uri=REDIRECT, store=store))
    store.handed = _pending("s-1", dataclasses.replace(_binding_now(runner), url=OTHER))
    with pytest.raises(CallerError, match=re.escape(f"Config.url is {MCP!r}, not {OTHER!r}")):
        runner.machine.complete_authorization(f"{REDIRECT}?code=c&state=s-1", now=0.0)
    assert world.log == []


# ------------------------------------------------------------------ the class


_URLS_BEGUN = [MCP, "https://MCP.Example.com:443/mcp", "https://mcp.example.com/mcp/sub"]
_URLS = [*_URLS_BEGUN, OTHER, "https://mcp.example.com:8443/mcp", "https://mcp.example.com/"]
_VALUES: dict[str, list[Any]] = {
    "issuer": [None, AS, "https://other-as.example.com"],
    "client_id": [None, "cfg-a", "cfg-b"],
    "client_secret": [None, "secret-a", "secret-b"],
    "client_metadata_url": [None, "https://client.example/a.json", "https://client.example/b"],
    "redirect_uri": [REDIRECT, "http://127.0.0.1:9/other"],
    "scope": [None, "read"],  # not bound: the same server and client may ask otherwise
    "client_name": ["sansmcp", "renamed"],  # not bound (only sent when registering)
}
_BOUND_FIELDS = {"issuer", "client_id", "client_secret", "client_metadata_url", "redirect_uri"}


@st.composite
def _config(draw: st.DrawFn, urls: list[str]) -> tuple[str, dict[str, Any]]:
    return draw(st.sampled_from(urls)), {
        name: draw(st.sampled_from(values)) for name, values in _VALUES.items()
    }


@settings(max_examples=150, deadline=None)
@given(
    began=_config(_URLS_BEGUN),
    changes=st.dictionaries(
        st.sampled_from([*_VALUES, "url"]), st.integers(0, 5), max_size=3
    ),  # which fields the completing Config changes (often none, often the same value)
)
def test_completion_is_refused_iff_the_config_differs_in_a_bound_field(
    began: tuple[str, dict[str, Any]], changes: dict[str, int]
) -> None:
    url_a, fields_a = began
    url_b, fields_b = url_a, dict(fields_a)
    for name, pick in changes.items():
        if name == "url":
            url_b = _URLS[pick % len(_URLS)]
        else:
            fields_b[name] = _VALUES[name][pick % len(_VALUES[name])]
    store = MemoryTokenStore()
    world = World()
    oauth_a = OAuth(store=store, **fields_a)
    oauth_b = OAuth(store=store, **fields_b)
    redirect = begin(world, oauth_a, url_a)
    differs = parse_endpoint(url_a).url != parse_endpoint(url_b).url or any(
        fields_a[name] != fields_b[name] for name in _BOUND_FIELDS
    )
    if differs:
        error = refused(world, oauth_b, redirect, url_b)
        for secret in ("secret-a", "secret-b"):
            assert secret not in str(error)
        assert world.forms == [] and store.tokens(parse_endpoint(url_b).url) is None
    else:
        completes(world, oauth_b, redirect, url_b)
    # whatever happened, the Config that began it completes it if it was put back, and
    # no Config completes it a second time
    if differs:
        completes(world, oauth_a, redirect, url_a)
    tokens = store.tokens(parse_endpoint(url_a).url)
    assert isinstance(tokens, Tokens) and tokens.issuer == AS
    assert "completed already" in str(refused(world, oauth_a, redirect, url_a))
    assert "completed already" in str(refused(world, oauth_b, redirect, url_b))
    assert len(world.forms) == 1


# ------------------------------------------------------------------ refresh: the secret's issuer


@settings(max_examples=60, deadline=None)
@given(
    pinned=st.sampled_from([None, AS, "https://other-as.example.com", f"{AS}/"]),
    issued_by=st.sampled_from([AS, "https://attacker.example.com"]),
)
def test_a_refresh_sends_the_configured_secret_only_to_its_own_issuer(
    pinned: str | None, issued_by: str
) -> None:
    """Stored tokens with no registration for their issuer are refreshed with the configured
    client only when ``OAuth.issuer`` is unset or is that issuer (as ``_register`` uses it);
    else ``refresh_failed`` and no request: the secret never goes to another issuer."""
    store = MemoryTokenStore()
    token_endpoint = f"{issued_by}/token"
    store.save_tokens(
        MCP,
        Tokens(
            access_token="old", refresh_token="r", issuer=issued_by, token_endpoint=token_endpoint
        ),
    )
    world = World()
    oauth = OAuth(client_id="cfg", client_secret="s3cret", issuer=pinned, store=store)
    runner = Runner(world, dataclasses.replace(oauth, redirect_uri=REDIRECT))
    outcome = runner.run(runner.machine.connect)
    to_token = [host for host, _, path in world.log if path == "/token"]
    if pinned in (None, issued_by):
        assert to_token == [token_endpoint.split("/")[2]]
        assert world.forms[0]["grant_type"] == "refresh_token"
        return
    error = runner.fail(outcome)
    assert isinstance(error, Unauthorized) and error.cause == "refresh_failed"
    assert to_token == [] and all(b"s3cret" not in body for body in world.bodies)
    assert store.tokens(MCP) is None  # forgotten: the next operation authorizes afresh
    assert isinstance(runner.run(runner.machine.connect), Connected)
    assert world.forms[-1]["grant_type"] == "authorization_code"
    assert [host for host, _, path in world.log if path == "/token"] == ["auth.example.com"]
