"""The demo's story, played by the real product: support-agent runs that complete, one whose
worker is evicted (SIGKILL) right after step 12 and recovers from the journal, one killed inside
an `email.send` the ledger cannot see into (it waits in the review queue as "maybe sent"), and one
stopped by its token budget. Then a summary read back from the database and the mail catcher.

Two teams tell it: `default` (shown as Support) gets the six support tickets, `billing` two
billing tickets, worked by the same agent with billing's own token: one completes, one is killed
inside its `email.send` and waits in billing's review queue. Each team's supervisor (support-sup,
billing-sup) sees only their own team's item.

Told by `manage.py demo_story`, a process of the demo's Procfile, once the web server answers.
Runs go through the same paths a deployment uses: the Celery task `agents.run_agent` for the ordinary
ones, and the agent's CLI (`python -m support_agent.support`) as stand-alone worker processes ("pods")
for the ones whose process gets killed. Nothing is simulated.
"""

from __future__ import annotations

import json
import mailbox
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from django.db import connections
from django.db.models import Sum

import config.celery  # noqa: F401 (the Celery app, configured from settings)
from celery_agents.services import agent_run_start
from runs.constants import FINAL_STATUSES, LIVE_STATUSES, Effect, EventType, RunStatus, StepState
from runs.models import Event, Run, Step
from runs.tokens import celery_agents_token_ensure
from teams.models import DEFAULT_TEAM_SLUG
from teams.services import team_for_slug
from tools.models import OutboundEmail
from tools.models import Ticket as TicketRow

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".demo"
RUN_TIMEOUT_SECONDS = 240.0
EVICT_AFTER_STEP = 12
# the story's pods get their crash points and recovery timing through the agent's step hooks
# (celery_agents/hooks.py); the agent itself has none
CRASH_HOOKS = {"AGENT_HOOKS": "support_agent.crash_points"}
POD_LEASE_TTL = 15

# A pasted log: the customer's ticket is long enough that answering it would cost more tokens
# than the support policy allows (the scripted model counts words as tokens).
PASTED_LOG = " ".join(
    f"2026-03-0{1 + i % 9}T10:{i % 60:02d}:00Z payment-gateway WARN retry {i} for invoice INV-{4000 + i}"
    " card declined code 51 insufficient funds"
    for i in range(160)
)


BILLING = "billing"


@dataclass(frozen=True)
class Ticket:
    number: int
    role: str  # completes | evicted | maybe_sent | budget | billing | billing_maybe_sent
    customer: str
    subject: str
    body: str
    team: str = DEFAULT_TEAM_SLUG  # the slug of the team whose token works it


def story_tickets(round_no: int) -> list[Ticket]:
    """Six support tickets and two of billing's; ids and addresses are per round so a second
    start tells its own story."""

    def customer(name: str) -> str:
        return f"{name}@example.com" if round_no == 1 else f"{name}+r{round_no}@example.com"

    return [
        Ticket(
            1,
            "completes",
            customer("ada"),
            "Charged twice for my March invoice",
            "My card was charged twice for invoice INV-2291. Please refund one charge.",
        ),
        Ticket(
            2,
            "completes",
            customer("grace"),
            "Cannot reset my password",
            "The reset link in your email says it has expired every time I click it.",
        ),
        Ticket(
            3,
            "completes",
            customer("linus"),
            "Export to CSV is missing columns",
            "The CSV export of my orders has no shipping address column since last week.",
        ),
        Ticket(
            4,
            "evicted",
            customer("margaret"),
            "Order arrived damaged",
            "The monitor I ordered (order 55120) arrived with a cracked screen. I want a replacement.",
        ),
        Ticket(
            5,
            "maybe_sent",
            customer("alan"),
            "Invoice address is wrong",
            "My invoices still show my old address in Leeds. Please update it to Manchester.",
        ),
        Ticket(
            6,
            "budget",
            customer("barbara"),
            "Payments keep failing, full log attached",
            "Every payment fails. Here is the whole log from our side: " + PASTED_LOG,
        ),
        Ticket(
            7,
            "billing",
            customer("katherine"),
            "Refund not received",
            "You confirmed a refund for invoice INV-3310 two weeks ago; it has not arrived.",
            team=BILLING,
        ),
        Ticket(
            8,
            "billing_maybe_sent",
            customer("edsger"),
            "VAT number missing on my invoice",
            "Our VAT number NL123456789B01 is missing from invoice INV-3377. Please reissue it.",
            team=BILLING,
        ),
    ]


