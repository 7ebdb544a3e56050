"""What a runtime adapter may read of one Conn: :class:`ConnView`.

The driver keeps one view per Conn and hands it to the adapter at ``open``; the adapter
reads the Conn's state only through it (never the machine's fields), so what an adapter
depends on is named here, and the machine behind it may change shape freely.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .mcp import McpMachine
from .tools import SkippedTool

if TYPE_CHECKING:
    from .oauth.machine import OAuthMachine  # only for a Config.oauth Conn

__all__ = ["ConnView"]


class ConnView:
    """What a runtime's ``Conn`` shows of its state (runtime-free; the driver keeps it):
    the machine's negotiated figures, whether the Conn is closed or busy, what the last
    listing skipped, and the embedder's ``Config.on_notification`` (held for the adapter,
    which calls it; the driver never does); ``auth``, the authorizer in front of the
    machine of a ``Config.oauth`` Conn (None for others).  ``machine`` is the driver's,
    for inspection."""

    __slots__ = (
        "auth",
        "closed",
        "conn_id",
        "machine",
        "on_notification",
        "skipped_count",
        "skipped_tools",
    )

    def __init__(self, conn_id: int, machine: McpMachine, auth: OAuthMachine | None = None) -> None:
        self.conn_id = conn_id
        self.machine = machine
        self.auth = auth
        self.closed = False
        self.on_notification: Callable[[Any], object] | None = None
        self.skipped_tools: list[SkippedTool] = []
        # every entry the last listing skipped; ``skipped_tools`` records the first
        # ``Limits.max_recorded_skips`` of them
        self.skipped_count = 0

    @property
    def protocol_version(self) -> str | None:
        return self.machine.protocol_version

    @property
    def ttl_ms(self) -> int:
        return self.machine.ttl_ms

    @property
    def cache_scope(self) -> str | None:
        return self.machine.cache_scope

    @property
    def tools_from_cache(self) -> bool:
        return self.machine.tools_from_cache

    @property
    def notifications_dropped(self) -> int:
        return self.machine.notifications_dropped

    @property
    def busy(self) -> bool:
        """An operation runs on the Conn."""
        return self.machine.busy

    def authorization_step(self) -> Callable[[str], Any] | None:
        """``Config.oauth.authorize`` of this Conn (only an OAuth Conn is asked)."""
        auth = self.auth
        assert auth is not None  # the only Conn that asks this
        return auth.oauth.authorize
