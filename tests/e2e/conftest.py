"""Fixtures for the end-to-end contract suite: backends, real servers, relays.

* ``backend`` runs every test three times, on asyncio, on trio and on the blocking
  adapter ("sync", its calls in threads behind an async facade on asyncio:
  ``sync_shim.py``), through a small shim (:class:`Backend`): the test body is an
  ``async def main()`` that uses only ``backend.Client`` / ``backend.connect`` and
  the shim's helpers, so the contract is written once.
* ``launch`` starts real MCP servers built with the official ``mcp`` package
  (``tests/e2e/server.py``) in subprocesses on loopback, once per session and
  configuration, and stops them at the end.
* :class:`Relay` is a loopback TCP relay in a thread that counts what the
  server side would see -- accepted connections, closes by the client, bytes
  -- and, without a target, is a listener that accepts and never answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
import trustme

from sansmcp.io_adapters import asyncio as asyncio_adapter
from sansmcp.io_adapters import trio as trio_adapter

from . import sync_shim

REPO = Path(__file__).resolve().parents[2]
# Safety nets, not assertions (tests/timing.py): generous enough for a 2-core machine at load 8.
RUN_TIMEOUT = 60.0  # every test body is bounded by this (the backend's own timeout)
SERVER_START_TIMEOUT = 60.0
WAIT_TIMEOUT = 30.0  # wait_until / wait_for_closes give up after this
TLS_NAME = "mcp.test"  # the TLS servers' certificate name; a resolver maps it to loopback


# -- backends -----------------------------------------------------------------


@dataclass
class Backend:
    """One runtime: how to run a test body and the few primitives a test needs."""

    name: str
    module: ModuleType

    @property
    def Client(self) -> Any:
        return self.module.Client

    @property
    def connect(self) -> Any:
        return self.module.connect

    @property
    def cancelled(self) -> type[BaseException]:
        return trio.Cancelled if self.name == "trio" else asyncio.CancelledError

    def run(self, fn: Callable[[], Awaitable[Any]], *, timeout: float = RUN_TIMEOUT) -> Any:
        if self.name != "trio":  # asyncio, and the sync adapter's shim

            async def bounded() -> Any:
                async with asyncio.timeout(timeout):
                    return await fn()

            return asyncio.run(bounded())

        async def bounded_trio() -> Any:
            with trio.fail_after(timeout):
                return await fn()

        return trio.run(bounded_trio)

    async def sleep(self, seconds: float) -> None:
        if self.name != "trio":
            await asyncio.sleep(seconds)
        else:
            await trio.sleep(seconds)

    async def gather(self, fns: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
        """Run ``fns`` concurrently (one task each); their results in order."""
        if self.name != "trio":
            return list(await asyncio.gather(*(fn() for fn in fns)))
        results: list[Any] = [None] * len(fns)

        async def one(index: int) -> None:
            results[index] = await fns[index]()

        async with trio.open_nursery() as nursery:
            for index in range(len(fns)):
                nursery.start_soon(one, index)
        return results

    async def cancel_after(
        self, delay: float, fn: Callable[[], Awaitable[Any]]
    ) -> BaseException | None:
        """Run ``fn``, cancel it natively after ``delay`` s (a trio cancel scope, an
        asyncio ``Task.cancel()``); return the exception that left ``fn``.

        Fails unless the cancellation reached the canceller as itself.
        """
        if self.name == "sync":
            pytest.skip(
                "a blocking call has no cancellation; test_sync.py covers its replacements"
                " (Client.close() from another thread, KeyboardInterrupt in the caller)"
            )
        seen: list[BaseException] = []

        async def watched() -> None:
            try:
                await fn()
            except BaseException as exc:
                seen.append(exc)
                raise

        if self.name == "asyncio":
            task = asyncio.get_running_loop().create_task(watched())
            await asyncio.sleep(delay)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert task.cancelled(), f"the task was not cancelled: {seen}"
        else:
            with trio.move_on_after(delay) as scope:
                await watched()
            assert scope.cancelled_caught, f"the cancel scope caught nothing: {seen}"
        return seen[0] if seen else None

    async def wait_until(
        self, predicate: Callable[[], bool], *, timeout: float = WAIT_TIMEOUT
    ) -> float:
        """Poll ``predicate`` every 10 ms; the monotonic time it became true (fail after ``timeout``)."""
        end = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < end, f"condition not met within {timeout} s"
            await self.sleep(0.01)
        return time.monotonic()


BACKEND_MODULES: dict[str, ModuleType] = {
    "asyncio": asyncio_adapter,
    "trio": trio_adapter,
    "sync": sync_shim,
}


@pytest.fixture(params=list(BACKEND_MODULES))
def backend(request: pytest.FixtureRequest) -> Backend:
    return Backend(request.param, BACKEND_MODULES[request.param])


# -- real servers -----------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A running server subprocess: where it listens and how it was started."""

    port: int
    args: tuple[str, ...]
    process: subprocess.Popen[bytes]
    log: Path
    host: str = "127.0.0.1"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def url(self, host: str | None = None, port: int | None = None, scheme: str = "") -> str:
        scheme = scheme or ("https" if "--tls" in self.args else "http")
        return f"{scheme}://{host or self.host}:{port or self.port}/mcp"


