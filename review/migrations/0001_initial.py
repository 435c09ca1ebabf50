"""The review app at 0.1.0, squashed: the dashboard's groups with their permissions, an
append-only audit log, escalations keyed by their run. A database that applied the old chain
(`replaces`) marks this one applied."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

from dashboard.roles import groups_ensure_migration

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION review_audit_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('agentledger.purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'review_auditentry is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER review_audit_append_only
    BEFORE UPDATE OR DELETE ON review_auditentry
    FOR EACH ROW EXECUTE FUNCTION review_audit_append_only();
"""

# an escalation's key carries run_id (distributable by run_id with the journal)
ESCALATION_KEY = """
ALTER TABLE review_escalation DROP CONSTRAINT review_escalation_pkey;
ALTER TABLE review_escalation ADD CONSTRAINT review_escalation_pkey PRIMARY KEY (id, run_id);
"""


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("review", "0002_groups_and_append_only_audit"),
        ("review", "0003_escalation_webhooks"),
        ("review", "0004_escalation_names_its_run"),
        ("review", "0005_audit_admin_permission"),
        ("review", "0006_proxyhooks_webhook_url_unique"),
        ("review", "0008_oidc_people_permission"),
    ]

    dependencies = [
        ("runs", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.CreateModel(
            name="EscalationWebhook",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("url", models.URLField(max_length=500)),
                ("secret", models.CharField(max_length=200)),
                ("active", models.BooleanField(default=True)),
                ("created_by", models.CharField(blank=True, default="", max_length=150)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["created_at"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            ("url__startswith", "http://"),
                            ("url__startswith", "https://"),
                            _connector="OR",
                        ),
                        name="webhook_url_is_http",
                    ),
                    models.UniqueConstraint(fields=("url",), name="webhook_url_unique"),
                ],
            },
        ),
        migrations.CreateModel(
            name="LoginFailure",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("username", models.CharField(max_length=150)),
                ("ip", models.GenericIPAddressField()),
                ("failures", models.PositiveIntegerField(default=0)),
                ("first_failure_at", models.DateTimeField()),
                ("locked_until", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("username", "ip"), name="login_failure_unique_pair"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ("actor_name", models.CharField(max_length=150)),
                ("action", models.CharField(max_length=60)),
                ("target", models.CharField(blank=True, default="", max_length=300)),
                ("note", models.TextField(blank=True, default="")),
                ("details", models.JSONField(blank=True, default=dict)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-at", "-id"],
                "permissions": [
                    ("browse", "Browse runs, transcripts and the review queue"),
                    ("resolve", "Resolve review items and claim them"),
                    ("raise_limits", "Raise one run's limits"),
                    ("manage_policies", "Create and edit budget policies"),
                    ("manage_tokens", "Create and revoke worker tokens"),
                    ("export", "Export journals"),
                    ("run_actions", "Cancel, fork and bulk-act on runs (the console)"),
                    (
                        "manage_audit",
                        "Sign checkpoints, acknowledge alerts, set retention, see all exports",
                    ),
                    (
                        "manage_people",
                        "See everyone who can sign in, create local users, deactivate",
                    ),
                ],
                "indexes": [
                    models.Index(fields=["action", "-at"], name="audit_action_at_idx"),
                    models.Index(fields=["actor_name", "-at"], name="audit_actor_at_idx"),
                    models.Index(fields=["target"], name="audit_target_idx"),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("action", ""), _negated=True),
                        name="audit_action_not_empty",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("actor_name", ""), _negated=True),
                        name="audit_actor_not_empty",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Escalation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("sent_at", models.DateTimeField()),
                ("recipients", models.JSONField(default=list)),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="runs.run"
                    ),
                ),
                (
                    "step",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.step",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("step__isnull", False)),
                        fields=("step", "run"),
                        name="escalation_once_per_step",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("step__isnull", True)),
                        fields=("run",),
                        name="escalation_once_per_review_run",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="WebhookDelivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("body", models.TextField()),
                ("created_at", models.DateTimeField()),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("delivered_at", models.DateTimeField(blank=True, null=True)),
                ("last_error", models.CharField(blank=True, default="", max_length=500)),
                (
                    "webhook",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="review.escalationwebhook",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(("delivered_at__isnull", True)),
                        fields=["created_at"],
                        name="webhook_undelivered_idx",
                    )
                ],
            },
        ),
        migrations.RunSQL(APPEND_ONLY),
        migrations.RunSQL(ESCALATION_KEY),
        migrations.RunPython(groups_ensure_migration, migrations.RunPython.noop),
    ]
