"""The tools app at 0.1.0, squashed, with the knowledge base the support agent searches
(kb.search): a dozen real-looking articles. A database that applied the old chain (`replaces`)
marks this one applied."""

import django.db.models.deletion
from django.db import migrations, models

ARTICLES = [
    (
        "reset-password",
        "Resetting a forgotten password",
        "Customers who forgot their password can reset it from the sign-in page: choose "
        "'Forgot password', enter the account email, and follow the link we send. The reset link "
        "expires after 30 minutes and works once. If the email does not arrive within 10 minutes, "
        "check the spam folder, then confirm the address on file; support can resend the link but "
        "never sets a password on the customer's behalf.",
    ),
    (
        "refund-policy",
        "Refund policy and how to request a refund",
        "Annual and monthly plans can be refunded in full within 14 days of the charge. After 14 "
        "days we refund the unused part of an annual plan, pro rata, on request. Refunds go back "
        "to the original payment method and take 5 to 10 business days to appear. Support opens a "
        "refund ticket with the invoice number; a second refund for the same invoice is refused.",
    ),
    (
        "double-charge",
        "I was charged twice",
        "A duplicate charge is usually a pending authorisation that your bank releases within 3 "
        "business days. If both charges settled, open a billing ticket with both transaction ids: "
        "we refund the duplicate charge the same day and email a confirmation. Never ask the "
        "customer for the full card number.",
    ),
    (
        "change-plan",
        "Upgrading or downgrading a plan",
        "Plan changes take effect immediately. An upgrade is charged pro rata for the rest of the "
        "billing period; a downgrade becomes a credit on the next invoice. Seats above the new "
        "plan's limit are deactivated, newest first, and their data is kept for 30 days.",
    ),
    (
        "cancel-subscription",
        "Cancelling a subscription",
        "Owners cancel from Billing > Subscription > Cancel. The account stays active until the "
        "end of the paid period, then becomes read-only for 60 days before deletion. Exports "
        "remain available while read-only. Cancellation does not refund the current period unless "
        "the refund policy applies.",
    ),
    (
        "two-factor-lost-device",
        "Lost the device used for two-factor authentication",
        "Customers who lost their authenticator device sign in with one of the ten recovery codes "
        "they saved when enabling two-factor authentication. Without a recovery code, support "
        "verifies identity (billing details and a signed request from the account owner) before "
        "disabling two-factor; this takes up to 2 business days.",
    ),
    (
        "email-not-received",
        "Notification emails are not arriving",
        "Check that the address is verified under Profile > Email and that notifications are "
        "enabled. Corporate mail filters often quarantine our messages: ask IT to allow "
        "support@agentledger.local and our sending domain. Bounced addresses are suppressed after "
        "three hard bounces; support can lift the suppression once the address works again.",
    ),
    (
        "data-export",
        "Exporting your data",
        "Admins export everything as CSV or JSON Lines from Settings > Export. Large exports are "
        "prepared in the background and a download link is emailed when ready; links expire after "
        "7 days. Exports include audit logs and attachments metadata, not the attachments "
        "themselves.",
    ),
    (
        "invoice-vat",
        "Invoices, VAT numbers and billing address",
        "Invoices are issued on each charge and listed under Billing > Invoices as PDF. Add a VAT "
        "number and billing address before the charge: invoices already issued can be reissued "
        "once with corrected details on request. We cannot change the currency of an existing "
        "subscription.",
    ),
    (
        "api-rate-limits",
        "API rate limits and 429 errors",
        "The API allows 600 requests per minute per token. A 429 response carries Retry-After "
        "with the seconds to wait; clients should back off exponentially with jitter. Bulk "
        "endpoints count as one request per call. Higher limits are available on the Enterprise "
        "plan.",
    ),
    (
        "account-locked",
        "Account locked after failed sign-ins",
        "After ten failed sign-in attempts an account is locked for 15 minutes. The lock lifts by "
        "itself; a password reset also unlocks the account immediately. Repeated locks from "
        "unknown locations are reported to the account owner by email.",
    ),
    (
        "shipping-delay",
        "Order shipped late or tracking not updating",
        "Hardware orders ship within 2 business days. Tracking can take 24 hours to show the "
        "first scan. If tracking has not moved for 5 business days, open a shipping ticket with "
        "the order number: we open an investigation with the carrier and, after 10 business days, "
        "send a replacement at no cost.",
    ),
]


def seed(apps, schema_editor):
    KnowledgeArticle = apps.get_model("tools", "KnowledgeArticle")
    for slug, title, body in ARTICLES:
        KnowledgeArticle.objects.update_or_create(
            slug=slug, defaults={"title": title, "body": body}
        )


