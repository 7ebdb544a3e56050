"""The dial guard and the HTTP policy on real sockets: refused before any byte.

Every refused address here routes to this machine if it were dialled (``0.0.0.0``
reaches 127.0.0.1, ``::`` reaches ::1), and a sentinel listener sits there, so
"never dialled" is observed, not assumed -- and no test can send a packet off
the loopback interface, even if the guard regressed.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from sansmcp import CallerError, Config, ConnectionFailed, Unauthorized
from sansmcp.core.net import dial
from sansmcp.core.url import parse_endpoint

from .conftest import Backend, Relay, Server, resolver_for


def relays_on_one_port(
    relay: Callable[..., Relay], target: tuple[str, int], hosts: list[tuple[str, bool]]
) -> list[Relay]:
    """Relays on ``hosts`` sharing one port (a forwarding relay where the flag is set,
    a sentinel otherwise); the first host picks the port."""
    for _ in range(20):
        first_host, forwards = hosts[0]
        made = [relay(target if forwards else None, first_host)]
        try:
            for host, forwards in hosts[1:]:
                made.append(relay(target if forwards else None, host, made[0].port))
        except OSError:
            continue  # the port is taken on another address: try another one
        return made
    raise RuntimeError("no port free on every address")


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "localhost", "mcp.example"],
)
def test_loopback_refused_by_default(
    backend: Backend, plain: Server, relay: Callable[..., Relay], host: str
) -> None:
    """Without allow_loopback: literals, IPv4-mapped IPv6 (both spellings), the
    system's ``localhost`` and a name the resolver hook maps to loopback are all
    refused, and neither listener sees a connection."""
    v4, v6 = relays_on_one_port(relay, plain.address, [("127.0.0.1", True), ("::1", True)])
    calls: list[str] = []
    resolver = (
        resolver_for({"mcp.example": ["127.0.0.1", "::1"]}, calls)
        if host == "mcp.example"
        else None
    )

    async def main() -> None:
        async with backend.Client(resolver=resolver) as client:
            with pytest.raises(ConnectionFailed) as refused:
                async with client.connect(Config(url=v4.url(host=host))):
                    raise AssertionError("connected to loopback")
            assert refused.value.cause == "refused_address"
            assert "loopback" in refused.value.message
            assert "allow_loopback" in refused.value.message
            assert client.pool.socket_count == 0

    backend.run(main)
    assert (v4.accepts, v6.accepts) == (0, 0)
    assert calls == (["mcp.example"] if host == "mcp.example" else [])


def test_ipv4_mapped_loopback_allowed_with_allow_loopback(
    backend: Backend, plain: Server, relay: Callable[..., Relay]
) -> None:
    """The mapped form is judged by its IPv4 address, both ways."""
    proxy = relay(plain.address)

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True) as client,
            client.connect(Config(url=proxy.url(host="[::ffff:127.0.0.1]"))) as conn,
        ):
            result = await conn.call_tool("echo", b'{"text": "mapped"}')
            assert result.content[0].text == "mapped"

    backend.run(main)
    assert proxy.accepts == 1


def test_mixed_answer_dials_only_the_allowed_address(
    backend: Backend, plain: Server, relay: Callable[..., Relay]
) -> None:
    """The resolver answers refused addresses first; only 127.0.0.2 is dialled."""
    allowed, sentinel4, sentinel6 = relays_on_one_port(
        relay, plain.address, [("127.0.0.2", True), ("127.0.0.1", False), ("::1", False)]
    )
    refused = ["0.0.0.0", "::", "::ffff:0.0.0.0", "0.1.2.3"]
    resolver = resolver_for({"mix.test": [*refused, "127.0.0.2"]})

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, resolver=resolver) as client,
            client.connect(Config(url=allowed.url(host="mix.test"))) as conn,
        ):
            result = await conn.call_tool("echo", b'{"text": "mixed"}')
            assert result.content[0].text == "mixed"

    backend.run(main)
    assert allowed.accepts == 1
    assert (sentinel4.accepts, sentinel6.accepts) == (0, 0)


def test_nothing_allowed_names_what_was_refused(
    backend: Backend, relay: Callable[..., Relay]
) -> None:
    sentinel4, sentinel6 = relays_on_one_port(
        relay, ("", 0), [("127.0.0.1", False), ("::1", False)]
    )
    resolver = resolver_for({"mix.test": ["0.0.0.0", "::", "::ffff:0.0.0.0"]})

    async def main() -> None:
        async with backend.Client(
            allow_loopback=True, allow_private=True, resolver=resolver
        ) as client:
            with pytest.raises(ConnectionFailed) as refused:
                async with client.connect(Config(url=sentinel4.url(host="mix.test"))):
                    raise AssertionError("connected to an unspecified address")
            assert refused.value.cause == "refused_address"
            # one reason per address, each naming it first, as parsed: str(ip)
            reasons = refused.value.message.split(": ", 1)[1].split("; ")
            named = [reason.split(" ", 1)[0] for reason in reasons]
            assert named == ["0.0.0.0", "::", "::ffff:0:0"]
            assert client.pool.socket_count == 0

    backend.run(main)
    assert (sentinel4.accepts, sentinel6.accepts) == (0, 0)


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers every POST with one scripted response."""

    protocol_version = "HTTP/1.1"
    status = 200
    headers_out: tuple[tuple[str, str], ...] = ()
    body = b""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(self.status)
        for name, value in self.headers_out:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def scripted(
    status: int, headers: tuple[tuple[str, str], ...] = (), body: bytes = b""
) -> Iterator[str]:
    """A loopback HTTP server answering ``status``; yields its MCP URL."""
    handler = type(
        "Handler", (_Scripted,), {"status": status, "headers_out": headers, "body": body}
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize("status", [307, 308, 302])
@pytest.mark.parametrize("versions", [None, ["2025-11-25"]])
def test_redirect_is_never_followed(
    backend: Backend,
    plain: Server,
    relay: Callable[..., Relay],
    status: int,
    versions: list[str] | None,
) -> None:
    """A 3xx pointing at a working MCP server (on loopback, which this client allows)
    ends the connect as ConnectionFailed(redirect) with the status and Location."""
    target = relay(plain.address)
    location = target.url()

    async def main(url: str) -> None:
        async with backend.Client(allow_loopback=True) as client:
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url=url, protocol_versions=versions)):
                    raise AssertionError("followed a redirect")
            assert failed.value.cause == "redirect"
            assert failed.value.status == status
            assert failed.value.location == location

    with scripted(status, (("Location", location),)) as url:
        backend.run(lambda: main(url))
    assert target.accepts == 0


