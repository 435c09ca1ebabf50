"""The admins' people page: everyone who can sign in, local users made and regrouped there,
anyone deactivated there (their sessions end at once)."""

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.contrib.sessions.models import Session
from django.test import Client

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from sso.services import sso_sign_in
from tests.review.factories import PASSWORD, user_in
from tests.sso.test_sso_sign_in import ISSUER, claims, conf

pytestmark = pytest.mark.django_db


def admin_client() -> Client:
    client = Client()
    client.force_login(user_in(ADMINS, "ada"))
    return client


def told(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_only_admins_see_the_people_page(groups):
    for group in (SUPERVISORS, AUDITORS, None):
        client = Client()
        client.force_login(user_in(group, f"user-{group}"))
        assert client.get("/people/").status_code == 403
        assert client.post("/people/new", {"username": "x"}).status_code == 403
    client = admin_client()
    assert b'href="/people/"' in client.get("/").content  # in the admin's menu


def test_the_page_lists_everyone_with_groups_and_source(groups):
    sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("kc-7", "ledger-audit"))
    user_in(SUPERVISORS, "sam")
    page = admin_client().get("/people/").content.decode()
    assert 'data-user="kc-7"' in page and "sub kc-7" in page
    assert 'data-user="sam"' in page
    # a local user's groups are a form; a provider user's are read-only
    assert page.count('action="/people/') >= 2


def test_an_admin_creates_a_local_user_who_can_then_sign_in(groups):
    client = admin_client()
    response = client.post(
        "/people/new",
        {
            "username": "breakglass",
            "email": "ops@example.com",
            "password": "a-long-enough-passphrase-71",
            "groups": [ADMINS],
        },
    )
    assert response.status_code == 302
    assert told(response) == ["Local user breakglass created."]
    user = User.objects.get(username="breakglass")
    assert set(user.groups.values_list("name", flat=True)) == {ADMINS}
    entry = AuditEntry.objects.get(action="people.create")
    assert entry.actor_name == "ada" and entry.details["groups"] == [ADMINS]
    other = Client()
    assert (
        other.post(
            "/login/", {"username": "breakglass", "password": "a-long-enough-passphrase-71"}
        ).status_code
        == 302
    )
    # a weak password or a taken name is refused, with the reason
    response = client.post("/people/new", {"username": "weak", "password": "12345678"})
    assert not User.objects.filter(username="weak").exists()
    assert "too common" in " ".join(told(response))
    response = client.post(
        "/people/new", {"username": "BreakGlass", "password": "a-long-enough-passphrase-71"}
    )
    assert "taken" in " ".join(told(response))
    response = client.post(
        "/people/new", {"username": "no spaces", "password": "a-long-enough-passphrase-71"}
    )
    assert not User.objects.filter(username="no spaces").exists()


def test_a_local_users_groups_change_and_a_provider_users_do_not(groups):
    client = admin_client()
    sam = user_in(SUPERVISORS, "sam")
    client.post(f"/people/{sam.pk}/groups", {"groups": [AUDITORS, SUPERVISORS]})
    assert set(sam.groups.values_list("name", flat=True)) == {AUDITORS, SUPERVISORS}
    change = AuditEntry.objects.get(action="people.groups")
    assert change.details["added"] == [AUDITORS] and change.details["removed"] == []

    kc = sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("kc-1", "ledger-audit")).user
    response = client.post(f"/people/{kc.pk}/groups", {"groups": [ADMINS]})
    assert "come from the identity provider" in " ".join(told(response))
    assert set(kc.groups.values_list("name", flat=True)) == {AUDITORS}


def test_deactivating_someone_ends_their_sessions_now(groups):
    admin = admin_client()
    sam = user_in(SUPERVISORS, "sam")
    sams_browser, sams_laptop = Client(), Client()
    for client in (sams_browser, sams_laptop):
        client.post("/login/", {"username": "sam", "password": PASSWORD})
        assert client.get("/").status_code == 200
    response = admin.post(f"/people/{sam.pk}/deactivate")
    assert told(response) == ["sam deactivated; 2 session(s) ended."]
    for client in (sams_browser, sams_laptop):
        assert client.get("/").status_code == 302
    assert not [
        s for s in Session.objects.all() if s.get_decoded().get("_auth_user_id") == str(sam.pk)
    ]
    assert Client().post("/login/", {"username": "sam", "password": PASSWORD}).status_code == 200
    entry = AuditEntry.objects.get(action="people.deactivate")
    assert entry.details == {"username": "sam", "sessions_ended": 2}
    # a provider's user too: the provider's next word does not bring them back
    kc = sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("kc-2", "ledger-sup")).user
    admin.post(f"/people/{kc.pk}/deactivate")
    with pytest.raises(Exception, match="deactivated"):
        sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("kc-2", "ledger-sup"))
    # and back
    admin.post(f"/people/{sam.pk}/reactivate")
    assert Client().post("/login/", {"username": "sam", "password": PASSWORD}).status_code == 302


def test_an_admin_cannot_deactivate_themselves(groups):
    client = admin_client()
    ada = User.objects.get(username="ada")
    response = client.post(f"/people/{ada.pk}/deactivate")
    assert told(response) == ["You cannot deactivate yourself."]
    assert User.objects.get(pk=ada.pk).is_active


def test_a_person_added_changed_or_deleted_in_djangos_admin_is_audited(groups):
    root = User.objects.create_superuser("root", "root@example.com", PASSWORD)
    client = Client()
    client.force_login(root)
    added = client.post(
        "/django-admin/auth/user/add/",
        {
            "username": "eve",
            "password1": PASSWORD,
            "password2": PASSWORD,
            "usable_password": "true",
        },
    )
    assert added.status_code == 302, added.content.decode()[:2000]
    eve = User.objects.get(username="eve")
    [created] = AuditEntry.objects.filter(action="people.create", target=f"user:{eve.pk}")
    assert created.actor_name == "root" and created.details["source"] == "django-admin"
    assert PASSWORD not in str(created.details)

    supervisors = eve.groups.model.objects.get(name=SUPERVISORS)
    changed = client.post(
        f"/django-admin/auth/user/{eve.pk}/change/",
        {
            "username": "eve",
            "is_active": "on",
            "is_superuser": "on",
            "groups": [supervisors.pk],
            "last_login_0": "",
            "last_login_1": "",
            "date_joined_0": "2026-12-01",
            "date_joined_1": "10:00:00",
        },
    )
    assert changed.status_code == 302, changed.content.decode()[:2000]
    [change] = AuditEntry.objects.filter(action="people.change", target=f"user:{eve.pk}")
    assert change.details["superuser"] is True and change.details["groups"] == [SUPERVISORS]
    assert {"is_superuser", "groups"} <= set(change.details["changed"])

    new_password = PASSWORD + "-2"
    reset = client.post(
        f"/django-admin/auth/user/{eve.pk}/password/",
        {"password1": new_password, "password2": new_password, "usable_password": "true"},
    )
    assert reset.status_code == 302, reset.content.decode()[:2000]
    [password] = AuditEntry.objects.filter(action="people.password", target=f"user:{eve.pk}")
    assert password.actor_name == "root" and new_password not in str(password.details)

    deleted = client.post(f"/django-admin/auth/user/{eve.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    [gone] = AuditEntry.objects.filter(action="people.delete", target=f"user:{eve.pk}")
    assert gone.details["username"] == "eve"
