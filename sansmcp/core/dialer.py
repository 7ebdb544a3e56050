"""The dial walk: resolve a host, vet its addresses, connect to them one at a time.

The driver's sockets (:mod:`sansmcp.core.sockets`) open a :class:`Dial` when the pool
says a new socket is needed, and hand it to the :class:`Dialer`, which walks it: a
:class:`~sansmcp.core.commands.Resolve` for a host name (an IP literal skips it), the
answer vetted by :func:`sansmcp.core.net.dial.vet`, then one
:class:`~sansmcp.core.commands.Connect` per vetted address until one is up
(:data:`DialPhase` says where a connect failed).  Each step that ends the walk hands the
dial back: up (:meth:`Dialer.connected`), or failed with ``dial.failure`` (every other
report).  The dial's deadline (the driver's heap), the pool and the exchange waiting for
the socket stay theirs.

A dial for a :class:`~sansmcp.core.net.egress.RoutedOrigin` follows its route
(:mod:`sansmcp.core.net.egress`): the work item's policy first (``only_hosts``; with the
guard mode ``"proxy"``, a refused IP literal), then -- direct, or with the guard mode
``"local"`` -- the target resolved and vetted under that policy; through a proxy, the
proxy's host resolved (its addresses refused only for what no setting admits: the
proxy is the caller's own) and each of its addresses tried in turn with a
:class:`~sansmcp.core.commands.Connect` whose ``tunnel`` is the ``CONNECT`` to the
first vetted target address (guard ``"local"``) or to the target's host (``"proxy"``).
The adapter hands the proxy's answer to :meth:`Dialer.tunnel_received`, read by a
:class:`~sansmcp.core.net.tunnel.TunnelReply`; a 2xx lets the adapter go on with TLS to
the target's name inside the tunnel.  A refusal or a misbehaving proxy ends the dial (no
other proxy address is tried: the proxy answered) -- except that with the guard mode
``"local"``, a 500, 502, 503 or 504 (:data:`UPSTREAM_FAILED`: the proxy could not reach
that address, as a refused connect tells a direct dial) moves on to the target's next
vetted address, through the same proxy address, on a new connection; the last refusal
is the dial's failure.  A 401, 403 or 407 (the proxy's policy or its credentials), a
3xx, any other status and every misbehaviour end the dial at once: another address of
the same host would meet the same answer.  Each connect to a proxy address has its own
deadline for the answer (``Limits.proxy_connect_timeout``, within the dial's: the dial's
``due`` is the sooner; ``retimed`` tells the caller to re-arm it).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Generic, Literal, TypeVar

from .commands import CloseSocket, Command, Connect, Resolve
from .errors import ConnectionFailed
from .limits import Limits
from .mcp import StartExchange
from .net import dial as dialing
from .net.egress import Route, RoutedOrigin, check_target, vet_target
from .net.pool import DialNeeded
from .net.tunnel import TunnelReply, connect_request
from .url import Origin

__all__ = ["Dial", "DialPhase", "Dialer"]

# where a connect failed: TCP (or the socket), TLS, or the proxy's CONNECT (a socket error)
DialPhase = Literal["tcp", "tls", "proxy", "proxy-tls"]

# a proxy's refusals of CONNECT that say it could not reach that address (squid's and
# Envoy's 503, 502, 504, tinyproxy's "500 Unable to connect"): with the guard "local",
# the next vetted address is tried (a policy's 401/403/407 never is)
UPSTREAM_FAILED = frozenset({500, 502, 503, 504})

OwnerT = TypeVar("OwnerT")  # what a dial is for: the driver's Conn


class Dial(Generic[OwnerT]):
    """One socket being dialled for ``start`` of ``conn`` (the pool's ``grant``)."""

    __slots__ = (
        "address",
        "addresses",
        "answer_by",
        "conn",
        "deadline",
        "failure",
        "grant",
        "heap_at",
        "heap_seq",
        "index",
        "io_id",
        "reply",
        "route",
        "start",
        "target",
        "targets",
    )

    def __init__(self, conn: OwnerT, start: StartExchange, grant: DialNeeded) -> None:
        self.conn = conn
        self.start = start
        self.grant = grant
        self.deadline = min(start.deadline, grant.deadline)
        self.addresses: list[str] = []
        self.index = 0
        self.address = ""
        self.io_id: int | None = None  # the Resolve or Connect in progress
        self.failure: ConnectionFailed | None = None
        self.heap_at: float | None = None
        self.heap_seq: int | None = None
        origin = grant.origin
        self.route: Route | None = origin.route if isinstance(origin, RoutedOrigin) else None
        self.target = ""  # through a proxy: the CONNECT target's host, once known
        self.targets: list[str] = []  # (guard "local") the vetted addresses after ``target``
        self.reply: TunnelReply | None = None  # the proxy's answer being read
        self.answer_by: float | None = None  # its deadline (proxy_connect_timeout), if sooner

    @property
    def due(self) -> float:
        """When the dial times out: its deadline, or the proxy's answer's, if sooner."""
        answer_by = self.answer_by
        return self.deadline if answer_by is None else min(answer_by, self.deadline)

    @property
    def via_proxy(self) -> bool:
        return self.route is not None and self.route.proxy is not None


class Dialer(Generic[OwnerT]):
    """Every dial in progress; its commands go to ``outbox``.

    Each report method returns the dial the report ended (None: the walk goes on, or the
    id is no longer known): failed, with ``failure`` set, or -- :meth:`connected` -- up.
    """

    __slots__ = (
        "_connecting",
        "_io_ids",
        "_limits",
        "_outbox",
        "_resolving",
        "allow_loopback",
        "allow_private",
        "dials",
        "retimed",
    )

    def __init__(
        self,
        outbox: deque[Command],
        *,
        allow_private: bool,
        allow_loopback: bool,
        limits: Limits | None = None,
    ) -> None:
        self._outbox = outbox
        self._limits = limits or Limits()
        self.allow_private = allow_private
        self.allow_loopback = allow_loopback
        self._io_ids = itertools.count(1)  # Resolve, Connect and socket ids
        self.dials: dict[int, Dial[OwnerT]] = {}  # pool connection id ->
        self._resolving: dict[int, Dial[OwnerT]] = {}  # io id ->
        self._connecting: dict[int, Dial[OwnerT]] = {}  # io id ->
        self.retimed: list[Dial[OwnerT]] = []  # dials whose ``due`` changed (to re-arm)

    def open(self, conn: OwnerT, start: StartExchange, grant: DialNeeded) -> Dial[OwnerT]:
        """A new dial, not walked yet (see :meth:`walk`)."""
        dial = Dial(conn, start, grant)
        self.dials[grant.conn_id] = dial
        return dial

    def walk(self, dial: Dial[OwnerT], now: float) -> Dial[OwnerT] | None:
        """Start the walk: resolve the host, or vet it when it is an IP literal."""
        origin = dial.grant.origin
        route = dial.route
        if route is not None:
            try:
                check_target(route.policy, route.guard if dial.via_proxy else "local", origin)
            except ConnectionFailed as failure:
                dial.failure = failure
                return dial
            if route.proxy is not None and route.guard == "proxy":
                dial.target = origin.host
                return self._to_proxy(dial, now)
        return self._lookup(dial, origin, now)

    def _lookup(self, dial: Dial[OwnerT], origin: Origin, now: float) -> Dial[OwnerT] | None:
        """Resolve ``origin``'s host (the target's or the proxy's), or vet its literal."""
        literal = dialing.literal_address(origin.host)
        if literal is not None:
            return self._vet(dial, [literal], now)
        dial.io_id = next(self._io_ids)
        self._resolving[dial.io_id] = dial
        self._outbox.append(Resolve(dial_id=dial.io_id, host=origin.host, port=origin.port))
        return None

    def _to_proxy(self, dial: Dial[OwnerT], now: float) -> Dial[OwnerT] | None:
        """The target is settled (``dial.target``): on to the proxy's addresses."""
        assert dial.route is not None and dial.route.proxy is not None
        return self._lookup(dial, dial.route.proxy.origin, now)

    def resolved(self, dial_id: int, answers: object, now: float) -> Dial[OwnerT] | None:
        dial = self._resolving.pop(dial_id, None)
        if dial is None:
            return None
        dial.io_id = None
        return self._vet(dial, answers, now)

    def resolve_failed(
        self, dial_id: int, exc: BaseException, *, from_hook: bool
    ) -> Dial[OwnerT] | None:
        dial = self._resolving.pop(dial_id, None)
        if dial is None:
            return None
        dial.io_id = None
        origin = self._dialled(dial)
        if from_hook:
            failure = dialing.hook_error(origin, exc)
            failure.__cause__ = exc
        else:
            failure = dialing.dns_error(origin, exc)
        dial.failure = failure
        return dial

    def connected(self, socket_id: int) -> Dial[OwnerT] | None:
        return self._connecting.pop(socket_id, None)

    def tunnel_received(
        self, socket_id: int, data: bytes, now: float
    ) -> tuple[bool | None, Dial[OwnerT] | None]:
        """The proxy's bytes (``b""``: its EOF) on a tunnel being set up: (None: read on;
        True: the tunnel is up, go on; False: stop and close -- the dial, failed, is the
        second item when it ended now; a refusal in :data:`UPSTREAM_FAILED` with another
        vetted target address left goes on with it instead), as
        :class:`~sansmcp.core.commands.Connect` says."""
        dial = self._connecting.get(socket_id)
        if dial is None or dial.reply is None:
            return False, None  # given up meanwhile (or not a tunnel): the adapter closes it
        try:
            up = dial.reply.receive_data(data) if data else dial.reply.receive_eof()
        except ConnectionFailed as failure:
            del self._connecting[socket_id]
            dial.io_id = None
            dial.failure = failure
            if failure.status in UPSTREAM_FAILED and dial.targets:
                dial.target = dial.targets.pop(0)  # the proxy could not reach that address
                dial.index -= 1  # (through the proxy address that answered)
                return False, self._next_address(dial, now)
            return False, dial  # the proxy answered: no other of its addresses is tried
        if up is None:
            return None, None
        dial.answer_by = None  # answered: the rest of the dial (TLS) is dial_timeout's
        self.retimed.append(dial)
        return True, None

    def timeout_error(self, dial: Dial[OwnerT]) -> ConnectionFailed:
        """The failure of ``dial`` when its deadline passed, naming the proxy when it was
        still waiting for the answer to its ``CONNECT`` (and the bound
        ``proxy_connect_timeout`` when that wait's own deadline came first)."""
        failure = dialing.timeout_error(self._limits)
        reply = dial.reply
        if reply is None or reply.answered or dial.io_id not in self._connecting:
            return failure
        if dial.answer_by is not None and dial.answer_by < dial.deadline:
            limit = self._limits.proxy_connect_timeout
            return ConnectionFailed(
                f"no tunnel through the proxy {reply.proxy.url} in time (no answer to its "
                f"CONNECT within {limit:g} s, Limits.proxy_connect_timeout)",
                cause="timeout",
                bound="proxy_connect_timeout",
                limit=limit,
            )
        return ConnectionFailed(
            f"no tunnel through the proxy {reply.proxy.url} in time (no answer to its "
            f"CONNECT): {failure.message}",
            cause="timeout",
            bound=failure.bound,
            limit=failure.limit,
        )

    def connect_failed(
        self, socket_id: int, phase: DialPhase, exc: BaseException, now: float
    ) -> Dial[OwnerT] | None:
        dial = self._connecting.pop(socket_id, None)
        if dial is None:
            return None
        dial.io_id = None
        origin = dial.grant.origin
        route = dial.route
        proxy = None if route is None else route.proxy
        if phase == "tls":
            # a runtime may wrap the TLS library's error: its reason is in the cause
            reason = exc.__cause__ if exc.__cause__ is not None else exc
            where = dial.address if proxy is None else f"{dial.target} via {proxy.url}"
            dial.failure = dialing.tls_error(origin, where, reason)
        elif proxy is None:
            dial.failure = dialing.connect_error(origin, dial.address, exc)
        elif phase == "proxy-tls":  # the handshake with an https:// proxy itself
            reason = exc.__cause__ if exc.__cause__ is not None else exc
            failed = dialing.tls_error(proxy.origin, dial.address, reason)
            dial.failure = ConnectionFailed(
                f"the TLS handshake with the proxy failed: {failed.message}", cause=failed.cause
            )
        else:
            failed = dialing.connect_error(proxy.origin, dial.address, exc)
            what = "lost during CONNECT" if phase == "proxy" else "failed"
            dial.failure = ConnectionFailed(
                f"the connection to the proxy {what}: {failed.message}",
                cause="proxy" if phase == "proxy" else "dial",
            )
        return self._next_address(dial, now)

    def give_up(self, dial: Dial[OwnerT]) -> None:
        """Abandon the dial's resolve or connect in progress (the caller ends the dial)."""
        assert dial.io_id is not None  # a live dial always waits for a resolve or a connect
        self._resolving.pop(dial.io_id, None)
        self._connecting.pop(dial.io_id, None)
        self._outbox.append(CloseSocket(socket_id=dial.io_id))
        dial.io_id = None

    def _dialled(self, dial: Dial[OwnerT]) -> Origin:
        """The origin whose host the walk is at: the target's, or -- its address settled --
        the proxy's."""
        route = dial.route
        if route is not None and route.proxy is not None and dial.target:
            return route.proxy.origin
        return dial.grant.origin

    def _vet(self, dial: Dial[OwnerT], answers: object, now: float) -> Dial[OwnerT] | None:
        route = dial.route
        origin = self._dialled(dial)
        try:
            if route is None:
                addresses = dialing.vet(
                    origin,
                    answers,
                    allow_private=self.allow_private,
                    allow_loopback=self.allow_loopback,
                )
            elif origin is not dial.grant.origin:  # the proxy's: the caller named it
                addresses = dialing.vet(origin, answers, allow_private=True, allow_loopback=True)
            else:
                addresses = vet_target(route.policy, origin, answers)
        except ConnectionFailed as failure:
            dial.failure = failure
            return dial
        if origin is dial.grant.origin and dial.via_proxy:
            dial.target, *dial.targets = addresses  # CONNECT to an address vetted here
            return self._to_proxy(dial, now)
        dial.addresses = addresses
        return self._next_address(dial, now)

    def _next_address(self, dial: Dial[OwnerT], now: float) -> Dial[OwnerT] | None:
        """Connect to the next vetted address, or fail with the last address's failure."""
        if dial.index >= len(dial.addresses):
            assert dial.failure is not None  # vet() returns at least one address
            return dial
        dial.address = dial.addresses[dial.index]
        dial.index += 1
        origin: Origin = dial.grant.origin
        dial.io_id = socket_id = next(self._io_ids)
        self._connecting[socket_id] = dial
        tls = (origin.host, dial.grant.alpn) if origin.scheme == "https" else None
        route = dial.route
        if route is None or route.proxy is None:
            self._outbox.append(
                Connect(socket_id=socket_id, address=dial.address, port=origin.port, tls=tls)
            )
            return None
        proxy = route.proxy
        limits = self._limits
        dial.reply = TunnelReply(
            proxy,
            max_header_bytes=limits.max_header_bytes,
            max_informational=limits.max_informational,
        )
        # the proxy's TCP connect and its answer get their own deadline, within the dial's
        dial.answer_by = now + limits.proxy_connect_timeout
        self.retimed.append(dial)
        self._outbox.append(
            Connect(
                socket_id=socket_id,
                address=dial.address,
                port=proxy.origin.port,
                tls=tls,
                tunnel=connect_request(proxy, dial.target, origin.port),
                proxy_tls=proxy.origin.host if proxy.origin.scheme == "https" else None,
            )
        )
        return None
