"""The blocking adapter's own contract: threads sharing one Client, and what replaces
cancellation there -- ``Client.close()`` from another thread, and a ``KeyboardInterrupt``
(or any exception) in the caller's thread.

The contract suite runs on "sync" too (``sync_shim.py``); these tests use the blocking
API directly, in the test's own (main) thread where the signal lands.
"""

from __future__ import annotations

import _thread
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from sansmcp import Config, ConnectionFailed, Limits
from sansmcp.core.url import parse_endpoint
from sansmcp.io_adapters import sync
from sansmcp.io_adapters.blocking import sync as blocking

from ..timing import Span, Stopwatch, assert_span_within, assert_within
from .conftest import MODES, REPO, Launcher, Relay, Server

THREADS = 50
ITEMS = 20  # per thread
SLOW = b'{"seconds": 5}'
CLOSE_BOUND = 1.0  # the bound on ending in-flight work
MARGIN = 2.0  # past a bound: CPU time always, wall time in `make hostile` (tests/timing.py)
JOIN = 30.0  # a safety net for joins (a loaded machine), not an assertion


@pytest.fixture(scope="module")
def h2c_many(launch: Launcher) -> Server:
    """h2c without hypercorn's GOAWAY after 1,000 requests on one connection."""
    return launch("--stateless", "--json", "--h2c", "--max-requests", "1000000000")


def echo(client: sync.Client, url: str, text: str) -> str:
    with client.connect(Config(url=url)) as conn:
        result = conn.call_tool("echo", b'{"text": "%s"}' % text.encode())
    return str(result.content[0].text)


def assert_consistent(client: sync.Client, url: str) -> None:
    pool = client.pool
    assert pool.socket_count == pool.idle_count(parse_endpoint(url).origin)