def ticket_id(round_no: int, ticket: Ticket) -> str:
    return f"T-{round_no}{ticket.number:03d}"


def next_round() -> int:
    """One more than the highest story round in the database (ticket ids T-<round><nnn>), so a
    second start, or a start after --reset against your own DATABASE_URL, tells a new story."""
    rounds = [0]
    external_ids = Run.objects.filter(agent="support", external_id__startswith="ticket:T-")
    for external_id in external_ids.values_list("external_id", flat=True):
        match = re.fullmatch(r"ticket:T-(\d+)(\d{3})", external_id or "")
        if match:
            rounds.append(int(match.group(1)))
    return max(rounds) + 1


# --------------------------------------------------------------------------------------------
# agent worker processes ("pods")


@dataclass
class PodResult:
    returncode: int
    outcome: dict[str, Any] | None
    started_at: float  # wall clock, just before the process was started
    ended_at: float
    log: Path


# the story's pods by ticket role, with who enforces each one's email: the evicted pod's goes
# through the ledger's gateway, the maybe-sent pod sends over plain SMTP the ledger cannot see
POD_EMAIL_ENFORCED_BY = {
    "evicted": "ledger",
    "maybe_sent": "nobody",
    "billing": "ledger",
    "billing_maybe_sent": "nobody",
}


def team_env(ticket: Ticket, env: dict[str, str]) -> dict[str, str]:
    """A pod's environment: a billing ticket's pod works with billing's own worker token (its
    run, tickets and emails are billing's); a support ticket's with the demo's token."""
    if ticket.team == DEFAULT_TEAM_SLUG:
        return env
    return {**env, "INTENTLEDGER_TOKEN": celery_agents_token_ensure(team_for_slug(ticket.team))}


def story_pod_argv(round_no: int, ticket: Ticket) -> list[str]:
    """The command line of a pod ticket's worker process, as its deployment starts it."""
    tid = ticket_id(round_no, ticket)
    enforced_by = POD_EMAIL_ENFORCED_BY[ticket.role]
    return pod_argv(tid, ticket, worker=f"pod-{tid}", email_enforced_by=enforced_by)


def pod_argv(tid: str, ticket: Ticket, *, worker: str, email_enforced_by: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "support_agent.support",
        "--ticket",
        tid,
        "--customer",
        ticket.customer,
        "--subject",
        ticket.subject,
        "--body",
        ticket.body,
        "--worker",
        worker,
        "--ttl",
        str(POD_LEASE_TTL),
        "--email-enforced-by",
        email_enforced_by,
    ]


