"""OAuth on real sockets, every backend: the official SDK server behind a bearer gate
(``tests/e2e/server.py --oauth``) and a small authorization server on loopback
(``tests/e2e/oauth_server.py``).

Every test runs on each runtime without a shared store, and on the blocking runtime with
each shared store (issue 28): ``Client(store=LocalStore())`` and
``Client(store=RedisStore(...))`` on a real ``redis-server`` (flushed per test).  With a
shared store the tokens live there and ``OAuth.store`` is not used (:func:`granted`
reads them from where they are), and a completion refused after the store answered is
an ``Unauthorized(cause="state_mismatch")`` rather than a ``CallerError``.
"""

from __future__ import annotations

import http.client
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from sansmcp import CallerError, Config, MemoryTokenStore, OAuth, Tokens, Unauthorized
from sansmcp.core.store import Found, Read, token_key
from sansmcp.core.store_values import ValueCodec, tokens_from
from tests.stores.conftest import redis_server, redis_session, redis_store  # noqa: F401

from .conftest import BACKEND_MODULES, Backend, Launcher, Server
from .oauth_server import AuthServer

REDIRECT = "http://127.0.0.1:9/callback"

STORE_RUNTIME = "sync"  # the runtime the shared stores run on (not every runtime x store)
pytestmark = pytest.mark.parametrize(
    ("backend", "shared"),
    [(name, "none") for name in BACKEND_MODULES]
    + [(STORE_RUNTIME, "local"), (STORE_RUNTIME, "redis")],
    indirect=["backend"],
)


