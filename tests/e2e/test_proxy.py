"""Egress through an HTTP CONNECT proxy: a real tinyproxy, and hostile proxies.

* ``tinyproxy`` (Debian's, started here with its own config: loopback only, an
  allow-list of the test servers' ports, a log at level Connect; stopped by pid)
  carries the work item -- list and call, both eras, HTTP/1.1 and TLS with h2 -- on
  asyncio, trio and the blocking adapter.  A counting relay in front of each MCP
  server proves that every connection it accepted came through the proxy: the
  relay's accepts equal the CONNECTs tinyproxy established to it.  With
  ``guard="proxy"`` and no ``allow_loopback`` the target is out of the client's own
  reach: only the proxy can get there.
* With ``BasicAuth`` the proxy answers 407 without credentials:
  ``ConnectionFailed(cause="proxy", status=407)`` with its challenge.
* :class:`HostileProxy`, a loopback server in a thread, answers CONNECT badly (a 2xx
  with a body, bytes before the target spoke, an early close, a stall, a head
  trickling in, an endless head, a 3xx); each ends classified.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sansmcp import Config, ConnectionFailed, MemoryTokenStore, OAuth
from sansmcp.core.limits import Limits
from tests.tiers import missing_server

from .conftest import (
    SERVER_START_TIMEOUT,
    TLS_NAME,
    Backend,
    Launcher,
    Relay,
    Server,
    Tls,
    free_port,
    resolver_for,
)
from .oauth_server import AuthServer
from .test_http2 import VERSIONS, exercise
from .test_input import ROOTS, request_log
from .test_oauth import REDIRECT, follow

TINYPROXY = shutil.which("tinyproxy") or (
    "/usr/bin/tinyproxy" if os.path.exists("/usr/bin/tinyproxy") else None
)
USER, PASSWORD = "agent", "s3cret"


@dataclass
class Tinyproxy:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connects(self, port: int) -> int:
        """The CONNECTs to ``127.0.0.1:port`` the proxy was asked for (its log)."""
        pattern = re.compile(rf"CONNECT 127\.0\.0\.1:{port} HTTP/1\.1")
        return len(pattern.findall(self.log.read_text(errors="replace")))

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


def start_tinyproxy(directory: Path, ports: list[int], *, auth: bool = False) -> Tinyproxy:
    if TINYPROXY is None:
        missing_server("tinyproxy is not installed (Debian package tinyproxy; .ci/run installs it)")
    port = free_port()
    log = directory / f"tinyproxy-{port}.log"
    lines = [
        f"Port {port}",
        "Listen 127.0.0.1",
        "Timeout 30",
        f'LogFile "{log}"',
        "LogLevel Connect",
        f'PidFile "{directory / f"tinyproxy-{port}.pid"}"',
        "MaxClients 64",
        "Allow 127.0.0.1",
        "DisableViaHeader Yes",
        *(f"ConnectPort {allowed}" for allowed in ports),  # the allow-list: these ports only
    ]
    if auth:
        lines.append(f"BasicAuth {USER} {PASSWORD}")
    config = directory / f"tinyproxy-{port}.conf"
    config.write_text("\n".join(lines) + "\n")
    process = subprocess.Popen(
        [TINYPROXY, "-d", "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    proxy = Tinyproxy(port, process, log)
    end = time.monotonic() + SERVER_START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"tinyproxy exited early: {log.read_text(errors='replace')}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proxy
        except OSError:
            if time.monotonic() > end:
                proxy.stop()
                raise RuntimeError("tinyproxy is not listening") from None
            time.sleep(0.05)


@pytest.fixture
def back_channel(launch: Launcher) -> Server:
    """Stateful, SSE, with the ``roots`` tool (a request on the standalone GET stream)."""
    return launch("--back-channel")


@pytest.fixture
def relays(plain: Server, tls_h2: Server, back_channel: Server) -> Iterator[dict[str, Relay]]:
    """A counting relay in front of each MCP server (the proxy's only way to it)."""
    with (
        Relay(plain.address) as h1,
        Relay(tls_h2.address) as h2,
        Relay(back_channel.address) as legacy,
    ):
        yield {"h1": h1, "h2": h2, "legacy": legacy}


@pytest.fixture
def tinyproxy(tmp_path: Path, relays: dict[str, Relay]) -> Iterator[Tinyproxy]:
    proxy = start_tinyproxy(tmp_path, [relay.port for relay in relays.values()])
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.mark.parametrize("versions", list(VERSIONS))
def test_the_work_item_goes_through_tinyproxy_on_http11(
    backend: Backend, tinyproxy: Tinyproxy, relays: dict[str, Relay], versions: str
) -> None:
    wanted, expected = VERSIONS[versions]
    relay = relays["h1"]

    async def main() -> None:
        async with backend.Client(allow_loopback=True, proxy=tinyproxy.url) as client:
            seen = await exercise(client, relay.url(), wanted, expected)
            assert seen == f"1.1 {expected}"

    backend.run(main)
    assert relay.accepts >= 1
    assert tinyproxy.connects(relay.port) == relay.accepts  # no connection bypassed it


@pytest.mark.parametrize("versions", list(VERSIONS))
def test_the_work_item_goes_through_tinyproxy_on_tls_h2(
    backend: Backend, tinyproxy: Tinyproxy, relays: dict[str, Relay], tls: Tls, versions: str
) -> None:
    """TLS with the server's name verified and ALPN h2, end to end inside the tunnel
    (the guard resolves the name and tunnels to the vetted address)."""
    wanted, expected = VERSIONS[versions]
    relay = relays["h2"]

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True,
            proxy=tinyproxy.url,
            ssl_context=tls.client_context(),
            resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
        ) as client:
            seen = await exercise(
                client, relay.url(host=TLS_NAME, scheme="https"), wanted, expected
            )
            assert seen == f"2 {expected}"

    backend.run(main)
    assert relay.accepts >= 1
    assert tinyproxy.connects(relay.port) == relay.accepts