@pytest.mark.parametrize(("transport", "cap"), [("h1", None), ("h1", 8), ("h2c", None)])
def test_threads_share_one_client(
    plain: Server, h2c_many: Server, relay: Callable[..., Relay], transport: str, cap: int | None
) -> None:
    """50 threads x 20 work items on one Client: no error, the sockets within the pool's
    bounds at every sample (with a per-origin cap of 8, reached and never passed), and
    over h2c one TCP connection (>= 2 requests per item, so at most one connection per
    1,000 requests)."""
    proxy = relay((plain if transport == "h1" else h2c_many).address)
    limits = Limits() if cap is None else Limits(pool_max_sockets_per_origin=cap)
    errors: list[BaseException] = []
    peak = [0, 0]  # pool sockets, connections open at the relay
    start = threading.Barrier(THREADS + 1)
    done = threading.Event()

    h2c = transport == "h2c"
    with sync.Client(allow_loopback=True, http2_prior_knowledge=h2c, limits=limits) as client:

        def worker(index: int) -> None:
            start.wait()
            try:
                for item in range(ITEMS):
                    text = f"{index}-{item}"
                    assert echo(client, proxy.url(), text) == text
            except BaseException as exc:
                errors.append(exc)

        def sample() -> None:
            while not done.wait(0.005):
                peak[0] = max(peak[0], client.pool.socket_count)
                peak[1] = max(peak[1], proxy.accepts - len(proxy.client_closes))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        sampler = threading.Thread(target=sample)
        for thread in [*threads, sampler]:
            thread.start()
        start.wait()
        for thread in threads:
            thread.join(timeout=60)
        done.set()
        sampler.join()
        assert not any(thread.is_alive() for thread in threads)
        assert errors == []
        assert_consistent(client, proxy.url())
    assert 1 <= peak[0] <= limits.pool_max_sockets_per_origin
    assert 1 <= peak[1] <= limits.pool_max_sockets_per_origin
    if cap is not None:
        assert peak[0] == cap
    if transport == "h2c":
        assert proxy.accepts <= max(1, 2 * THREADS * ITEMS // 1000)
    else:
        assert proxy.accepts >= peak[1]


@pytest.mark.parametrize("transport", ["h1", "h2c"])
def test_close_from_another_thread_ends_in_flight_work(
    plain: Server, h2c: Server, relay: Callable[..., Relay], transport: str
) -> None:
    """Three threads in slow calls (one reading, two waiting their turn) and one dialling
    a server that never answers: ``Client.close()`` from the main thread ends them all
    with ``ConnectionFailed`` within 1 s."""
    proxy = relay((plain if transport == "h1" else h2c).address)
    silent = relay(None)
    outcomes: dict[str, tuple[BaseException | None, float]] = {}
    client = sync.Client(allow_loopback=True, http2_prior_knowledge=transport == "h2c")
    ready = threading.Barrier(4)

    def slow(name: str) -> None:
        try:
            with client.connect(Config(url=proxy.url())) as conn:
                ready.wait()
                conn.call_tool("sleep", SLOW)
            outcomes[name] = (None, time.monotonic())
        except BaseException as exc:
            outcomes[name] = (exc, time.monotonic())

    def dial() -> None:
        try:
            with client.connect(Config(url=silent.url())):
                pass
            outcomes["dial"] = (None, time.monotonic())
        except BaseException as exc:
            outcomes["dial"] = (exc, time.monotonic())

    threads = [threading.Thread(target=slow, args=(f"slow-{i}",)) for i in range(3)]
    threads.append(threading.Thread(target=dial))
    for thread in threads:
        thread.start()
    ready.wait(timeout=10)
    time.sleep(0.3)  # the calls are on the wire; the dial is waiting for the silent server
    assert silent.accepts == 1
    closed_at, watch = time.monotonic(), Stopwatch()
    client.close()
    for thread in threads:
        thread.join(timeout=JOIN)
    cpu = watch.read().cpu
    assert sorted(outcomes) == ["dial", "slow-0", "slow-1", "slow-2"]
    for name, (exc, at) in outcomes.items():
        # ended by the close, not by the server's 5 s answer (that would be a success)
        assert isinstance(exc, ConnectionFailed), (name, exc)
        assert_within(at - closed_at, cpu, CLOSE_BOUND + MARGIN, name)
    assert client.pool.socket_count == 0
    proxy.wait_for_closes(1 if transport == "h2c" else 3)  # (a silent relay sees no close)
    with pytest.raises(RuntimeError, match="closed"):  # UsageError: the Client is closed
        echo(client, proxy.url(), "after")


@pytest.fixture
def interrupt_main_when() -> Iterator[Callable[[Callable[[], bool]], list[Stopwatch]]]:
    """``interrupt(ready)``: SIGINT to the main thread once ``ready()`` holds (polled from
    a thread, so the signal lands where the test means it to however loaded the machine
    is); returns a list that gets a :class:`Stopwatch` started as the signal is sent.

    ``_thread.interrupt_main()`` only marks the signal as tripped, which a thread blocked
    in ``select`` sees when the select ends; ``pthread_kill`` interrupts the system call
    itself, as a user's Ctrl-C does.
    """
    stop = threading.Event()
    threads: list[threading.Thread] = []
    main = threading.main_thread().ident
    assert main is not None and main == threading.get_ident()

    def interrupt(ready: Callable[[], bool]) -> list[Stopwatch]:
        sent: list[Stopwatch] = []

        def watch() -> None:
            while not stop.wait(0.002):
                if ready():
                    sent.append(Stopwatch())
                    signal.pthread_kill(main, signal.SIGINT)
                    return

        thread = threading.Thread(target=watch, daemon=True)
        threads.append(thread)
        thread.start()
        return sent

    yield interrupt
    stop.set()
    for thread in threads:
        thread.join(timeout=5)


def in_select(client: sync.Client, proxy: Relay, marker: bytes) -> Callable[[], bool]:
    """The request carrying ``marker`` is on the wire and the main thread reads (selects)."""
    return lambda: marker in proxy.from_client and client._turns._selecting


@pytest.mark.parametrize("transport", ["h1", "h2c"])
def test_keyboard_interrupt_in_the_caller_abandons_its_conn(
    plain: Server,
    h2c: Server,
    relay: Callable[..., Relay],
    interrupt_main_when: Callable[[Callable[[], bool]], list[Stopwatch]],
    transport: str,
) -> None:
    """Ctrl-C in a thread reading its socket: the KeyboardInterrupt propagates as itself,
    the Conn is closed, the pool stays consistent (over h1 the socket that carried the
    abandoned exchange is closed, not reused) and the next work item succeeds."""
    proxy = relay((plain if transport == "h1" else h2c).address)
    url = proxy.url()
    with sync.Client(allow_loopback=True, http2_prior_knowledge=transport == "h2c") as client:
        assert echo(client, url, "before") == "before"
        with client.connect(Config(url=url)) as conn:
            sent = interrupt_main_when(in_select(client, proxy, b'"sleep"'))
            with pytest.raises(KeyboardInterrupt):
                conn.call_tool("sleep", SLOW)
            assert_span_within(sent[0].read(), MARGIN, "the interrupt")
            assert_consistent(client, url)
            with pytest.raises(RuntimeError, match="closed"):
                conn.call_tool("echo", b'{"text": "same conn"}')
        accepted = proxy.accepts
        if transport == "h1":
            proxy.wait_for_closes(1)  # the abandoned exchange's socket
        assert echo(client, url, "after") == "after"
        assert_consistent(client, url)
        if transport == "h1":
            assert proxy.accepts == accepted + 1  # a fresh socket
        else:
            assert proxy.accepts == accepted  # the h2 connection carries on


class SecondInterrupt:
    """The Client's RLock, with a second Ctrl-C on call: once ``armed`` ("before" or
    "after"), the main thread's next ``acquire`` raises KeyboardInterrupt before taking the
    lock, or just after -- the two places a signal can land in a real acquire."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.armed: str | None = None
        self.fired = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        where = self.armed if threading.current_thread() is threading.main_thread() else None
        if where == "before":
            self.armed, self.fired = None, self.fired + 1
            raise KeyboardInterrupt("second, before")
        taken = self.lock.acquire(blocking, timeout)
        if where == "after":
            self.armed, self.fired = None, self.fired + 1
            raise KeyboardInterrupt("second, after")
        return taken

    def release(self) -> None:
        self.lock.release()

    def _is_owned(self) -> bool:
        return bool(self.lock._is_owned())  # type: ignore[attr-defined]

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("blocked", ["select", "callback"])
def test_a_second_interrupt_while_the_lock_is_re_taken_escapes_as_itself(
    launch: Launcher, relay: Callable[..., Relay], where: str, blocked: str
) -> None:
    """The first Ctrl-C ends the main thread's ``select`` (or its progress callback), the
    second lands while it re-takes the Client's lock: a KeyboardInterrupt escapes, never a
    RuntimeError; the lock is free, the Conn abandoned (its socket closed, not reused) and
    the next work item works.  Deterministic: the signals are injected where they land."""
    proxy = relay(launch("--observe").address)  # "report" sends progress
    url = proxy.url()
    client = sync.Client(allow_loopback=True)
    lock = SecondInterrupt()
    client._lock = client._turns._lock = lock  # type: ignore[assignment]
    client._turns._watching = threading.Condition(lock)
    real_wait = client._loop.wait
    first = threading.Event()  # set: the next select in the main thread is interrupted

    def wait(timeout: float | None) -> Any:
        if first.is_set() and threading.current_thread() is threading.main_thread():
            first.clear()
            lock.armed = where
            raise KeyboardInterrupt("first")
        return real_wait(timeout)

    def progress(*_: object) -> None:
        lock.armed = where
        raise KeyboardInterrupt("first")

    client._loop.wait = wait  # type: ignore[method-assign]
    with client:
        assert echo(client, url, "before") == "before"
        accepted = proxy.accepts
        with client.connect(Config(url=url)) as conn:
            with pytest.raises(KeyboardInterrupt) as raised:
                if blocked == "select":
                    first.set()
                    conn.call_tool("sleep", SLOW)
                else:
                    conn.call_tool("report", b'{"steps": 3}', on_progress=progress)
            assert lock.fired == 1 and raised.value.args[0].startswith("second")
            assert not lock._is_owned()
            with pytest.raises(RuntimeError, match="closed"):
                conn.call_tool("echo", b'{"text": "same conn"}')
        proxy.wait_for_closes(1)  # the abandoned exchange's socket
        assert echo(client, url, "after") == "after"
        assert_consistent(client, url)
        assert proxy.accepts == accepted + 1  # a fresh socket


def test_interrupt_main_in_the_input_handler_abandons_its_conn(
    launch: Launcher, relay: Callable[..., Relay]
) -> None:
    """``_thread.interrupt_main()`` from the input handler, which runs in the caller's
    (main) thread: the KeyboardInterrupt leaves the call as itself and the Client's next
    work item works."""
    proxy = relay(launch(*MODES["stateful-sse"]).address)
    asked: list[str] = []
    interrupted: list[Stopwatch] = []

    def handler(requests: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
        asked.extend(requests)
        assert threading.current_thread() is threading.main_thread()
        interrupted.append(Stopwatch())
        _thread.interrupt_main()
        time.sleep(5)  # the interrupt lands here
        raise AssertionError("not interrupted")

    with sync.Client(
        allow_loopback=True, input_handler=handler, capabilities={"elicitation": {"form": {}}}
    ) as client:
        with client.connect(Config(url=proxy.url())) as conn:
            with pytest.raises(KeyboardInterrupt):
                conn.call_tool("ask_mrtr", b"{}")
            assert_span_within(interrupted[0].read(), MARGIN, "the interrupt")
        assert len(asked) == 1
        assert echo(client, proxy.url(), "after") == "after"
        assert_consistent(client, proxy.url())


def test_the_default_client_is_one_per_process(plain: Server) -> None:
    """``sync.connect`` uses one lazily created Client, whichever thread asks first."""
    seen: list[object] = []

    def first() -> None:
        with pytest.raises(ConnectionFailed) as failed, sync.connect(Config(url=plain.url())):
            pass
        assert failed.value.cause == "refused_address"  # the default guard: no loopback
        seen.append(blocking._default_client)  # (the code's module: the public one re-exports)

    threads = [threading.Thread(target=first) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(seen) == 8 and len({id(client) for client in seen}) == 1


def test_the_worker_example_runs_from_a_thread_pool(plain: Server) -> None:
    """``examples/worker.py``: a task-queue worker function, called from a ThreadPoolExecutor."""
    out = subprocess.run(
        [sys.executable, "examples/worker.py", plain.url(), "--allow-loopback"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = out.stdout.splitlines()
    assert lines == [f"item {i}" for i in range(32)], out.stderr


def test_hanging_resolves_use_at_most_four_threads_and_each_dial_deadline_binds() -> None:
    """Six dials whose resolver hook hangs: at most ``RESOLVERS`` (4) threads run the hook,
    the other two wait in the queue, and every dial still ends at its own deadline with
    ``ConnectionFailed`` (a hook cannot be interrupted; the deadline binds regardless)."""
    release = threading.Event()
    running: list[str] = []

    def hook(host: str, port: int) -> list[str]:
        running.append(threading.current_thread().name)
        release.wait(10)
        return ["127.0.0.1"]

    limits = Limits(dial_timeout=0.5)
    errors: list[BaseException] = []
    spent: list[Span] = []
    # another test's Client may still have a resolver thread running its hook: count ours
    before = set(threading.enumerate())
    with sync.Client(allow_loopback=True, resolver=hook, limits=limits) as client:

        def work(index: int) -> None:
            watch = Stopwatch()
            try:
                with client.connect(Config(url=f"http://mcp{index}.test:9/mcp")):
                    pass
            except ConnectionFailed as exc:
                errors.append(exc)
            spent.append(watch.read())

        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        hooks = len(running)
        resolvers = sum(
            t.name == "sansmcp-resolver" and t not in before for t in threading.enumerate()
        )
        release.set()
    assert len(errors) == 6 and all(isinstance(e, ConnectionFailed) for e in errors)
    for took in spent:
        assert_span_within(took, limits.dial_timeout + MARGIN, "a dial")
    assert hooks == 4 and resolvers <= sync.RESOLVERS == 4


def test_connect_opens_on_entering_and_a_failed_connect_leaves_nothing(plain: Server) -> None:
    """``Client.connect``'s context manager: nothing is opened until it is entered; a
    connect that fails (a refused port) raises ``ConnectionFailed`` with no Conn left in
    the Client and no socket in the pool; one that succeeds is gone after its exit."""
    with sync.Client(allow_loopback=True) as client:
        manager = client.connect(Config(url=plain.url()))
        assert not client._conns  # (not entered: nothing opened)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))  # bound, never listening: a refused port
            refused = f"http://127.0.0.1:{probe.getsockname()[1]}/mcp"
            with pytest.raises(ConnectionFailed), client.connect(Config(url=refused)):
                pytest.fail("entered a connect that failed")
        assert not client._conns and client.pool.socket_count == 0
        with manager as conn:
            assert client._conns and conn.list_tools()
        assert not client._conns
