"""sansmcp: a sans-I/O Model Context Protocol client for possibly hostile servers.

The client lives in the runtime adapters: ``sansmcp.io_adapters.asyncio.Client`` and
``sansmcp.io_adapters.trio.Client`` (the same API on both).
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
    "Limits",
    "McpError",
    "MemoryTokenStore",
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
