"""A small readiness loop for code without an event loop: sockets in, bytes and events out.

Theory of operation
-------------------
:class:`SelectLoop` is the runtime the blocking adapter would otherwise lack; it
knows sockets, TLS and bytes, and nothing of what they carry.  Its owner hands it
non-blocking sockets, or IP literals, to connect (:meth:`~SelectLoop.connect`,
:meth:`~SelectLoop.dial`: ``connect_ex``, then writability and ``SO_ERROR``; with
TLS, a handshake over ``MemoryBIO`` + ``SSLObject``, so nothing ever blocks),
bytes to send (:meth:`~SelectLoop.send`: what the kernel does not take at once
waits, in order, in the socket's buffer, and only then is write interest
registered) and sockets to close.
:meth:`~SelectLoop.wait` blocks in ``poll`` (a socketpair lets another thread cut
it short: :meth:`~SelectLoop.wake`) and :meth:`~SelectLoop.handle` turns what it
returned into calls on the owner's :class:`Sink`: connected (with the ALPN
protocol), failed (with the phase, ``"tcp"`` or ``"tls"``), received bytes, ended
(EOF or a broken socket).  A key is the owner's name for a socket.

A reader never dies of an exception: what ``received`` or ``eof`` raises is reported to
``reader_failed`` and the socket is watched no more.

Not thread-safe: the owner serialises every call -- except :meth:`~SelectLoop.wake`,
which any thread may call, and :meth:`~SelectLoop.wait`, which the owner runs with
its own lock released.  ``stirred`` tells the owner that what must be watched
changed (a socket added, write interest on or off) since the last ``wait`` began,
so a ``wait`` running in another thread must be woken to look again.

:class:`Workers` runs blocking jobs (name resolution cannot be interrupted) on at
most ``limit`` daemon threads, started on demand and ended by ``close``.

**Interrupts.**  A ``KeyboardInterrupt`` lands in the main thread wherever it blocks --
also while it re-takes its owner's lock after ``select`` or a callback, where a plain
``acquire`` would leave the lock not held (and a later ``release`` free another
thread's hold).  :func:`hold` re-takes an ``RLock`` (held once at most) whatever lands
meanwhile and hands the last interrupt back; :func:`retake` is the same for a lock not
held, without a call when nothing lands; :func:`unlocked` runs a blocking call with
the lock let go and raises that interrupt once the lock is held again; a :class:`Bell`
is one thread's wake-up that no interrupt loses or doubles.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import select
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar

from .._common import READ_SIZE, ack_at_once, numeric_socket  # (the loop knows no driver)

__all__ = ["MAX_WAIT", "Bell", "SelectLoop", "Sink", "Workers", "hold", "retake", "unlocked"]

_R, _W = select.POLLIN, select.POLLOUT
MAX_WAIT = 86_400.0  # s a wait lasts at most (poll takes 2**31 - 1 ms; asyncio's cap, trio's)
_BAD = select.POLLERR | select.POLLHUP | select.POLLNVAL  # shown as whatever is watched
_SSL_WANT = (ssl.SSLWantReadError, ssl.SSLWantWriteError)
ConnectPhase = Literal["tcp", "tls", "proxy", "proxy-tls"]  # which step of a connect failed
_Events = list[tuple[int, int]]  # (file descriptor, poll events)
Wrap = Callable[[ssl.MemoryBIO, ssl.MemoryBIO], ssl.SSLObject]  # e.g. a context's wrap_bio


class Sink(Protocol):
    """What a :class:`SelectLoop` reports to its owner about the socket ``key``, with the
    time of the wake-up (a sans-I/O protocol machine's interface, e.g. the sansmcp driver)."""

    def connected(self, key: int, *, alpn: str | None, now: float) -> None: ...

    def connect_failed(self, key: int, phase: ConnectPhase, exc: OSError, *, now: float) -> None:
        """The connect (``"tcp"``), the TLS handshake (``"tls"``), the one with an https://
        proxy (``"proxy-tls"``) or the proxy's answer (``"proxy"``) failed; ``key`` is
        closed."""

    def received(self, key: int, data: bytes, *, now: float) -> None: ...

    def tunnel_received(self, key: int, data: bytes, *, now: float) -> bool | None:
        """A proxy's answer to the ``tunnel`` sent (``b""``: EOF): None, read on; True, go
        on (TLS, if any); False, ``key`` is closed, nothing more reported."""

    def eof(self, key: int, *, now: float) -> None:
        """EOF, or a broken socket: nothing more comes (the owner closes it)."""

    def reader_failed(self, key: int, exc: Exception, *, now: float) -> None:
        """``received`` or ``eof`` raised ``exc``: reported here, never raised into the loop."""


class _Sock:
    """One socket: connecting (``tls`` None), handshaking, or ``open``; ``events`` 0: closed
    or ended, watched no more.  Through an https:// proxy, ``outer`` is the TLS with the
    proxy (its handshake runs while ``tunnel`` is still to send): every byte on the wire
    passes it (``out`` holds wire bytes), and ``tls``, the target's, runs inside it."""

    __slots__ = (
        *("events", "fd", "inbox", "key", "open", "out", "outbox", "proxying", "sock", "tls"),
        *("outer", "outer_in", "outer_out", "outer_wrap", "tunnel", "tunnelled", "wrap"),
    )

    def __init__(
        self,
        key: int,
        sock: socket.socket,
        wrap: Wrap | None,
        tunnel: bytes | None = None,
        outer_wrap: Wrap | None = None,
    ) -> None:
        self.key, self.sock, self.wrap, self.fd = key, sock, wrap, sock.fileno()
        self.tunnel, self.proxying = tunnel, False  # a proxy's CONNECT: to send, then read
        self.tunnelled = tunnel is not None  # each read then acknowledged at once
        self.events, self.open, self.out = _W, False, bytearray()
        self.tls: ssl.SSLObject | None = None
        self.inbox = self.outbox = ssl.MemoryBIO()
        self.outer: ssl.SSLObject | None = None
        self.outer_in = self.outer_out = self.inbox  # (their own once ``outer`` is made)
        self.outer_wrap = outer_wrap


class SelectLoop:
    def __init__(self, sink: Sink, clock: Callable[[], float]) -> None:
        self._sink, self._clock = sink, clock
        self._poll = select.poll()  # (not selectors: its wrapper costs ~6,000 instructions a wait)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._wake_fd = self._wake_r.fileno()
        self._poll.register(self._wake_fd, _R)
        self._socks: dict[int, _Sock] = {}  # by key
        self._fds: dict[int, _Sock] = {}  # the same, by file descriptor
        self.stirred = False
        self.cut = False  # the last wait's timeout was cut to MAX_WAIT

    def connect(
        self,
        key: int,
        sock: socket.socket,
        address: tuple[Any, ...],
        tls: Wrap | None = None,
        tunnel: bytes | None = None,
        proxy_tls: Wrap | None = None,
    ) -> None:
        """Connect the non-blocking ``sock`` to ``address``, then shake hands (``tls``
        wraps the socket's two ``MemoryBIO``\\ s in an ``SSLObject``) and report
        ``connected`` or ``failed``.  With ``tunnel``, a proxy's ``CONNECT`` is sent and
        its answer read first (:meth:`Sink.tunnel_received`); with ``proxy_tls`` too,
        inside TLS with the proxy, which then carries the target's TLS (TLS in TLS)."""
        sock.connect_ex(address)  # its outcome shows as writability, then SO_ERROR
        entry = self._socks[key] = _Sock(key, sock, tls, tunnel, proxy_tls)
        self._fds[entry.fd] = entry
        self._poll.register(entry.fd, _W)
        self.stirred = True

    def dial(
        self,
        key: int,
        address: str,
        port: int,
        tls: tuple[ssl.SSLContext, str] | None = None,
        tunnel: bytes | None = None,
        proxy_tls: tuple[ssl.SSLContext, str] | None = None,
    ) -> None:
        """:meth:`connect` a new socket to the IP literal ``address`` (``tls``, and
        ``proxy_tls`` for an https:// proxy: a context and the name to verify); a socket
        that cannot be made (not a literal, no socket to be had) is reported to
        ``connect_failed`` (``"tcp"``) at once."""
        try:
            sock, sockaddr = numeric_socket(address, port)
        except OSError as exc:
            return self._sink.connect_failed(key, "tcp", exc, now=self._clock())
        self.connect(key, sock, sockaddr, _wrap(tls), tunnel, _wrap(proxy_tls))

    def send(self, key: int, data: bytes) -> None:
        """Send ``data`` on ``key`` after what waits already (a closed key: dropped)."""
        entry = self._socks.get(key)
        if entry is None:
            return
        try:
            if entry.tls is not None:
                entry.tls.write(data)
                data = entry.outbox.read()
            if entry.outer is not None:
                data = _seal(entry, data)
            if not entry.out:
                data = data[entry.sock.send(data) :]
        except BlockingIOError:
            pass
        except (OSError, ValueError):  # a reader sees the socket end
            return
        if data:
            entry.out += data
            self._flush(entry)

    def close(self, key: int) -> None:
        """Close ``key`` (connecting or not); nothing more is reported about it."""
        if (entry := self._socks.pop(key, None)) is not None:
            self._unwatch(entry)
            del self._fds[entry.fd]
            entry.sock.close()

    def wait(self, timeout: float | None) -> _Events:
        """Block until a socket is ready, :meth:`wake` is called, or ``timeout`` s passed --
        at most ``MAX_WAIT`` (``cut`` tells a longer timeout, inf included, was cut to it)."""
        self.stirred = False
        self.cut = timeout is not None and timeout > MAX_WAIT
        if timeout is None:
            return self._poll.poll(None)
        return self._poll.poll(min(timeout, MAX_WAIT) * 1e3)  # (ms, rounded up)

    def wake(self) -> None:
        """Make a :meth:`wait` in another thread return (any thread may call this)."""
        with contextlib.suppress(OSError):  # full: it is awake already; closed: no one waits
            self._wake_w.send(b"w")

    def handle(self, events: _Events) -> float:
        """Report what ``events`` (from :meth:`wait`) found, stamped with one clock read
        (returned)."""
        now = self._clock()
        for fd, mask in events:
            if (entry := self._fds.get(fd)) is not None:  # (else closed meanwhile)
                if mask & _BAD:  # the read or the write shows what went wrong
                    mask |= _R | _W
                if (mask := mask & entry.events) == _R and entry.open and entry.tls is None:
                    self._read(entry, now)  # (what _ready does, inline: every plain read)
                elif mask:
                    self._ready(entry, mask, now)
            elif fd == self._wake_fd:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
        return now

    def release(self) -> None:
        """Close every socket and the wake-up pair (the loop is not used again)."""
        for key in list(self._socks):
            self.close(key)
        self._wake_r.close()
        self._wake_w.close()

    def _ready(self, entry: _Sock, mask: int, now: float) -> None:
        """A socket is readable or writable: connect, shake hands, read, flush."""
        try:
            if entry.open:
                if mask & _R:
                    self._read(entry, now)
                if mask & _W or entry.tls is not None:  # (TLS: what reading left to send)
                    self._flush(entry)
                return
            if entry.outer is not None and entry.tunnel is not None:
                return self._shake_proxy(entry, mask)
            if entry.proxying and not self._tunnel(entry, mask, now):
                return  # (the proxy's answer is not complete, or the dial ended)
            if entry.tls is None:  # the TCP connect (or a proxy's tunnel) ended
                if error := entry.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    raise OSError(error, os.strerror(error))
                if entry.outer_wrap is not None:  # an https:// proxy: TLS with it first
                    entry.outer_in, entry.outer_out = ssl.MemoryBIO(), ssl.MemoryBIO()
                    entry.outer = entry.outer_wrap(entry.outer_in, entry.outer_out)
                    entry.outer_wrap = None
                    return self._shake_proxy(entry, 0)
                if entry.tunnel is not None:  # an egress proxy's CONNECT first
                    entry.out += entry.tunnel
                    entry.tunnel, entry.proxying = None, True
                    return self._flush(entry)
                if entry.wrap is None:
                    entry.open = True
                    self._sink.connected(entry.key, alpn=None, now=now)
                    return self._flush(entry)
                entry.inbox, entry.outbox = ssl.MemoryBIO(), ssl.MemoryBIO()
                entry.tls = entry.wrap(entry.inbox, entry.outbox)
            elif mask & _R:
                data = entry.sock.recv(READ_SIZE)
                ended = not data
                if entry.outer is not None:  # the target's handshake inside the proxy's TLS
                    data, ended = self._unseal(entry, data)
                if ended:
                    raise ConnectionResetError("the server closed during the TLS handshake")
                entry.inbox.write(data)
            with contextlib.suppress(*_SSL_WANT):
                entry.tls.do_handshake()
                entry.open = True
            self._flush(entry)
            if entry.open:
                self._sink.connected(entry.key, alpn=entry.tls.selected_alpn_protocol(), now=now)
                self._read(entry, now, fresh=False)
        except BlockingIOError:
            pass
        except OSError as exc:  # SSLError included
            self.close(entry.key)
            self._sink.connect_failed(entry.key, _phase(entry), exc, now=now)

    def _shake_proxy(self, entry: _Sock, mask: int) -> None:
        """The TLS handshake with an https:// proxy; once it is up, the ``CONNECT`` goes
        inside it."""
        assert entry.outer is not None and entry.tunnel is not None
        if mask & _R:
            if not (data := entry.sock.recv(READ_SIZE)):
                raise ConnectionResetError("the proxy closed during the TLS handshake")
            entry.outer_in.write(data)
        with contextlib.suppress(*_SSL_WANT):
            entry.outer.do_handshake()
            entry.outer.write(entry.tunnel)  # (after the handshake's last bytes, in order)
            entry.tunnel, entry.proxying = None, True
        entry.out += entry.outer_out.read()
        self._flush(entry)

    def _unseal(self, entry: _Sock, data: bytes) -> tuple[bytes, bool]:
        """What the proxy's TLS makes of ``data`` read off the wire (``b""``: EOF): the
        plaintext it holds now, and whether it ended (close_notify, EOF, a fault)."""
        assert entry.outer is not None
        if data:
            entry.outer_in.write(data)
        else:
            entry.outer_in.write_eof()
        chunks: list[bytes] = []
        ended = False
        while True:
            try:
                if not (chunk := entry.outer.read(READ_SIZE)):
                    ended = True
                    break
            except _SSL_WANT:
                break
            except (OSError, ValueError):
                ended = True
                break
            chunks.append(chunk)
        if entry.outer_out.pending:  # (what reading had to answer: a key update)
            entry.out += entry.outer_out.read()
            self._flush(entry)
        return b"".join(chunks), ended

    def _tunnel(self, entry: _Sock, mask: int, now: float) -> bool:
        """Read the proxy's answer for the owner: True once it says go on (the socket is
        the target's now); False while it reads on, or when the owner ended the dial."""
        if not mask & _R:
            self._flush(entry)
            return False
        data, ended = entry.sock.recv(READ_SIZE), False
        ack_at_once(entry.sock)
        if entry.outer is not None:  # an https:// proxy's answer, inside its TLS
            data, ended = self._unseal(entry, data)
            if not (data or ended):
                return False
        verdict = self._sink.tunnel_received(entry.key, data, now=now)
        if verdict is None and ended and data:  # its EOF came with the bytes
            verdict = self._sink.tunnel_received(entry.key, b"", now=now)
        if verdict is None:
            return False
        if not verdict:
            self.close(entry.key)
            return False
        entry.proxying = False
        return True

    def _read(self, entry: _Sock, now: float, *, fresh: bool = True) -> None:
        """Read what ``entry`` has (``fresh`` False: only what TLS holds already)."""
        data = b""
        try:
            data = entry.sock.recv(READ_SIZE) if fresh else b"\0"
        except BlockingIOError:
            return
        except OSError:
            pass
        if entry.tunnelled:
            ack_at_once(entry.sock)
        if entry.outer is not None and fresh:  # through an https:// proxy: its TLS first
            return self._read_sealed(entry, data, now)
        if (tls := entry.tls) is None:
            if not data:
                return self._ended(entry, now)
            try:  # (_received, inline: every plain read)
                return self._sink.received(entry.key, data, now=now)
            except Exception as exc:  # a reader must never die of one
                return self._failed(entry, exc, now)
        if fresh and data:
            entry.inbox.write(data)
        elif fresh:
            entry.inbox.write_eof()
        # what TLS holds, read record by record and handed on at once (one driver feed per
        # read, not per record: asyncio's TLS joins them alike); ``inbox`` and ``tls`` empty
        # mean the next read would only raise ``SSLWantReadError``, so it is not made
        chunks: list[bytes] = []
        ended = False
        while entry.inbox.pending or tls.pending() or not chunks:
            try:
                if not (data := tls.read(READ_SIZE)):
                    ended = True
                    break
            except _SSL_WANT:
                break
            except (OSError, ValueError):
                ended = True
                break
            chunks.append(data)
        if chunks:
            self._received(entry, chunks[0] if len(chunks) == 1 else b"".join(chunks), now)
        if ended and entry.events:  # (not closed by the owner meanwhile)
            self._ended(entry, now)

    def _read_sealed(self, entry: _Sock, data: bytes, now: float) -> None:
        """:meth:`_read` of ``data`` off the wire through an https:// proxy's TLS."""
        data, ended = self._unseal(entry, data)
        if entry.tls is None:  # a plain target inside the proxy's TLS
            if data:
                self._received(entry, data, now)
            if ended and entry.events:
                self._ended(entry, now)
            return
        if data:
            entry.inbox.write(data)
        if ended:
            entry.inbox.write_eof()
        if data or ended:
            self._read(entry, now, fresh=False)

    def _received(self, entry: _Sock, data: bytes, now: float) -> None:
        try:
            self._sink.received(entry.key, data, now=now)
        except Exception as exc:  # a reader must never die of one
            self._failed(entry, exc, now)

    def _ended(self, entry: _Sock, now: float) -> None:
        self._unwatch(entry)  # an ended socket stays readable: it is watched no more
        try:
            self._sink.eof(entry.key, now=now)
        except Exception as exc:  # a reader must never die of one
            self._failed(entry, exc, now)

    def _failed(self, entry: _Sock, exc: Exception, now: float) -> None:
        self._unwatch(entry)
        with contextlib.suppress(Exception):
            self._sink.reader_failed(entry.key, exc, now=now)

    def _unwatch(self, entry: _Sock) -> None:
        if entry.events:
            entry.events = 0
            self._poll.unregister(entry.fd)

    def _flush(self, entry: _Sock) -> None:
        if not entry.events:
            return  # closed or ended meanwhile
        if entry.tls is not None and entry.outbox.pending:
            data = entry.outbox.read()
            entry.out += data if entry.outer is None else _seal(entry, data)
        if entry.out:
            try:
                del entry.out[: entry.sock.send(entry.out)]
            except BlockingIOError:
                pass
            except OSError:  # a reader sees the socket end
                entry.out.clear()
        connected = entry.open or entry.tls or entry.proxying or entry.outer  # (TCP is up)
        events = _R | (_W if entry.out else 0) if connected else _W
        if events != entry.events:
            entry.events = events
            self._poll.modify(entry.fd, events)
            self.stirred = True


def _wrap(tls: tuple[ssl.SSLContext, str] | None) -> Wrap | None:
    """A context and the name to verify as a :data:`Wrap` (None: no TLS)."""
    return None if tls is None else functools.partial(tls[0].wrap_bio, server_hostname=tls[1])


def _seal(entry: _Sock, data: bytes) -> bytes:
    """``data`` as it goes on the wire inside an https:// proxy's TLS (that TLS broken:
    nothing; the reader sees it end)."""
    assert entry.outer is not None
    try:
        entry.outer.write(data)
    except (OSError, ValueError):
        return b""
    return entry.outer_out.read()


def _phase(entry: _Sock) -> ConnectPhase:
    """Which step of ``entry``'s connect was under way."""
    if entry.proxying:
        return "proxy"
    if entry.outer is not None and entry.tunnel is not None:
        return "proxy-tls"
    return "tls" if entry.tls is not None else "tcp"


class Workers:
    """Blocking jobs on at most ``limit`` daemon threads (started when every one is busy)."""

    def __init__(self, limit: int, name: str) -> None:
        self._limit, self._name = limit, name
        self._jobs: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._busy = 0

    @property
    def threads(self) -> int:
        return len(self._threads)

    def submit(self, job: Callable[..., None], *args: Any) -> None:
        """Run ``job(*args)`` on a worker thread; whatever it raises is its own business."""
        with self._lock:
            self._busy += 1
            self._jobs.put((job, args))
            if self._busy > len(self._threads) and len(self._threads) < self._limit:
                thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._threads.append(thread)
                thread.start()

    def close(self) -> None:
        """End every thread once it is idle (one running a job: once it returns)."""
        with self._lock:
            for _ in self._threads:
                self._jobs.put(None)
            self._threads = []

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, args = job
            try:
                with contextlib.suppress(BaseException):  # a worker dies of no job's exception
                    fn(*args)
            finally:
                with self._lock:
                    self._busy -= 1


T = TypeVar("T")


def hold(lock: Any) -> KeyboardInterrupt | None:
    """Take ``lock`` (an ``RLock``) unless this thread holds it, whatever interrupts land
    meanwhile; the last one is returned, for the caller to raise once its state is
    consistent again."""
    interrupt = None
    while not lock._is_owned():
        try:
            lock.acquire()
        except KeyboardInterrupt as exc:
            interrupt = exc
    return interrupt


def retake(lock: Any) -> None:
    """Take ``lock`` (an ``RLock`` this thread does not hold): :func:`hold`, called only
    if an interrupt lands (the hot path: every operation, every ``select``); the
    interrupt is raised once the lock is held."""
    interrupt = None
    try:
        lock.acquire()
    except KeyboardInterrupt as exc:  # (landed before the lock was taken, or just after)
        interrupt = hold(lock) or exc
    if interrupt is not None:
        raise interrupt


def unlocked(lock: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with ``lock`` (an ``RLock`` this thread holds once) let go; the lock is
    held again when this returns or raises (an interrupt meanwhile: raised then)."""
    lock.release()
    try:
        return fn(*args)
    finally:
        retake(lock)


class Bell:
    """One thread's wake-up: :meth:`wait` lets go of the owner's lock until :meth:`ring`
    (called under that lock); an interrupted wait leaves no ring behind for the next."""

    __slots__ = ("_asleep", "_gate")

    def __init__(self) -> None:
        self._gate = threading.Lock()  # held until rung
        self._gate.acquire()
        self._asleep = False

    def ring(self) -> None:
        """Wake the waiting thread (none: nothing happens)."""
        if self._asleep:
            self._asleep = False
            self._gate.release()

    def wait(self, lock: Any) -> None:
        """Block until rung, with ``lock`` let go (see :func:`unlocked`)."""
        self._asleep = True
        try:
            unlocked(lock, self._gate.acquire)
        finally:  # under the lock: whether rung or interrupted, no ring is left over
            if self._asleep:
                self._asleep = False
            else:
                self._gate.acquire(blocking=False)
