"""OAuth 2.1 authorization, sans I/O: the embedder's configuration and store (``store``),
the flow as a generator script (``flow``) over its steps (``fetching``, ``discovery``,
``registration``, ``grants``) and the authorizer that runs it (``machine``)."""

from __future__ import annotations

from .store import (
    AuthorizationNeeded,
    ClientRegistration,
    MemoryTokenStore,
    OAuth,
    Tokens,
    TokenStore,
)

__all__ = [
    "AuthorizationNeeded",
    "ClientRegistration",
    "MemoryTokenStore",
    "OAuth",
    "TokenStore",
    "Tokens",
]
