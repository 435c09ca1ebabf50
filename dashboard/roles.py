"""The dashboard's groups and what each may do; shared by the migration and the tests."""

from typing import Any

from review.models import AuditEntry

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
        "manage_audit",
        "manage_people",
    ],
}

# the permissions are declared once, on the model (AuditEntry.Meta.permissions)
PERMISSION_NAMES = {
    **dict(AuditEntry._meta.permissions),
    "view_auditentry": "Can view audit entry",
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


def groups_ensure_migration(apps: Any, schema_editor: Any) -> None:
    """RunPython: the groups and today's permissions, on a migration's historical models."""
    groups_ensure(
        group_model=apps.get_model("auth", "Group"),
        permission_model=apps.get_model("auth", "Permission"),
        content_type_model=apps.get_model("contenttypes", "ContentType"),
    )


def permission_drop_migration(codename: str) -> Any:
    """RunPython's reverse for a migration that added the permission review.<codename>."""

    def drop(apps: Any, schema_editor: Any) -> None:
        apps.get_model("auth", "Permission").objects.filter(
            content_type__app_label="review", codename=codename
        ).delete()

    return drop


def groups_ensure_now() -> None:
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType

    groups_ensure(group_model=Group, permission_model=Permission, content_type_model=ContentType)
