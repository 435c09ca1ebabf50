"""The demo's central promise, as a supervisor meets it: the story leaves T-<round>005's email.send
"maybe sent" in the review queue; resolving it on the dashboard lets the run finish. The story's
pod runs are `external` (the ledger never hands them to Celery), so the story's process plays
their deployment and restarts the pod once the run can go on; the page says who resumes it.

Round 1: marked as sent, the run completes with the one email the killed pod sent and the
ticket closed. Round 2 (the demo started again): sent back for retry (a step nobody enforces,
so the person confirms it may happen twice), the run completes with the email sent again and
the ticket closed.
"""

from __future__ import annotations

import json
import mailbox
import re
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from teams.scope import EVERY_TEAM_SESSION_OPTIONS
from tests.demo.test_demo import (
    SUMMARY_TIMEOUT,
    Output,
    clean_clone,  # noqa: F401  (a fixture)
    ctrl_c,
    demo_port,
    demo_start,
    log_in,
    logs_tail,
)

RUN_FINISH_TIMEOUT = 240.0  # ends a hang; nothing is timed


def resolve(
    client: httpx.Client, url: str, run_id: str, index: int, action: str, **more: str
) -> str:
    """The supervisor opens the item and decides it with a note; the page they get back."""
    item = client.get(f"{url}/queue/{run_id}/{index}/")
    assert item.status_code == 200, item.text[:500]
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', item.text)
    assert csrf
    answer = client.post(
        f"{url}/queue/{run_id}/{index}/resolve",
        data={
            "action": action,
            "note": f"checked .demo/mail: {action}",
            "csrfmiddlewaretoken": csrf.group(1),
            **more,
        },
        headers={"Referer": f"{url}/queue/{run_id}/{index}/"},
        follow_redirects=True,
    )
    assert answer.status_code == 200, answer.text[:500]
    return answer.text


def every_team(database_url: str) -> psycopg.Connection[Any]:
    """A connection to the demo's database (as its ordinary role, bound by row-level security)
    whose session reads every team's rows, as an operator's psql does (docs/teams.md)."""
    return psycopg.connect(database_url, options=EVERY_TEAM_SESSION_OPTIONS)


def finished(database_url: str, run_id: str, clone: Path) -> str:
    deadline = time.monotonic() + RUN_FINISH_TIMEOUT
    status = ""
    while time.monotonic() < deadline:
        with every_team(database_url) as conn:
            row = conn.execute("SELECT status FROM runs_run WHERE id = %s", [run_id]).fetchone()
        assert row is not None
        status = str(row[0])
        if status in ("completed", "failed", "abandoned", "cancelled", "budget_exceeded"):
            return status
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} still {status}:\n{logs_tail(clone)}")


def facts(database_url: str, customer: str, clone: Path) -> dict[str, Any]:
    with every_team(database_url) as conn:
        tickets = conn.execute(
            "SELECT status FROM tools_ticket WHERE customer = %s", [customer]
        ).fetchall()
    box = mailbox.Maildir(clone / ".demo" / "mail", create=False)
    mails = [m for m in box if customer in (m.get("To") or "")]
    return {"tickets": [t[0] for t in tickets], "mails": len(mails)}


def the_maybe_sent_item(out: Output, clone: Path, key: str = "maybe_sent") -> dict[str, Any]:
    out.wait_for(r"^Review queue: ", SUMMARY_TIMEOUT)
    assert "PROBLEM" not in out.text, out.text
    summary: dict[str, Any] = json.loads((clone / ".demo" / "summary.json").read_text())
    maybe_sent = summary["runs"][key]
    assert maybe_sent["status"] == "needs_review"
    [unknown] = maybe_sent["unknown_steps"]
    assert unknown["name"] == "email.send"
    return {**maybe_sent, "index": unknown["index"]}


def queue_of(url: str, username: str, password: str) -> str:
    with httpx.Client(timeout=30) as client:
        log_in(client, url, username, password)
        queue = client.get(f"{url}/queue/")
    assert queue.status_code == 200, queue.text[:500]
    return queue.text