def last_json_line(path: Path) -> dict[str, Any] | None:
    for line in reversed(path.read_text(errors="replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def pod_run(
    *, name: str, argv: list[str], env: dict[str, str], timeout: float, logs: Path = STATE / "logs"
) -> PodResult:
    """One agent worker process, its output in .demo/logs/NAME.log (Ctrl-C stops it with the
    story: it is in the story's process group, which the process manager signals)."""
    log = logs / f"{name}.log"
    started_at = time.time()
    with open(log, "w") as out:
        try:
            code = subprocess.run(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            code = -1
    return PodResult(code, last_json_line(log), started_at, time.time(), log)


# --------------------------------------------------------------------------------------------
# the story


@dataclass
class Story:
    round_no: int
    url: str
    run_ids: dict[int, str] = field(default_factory=dict)
    pods: dict[str, PodResult] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # the pods' deployment: run id -> (ticket id, the pod's arguments and environment)
    deployed: dict[str, tuple[str, list[str], dict[str, str]]] = field(default_factory=dict)


def dispatch_through_celery(story: Story, tickets: list[Ticket]) -> None:
    """Create the runs (as an inbox integration would) and queue them for the Celery worker."""
    for ticket in tickets:
        tid = ticket_id(story.round_no, ticket)
        run, _ = agent_run_start(
            agent="support",
            input={
                "ticket": {
                    "id": tid,
                    "customer": ticket.customer,
                    "subject": ticket.subject,
                    "body": ticket.body,
                }
            },
            external_id=f"ticket:{tid}",
            actor="manage.py demo_story",
        )
        story.run_ids[ticket.number] = str(run.id)


def play_evicted(story: Story, ticket: Ticket, env: dict[str, str]) -> None:
    """A pod killed with SIGKILL right after step 12, replaced at once under the same worker
    name (as an orchestrator restarts a pod): it replays 0-12 from the journal and goes on."""
    argv = story_pod_argv(story.round_no, ticket)
    crash = {"AGENT_CRASH_AFTER_STEP": str(EVICT_AFTER_STEP)}
    killed_and_replaced(
        story, ticket, "evicted", argv, env, crash, f"after step {EVICT_AFTER_STEP}"
    )


def play_billing(story: Story, ticket: Ticket, env: dict[str, str]) -> None:
    """Billing's pod that answers its ticket and completes, in billing (`env` has billing's
    token)."""
    tid = ticket_id(story.round_no, ticket)
    argv = story_pod_argv(story.round_no, ticket)
    result = pod_run(name=f"pod-{tid}-1", argv=argv, env=env, timeout=120)
    story.pods["billing-1"] = result
    if result.outcome:
        story.run_ids[ticket.number] = str(result.outcome.get("run_id"))
    if (result.outcome or {}).get("status") != "completed":
        story.problems.append(
            f"{tid}: billing's pod was to complete its run, but it ended with status "
            f"{result.returncode} (see {result.log.relative_to(ROOT)})"
        )


def play_maybe_sent(story: Story, ticket: Ticket, env: dict[str, str]) -> None:
    """A pod that sends the email itself over SMTP (enforced_by nobody: the ledger cannot ask
    the mail server whether it went out) and is killed inside the send. Its replacement finds
    the step's intent without an outcome: unknown, so the run goes to the review queue (its
    team's: `env` has the ticket's team's token)."""
    argv = story_pod_argv(story.round_no, ticket)
    crash = {"AGENT_CRASH_INSIDE": "email.send"}
    label = "maybe-sent" if ticket.team == DEFAULT_TEAM_SLUG else f"{ticket.team}-maybe-sent"
    killed_and_replaced(story, ticket, label, argv, env, crash, "inside email.send")


def killed_and_replaced(
    story: Story,
    ticket: Ticket,
    label: str,
    argv: list[str],
    env: dict[str, str],
    crash: dict[str, str],
    where: str,
) -> None:
    """A pod killed (SIGKILL) at the crash point `crash` arms (support_agent/crash_points.py), then its
    replacement, started at once with the same arguments and no crash point armed."""
    tid = ticket_id(story.round_no, ticket)
    env = {**env, **CRASH_HOOKS}
    first = pod_run(name=f"pod-{tid}-1", argv=argv, env={**env, **crash}, timeout=120)
    story.pods[f"{label}-1"] = first
    if first.returncode != -9:
        story.problems.append(
            f"{tid}: the pod was to be killed {where}, but it ended with status "
            f"{first.returncode} (see {first.log.relative_to(ROOT)})"
        )
    second = pod_run(name=f"pod-{tid}-2", argv=argv, env=env, timeout=120)
    story.pods[f"{label}-2"] = second
    if second.outcome:
        story.run_ids[ticket.number] = str(second.outcome.get("run_id"))
        story.deployed[str(second.outcome.get("run_id"))] = (tid, argv, env)


def resumable_again(run: Run) -> bool:
    """A run nobody holds that a worker may take: resumed after a review decision (running
    without a lease) or interrupted (its lease expired)."""
    if run.status == RunStatus.INTERRUPTED:
        return True
    return run.status == RunStatus.RUNNING and not run.lease_worker


def deployment_watch(
    story: Story, *, poll_seconds: float = 1.0, logs: Path = STATE / "logs"
) -> None:
    """The pods' deployment, as an orchestrator would be: the story's pod runs are `external`
    (the ledger never hands them to Celery), so when one becomes resumable again (a supervisor
    resolved its review item) this restarts its pod, which attaches to the run and finishes it.
    Returns once every run it watches is finished."""
    restarts: dict[str, int] = {}
    while story.deployed:
        for run_id, (tid, argv, env) in list(story.deployed.items()):
            run = Run.objects.filter(pk=run_id).first()
            if run is None or run.status in FINAL_STATUSES:
                del story.deployed[run_id]
                continue
            if not resumable_again(run):
                continue
            restarts[run_id] = restarts.get(run_id, 0) + 1
            name = f"pod-{tid}-r{restarts[run_id]}"
            print(
                f"==> {tid}: its run can go on again; its deployment restarts the pod ({name})",
                flush=True,
            )
            result = pod_run(name=name, argv=argv, env=env, timeout=RUN_TIMEOUT_SECONDS, logs=logs)
            status = (result.outcome or {}).get("status", f"exit {result.returncode}")
            print(f"==> {tid}: pod {name} ended: {status}", flush=True)
        connections.close_all()
        time.sleep(poll_seconds)


def wait_final(story: Story, numbers: list[int]) -> None:
    ids = [story.run_ids[n] for n in numbers if n in story.run_ids]
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        live = Run.objects.filter(pk__in=ids, status__in=list(LIVE_STATUSES)).count()
        if live == 0:
            return
        time.sleep(0.3)
    story.problems.append(
        f"some Celery-run tickets were still live after {RUN_TIMEOUT_SECONDS:.0f}s "
        "(see .demo/logs/worker.log)"
    )


# --------------------------------------------------------------------------------------------
# the summary: everything below is read back from the database and the mail catcher


def mail_count(to: str) -> int:
    box = mailbox.Maildir(STATE / "mail", create=False)
    count = 0
    for message in box:
        if to in (message.get("To") or ""):
            count += 1
    return count


def run_facts(run_id: str, customer: str) -> dict[str, Any]:
    run = Run.objects.get(pk=run_id)
    events = list(Event.objects.filter(run=run).order_by("seq"))
    recoveries = [
        e for e in events if e.type == EventType.LEASE_ACQUIRED and e.payload.get("recovery")
    ]
    unknown = list(Step.objects.filter(run=run, state=StepState.UNKNOWN).values("index", "name"))
    team = run.team.slug
    usage = Step.objects.filter(run=run).aggregate(
        i=Sum("usage_input_tokens"), o=Sum("usage_output_tokens")
    )
    budget_event = next((e for e in reversed(events) if e.type == EventType.BUDGET_EXCEEDED), None)
    return {
        "run_id": run_id,
        "team": team,
        "customer": customer,
        "status": run.status,
        "steps": run.step_count,
        "tokens": run.used_tokens,
        "token_limit": run.limit_tokens,
        "step_tokens": (usage["i"] or 0) + (usage["o"] or 0),
        "recoveries": run.used_recoveries,
        "replayed_steps": sum(int(e.payload.get("replayable_steps", 0)) for e in recoveries),
        "reconciled": sum(1 for e in events if e.type == EventType.RECONCILED),
        "unknown_steps": unknown,
        "budget_limit": budget_event.payload if budget_event else None,
        "tickets": TicketRow.objects.filter(customer=customer).count(),
        "emails": OutboundEmail.objects.filter(to=customer).count(),
        "mail_received": mail_count(customer),
        "write_steps_replayed": list(
            Step.objects.filter(
                run=run,
                effect=Effect.WRITE,
                index__lt=max(
                    (int(e.payload.get("replayable_steps", 0)) for e in recoveries), default=0
                ),
            )
            .order_by("index")
            .values_list("name", flat=True)
        ),
    }


def summarise(story: Story, tickets: list[Ticket], started: float) -> dict[str, Any]:
    runs = {}
    for ticket in tickets:
        run_id = story.run_ids.get(ticket.number)
        if run_id:
            runs[ticket.role + ("" if ticket.role != "completes" else f"-{ticket.number}")] = {
                "ticket": ticket_id(story.round_no, ticket),
                **run_facts(run_id, ticket.customer),
            }
    recovery: dict[str, Any] = {}
    first, second = story.pods.get("evicted-1"), story.pods.get("evicted-2")
    if first and second and second.outcome and second.outcome.get("first_executed_at"):
        step_at = float(second.outcome["first_executed_at"])
        recovery = {
            "first_executed_step": second.outcome.get("first_executed_step"),
            "process_start_to_step_seconds": round(step_at - second.started_at, 3),
            "kill_to_step_seconds": round(step_at - first.ended_at, 3),
            "lease_and_journal_seconds": second.outcome.get("lease_seconds"),
            "attach_seconds": second.outcome.get("attach_seconds"),
            "imports_seconds": (
                round(float(second.outcome["imported_at"]) - second.started_at, 3)
                if second.outcome.get("imported_at")
                else None
            ),
            "replayed": second.outcome.get("replayed"),
            "executed": second.outcome.get("executed"),
        }
    return {
        "round": story.round_no,
        "url": story.url,
        "seconds_from_command": round(time.time() - started, 1),
        "runs": runs,
        "recovery": recovery,
        "problems": story.problems,
        "review_queue": f"{story.url}/queue/",
    }


LIMIT_NAMES = {"tokens": "token", "steps": "step", "wall_seconds": "wall-clock", "cost_usd": "cost"}


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def print_summary(summary: dict[str, Any]) -> None:
    def out(line: str = "") -> None:
        print(line, flush=True)

    runs = summary["runs"]
    url = summary["url"]
    out()
    teams = sorted({facts["team"] for facts in runs.values()})
    out(
        f"The story (round {summary['round']}): {len(runs)} support-agent runs in "
        f"{len(teams)} teams ({', '.join(teams)})"
    )
    for key, facts in runs.items():
        tokens = f"{facts['tokens']:,}/{facts['token_limit']:,} tokens"
        line = f"  {facts['ticket']}  {facts['team']:<8} {facts['customer']:<26} {facts['status']:<16} {facts['steps']:>2} steps  {tokens}"
        out(line)
        if key == "evicted":
            out(
                f"      worker SIGKILLed after step {EVICT_AFTER_STEP}; its replacement replayed "
                f"{facts['replayed_steps']} steps from the journal and went on: "
                f"{plural(facts['tickets'], 'ticket')}, {plural(facts['emails'], 'email')} sent "
                f"({facts['mail_received']} received by the mail catcher)"
            )
        elif key in ("maybe_sent", "billing_maybe_sent"):
            steps = ", ".join(f"step {s['index']} {s['name']}" for s in facts["unknown_steps"])
            out(
                f"      killed inside email.send (enforced_by nobody): {steps or 'no step'} is "
                f"unknown, maybe sent ({facts['mail_received']} message reached the mail "
                "catcher); a person decides"
            )
        elif key == "budget":
            limit = facts["budget_limit"] or {}
            out(
                f"      stopped by its {LIMIT_NAMES.get(str(limit.get('limit')), '?')} budget after step "
                f"{facts['steps'] - 1}: {facts['tokens']:,} of {facts['token_limit']:,} used; "
                f"{plural(facts['tickets'], 'ticket')} and {plural(facts['emails'], 'email')} "
                "for this customer"
            )
    evicted = runs.get("evicted")
    if evicted:
        prevented = evicted["replayed_steps"] + evicted["reconciled"]
        writes = ", ".join(evicted["write_steps_replayed"]) or "none"
        out(
            f"Duplicates prevented: {prevented} steps not redone after the eviction, "
            f"{len(evicted['write_steps_replayed'])} of them side effects ({writes})"
        )
    recovery = summary["recovery"]
    if recovery:
        lease = recovery.get("lease_and_journal_seconds")
        imports = recovery.get("imports_seconds")
        parts = []
        if imports is not None:
            parts.append(f"interpreter + imports {imports:.2f} s")
        if lease:
            parts.append(f"lease + journal call {lease * 1000:.0f} ms")
        detail = f" ({', '.join(parts)})" if parts else ""
        out(
            f"Recovery: the new worker process was executing step "
            f"{recovery['first_executed_step']} {recovery['process_start_to_step_seconds']:.2f} s "
            f"after it started{detail}; {recovery['kill_to_step_seconds']:.2f} s after the kill"
        )
    for problem in summary["problems"]:
        out(f"PROBLEM: {problem}")
    if evicted:
        out(f"Transcript of the evicted run: {url}/runs/{evicted['run_id']}/")
    out(f"Story told {summary['seconds_from_command']:.1f}s after the command.")
    if runs.get("maybe_sent", {}).get("unknown_steps"):
        out(
            "Try it: log in as supervisor, open the waiting email.send, look in .demo/mail, and "
            "mark it sent (or retry, or abandon) with a note; the run's pod is restarted by its "
            "deployment (this story's process) and finishes the run."
        )
    out(
        f"Review queue: {summary['review_queue']}  (log in as supervisor or support-sup: "
        "support's queue; billing-sup: billing's)"
    )
    out()


def wait_web(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/login/", timeout=2)  # a cheap page (the schema takes seconds)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f}s (see .demo/logs/web.log)")


def print_told(round_no: int, url: str) -> None:
    """A restart: the story of the latest round is in the database already; where it stands."""
    print(
        f"==> the story is already in this database (round {round_no}); it is not told again "
        "(scripts/demo --new-story tells another round, scripts/demo --reset starts afresh)",
        flush=True,
    )
    runs = Run.objects.filter(
        agent="support", external_id__regex=rf"^ticket:T-{round_no}\d{{3}}$"
    ).order_by("external_id", "created_at")
    for external_id, status in runs.values_list("external_id", "status"):
        print(f"  {(external_id or '').removeprefix('ticket:')}  {status}", flush=True)
    print(
        f"Review queue: {url}/queue/  (log in as supervisor or support-sup: support's queue; "
        "billing-sup: billing's)",
        flush=True,
    )


def told_story(round_no: int, url: str) -> Story:
    """The told round's pods as their deployment knows them after a restart: each pod run that is
    not finished yet is watched again, so a decision taken after the restart still resumes it."""
    story = Story(round_no=round_no, url=url)
    env = {**os.environ, "INTENTLEDGER_URL": url, **CRASH_HOOKS}
    for ticket in story_tickets(round_no):
        if ticket.role not in POD_EMAIL_ENFORCED_BY:
            continue
        tid = ticket_id(round_no, ticket)
        run = Run.objects.filter(agent="support", external_id=f"ticket:{tid}").first()
        if run is None or run.status in FINAL_STATUSES:
            continue
        story.deployed[str(run.pk)] = (tid, story_pod_argv(round_no, ticket), team_env(ticket, env))
    return story


def run_story(
    *, url: str, started: float, no_story: bool = False, again: bool = False
) -> Story | None:
    wait_web(url)
    print(f"Agent Ledger is running at {url}/", flush=True)
    print(f"Dashboard: {url}/ (log in at {url}/login/); review queue: {url}/queue/", flush=True)
    print(f"API schema: {url}/api/v1/schema/", flush=True)
    print(f"Ready {time.time() - started:.1f}s after the command.", flush=True)
    if no_story:
        return None
    round_no = next_round()
    if round_no > 1 and not again:  # a restart: the same story with new tickets helps nobody
        print_told(round_no - 1, url)
        return told_story(round_no - 1, url)

    env = {**os.environ, "INTENTLEDGER_URL": url}
    story = Story(round_no=round_no, url=url)
    tickets = story_tickets(story.round_no)
    by_role = {t.role: t for t in tickets}
    print(
        f"==> the story (round {story.round_no}): 4 support tickets to the Celery worker, "
        "2 to agent worker processes that get killed; 2 billing tickets to billing's worker "
        "processes, one of which gets killed",
        flush=True,
    )
    celery_tickets = [t for t in tickets if t.role in ("completes", "budget")]
    dispatch_through_celery(story, celery_tickets)
    print(
        f"==> {ticket_id(story.round_no, by_role['evicted'])}: a worker process evicted "
        f"(SIGKILL) after step {EVICT_AFTER_STEP}, then replaced; meanwhile "
        f"{ticket_id(story.round_no, by_role['maybe_sent'])}: a worker process killed "
        "inside email.send, then replaced",
        flush=True,
    )
    billing_maybe_sent = by_role["billing_maybe_sent"]
    # (each pod's environment, its team's token, read here: the pool's threads read nothing)
    with ThreadPoolExecutor(max_workers=3) as pool:  # pods at once, as on a cluster
        plays = [
            pool.submit(play_evicted, story, by_role["evicted"], env),
            pool.submit(play_maybe_sent, story, by_role["maybe_sent"], env),
            pool.submit(
                play_maybe_sent, story, billing_maybe_sent, team_env(billing_maybe_sent, env)
            ),
            pool.submit(play_billing, story, by_role["billing"], team_env(by_role["billing"], env)),
        ]
        for play in plays:
            play.result()
    wait_final(story, [t.number for t in celery_tickets])
    summary = summarise(story, tickets, started)
    (STATE / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    connections.close_all()
    print_summary(summary)
    return story