@pytest.fixture
def store(shared: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The fleet's store every Client of the test gets (None: ``Client()`` without one)."""
    if shared == "none":
        yield None
        return
    if shared == "local":
        from sansmcp.stores import LocalStore

        yield LocalStore()
        return
    redis = redis_store(request.getfixturevalue("redis_server").url)
    try:
        yield redis
    finally:
        redis.close()


def granted(store: Any, kept: MemoryTokenStore, url: str) -> Tokens | None:
    """The tokens the Clients obtained for ``url``: in ``OAuth.store`` (``kept``) without
    a shared store; with one, in the shared store (and ``kept`` untouched)."""
    if store is None:
        return kept.tokens(url)
    assert kept.tokens(url) is None  # OAuth.store is no second copy
    found = store.execute(Read(key=token_key("", "", url, None)))  # (no issuer, no client)
    if not isinstance(found, Found):
        return None
    return ValueCodec(1 << 20).open("tokens", found.value, tokens_from)


@pytest.fixture(scope="module")
def auth_server() -> Iterator[AuthServer]:
    with AuthServer() as server:
        yield server


@pytest.fixture(scope="module")
def gated(launch: Launcher, auth_server: AuthServer) -> Server:
    return launch("--stateless", "--json", "--oauth", auth_server.url)


def follow(url: str) -> str:
    """The embedder's step: GET the authorization URL, hand back its redirect."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=5)
    try:
        connection.request("GET", f"{parts.path}?{parts.query}")
        response = connection.getresponse()
        response.read()
        return response.getheader("location") or ""
    finally:
        connection.close()


def test_authorizes_then_lists_and_calls_and_a_second_conn_reuses_the_token(
    backend: Backend, gated: Server, auth_server: AuthServer, store: Any
) -> None:
    kept = MemoryTokenStore()
    asked: list[str] = []

    async def step(url: str) -> str:
        asked.append(url)
        return follow(url)

    oauth = OAuth(redirect_uri=REDIRECT, authorize=step, store=kept)
    config = Config(url=gated.url(), oauth=oauth)
    before = len(auth_server.requests)

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store) as client:
            async with client.connect(config) as conn:
                tools = await conn.list_tools()
                assert "echo" in [tool.name for tool in tools]
                result = await conn.call_tool("echo", b'{"text": "hi"}')
                assert not result.is_error
            async with client.connect(config) as conn:  # the stored token, at once
                assert await conn.list_tools()

    backend.run(main)
    assert len(asked) == 1
    assert auth_server.requests[before:] == [
        ("GET", "/.well-known/oauth-authorization-server"),
        ("POST", "/register"),
        ("GET", "/authorize"),
        ("POST", "/token"),
    ]
    tokens = granted(store, kept, gated.url())
    assert tokens is not None and tokens.access_token.startswith("e2e-")
    assert tokens.access_token not in repr(tokens) and "e2e-refresh" not in repr(tokens)


def test_without_an_authorization_step_the_url_comes_back(
    backend: Backend, gated: Server, auth_server: AuthServer, store: Any
) -> None:
    config = Config(url=gated.url(), oauth=OAuth(redirect_uri=REDIRECT))

    async def main() -> Unauthorized:
        async with backend.Client(allow_loopback=True, store=store) as client:
            with pytest.raises(Unauthorized) as caught:
                async with client.connect(config):
                    pass  # pragma: no cover - the connect fails
            return caught.value

    error = backend.run(main)
    assert error.cause == "authorization_required" and error.status == 401
    assert error.authorization_url is not None
    assert error.authorization_url.startswith(f"{auth_server.url}/authorize?")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(error.authorization_url).query)
    assert query["resource"] == [gated.url()]
    assert query["code_challenge_method"] == ["S256"]


def test_without_oauth_the_401_raises_as_before(
    backend: Backend, gated: Server, store: Any
) -> None:
    async def main() -> Unauthorized:
        async with backend.Client(allow_loopback=True, store=store) as client:
            with pytest.raises(Unauthorized) as caught:
                async with client.connect(Config(url=gated.url())):
                    pass  # pragma: no cover - the connect fails
            return caught.value

    error = backend.run(main)
    assert error.cause is None and error.status == 401
    assert error.challenges[0][0] == "bearer"


def test_the_step_raising_propagates_unchanged(backend: Backend, gated: Server, store: Any) -> None:
    class Declined(Exception):
        pass

    async def step(url: str) -> str:
        raise Declined("the user closed the window")

    config = Config(url=gated.url(), oauth=OAuth(redirect_uri=REDIRECT, authorize=step))

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store) as client:
            with pytest.raises(Declined):
                async with client.connect(config):
                    pass  # pragma: no cover - the connect fails

    backend.run(main)


def test_an_authorization_completed_later_from_the_redirect(
    backend: Backend, gated: Server, auth_server: AuthServer, store: Any
) -> None:
    kept = MemoryTokenStore()
    config = Config(url=gated.url(), oauth=OAuth(redirect_uri=REDIRECT, store=kept))

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store) as client:
            with pytest.raises(Unauthorized) as caught:
                async with client.connect(config):
                    pass  # pragma: no cover - the connect fails
            url = caught.value.authorization_url
            assert url is not None
            redirect = follow(url)  # the person, at the platform's own callback
            await client.complete_authorization(config, redirect)
            async with client.connect(config) as conn:
                assert await conn.list_tools()

    backend.run(main)
    tokens = granted(store, kept, gated.url())
    assert tokens is not None and tokens.access_token.startswith("e2e-")


def test_a_redirect_completes_only_with_the_config_that_began_it_and_once(
    backend: Backend, launch: Launcher, gated: Server, auth_server: AuthServer, store: Any
) -> None:
    """The redirect's state finds the pending authorization; completing it for another
    server (a real one, sharing the store) or another client is refused and the token
    endpoint sees no request; its own Config completes it once, then never again.
    Refused: a CallerError, or with a shared store (the refusal comes after the store
    answered) ``Unauthorized(cause="state_mismatch")``."""
    other = launch("--stateless", "--json")  # another MCP server, no OAuth gate
    kept = MemoryTokenStore()
    config = Config(url=gated.url(), oauth=OAuth(redirect_uri=REDIRECT, store=kept))
    wrong_server = Config(url=other.url(), oauth=OAuth(redirect_uri=REDIRECT, store=kept))
    wrong_client = Config(
        url=gated.url(), oauth=OAuth(client_id="someone-else", redirect_uri=REDIRECT, store=kept)
    )

    def token_requests() -> int:
        return auth_server.requests.count(("POST", "/token"))

    refused = CallerError if store is None else Unauthorized
    again = "completed already" if store is None else "no pending authorization"

    async def main() -> None:
        async with backend.Client(allow_loopback=True, store=store) as client:
            with pytest.raises(Unauthorized) as caught:
                async with client.connect(config):
                    pass  # pragma: no cover - the connect fails
            url = caught.value.authorization_url
            assert url is not None
            redirect = follow(url)  # the person, at the platform's own callback
            seen = token_requests()
            for wrong, differs in (
                (wrong_server, f"Config.url is {other.url()!r}, not {gated.url()!r}"),
                (wrong_client, "OAuth.client_id is 'someone-else', not None"),
            ):
                with pytest.raises(refused, match=re.escape(differs)) as wrongly:
                    await client.complete_authorization(wrong, redirect)
                assert store is None or wrongly.value.cause == "state_mismatch"  # type: ignore[attr-defined]
                assert token_requests() == seen  # nothing went to the token endpoint
            await client.complete_authorization(config, redirect)
            assert token_requests() == seen + 1
            with pytest.raises(refused, match=again) as twice:
                await client.complete_authorization(config, redirect)
            assert store is None or twice.value.cause == "state_mismatch"  # type: ignore[attr-defined]
            assert token_requests() == seen + 1
            async with client.connect(config) as conn:
                assert await conn.list_tools()

    backend.run(main)
    assert granted(store, kept, other.url()) is None
    tokens = granted(store, kept, gated.url())
    assert tokens is not None and tokens.access_token.startswith("e2e-")


def test_dpop_binds_the_token_and_answers_both_nonces(
    backend: Backend, gated: Server, auth_server: AuthServer, store: Any
) -> None:
    from sansmcp.oauth_keys import Es256Key

    kept = MemoryTokenStore()

    async def step(url: str) -> str:
        return follow(url)

    oauth = OAuth(redirect_uri=REDIRECT, authorize=step, store=kept, dpop_key=Es256Key.generate())
    config = Config(url=gated.url(), oauth=oauth)
    before = len(auth_server.dpop_nonces)

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, store=store) as client,
            client.connect(config) as conn,
        ):
            assert "echo" in [tool.name for tool in await conn.list_tools()]
            result = await conn.call_tool("echo", b'{"text": "hi"}')
            assert not result.is_error

    backend.run(main)
    assert auth_server.dpop_nonces[before:] == [None, "as-nonce"]  # one retry, with the nonce
    tokens = granted(store, kept, gated.url())
    assert tokens is not None and tokens.token_type == "DPoP"
    assert tokens.access_token.startswith("e2e-dpop-") and tokens.access_token not in repr(tokens)
