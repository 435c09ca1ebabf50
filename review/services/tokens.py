"""Worker tokens created and revoked from the dashboard, audited.

Lock precondition: none held by the caller. `runs.tokens` writes the token; these functions open
the transaction its audit entry joins.
"""

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from dashboard.audit import audit_record
from runs.api_errors import ApplicationError, invalid
from runs.models import TokenScope, WorkerToken
from runs.tokens import worker_token_create, worker_token_revoke


def review_token_create(
    *,
    user: AbstractBaseUser | str,
    name: str,
    agents: list[str] | tuple[str, ...] = (),
    tools_direct: bool = False,
) -> tuple[WorkerToken, str]:
    name = name.strip()
    if not name:
        raise invalid("name", "A token needs a name.", "Required.")
    with transaction.atomic():
        token, raw = worker_token_create(
            name=name,
            created_by=user if isinstance(user, str) else user.get_username(),
            agents=tuple(agents),
            scopes=(TokenScope.TOOLS_DIRECT,) if tools_direct else (),
        )
        audit_record(
            actor=user,
            action="token.create",
            target=f"token:{token.pk}",
            details={
                "name": token.name,
                "prefix": token.prefix,
                "scope": token.scope,
                "agents": token.agents,
            },
        )
        return token, raw


def review_token_revoke(*, user: AbstractBaseUser, token_id: int) -> WorkerToken:
    with transaction.atomic():
        if not WorkerToken.objects.filter(pk=token_id).exists():
            raise ApplicationError("not_found", "No such token.", status_code=404)
        token = worker_token_revoke(token_id=token_id)
        audit_record(
            actor=user,
            action="token.revoke",
            target=f"token:{token.pk}",
            details={"name": token.name, "prefix": token.prefix},
        )
        return token
