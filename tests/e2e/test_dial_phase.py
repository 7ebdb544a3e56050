"""Dial failures are tagged by the phase they happened in: TCP connect or TLS handshake.

Real TLS servers (``trustme`` certificates) on loopback in a thread, every backend:
a protocol-version mismatch and an untrusted certificate are ``cause="tls"`` with
the TLS library's reason in the message; a refused TCP port is ``cause="dial"``,
for https as for http (the scheme does not decide the phase).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator

import pytest

from sansmcp import Config, ConnectionFailed

from .conftest import TLS_NAME, Backend, Tls, free_port, resolver_for


@contextlib.contextmanager
def tls_server(
    tls: Tls,
    *,
    maximum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
    minimum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2,
    hang_up: bool = False,
) -> Iterator[tuple[int, list[str]]]:
    """A loopback TLS listener speaking ``minimum``..``maximum`` (or, with ``hang_up``,
    closing each connection before any handshake); yields (port, handshake outcomes)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tls.cert), str(tls.key))
    context.maximum_version = maximum
    context.minimum_version = minimum
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    outcomes: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            client.settimeout(5)
            if hang_up:
                client.close()
                outcomes.append("hung up")
                continue
            try:
                with context.wrap_socket(client, server_side=True) as wrapped:
                    outcomes.append(f"handshake done: {wrapped.version()}")
            except (OSError, ssl.SSLError) as exc:
                outcomes.append(f"handshake failed: {exc}")
            finally:
                client.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1]), outcomes
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def _fails(backend: Backend, url: str, **client: object) -> ConnectionFailed:
    async def main() -> ConnectionFailed:
        async with backend.Client(**client) as connecting:
            with pytest.raises(ConnectionFailed) as failed:
                async with connecting.connect(Config(url=url)):
                    raise AssertionError("connected")
            assert connecting.pool.socket_count == 0
            return failed.value

    result = backend.run(main)
    assert isinstance(result, ConnectionFailed)
    return result


@pytest.mark.parametrize("client_wants", ["1.3 only", "1.2 at most"])
def test_tls_version_mismatch_is_a_tls_failure(
    backend: Backend, tls: Tls, client_wants: str
) -> None:
    """The server speaks only TLS 1.2 and the caller's ssl_context requires 1.3, or the reverse."""
    context = tls.client_context()
    one_two, one_three = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3
    if client_wants == "1.3 only":
        context.minimum_version = one_three
        server = tls_server(tls, maximum=one_two)
    else:
        context.maximum_version = one_two
        server = tls_server(tls, minimum=one_three)
    with server as (port, outcomes):
        failed = _fails(
            backend,
            f"https://{TLS_NAME}:{port}/mcp",
            allow_loopback=True,
            ssl_context=context,
            resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
        )
    assert failed.cause == "tls", failed.message
    assert "PROTOCOL_VERSION" in failed.message, failed.message  # ssl's reason, named
    assert "127.0.0.1" in failed.message
    assert outcomes and all(o.startswith("handshake failed") for o in outcomes), outcomes


def test_untrusted_certificate_is_a_tls_failure(backend: Backend, tls: Tls) -> None:
    """The default context does not trust the test CA: verification fails, with its message."""
    with tls_server(tls) as (port, _):
        failed = _fails(
            backend,
            f"https://{TLS_NAME}:{port}/mcp",
            allow_loopback=True,
            resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
        )
    assert failed.cause == "tls", failed.message
    assert "CERTIFICATE_VERIFY_FAILED" in failed.message, failed.message
    assert "unable to get local issuer certificate" in failed.message, failed.message


def test_wrong_hostname_is_a_tls_failure(backend: Backend, tls: Tls) -> None:
    with tls_server(tls) as (port, _):
        failed = _fails(
            backend,
            f"https://mix.test:{port}/mcp",
            allow_loopback=True,
            ssl_context=tls.client_context(),
            resolver=resolver_for({"mix.test": ["127.0.0.1"]}),
        )
    assert failed.cause == "tls", failed.message
    assert "mix.test" in failed.message and "CERTIFICATE_VERIFY_FAILED" in failed.message


def test_a_hang_up_before_the_handshake_is_a_tls_failure(backend: Backend, tls: Tls) -> None:
    """TCP connected, then the server closed: the TLS phase failed, with no reason from ssl."""
    with tls_server(tls, hang_up=True) as (port, outcomes):
        failed = _fails(
            backend,
            f"https://{TLS_NAME}:{port}/mcp",
            allow_loopback=True,
            ssl_context=tls.client_context(),
            resolver=resolver_for({TLS_NAME: ["127.0.0.1"]}),
        )
    assert failed.cause == "tls", failed.message
    assert f"TLS handshake with {TLS_NAME}:{port} at 127.0.0.1 failed" in failed.message
    assert outcomes and set(outcomes) == {"hung up"}


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_refused_tcp_port_is_a_dial_failure(backend: Backend, tls: Tls, scheme: str) -> None:
    port = free_port()  # bound, then closed: nothing listens there
    failed = _fails(
        backend,
        f"{scheme}://127.0.0.1:{port}/mcp",
        allow_loopback=True,
        ssl_context=tls.client_context(),
    )
    assert failed.cause == "dial", failed.message
    assert "ConnectionRefusedError" in failed.message and f"127.0.0.1:{port}" in failed.message
