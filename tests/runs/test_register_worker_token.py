"""A deployment chooses its worker's token (compose.yaml's INTENTLEDGER_TOKEN) and its one-shot
registers it at every start: once, and never again once revoked."""

import io

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from runs.models import WorkerToken
from runs.tokens import worker_token_revoke

CHOSEN = "alw_chosen-by-the-deployment-0123456789"


def register(monkeypatch: pytest.MonkeyPatch, raw: str | None = CHOSEN) -> str:
    if raw is None:
        monkeypatch.delenv("INTENTLEDGER_TOKEN", raising=False)
    else:
        monkeypatch.setenv("INTENTLEDGER_TOKEN", raw)
    out = io.StringIO()
    call_command("register_worker_token", "compose-worker", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_a_token_registered_twice_is_one_token_that_works(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "Registered worker token 'compose-worker'" in register(monkeypatch)
    assert "registered already" in register(monkeypatch)
    assert WorkerToken.objects.filter(name="compose-worker").count() == 1
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {CHOSEN}")
    assert client.get("/api/v1/runs/").status_code == 200
    assert CHOSEN not in str(list(WorkerToken.objects.values()))  # only its hash is kept


@pytest.mark.django_db
def test_a_revoked_token_is_not_registered_again(monkeypatch: pytest.MonkeyPatch) -> None:
    register(monkeypatch)
    worker_token_revoke(token_id=WorkerToken.objects.get(name="compose-worker").pk)
    with pytest.raises(CommandError, match="was revoked"):
        register(monkeypatch)
    assert WorkerToken.objects.get(name="compose-worker").revoked_at is not None


@pytest.mark.django_db
def test_no_token_or_a_short_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CommandError, match="not set"):
        register(monkeypatch, None)
    with pytest.raises(CommandError, match="at least 24"):
        register(monkeypatch, "short")
    assert not WorkerToken.objects.exists()
