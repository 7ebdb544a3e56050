"""``structuredContent`` against ``outputSchema``: compile once, check each result.

Theory of operation
-------------------
:func:`compile_output` compiles a tool's output schema (the compact JSON a
:class:`~sansmcp.core.tools.Tool` keeps, or the parsed value a caller gave in
``Config.output_schemas``) under ``Limits.max_validation_steps`` and
``Limits.max_validation_depth``; :func:`check_output` applies it to a complete,
non-error ``tools/call`` result under a fresh budget of the same size.  Both raise
only classified errors:

* a schema from the server that is malformed or refused (a remote ``$ref``, an
  unsupported ``$schema`` draft or keyword, a ``pattern`` outside the linear-time
  subset) -> ``ServerAnswered(reason="unusable_output_schema")``; the same from
  ``Config.output_schemas`` -> ``CallerError``;
* a result without ``structuredContent``, or one that does not conform ->
  ``ServerAnswered(reason="output_schema_mismatch")``, naming the first failing
  instance path (cut short) and keyword, never the value;
* a budget spent, compiling or checking ->
  ``ServerAnswered(reason="validation_budget")`` with ``bound`` and ``limit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import CallerError, ServerAnswered
from ..jsonvalue import decode_kept
from ..limits import Limits
from .budget import BudgetExhausted, DepthExceeded
from .validator import Schema, SchemaError, compile_schema

__all__ = ["check_output", "compile_output"]


def _shown(name: str) -> str:
    return repr(name if len(name) <= 64 else name[:64] + "...")


def _budget_error(name: str, what: str, exc: BudgetExhausted | DepthExceeded) -> ServerAnswered:
    bound = "max_validation_steps" if isinstance(exc, BudgetExhausted) else "max_validation_depth"
    return ServerAnswered(
        f"{what} for tool {_shown(name)} stopped: {exc} (Limits.{bound})",
        reason="validation_budget",
        bound=bound,
        limit=exc.limit,
    )


def compile_output(
    name: str, source: bytes | Mapping[str, Any], limits: Limits, *, from_config: bool
) -> Schema:
    """The compiled output schema of tool ``name`` (see the module docstring)."""
    raw = decode_kept(source) if isinstance(source, bytes) else source  # (msgspec)
    try:
        return compile_schema(
            raw, max_steps=limits.max_validation_steps, max_depth=limits.max_validation_depth
        )
    except SchemaError as exc:
        if from_config:
            raise CallerError(f"Config.output_schemas[{_shown(name)}] is unusable: {exc}") from None
        raise ServerAnswered(
            f"the outputSchema of tool {_shown(name)} is unusable: {exc}",
            reason="unusable_output_schema",
        ) from None
    except (BudgetExhausted, DepthExceeded) as exc:
        if from_config:
            raise CallerError(
                f"Config.output_schemas[{_shown(name)}] is too large to compile: {exc}"
            ) from None
        raise _budget_error(name, "compiling the outputSchema", exc) from None


def check_output(name: str, schema: Schema, result: Mapping[str, Any], limits: Limits) -> None:
    """Raise unless ``result["structuredContent"]`` conforms to ``schema``."""
    if "structuredContent" not in result:
        raise ServerAnswered(
            f"tool {_shown(name)} declares an outputSchema and its result has no structuredContent",
            reason="output_schema_mismatch",
        )
    try:
        mismatch = schema.validate(
            result["structuredContent"],
            max_steps=limits.max_validation_steps,
            max_depth=limits.max_validation_depth,
        )
    except (BudgetExhausted, DepthExceeded) as exc:
        raise _budget_error(name, "checking structuredContent", exc) from None
    if mismatch is not None:
        pointer = mismatch.pointer()
        where = f"at {pointer!r}" if pointer else "at the root"
        raise ServerAnswered(
            f"the structuredContent of tool {_shown(name)} does not conform to its "
            f"outputSchema: {where} it fails {mismatch.keyword!r}",
            reason="output_schema_mismatch",
        )
