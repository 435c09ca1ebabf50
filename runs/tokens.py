"""Worker token services: create (the raw token is returned once), register one chosen beforehand,
revoke."""

from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from runs.api_errors import invalid
from runs.authentication import TOKEN_PREFIX, forget_principal, generate_token, hash_token
from runs.constants import AGENT_NAME_RULE, agent_name_valid
from runs.models import TokenScope, WorkerToken
from teams.models import DEFAULT_TEAM_SLUG, Team, default_team
from teams.scope import every_team, team_scope


@transaction.atomic
def worker_token_create(
    *,
    name: str,
    created_by: str = "",
    scopes: tuple[str, ...] = (),
    agents: tuple[str, ...] | list[str] = (),
    raw: str | None = None,
) -> tuple[WorkerToken, str]:
    """A new token; `agents` limits it to those agents' runs (none: every agent), `scopes` adds
    rights beyond the worker API (`tools:direct`). `raw` registers a token chosen beforehand
    (the demo hands its worker one before the database is migrated); by default a new one."""
    unknown = sorted(set(scopes) - set(TokenScope.values))
    if unknown:
        raise invalid("scope", f"Unknown scope {unknown[0]!r}.", f"One of {TokenScope.values}.")
    names = sorted({a.strip() for a in agents if a.strip()})
    bad = [a for a in names if not agent_name_valid(a)]
    if bad:
        message = f"Not an agent name: {bad[0]} ({AGENT_NAME_RULE})."
        raise invalid("agents", message, message)
    scope = " ".join([TokenScope.WORKER, *sorted(set(scopes) - {TokenScope.WORKER})])
    raw = raw or generate_token()
    try:
        with transaction.atomic():
            token = WorkerToken.objects.create(
                name=name,
                prefix=raw[:10],
                token_hash=hash_token(raw),
                scope=scope,
                agents=names,
                created_by=created_by,
            )
    except IntegrityError as exc:
        if "worker_token_active_name_unique" not in str(exc):
            raise
        message = (
            f"A token named “{name}” is in use already; revoke it first or choose another name."
        )
        raise invalid("name", message, message) from exc
    return token, raw


@transaction.atomic
def worker_token_register(*, name: str, raw: str, created_by: str = "") -> tuple[WorkerToken, bool]:
    """The token `raw` (chosen by a deployment, e.g. its compose file's INTENTLEDGER_TOKEN) as a
    worker token: registered under `name` unless it already is; (token, created). Idempotent, so
    a deployment's one-shot may run it at every start. A revoked token stays revoked."""
    if len(raw) < 24:
        raise invalid("token", "A worker token must be at least 24 characters.", "Too short.")
    with every_team("token lookup"):  # the token may be any team's
        existing = WorkerToken.objects.filter(token_hash=hash_token(raw)).first()
    if existing is not None:
        return existing, False
    token, _ = worker_token_create(name=name, created_by=created_by, raw=raw)
    return token, True


@transaction.atomic
def worker_token_revoke(*, token_id: int) -> WorkerToken:
    token = WorkerToken.objects.select_for_update().get(pk=token_id)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    forget_principal(token.token_hash)  # every node's next call finds it revoked anyway
    return token


# The Celery-run agents' own token (celery_agents.tasks): a worker beside the database journals
# in-process and needs no token copied by hand. Every process holding this ledger's SECRET_KEY
# derives the same one; the first to need it registers it (named after its prefix, so a rotated
# SECRET_KEY registers a second one rather than clashing with the first).
CELERY_AGENTS_TOKEN_SALT = "runs.tokens.celery_agents"  # noqa: S105 (a salt, not a secret)


def celery_agents_token_raw(team: Team | None = None) -> str:
    """This ledger's agents' token in `team` (by default `default`): an HMAC of SECRET_KEY and
    the team's slug, never stored (only its hash is)."""
    slug = DEFAULT_TEAM_SLUG if team is None else team.slug
    value = "v1" if slug == DEFAULT_TEAM_SLUG else f"v1:{slug}"
    return (
        TOKEN_PREFIX + salted_hmac(CELERY_AGENTS_TOKEN_SALT, value, algorithm="sha256").hexdigest()
    )


def celery_agents_token_ensure(team: Team | None = None) -> str:
    """The agents' own token in `team` (a run's token must be of its run's team; by default
    `default`), registered unless it is; the raw token. Revoked by an admin, it stays revoked:
    the agents then need INTENTLEDGER_TOKEN, and this says so."""
    team = team or default_team()
    raw = celery_agents_token_raw(team)
    with team_scope(team.pk):
        token, _ = worker_token_register(
            name=f"celery-agents-{raw[len(TOKEN_PREFIX) : len(TOKEN_PREFIX) + 6]}",
            raw=raw,
            created_by="celery worker",
        )
    if not token.is_active:
        raise ImproperlyConfigured(
            f"The Celery agents' own worker token {token.name!r} was revoked: set "
            "INTENTLEDGER_TOKEN to a live worker token (manage.py create_worker_token NAME)."
        )
    return raw
