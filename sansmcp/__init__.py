"""sansmcp: a sans-I/O Model Context Protocol client for possibly hostile servers."""

from __future__ import annotations

from .core.errors import CallerError, ConnectionFailed, McpError, ServerAnswered, Unauthorized
from .core.limits import Limits

__version__ = "0.1.0"

__all__ = [
    "CallerError",
    "ConnectionFailed",
    "Limits",
    "McpError",
    "ServerAnswered",
    "Unauthorized",
    "__version__",
]