@dataclass
class Launcher:
    """Starts each server configuration once per session (lazily); stops them all at the end."""

    log_dir: Path
    servers: dict[tuple[str, ...], Server] = field(default_factory=dict)

    def __call__(self, *args: str) -> Server:
        server = self.servers.get(args)
        if server is not None and server.process.poll() is None:
            return server
        port = free_port()
        log = self.log_dir / f"server-{len(self.servers)}-{port}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.e2e.server", str(port), *args],
                cwd=REPO,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        server = self.servers[args] = Server(port, args, process, log)
        end = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server {args} exited early:\n{log.read_text()}")
            try:
                socket.create_connection(server.address, timeout=1).close()
                return server
            except OSError:
                if time.monotonic() > end:
                    raise RuntimeError(f"server {args} not listening:\n{log.read_text()}") from None
                time.sleep(0.05)

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.process.terminate()
        for server in self.servers.values():
            try:
                server.process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait(timeout=3)


@pytest.fixture(scope="session")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path_factory.mktemp("servers"))
    try:
        yield launcher
    finally:
        launcher.stop_all()


# HTTP/1.1 (uvicorn) in the four modes of the official SDK's Streamable HTTP app.
MODES = {
    "stateless-json": ("--stateless", "--json"),
    "stateless-sse": ("--stateless",),
    "stateful-json": ("--json",),
    "stateful-sse": (),
}


@pytest.fixture(scope="session")
def plain(launch: Launcher) -> Server:
    """The workhorse: stateless, JSON responses, HTTP/1.1."""
    return launch(*MODES["stateless-json"])


@pytest.fixture(scope="session")
def h2c(launch: Launcher) -> Server:
    """The same app under hypercorn, HTTP/2 by prior knowledge (and HTTP/1.1)."""
    return launch("--stateless", "--json", "--h2c")


# -- TLS --------------------------------------------------------------------------


@dataclass(frozen=True)
class Tls:
    ca: trustme.CA
    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        """A caller's context trusting the test CA, offering h2 and http/1.1 by ALPN (the
        Client uses a caller's context as given: it sets no ALPN on it)."""
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        context.set_alpn_protocols(["h2", "http/1.1"])
        return context


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    ca = trustme.CA()
    issued = ca.issue_cert(TLS_NAME)
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    issued.private_key_pem.write_to_path(str(key))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    for extra in issued.cert_chain_pems[1:]:
        extra.write_to_path(str(cert), append=True)
    return Tls(ca, cert, key)


@pytest.fixture(scope="session")
def tls_h2(launch: Launcher, tls: Tls) -> Server:
    """hypercorn over TLS offering h2 and http/1.1 by ALPN (stateful, SSE responses)."""
    return launch("--tls", str(tls.cert), str(tls.key))


@pytest.fixture(scope="session")
def tls_h1(launch: Launcher, tls: Tls) -> Server:
    """hypercorn over TLS offering only http/1.1 by ALPN."""
    return launch("--stateless", "--tls", str(tls.cert), str(tls.key), "--alpn", "http/1.1")


def resolver_for(mapping: dict[str, list[str]], calls: list[str] | None = None) -> Any:
    """A ``resolver=`` hook answering from ``mapping`` (and recording the names asked)."""

    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        return list(mapping[host])

    return resolve


