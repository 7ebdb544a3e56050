"""The driver's commands: what :class:`~sansmcp.core.driver.ClientDriver` asks its adapter to do.

An adapter executes each :data:`Command` it takes from ``ClientDriver.next_command``:
the I/O ones (:class:`Resolve`, :class:`Connect`, :class:`Write`, :class:`CloseSocket`)
on sockets, the caller's (:class:`Deliver`, :class:`Finished`) in the caller's task or
thread, a shared store's (:class:`StoreOp`) on the store.  This module owns their shapes only; when each is made is the driver's.

Commands made per request (``Write``, ``Finished``) are read-only by contract, not
``frozen`` (a frozen ``__init__`` costs about four times a plain one; see
:mod:`sansmcp.core.http`); they hash and compare by value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .errors import McpError
from .mcp import InputRequired, Observation, TaskReported
from .oauth.store import AuthorizationNeeded
from .results import CallResult
from .store import StoreCommand
from .tools import Tool

__all__ = [
    "CloseSocket",
    "Command",
    "Connect",
    "Deliver",
    "Finished",
    "Resolve",
    "StoreOp",
    "Write",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolve:
    """Resolve ``host`` (the resolver hook, else the system resolver); answer with
    ``resolved(dial_id, answer)`` -- the raw answer, untrusted -- or ``resolve_failed``."""

    dial_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Connect:
    """Open a TCP socket to the IP literal ``address`` (numeric semantics: ``inet_pton``,
    never a resolver), then, when ``tls`` is ``(server_hostname, alpn)``, the TLS
    handshake; answer with ``connected(socket_id, alpn=)`` or ``connect_failed``.

    With ``tunnel`` (an egress proxy's ``CONNECT`` request; never in a ``repr``: it may
    carry the proxy's credentials), after TCP: send it, then hand each read to
    ``tunnel_received(socket_id, data)`` (``b""`` at EOF) until it answers True (go on
    with TLS, if any, on the same socket) or False (close the socket, report nothing
    more); a socket error meanwhile is ``connect_failed`` in the ``"proxy"`` phase.
    With ``proxy_tls`` (an ``https://`` proxy: its server name), TLS with the proxy comes
    first (verified with the targets' trust, ALPN ``http/1.1``; a failure is the
    ``"proxy-tls"`` phase), the ``CONNECT`` inside it, the target's TLS inside that."""

    socket_id: int
    address: str
    port: int
    tls: tuple[str, tuple[str, ...]] | None
    tunnel: bytes | None = dataclasses.field(default=None, repr=False)
    proxy_tls: str | None = None


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class Write:
    socket_id: int
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class CloseSocket:
    """Abort the socket (or the resolve / connect in progress) ``socket_id``; stop its
    reader; report nothing more about it."""

    socket_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Deliver:
    """Show ``item`` to the embedder in the caller's task (an input request: call the
    input handler, bounded by ``deadline``, and ``answer`` it; an observation: hand it
    to its callback, or to telemetry; an authorization a person must make: call
    ``Config.oauth.authorize`` -- outside every deadline -- and pass its answer to
    ``authorized``)."""

    conn_id: int
    item: InputRequired | Observation | AuthorizationNeeded
    deadline: float  # math.inf when none


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class Finished:
    """The operation of ``conn_id`` ended: raise ``error``, or return ``value`` (the
    tools of a listing, a call's result, a task's report, None for connect and close)."""

    conn_id: int
    value: list[Tool] | CallResult | TaskReported | None = None
    error: McpError | None = dataclasses.field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreOp:
    """Perform ``command`` on the Client's shared store (``Client(store=...)``), bounded
    by ``Limits.store_timeout``; answer with ``store_answered(op_id, answer)`` -- a
    failure (an exception of the store included) as a ``StoreFailed`` answer."""

    op_id: int
    command: StoreCommand


Command = Resolve | Connect | Write | CloseSocket | Deliver | Finished | StoreOp
