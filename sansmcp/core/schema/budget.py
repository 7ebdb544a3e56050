"""The step budget of one validation (or one compilation), and its exhaustion.

Every unit of work the validator does -- a subschema applied to a value, a keyword
checked, a value compared, a regular-expression thread advanced by one character --
spends one step.  When ``Limits.max_validation_steps`` are spent the work stops with
:class:`BudgetExhausted`; nesting past ``Limits.max_validation_depth`` stops it with
:class:`DepthExceeded`.  Both are caught by the caller and become
``ServerAnswered(reason="validation_budget")``.
"""

from __future__ import annotations

__all__ = ["Budget", "BudgetExhausted", "DepthExceeded"]


class BudgetExhausted(Exception):
    """The step budget is spent (``limit`` steps)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit:,} steps")
        self.limit = limit


class DepthExceeded(Exception):
    """Schemas applied inside one another past ``limit`` levels."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"nested deeper than {limit:,} levels")
        self.limit = limit


class Budget:
    """Steps left; :meth:`spend` raises :class:`BudgetExhausted` once they run out."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise BudgetExhausted(self.limit)

    @property
    def spent(self) -> int:
        return self.limit - self.left
