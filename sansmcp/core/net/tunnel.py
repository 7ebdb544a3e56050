"""The egress proxy: its URL, the ``CONNECT`` request, and the reading of its answer.

Theory of operation
-------------------
A dial through an HTTP proxy opens a TCP socket (TLS when the proxy URL is
``https://``) to the proxy, writes :func:`connect_request` -- ``CONNECT
host:port HTTP/1.1`` with ``Host`` and, when the proxy URL carries ``user:password``,
``Proxy-Authorization: Basic`` -- and feeds what the proxy answers to one
:class:`TunnelReply`.  Once it says :data:`ESTABLISHED`, the socket is the target's:
TLS with the target (its host name verified) and HTTP run end to end inside it,
so the proxy never sees a request, a body or a bearer token.

:class:`TunnelReply` holds the answer's head as the HTTP/1.1 wire does
(:mod:`sansmcp.core.wire.h1`): it counts the bytes of each head before parsing
any, and fails the dial (``cause="budget"``, ``bound="max_header_bytes"``) at byte
``max_header_bytes + 1``; a complete head goes to llhttp once, its status line
checked against h11's grammar first.  Every other fault is the proxy's
(``ConnectionFailed(cause="proxy")``): a refusal (any final status but 2xx:
``status``, and for 407 the ``Proxy-Authenticate`` challenge), a malformed head, a
2xx that announces a body (``Content-Length`` over 0, or ``Transfer-Encoding``),
bytes after the 2xx head (a proxy must not speak for the target), more than
``max_informational`` 1xx heads, and the end of the connection before the
answer.  The reader raises the failure; after one, it is spent.

:class:`Proxy` never shows its credentials: not in ``repr``, not in a message.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import ipaddress
import re
from dataclasses import dataclass

import httptools

from ..errors import CallerError, ConnectionFailed, budget_exceeded
from ..url import MAX_URL_BYTES, Origin, _split_authority
from ..wire.h1 import HeadFields

__all__ = ["ESTABLISHED", "Established", "Proxy", "TunnelReply", "connect_request", "parse_proxy"]

_MAX_SHOWN = 200  # characters of a proxy's text quoted in a message
_MAX_CHALLENGE = 1_000  # characters of a Proxy-Authenticate kept on the error
# A status line as h11 accepted it (what the HTTP/1.1 wire checks too).
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] [0-9]{3}(?:[\r\n]| [^\x00\r\n\x0b\x0c]*\r?\n)")
_HEAD_END = re.compile(rb"\n\r?\n")
_USERINFO_CHARS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=%:"
)


class Established(enum.Enum):
    """The tunnel is up: the socket now carries the target's bytes."""

    ESTABLISHED = enum.auto()


ESTABLISHED = Established.ESTABLISHED


@dataclass(frozen=True, slots=True, kw_only=True)
class Proxy:
    """An HTTP proxy (``http://`` or ``https://`` to the proxy itself), as parsed.

    ``authorization`` is the ``Proxy-Authorization`` value (``Basic ...``) or None; it
    takes part in equality (sockets are pooled per proxy *and* credential) and never in
    ``repr``.
    """

    origin: Origin
    authorization: bytes | None = dataclasses.field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The proxy's URL without its credentials."""
        origin = self.origin
        host = f"[{origin.host}]" if ":" in origin.host else origin.host
        return f"{origin.scheme}://{host}:{origin.port}"


