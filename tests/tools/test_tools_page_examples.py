"""docs/tools.md's two examples run as written: a registered write tool behind the gateway, and a
function of one's own behind a view of one's own, each at most once per key."""

import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.urls import path
from rest_framework.test import APIClient

from tests.doc_examples import doc_example
from tools.models import IdempotencyKey, KeyStatus, Ticket
from tools.registry import ToolContext, tool_get, tool_unregister

pytestmark = pytest.mark.django_db

ADDING_A_TOOL = doc_example("docs/tools.md", "## Adding a tool")
TOOL_SERVICE = doc_example("docs/tools.md", "## A tool service of your own")


@pytest.fixture
def refund_request_tool() -> Iterator[None]:
    """The page's tool, registered by running the page's code; gone from the registry after."""
    exec(compile(ADDING_A_TOOL.code, ADDING_A_TOOL.doc, "exec"), {"__name__": "docs_tools"})  # noqa: S102
    yield
    tool_unregister(name="billing.refund_request")


def test_the_tool_of_the_page_writes_one_ticket_for_two_invokes_with_one_key(
    refund_request_tool: None, invoke: Callable[..., Any]
) -> None:
    arguments = {"customer": "ada@example.com", "invoice": "INV-7"}
    first = invoke("billing.refund_request", arguments, key="refund-INV-7")
    again = invoke("billing.refund_request", arguments, key="refund-INV-7")

    assert first.status_code == 200, first.content
    assert (again.status_code, again.headers["Idempotent-Replayed"]) == (200, "true")
    assert again.json() == first.json()
    ticket = Ticket.objects.get()
    assert first.json()["result"] == {"ticket": {"id": ticket.pk}}
    assert (ticket.subject, ticket.created_by_key) == ("Refund INV-7", "refund-INV-7")
    # as the page says: outside the key services the registered callable refuses to run
    context = ToolContext(tool="billing.refund_request", idempotency_key="k", actor="test")
    with pytest.raises(RuntimeError, match="outside idempotency enforcement"):
        tool_get(name="billing.refund_request").fn(arguments, context)
    assert Ticket.objects.count() == 1


def test_an_unknown_argument_is_refused_before_the_tool_runs(
    refund_request_tool: None, invoke: Callable[..., Any]
) -> None:
    refused = invoke(
        "billing.refund_request",
        {"customer": "ada@example.com", "invoice": "INV-7", "amount_cents": 100},
        key="refund-INV-7",
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["details"]["arguments"] == {"amount_cents": ["Unknown field."]}
    assert not Ticket.objects.exists() and not IdempotencyKey.objects.exists()


@pytest.fixture
def notify_service(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's function and view, served at /notify by a URLconf of this test's own."""
    namespace: dict[str, Any] = {"__name__": "docs_tool_service"}
    exec(compile(TOOL_SERVICE.code, TOOL_SERVICE.doc, "exec"), namespace)  # noqa: S102
    urls = types.ModuleType("docs_tool_service_urls")
    urls.urlpatterns = [path("notify", namespace["notify_view"])]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, urls.__name__, urls)
    settings.ROOT_URLCONF = urls.__name__


def test_the_service_of_the_page_mails_once_per_key_and_refuses_other_text_under_it(
    notify_service: None, direct_api: APIClient, mailoutbox: list[Any]
) -> None:
    def post(text: str) -> Any:
        body = {"to": "ada@example.com", "text": text}
        return direct_api.post("/notify", body, format="json", headers={"Idempotency-Key": "n-1"})

    first, again = post("Refunded."), post("Refunded.")
    assert first.status_code == 200, first.content
    assert "Idempotent-Replayed" not in first.headers
    assert (again.status_code, again.headers["Idempotent-Replayed"]) == (200, "true")
    assert again.json() == first.json() == {"result": {"message_id": "<n-1@notify.example.com>"}}
    assert len(mailoutbox) == 1
    assert mailoutbox[0].extra_headers["Message-ID"] == "<n-1@notify.example.com>"

    other = post("Refunded twice?")
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert len(mailoutbox) == 1
    row = IdempotencyKey.objects.get()
    assert (row.key, row.tool, row.state) == ("n-1", "notify.email", KeyStatus.COMPLETED)