def test_a_legacy_sessions_stream_and_delete_go_through_tinyproxy(
    backend: Backend, tinyproxy: Tinyproxy, relays: dict[str, Relay], back_channel: Server
) -> None:
    """The POSTs, the standalone GET stream (a server request rides it) and the DELETE
    at close: every connection the server accepted came through the proxy."""
    relay = relays["legacy"]
    tag = f"proxy-{backend.name}"

    async def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        return {key: ROOTS for key in requests}

    async def main() -> None:
        config = Config(
            url=relay.url(), protocol_versions=["2025-11-25"], headers={"x-test-tag": tag}
        )
        async with (
            backend.Client(
                allow_loopback=True,
                proxy=tinyproxy.url,
                input_handler=handler,
                capabilities={"roots": {}},
            ) as client,
            client.connect(config) as conn,
        ):
            result = await conn.call_tool("roots", b"{}")
            assert [c.text for c in result.content] == ["file:///work/a"]

    backend.run(main)
    methods = [entry["method"] for entry in request_log(back_channel, tag)]
    assert {"POST", "GET", "DELETE"} <= set(methods), methods
    assert relay.accepts >= 1 and tinyproxy.connects(relay.port) == relay.accepts


@pytest.fixture(scope="module")
def gated(launch: Launcher) -> Iterator[tuple[Server, AuthServer]]:
    """An MCP server behind a bearer gate and its authorization server."""
    with AuthServer() as auth_server:
        yield launch("--stateless", "--json", "--oauth", auth_server.url), auth_server


