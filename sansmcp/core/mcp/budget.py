"""Every per-connection count: response bytes, responses, and the budget once spent.

Every response byte the driver reports (head blocks as counted on the wire, bodies,
trailers, 1xx heads) is charged to ``Limits.max_response_bytes`` as it arrives, and
every final head to ``Limits.max_responses``.  An overrun raises ``ConnectionFailed``
(``cause="budget"``); the machine then records it in :attr:`Budget.exhausted` and
every later operation fails at once with the same error.  One message's own budget
(its decoded size and value count) is :func:`~sansmcp.core.messages.parse_message`'s.
"""

from __future__ import annotations

from ..errors import ConnectionFailed, McpError, budget_exceeded
from ..limits import Limits

__all__ = ["CONN_BUDGETS", "Budget"]

#: Budgets of the whole connection: once spent, every later operation fails at once.
CONN_BUDGETS = frozenset({"max_response_bytes", "max_responses"})


class Budget:
    """The counts of one connection against its ``Limits``."""

    __slots__ = ("bytes_received", "exhausted", "limits", "responses_received")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.bytes_received = 0
        self.responses_received = 0
        self.exhausted: McpError | None = None

    def charge(self, nbytes: int) -> None:
        """Count ``nbytes`` response bytes; ``ConnectionFailed`` past the budget."""
        self.bytes_received += nbytes
        limit = self.limits.max_response_bytes
        if self.bytes_received > limit:
            raise budget_exceeded(
                f"the server sent more than {limit:,} response bytes on this connection "
                "(Limits.max_response_bytes)",
                "max_response_bytes",
                limit,
                self.bytes_received,
            )

    def count_response(self, raw_size: int) -> None:
        """Count one final head of ``raw_size`` bytes."""
        self.bytes_received += raw_size
        if self.bytes_received > self.limits.max_response_bytes:
            self.charge(0)  # raises: the byte budget is spent
        self.responses_received += 1
        limit = self.limits.max_responses
        if self.responses_received > limit:
            raise budget_exceeded(
                f"the server sent more than {limit} HTTP responses on this connection "
                "(Limits.max_responses)",
                "max_responses",
                limit,
                self.responses_received,
            )

    def spent(self, error: McpError) -> bool:
        """Record ``error`` if it spent a budget of the whole connection; say so."""
        if isinstance(error, ConnectionFailed) and error.bound in CONN_BUDGETS:
            self.exhausted = error
            return True
        return False