# -- a counting TCP relay ---------------------------------------------------------------


class Relay:
    """A loopback TCP relay in a thread: counts accepts, client closes and bytes.

    With ``target`` None it accepts and never answers (nor reads: the kernel
    buffers what arrives), holding the sockets until the relay stops.
    """

    def __init__(self, target: tuple[str, int] | None, host: str = "127.0.0.1", port: int = 0):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.socket(family)
        self.listener.bind((host, port))
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.port = int(self.listener.getsockname()[1])
        self.host = host
        self.target = target
        self.accepts = 0
        self.client_closes: list[float] = []  # monotonic times the client closed a connection
        self.from_client = bytearray()
        self._peers: dict[socket.socket, socket.socket | None] = {}
        self._client_side: set[socket.socket] = set()
        self._used: set[socket.socket] = set()  # client sockets that carried a request
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = False
        self._hang_up = False
        self.drop_on_reuse = False  # a client sending on an existing connection gets it closed
        self._thread = threading.Thread(target=self._loop, name="relay", daemon=True)

    def url(self, host: str | None = None, scheme: str = "http") -> str:
        host = host or (f"[{self.host}]" if ":" in self.host else self.host)
        return f"{scheme}://{host}:{self.port}/mcp"

    def wait_for_closes(self, count: int, timeout: float = WAIT_TIMEOUT) -> None:
        """Block until the client has closed ``count`` connections (the relay runs in a thread)."""
        end = time.monotonic() + timeout
        while len(self.client_closes) < count:
            assert time.monotonic() < end, f"{len(self.client_closes)} of {count} closes seen"
            time.sleep(0.01)

    def __enter__(self) -> Relay:
        self._selector.register(self.listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread.start()
        return self

    def hang_up(self) -> None:
        """Close every relayed connection, as a server closing idle keep-alives does."""
        self._hang_up = True
        self._wake_w.send(b"h")

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        for sock in list(self._peers):
            sock.close()
        self._selector.close()
        for sock in (self.listener, self._wake_r, self._wake_w):
            sock.close()

    def _loop(self) -> None:
        while not self._stop:
            for key, _ in self._selector.select(timeout=1.0):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._wake_r:
                    self._wake_r.recv(64)
                    if self._stop:
                        return
                    if self._hang_up:
                        self._hang_up = False
                        for one in list(self._peers):
                            self._drop(one)
                    continue
                if sock is self.listener:
                    self._accept()
                else:
                    self._pump(sock)

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except BlockingIOError:
            return
        self.accepts += 1
        self._client_side.add(client)
        if self.target is None:
            self._peers[client] = None  # held open, never read
            return
        upstream = socket.create_connection(self.target, timeout=5)
        for sock in (client, upstream):
            sock.setblocking(True)
            sock.settimeout(5)
        self._peers[client], self._peers[upstream] = upstream, client
        self._selector.register(client, selectors.EVENT_READ)
        self._selector.register(upstream, selectors.EVENT_READ)

    def _pump(self, sock: socket.socket) -> None:
        peer = self._peers.get(sock)
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if data and peer is not None:
            if sock in self._client_side:
                if self.drop_on_reuse and sock in self._used:
                    self.drop_on_reuse = False
                    self._drop(sock)
                    return
                self.from_client += data
            else:
                self._used.add(peer)  # the server answered on it: a later request reuses it
            with contextlib.suppress(OSError):
                peer.sendall(data)
            return
        if sock in self._client_side:
            self.client_closes.append(time.monotonic())
        self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        """Close ``sock`` and its peer."""
        for one in (sock, self._peers.get(sock)):
            if one is not None and one in self._peers:
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(one)
                del self._peers[one]
                self._client_side.discard(one)
                self._used.discard(one)
                one.close()


@pytest.fixture
def relay() -> Iterator[Callable[..., Relay]]:
    """``relay(target, host=, port=)``: a started :class:`Relay`, stopped after the test."""
    with contextlib.ExitStack() as stack:

        def make(target: tuple[str, int] | None, host: str = "127.0.0.1", port: int = 0) -> Relay:
            return stack.enter_context(Relay(target, host, port))

        yield make
