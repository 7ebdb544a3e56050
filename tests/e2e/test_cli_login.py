"""``sansmcp login / tools --oauth / logout`` against the e2e OAuth server pair: the
authorization server redirects straight back to the CLI's loopback listener; a
stand-in browser (``webbrowser.open``) follows that one redirect."""

from __future__ import annotations

import http.client
import json
import os
import stat
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sansmcp import cli

from .conftest import Launcher, Server
from .oauth_server import AuthServer


@pytest.fixture(scope="module")
def auth_server() -> Iterator[AuthServer]:
    with AuthServer() as server:
        yield server


@pytest.fixture(scope="module")
def gated(launch: Launcher, auth_server: AuthServer) -> Server:
    return launch("--stateless", "--json", "--oauth", auth_server.url)


def _get(url: str) -> http.client.HTTPResponse:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=5)
    connection.request("GET", f"{parts.path}?{parts.query}")
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


def browser(url: str) -> bool:
    """What a person's browser does: the AS redirects, the browser follows to the CLI."""

    def visit() -> None:
        location = _get(url).getheader("location") or ""
        assert location.startswith("http://127.0.0.1:")
        assert _get(location).status == 200

    threading.Thread(target=visit, daemon=True).start()
    return True


@pytest.mark.parametrize("backend", ["sync", "asyncio", "trio"])
def test_login_then_tools_with_oauth_then_logout(
    backend: str,
    gated: Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tokens = tmp_path / "state" / "tokens.json"
    monkeypatch.setenv("SANSMCP_TOKEN_FILE", str(tokens))
    monkeypatch.setattr("webbrowser.open", browser)
    common = ["--allow-loopback", "--backend", backend]
    assert cli.main(["login", gated.url(), "--open", *common]) == cli.EXIT_OK
    err = capsys.readouterr().err
    assert "open this URL to authorize" in err and "logged in" in err
    assert stat.S_IMODE(os.stat(tokens).st_mode) == 0o600
    stored = json.loads(tokens.read_text())
    (entry,) = stored["tokens"].values()
    assert entry["access_token"].startswith("e2e-")
    assert entry["access_token"] not in err

    assert cli.main(["tools", gated.url(), "--oauth", "--json", *common]) == cli.EXIT_OK
    listing = json.loads(capsys.readouterr().out)
    assert "echo" in [tool["name"] for tool in listing["tools"]]

    # a stored login is used without --oauth (unless a bearer token is given)
    assert cli.main(["tools", gated.url(), "--json", *common]) == cli.EXIT_OK
    assert "echo" in [tool["name"] for tool in json.loads(capsys.readouterr().out)["tools"]]

    assert cli.main(["logout", gated.url(), *common]) == cli.EXIT_OK
    assert capsys.readouterr().err == f"sansmcp: logged out of {gated.url()}\n"
    assert json.loads(tokens.read_text())["tokens"] == {}
    assert cli.main(["logout", gated.url(), *common]) == cli.EXIT_OK
    assert capsys.readouterr().err == f"sansmcp: no stored tokens for {gated.url()}\n"
    status = cli.main(["tools", gated.url(), *common])
    assert status == cli.EXIT_UNAUTHORIZED
    assert f"(next: run `sansmcp login {gated.url()}`;" in capsys.readouterr().err
    status = cli.main(["tools", gated.url(), "--oauth", *common])
    assert status == cli.EXIT_UNAUTHORIZED
    assert "cause=authorization_required" in capsys.readouterr().err


def test_the_token_file_keeps_a_dpop_token_dpop(tmp_path: Path) -> None:
    from sansmcp.cli.oauth import FileTokenStore
    from sansmcp.core.oauth.store import Tokens

    store = FileTokenStore(tmp_path / "tokens.json")
    store.save_tokens("https://mcp.example/mcp", Tokens(access_token="a", token_type="DPoP"))
    again = FileTokenStore(tmp_path / "tokens.json").tokens("https://mcp.example/mcp")
    assert again is not None and again.token_type == "DPoP" and again.access_token == "a"
    store.save_tokens("https://other.example/mcp", Tokens(access_token="b"))
    kept = store.tokens("https://other.example/mcp")
    assert kept is not None and kept.token_type == "Bearer"


def _in_thread(listener: Any, timeout: float) -> tuple[threading.Thread, list[str | None]]:
    result: list[str | None] = []
    thread = threading.Thread(target=lambda: result.append(listener.wait(timeout)), daemon=True)
    thread.start()
    return thread, result


def test_the_redirect_listener_takes_only_a_callback_with_state() -> None:
    from sansmcp.cli.oauth import RedirectListener

    listener = RedirectListener()
    try:
        thread, result = _in_thread(listener, 60.0)
        base = f"http://127.0.0.1:{listener.port}"
        assert _get(f"{base}/callback").status == 404
        assert _get(f"{base}/callback?code=c").status == 404
        assert _get(f"{base}/other?state=s").status == 404
        parts = urllib.parse.urlsplit(base)
        browser_side = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=5)
        browser_side.request("GET", "/favicon.ico")  # what a browser asks for beside it
        favicon = browser_side.getresponse()
        assert favicon.status == 404 and b"authorized" not in favicon.read()
        browser_side.close()
        assert _get(f"{base}/callback?code=c&state=s").status == 200
        thread.join(30)
        assert result == [f"{base}/callback?code=c&state=s"]
    finally:
        listener.close()


def test_the_redirect_listener_keeps_one_deadline_under_other_requests() -> None:
    """Requests that are not the redirect do not extend the wait: it ends with None."""
    from sansmcp.cli.oauth import RedirectListener

    listener = RedirectListener()
    stop = threading.Event()

    def pester() -> None:
        while not stop.is_set():
            try:
                _get(f"http://127.0.0.1:{listener.port}/elsewhere")
            except OSError:
                return

    try:
        thread, result = _in_thread(listener, 0.5)
        pests = threading.Thread(target=pester, daemon=True)
        pests.start()
        thread.join(30)  # a guard against a hang, not a speed check
        assert not thread.is_alive() and result == [None]
    finally:
        stop.set()
        listener.close()
