"""Escalation webhooks: adding, switching, removing and testing them, and delivering their posts
(signed, to public addresses only, within a deadline).

Lock precondition: none held by the caller. Changes to a webhook lock its row
(`_webhook_locked`) in their own transaction; a delivery takes no lock (it updates its own
delivery row with guarded counters) and must run outside any transaction: it waits on the network.
"""

import asyncio
import hashlib
import hmac
import ipaddress
import json
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import F

from dashboard.audit import audit_record
from review.models import EscalationWebhook, WebhookDelivery
from runs import clock
from runs.api_errors import ApplicationError, invalid


def webhook_signature(secret: str, body: bytes) -> str:
    """What X-Agent-Ledger-Signature carries: sha256=<hex HMAC-SHA256 of the body>."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def slack_escaped(text: str) -> str:
    """Text from a worker (a step's name, an agent's) as Slack shows it literally: `&`, `<`, `>`
    escaped as Slack's message formatting asks, so it cannot make a link or a `<!channel>`."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webhooks_notify(
    webhooks: list[EscalationWebhook], text: str, *, now: Any
) -> list[WebhookDelivery]:
    """Queue one delivery per webhook (Slack-compatible `{"text": …}`), sent after commit."""
    from review.tasks import deliver_webhook

    body = json.dumps({"text": text}, ensure_ascii=False, separators=(",", ":"))
    deliveries = []
    for webhook in webhooks:
        delivery = WebhookDelivery.objects.create(webhook=webhook, body=body, created_at=now)
        deliver_webhook.delay_on_commit(delivery.pk)  # type: ignore[attr-defined]
        deliveries.append(delivery)
    return deliveries


def _webhook_audit(
    user: AbstractBaseUser, action: str, webhook: EscalationWebhook, **details: Any
) -> None:
    """A change to a webhook in the audit log: `webhook.<action>`, with its URL."""
    audit_record(
        actor=user,
        action=f"webhook.{action}",
        target=f"webhook:{webhook.pk}",
        details={"url": webhook.url, **details},
    )


class WebhookFailed(Exception):
    """A delivery attempt failed (no answer, or not 2xx); Celery retries it with backoff."""


class WebhookTargetRefused(Exception):
    """A webhook's host is (or resolves to) a private, loopback or link-local address."""


def webhook_allow_private() -> bool:
    return bool(getattr(settings, "WEBHOOK_ALLOW_PRIVATE", False))


def _not_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return not address.is_global or address.is_multicast


