"""Signing keys for OAuth (the ``oauth`` extra: ``pip install 'sansmcp[oauth]'``).

The core never imports a crypto library: a JWS it assembles (an RFC 7523
``private_key_jwt`` client assertion) is signed by an injected
:class:`~sansmcp.core.oauth.store.Signer`.  :class:`Es256Key` is one, built on
``cryptography``: ECDSA P-256 with SHA-256, the signature in the JWS form (``r || s``,
32 bytes each, RFC 7518 §3.4), never DER.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from .core.oauth.jose import b64url

__all__ = ["Es256Key"]


class Es256Key:
    """An ES256 private key: ``sign(data)`` and ``public_jwk()`` for ``OAuth.signer``."""

    alg = "ES256"

    def __init__(self, key: ec.EllipticCurvePrivateKey, *, kid: str | None = None) -> None:
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError("ES256 needs a P-256 key")
        self._key = key
        self.kid = kid

    def __repr__(self) -> str:
        return f"Es256Key(kid={self.kid!r})"  # never the key

    @classmethod
    def generate(cls, *, kid: str | None = None) -> Es256Key:
        """A new random P-256 key (``kid``: the key id put in the JWS header)."""
        return cls(ec.generate_private_key(ec.SECP256R1()), kid=kid)

    @classmethod
    def from_pem(cls, pem: bytes | str, *, kid: str | None = None) -> Es256Key:
        """The key in an unencrypted PEM private key; ``ValueError`` if it is not EC P-256."""
        data = pem.encode() if isinstance(pem, str) else pem
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("not an EC private key")
        return cls(key, kid=kid)

    def sign(self, data: bytes) -> bytes:
        """The ES256 signature of ``data``: ``r || s``, 64 bytes (RFC 7518 3.4)."""
        r, s = decode_dss_signature(self._key.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")

    def public_jwk(self) -> Mapping[str, Any]:
        """The public key as a JWK (``kty``, ``crv``, ``x``, ``y``, and ``kid`` when set)."""
        numbers = self._key.public_key().public_numbers()
        jwk = {
            "kty": "EC",
            "crv": "P-256",
            "x": b64url(numbers.x.to_bytes(32, "big")),
            "y": b64url(numbers.y.to_bytes(32, "big")),
        }
        if self.kid is not None:
            jwk["kid"] = self.kid
        return jwk