def said_who_resumes(page: str, ticket: str) -> None:
    said = re.search(r'<span id="resumed-by">([^<]*)</span>', page)
    assert said, page[:2000]
    text = said.group(1).replace("&#x27;", "'")
    # at once: nobody in the ledger (its pod's deployment restarts it); or already its pod
    assert text in (
        f"Nobody in the ledger resumes this run: it is run by its own worker process "
        f"(pod-{ticket}), and it goes on only when that process, or the deployment that "
        "restarts it, attaches to it again. Until then it waits without a worker, and its "
        "wall-clock budget keeps running.",
        f"Worker pod-{ticket} holds the run now.",
    ), text


@pytest.mark.slow
def test_resolving_the_demos_maybe_sent_email_lets_its_run_finish(clean_clone: Path) -> None:  # noqa: F811
    port = demo_port()
    proc = demo_start(clean_clone, port)
    out = Output(proc, clean_clone)
    try:
        item = the_maybe_sent_item(out, clean_clone)
        url = out.wait_for(r"^Agent Ledger is running at (http://\S+)/$", 1).group(1)
        password = out.wait_for(r"^\s+supervisor\s+(\S+)\s+\(supervisors\)$", 1).group(1)
        database_url = out.wait_for(r"^\s+(postgres://\S+)$", 1).group(1)
        assert facts(database_url, item["customer"], clean_clone)["mails"] == 1

        # two teams, a supervisor of each: each sees their own team's maybe-sent item only
        billing = the_maybe_sent_item(out, clean_clone, "billing_maybe_sent")
        assert (item["team"], billing["team"]) == ("default", "billing")
        support_link = f"/queue/{item['run_id']}/{item['index']}/"
        billing_link = f"/queue/{billing['run_id']}/{billing['index']}/"
        support_sup = out.wait_for(r"^\s+support-sup\s+(\S+)\s+\(supervisors\)$", 1).group(1)
        billing_sup = out.wait_for(
            r"^\s+billing-sup\s+(\S+)\s+\(supervisor in billing\)$", 1
        ).group(1)
        support_queue = queue_of(url, "support-sup", support_sup)
        assert support_link in support_queue and billing_link not in support_queue
        assert billing["run_id"] not in support_queue and billing["customer"] not in support_queue
        billing_queue = queue_of(url, "billing-sup", billing_sup)
        assert billing_link in billing_queue and support_link not in billing_queue
        assert item["run_id"] not in billing_queue and item["customer"] not in billing_queue
        with httpx.Client(timeout=30) as client:
            log_in(client, url, "supervisor", password)
            page = resolve(client, url, item["run_id"], item["index"], "sent")
        assert "Step" in page and "marked as sent" in page
        said_who_resumes(page, item["ticket"])
        assert finished(database_url, item["run_id"], clean_clone) == "completed"
        out.wait_for(rf"==> {item['ticket']}: pod pod-{item['ticket']}-r1 ended: completed", 30)
        after = facts(database_url, item["customer"], clean_clone)
        assert after == {"tickets": ["closed"], "mails": 1}, after
    finally:
        ctrl_c(proc)
    assert proc.returncode == 0, out.to_the_end()

    # round 2: the same demo started again with a new story; its maybe-sent email sent back for retry
    again = demo_start(clean_clone, port, "--new-story")
    second = Output(again, clean_clone)
    try:
        item = the_maybe_sent_item(second, clean_clone)
        assert item["ticket"].startswith("T-2")
        with httpx.Client(timeout=30) as client:
            password = (clean_clone / ".demo" / "credentials.txt").read_text()
            supervisor = re.search(r"supervisor\s+(\S+)", password)
            assert supervisor
            log_in(client, f"http://127.0.0.1:{port}", "supervisor", supervisor.group(1))
            page = resolve(
                client,
                f"http://127.0.0.1:{port}",
                item["run_id"],
                item["index"],
                "retry",
                confirm_repeat="on",
            )
        assert "sent back for retry" in page
        said_who_resumes(page, item["ticket"])
        database_url = second.wait_for(r"^\s+(postgres://\S+)$", 1).group(1)
        assert finished(database_url, item["run_id"], clean_clone) == "completed"
        after = facts(database_url, item["customer"], clean_clone)
        # the retry ran email.send again (a tool nobody enforces: the person confirmed it)
        assert after == {"tickets": ["closed"], "mails": 2}, after
    finally:
        ctrl_c(again)
    assert again.returncode == 0, second.to_the_end()
