"""The support-desk tools on real tables: a ticket's life, the knowledge base, outbound email."""

import importlib
from typing import Any

import pytest
from django.apps import apps
from django.core import mail
from django.db import IntegrityError, transaction

from tools.models import KnowledgeArticle, OutboundEmail, Ticket, TicketComment
from tools.support import message_id_for

pytestmark = pytest.mark.django_db


def _seed_knowledge_base() -> None:
    """transactional_db tests elsewhere truncate the seeded rows; put them back if so."""
    if not KnowledgeArticle.objects.exists():
        importlib.import_module("tools.migrations.0001_initial").seed(apps, None)


def test_a_ticket_is_created_commented_searched_and_closed_once(invoke: Any) -> None:
    created = invoke(
        "tickets.create",
        {"customer": "grace@example.com", "subject": "Locked out", "body": "2FA phone lost"},
        key="run:0:tickets.create:a",
    ).json()["result"]["ticket"]
    ticket_id = created["id"]

    comment = invoke(
        "tickets.comment",
        {"ticket_id": ticket_id, "body": "Sent recovery steps."},
        key="run:1:tickets.comment:b",
    )
    assert comment.status_code == 200
    assert comment.json()["result"]["comment"]["ticket_id"] == ticket_id

    found = invoke("tickets.search", {"customer": "GRACE@example.com", "query": "locked"})
    assert found.json()["result"]["tickets"] == [created]

    closed = invoke(
        "tickets.close",
        {"ticket_id": ticket_id, "resolution": "Recovery code used."},
        key="run:2:tickets.close:c",
    )
    assert closed.json() == {"result": {"ticket": {"id": ticket_id, "status": "closed"}}}
    again = invoke(
        "tickets.close",
        {"ticket_id": ticket_id, "resolution": "Once more."},
        key="run:3:tickets.close:d",
    )
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "ticket_already_closed"

    ticket = Ticket.objects.get()
    assert (ticket.status, ticket.resolution, ticket.closed_by_key) == (
        "closed",
        "Recovery code used.",
        "run:2:tickets.close:c",
    )
    assert TicketComment.objects.get().idempotency_key == "run:1:tickets.comment:b"
    assert invoke("tickets.search", {"status": "open"}).json()["result"]["tickets"] == []


def test_email_send_uses_the_mail_backend_with_a_message_id_from_the_key(invoke: Any) -> None:
    ticket = Ticket.objects.create(customer="lin@example.com", subject="Refund", body="Please")
    key = "run:4:email.send:e"
    response = invoke(
        "email.send",
        {
            "to": "lin@example.com",
            "subject": "Your refund",
            "body": "Refunded in full.",
            "ticket_id": ticket.pk,
        },
        key=key,
    )
    assert response.status_code == 200, response.content
    email = response.json()["result"]["email"]
    assert email["message_id"] == message_id_for(key)
    assert len(mail.outbox) == 1
    sent = mail.outbox[0].message()
    assert sent["Message-ID"] == message_id_for(key)
    assert sent["X-Ticket-ID"] == str(ticket.pk)
    row = OutboundEmail.objects.get()
    assert (row.pk, row.idempotency_key, row.ticket_id, row.to) == (
        email["id"],
        key,
        ticket.pk,
        "lin@example.com",
    )
    replay = invoke(
        "email.send",
        {
            "to": "lin@example.com",
            "subject": "Your refund",
            "body": "Refunded in full.",
            "ticket_id": ticket.pk,
        },
        key=key,
    )
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert len(mail.outbox) == 1
    assert OutboundEmail.objects.count() == 1


def test_email_to_an_unknown_ticket_sends_nothing(invoke: Any) -> None:
    response = invoke(
        "email.send",
        {"to": "x@example.com", "subject": "s", "body": "b", "ticket_id": 987654},
        key="k-email-no-ticket",
    )
    assert response.status_code == 404
    assert mail.outbox == []
    assert OutboundEmail.objects.count() == 0


def test_the_business_rows_refuse_a_second_row_for_one_key(db: Any) -> None:
    """Even a bug in the key layer cannot make a second email or ticket for one key."""
    OutboundEmail.objects.create(
        to="a@example.com", subject="s", body="b", message_id="<m1@x>", idempotency_key="k"
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        OutboundEmail.objects.create(
            to="a@example.com", subject="s", body="b", message_id="<m2@x>", idempotency_key="k"
        )
    Ticket.objects.create(customer="a@example.com", subject="s", body="b", created_by_key="t")
    with pytest.raises(IntegrityError), transaction.atomic():
        Ticket.objects.create(customer="a@example.com", subject="s", body="b", created_by_key="t")


def test_the_knowledge_base_is_seeded_and_searched_best_first(invoke: Any) -> None:
    _seed_knowledge_base()
    assert KnowledgeArticle.objects.count() >= 12
    response = invoke("kb.search", {"query": "forgot password reset link", "limit": 3})
    assert response.status_code == 200
    articles = response.json()["result"]["articles"]
    assert articles[0]["title"] == "Resetting a forgotten password"
    assert "reset" in articles[0]["snippet"].lower()
    assert set(articles[0]) == {"id", "title", "snippet"}
    refund = invoke("kb.search", {"query": "charged twice refund"}).json()["result"]["articles"]
    assert "I was charged twice" in [a["title"] for a in refund]
    assert invoke("kb.search", {"query": "zzzqqq"}).json() == {"result": {"articles": []}}
    assert invoke("kb.search", {"query": "x", "limit": 0}).status_code == 400
