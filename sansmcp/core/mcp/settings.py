"""What one ``Conn``'s machine is configured with, and the one check of its versions.

``config.py`` (the public input) builds a :class:`ConnSettings` from the caller's
``Config``; nothing in this package imports ``config``.  :func:`usable_versions` is
the single place that decides whether a list of protocol versions names one sansmcp
speaks: ``conn_settings`` calls it before any I/O and :class:`McpMachine` calls it
for settings built by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import CallerError
from ..http import Headers
from ..messages import SUPPORTED_VERSIONS
from ..url import Endpoint
from ..version import __version__

__all__ = ["ConnSettings", "usable_versions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnSettings:
    """What one ``Conn`` is configured with (from the caller's ``Config`` and ``Client``).

    ``capabilities`` is None when the embedder cannot answer input requests: then
    nothing is declared and every ask is refused.  ``tool_schemas`` maps a tool name to
    its input schema (parsed JSON) so ``Mcp-Param-*`` headers can be sent without a
    listing.  ``reissue_calls`` opts in to re-issuing a ``tools/call`` whose modern
    stream broke, even for a tool not marked idempotent.  ``output_schemas`` maps a
    tool name to its output schema (parsed JSON), used when the listing gives none;
    ``validate_structured_content`` turns the check of ``structuredContent`` off.
    ``notifications``: the
    embedder takes server notifications; ``log_level`` asks for log messages at or above
    it; ``observe``: telemetry is on (requests are reported); ``tasks``: modern requests
    declare the tasks extension and a call the server runs as a task is polled to its end
    (2025-11-25: a tool that may run as a task is asked to, when the server can).
    """

    endpoint: Endpoint
    bearer_token: str | None = None
    headers: Headers = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    tool_schemas: Mapping[str, Any] = field(default_factory=dict)
    protocol_versions: tuple[str, ...] = SUPPORTED_VERSIONS
    client_info: Mapping[str, Any] = field(
        default_factory=lambda: {"name": "sansmcp", "version": __version__}
    )
    capabilities: Mapping[str, Any] | None = None
    user_agent: str = f"sansmcp/{__version__}"
    era_hint: str | None = None
    reissue_calls: bool = False
    output_schemas: Mapping[str, Any] = field(default_factory=dict)
    validate_structured_content: bool = True
    notifications: bool = False
    log_level: str | None = None
    observe: bool = False
    tasks: bool = False


def usable_versions(versions: Sequence[str]) -> tuple[str, ...]:
    """The versions of ``versions`` sansmcp speaks, in the caller's order.

    Raises ``CallerError`` when there are none.
    """
    usable = tuple(v for v in versions if v in SUPPORTED_VERSIONS)
    if not usable:
        raise CallerError(
            f"protocol_versions {tuple(versions)!r} names no version sansmcp speaks "
            f"({', '.join(SUPPORTED_VERSIONS)})"
        )
    return usable
