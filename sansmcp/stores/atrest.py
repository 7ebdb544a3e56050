"""Secrets at rest: a stored value sealed with AES-GCM under the embedder's keys.

Theory of operation
-------------------
``AtRest([("k2", key2), ("k1", key1)])`` seals with the first key and opens with any
of them, so a key rotates in three steps: add the new key first (every worker),
wait for the values sealed under the old one to be rewritten or expire (every key in
the store has a TTL), then drop the old key.  A sealed value is
``b"E" + len(key id) + key id + 12-byte nonce + AES-GCM ciphertext and tag``; the
associated data binds it to its store key and its version, so a value copied to
another key, or under another version, does not open.  Nonces are random (96 bits):
rotate a key well before 2**32 values have been sealed under it.

A value that does not open (unknown key id, wrong tag, too short) is ``None``: the
store counts it and answers a miss.  AES-GCM comes from ``cryptography`` (the
``oauth`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..core.errors import CallerError

__all__ = ["AtRest"]

SEALED = b"E"  # the first byte of a sealed value
_NONCE = 12
_TAG = 16
MAX_KEY_ID = 16


class AtRest:
    """AES-GCM keys by id; the first seals, any opens.  Keys never appear in a ``repr``."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:  # tests/test_extras.py
            raise CallerError(
                "encrypting stored values needs the 'cryptography' package: "
                "pip install 'sansmcp[oauth]'"
            ) from exc
        if not keys:
            raise CallerError("AtRest needs at least one (key id, key) pair")
        self._aeads: dict[bytes, Any] = {}
        for key_id, key in keys:
            if not (
                isinstance(key_id, str)
                and 0 < len(key_id) <= MAX_KEY_ID
                and key_id.isascii()
                and key_id.isprintable()
            ):
                raise CallerError(
                    f"an AtRest key id is 1 to {MAX_KEY_ID} printable ASCII characters"
                )
            if not isinstance(key, bytes) or len(key) not in (16, 24, 32):
                raise CallerError(f"the AtRest key {key_id!r} is not 16, 24 or 32 bytes (AES)")
            if key_id.encode() in self._aeads:
                raise CallerError(f"the AtRest key id {key_id!r} is given twice")
            self._aeads[key_id.encode()] = AESGCM(key)
        self._first = keys[0][0].encode()
        self.ids = tuple(key_id for key_id, _ in keys)

    def __repr__(self) -> str:
        return f"AtRest(ids={self.ids!r})"

    def seal(self, data: bytes, aad: bytes) -> bytes:
        """``data`` sealed under the first key, bound to ``aad``."""
        nonce = os.urandom(_NONCE)
        ciphertext: bytes = self._aeads[self._first].encrypt(nonce, data, aad)
        return SEALED + bytes([len(self._first)]) + self._first + nonce + ciphertext

    def open(self, sealed: bytes, aad: bytes) -> bytes | None:
        """The data ``sealed`` holds, or None when it does not open under any key."""
        from cryptography.exceptions import InvalidTag

        if len(sealed) < 2 or sealed[:1] != SEALED:
            return None
        end = 2 + sealed[1]
        aead = self._aeads.get(sealed[2:end])
        if aead is None or len(sealed) < end + _NONCE + _TAG:
            return None
        try:
            data: bytes = aead.decrypt(sealed[end : end + _NONCE], sealed[end + _NONCE :], aad)
        except InvalidTag:
            return None
        return data
