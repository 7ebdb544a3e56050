"""The command line's ``--proxy URL`` and ``--proxy-guard local|proxy`` (issue 29).

The installed ``sansmcp`` console script, run as a real subprocess, lists and calls
through a real tinyproxy (``tests/e2e/test_proxy.py``'s, with its log at level
Connect): a counting relay in front of the MCP server proves every connection the
server got came through the proxy.  With ``--proxy-guard proxy`` and no
``--allow-loopback`` only the proxy can reach the loopback server.  A bad proxy URL
is a ``CallerError``: exit status 2, one line, no connection, no credential printed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sansmcp.cli import main

from .conftest import Relay, Server
from .test_proxy import PASSWORD, USER, Tinyproxy, start_tinyproxy

SANSMCP = Path(sys.executable).parent / "sansmcp"
REPO = Path(__file__).resolve().parents[2]
LOOP = "--allow-loopback"


def sansmcp(*argv: str) -> subprocess.CompletedProcess[str]:
    """The console script, as a person runs it (no token from the environment), running
    this checkout's code (the venv's editable install may point at another)."""
    assert SANSMCP.exists(), f"{SANSMCP} is missing: the package is not installed in this venv"
    env = {k: v for k, v in os.environ.items() if k != "SANSMCP_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [str(SANSMCP), *argv], capture_output=True, text=True, timeout=60, env=env, check=False
    )


@pytest.fixture
def relay(plain: Server) -> Iterator[Relay]:
    with Relay(plain.address) as relay:
        yield relay


@pytest.fixture
def tinyproxy(tmp_path: Path, relay: Relay) -> Iterator[Tinyproxy]:
    proxy = start_tinyproxy(tmp_path, [relay.port])
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.mark.parametrize("backend", ["sync", "asyncio", "trio"])
def test_a_call_goes_through_tinyproxy(backend: str, relay: Relay, tinyproxy: Tinyproxy) -> None:
    done = sansmcp(
        "call",
        relay.url(),
        "echo",
        '{"text": "via the proxy"}',
        LOOP,
        "--json",
        "--backend",
        backend,
        "--proxy",
        tinyproxy.url,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert [block["text"] for block in json.loads(done.stdout)["content"]] == ["via the proxy"]
    assert relay.accepts >= 1
    assert tinyproxy.connects(relay.port) == relay.accepts  # no connection bypassed it


def test_with_the_proxy_guard_only_the_proxy_reaches_the_server(
    relay: Relay, tinyproxy: Tinyproxy
) -> None:
    """No ``--allow-loopback``: direct, the client refuses the loopback server itself;
    with ``--proxy-guard proxy`` the proxy reaches it (``CONNECT 127.0.0.1:port``)."""
    direct = sansmcp("tools", relay.url())
    assert (direct.returncode, direct.stdout) == (3, "")
    assert direct.stderr.startswith("sansmcp: ConnectionFailed [cause=refused_address]: ")
    assert relay.accepts == 0
    proxied = sansmcp(
        "tools", relay.url(), "--json", "--proxy", tinyproxy.url, "--proxy-guard", "proxy"
    )
    assert (proxied.returncode, proxied.stderr) == (0, "")
    assert "echo" in {tool["name"] for tool in json.loads(proxied.stdout)["tools"]}
    assert relay.accepts >= 1 and tinyproxy.connects(relay.port) == relay.accepts


def test_the_proxys_credentials_come_from_the_url_and_are_never_printed(
    tmp_path: Path, relay: Relay
) -> None:
    proxy = start_tinyproxy(tmp_path, [relay.port], auth=True)
    try:
        refused = sansmcp("tools", relay.url(), LOOP, "--proxy", proxy.url)
        assert (refused.returncode, refused.stdout) == (3, "")
        assert refused.stderr.startswith("sansmcp: ConnectionFailed [cause=proxy")
        assert "407" in refused.stderr and refused.stderr.count("\n") == 1
        with_credentials = proxy.url.replace("://", f"://{USER}:{PASSWORD}@")
        done = sansmcp("tools", relay.url(), LOOP, "--proxy", with_credentials)
        assert (done.returncode, done.stderr) == (0, "")
        assert PASSWORD not in done.stdout
        failed = sansmcp("tools", "http://127.0.0.1:1/mcp", LOOP, "--proxy", with_credentials)
        assert failed.returncode == 3 and PASSWORD not in failed.stdout + failed.stderr
    finally:
        proxy.stop()
    assert relay.accepts >= 1 and proxy.connects(relay.port) >= relay.accepts


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--proxy", "ftp://proxy:3128"], "CallerError: the proxy URL must start with http://"),
        (["--proxy", "proxy:3128"], "CallerError: the proxy URL must start with http://"),
        (["--proxy", "http://proxy:3128/path"], "no path, query or fragment"),
        (["--proxy", "http://user:pa%zzss@proxy:3128"], "credentials have a bad percent-escape"),
        (["--proxy", "http://proxy:99999"], "CallerError: the proxy URL is unusable"),
        (["--proxy-guard", "proxy"], "CallerError: --proxy-guard needs --proxy"),
        (["--proxy", "http://proxy:3128", "--proxy-guard", "dns"], "--proxy-guard: invalid choice"),
    ],
)
def test_a_bad_proxy_option_is_a_usage_error_before_any_connection(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        status = main(["tools", url, LOOP, *argv])
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    assert err.startswith("sansmcp: ") and err.count("\n") == 1 and "Traceback" not in err
    assert expected in err
    assert "pa%zzss" not in err
