"""Chaos: 20 support-agent runs as real processes while a killer SIGKILLs them at random moments.

Each of the 20 runs is driven by `python -m tests.reliability.chaos_agent` (the support agent's
CLI plus a log of acknowledged steps). Every 20-200 ms a killer SIGKILLs a random live worker
that has journalled a step since it started, at least Scale.chaos_kills times in all; a killed
worker is restarted at once, under the same worker name (it takes its lease back at once) or a new one (it waits for the old
lease to expire). Four of the runs send email over plain SMTP (`enforced_by: nobody`), so a kill
during that step is a "maybe sent" that must go to review, never be retried.

At the end, after a reaper pass: every run is completed or needs_review, none is left running
with an expired lease; every idempotency key produced at most one effect (ticket rows, comment
rows, outbound email rows, SMTP messages received by the local aiosmtpd); every step a worker saw
acknowledged is in the journal; every hash chain verifies; no budget is exceeded. The counts are
printed (run with -s to see them).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs.chain import run_chain_breaks
from runs.models import Event, Run, Step
from runs.services.enforcement import runs_reap_expired_leases
from tests.reliability.conftest import ROOT, Scale, Stack

FINISHED_EXIT_CODES = {0: "completed", 3: "needs_review", 4: "budget_exceeded", 6: "run_finished"}
SUBJECT = "Charged twice for my invoice"
BODY = "My card was charged twice for invoice INV-2291. Please refund one charge."


@dataclass
class Slot:
    """One ticket, one run, and the worker process currently driving it."""

    number: int
    ticket: str
    customer: str
    email_enforced_by: str
    proc: subprocess.Popen[str] | None = None
    started: float = 0.0
    starts: int = 0
    outcome: str | None = None
    acks_at_start: int = 0
    hook: dict[str, str] = field(default_factory=dict)  # a named crash point, armed until it fires
    summaries: list[dict[str, Any]] = field(default_factory=list)


def _start(stack: Stack, slot: Slot, worker: str, **extra_env: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_CRASH", "AGENT_STOP"))}
    env.update(
        {
            "INTENTLEDGER_URL": stack.url,
            "INTENTLEDGER_TOKEN": stack.token,
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(stack.smtp_port),
            "CHAOS_ACK_LOG": str(_ack_log(stack, slot)),
            "PYTHONDONTWRITEBYTECODE": "1",
            **extra_env,
        }
    )
    argv = [
        sys.executable,
        "-m",
        "tests.reliability.chaos_agent",
        "--ticket",
        slot.ticket,
        "--customer",
        slot.customer,
        "--subject",
        SUBJECT,
        "--body",
        BODY,
        "--worker",
        worker,
        "--ttl",
        "6",
        "--wait-lease",
        "20",
        "--email-enforced-by",
        slot.email_enforced_by,
    ]
    slot.proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    slot.started = time.monotonic()
    slot.starts += 1
    slot.acks_at_start = _acks(stack, slot)


def _ack_log(stack: Stack, slot: Slot) -> Path:
    return stack.workdir / f"acks-{slot.number}.jsonl"


def _acks(stack: Stack, slot: Slot) -> int:
    path = _ack_log(stack, slot)
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _summary(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out = proc.stdout.read() if proc.stdout else ""
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def test_twenty_support_runs_under_random_sigkills_finish_with_nothing_lost_or_doubled(
    mail_stack: Stack, scale: Scale
) -> None:
    from review.selectors import duplicates_prevented
    from tools.models import IdempotencyKey, OutboundEmail, Ticket, TicketComment

    rng = random.Random(20 if not scale.soak else None)
    tag = uuid.uuid4().hex[:8]
    slots = [
        Slot(
            number=i,
            ticket=f"T-chaos-{tag}-{i}",
            customer=f"chaos-{tag}-{i}@example.com",
            email_enforced_by="nobody" if i % 5 == 4 else "ledger",
        )
        for i in range(scale.chaos_runs)
    ]
    counts: Counter[str] = Counter()
    started = time.monotonic()
    for slot in slots:
        # on top of the random kills, two named crash points per kind: inside an unenforced
        # SMTP send (a "maybe sent": review, never a retry) and inside a ledger-enforced
        # tickets.create (reconciled from its key on recovery)
        if slot.number in (4, 9):
            slot.hook = {"AGENT_CRASH_INSIDE": "email.send"}
        elif slot.number in (1, 2):
            slot.hook = {"AGENT_CRASH_INSIDE": "tickets.create"}
        _start(mail_stack, slot, f"chaos-{slot.number}", **slot.hook)
    next_kill = time.monotonic() + rng.uniform(0.5, 1.5)
    time_limit = 600 if scale.soak else 300

    while any(slot.outcome is None for slot in slots):
        assert time.monotonic() - started < time_limit, [
            (s.number, s.outcome, s.starts) for s in slots
        ]
        for slot in slots:
            if slot.outcome is not None or slot.proc is None or slot.proc.poll() is None:
                continue
            code = slot.proc.returncode
            summary = _summary(slot.proc)
            slot.summaries.append(summary)
            if code in FINISHED_EXIT_CODES:
                slot.outcome = FINISHED_EXIT_CODES[code]
            elif code == -signal.SIGKILL:  # a named crash point fired (the killer restarts its own)
                counts["crash_point_kills"] += 1
                slot.hook = {}
                _start(mail_stack, slot, f"chaos-{slot.number}")
            else:
                counts[f"restarted_after_exit_{code}"] += 1
                _start(mail_stack, slot, f"chaos-{slot.number}-r{slot.starts}", **slot.hook)
        # a victim is past its start-up: it has journalled (or replayed) a step since it started
        now = time.monotonic()
        live = [
            s
            for s in slots
            if s.outcome is None
            and s.proc
            and s.proc.poll() is None
            and _acks(mail_stack, s) > s.acks_at_start
        ]
        if live and counts["kills"] < scale.chaos_kills and now >= next_kill:
            victim = rng.choice(live)
            assert victim.proc is not None
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait(timeout=10)
            counts["kills"] += 1
            victim.summaries.append({})
            same_name = rng.random() < 0.7
            worker = (
                f"chaos-{victim.number}" if same_name else f"chaos-{victim.number}-k{victim.starts}"
            )
            counts["restarts_same_name" if same_name else "restarts_new_name"] += 1
            _start(mail_stack, victim, worker, **victim.hook)
            next_kill = time.monotonic() + rng.uniform(0.02, 0.2)
        time.sleep(0.02)
    duration = time.monotonic() - started

    # the reaper's pass: nothing may be left running on an expired lease
    reaped = runs_reap_expired_leases()
    run_ids = {}
    for slot in slots:
        run = Run.objects.get(agent="support", external_id=f"ticket:{slot.ticket}")
        run_ids[slot.number] = run.pk
    runs = list(Run.objects.filter(pk__in=run_ids.values()))
    statuses = Counter(run.status for run in runs)

    # counts
    events = list(Event.objects.filter(run__in=runs).order_by("run", "seq"))
    keys = IdempotencyKey.objects.filter(
        key__in=Step.objects.filter(run__in=runs).values("idempotency_key")
    )
    tool_replays = sum(getattr(k, "replays", 0) for k in keys)  # if the tool side counts them
    reexecuted_writes = Step.objects.filter(run__in=runs, effect="write", executions__gt=1).count()
    prevented = duplicates_prevented(events, tool_replays)
    reviews = sum(1 for e in events if e.type == "needs_review")
    recoveries = sum(run.used_recoveries for run in runs)
    replayed_by_workers = sum(int(s.get("replayed") or 0) for slot in slots for s in slot.summaries)
    print(
        f"\nchaos: {len(slots)} runs in {duration:.1f}s; kills {counts['kills']} "
        f"(restarted under the same name {counts['restarts_same_name']}, a new name "
        f"{counts['restarts_new_name']}); named crash points fired {counts['crash_point_kills']}; other restarts "
        f"{ {k: v for k, v in counts.items() if k.startswith('restarted_after_exit')} }; "
        f"worker starts {sum(s.starts for s in slots)}\n"
        f"  final statuses {dict(statuses)}; reaper pass reaped {reaped}\n"
        f"  recoveries {recoveries}; replayed steps {prevented['replayed_steps']} "
        f"(reported by finishing workers: {replayed_by_workers}); reconciled from keys "
        f"{prevented['reconciled']}; write steps re-executed under their key {reexecuted_writes}; "
        f"tool replays {tool_replays}; duplicates prevented "
        f"{prevented['total']}; reviews raised {reviews}"
    )

    assert counts["kills"] >= scale.chaos_kills
    assert set(statuses) <= {"completed", "needs_review"}, statuses
    assert not Run.objects.filter(pk__in=run_ids.values(), status="running").exists()

    # at most one effect per idempotency key, and per ticket of the story
    step_keys = set(Step.objects.filter(run__in=runs).values_list("idempotency_key", flat=True))
    for slot in slots:
        run = Run.objects.get(pk=run_ids[slot.number])
        tickets = Ticket.objects.filter(customer=slot.customer)
        emails = OutboundEmail.objects.filter(to=slot.customer)
        smtp = mail_stack.smtp.to(slot.customer)
        assert tickets.count() <= 1, (slot.number, list(tickets.values()))
        assert emails.count() <= 1, (slot.number, list(emails.values()))
        assert len(smtp) <= 1, (slot.number, smtp)
        for ticket in tickets:
            assert TicketComment.objects.filter(ticket=ticket).count() <= 1
            assert ticket.created_by_key in step_keys  # no effect without its journal entry
        if run.status == "needs_review" and run.status_reason != "recoveries":
            # only a "maybe sent" goes to review, and it was never retried
            unknown = Step.objects.filter(run=run, state="unknown")
            assert [s.name for s in unknown] == ["email.send"], slot.number
            assert slot.email_enforced_by == "nobody"
            assert len(smtp) <= 1
        if run.status == "completed":
            assert (tickets.count(), len(smtp)) == (1, 1), slot.number
            if slot.email_enforced_by == "ledger":
                assert emails.count() == 1
    message_ids = Counter(m["message_id"] for m in mail_stack.smtp.messages if m["message_id"])
    assert all(n == 1 for n in message_ids.values()), message_ids

    # every acknowledged journal write is in the journal, in a state at least as final
    acks = [
        json.loads(line)
        for slot in slots
        if _ack_log(mail_stack, slot).exists()
        for line in _ack_log(mail_stack, slot).read_text().splitlines()
        if line.strip()
    ]
    steps = {(str(s.run_id), s.index): s for s in Step.objects.filter(run__in=runs)}
    for ack in acks:
        step = steps.get((ack["run_id"], ack["index"]))
        assert step is not None, ack
        assert step.name == ack["name"], ack
        if ack["state"] == "done":
            assert step.state == "done", (ack, step.state)

    # chains, gapless journals, budgets
    for run in runs:
        assert not run_chain_breaks(run), run.pk
        indexes = sorted(s.index for (rid, _), s in steps.items() if rid == str(run.pk))
        assert indexes == list(range(run.step_count))
        assert run.used_steps <= run.limit_steps
        assert run.used_tokens <= run.limit_tokens
        assert run.used_recoveries <= run.limit_recoveries + 1  # the one that tripped review
    print(f"  acknowledged writes checked {len(acks)}; steps journalled {len(steps)}")