def test_every_oauth_fetch_goes_through_tinyproxy(
    backend: Backend, tmp_path: Path, gated: tuple[Server, AuthServer]
) -> None:
    """Without ``allow_loopback`` the client refuses both loopback servers itself, so
    the metadata, registration and token fetches and the MCP requests that succeed went
    through the proxy (``guard="proxy"``); its log shows a CONNECT to each."""
    server, auth_server = gated
    auth_port = int(auth_server.url.rsplit(":", 1)[1])
    proxy = start_tinyproxy(tmp_path, [server.port, auth_port])
    before = len(auth_server.requests)

    async def step(url: str) -> str:
        return follow(url)  # the person's browser: not through the client

    config = Config(
        url=server.url(),
        oauth=OAuth(redirect_uri=REDIRECT, authorize=step, store=MemoryTokenStore()),
    )
    try:

        async def main() -> None:
            async with (
                backend.Client(proxy=proxy.url, guard="proxy") as client,
                client.connect(config) as conn,
            ):
                assert "echo" in [tool.name for tool in await conn.list_tools()]

        backend.run(main)
        assert auth_server.requests[before:] == [
            ("GET", "/.well-known/oauth-authorization-server"),
            ("POST", "/register"),
            ("GET", "/authorize"),
            ("POST", "/token"),
        ]
        assert proxy.connects(auth_port) >= 1 and proxy.connects(server.port) >= 1
    finally:
        proxy.stop()


def test_guard_proxy_reaches_what_the_client_may_not(
    backend: Backend, tinyproxy: Tinyproxy, relays: dict[str, Relay]
) -> None:
    """Without allow_loopback the client refuses 127.0.0.1 itself; through the proxy
    with the guard mode "proxy" it is the proxy's call, and the proxy allows it."""
    relay = relays["h1"]

    async def main() -> None:
        async with backend.Client() as direct:
            with pytest.raises(ConnectionFailed) as caught:
                async with direct.connect(Config(url=relay.url())):
                    pass  # pragma: no cover - the dial is refused
            assert caught.value.cause == "refused_address"
        async with backend.Client(proxy=tinyproxy.url, guard="proxy") as client:
            async with client.connect(Config(url=relay.url())) as conn:
                assert {tool.name for tool in await conn.list_tools()} >= {"echo"}
                result = await conn.call_tool("echo", b'{"text": "via the proxy"}')
                assert [c.text for c in result.content] == ["via the proxy"]
            # metadata stays refused whatever the proxy would do
            with pytest.raises(ConnectionFailed) as caught:
                async with client.connect(Config(url="http://169.254.169.254/mcp")):
                    pass  # pragma: no cover - refused before any packet
            assert caught.value.cause == "refused_address"

    backend.run(main)
    assert relay.accepts >= 1 and tinyproxy.connects(relay.port) == relay.accepts


def test_the_proxys_allow_list_refusal_is_classified(
    backend: Backend, tinyproxy: Tinyproxy, plain: Server
) -> None:
    """A port outside tinyproxy's ConnectPort list: it refuses the CONNECT (403)."""

    async def main() -> None:
        async with backend.Client(allow_loopback=True, proxy=tinyproxy.url) as client:
            with pytest.raises(ConnectionFailed) as caught:
                async with client.connect(Config(url=plain.url())):
                    pass  # pragma: no cover - the proxy refuses
            assert caught.value.cause == "proxy" and caught.value.status == 403

    backend.run(main)


def test_proxy_authentication(backend: Backend, tmp_path: Path, relays: dict[str, Relay]) -> None:
    relay = relays["h1"]
    proxy = start_tinyproxy(tmp_path, [relay.port], auth=True)
    try:

        async def main() -> None:
            async with backend.Client(allow_loopback=True, proxy=proxy.url) as client:
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(Config(url=relay.url())):
                        pass  # pragma: no cover - 407
                failure = caught.value
                assert failure.cause == "proxy" and failure.status == 407
                assert failure.proxy_authenticate is not None
                assert failure.proxy_authenticate.lower().startswith("basic")
                assert "wants credentials" in failure.message
                # a per-Config proxy with the credentials (a tenant's own)
                with_auth = f"http://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}"
                config = Config(url=relay.url(), proxy=with_auth)
                async with client.connect(config) as conn:
                    assert await conn.list_tools()
                wrong = Config(url=relay.url(), proxy=f"http://{USER}:nope@127.0.0.1:{proxy.port}")
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(wrong) as conn:  # (the era is known: no I/O)
                        await conn.list_tools()
                refused = caught.value
                # (tinyproxy 1.11 answers wrong credentials on CONNECT with 401)
                assert refused.cause == "proxy" and refused.status in (401, 407)
                assert "nope" not in refused.message and PASSWORD not in refused.message

        backend.run(main)
    finally:
        proxy.stop()


