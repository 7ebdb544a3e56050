"""What a caller configures, and its translation into a machine's settings.

``Config`` is the public, per-work-item description of an MCP endpoint;
:func:`conn_settings` checks it (``CallerError`` before any I/O) and combines it
with the ``Client``'s identity, capabilities and the pool's era hint.  Each field has one
checker, run in the order of the ``_CHECKS`` table (as ``Limits`` has one rule per field),
which returns what the settings keep of it; the first fault raises.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import CallerError
from .http import FIELD_VALUE_CONTROLS, FIELD_VALUE_EDGES, TOKEN_CHARS
from .jsonvalue import JsonError, dumps_compact
from .mcp.notifications import LOG_LEVELS, LogMessage, Notification
from .mcp.settings import ConnSettings, usable_versions
from .messages import SUPPORTED_VERSIONS
from .net.egress import Egress
from .oauth.store import OAuth
from .url import Endpoint, is_loopback_host, parse_endpoint

__all__ = ["Config", "SettingsMemo", "conn_settings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """One MCP endpoint as a work item reaches it.

    ``headers`` are added to every request (protocol headers cannot be overridden, and
    connection-specific ones -- ``Connection``, ``Keep-Alive``, ``Proxy-Connection``,
    ``Transfer-Encoding``, ``Upgrade``, ``TE`` -- are dropped on both wires: sansmcp manages
    the connection); an ``Authorization`` entry is sent as given (Basic, or any scheme)
    when neither ``bearer_token`` nor ``oauth`` is set -- beside either it is a
    ``CallerError``, and like a bearer token it is never sent over plain http except to
    loopback;
    ``meta`` adds ``_meta`` keys (e.g. ``traceparent``); ``tool_schemas`` maps a tool
    name to its input schema (a JSON object, as bytes or parsed) so ``Mcp-Param-*``
    headers go out without a listing; ``protocol_versions`` restricts and orders the
    revisions sansmcp may negotiate.  ``output_schemas`` maps a tool name to its output
    schema (as ``tool_schemas``), used when no listing of this Conn gives one; a
    ``structuredContent`` that does not conform to the known output schema raises
    ``ServerAnswered`` unless ``validate_structured_content`` is False.
    ``on_notification`` receives the server's notifications that are not progress (a
    ``LogMessage`` or a ``Notification``), in the caller's task; ``log_level`` (one of
    ``LOG_LEVELS``) asks for log messages at or above it (nothing is asked when it is None).
    ``oauth`` authorizes with OAuth 2.1 when the server answers 401 (or 403
    ``insufficient_scope``); without it those raise ``Unauthorized``.  ``tasks``
    declares the tasks extension (2026-07-28): a server may then run a call as a task,
    which ``call_tool`` polls to its end (``Limits.task_timeout`` and the poll bounds);
    with a 2025-11-25 server declaring ``tasks.requests.tools.call``, a tool whose
    ``execution.taskSupport`` is ``"optional"`` or ``"required"`` is called as a task
    (the ``task`` parameter), and a ``"required"`` one is listed (skipped otherwise).
    ``proxy`` and ``guard`` override the ``Client``'s egress proxy (an ``http://`` URL,
    optional ``user:password``; None: the Client's) and guard mode (``"local"`` or
    ``"proxy"``); ``egress`` widens or narrows the Client's guard for this work item
    (:class:`~sansmcp.core.net.egress.Egress`).  Every request of the work item --
    including OAuth's -- goes through the proxy, in ``CONNECT`` tunnels; ``proxy`` is
    not in the ``repr``.
    """

    url: str
    bearer_token: str | None = None
    headers: Mapping[str, str] | None = None
    meta: Mapping[str, Any] | None = None
    tool_schemas: Mapping[str, bytes | Mapping[str, Any]] | None = None
    protocol_versions: Sequence[str] | None = None
    reissue_calls: bool = False
    output_schemas: Mapping[str, bytes | Mapping[str, Any]] | None = None
    validate_structured_content: bool = True
    on_notification: Callable[[LogMessage | Notification], object] | None = None
    log_level: str | None = None
    oauth: OAuth | None = None
    tasks: bool = False
    proxy: str | None = field(default=None, repr=False)  # may hold the proxy's credentials
    guard: str | None = None
    egress: Egress | None = None


def _header_bytes(name: object, value: object) -> tuple[bytes, bytes]:
    if not isinstance(name, str) or not isinstance(value, str):
        raise CallerError(f"header {name!r}: names and values must be str")
    try:
        key = name.encode("ascii")
        encoded = value.encode("latin-1")
    except UnicodeEncodeError:
        raise CallerError(f"header {name!r} is not ASCII / Latin-1") from None
    if not key or key.translate(None, TOKEN_CHARS):
        raise CallerError(f"header name {name!r} is not an HTTP token")
    # RFC 9110 field-value, as the wire machines enforce it: no control but HTAB, and no
    # whitespace at either end (h11 refused " a" in the middle of connect otherwise)
    if encoded.translate(None, FIELD_VALUE_CONTROLS) != encoded:
        raise CallerError(f"header {name!r} has a control character in its value")
    if encoded and (encoded[0] in FIELD_VALUE_EDGES or encoded[-1] in FIELD_VALUE_EDGES):
        raise CallerError(f"header {name!r} has whitespace at the start or end of its value")
    return key.lower(), encoded


def _check_own_authorization(config: Config, endpoint: Endpoint) -> None:
    """An ``Authorization`` entry in ``Config.headers`` is sent as it is (Basic, or any
    scheme) when sansmcp sets none itself: never beside ``bearer_token`` or ``oauth``,
    and never over plain http except to loopback (a credential, as a bearer token is)."""
    for field_name in ("bearer_token", "oauth"):
        if getattr(config, field_name) is not None:
            raise CallerError(
                f"Config.headers has an Authorization entry and Config.{field_name} is set:"
                " give the credential one way"
            )
    if not _secure(endpoint):
        raise CallerError(
            "an Authorization header is never sent over plain http except to loopback; use https"
        )


def _secure(endpoint: Endpoint) -> bool:
    """Whether a credential may go to ``endpoint``: https, or plain http to loopback."""
    return endpoint.origin.scheme == "https" or is_loopback_host(endpoint.origin.host)


def _json_value(what: str, value: object) -> bytes:
    """``value`` encoded as strict JSON (it is sent): else ``CallerError``, now."""
    try:
        return dumps_compact(value)
    except JsonError as exc:
        raise CallerError(f"{what} cannot be sent as JSON: {exc}") from None


def json_snapshot(what: str, value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A Client-wide mapping (``client_info``, ``capabilities``) checked once, when the
    Client is made, and kept as our own copy: a caller mutating theirs later changes
    nothing sent, so the settings of a Config that cannot change may be reused
    (``ClientDriver.open``).  Not a mapping, or not strict JSON: ``CallerError``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise CallerError(f"{what} must be a mapping, not {type(value).__name__}")
    copy: dict[str, Any] = json.loads(_json_value(what, dict(value)))
    return copy


def _schema_object(what: str, name: str, schema: Any) -> Mapping[str, Any]:
    """A schema given as JSON bytes or parsed, as a mapping: else ``CallerError``."""
    if isinstance(schema, bytes | bytearray):
        try:
            schema = json.loads(schema)
        except (ValueError, RecursionError):  # RecursionError: nested too deeply
            raise CallerError(f"the {what} for tool {name!r} is not JSON") from None
    if not isinstance(schema, Mapping):
        raise CallerError(f"the {what} for tool {name!r} is not a JSON object")
    return schema


# ------------------------------------------------------------------ the checks
# One checker per field of Config (and the Client's client_info and capabilities), each
# given the field's name, its value and the endpoint, returning what the settings keep of
# it or raising CallerError.  _CHECKS runs them in its order; the first fault raises.


def _bearer_token(_: str, token: Any, config: Config, endpoint: Endpoint) -> str | None:
    if token is None:
        return None
    if not isinstance(token, str):
        raise CallerError(f"the bearer token must be a str, not {type(token).__name__}")
    if not _secure(endpoint):
        raise CallerError(
            "a bearer token is never sent over plain http except to loopback; use https"
        )
    if not token or any(not 0x20 < ord(c) < 0x7F for c in token):
        raise CallerError("the bearer token must be non-empty visible ASCII")
    return token


def _oauth(_: str, oauth: Any, config: Config, endpoint: Endpoint) -> OAuth | None:
    if oauth is not None and not isinstance(oauth, OAuth):
        raise CallerError(f"Config.oauth must be an OAuth, not {type(oauth).__name__}")
    if oauth is not None and not _secure(endpoint):
        raise CallerError("OAuth tokens are never sent over plain http except to loopback")
    return oauth


def _mapping(name: str, value: Any, config: Config, endpoint: Endpoint) -> Mapping[str, Any]:
    """A mapping field's shape (None reads as empty), before any field's contents."""
    if value is not None and not isinstance(value, Mapping):
        raise CallerError(f"Config.{name} must be a mapping, not {type(value).__name__}")
    return value or {}


def _headers(
    _: str, headers: Mapping[str, str], config: Config, endpoint: Endpoint
) -> tuple[tuple[bytes, bytes], ...]:
    kept = tuple(_header_bytes(k, v) for k, v in headers.items())
    if any(name == b"authorization" for name, _ in kept):
        _check_own_authorization(config, endpoint)
    return kept


def _meta(name: str, meta: Mapping[str, Any] | None, config: Config, endpoint: Endpoint) -> Any:
    kept = dict(meta or {})
    _json_value(f"Config.{name}", kept)
    return kept


def _client_json(name: str, value: Any, config: Config, endpoint: Endpoint) -> Any:
    _json_value(name, value)  # (the driver passes its checked copies)
    return value


def _tool_schemas(
    _: str, schemas: Mapping[str, Any], config: Config, endpoint: Endpoint
) -> dict[str, Any]:
    return {name: _schema_object("schema", name, schema) for name, schema in schemas.items()}


def _output_schemas(
    _: str, given: Mapping[str, Any], config: Config, endpoint: Endpoint
) -> dict[str, Any]:
    """Each a JSON object (bytes or parsed), by tool name, as plain dicts and lists (what
    the validator reads; compiled when first used)."""
    schemas: dict[str, Any] = {}
    for name, schema in given.items():
        parsed = _schema_object("output schema", name, schema)
        try:
            schemas[name] = json.loads(dumps_compact(parsed))
        except JsonError as exc:
            raise CallerError(f"the output schema for tool {name!r} is not JSON: {exc}") from None
    return schemas


def _a_bool(name: str, value: Any, config: Config, endpoint: Endpoint) -> bool:
    if not isinstance(value, bool):
        raise CallerError(f"Config.{name} must be a bool")
    return value


def _protocol_versions(
    _: str, versions: Sequence[str] | None, config: Config, endpoint: Endpoint
) -> tuple[str, ...]:
    kept = tuple(versions or SUPPORTED_VERSIONS)
    usable_versions(kept)  # CallerError when it names none sansmcp speaks
    return kept


def _callback(name: str, value: Any, config: Config, endpoint: Endpoint) -> Any:
    if value is not None and not callable(value):
        raise CallerError(f"Config.{name} must be callable")
    return value


def _log_level(name: str, level: Any, config: Config, endpoint: Endpoint) -> str | None:
    if level is not None and level not in LOG_LEVELS:
        raise CallerError(f"Config.{name} {level!r} is not a log level ({', '.join(LOG_LEVELS)})")
    return level  # type: ignore[no-any-return]


_Check = Callable[[str, Any, Config, Endpoint], Any]

# (what is checked, its checker), in checking order.  The three mappings' shapes come
# before any of their contents; a field without a row (reissue_calls) is kept as given.
_CHECKS: tuple[tuple[str, _Check], ...] = (
    ("bearer_token", _bearer_token),
    ("oauth", _oauth),
    ("headers", _mapping),
    ("tool_schemas", _mapping),
    ("output_schemas", _mapping),
    ("headers", _headers),
    ("meta", _meta),
    ("client_info", _client_json),
    ("capabilities", _client_json),
    ("tool_schemas", _tool_schemas),
    ("output_schemas", _output_schemas),
    ("validate_structured_content", _a_bool),
    ("tasks", _a_bool),
    ("protocol_versions", _protocol_versions),
    ("on_notification", _callback),
    ("log_level", _log_level),
)
_FIELDS = tuple(field.name for field in fields(Config))


def conn_settings(
    config: Config,
    *,
    client_info: Mapping[str, Any] | None,
    capabilities: Mapping[str, Any] | None,
    era_hint: str | None,
    observe: bool = False,
) -> ConnSettings:
    """Check ``config`` and build the machine's settings (``CallerError`` if unusable):
    each field by its checker in ``_CHECKS``, in order."""
    endpoint = parse_endpoint(config.url)
    kept = {name: getattr(config, name) for name in _FIELDS}
    kept["client_info"], kept["capabilities"] = client_info, capabilities
    for name, check in _CHECKS:
        kept[name] = check(name, kept[name], config, endpoint)
    extra: dict[str, Any] = {}
    if client_info is not None:
        extra["client_info"] = client_info
    return ConnSettings(
        endpoint=endpoint,
        bearer_token=kept["bearer_token"],
        headers=kept["headers"],
        meta=kept["meta"],
        tool_schemas=kept["tool_schemas"],
        protocol_versions=kept["protocol_versions"],
        capabilities=capabilities,
        era_hint=era_hint,
        reissue_calls=config.reissue_calls,
        output_schemas=kept["output_schemas"],
        validate_structured_content=kept["validate_structured_content"],
        notifications=kept["on_notification"] is not None,
        log_level=kept["log_level"],
        observe=observe,
        tasks=kept["tasks"],
        **extra,
    )


class SettingsMemo:
    """A driver's :func:`conn_settings`, checked once per ``Config`` object: the last
    ``Config`` opened, when nothing in it can change (:func:`_immutable`), with its
    settings and those settings under each era hint the pool gave."""

    __slots__ = ("_capabilities", "_client_info", "_memo", "_observe")

    def __init__(
        self,
        *,
        client_info: Mapping[str, Any] | None,
        capabilities: Mapping[str, Any] | None,
        observe: bool,
    ) -> None:
        self._client_info = client_info
        self._capabilities = capabilities
        self._observe = observe
        self._memo: tuple[Config, ConnSettings, dict[str, ConnSettings]] | None = None

    def settings(self, config: Config, era_hint: Callable[[str], str | None]) -> ConnSettings:
        """``config``'s settings (``CallerError`` when unusable), under the era hint
        ``era_hint(url)`` gives for its endpoint."""
        memo = self._memo
        if memo is not None and memo[0] is config:
            settings = memo[1]
        else:
            settings = conn_settings(
                config,
                client_info=self._client_info,
                capabilities=self._capabilities,
                era_hint=None,
                observe=self._observe,
            )
            memo = (config, settings, {}) if _immutable(config) else None
            self._memo = memo
        hint = era_hint(settings.endpoint.url)
        if hint is None:
            return settings
        hinted = None if memo is None else memo[2].get(hint)
        if hinted is None:
            hinted = dataclasses.replace(settings, era_hint=hint)
            if memo is not None:
                memo[2][hint] = hinted
        return hinted


def _immutable(config: Config) -> bool:
    """Nothing ``conn_settings`` reads of ``config`` can change after it was checked: a
    plain ``Config`` (frozen) without a mapping, a list or an OAuth object in it (the
    caller could mutate those in place), so its settings may be reused as they are."""
    return (
        type(config) is Config
        and config.headers is None
        and config.meta is None
        and config.tool_schemas is None
        and config.output_schemas is None
        and config.oauth is None
        and (config.protocol_versions is None or type(config.protocol_versions) is tuple)
    )
