"""The Ed25519 key that signs checkpoints and export trailers.

Settings: AUDIT_SIGNING_KEY holds the private key (base64 of the 32 raw bytes, or PEM). With
DEBUG on and no key set, a key is generated once into AUDIT_SIGNING_KEY_FILE so the demo signs
from the first minute and keeps verifying across restarts. Production sets the key explicitly
(`manage.py generate_signing_key` prints one); without it signing refuses with a clear error.
"""

import base64
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from audit.verify import key_id, raw_key_bytes
from runs.canonical import canonical_json


def private_key_parse(text: str) -> Ed25519PrivateKey:
    text = text.strip()
    if text.startswith("-----BEGIN"):
        key = serialization.load_pem_private_key(text.encode("ascii"), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ImproperlyConfigured("AUDIT_SIGNING_KEY is a PEM key but not an Ed25519 one.")
        return key
    try:
        return Ed25519PrivateKey.from_private_bytes(raw_key_bytes(text, "AUDIT_SIGNING_KEY"))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{exc}.") from exc


def private_key_generate() -> str:
    """A new private key as base64 of its 32 raw bytes (what AUDIT_SIGNING_KEY takes)."""
    raw = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    return base64.b64encode(raw).decode("ascii")


def public_key_text(public_key: Ed25519PublicKey) -> str:
    """The public key as base64 of its 32 raw bytes: what `verify_export --public-key` takes."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def _key_file_load_or_create(path: Path) -> str:
    if path.is_file():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = private_key_generate()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    return text


def signing_key() -> Ed25519PrivateKey:
    text = getattr(settings, "AUDIT_SIGNING_KEY", "") or ""
    if not text and settings.DEBUG:
        text = _key_file_load_or_create(Path(settings.AUDIT_SIGNING_KEY_FILE))
    if not text:
        raise ImproperlyConfigured(
            "AUDIT_SIGNING_KEY is not set: create one with `python manage.py "
            "generate_signing_key` and put it in the environment."
        )
    return private_key_parse(text)


def signing_public_key() -> Ed25519PublicKey:
    return signing_key().public_key()


def signing_key_id() -> str:
    return key_id(signing_public_key())


def sign(message: object) -> str:
    """Base64 Ed25519 signature over the canonical JSON of `message`."""
    return base64.b64encode(signing_key().sign(canonical_json(message))).decode("ascii")
