"""Building every request the machine sends, and its headers.

One builder, :meth:`Requests.http`, makes every ``HttpRequest``; the others say what
goes into it:

* modern requests (2026-07-28): ``POST`` with ``Mcp-Protocol-Version``,
  ``Mcp-Method`` (and ``Mcp-Name`` / ``Mcp-Param-*`` the caller passes as ``extra``),
  the version and client identity in ``_meta``, no session;
* legacy requests: ``POST`` (JSON-RPC), ``GET`` (a stream, with ``Last-Event-ID`` to
  resume) or ``DELETE`` (end the session), with the negotiated version (not for
  2025-03-26, the batch revision) and the session id once initialized.

Headers the caller configured are kept, except names in :data:`MACHINE_HEADERS`, which
the machine (or the wire) sets itself.  The static headers and each version's
``_meta`` are encoded once per connection; what varies per request -- a progress token,
the operation's trace context (:attr:`Requests.op_meta`) -- is spliced in after it, and
only when present.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..http import CONNECTION_FIELDS, HttpRequest
from ..jsonvalue import dumps_compact
from ..messages import BATCH_VERSION, build_body
from .notifications import META_LOG_LEVEL
from .session import Era, Session
from .settings import ConnSettings
from .taskwire import declare_extension

__all__ = [
    "MACHINE_HEADERS",
    "META_CAPABILITIES",
    "META_CLIENT_INFO",
    "META_VERSION",
    "TRACE_KEYS",
    "Requests",
]

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"

#: Header names the machine (or the wire under it) sets itself, and the connection-specific
#: ones (the wire manages the connection; HTTP/2 forbids them): a caller's custom header of
#: such a name is dropped, on both wires alike.  (``Authorization`` is not one: the caller's
#: own is sent when sansmcp sets none -- ``conn_settings`` refuses it beside a bearer token
#: or OAuth.)
MACHINE_HEADERS = CONNECTION_FIELDS | {
    b"accept",
    b"content-length",
    b"content-type",
    b"host",
    b"last-event-id",
    b"mcp-method",
    b"mcp-name",
    b"mcp-protocol-version",
    b"mcp-session-id",
    b"te",
}

TRACE_KEYS = frozenset({"traceparent", "tracestate", "baggage"})  # W3C trace context

_POST = b"POST"
_LEGACY: Final = Era.LEGACY  # a module constant: Enum.MEMBER lookups are slow on 3.11
_GET = b"GET"


class Requests:
    """The request builder of one connection (reads the session when it builds)."""

    __slots__ = (
        "_authority",
        "_meta_cache",
        "_scheme",
        "_session",
        "_static",
        "_target",
        "op_meta",
        "settings",
    )

    def __init__(self, settings: ConnSettings, session: Session) -> None:
        self.settings = settings
        self._session = session
        endpoint = settings.endpoint
        self._scheme = endpoint.origin.scheme.encode()
        self._authority = endpoint.authority
        self._target = endpoint.target
        self._static: list[tuple[bytes, bytes]] | None = None
        self._meta_cache: dict[str, bytes] = {}
        # the operation's extra ``_meta`` (trace context; :meth:`use_trace`)
        self.op_meta: Mapping[str, Any] | None = None

    def http(self, method: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> HttpRequest:
        """The one place an ``HttpRequest`` to the endpoint is made."""
        return HttpRequest(
            method=method,
            scheme=self._scheme,
            authority=self._authority,
            target=self._target,
            headers=tuple(headers),
            body=body,
        )

    def use_settings(self, settings: ConnSettings) -> None:
        """The settings changed (a new bearer token): the headers are built again."""
        self.settings = settings
        self._static = None

    def use_trace(self, meta: Mapping[str, str] | None) -> None:
        """The operation's requests carry ``meta``'s trace context (:data:`TRACE_KEYS`) in
        ``_meta``, unless ``Config.meta`` carries a ``traceparent`` of its own, which wins.
        Any other key of the embedder's carrier (``progressToken``, a protocol key, one
        ``Config.meta`` has) is dropped: it would duplicate or forge one of ours.  None:
        the operation ended, its trace context goes."""
        own = self.settings.meta
        kept = None
        if meta is not None and "traceparent" not in own:
            kept = {k: v for k, v in meta.items() if k in TRACE_KEYS and k not in own} or None
        self.op_meta = kept

    def base_headers(self) -> list[tuple[bytes, bytes]]:
        """Accept and Content-Type first (requests edit those two in place), then the rest."""
        if self._static is None:
            settings = self.settings
            headers = [
                (b"accept", b"application/json, text/event-stream"),
                (b"content-type", b"application/json"),
            ]
            custom = [
                (k.lower(), v) for k, v in settings.headers if k.lower() not in MACHINE_HEADERS
            ]
            if not any(k == b"user-agent" for k, _ in custom):
                headers.append((b"user-agent", settings.user_agent.encode()))
            token = settings.bearer_token
            if token is not None:
                headers.append((b"authorization", b"Bearer " + token.encode()))
            headers.extend(custom)
            self._static = headers
        return list(self._static)

    def capabilities(self) -> Mapping[str, Any]:
        return self.settings.capabilities or {}

    def meta_json(self, version: str) -> bytes:
        """``_meta`` of every modern request at ``version``, encoded once."""
        encoded = self._meta_cache.get(version)
        if encoded is None:
            meta = {
                META_VERSION: version,
                META_CLIENT_INFO: self.settings.client_info,
                META_CAPABILITIES: (
                    declare_extension(self.capabilities())
                    if self.settings.tasks
                    else self.capabilities()
                ),
                **self.settings.meta,
            }
            if self.settings.log_level is not None:
                meta[META_LOG_LEVEL] = self.settings.log_level
            encoded = self._meta_cache[version] = dumps_compact(meta)
        return encoded

    def rpc(
        self,
        rpc_id: int,
        method: str,
        params: Mapping[str, Any],
        arguments: bytes | None,
        extra: Sequence[tuple[bytes, bytes]],
        token: int | None = None,
    ) -> HttpRequest:
        """A JSON-RPC request in the session's era (``token``: its progress token)."""
        if self._session.modern:
            return self.modern(
                rpc_id, method, params, arguments=arguments, extra=extra, token=token
            )
        return self.legacy_rpc(rpc_id, method, params, arguments=arguments, token=token)

    def _extra_meta(self, token: int | None) -> dict[str, Any]:
        extra = dict(self.op_meta or {})
        if token is not None:
            extra["progressToken"] = token
        return extra

    def modern(
        self,
        rpc_id: int,
        method: str,
        params: Mapping[str, Any],
        *,
        arguments: bytes | None = None,
        extra: Sequence[tuple[bytes, bytes]] = (),
        token: int | None = None,
    ) -> HttpRequest:
        session = self._session
        version = session.protocol_version or session.probe_version
        meta = self.meta_json(version)
        if token is not None or self.op_meta:
            # the cached object, with this request's keys appended (it is never empty)
            meta = meta[:-1] + b"," + dumps_compact(self._extra_meta(token))[1:]
        body = build_body(rpc_id, method, params, arguments=arguments, meta=meta)
        headers = self.base_headers()
        headers.append((b"mcp-protocol-version", version.encode()))
        headers.append((b"mcp-method", method.encode()))
        headers.extend(extra)
        return self.http(_POST, headers, body)

    def legacy(
        self, method: bytes, body: bytes, extra: Sequence[tuple[bytes, bytes]] = ()
    ) -> HttpRequest:
        """A legacy-era request: POST (JSON-RPC), GET (stream resumption) or DELETE."""
        headers = self.base_headers()
        if method == _GET:
            headers[0] = (b"accept", b"text/event-stream")
        if method != _POST:
            del headers[1]  # no body, no content type
        session = self._session
        if session.era is _LEGACY:
            assert session.protocol_version is not None
            if session.protocol_version != BATCH_VERSION:
                headers.append((b"mcp-protocol-version", session.protocol_version.encode()))
            if session.session_id is not None:
                headers.append((b"mcp-session-id", session.session_id))
        headers.extend(extra)
        return self.http(method, headers, body)

    def legacy_rpc(
        self,
        rpc_id: int | None,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        arguments: bytes | None = None,
        token: int | None = None,
    ) -> HttpRequest:
        if params is not None and (self.settings.meta or self.op_meta or token is not None):
            params = {"_meta": {**self.settings.meta, **self._extra_meta(token)}, **params}
        return self.legacy(_POST, build_body(rpc_id, method, params, arguments=arguments))

    def answer(self, server_id: Any, *, result: Any = None, error: Any = None) -> HttpRequest:
        """Our answer to a server's request (``error`` when not None, else ``result``)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": server_id}
        if error is not None:
            message["error"] = error
        else:
            message["result"] = result
        return self.legacy(_POST, dumps_compact(message))
