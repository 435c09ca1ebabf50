"""The built-in support-desk tools (docs/api.md, "Tool gateway"), acting on real tables.

Write tools run inside the key's completion transaction (tools.idempotency): their rows commit
with the key or not at all, and each row carries the key under a unique constraint. An external
effect (SMTP) comes after the tool's own rows, so a constraint refusal happens before anything
leaves the process.
"""

import hashlib
from typing import Any

from django.conf import settings
from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank, SearchVector
from django.core.mail import EmailMessage
from django.db.models import Q
from django.forms.models import model_to_dict
from rest_framework import serializers

from runs import clock
from runs.constants import Effect
from tools.idempotency import ToolError
from tools.models import KnowledgeArticle, OutboundEmail, Ticket, TicketComment, TicketStatus
from tools.registry import StrictArguments, ToolContext, tool

SEARCH_CONFIG = "english"
MAX_ID = 2**63 - 1  # a bigint primary key


# what the tools answer of a ticket (not its body)
TICKET_FIELDS = ("id", "customer", "subject", "status")


def _ticket(ticket_id: int, *, lock: bool = False) -> Ticket:
    queryset = Ticket.objects.select_for_update() if lock else Ticket.objects.all()
    ticket = queryset.filter(pk=ticket_id).first()
    if ticket is None:
        raise ToolError(
            "ticket_not_found",
            f"No ticket {ticket_id}.",
            status_code=404,
            details={"ticket_id": ticket_id},
        )
    return ticket


def _key(context: ToolContext) -> str:
    assert context.idempotency_key is not None, "write tools run under a key"
    return context.idempotency_key


# --- read -------------------------------------------------------------------------------------


class KbSearchArguments(StrictArguments):
    query = serializers.CharField(max_length=500)
    limit = serializers.IntegerField(min_value=1, max_value=20, default=5)


