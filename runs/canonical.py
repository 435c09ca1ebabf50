"""Canonical JSON and the hashes derived from it (docs/api.md, "Canonical JSON and derived values")."""

import hashlib
import json
from datetime import datetime
from decimal import Decimal
from typing import Any

GENESIS_HASH = "0" * 64


def storage_form(value: Any) -> Any:
    """`value` with its numbers as PostgreSQL's jsonb gives them back.

    jsonb stores numbers as `numeric`: `-0.0` reads back `0.0`, and a float Python writes with a
    positive exponent (`1e+16`, `1.5e+300`) reads back as the integer it denotes. Floats with
    decimals (`0.1`, `1e-07`, `123.0`) read back as the same float. Ints, bools, strings and None
    are unchanged; dicts and lists are rebuilt.
    """
    if isinstance(value, float):
        if value == 0:
            return 0.0
        exact = Decimal(repr(value))
        exponent = exact.as_tuple().exponent
        if isinstance(exponent, int) and exponent >= 0:
            return int(exact)
        return value
    if isinstance(value, dict):
        return {key: storage_form(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storage_form(item) for item in value]
    return value


def canonical_json(value: Any) -> bytes:
    """UTF-8, keys sorted, separators `,` `:`, no NaN: the bytes every hash is taken over.

    Numbers are taken in their storage form, so a hash computed before a value is stored
    agrees with one recomputed from what the database returns.
    """
    return json.dumps(
        storage_form(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arguments_hash(arguments: Any) -> str:
    return sha256_hex(canonical_json(arguments))


def idempotency_key(*, run_id: object, index: int, name: str, args_hash: str) -> str:
    return f"{run_id}:{index}:{name}:{args_hash[:32]}"


def event_body(
    *, run_id: object, seq: Any, type: Any, payload: Any, actor: Any, at: Any
) -> dict[str, Any]:
    """What an event's hash covers: the journal writes it, `verify_journal`, the offline export
    verifier (`audit.verify`) and the bench's bulk generator rebuild exactly this. `at` is a
    datetime or the ISO 8601 text an export carries."""
    return {
        "run": str(run_id),
        "seq": seq,
        "type": type,
        "payload": payload,
        "actor": actor,
        "at": at.isoformat() if isinstance(at, datetime) else at,
    }


def event_hash(*, prev_hash: str, body: dict[str, Any]) -> str:
    """hash = sha256(prev_hash + canonical JSON of the event)."""
    return sha256_hex(prev_hash.encode("ascii") + canonical_json(body))
