"""Worker token services: create (the raw token is returned once), revoke."""

from django.db import transaction
from django.utils import timezone

from runs.authentication import forget_principal, generate_token, hash_token
from runs.models import WorkerToken


@transaction.atomic
def worker_token_create(
    *, name: str, created_by: str = "", scope: str = "worker"
) -> tuple[WorkerToken, str]:
    raw = generate_token()
    token = WorkerToken.objects.create(
        name=name, prefix=raw[:10], token_hash=hash_token(raw), scope=scope, created_by=created_by
    )
    return token, raw


@transaction.atomic
def worker_token_revoke(*, token_id: int) -> WorkerToken:
    token = WorkerToken.objects.select_for_update().get(pk=token_id)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    forget_principal(token.token_hash)  # this process at once; the others within a second
    return token
