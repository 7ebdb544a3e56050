"""The two JOSE pieces OAuth needs: base64url without padding, and a compact JWS.

Both the client assertion (``private_key_jwt``, RFC 7523) and the DPoP proof (RFC 9449)
are compact JWS: ``b64url(header) . b64url(claims) . b64url(signature)``, signed by the
embedder's :class:`~.store.Signer`.  What the signer returns is checked (not non-empty
bytes -> ``CallerError``); the core never sees a key nor imports a crypto library.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from ..errors import CallerError
from ..jsonvalue import dumps_compact
from .store import Signer

__all__ = ["b64url", "compact_jws"]


def b64url(data: bytes) -> str:
    """``data`` in base64url without ``=`` padding (RFC 7515 §2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def compact_jws(
    signer: Signer, header: Mapping[str, Any], claims: Mapping[str, Any], *, who: str
) -> str:
    """The compact JWS of ``claims`` under ``header``, signed by ``signer`` (named ``who``
    in the ``CallerError`` when its signature is not non-empty bytes)."""
    head = b64url(dumps_compact(dict(header))) + "." + b64url(dumps_compact(dict(claims)))
    signature = signer.sign(head.encode("ascii"))
    if not isinstance(signature, bytes) or not signature:
        raise CallerError(f"{who} must return the signature as bytes")
    return head + "." + b64url(signature)