# ---------------------------------------------------------------- hostile proxies


class HostileProxy:
    """A loopback "proxy" in a thread: reads a CONNECT head, then misbehaves as told."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = int(self.listener.getsockname()[1])
        self.requests: list[bytes] = []
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, name="hostile-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.listener.close()
        self._thread.join(timeout=5)
        for sock in self._held:
            sock.close()

    def _serve(self) -> None:
        self.listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                continue
            self._held.append(sock)
            sock.settimeout(5)
            head = b""
            try:
                while b"\r\n\r\n" not in head:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    head += chunk
            except OSError:
                continue
            self.requests.append(head)
            self._answer(sock)

    def _answer(self, sock: socket.socket) -> None:
        with_body = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        answers = {
            "body": with_body,
            "speaks": b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
            "redirect": b"HTTP/1.1 302 Found\r\nLocation: http://elsewhere/\r\n\r\n",
            "endless": b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"p" * 200_000,
            # asks for credentials on every CONNECT, whatever comes (a 407 loop)
            "auth": b"HTTP/1.1 407 Proxy Authentication Required\r\n"
            b'Proxy-Authenticate: Basic realm="loop"\r\nContent-Length: 0\r\n\r\n',
        }
        try:
            if self.behaviour == "close":
                sock.close()
            elif self.behaviour == "slow":  # a head one byte at a time, never finished
                for byte in b"HTTP/1.1 200 Connection established\r\nX-Slow: yes":
                    if self._stop.wait(0.05):
                        break
                    sock.sendall(bytes([byte]))
            elif self.behaviour in answers:
                sock.sendall(answers[self.behaviour])
            # "stall": says nothing, holds the socket
        except OSError:
            pass


HOSTILE = {
    # behaviour: (cause, status, words in the message, bound)
    "body": ("proxy", 200, "and a body", None),
    "speaks": ("proxy", None, "before the target spoke", None),
    "close": ("proxy", None, "closed the connection before answering CONNECT", None),
    "redirect": ("proxy", 302, "refused CONNECT with status 302", None),
    "auth": ("proxy", 407, "refused CONNECT with status 407", None),
    "endless": ("budget", None, "Limits.max_header_bytes", "max_header_bytes"),
    "stall": ("timeout", None, "no tunnel through the proxy", "dial_timeout"),
    "slow": ("timeout", None, "no tunnel through the proxy", "dial_timeout"),
}


@pytest.mark.parametrize("behaviour", ["stall", "slow"])
def test_a_proxy_that_stalls_ends_at_its_own_connect_deadline(
    backend: Backend, behaviour: str
) -> None:
    """The answer's own bound, inside a long dial_timeout: it is the one named."""
    limits = Limits(dial_timeout=30.0, proxy_connect_timeout=0.3)

    async def main() -> Any:
        with HostileProxy(behaviour) as proxy:
            async with backend.Client(limits=limits, proxy=proxy.url, guard="proxy") as client:
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(Config(url="http://mcp.example:8000/mcp")):
                        pass  # pragma: no cover - the tunnel never comes up
            assert len(proxy.requests) == 1  # one CONNECT, sent and left unanswered
            return caught.value

    failure = backend.run(main)
    assert failure.cause == "timeout" and failure.bound == "proxy_connect_timeout", failure
    assert failure.limit == 0.3 and "the proxy http://127.0.0.1:" in failure.message


