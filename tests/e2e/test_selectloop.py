"""The blocking adapter's runtime on its own (``sansmcp.io_adapters.blocking._selectloop``): real
loopback sockets and trustme TLS, a recording sink, no driver.

Connect refused, a TLS handshake the client refuses, ALPN, partial writes to a peer
that reads slowly (and write interest only while something waits), EOF (reported once,
then watched no more), a sink that raises, the wake-up, the bounded workers, and the
interrupt-safe lock re-take and bell.
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trustme
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sansmcp.io_adapters._common import READ_SIZE
from sansmcp.io_adapters.blocking._selectloop import (
    MAX_WAIT,
    Bell,
    SelectLoop,
    Workers,
    hold,
    unlocked,
)
from tests.tiers import examples

WAIT = 30.0  # s: a safety net on anything here (a loaded machine), never a speed assertion


class Recorder:
    """A Sink that records what the loop reports."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.data: dict[int, bytearray] = {}
        self.feeds: list[int] = []  # the length of each ``received``
        self.raise_on_data = False

    def connected(self, key: int, *, alpn: str | None, now: float) -> None:
        self.events.append(("connected", key, alpn))

    def connect_failed(self, key: int, phase: str, exc: OSError, *, now: float) -> None:
        self.events.append(("failed", key, phase, type(exc)))

    def received(self, key: int, data: bytes, *, now: float) -> None:
        if self.raise_on_data:
            raise ValueError("the sink's own bug")
        self.data.setdefault(key, bytearray()).extend(data)
        self.feeds.append(len(data))

    def eof(self, key: int, *, now: float) -> None:
        self.events.append(("eof", key))

    def reader_failed(self, key: int, exc: Exception, *, now: float) -> None:
        self.events.append(("reader_failed", key, type(exc)))


def run_until(loop: SelectLoop, done: Any, timeout: float = WAIT) -> None:
    end = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < end, "the loop did not get there"
        loop.handle(loop.wait(0.05))


def tcp(address: tuple[str, int]) -> tuple[socket.socket, tuple[str, int]]:
    sock = socket.socket()
    sock.setblocking(False)
    return sock, address


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock
    sock.close()


