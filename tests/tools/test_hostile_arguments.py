"""Hostile arguments for every tool: a clear 400 with field details, never a 500, no key used."""

from typing import Any

import pytest

from tools.models import IdempotencyKey, Ticket
from tools.registry import tool_get, tools_list

pytestmark = pytest.mark.django_db

HOSTILE: list[Any] = [
    None,
    True,
    -1,
    0,
    2**64,
    1.5,
    1e308,
    "",
    " ",
    "x" * 200_001,
    "\u202e\ufeff🙂",
    [],
    ["a"],
    {},
    {"$gt": ""},
]

VALID: dict[str, dict[str, Any]] = {
    "kb.search": {"query": "password", "limit": 3},
    "tickets.search": {"customer": "a@example.com", "status": "open", "query": "x", "limit": 5},
    "tickets.create": {"customer": "a@example.com", "subject": "s", "body": "b"},
    "tickets.comment": {"ticket_id": 1, "body": "b"},
    "tickets.close": {"ticket_id": 1, "resolution": "done"},
    "email.send": {"to": "a@example.com", "subject": "s", "body": "b", "ticket_id": 1},
    "bench.noop": {"payload": {"n": 1}},
}


def test_every_builtin_tool_has_a_valid_example() -> None:
    assert {t.name for t in tools_list()} <= set(VALID)


@pytest.mark.parametrize("tool", sorted(VALID))
def test_every_argument_of_every_tool_survives_hostile_values(invoke: Any, tool: str) -> None:
    ticket = Ticket.objects.create(customer="a@example.com", subject="s", body="b")
    valid = {k: ticket.pk if k == "ticket_id" else v for k, v in VALID[tool].items()}
    found = tool_get(name=tool)
    keys_used = 0
    for field in valid:
        for n, value in enumerate(HOSTILE):
            arguments = {**valid, field: value}
            key = f"hostile:{tool}:{field}:{n}"
            response = invoke(tool, arguments, key=key)
            assert response.status_code < 500, (tool, field, value, response.content)
            if response.status_code == 400:
                error = response.json()["error"]
                assert error["code"] == "validation_error"
                assert field in error["details"]["arguments"], error
            elif found.effect == "write":
                keys_used += 1
    # a refused request never consumes its key
    assert IdempotencyKey.objects.count() == keys_used