@pytest.mark.parametrize("behaviour", list(HOSTILE))
def test_a_hostile_proxy_ends_classified(backend: Backend, behaviour: str) -> None:
    cause, status, words, bound = HOSTILE[behaviour]
    limits = Limits(dial_timeout=0.5, max_header_bytes=16_384)

    async def main() -> Any:
        with HostileProxy(behaviour) as proxy:
            async with backend.Client(limits=limits, proxy=proxy.url, guard="proxy") as client:
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(Config(url="http://mcp.example:8000/mcp")):
                        pass  # pragma: no cover - the tunnel never comes up
            assert proxy.requests[0].startswith(b"CONNECT mcp.example:8000 HTTP/1.1\r\n")
            return caught.value

    failure = backend.run(main)
    assert failure.cause == cause, failure
    assert failure.status == status and words in failure.message, failure
    assert failure.bound == bound


def test_a_407_is_asked_once_and_ends_with_its_challenge(backend: Backend) -> None:
    """A proxy that asks for credentials on every CONNECT: one CONNECT, no loop, the
    challenge carried to the caller."""

    async def main() -> Any:
        with HostileProxy("auth") as proxy:
            async with backend.Client(proxy=proxy.url, guard="proxy") as client:
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(Config(url="http://mcp.example:8000/mcp")):
                        pass  # pragma: no cover - the tunnel never comes up
            assert len(proxy.requests) == 1
            return caught.value

    failure = backend.run(main)
    assert failure.status == 407 and failure.proxy_authenticate == 'Basic realm="loop"'


class Gateway(HostileProxy):
    """A working CONNECT proxy that cannot reach the address ``down``: it answers a
    CONNECT to it with ``status`` and tunnels every other (a thread per tunnel)."""

    def __init__(self, status: int, down: str) -> None:
        super().__init__("gateway")
        self.status, self.down = status, down

    def targets(self) -> list[str]:
        return [request.split(b" ")[1].decode() for request in self.requests]

    def _answer(self, sock: socket.socket) -> None:
        host, port = self.targets()[-1].rsplit(":", 1)
        try:
            if host == self.down:
                sock.sendall(b"HTTP/1.1 %d Unreachable\r\nContent-Length: 0\r\n\r\n" % self.status)
                return
            upstream = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        except OSError:
            return
        self._held.append(upstream)
        threading.Thread(target=self._pipe, args=(sock, upstream), daemon=True).start()

    def _pipe(self, one: socket.socket, other: socket.socket) -> None:
        """Bytes both ways until either side ends."""
        while not self._stop.is_set():
            ready, _, _ = select.select([one, other], [], [], 0.05)
            try:
                for sock in ready:
                    if not (data := sock.recv(65536)):
                        return
                    (other if sock is one else one).sendall(data)
            except OSError:
                return


