"""The dashboard's groups and what each may do; shared by the migration and the tests."""

from typing import Any

SUPERVISORS = "supervisors"
ADMINS = "admins"
AUDITORS = "auditors"

# permission codenames on review.AuditEntry
GROUP_PERMISSIONS: dict[str, list[str]] = {
    SUPERVISORS: ["browse", "resolve", "view_auditentry"],
    AUDITORS: ["browse", "export", "view_auditentry"],
    ADMINS: [
        "browse",
        "resolve",
        "raise_limits",
        "manage_policies",
        "manage_tokens",
        "export",
        "view_auditentry",
        "run_actions",
    ],
}

PERMISSION_NAMES = {
    "browse": "Browse runs, transcripts and the review queue",
    "resolve": "Resolve review items and claim them",
    "raise_limits": "Raise one run's limits",
    "manage_policies": "Create and edit budget policies",
    "manage_tokens": "Create and revoke worker tokens",
    "export": "Export journals",
    "view_auditentry": "Can view audit entry",
    "run_actions": "Cancel, fork and bulk-act on runs (the console)",
}


def groups_ensure(*, group_model: Any, permission_model: Any, content_type_model: Any) -> None:
    """Create the three groups with their permissions; idempotent (migrations, test fixtures)."""
    ct, _ = content_type_model.objects.get_or_create(app_label="review", model="auditentry")
    perms = {}
    for codename, name in PERMISSION_NAMES.items():
        perm, _ = permission_model.objects.get_or_create(
            content_type=ct, codename=codename, defaults={"name": name}
        )
        perms[codename] = perm
    for group_name, codenames in GROUP_PERMISSIONS.items():
        group, _ = group_model.objects.get_or_create(name=group_name)
        group.permissions.add(*[perms[c] for c in codenames])


def groups_ensure_now() -> None:
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType

    groups_ensure(group_model=Group, permission_model=Permission, content_type_model=ContentType)