def webhook_addresses(url: str) -> list[str]:
    """Every address the URL's host resolves to, each one public; WebhookTargetRefused when one
    is private, loopback, link-local or otherwise not global, or the host does not resolve.
    With WEBHOOK_ALLOW_PRIVATE nothing is checked (an empty list). Checked when a webhook is added and again at each delivery (the
    delivery connects to an address checked here: a DNS answer that changes in between, to
    reach an inside address, changes nothing)."""
    host = urlsplit(url).hostname or ""
    if not host:
        raise WebhookTargetRefused("The URL names no host.")
    if webhook_allow_private():
        return []  # any address will do: connect to the URL as it is
    port = urlsplit(url).port or (443 if url.lower().startswith("https") else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookTargetRefused(f"{host} does not resolve ({exc}).") from exc
    addresses = sorted({str(info[4][0]) for info in infos})
    private = [a for a in addresses if _not_public(ipaddress.ip_address(a.split("%")[0]))]
    if private:
        raise WebhookTargetRefused(
            f"{host} is a private, loopback or link-local address ({', '.join(private)}): "
            "webhooks go to public receivers (WEBHOOK_ALLOW_PRIVATE=1 allows others)."
        )
    return addresses


def webhook_delivery_seconds() -> float:
    return float(getattr(settings, "WEBHOOK_DELIVERY_SECONDS", 10))


def _post_by_deadline(url: str, body: bytes, headers: dict[str, str], seconds: float) -> int:
    """POST `body` and read the whole answer within `seconds` in all (connect, headers, body):
    a receiver that trickles its answer is cut off at the deadline. Connects to an address
    `webhook_addresses` checked (TLS still verifies the URL's host name). The status code."""
    import httpx

    parts = urlsplit(url)
    host = parts.hostname or ""
    addresses = webhook_addresses(url)
    target, sent_headers = url, dict(headers)
    if addresses:  # connect to the address checked, not to what DNS answers next
        pinned = f"[{addresses[0]}]" if ":" in addresses[0] else addresses[0]
        netloc = f"{pinned}:{parts.port}" if parts.port else pinned
        target = parts._replace(netloc=netloc).geturl()
        sent_headers["Host"] = parts.netloc.rsplit("@", 1)[-1]

    async def post() -> int:
        async with (
            # trust_env off: no HTTP_PROXY in between, the connection goes to the address checked
            httpx.AsyncClient(timeout=seconds, follow_redirects=False, trust_env=False) as client,
            client.stream(
                "POST",
                target,
                content=body,
                headers=sent_headers,
                extensions={"sni_hostname": host},
            ) as answer,
        ):
            async for _ in answer.aiter_raw():
                pass  # read (and drop) the whole answer, within the deadline
            return answer.status_code

    async def bounded() -> int:
        return await asyncio.wait_for(post(), timeout=seconds)

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # a Celery worker, a management command: no loop in this thread
        return asyncio.run(bounded())
    # called from code that runs a loop in this thread: a thread of its own for the delivery
    with ThreadPoolExecutor(max_workers=1) as delivery:
        return delivery.submit(asyncio.run, bounded()).result()


def webhook_deliver(*, delivery_id: int) -> bool:
    """POST one delivery, signed; True when the receiver answered 2xx (or it was delivered
    before). A failure is recorded and raised as WebhookFailed for the task to retry. The
    whole attempt has WEBHOOK_DELIVERY_SECONDS; a private target is refused (and retried: an
    admin may fix the URL or its DNS)."""
    import httpx

    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None or delivery.delivered_at is not None:
        return delivery is not None
    body = delivery.body.encode("utf-8")
    headers = {
        "Content-Type": "application/json",
        "X-Agent-Ledger-Signature": webhook_signature(delivery.webhook.secret, body),
        "X-Agent-Ledger-Delivery": str(delivery.pk),
    }
    WebhookDelivery.objects.filter(pk=delivery.pk).update(attempts=F("attempts") + 1)
    seconds = webhook_delivery_seconds()
    try:
        status = _post_by_deadline(delivery.webhook.url, body, headers, seconds)
        error = "" if 200 <= status < 300 else f"HTTP {status}"
    except TimeoutError:
        error = f"no complete answer within {seconds:g} s"
    except WebhookTargetRefused as exc:
        error = str(exc)[:500]
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
    if error:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(last_error=error)
        raise WebhookFailed(error)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(delivered_at=clock.now(), last_error="")
    return True


def escalation_webhook_add(*, user: AbstractBaseUser, url: str, secret: str) -> EscalationWebhook:
    if not url.startswith(("http://", "https://")):
        raise invalid("url", "A webhook URL starts with http:// or https://.", "Must be http(s).")
    try:
        webhook_addresses(url)
    except WebhookTargetRefused as exc:
        raise invalid("url", str(exc), "Not a public address.") from exc
    try:
        with transaction.atomic():
            webhook = EscalationWebhook.objects.create(
                url=url, secret=secret, created_by=user.get_username()
            )
            _webhook_audit(user, "create", webhook)
            return webhook
    except IntegrityError as exc:
        if "webhook_url_unique" not in str(exc):
            raise
        raise invalid(
            "url", "This URL has a webhook already: each escalation is posted once.", "Taken."
        ) from exc


def _webhook_locked(webhook_id: int) -> EscalationWebhook:
    webhook = EscalationWebhook.objects.select_for_update().filter(pk=webhook_id).first()
    if webhook is None:
        raise ApplicationError("not_found", "There is no such webhook.", status_code=404)
    return webhook


def escalation_webhook_set_active(
    *, user: AbstractBaseUser, webhook_id: int, active: bool
) -> EscalationWebhook:
    """Turn a webhook off (escalations are not posted to it) or on again; audited."""
    with transaction.atomic():
        webhook = _webhook_locked(webhook_id)
        if webhook.active != active:
            webhook.active = active
            webhook.save(update_fields=["active"])
            _webhook_audit(user, "enable" if active else "disable", webhook)
        return webhook


def escalation_webhook_delete(*, user: AbstractBaseUser, webhook_id: int) -> str:
    """Remove a webhook (its undelivered posts are dropped with it); audited. Its URL."""
    with transaction.atomic():
        webhook = _webhook_locked(webhook_id)
        url = webhook.url
        pending = WebhookDelivery.objects.filter(webhook=webhook, delivered_at__isnull=True)
        _webhook_audit(user, "delete", webhook, undelivered_dropped=pending.count())
        webhook.delete()
        return url


def escalation_webhook_test(*, user: AbstractBaseUser, webhook_id: int) -> WebhookDelivery:
    """Queue a signed test post to one webhook (on or off), delivered like an escalation;
    audited. The delivery shows on the page when it lands or fails."""
    with transaction.atomic():
        webhook = _webhook_locked(webhook_id)
        text = (
            f"Test from Agent Ledger, sent by {slack_escaped(user.get_username())}: "
            "escalations of review items waiting longer than the SLA are posted here."
        )
        [delivery] = webhooks_notify([webhook], text, now=clock.now())
        _webhook_audit(user, "test", webhook, delivery=delivery.pk)
        return delivery
