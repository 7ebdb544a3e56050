"""The session: which era the connection speaks, at which version, in which session.

The era moves along a table (:data:`ERA_TRANSITIONS`); a move it does not list is a
``LocalProtocolError`` (a bug in the machine, never the server's doing):

* ``UNKNOWN`` -- negotiating: a modern probe (``server/discover``) may be in flight;
* ``MODERN`` -- 2026-07-28 and later: every request carries its version, no session;
* ``INITIALIZING`` -- a legacy ``initialize`` is in flight (no version header yet);
* ``LEGACY`` -- an initialized legacy session (``Mcp-Session-Id`` when the server set one).

Every negotiation starts from ``UNKNOWN``; a legacy session re-initializes from
``LEGACY`` when the server expires it.
"""

from __future__ import annotations

import enum
from typing import Final

from ..errors import LocalProtocolError
from ..messages import MODERN_VERSION

__all__ = ["ERA_TRANSITIONS", "Era", "Session"]


class Era(enum.Enum):
    UNKNOWN = "unknown"  # probing
    MODERN = "modern"
    INITIALIZING = "initializing"  # legacy initialize in flight: no version header yet
    LEGACY = "legacy"

    # Members are singletons compared by identity: hash them so too (C speed; Enum's own
    # __hash__ is a Python function, run on every table lookup).
    __hash__ = object.__hash__


#: era -> the eras it may move to.
ERA_TRANSITIONS: dict[Era, frozenset[Era]] = {
    Era.UNKNOWN: frozenset({Era.UNKNOWN, Era.MODERN, Era.INITIALIZING}),
    Era.MODERN: frozenset({Era.UNKNOWN}),
    Era.INITIALIZING: frozenset({Era.UNKNOWN, Era.INITIALIZING, Era.LEGACY}),
    Era.LEGACY: frozenset({Era.UNKNOWN, Era.INITIALIZING}),
}


# module constants: on Python 3.11 each ``Era.MEMBER`` lookup runs EnumType.__getattr__'s hook
_MODERN: Final = Era.MODERN
_UNKNOWN: Final = Era.UNKNOWN


class Session:
    """The protocol state one connection negotiated.

    ``probe_version`` is the version a modern probe is sent at before one is chosen;
    ``hinted`` is True while an era hint is trusted but not yet confirmed by an answer.
    """

    __slots__ = ("era", "hinted", "probe_version", "protocol_version", "server_tasks", "session_id")

    def __init__(self) -> None:
        self.era = Era.UNKNOWN
        self.protocol_version: str | None = None
        self.session_id: bytes | None = None
        self.probe_version = MODERN_VERSION
        self.hinted = False
        # the 2025-11-25 server runs tools/call as a task on asking (its capability)
        self.server_tasks = False

    @property
    def modern(self) -> bool:
        """Requests are built the modern way (the era is modern or still being probed)."""
        era = self.era
        return era is _MODERN or era is _UNKNOWN

    def move(self, era: Era) -> None:
        """Enter ``era``; ``LocalProtocolError`` if the table has no such move."""
        if era not in ERA_TRANSITIONS[self.era]:
            raise LocalProtocolError(f"the session cannot move from {self.era.name} to {era.name}")
        self.era = era

    def reset(self) -> None:
        """A new negotiation: nothing is known."""
        self.move(Era.UNKNOWN)
        self.protocol_version = None
        self.session_id = None
        self.hinted = False
        self.server_tasks = False

    def initializing(self) -> None:
        """A legacy ``initialize`` goes out: no session until its answer names one."""
        self.move(Era.INITIALIZING)
        self.session_id = None

    def modern_at(self, version: str) -> None:
        self.move(Era.MODERN)
        self.protocol_version = version

    def legacy_at(self, version: str, session_id: bytes | None) -> None:
        self.move(Era.LEGACY)
        self.protocol_version = version
        self.session_id = session_id
        self.server_tasks = False

    def ended(self) -> None:
        """We ended the legacy session (its ``DELETE`` is out): no id to send again."""
        self.session_id = None