def unseed(apps, schema_editor):
    KnowledgeArticle = apps.get_model("tools", "KnowledgeArticle")
    KnowledgeArticle.objects.filter(slug__in=[slug for slug, _, _ in ARTICLES]).delete()


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("tools", "0002_seed_knowledge_base"),
        ("tools", "0003_idempotency_replay_count"),
        ("tools", "0004_idempotency_internal_error"),
        ("tools", "0005_mcp_tools_and_marks"),
        ("tools", "0006_trust_key_owner"),
    ]

    dependencies = [
        ("runs", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="KnowledgeArticle",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("slug", models.SlugField(max_length=100, unique=True)),
                ("title", models.CharField(max_length=200)),
                ("body", models.TextField()),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.CreateModel(
            name="McpTool",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("server", models.CharField(max_length=200)),
                ("name", models.CharField(max_length=200)),
                ("read_only_hint", models.BooleanField(default=False)),
                (
                    "mark",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("", "as the upstream hints"),
                            ("read", "read"),
                            ("write", "write"),
                        ],
                        default="",
                        max_length=5,
                    ),
                ),
                ("marked_by", models.CharField(blank=True, default="", max_length=150)),
                ("marked_at", models.DateTimeField(blank=True, null=True)),
                ("first_seen", models.DateTimeField()),
                ("last_seen", models.DateTimeField()),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("server", "name"), name="mcp_tool_server_name_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("mark__in", ["", "read", "write"])),
                        name="mcp_tool_mark_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("mark", ""),
                            models.Q(("marked_at__isnull", False), ("marked_by__gt", "")),
                            _connector="OR",
                        ),
                        name="mcp_tool_mark_has_who_and_when",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Ticket",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("customer", models.EmailField(max_length=254)),
                ("subject", models.CharField(max_length=200)),
                ("body", models.TextField()),
                (
                    "status",
                    models.CharField(
                        choices=[("open", "Open"), ("closed", "Closed")],
                        default="open",
                        max_length=10,
                    ),
                ),
                ("resolution", models.TextField(blank=True, default="")),
                ("created_by_key", models.CharField(blank=True, max_length=400, null=True)),
                ("closed_by_key", models.CharField(blank=True, max_length=400, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("closed_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "ordering": ["-created_at"],
                "indexes": [
                    models.Index(fields=["customer", "status"], name="ticket_customer_status_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("created_by_key",), name="ticket_created_by_key_unique"
                    ),
                    models.UniqueConstraint(
                        fields=("closed_by_key",), name="ticket_closed_by_key_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("status__in", ["open", "closed"])),
                        name="ticket_status_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("closed_at__isnull", True), ("status", "open")),
                            models.Q(("closed_at__isnull", False), ("status", "closed")),
                            _connector="OR",
                        ),
                        name="ticket_closed_has_closed_at",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="OutboundEmail",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("to", models.EmailField(max_length=254)),
                ("subject", models.CharField(max_length=300)),
                ("body", models.TextField()),
                ("message_id", models.CharField(max_length=200, unique=True)),
                ("idempotency_key", models.CharField(max_length=400, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "ticket",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to="tools.ticket",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="TicketComment",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("body", models.TextField()),
                ("idempotency_key", models.CharField(max_length=400, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "ticket",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="comments",
                        to="tools.ticket",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="IdempotencyKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=400, unique=True)),
                ("tool", models.CharField(max_length=200)),
                ("request_hash", models.CharField(max_length=64)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("in_progress", "In Progress"),
                            ("completed", "Completed"),
                            ("failed", "Failed"),
                        ],
                        max_length=20,
                    ),
                ),
                ("status_code", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("response", models.JSONField(blank=True, null=True)),
                ("attempt", models.PositiveIntegerField(default=1)),
                ("actor", models.CharField(blank=True, default="", max_length=200)),
                ("locked_at", models.DateTimeField()),
                ("created_at", models.DateTimeField()),
                ("completed_at", models.DateTimeField(blank=True, null=True)),
                ("replay_count", models.PositiveIntegerField(db_default=0, default=0)),
                ("internal_error", models.TextField(blank=True, db_default="", default="")),
                ("owner_agents", models.JSONField(blank=True, null=True)),
                (
                    "owner_token",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="runs.workertoken",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(("state", "in_progress"), _negated=True),
                        fields=["completed_at"],
                        name="idempotency_prunable_idx",
                    )
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("state__in", ["in_progress", "completed", "failed"])),
                        name="idempotency_state_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("state", "in_progress"),
                            models.Q(
                                ("completed_at__isnull", False), ("status_code__isnull", False)
                            ),
                            _connector="OR",
                        ),
                        name="idempotency_finished_has_response",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("owner_agents__isnull", True),
                            ("owner_token__isnull", False),
                            _connector="OR",
                        ),
                        name="idempotency_owner_agents_have_a_token",
                    ),
                ],
            },
        ),
        migrations.RunPython(seed, unseed),
    ]