@pytest.fixture
def loop() -> Iterator[tuple[SelectLoop, Recorder]]:
    sink = Recorder()
    selectloop = SelectLoop(sink, time.monotonic)
    yield selectloop, sink
    selectloop.release()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def tls_server(listener: socket.socket, ca: trustme.CA, alpn: list[str]) -> threading.Thread:
    """Accept one connection, shake hands offering ``alpn``, echo until EOF."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("loop.test").configure_cert(context)
    context.set_alpn_protocols(alpn)

    def serve() -> None:
        raw, _ = listener.accept()
        try:
            with context.wrap_socket(raw, server_side=True) as conn:
                while data := conn.recv(65536):
                    conn.sendall(data)
        except (OSError, ssl.SSLError):
            pass
        finally:
            raw.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_refused_connect_is_a_tcp_failure(loop: tuple[SelectLoop, Recorder]) -> None:
    selectloop, sink = loop
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    address = spare.getsockname()
    spare.close()  # nothing listens there now
    selectloop.connect(1, *tcp(address))
    assert selectloop.stirred  # a new socket to watch
    run_until(selectloop, lambda: sink.events)
    assert sink.events == [("failed", 1, "tcp", ConnectionRefusedError)]


def test_plain_bytes_go_both_ways_then_eof_is_reported_once(
    loop: tuple[SelectLoop, Recorder], listener: socket.socket
) -> None:
    selectloop, sink = loop
    selectloop.connect(1, *tcp(listener.getsockname()))
    peer, _ = listener.accept()
    run_until(selectloop, lambda: sink.events)
    assert sink.events == [("connected", 1, None)]
    selectloop.send(1, b"ping")
    assert peer.recv(100) == b"ping"
    peer.sendall(b"pong")
    run_until(selectloop, lambda: sink.data.get(1) == b"pong")
    peer.close()
    run_until(selectloop, lambda: len(sink.events) == 2)
    assert sink.events[1] == ("eof", 1)
    # watched no more: a closed peer stays readable, yet nothing more is reported
    for _ in range(3):
        selectloop.handle(selectloop.wait(0.01))
    assert sink.events == [("connected", 1, None), ("eof", 1)]
    selectloop.close(1)
    selectloop.send(1, b"after close")  # a closed key: dropped, not raised


def test_partial_writes_wait_in_order_for_a_peer_that_reads_slowly(
    loop: tuple[SelectLoop, Recorder], listener: socket.socket
) -> None:
    """Megabytes the kernel cannot take at once: the rest waits in the socket's buffer,
    write interest is on only while it does, and the peer gets every byte in order."""
    selectloop, sink = loop
    sock, address = tcp(listener.getsockname())
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    selectloop.connect(1, sock, address)
    peer, _ = listener.accept()
    run_until(selectloop, lambda: sink.events)
    selectloop.wait(0)  # (clears stirred)
    payload = bytes(range(256)) * 16384  # 4 MiB
    selectloop.send(1, payload[: len(payload) // 2])
    selectloop.send(1, payload[len(payload) // 2 :])
    assert selectloop.stirred  # write interest went on: a select elsewhere must look again
    received = bytearray()

    def slow_reader() -> None:
        peer.settimeout(WAIT)
        while len(received) < len(payload):
            time.sleep(0.001)
            received.extend(peer.recv(65536))

    reader = threading.Thread(target=slow_reader, daemon=True)
    reader.start()
    run_until(selectloop, lambda: len(received) == len(payload))
    reader.join(WAIT)
    assert received == payload
    selectloop.handle(selectloop.wait(0))
    selectloop.wait(0)
    selectloop.send(1, b"small")  # nothing waits: sent at once, no write interest
    assert not selectloop.stirred
    assert peer.recv(100) == b"small"
    peer.close()


def test_a_sink_that_raises_is_reported_as_a_reader_failure(
    loop: tuple[SelectLoop, Recorder], listener: socket.socket
) -> None:
    selectloop, sink = loop
    selectloop.connect(1, *tcp(listener.getsockname()))
    peer, _ = listener.accept()
    run_until(selectloop, lambda: sink.events)
    sink.raise_on_data = True
    peer.sendall(b"boom")
    run_until(selectloop, lambda: len(sink.events) == 2)
    assert sink.events[1] == ("reader_failed", 1, ValueError)
    peer.sendall(b"more")  # watched no more: not reported again
    selectloop.handle(selectloop.wait(0.05))
    assert len(sink.events) == 2
    peer.close()


def test_tls_with_alpn_round_trips(
    loop: tuple[SelectLoop, Recorder], listener: socket.socket, ca: trustme.CA
) -> None:
    selectloop, sink = loop
    server = tls_server(listener, ca, ["h2", "http/1.1"])
    context = ssl.create_default_context()
    ca.configure_trust(context)
    context.set_alpn_protocols(["h2", "http/1.1"])
    wrap = functools.partial(context.wrap_bio, server_hostname="loop.test")
    selectloop.connect(1, *tcp(listener.getsockname()), wrap)
    run_until(selectloop, lambda: sink.events)
    assert sink.events == [("connected", 1, "h2")]
    selectloop.send(1, b"x" * 200_000)  # more than one TLS record, more than one read
    run_until(selectloop, lambda: len(sink.data.get(1, b"")) == 200_000)
    selectloop.close(1)
    server.join(WAIT)


def test_tls_records_that_arrive_together_are_handed_on_in_one_feed(
    loop: tuple[SelectLoop, Recorder], listener: socket.socket, ca: trustme.CA
) -> None:
    """Five TLS records in the socket at once: one ``received`` (as asyncio's TLS
    joins them), then the FIN: one ``eof``."""
    selectloop, sink = loop
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("loop.test").configure_cert(context)
    sent, go = threading.Event(), threading.Event()

    def serve() -> None:
        raw, _ = listener.accept()
        with context.wrap_socket(raw, server_side=True) as conn:
            go.wait(WAIT)
            for n in range(5):
                conn.send(b"%d" % n * 100)  # one record each
            sent.set()  # then closed: a FIN, no close_notify

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    client = ssl.create_default_context()
    ca.configure_trust(client)
    wrap = functools.partial(client.wrap_bio, server_hostname="loop.test")
    selectloop.connect(1, *tcp(listener.getsockname()), wrap)
    run_until(selectloop, lambda: sink.events)
    assert sink.events == [("connected", 1, None)]
    assert sink.feeds == []  # (a TLS 1.3 session ticket is no application data)
    go.set()
    assert sent.wait(WAIT)
    time.sleep(0.05)  # everything in the client's socket buffer
    run_until(selectloop, lambda: ("eof", 1) in sink.events)
    assert bytes(sink.data[1]) == b"".join(b"%d" % n * 100 for n in range(5))
    assert sink.feeds == [500]
    assert sink.events == [("connected", 1, None), ("eof", 1)]
    server.join(WAIT)


RECORD = 2**14 + 256  # TLS's largest plaintext record, and more


@settings(
    max_examples=examples(100, 8),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    records=st.lists(st.binary(min_size=1, max_size=40_000), min_size=1, max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=70_000), max_size=12),
    close_notify=st.booleans(),
)
def test_tls_bytes_arrive_whole_and_in_order_however_the_reads_fall(
    listener: socket.socket,
    ca: trustme.CA,
    records: list[bytes],
    cuts: list[int],
    close_notify: bool,
) -> None:
    """A server's TLS records, their ciphertext sent in drawn pieces (close_notify or
    not, then a FIN): every byte arrives once, in order, in feeds no larger than one read
    and a record, then exactly one ``eof``."""
    sink = Recorder()
    selectloop = SelectLoop(sink, time.monotonic)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("loop.test").configure_cert(server_context)

    def serve() -> None:
        raw, _ = listener.accept()
        inbox, outbox = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = server_context.wrap_bio(inbox, outbox, server_side=True)
        with raw:
            while True:
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    raw.sendall(outbox.read())
                    inbox.write(raw.recv(65536))
            raw.sendall(outbox.read())
            for record in records:
                tls.write(record)
            if close_notify:
                with contextlib.suppress(ssl.SSLWantReadError):
                    tls.unwrap()
            wire, start = outbox.read(), 0
            for cut in [*cuts, len(wire)]:
                raw.sendall(wire[start : start + cut])
                start += cut
                time.sleep(0.001)
            raw.sendall(wire[start:])

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    client = ssl.create_default_context()
    ca.configure_trust(client)
    wrap = functools.partial(client.wrap_bio, server_hostname="loop.test")
    try:
        selectloop.connect(1, *tcp(listener.getsockname()), wrap)
        run_until(selectloop, lambda: ("eof", 1) in sink.events)
        assert sink.events == [("connected", 1, None), ("eof", 1)]
        assert bytes(sink.data.get(1, b"")) == b"".join(records)
        assert 0 not in sink.feeds
        assert max(sink.feeds) <= READ_SIZE + RECORD
    finally:
        selectloop.release()
        server.join(WAIT)


@pytest.mark.parametrize("address", ["127.1", "localhost", "::1::", ""])
def test_dialing_what_is_not_an_ip_literal_is_a_tcp_failure_at_once(
    loop: tuple[SelectLoop, Recorder], address: str
) -> None:
    """``dial`` makes the socket from an IP literal with numeric semantics: anything else
    (inet_aton's ``127.1`` too) is reported at once, before any wait, and nothing is watched."""
    selectloop, sink = loop
    selectloop.dial(1, address, 80)
    assert sink.events == [("failed", 1, "tcp", OSError)]
    assert not selectloop.stirred  # no socket was added


def test_dialing_a_literal_connects_and_with_tls_shakes_hands_verifying_the_name(
    loop: tuple[SelectLoop, Recorder], listener: socket.socket, ca: trustme.CA
) -> None:
    selectloop, sink = loop
    server = tls_server(listener, ca, ["http/1.1"])
    context = ssl.create_default_context()
    ca.configure_trust(context)
    context.set_alpn_protocols(["http/1.1"])
    host, port = listener.getsockname()
    selectloop.dial(1, host, port, (context, "other.test"))  # not the certificate's name
    run_until(selectloop, lambda: sink.events)
    assert sink.events == [("failed", 1, "tls", ssl.SSLCertVerificationError)]
    server.join(WAIT)
    sink.events.clear()
    server = tls_server(listener, ca, ["http/1.1"])
    selectloop.dial(2, host, port, (context, "loop.test"))
    run_until(selectloop, lambda: sink.events)
    assert sink.events == [("connected", 2, "http/1.1")]
    selectloop.send(2, b"ping")
    run_until(selectloop, lambda: sink.data.get(2) == b"ping")  # echoed
    selectloop.close(2)
    server.join(WAIT)


def test_a_certificate_the_client_does_not_trust_is_a_tls_failure(
    loop: tuple[SelectLoop, Recorder], listener: socket.socket, ca: trustme.CA
) -> None:
    selectloop, sink = loop
    server = tls_server(listener, ca, ["http/1.1"])
    context = ssl.create_default_context()
    trustme.CA().configure_trust(context)  # another CA
    wrap = functools.partial(context.wrap_bio, server_hostname="loop.test")
    selectloop.connect(1, *tcp(listener.getsockname()), wrap)
    run_until(selectloop, lambda: sink.events)
    assert sink.events == [("failed", 1, "tls", ssl.SSLCertVerificationError)]
    server.join(WAIT)


def test_a_server_closing_during_the_handshake_is_a_tls_failure(
    loop: tuple[SelectLoop, Recorder], listener: socket.socket
) -> None:
    selectloop, sink = loop
    context = ssl.create_default_context()
    wrap = functools.partial(context.wrap_bio, server_hostname="loop.test")
    selectloop.connect(1, *tcp(listener.getsockname()), wrap)
    peer, _ = listener.accept()
    peer.settimeout(WAIT)
    selectloop.handle(selectloop.wait(WAIT))  # connected: the ClientHello goes out
    assert peer.recv(65536)  # the ClientHello
    peer.close()
    run_until(selectloop, lambda: sink.events)
    assert sink.events == [("failed", 1, "tls", ConnectionResetError)]


def test_wake_cuts_a_wait_in_another_thread_short(loop: tuple[SelectLoop, Recorder]) -> None:
    selectloop, _ = loop
    returned = threading.Event()

    def waiter() -> None:
        selectloop.handle(selectloop.wait(None))  # no socket, no timeout: only a wake-up
        returned.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    assert not returned.wait(0.1)
    selectloop.wake()
    assert returned.wait(WAIT)
    thread.join(WAIT)


@pytest.mark.parametrize("timeout", [1e308, math.inf, MAX_WAIT + 1.0])
def test_a_wait_longer_than_poll_takes_is_cut_to_max_wait(
    loop: tuple[SelectLoop, Recorder], timeout: float
) -> None:
    """``poll`` refuses more than 2**31 - 1 ms (OverflowError): a longer timeout waits
    ``MAX_WAIT`` and says so (``cut``); woken first, the wait returns at once."""
    selectloop, _ = loop
    selectloop.wake()
    assert selectloop.wait(timeout) != []  # the wake-up, not an OverflowError
    assert selectloop.cut
    selectloop.handle(selectloop.wait(0))
    assert not selectloop.cut


def test_workers_are_bounded_and_end_on_close() -> None:
    workers = Workers(2, "test-worker")
    gate = threading.Event()
    ran: list[int] = []
    for index in range(5):
        workers.submit(functools.partial(lambda i: (gate.wait(WAIT), ran.append(i)), index))
    assert workers.threads == 2  # five jobs, two threads
    workers.submit(lambda: 1 / 0)  # a failing job does not kill its thread
    gate.set()
    end = time.monotonic() + WAIT
    while len(ran) < 5:
        assert time.monotonic() < end
        time.sleep(0.01)
    assert sorted(ran) == [0, 1, 2, 3, 4] and workers.threads == 2
    names = [t for t in threading.enumerate() if t.name == "test-worker"]
    workers.close()
    for thread in names:
        thread.join(WAIT)
        assert not thread.is_alive()


class Flaky:
    """An RLock whose ``acquire`` raises KeyboardInterrupt on the calls listed in
    ``interrupts`` -- before taking the lock ("before") or just after ("after"), the two
    places a signal can land in a real acquire."""

    def __init__(self, interrupts: dict[int, str]) -> None:
        self.lock = threading.RLock()
        self.interrupts = interrupts
        self.calls = 0

    def acquire(self, blocking: bool = True) -> bool:
        self.calls += 1
        where = self.interrupts.get(self.calls)
        if where == "before":
            raise KeyboardInterrupt(self.calls)
        taken = self.lock.acquire(blocking)
        if where == "after":
            raise KeyboardInterrupt(self.calls)
        return taken

    def release(self) -> None:
        self.lock.release()

    def _is_owned(self) -> bool:
        return bool(self.lock._is_owned())  # type: ignore[attr-defined]

    def depth(self) -> int:
        """How many times this thread holds it (0: not at all)."""
        count = 0
        while self._is_owned():
            self.lock.release()
            count += 1
        for _ in range(count):
            self.lock.acquire()
        return count


@pytest.mark.parametrize(
    "interrupts",
    [{}, {1: "before"}, {1: "after"}, {1: "before", 2: "after"}, {1: "before", 2: "before"}],
)
def test_hold_takes_the_lock_once_whatever_lands(interrupts: dict[int, str]) -> None:
    lock = Flaky(interrupts)
    interrupt = hold(lock)
    assert lock.depth() == 1  # held, and once: one release frees it
    assert (interrupt is None) == (not interrupts)
    if interrupts:
        assert interrupt is not None and interrupt.args == (max(interrupts),)  # the last one
    assert hold(lock) is None and lock.depth() == 1  # held already: nothing taken
    lock.release()
    assert lock.depth() == 0


@pytest.mark.parametrize("where", ["before", "after"])
def test_unlocked_holds_the_lock_again_when_an_interrupt_lands_re_taking_it(where: str) -> None:
    """The second Ctrl-C: the first interrupts the blocking call, the second the lock's
    re-take; the lock is held once all the same, and only an interrupt escapes."""
    lock = Flaky({2: where})
    assert hold(lock) is None

    def blocking() -> None:
        raise KeyboardInterrupt("first")

    with pytest.raises(KeyboardInterrupt) as raised:
        unlocked(lock, blocking)
    assert raised.value.args == (2,)  # the re-take's, chained to the first
    assert isinstance(raised.value.__context__, KeyboardInterrupt)
    assert lock.depth() == 1
    assert unlocked(lock, lambda: 7) == 7 and lock.depth() == 1


@contextlib.contextmanager
def one_interrupt_of_the_main_thread(after: float) -> Iterator[None]:
    """One ``KeyboardInterrupt`` in the main thread, ``after`` s from now, wherever it
    blocks: SIGINT is sent again every 0.1 s until the handler ran (a `make test` run hung in
    the wait with the one signal sent, never interrupted), and the handler raises only the
    first time, so a late repeat cannot land elsewhere in the test."""
    main = threading.get_ident()
    assert threading.main_thread().ident == main
    fired = threading.Event()

    def handler(signum: int, frame: object) -> None:
        if not fired.is_set():
            fired.set()
            raise KeyboardInterrupt

    def signaller() -> None:
        time.sleep(after)
        while not fired.is_set():
            signal.pthread_kill(main, signal.SIGINT)
            fired.wait(0.1)

    previous = signal.signal(signal.SIGINT, handler)
    thread = threading.Thread(target=signaller, daemon=True)
    thread.start()
    try:
        yield
    finally:
        fired.set()
        thread.join(WAIT)
        signal.signal(signal.SIGINT, previous)


def test_a_bell_wakes_its_waiter_and_an_interrupted_wait_leaves_no_ring() -> None:
    lock = threading.RLock()
    bell = Bell()
    bell.ring()  # nobody waits: nothing is left for later
    lock.acquire()
    with one_interrupt_of_the_main_thread(0.2), pytest.raises(KeyboardInterrupt):
        bell.wait(lock)  # the signal lands in the wait
    assert lock._is_owned()  # type: ignore[attr-defined]
    rung = threading.Event()

    def ringer() -> None:
        with lock:
            rung.set()
            bell.ring()

    thread = threading.Thread(target=ringer)
    thread.start()
    bell.wait(lock)  # returns only once rung: neither ring was left over
    assert rung.is_set() and lock._is_owned()  # type: ignore[attr-defined]
    lock.release()
    thread.join(WAIT)


_OPEN = st.tuples(st.just("open"))
_OP = st.one_of(
    _OPEN,
    _OPEN,  # (twice as likely: a close is then often followed by an open, reusing its fd)
    st.tuples(st.just("server_sends"), st.integers(0, 7), st.integers(1, 100_000)),
    st.tuples(st.just("client_sends"), st.integers(0, 7), st.integers(1, 100_000)),
    st.tuples(st.just("close"), st.integers(0, 7)),
    st.tuples(st.just("server_ends"), st.integers(0, 7)),
)


@settings(
    max_examples=examples(300, 25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(_OP, min_size=1, max_size=24).map(lambda more: [("open",), *more]))
def test_bytes_reach_their_own_socket_while_sockets_come_and_go_during_a_wait(
    listener: socket.socket, ops: list[tuple[Any, ...]]
) -> None:
    """Sockets opened, written both ways, closed (their file descriptor then reused by the
    next one) and ended by the server, each step taken while another thread waits in
    ``wait`` (as a follower's pump runs while the leader polls): every byte a server
    sends reaches its own key, once and in order (a key closed meanwhile: a prefix of
    them), every byte the loop sends reaches its own server, an end is reported once,
    and nothing fails."""
    sink = Recorder()
    selectloop = SelectLoop(sink, time.monotonic)
    peers: dict[int, socket.socket] = {}  # the server's side of each key
    sent: dict[int, bytearray] = {}  # what each key's server sent
    wrote: dict[int, bytearray] = {}  # what the loop was asked to send on each key
    got: dict[int, bytearray] = {}  # what each key's server received
    backlog: dict[int, bytearray] = {}  # what each key's server still has to send
    live: list[int] = []  # keys open at both ends, in order
    closed: set[int] = set()
    ended: set[int] = set()
    fds: dict[int, int] = {}  # each key's file descriptor
    fds_closed: set[int] = set()

    def serve() -> None:  # the servers' side, without blocking
        for key, peer in peers.items():
            with contextlib.suppress(BlockingIOError):
                while backlog[key]:
                    del backlog[key][: peer.send(backlog[key])]
            with contextlib.suppress(BlockingIOError, ConnectionError):
                while data := peer.recv(READ_SIZE):
                    got[key] += data

    def drained(key: int) -> bool:
        serve()
        return not backlog[key]

    def during_a_wait(step: Any, *args: Any) -> None:
        found: list[Any] = []
        waiting = threading.Thread(target=lambda: found.extend(selectloop.wait(WAIT)))
        waiting.start()
        step(*args)
        selectloop.wake()
        waiting.join(WAIT)
        assert not waiting.is_alive()
        selectloop.handle(found)
        serve()

    try:
        for index, op in enumerate(ops):
            key = live[op[1] % len(live)] if len(op) > 1 and live else None
            if op[0] == "open":
                key = index + 1
                sock, address = tcp(listener.getsockname())
                if sock.fileno() in fds_closed:
                    event("a closed socket's file descriptor reused")
                fds[key] = sock.fileno()
                during_a_wait(selectloop.connect, key, sock, address)
                peer, _ = listener.accept()
                peer.setblocking(False)
                peers[key], sent[key], wrote[key], got[key], backlog[key] = (
                    peer,
                    bytearray(),
                    bytearray(),
                    bytearray(),
                    bytearray(),
                )
                run_until(selectloop, lambda key=key: ("connected", key, None) in sink.events)
                live.append(key)
            elif key is None:
                continue
            elif op[0] == "server_sends":
                chunk = (b"%d:%d|" % (key, index) * op[2])[: op[2]]
                sent[key] += chunk
                during_a_wait(backlog[key].extend, chunk)
            elif op[0] == "client_sends":
                chunk = (b"%d>%d|" % (key, index) * op[2])[: op[2]]
                wrote[key] += chunk
                during_a_wait(selectloop.send, key, chunk)
            elif op[0] == "close":
                live.remove(key)
                closed.add(key)
                during_a_wait(selectloop.close, key)
                peers.pop(key).close()
                fds_closed.add(fds[key])
            else:  # the server sends what it has, then ends its side
                live.remove(key)
                ended.add(key)
                run_until(selectloop, lambda key=key: drained(key))
                during_a_wait(peers[key].shutdown, socket.SHUT_WR)

        def arrived() -> bool:
            serve()
            return all(
                sink.data.get(key, b"") == sent[key] and got[key] == wrote[key] for key in live
            ) and all(("eof", key) in sink.events for key in ended)

        run_until(selectloop, arrived)
        for key in sent:
            if key in closed:
                assert sent[key].startswith(sink.data.get(key, b""))
                assert wrote[key].startswith(got[key])
            else:
                assert sink.data.get(key, b"") == sent[key]
        for key in ended:
            assert sink.events.count(("eof", key)) == 1
        assert all(event[0] in ("connected", "eof") for event in sink.events), sink.events
    finally:
        selectloop.release()
        for peer in peers.values():
            peer.close()
