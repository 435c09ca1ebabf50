"""The one error envelope of the API: {"error": {"code", "message", "details"}}."""

import json
import math
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.parsers import BaseParser
from rest_framework.response import Response

from runs.canonical import storage_form

MAX_JSON_DEPTH = 64
# "\ud800" is valid JSON but no UTF-8 text: PostgreSQL and the hash chain cannot store it.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The contract's error envelope; every refusal the API, the gateway and the tools give."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


class ApplicationError(Exception):
    """A refusal the client can act on; raised by services, rendered by `exception_handler`."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status_code: int = status.HTTP_409_CONFLICT,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status_code = status_code
        self.details = details or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, self.details)


def invalid(field: str, message: str, why: str) -> ApplicationError:
    """A 400 validation_error naming the one field at fault (`details: {field: [why]}`)."""
    return ApplicationError("validation_error", message, status_code=400, details={field: [why]})


def note_required(note: str | None, message: str = "A note is required.") -> str:
    """The note, stripped; a 400 naming `note` when there is none (a person says why they act)."""
    if not note or not note.strip():
        raise invalid("note", message, "Required.")
    return note.strip()


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"
    default_detail = "The request body is over the configured limit."


def error_response(
    code: str, message: str, http_status: int, details: dict[str, Any] | None = None
) -> Response:
    return Response(error_body(code, message, details), status=http_status)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object naming a key twice is refused, not read "last one wins"."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r} in an object")
            seen.add(key)
    return obj


_UNSTORABLE_TEXT = (
    "JSON strings may not contain NUL characters or unpaired surrogates (\\ud800-\\udfff)."
)


def _bad_text(text: str) -> bool:
    return "\x00" in text or _LONE_SURROGATE.search(text) is not None


def _stored(value: Any, depth: int = 1) -> Any:
    """The parsed body in its storage form (runs.canonical.storage_form), in the one walk that
    refuses what jsonb or the hash chain cannot take."""
    if depth > MAX_JSON_DEPTH:
        raise exceptions.ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels.")
    if isinstance(value, str):
        if _bad_text(value):
            raise exceptions.ParseError(_UNSTORABLE_TEXT)
        return value
    if isinstance(value, dict):
        if any(_bad_text(key) for key in value):
            raise exceptions.ParseError(_UNSTORABLE_TEXT)
        return {key: _stored(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_stored(item, depth + 1) for item in value]
    if isinstance(value, float) and not math.isfinite(value):  # 1e999: json.loads says inf
        raise exceptions.ParseError("JSON numbers must be finite (this one overflows).")
    return storage_form(value)


class StrictJSONParser(BaseParser):
    """JSON that PostgreSQL can store and the hash chain can canonicalise.

    Refuses bodies over the configured size (413), non-UTF-8, NaN/Infinity, an object naming a
    key twice, NUL characters and unpaired surrogates (jsonb cannot hold them) and nesting deeper
    than MAX_JSON_DEPTH. Numbers come out in their storage form (runs.canonical.storage_form), so
    what is stored, answered and hashed is one value.
    """

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError("The request body is not UTF-8.") from exc
        try:
            data = json.loads(
                text, parse_constant=_reject_constant, object_pairs_hook=_reject_duplicate_keys
            )
        except RecursionError as exc:
            raise exceptions.ParseError("JSON nested too deeply.") from exc
        except ValueError as exc:
            raise exceptions.ParseError(f"Malformed JSON: {exc}") from exc
        return _stored(data)


_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.ParseError: "malformed_json",
    exceptions.Throttled: "throttled",
    PayloadTooLarge: "payload_too_large",
}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        return error_response(exc.code, exc.message, exc.status_code, exc.details)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        return error_response(
            "validation_error", "The request is not valid.", status.HTTP_400_BAD_REQUEST, detail
        )
    if isinstance(exc, (OperationalError, InterfaceError)):
        response = error_response(
            "database_unavailable",
            "The database is not reachable right now; retry with backoff.",
            status.HTTP_503_SERVICE_UNAVAILABLE,
        )
        response["Retry-After"] = "1"  # as runs.middleware does for non-API views
        return response
    if isinstance(exc, DatabaseError) and "invalid input syntax" in str(exc):
        return error_response("validation_error", str(exc).splitlines()[0], 400)
    if isinstance(exc, exceptions.APIException):
        code = next((c for t, c in _DRF_CODES.items() if isinstance(exc, t)), "error")
        response = error_response(code, str(exc.detail), exc.status_code)
        if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
            response["WWW-Authenticate"] = 'Bearer realm="api"'
        return response
    return None
