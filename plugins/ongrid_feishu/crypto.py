"""Feishu/Lark event-subscription security: the encrypted body and the signature.

- :func:`decrypt`: ``{"encrypt": "<base64>"}`` bodies are AES-256-CBC with
  key = SHA-256(encrypt key), IV = the first 16 bytes of the base64-decoded
  value, PKCS#7 padding (``cryptography``).  ValueError when it does not
  decrypt to UTF-8 JSON text.
- :func:`signature_ok`: ``X-Lark-Signature`` = hex SHA-256 of
  ``timestamp + nonce + encrypt_key + raw body``, compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

# ``cryptography`` is imported by decrypt/encrypt, not here: the bridge imports this module at
# plugin load, also when it is inactive or has no encrypt key

MAX_ENCRYPTED_CHARS = 1024 * 1024


def decrypt(encrypted: str, encrypt_key: str) -> str:
    if not isinstance(encrypted, str) or len(encrypted) > MAX_ENCRYPTED_CHARS:
        raise ValueError("encrypt: expected a base64 string")
    try:
        raw = base64.b64decode(encrypted, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("encrypt: not base64") from None
    if len(raw) < 32 or len(raw) % 16:
        raise ValueError("encrypt: not an AES-CBC payload")
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    key = hashlib.sha256(encrypt_key.encode()).digest()
    decryptor = Cipher(algorithms.AES(key), modes.CBC(raw[:16])).decryptor()
    padded = decryptor.update(raw[16:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        plain = unpadder.update(padded) + unpadder.finalize()
        return plain.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise ValueError("encrypt: wrong key or corrupt payload") from None


def encrypt(plain: str, encrypt_key: str, iv: bytes) -> str:
    """The inverse of :func:`decrypt` (what the platform sends; for tests and tools)."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    key = hashlib.sha256(encrypt_key.encode()).digest()
    padder = padding.PKCS7(128).padder()
    data = padder.update(plain.encode()) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(data) + encryptor.finalize()).decode()


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


def signature_ok(timestamp: str, nonce: str, encrypt_key: str, body: bytes, given: str) -> bool:
    return hmac.compare_digest(signature(timestamp, nonce, encrypt_key, body).encode(), given.encode())