def parse_proxy(url: object) -> Proxy:
    """``http[s]://[user:password@]host[:port][/]`` as a :class:`Proxy`; else ``CallerError``.

    The user and password are percent-decoded (UTF-8); the user may not hold ``:``.
    A path, a query or a fragment is refused: a proxy URL names a host and a port.
    Messages never quote the credentials.
    """
    if not isinstance(url, str):
        raise CallerError(f"the proxy URL must be a str, not {type(url).__name__}")
    if len(url.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
        raise CallerError(f"the proxy URL is over {MAX_URL_BYTES:,} bytes")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise CallerError("the proxy URL must start with http:// or https:// (the proxy itself)")
    userinfo, at, authority = rest.rpartition("@")
    if authority.endswith("/"):
        authority = authority[:-1]
    if any(char in authority for char in "/?#"):
        raise CallerError(
            "the proxy URL must be scheme://[user:password@]host[:port]: no path, query or fragment"
        )
    if any(not char.isascii() or not char.isprintable() or char == " " for char in authority):
        raise CallerError("the proxy URL's host has a character outside printable ASCII")
    authorization = _basic(userinfo) if at else None
    try:
        host, _, port = _split_authority(authority, scheme)
    except CallerError as exc:
        raise CallerError(f"the proxy URL is unusable: {exc}") from None
    return Proxy(origin=Origin(scheme=scheme, host=host, port=port), authorization=authorization)


def _basic(userinfo: str) -> bytes:
    """The ``Basic`` credential of ``user:password`` (percent-encoded in the URL)."""
    if not userinfo or set(userinfo) - _USERINFO_CHARS:
        raise CallerError(
            "the proxy URL's user:password has a character that must be percent-encoded"
        )
    user, colon, password = userinfo.partition(":")
    if not colon or not user:
        raise CallerError("the proxy URL's credentials must be user:password")
    decoded = []
    for part in (user, password):
        try:
            decoded.append(_percent_decode(part))
        except ValueError:
            raise CallerError(
                "the proxy URL's credentials have a bad percent-escape (or are not UTF-8)"
            ) from None
    if ":" in decoded[0] or any(not char.isprintable() for char in "".join(decoded)):
        raise CallerError("the proxy URL's user may not hold ':' nor either a control character")
    token = base64.b64encode(f"{decoded[0]}:{decoded[1]}".encode())
    return b"Basic " + token


def _percent_decode(text: str) -> str:
    out = bytearray()
    i = 0
    while i < len(text):
        char = text[i]
        if char == "%":
            pair = text[i + 1 : i + 3]
            if len(pair) != 2 or not all(c in "0123456789abcdefABCDEF" for c in pair):
                raise ValueError(text)
            out.append(int(pair, 16))
            i += 3
        else:
            out += char.encode("ascii")
            i += 1
    return out.decode("utf-8")


def authority(host: str, port: int) -> bytes:
    """``host:port`` as a ``CONNECT`` target (an IPv6 literal bracketed)."""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        return f"{host}:{port}".encode("ascii")
    text = f"[{literal}]" if literal.version == 6 else str(literal)
    return f"{text}:{port}".encode("ascii")


def connect_request(proxy: Proxy, host: str, port: int) -> bytes:
    """The ``CONNECT`` request for ``host:port`` (a name, or an IP literal) via ``proxy``.

    ``host`` is an ``Origin.host`` or a vetted address: lower-case ASCII, no
    separator, so the line needs no further check.
    """
    target = authority(host, port)
    head = b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n"
    if proxy.authorization is not None:
        head += b"Proxy-Authorization: " + proxy.authorization + b"\r\n"
    return head + b"\r\n"


def _shown(data: bytes) -> str:
    text = repr(data[:_MAX_SHOWN])
    return text + ("..." if len(data) > _MAX_SHOWN else "")


class TunnelReply:
    """The proxy's answer to one ``CONNECT`` (see the module docstring).

    :meth:`receive_data` returns :data:`ESTABLISHED` once a 2xx head is complete
    (None: more is needed) or raises ``ConnectionFailed``; so does
    :meth:`receive_eof`.  After it raised or said established, it is done: any more
    bytes are refused.
    """

    __slots__ = ("_done", "_head", "_informational", "_max_head", "_max_informational", "proxy")

    def __init__(self, proxy: Proxy, *, max_header_bytes: int, max_informational: int) -> None:
        self.proxy = proxy
        self._max_head = max_header_bytes
        self._max_informational = max_informational
        self._head = bytearray()  # the head so far (at most max_header_bytes)
        self._informational = 0
        self._done = False

    @property
    def answered(self) -> bool:
        """The proxy's answer is read (or the reader failed)."""
        return self._done

    def receive_data(self, data: bytes) -> Established | None:
        if self._done:
            raise self._failed(
                f"sent {len(data):,} bytes after its answer to CONNECT, before the target "
                "spoke (a proxy must not speak for the target)"
            )
        while True:
            start = len(self._head)
            self._head += data[: self._max_head + 1 - start]
            end = _HEAD_END.search(self._head, max(start - 2, 0))  # an end may straddle reads
            if end is None or end.end() > self._max_head:
                if len(self._head) > self._max_head:
                    limit = self._max_head
                    self._done = True
                    raise budget_exceeded(
                        f"the proxy {self.proxy.url} sent a CONNECT answer head over "
                        f"{limit:,} bytes (Limits.max_header_bytes)",
                        "max_header_bytes",
                        limit,
                        len(self._head),
                    )
                return None
            stop = end.end()
            block = bytes(self._head[:stop])
            self._head.clear()
            data = data[stop - start :]
            if self._on_head(block):
                return self._established(data)
            if not data:
                return None

    def _established(self, extra: bytes) -> Established:
        if extra:
            raise self._failed(
                f"sent {len(extra):,} bytes after its answer to CONNECT, before the "
                f"target spoke (a proxy must not speak for the target): {_shown(extra)}"
            )
        return ESTABLISHED

    def receive_eof(self) -> Established | None:
        done, self._done = self._done, True
        if done:
            raise self._failed("closed the connection after its answer to CONNECT")
        raise self._failed(
            "closed the connection before answering CONNECT"
            + (f" (after {len(self._head):,} bytes of a head)" if self._head else "")
        )

    def _failed(
        self, what: str, *, status: int | None = None, challenge: str | None = None
    ) -> ConnectionFailed:
        self._done = True
        return ConnectionFailed(
            f"the proxy {self.proxy.url} {what}",
            cause="proxy",
            status=status,
            proxy_authenticate=challenge,
        )

    def _on_head(self, block: bytes) -> bool:
        """True: a 2xx head, the tunnel is up; False: a 1xx head, another follows."""
        if _STATUS_LINE.match(block) is None:
            raise self._failed(f"answered CONNECT with a malformed status line: {_shown(block)}")
        status = int(block[9:12])
        if status < 100 or status == 101:  # (before llhttp, which pauses on any 101)
            raise self._failed(f"answered CONNECT with status {status}", status=status)
        sink = HeadFields()
        parser = httptools.HttpResponseParser(sink)
        parser.set_dangerous_leniencies(lenient_optional_cr_before_lf=True)
        try:
            parser.feed_data(block)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            detail = str(exc)[:_MAX_SHOWN] or type(exc).__name__
            raise self._failed(
                f"answered CONNECT with a malformed head ({detail}): {_shown(block)}"
            ) from None
        if status < 200:
            self._informational += 1
            if self._informational > self._max_informational:
                raise self._failed(
                    f"answered CONNECT with status {status} more than "
                    f"{self._max_informational} times",
                    status=status,
                )
            return False
        self._done = True
        if status >= 300:
            raise self._refused(status, sink.fields)
        for name, value in sink.fields:
            if name == b"transfer-encoding" or (name == b"content-length" and value.strip(b"0")):
                raise self._failed(
                    f"answered CONNECT with status {status} and a body "
                    f"({name.decode('latin-1')}: {_shown(value)}): a tunnel answer has none",
                    status=status,
                )
        return True

    def _refused(self, status: int, fields: list[tuple[bytes, bytes]]) -> ConnectionFailed:
        challenges = [value for name, value in fields if name == b"proxy-authenticate"]
        challenge = None
        if status == 407:
            challenge = b", ".join(challenges).decode("latin-1")[:_MAX_CHALLENGE]
        if status == 407 and self.proxy.authorization is None:
            hint = ": it wants credentials (user:password in the proxy URL)"
        elif status == 407:
            hint = ": it refused the credentials in the proxy URL"
        else:
            hint = ""
        return self._failed(
            f"refused CONNECT with status {status}{hint}"
            + (f" (Proxy-Authenticate: {challenge[:_MAX_SHOWN]})" if challenge else ""),
            status=status,
            challenge=challenge,
        )
