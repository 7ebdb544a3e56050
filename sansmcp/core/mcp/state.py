"""The machine's phase (a transition table) and the snapshot of its protocol state.

:class:`Phase` is what the machine is doing: nothing (``IDLE``), an operation
(``RUNNING``) or a close (``CLOSING``).  It moves only along
:data:`PHASE_TRANSITIONS`; :func:`check_phase` raises ``LocalProtocolError`` for a
move the table does not list (a bug in the machine, never the server's doing).
:class:`MachineState` is what ``McpMachine.state`` returns: the protocol state on
one screen.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import LocalProtocolError
from .session import Era

__all__ = ["PHASE_TRANSITIONS", "MachineState", "Phase", "check_phase"]


class Phase(enum.Enum):
    IDLE = "idle"  # no operation runs
    RUNNING = "running"  # an operation runs: its terminal event is not out yet
    CLOSING = "closing"  # close(): answers already sent finish, a legacy DELETE, Closed

    # Members are singletons compared by identity: hash them so too (C speed; Enum's own
    # __hash__ is a Python function, run on every table lookup).
    __hash__ = object.__hash__


#: phase -> the phases it may move to.  close() ends a running operation first.
PHASE_TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.IDLE: frozenset({Phase.RUNNING, Phase.CLOSING}),
    Phase.RUNNING: frozenset({Phase.IDLE}),
    Phase.CLOSING: frozenset({Phase.IDLE}),
}


def check_phase(current: Phase, new: Phase) -> Phase:
    """``new`` if the table lets ``current`` move there; else ``LocalProtocolError``."""
    if new not in PHASE_TRANSITIONS[current]:
        raise LocalProtocolError(f"the machine cannot move from {current.name} to {new.name}")
    return new


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineState:
    """The protocol state of one machine at one moment (see :attr:`McpMachine.state`).

    ``exchanges`` counts the exchanges in flight by role (``"op"``, ``"side"``,
    ``"drain"``, ``"listen"``; roles without one are left out); ``op_bound`` and
    ``op_deadline`` are the running operation's ``Limits`` name and absolute deadline;
    ``exhausted`` names the connection budget that was spent, if one was.
    """

    phase: Phase
    era: Era
    protocol_version: str | None
    session_id: bool
    op_bound: str | None
    op_deadline: float | None
    exchanges: tuple[tuple[str, int], ...]
    held_answer: bool
    listening: bool
    listen_opens: int
    pending_asks: int
    bytes_received: int
    responses_received: int
    exhausted: str | None
