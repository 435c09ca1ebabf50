"""Seed the knowledge base the support agent searches (kb.search): a dozen real-looking articles."""

from django.db import migrations

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
    dependencies = [("tools", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