SPREAD_NAME = TLS_NAME  # (a name the test servers accept in Host)


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_proxy_that_cannot_reach_one_vetted_address_gets_the_next(
    backend: Backend, relays: dict[str, Relay], status: int
) -> None:
    """Guard "local": the name resolves to 127.0.0.2 (nothing listens there) and
    127.0.0.1; the proxy answers the CONNECT to the first with ``status``, and the
    client asks it for the second, as a direct dial tries the next address."""
    relay = relays["h1"]
    wanted, expected = VERSIONS["default"]
    resolver = resolver_for({SPREAD_NAME: ["127.0.0.2", "127.0.0.1"]})
    with Gateway(status, down="127.0.0.2") as proxy:

        async def main() -> None:
            async with backend.Client(
                allow_loopback=True, proxy=proxy.url, resolver=resolver
            ) as client:
                seen = await exercise(client, relay.url(host=SPREAD_NAME), wanted, expected)
                assert seen == f"1.1 {expected}"

        backend.run(main)
        targets = proxy.targets()
    down, up = f"127.0.0.2:{relay.port}", f"127.0.0.1:{relay.port}"
    assert targets and targets == [down, up] * (len(targets) // 2)  # each dial: both, in order
    assert relay.accepts == targets.count(up)


def test_a_proxys_policy_refusal_is_not_retried_on_the_next_vetted_address(
    backend: Backend, relays: dict[str, Relay]
) -> None:
    relay = relays["h1"]
    resolver = resolver_for({SPREAD_NAME: ["127.0.0.2", "127.0.0.1"]})
    with Gateway(403, down="127.0.0.2") as proxy:

        async def main() -> Any:
            async with backend.Client(
                allow_loopback=True, proxy=proxy.url, resolver=resolver
            ) as client:
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(Config(url=relay.url(host=SPREAD_NAME))):
                        pass  # pragma: no cover - refused
            return caught.value

        failure = backend.run(main)
        assert proxy.targets() == [f"127.0.0.2:{relay.port}"]
    assert failure.cause == "proxy" and failure.status == 403
    assert relay.accepts == 0


def test_tinyproxys_unable_to_connect_moves_on_to_the_next_vetted_address(
    backend: Backend, tinyproxy: Tinyproxy, relays: dict[str, Relay]
) -> None:
    """tinyproxy answers a CONNECT it cannot carry out with "500 Unable to connect"."""
    relay = relays["h1"]
    wanted, expected = VERSIONS["default"]
    resolver = resolver_for({SPREAD_NAME: ["127.0.0.2", "127.0.0.1"]})

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True, proxy=tinyproxy.url, resolver=resolver
        ) as client:
            seen = await exercise(client, relay.url(host=SPREAD_NAME), wanted, expected)
            assert seen == f"1.1 {expected}"

    backend.run(main)
    log = tinyproxy.log.read_text(errors="replace")
    unreachable = log.count(f"CONNECT 127.0.0.2:{relay.port} HTTP/1.1")
    assert unreachable >= 1 and unreachable == tinyproxy.connects(relay.port)
    assert relay.accepts == tinyproxy.connects(relay.port)


ENVIRONMENT_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")


