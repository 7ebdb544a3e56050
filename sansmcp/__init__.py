"""sansmcp: a sans-I/O Model Context Protocol client for possibly hostile servers."""

from __future__ import annotations

from .core.errors import CallerError, ConnectionFailed, McpError, ServerAnswered, Unauthorized
from .core.limits import Limits

from .core import __version__

__all__ = [
    "CallerError",
    "ConnectionFailed",
    "Limits",
    "McpError",
    "ServerAnswered",
    "Unauthorized",
    "__version__",
]