def test_bearer_token_over_plain_http_to_a_name_is_refused_before_io(
    backend: Backend, plain: Server, relay: Callable[..., Relay]
) -> None:
    proxy = relay(plain.address)
    calls: list[str] = []
    resolver = resolver_for({"mcp.example": ["127.0.0.1"]}, calls)

    async def main() -> None:
        async with backend.Client(allow_loopback=True, resolver=resolver) as client:
            config = Config(url=proxy.url(host="mcp.example"), bearer_token="s3cret")
            with pytest.raises(CallerError):
                async with client.connect(config):
                    raise AssertionError("connected with a token in clear")
            assert client.pool.socket_count == 0

    backend.run(main)
    assert calls == []
    assert proxy.accepts == 0


@pytest.mark.parametrize("host", ["127.0.0.1", "svc.localhost"])
def test_bearer_token_over_plain_http_to_loopback_is_sent(
    backend: Backend, plain: Server, relay: Callable[..., Relay], host: str
) -> None:
    proxy = relay(plain.address)
    resolver = resolver_for({"svc.localhost": ["127.0.0.1"]})

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, resolver=resolver) as client,
            client.connect(Config(url=proxy.url(host=host), bearer_token="s3cret")) as conn,
        ):
            await conn.call_tool("echo", b'{"text": "t"}')

    backend.run(main)
    assert bytes(proxy.from_client).count(b"authorization: Bearer s3cret\r\n") == 2


def test_a_loopback_name_reaches_only_loopback_addresses() -> None:
    """The token exception above trusts ``*.localhost`` to mean this machine; the
    guard holds the resolver to it (pure: a non-loopback answer must never be dialled,
    so it is not dialled here either)."""
    origin = parse_endpoint("http://svc.localhost:8080/mcp").origin
    answer = ["10.0.0.1", "127.0.0.1", "93.184.216.34"]
    assert dial.vet(origin, answer, allow_private=True, allow_loopback=True) == ["127.0.0.1"]
    with pytest.raises(ConnectionFailed) as refused:
        dial.vet(origin, ["93.184.216.34"], allow_private=False, allow_loopback=False)
    assert refused.value.cause == "refused_address"
    assert "loopback name" in refused.value.message
    other = parse_endpoint("http://svc.example:8080/mcp").origin
    assert dial.vet(other, answer, allow_private=True, allow_loopback=True) == answer


def test_unresolvable_name_is_a_dns_failure(backend: Backend) -> None:
    async def failing(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    async def main() -> None:
        async with backend.Client(allow_loopback=True, resolver=failing) as client:
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url="http://nowhere.test:1/mcp")):
                    raise AssertionError("unreachable")
            assert failed.value.cause == "dns"
            assert client.pool.socket_count == 0

    backend.run(main)


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_are_unauthorized(backend: Backend, status: int) -> None:
    challenge = 'Bearer realm="mcp", error="invalid_token", resource_metadata="https://a.test/m"'

    async def main(url: str) -> None:
        async with backend.Client(allow_loopback=True) as client:
            with pytest.raises(Unauthorized) as refused:
                async with client.connect(Config(url=url, bearer_token="expired")):
                    raise AssertionError("connected without a valid token")
            assert refused.value.status == status
            scheme, params = refused.value.challenges[0]
            assert scheme.lower() == "bearer"
            assert params["error"] == "invalid_token"
            assert params["resource_metadata"] == "https://a.test/m"
            assert client.pool.socket_count == client.pool.idle_count(parse_endpoint(url).origin)

    with scripted(status, (("WWW-Authenticate", challenge),), b"nope") as url:
        backend.run(lambda: main(url))


def test_server_error_without_jsonrpc_body(backend: Backend) -> None:
    async def main(url: str) -> None:
        async with backend.Client(allow_loopback=True) as client:
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url=url)):
                    raise AssertionError("connected to a failing server")
            assert failed.value.cause == "http_status"
            assert failed.value.status == 502

    with scripted(502, (("Content-Type", "text/html"),), b"<h1>bad gateway</h1>") as url:
        backend.run(lambda: main(url))
