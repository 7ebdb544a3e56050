"""Checks a DPoP proof (RFC 9449 §4.3) for the e2e servers: ES256 over the header's jwk."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verify(proof: str, method: str, url: str, token: str | None = None) -> dict[str, Any]:
    """The proof's claims, or ValueError naming what is wrong."""
    head, body, signature = proof.split(".")
    header, claims = json.loads(_b64(head)), json.loads(_b64(body))
    if header.get("typ") != "dpop+jwt" or header.get("alg") != "ES256":
        raise ValueError(f"bad header {header}")
    jwk = header["jwk"]
    if "d" in jwk:
        raise ValueError("a private key in the jwk")
    x, y = (int.from_bytes(_b64(jwk[k]), "big") for k in ("x", "y"))
    key = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    raw = _b64(signature)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        key.verify(der, f"{head}.{body}".encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise ValueError("the signature does not verify") from None
    if claims.get("htm") != method or claims.get("htu") != url:
        raise ValueError(f"htm/htu {claims.get('htm')} {claims.get('htu')} for {method} {url}")
    if not isinstance(claims.get("jti"), str) or abs(time.time() - claims["iat"]) > 300:
        raise ValueError("no jti, or iat outside the window")
    if token is not None:
        digest = base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=")
        if claims.get("ath") != digest.decode():
            raise ValueError("ath is not the token's hash")
    return dict(claims)
