"""50 concurrent invokes per idempotency key across 20 keys, through the real gateway and SMTP.

Ten keys create tickets and ten send email; the 1000 requests are shuffled and fired from 100
threads at a live web server. Every key must produce exactly one effect (one Ticket row, one
OutboundEmail row, one SMTP message), every success must carry the same result, and the others
must be the documented 409 `idempotency_in_progress` (never a 5xx, never a second effect).
The keys are free-form (a caller that is not an agent): the token has the `tools:direct` scope.
"""

import random
import threading
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.reliability.conftest import Stack

PER_KEY = 50


def test_fifty_concurrent_invokes_per_key_across_twenty_keys_make_one_effect_each(
    mail_stack: Stack,
) -> None:
    from runs.tokens import worker_token_create
    from tools.models import IdempotencyKey, OutboundEmail, Ticket

    _, token = worker_token_create(name="races-direct", scopes=("tools:direct",))
    tag = uuid.uuid4().hex[:8]
    calls: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(10):
        key = f"race-{tag}-ticket-{i}"
        args = {"customer": f"race-{tag}-{i}@example.com", "subject": f"s{i}", "body": "b"}
        calls += [(key, "tickets.create", args)] * PER_KEY
    for i in range(10):
        key = f"race-{tag}-email-{i}"
        args = {"to": f"race-{tag}-mail-{i}@example.com", "subject": f"s{i}", "body": "b"}
        calls += [(key, "email.send", args)] * PER_KEY
    random.Random(7).shuffle(calls)

    local: dict[int, httpx.Client] = {}
    resent: list[str] = []  # sent again after a dropped kept-alive connection

    def invoke(call: tuple[str, str, dict[str, Any]]) -> tuple[str, int, Any, bool]:
        key, tool, args = call

        client = local.get(threading.get_ident())
        if client is None:
            client = httpx.Client(
                base_url=mail_stack.url,
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
            local[threading.get_ident()] = client

        def send() -> httpx.Response:
            return client.post(
                f"/api/v1/tools/{tool}/invoke",
                json={"arguments": args},
                headers={"Idempotency-Key": key},
            )

        try:
            response = send()
        except (httpx.ReadError, httpx.RemoteProtocolError):
            # the server closed this kept-alive connection (an idle one it let go) as the request
            # went out, as any HTTP client meets now and then; the key makes sending it again
            # safe, and a client does just that
            resent.append(key)
            response = send()
        body = response.json()
        return (
            key,
            response.status_code,
            body,
            response.headers.get("Idempotent-Replayed") == "true",
        )

    with ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(invoke, calls))
    for client in local.values():
        client.close()

    statuses: Counter[int] = Counter()
    by_key: dict[str, list[Any]] = defaultdict(list)
    replayed = 0
    for key, status, body, was_replayed in results:
        statuses[status] += 1
        assert status in (200, 409), (key, status, body)
        if status == 409:
            assert body["error"]["code"] == "idempotency_in_progress", body
        else:
            by_key[key].append(body["result"])
            replayed += was_replayed
    print(
        f"\ngateway races: {len(results)} invokes over 20 keys: {dict(statuses)}, "
        f"{replayed} answered from the stored response, {len(resent)} sent again after a "
        "dropped connection"
    )
    assert not any(s >= 500 for s in statuses)

    # a settled key answers 200 with the stored result to anyone who asks again
    with httpx.Client(
        base_url=mail_stack.url, headers={"Authorization": f"Bearer {token}"}
    ) as client:
        for key, tool, args in {c[0]: c for c in calls}.values():
            again = client.post(
                f"/api/v1/tools/{tool}/invoke",
                json={"arguments": args},
                headers={"Idempotency-Key": key},
            )
            assert again.status_code == 200, again.text
            assert again.headers.get("Idempotent-Replayed") == "true"
            stored = again.json()["result"]
            assert all(result == stored for result in by_key[key]), key

    for i in range(10):
        key = f"race-{tag}-ticket-{i}"
        assert Ticket.objects.filter(customer=f"race-{tag}-{i}@example.com").count() == 1
        assert Ticket.objects.filter(created_by_key=key).count() == 1
        mail_to = f"race-{tag}-mail-{i}@example.com"
        assert OutboundEmail.objects.filter(to=mail_to).count() == 1
        assert len(mail_stack.smtp.to(mail_to)) == 1
    assert IdempotencyKey.objects.filter(key__startswith=f"race-{tag}-").count() == 20
    assert set(
        IdempotencyKey.objects.filter(key__startswith=f"race-{tag}-").values_list(
            "state", flat=True
        )
    ) == {"completed"}