def test_the_environments_proxies_are_ignored(
    backend: Backend, relays: dict[str, Relay], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every proxy variable names a proxy that would fail the work item: it goes direct,
    and that proxy sees no connection (sansmcp takes a proxy only from ``proxy=``)."""
    relay = relays["h1"]
    wanted, expected = VERSIONS[next(iter(VERSIONS))]
    with HostileProxy("close") as proxy:
        for name in ENVIRONMENT_PROXIES:
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)

        async def main() -> None:
            async with backend.Client(allow_loopback=True) as client:
                seen = await exercise(client, relay.url(), wanted, expected)
                assert seen == f"1.1 {expected}"

        backend.run(main)
        assert proxy.requests == []
    assert relay.accepts >= 1


# ---------------------------------------------------------------- an https:// proxy


class TlsFront:
    """A TLS terminator on loopback in front of a real proxy: a real TLS endpoint (its
    certificate, for 127.0.0.1, from the test CA the client trusts) whose every byte
    goes to tinyproxy and back, so ``https://127.0.0.1:port`` is a TLS proxy."""

    def __init__(self, tls: Tls, upstream: int) -> None:
        self.upstream = upstream
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.ca.issue_cert("127.0.0.1").configure_cert(self.context)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.05)
        self.port = int(self.listener.getsockname()[1])
        self.handshakes = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve, name="tls-front", daemon=True)]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> TlsFront:
        self._threads[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.listener.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                continue
            thread = threading.Thread(target=self._relay, args=(sock,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _relay(self, raw: socket.socket) -> None:
        raw.settimeout(5)
        try:
            front = self.context.wrap_socket(raw, server_side=True)
        except OSError:
            raw.close()
            return
        self.handshakes += 1
        back = socket.create_connection(("127.0.0.1", self.upstream))
        with front, back:
            while not self._stop.is_set():
                ready, _, _ = select.select([front, back], [], [], 0.05)
                try:
                    for sock in ready:
                        data = sock.recv(65536)
                        if not data:
                            return
                        (back if sock is front else front).sendall(data)
                    while front.pending():
                        back.sendall(front.recv(65536))
                except ssl.SSLWantReadError:
                    continue
                except OSError:
                    return


@pytest.mark.parametrize("target", ["h1", "h2"])
def test_the_work_item_goes_through_an_https_proxy(
    backend: Backend, tinyproxy: Tinyproxy, relays: dict[str, Relay], tls: Tls, target: str
) -> None:
    """TLS to the proxy (its certificate verified with the client's trust), the CONNECT
    inside it, and for an https target TLS with ALPN h2 inside that (TLS in TLS)."""
    relay = relays[target]
    wanted, expected = VERSIONS["default"]
    with TlsFront(tls, tinyproxy.port) as front:

        async def main() -> None:
            async with backend.Client(
                allow_loopback=True,
                proxy=front.url,
                ssl_context=tls.client_context(),
                resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
            ) as client:
                https = relay.url(host=TLS_NAME, scheme="https")
                url = relay.url() if target == "h1" else https
                seen = await exercise(client, url, wanted, expected)
                assert seen == ("1.1 " if target == "h1" else "2 ") + expected

        backend.run(main)
        assert front.handshakes >= 1
    assert relay.accepts >= 1 and tinyproxy.connects(relay.port) == relay.accepts


def test_an_https_proxys_certificate_is_verified(
    backend: Backend, tinyproxy: Tinyproxy, tls: Tls
) -> None:
    """Without the test CA in its trust the client refuses the proxy: cause "tls"."""
    with TlsFront(tls, tinyproxy.port) as front:

        async def main() -> Any:
            async with backend.Client(proxy=front.url, guard="proxy") as client:
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(Config(url="http://mcp.example:8000/mcp")):
                        pass  # pragma: no cover - the proxy's certificate is refused
            return caught.value

        failure = backend.run(main)
    assert failure.cause == "tls", failure
    assert "TLS handshake with the proxy failed" in failure.message


@pytest.mark.parametrize("behaviour", ["body", "speaks", "close", "endless", "stall"])
def test_a_hostile_https_proxy_ends_classified(backend: Backend, tls: Tls, behaviour: str) -> None:
    """The hostile answers inside TLS with the proxy (the TLS front before a hostile
    proxy): each ends as it does in the clear, within the same bounds."""
    cause, status, words, bound = HOSTILE[behaviour]
    limits = Limits(dial_timeout=0.5, max_header_bytes=16_384)

    async def main() -> Any:
        with HostileProxy(behaviour) as proxy, TlsFront(tls, proxy.port) as front:
            async with backend.Client(
                limits=limits, proxy=front.url, guard="proxy", ssl_context=tls.client_context()
            ) as client:
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(Config(url="http://mcp.example:8000/mcp")):
                        pass  # pragma: no cover - the tunnel never comes up
            assert front.handshakes == 1
            assert proxy.requests[0].startswith(b"CONNECT mcp.example:8000 HTTP/1.1\r\n")
            return caught.value

    failure = backend.run(main)
    assert failure.cause == cause, failure
    assert failure.status == status and words in failure.message, failure
    assert failure.bound == bound


def test_an_https_proxy_that_never_shakes_hands_ends_at_its_connect_deadline(
    backend: Backend, tls: Tls
) -> None:
    """A listener that takes the connection and never answers the TLS hello: the
    proxy's own deadline (``proxy_connect_timeout``) covers its handshake too."""
    limits = Limits(dial_timeout=30.0, proxy_connect_timeout=0.3)

    async def main() -> Any:
        with HostileProxy("stall") as mute:
            proxy = f"https://127.0.0.1:{mute.port}"
            async with backend.Client(
                limits=limits, proxy=proxy, guard="proxy", ssl_context=tls.client_context()
            ) as client:
                with pytest.raises(ConnectionFailed) as caught:
                    async with client.connect(Config(url="http://mcp.example:8000/mcp")):
                        pass  # pragma: no cover - no TLS with the proxy
            # what it read (once the client gave up) is a TLS hello, no CONNECT in the clear
            assert not any(request.startswith(b"CONNECT") for request in mute.requests)
            return caught.value

    failure = backend.run(main)
    assert failure.cause == "timeout" and failure.bound == "proxy_connect_timeout", failure
    assert failure.limit == 0.3 and "the proxy https://127.0.0.1:" in failure.message
