"""sansmcp: a sans-I/O Model Context Protocol client for possibly hostile servers.

The client lives in the runtime adapters: ``sansmcp.io_adapters.asyncio.Client``,
``sansmcp.io_adapters.trio.Client`` (the same API on both) and the blocking
``sansmcp.io_adapters.sync.Client``.  This package holds what they share: ``Config``,
``Limits``, the results, the notifications and the errors;
``__version__`` is this release's version (PEP 440).
"""

from __future__ import annotations

from .core import __version__
from .core.config import Config
from .core.errors import (
    CallerError,
    ConnectionFailed,
    McpError,
    ServerAnswered,
    Unauthorized,
    UsageError,
)
from .core.limits import Limits
from .core.mcp.notifications import LogMessage, Notification
from .core.net.egress import Egress
from .core.oauth.store import ClientRegistration, MemoryTokenStore, OAuth, Tokens, TokenStore
from .core.results import CallResult, Content
from .core.tools import SkippedTool, Tool

__all__ = [
    "CallResult",
    "CallerError",
    "ClientRegistration",
    "Config",
    "ConnectionFailed",
    "Content",
    "Egress",
    "Limits",
    "LogMessage",
    "McpError",
    "MemoryTokenStore",
    "Notification",
    "OAuth",
    "ServerAnswered",
    "SkippedTool",
    "TokenStore",
    "Tokens",
    "Tool",
    "Unauthorized",
    "UsageError",
    "__version__",
]
