"""Bearer worker tokens: named, revocable, stored as sha256 (they are 256-bit random, not passwords)."""

import hashlib
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connection
from django.utils import timezone
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from runs.models import TokenScope, WorkerToken
from teams.scope import Scope, every_team, scope_for_teams, set_current

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
    token_hash: str = ""
    # the team whose runs the token creates and sees: every call runs under it (teams.scope)
    team_id: int = 0

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


# token hash -> (principal, monotonic time this process last wrote its last_used_at). A token's
# name, scope and agents never change after creation, so who a token is can be remembered; whether
# it is still live is asked of the database on every call (`principal_for`, `token_live`).
_principals: dict[str, tuple[WorkerPrincipal, float]] = {}
_CACHE_LIMIT = 10_000
# the kernel's liveness check (runs/sql/ledger.sql): raises SQLSTATE TOKEN_REVOKED_SQLSTATE
# unless the token is live
_LIVE_SQL = "SELECT ledger_token_live(%s)"
TOKEN_REVOKED_SQLSTATE = "LT401"  # noqa: S105 (an error code, not a secret)


class TokenRevoked(Exception):
    """The token was revoked (or deleted) since this process learnt who it is."""


def _read(digest: str) -> WorkerPrincipal | None:
    """The live token of `digest` from the database (one statement), or None. Read in every
    team (a token's team is not known before its row is read: teams.scope's `token lookup`)."""
    with every_team("token lookup"):
        return _read_in_every_team(digest)


def _read_in_every_team(digest: str) -> WorkerPrincipal | None:
    token = WorkerToken.objects.filter(token_hash=digest, revoked_at__isnull=True).first()
    if token is None:
        _principals.pop(digest, None)
        return None
    principal = WorkerPrincipal(
        token_id=token.pk,
        name=token.name,
        scope=token.scope,
        agents=frozenset(token.agents) if token.agents else None,
        token_hash=digest,
        team_id=token.team_id,
    )
    if len(_principals) >= _CACHE_LIMIT:
        _principals.clear()
    _principals[digest] = (principal, time.monotonic())
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        WorkerToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return principal


def principal_for(raw: str) -> WorkerPrincipal | None:
    """Who a raw bearer token acts as, if it is live now: one indexed statement per call, so a
    revocation counts on the very next call on every node (no cache to turn over)."""
    return _read(hash_token(raw))


def principal_known(raw: str) -> WorkerPrincipal | None:
    """Who a raw token is, without a statement when this process has seen it: its liveness is
    then checked by `token_live` in the same round trip as the call it guards. None: unknown
    or revoked (read now)."""
    digest = hash_token(raw)
    known = _principals.get(digest)
    if known is None:
        return _read(digest)
    principal, touched = known
    if time.monotonic() - touched > LAST_USED_RESOLUTION.total_seconds():
        return _read(digest)  # re-read (and mark used) once a minute
    return principal


class _CheckOnFirstStatement:
    """A Django execute wrapper: the call's first statement goes as `<statement>; SELECT
    ledger_token_live(…)` in one simple query, which PostgreSQL runs as one implicit transaction:
    if the check fails the statement's writes roll back with it. The check comes second so the
    cursor's first result stays the statement's own; a call pays no round trip for it."""

    def __init__(self, token_hash: str) -> None:
        self.token_hash = token_hash
        self.sent = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if self.sent or many or not isinstance(params, list | tuple):
            return execute(sql, params, many, context)
        self.sent = True
        return execute(f"{sql}; {_LIVE_SQL}", [*params, self.token_hash], many, context)


@contextmanager
def token_live(principal: WorkerPrincipal) -> Iterator[None]:
    """Run the enclosed call only if `principal`'s token is still live, checked in the same
    round trip and transaction as the call's first statement (`_CheckOnFirstStatement`); a
    block that sent no statement (a refusal before any SQL) checks at its end. Raises
    TokenRevoked.

    Inside a caller's transaction (tests) a failed check would abort that transaction, so there
    the check is a statement of its own.
    """
    if connection.in_atomic_block:
        if _read(principal.token_hash) is None:
            raise TokenRevoked
        yield
        return
    guard = _CheckOnFirstStatement(principal.token_hash)
    try:
        with connection.execute_wrapper(guard):
            yield
    except DatabaseError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != TOKEN_REVOKED_SQLSTATE:
            raise
        _principals.pop(principal.token_hash, None)
        raise TokenRevoked from exc
    except Exception:
        if not guard.sent and _read(principal.token_hash) is None:
            raise TokenRevoked from None
        raise
    if not guard.sent and _read(principal.token_hash) is None:
        raise TokenRevoked


def scope_of(principal: WorkerPrincipal) -> Scope:
    """The scope a worker call runs under: its token's team."""
    return scope_for_teams((principal.team_id,))


def scope_enter(principal: WorkerPrincipal) -> None:
    """The current context runs under `principal`'s team from here on (a request's: the
    middleware that began it restores what was before)."""
    set_current(scope_of(principal))


def forget_principal(token_hash: str) -> None:
    """Forget who a token is (its revocation): the next call reads it again."""
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
        # the rest of the request runs under the token's team (teams.middleware resets it)
        scope_enter(principal)
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
