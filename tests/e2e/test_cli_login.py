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

    assert cli.main(["logout", gated.url(), *common]) == cli.EXIT_OK
    assert json.loads(tokens.read_text())["tokens"] == {}
    status = cli.main(["tools", gated.url(), "--oauth", *common])
    assert status == cli.EXIT_UNAUTHORIZED
    assert "cause=authorization_required" in capsys.readouterr().err
