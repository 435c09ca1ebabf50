"""Canonical JSON and the hashes derived from it (DESIGN.md, "Data")."""

import hashlib
import json
from typing import Any

GENESIS_HASH = "0" * 64


def canonical_json(value: Any) -> bytes:
    """UTF-8, keys sorted, separators `,` `:`, no NaN: the bytes every hash is taken over."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arguments_hash(arguments: Any) -> str:
    return sha256_hex(canonical_json(arguments))


def idempotency_key(*, run_id: object, index: int, name: str, args_hash: str) -> str:
    return f"{run_id}:{index}:{name}:{args_hash[:32]}"


def event_hash(*, prev_hash: str, body: dict[str, Any]) -> str:
    """hash = sha256(prev_hash + canonical JSON of the event)."""
    return sha256_hex(prev_hash.encode("ascii") + canonical_json(body))