@tool("kb.search", effect=Effect.READ, arguments=KbSearchArguments)
def kb_search(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Full-text search of the knowledge base (PostgreSQL websearch syntax), best first."""
    query = SearchQuery(arguments["query"], search_type="websearch", config=SEARCH_CONFIG)
    vector = SearchVector("title", weight="A", config=SEARCH_CONFIG) + SearchVector(
        "body", weight="B", config=SEARCH_CONFIG
    )
    articles = (
        KnowledgeArticle.objects.annotate(search=vector)
        .filter(search=query)
        .annotate(
            rank=SearchRank(vector, query),
            snippet=SearchHeadline(
                "body",
                query,
                config=SEARCH_CONFIG,
                start_sel="",
                stop_sel="",
                min_words=12,
                max_words=30,
            ),
        )
        .order_by("-rank", "pk")[: arguments["limit"]]
    )
    return {"articles": [{"id": a.pk, "title": a.title, "snippet": a.snippet} for a in articles]}


class TicketsSearchArguments(StrictArguments):
    customer = serializers.EmailField(required=False)
    status = serializers.ChoiceField(choices=TicketStatus.choices, required=False)
    query = serializers.CharField(max_length=500, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=50, default=20)


@tool("tickets.search", effect=Effect.READ, arguments=TicketsSearchArguments)
def tickets_search(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Tickets by customer, status and words in the subject or body, newest first."""
    tickets = Ticket.objects.all()
    if "customer" in arguments:
        tickets = tickets.filter(customer__iexact=arguments["customer"])
    if "status" in arguments:
        tickets = tickets.filter(status=arguments["status"])
    if arguments.get("query"):
        text = arguments["query"]
        tickets = tickets.filter(Q(subject__icontains=text) | Q(body__icontains=text))
    newest = tickets.order_by("-created_at", "-pk").values(*TICKET_FIELDS)
    return {"tickets": list(newest[: arguments["limit"]])}


# --- write ------------------------------------------------------------------------------------


class TicketsCreateArguments(StrictArguments):
    customer = serializers.EmailField()
    subject = serializers.CharField(max_length=200)
    body = serializers.CharField(max_length=20_000)


@tool("tickets.create", effect=Effect.WRITE, arguments=TicketsCreateArguments)
def tickets_create(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Open a ticket for a customer."""
    ticket = Ticket.objects.create(
        customer=arguments["customer"],
        subject=arguments["subject"],
        body=arguments["body"],
        created_by_key=_key(context),
    )
    return {"ticket": model_to_dict(ticket, fields=TICKET_FIELDS)}


class TicketsCommentArguments(StrictArguments):
    ticket_id = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    body = serializers.CharField(max_length=20_000)


@tool("tickets.comment", effect=Effect.WRITE, arguments=TicketsCommentArguments)
def tickets_comment(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Add a comment to a ticket (open or closed)."""
    ticket = _ticket(arguments["ticket_id"])
    comment = TicketComment.objects.create(
        ticket=ticket, body=arguments["body"], idempotency_key=_key(context)
    )
    return {"comment": {"id": comment.pk, "ticket_id": ticket.pk}}


class TicketsCloseArguments(StrictArguments):
    ticket_id = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    resolution = serializers.CharField(max_length=20_000)


@tool("tickets.close", effect=Effect.WRITE, arguments=TicketsCloseArguments)
def tickets_close(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Close an open ticket with its resolution; closing a closed ticket is refused (409)."""
    ticket = _ticket(arguments["ticket_id"], lock=True)
    if ticket.status == TicketStatus.CLOSED:
        raise ToolError(
            "ticket_already_closed",
            f"Ticket {ticket.pk} is already closed.",
            status_code=409,
            details={"ticket_id": ticket.pk},
        )
    ticket.status = TicketStatus.CLOSED
    ticket.resolution = arguments["resolution"]
    ticket.closed_by_key = _key(context)
    ticket.closed_at = clock.now()
    ticket.save(update_fields=["status", "resolution", "closed_by_key", "closed_at"])
    return {"ticket": {"id": ticket.pk, "status": ticket.status}}


class EmailSendArguments(StrictArguments):
    to = serializers.EmailField()
    subject = serializers.CharField(max_length=300)
    body = serializers.CharField(max_length=100_000)
    ticket_id = serializers.IntegerField(
        min_value=1, max_value=MAX_ID, required=False, allow_null=True
    )


def message_id_for(key: str) -> str:
    """The Message-ID of the email sent under `key`: stable, so receivers can dedupe on it too."""
    domain = settings.DEFAULT_FROM_EMAIL.rpartition("@")[2] or "intentledger.local"
    return f"<{hashlib.sha256(key.encode('utf-8')).hexdigest()[:40]}@{domain}>"


@tool("email.send", effect=Effect.WRITE, arguments=EmailSendArguments)
def email_send(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Send an email through Django's mail backend, recorded as an OutboundEmail row."""
    key = _key(context)
    ticket = _ticket(arguments["ticket_id"]) if arguments.get("ticket_id") else None
    message_id = message_id_for(key)
    row = OutboundEmail.objects.create(
        to=arguments["to"],
        subject=arguments["subject"],
        body=arguments["body"],
        ticket=ticket,
        message_id=message_id,
        idempotency_key=key,
    )
    headers = {"Message-ID": message_id}
    if ticket is not None:
        headers["X-Ticket-ID"] = str(ticket.pk)
    message = EmailMessage(
        subject=arguments["subject"],
        body=arguments["body"],
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[arguments["to"]],
        headers=headers,
    )
    message.send(fail_silently=False)
    return {"email": {"id": row.pk, "message_id": message_id}}


class NoopArguments(StrictArguments):
    payload = serializers.JSONField(required=False, allow_null=True)


@tool("bench.noop", effect=Effect.WRITE, arguments=NoopArguments)
def bench_noop(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """A write tool that does nothing: measures the gateway's own overhead (bench/)."""
    return {"ok": True}
