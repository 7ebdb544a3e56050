"""DPoP (RFC 9449): proofs of possession of ``OAuth.dpop_key`` for each request.

A proof is a compact JWS (header ``typ: dpop+jwt``, ``alg``, the public ``jwk``)
over the claims ``jti`` (fresh randomness), ``htm`` (the method), ``htu`` (the URL
without query or fragment), ``iat`` (the wall clock), ``ath`` (base64url SHA-256
of the access token, at the resource server only) and ``nonce`` (when a server
supplied one in ``DPoP-Nonce``).  The key is the embedder's
:class:`~.store.Signer`; the core never sees it nor imports a crypto library.
What the signer returns is checked (a bad value -> ``CallerError``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import CallerError
from ..http import Headers, header_value
from .jose import b64url, compact_jws
from .store import Signer

__all__ = ["MAX_NONCE", "htu_of", "nonce_of", "proof"]

MAX_NONCE = 512  # bytes of a DPoP-Nonce we keep; a longer one is ignored


def htu_of(url: str) -> str:
    """``url`` without its query and fragment (RFC 9449 §4.2)."""
    return url.split("#", 1)[0].split("?", 1)[0]


def nonce_of(headers: Headers) -> str | None:
    """The ``DPoP-Nonce`` a server sent: printable ASCII (RFC 9449 §8.1), bounded; else None."""
    value = header_value(headers, b"dpop-nonce")
    if value is None or not value or len(value) > MAX_NONCE:
        return None
    if any(not 0x20 < byte < 0x7F for byte in value):
        return None
    return value.decode("ascii")


def proof(
    key: Signer,
    *,
    method: str,
    url: str,
    wall_clock: Callable[[], float],
    random_bytes: Callable[[int], bytes],
    access_token: str | None = None,
    nonce: str | None = None,
) -> bytes:
    """A fresh DPoP proof for one request, as the ``DPoP`` header value."""
    jwk = key.public_jwk()
    if not isinstance(jwk, Mapping) or "d" in jwk:
        raise CallerError("OAuth.dpop_key.public_jwk() must return the public JWK (a mapping)")
    header: dict[str, Any] = {"typ": "dpop+jwt", "alg": key.alg, "jwk": dict(jwk)}
    claims: dict[str, Any] = {
        "jti": b64url(random_bytes(16)),
        "htm": method,
        "htu": htu_of(url),
        "iat": int(wall_clock()),
    }
    if access_token is not None:
        claims["ath"] = b64url(hashlib.sha256(access_token.encode("ascii")).digest())
    if nonce is not None:
        claims["nonce"] = nonce
    return compact_jws(key, header, claims, who="OAuth.dpop_key").encode("ascii")
