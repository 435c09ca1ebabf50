"""Bearer worker tokens: named, revocable, stored as sha256 (they are 256-bit random, not passwords)."""

import hashlib
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from runs.models import TokenScope, WorkerToken

TOKEN_PREFIX = "alw_"  # noqa: S105 (a prefix, not a secret)
LAST_USED_RESOLUTION = timedelta(seconds=60)


@dataclass(frozen=True)
class WorkerPrincipal:
    """Who a worker request acts as; `is_authenticated` lets DRF treat it as a user."""

    token_id: int
    name: str
    scope: str
    # the agents whose runs this token may see and write; None: every agent
    agents: frozenset[str] | None = None

    is_authenticated = True
    is_worker = True

    def __str__(self) -> str:
        return f"worker:{self.name}"

    @property
    def tools_direct(self) -> bool:
        """May invoke write tools under free-form keys (no journalled intent): not for agents."""
        return TokenScope.TOOLS_DIRECT in self.scope.split()

    def may_use(self, agent: str) -> bool:
        return self.agents is None or agent in self.agents


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


# token hash -> (principal or None for unknown/revoked, monotonic time it was read)
_principals: dict[str, tuple[WorkerPrincipal | None, float]] = {}


def principal_for(raw: str) -> WorkerPrincipal | None:
    """Who a raw bearer token acts as, read at most once a second per process.

    A revocation therefore takes effect everywhere within LEDGER_TOKEN_CACHE_SECONDS (1 s), and at
    once in the process that revoked it (`forget_principal`). Unknown tokens are cached too, so
    guessing costs the database nothing more.
    """
    digest = hash_token(raw)
    cached = _principals.get(digest)
    clock = time.monotonic()
    if cached is not None and clock - cached[1] < settings.LEDGER_TOKEN_CACHE_SECONDS:
        return cached[0]
    token = WorkerToken.objects.filter(token_hash=digest).first()
    principal = None
    if token is not None and token.revoked_at is None:
        principal = WorkerPrincipal(
            token_id=token.pk,
            name=token.name,
            scope=token.scope,
            agents=frozenset(token.agents) if token.agents else None,
        )
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            WorkerToken.objects.filter(pk=token.pk).update(last_used_at=now)
    if len(_principals) > 10_000:
        _principals.clear()
    _principals[digest] = (principal, clock)
    return principal


def forget_principal(token_hash: str) -> None:
    _principals.pop(token_hash, None)


class WorkerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[WorkerPrincipal, WorkerPrincipal] | None:
        header = authentication.get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower() != self.keyword.lower().encode() or len(header) != 2:
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <worker token>'.")
        try:
            raw = header[1].decode("ascii")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed("Malformed token.") from exc
        principal = principal_for(raw)
        if principal is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked worker token.")
        return principal, principal

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class IsWorker(permissions.BasePermission):
    """Only worker tokens reach the worker API and the tool gateway; sessions do not."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, WorkerPrincipal)


def actor_of(request: Request) -> str:
    user = request.user
    return str(user) if user is not None else "anonymous"
