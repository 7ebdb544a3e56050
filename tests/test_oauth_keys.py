"""sansmcp.oauth_keys: an ES256 signer whose JWS signatures verify (the ``oauth`` extra)."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from sansmcp.oauth_keys import Es256Key


def _int(text: str) -> int:
    return int.from_bytes(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)), "big")


def test_signatures_are_raw_r_s_and_verify_with_the_public_jwk() -> None:
    key = Es256Key.generate(kid="k1")
    data = b"header.payload"
    signature = key.sign(data)
    assert len(signature) == 64
    jwk = key.public_jwk()
    assert jwk["kty"] == "EC" and jwk["crv"] == "P-256" and jwk["kid"] == "k1"
    public = ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), ec.SECP256R1())
    der = encode_dss_signature(
        int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
    )
    public.public_key().verify(der, data, ec.ECDSA(hashes.SHA256()))  # raises if wrong
    assert "k1" in repr(key) and "PRIVATE" not in repr(key)


def test_from_pem_and_its_refusals() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    assert "kid" not in Es256Key.from_pem(pem.decode()).public_jwk()
    with pytest.raises(ValueError, match="P-256"):
        Es256Key(ec.generate_private_key(ec.SECP384R1()))
    from cryptography.hazmat.primitives.asymmetric import ed25519

    other = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(ValueError, match="not an EC private key"):
        Es256Key.from_pem(other)
