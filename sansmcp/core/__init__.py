"""The pure, sans-I/O heart of sansmcp: state machines fed bytes, events and ``now``.

Nothing under this package opens a socket, reads a clock, sleeps or logs.

The face an embedder drives (what the runtime adapters in ``sansmcp.io_adapters`` use,
and what a new runtime would): one :class:`ClientDriver` per client, built with the
``Limits`` and the guard's settings; ``open(Config)`` a Conn, start its operations
(``connect``, ``list_tools``, ``call_tool``, ``close_conn``), execute the
:data:`Command`\\ s it emits -- :class:`Resolve`, :class:`Connect`, :class:`Write`,
:class:`CloseSocket` on sockets; :class:`Deliver` and :class:`Finished` in the caller's
task or thread -- and report back what happened (``resolved``, ``connected``,
``connect_failed`` with its :data:`DialPhase`, ``received``, ``eof``, ``handle_timer`` when
``next_deadline()`` passes).  One Conn's protocol alone is :class:`McpMachine`.
"""

from .commands import CloseSocket, Command, Connect, Deliver, Finished, Resolve, Write
from .config import Config
from .dialer import DialPhase
from .driver import ClientDriver, ConnView
from .errors import (
    CallerError,
    ConnectionFailed,
    McpError,
    ServerAnswered,
    Unauthorized,
    UsageError,
)
from .limits import Limits
from .mcp import McpMachine
from .version import __version__

Phase = DialPhase  # the name it had before (kept: the public API is unchanged)

__all__ = [
    "CallerError",
    "ClientDriver",
    "CloseSocket",
    "Command",
    "Config",
    "ConnView",
    "Connect",
    "ConnectionFailed",
    "Deliver",
    "DialPhase",
    "Finished",
    "Limits",
    "McpError",
    "McpMachine",
    "Phase",
    "Resolve",
    "ServerAnswered",
    "Unauthorized",
    "UsageError",
    "Write",
    "__version__",
]
