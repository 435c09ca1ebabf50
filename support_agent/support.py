"""The support-ticket agent from the story: read a ticket, search the knowledge base, open a
tracker ticket, email the customer, comment, close; 20 steps with model calls in between.

Every step goes through the ledger, so a crash at any step resumes instead of redoing. Django-free:
a worker process imports only this, the SDK and httpx.

    python -m support_agent.support --ticket T-1001
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from intentledger import (
    BudgetExceeded,
    LeaseHeld,
    Ledger,
    LedgerError,
    LedgerUnavailable,
    NeedsReview,
    NondeterminismError,
    Run,
    RunFinished,
    StaleLease,
    StepInfo,
)

from celery_agents import hooks
from support_agent import AGENT
from support_agent.llm import Model, model_from_name

EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")

# a tiny inbox so `--ticket T-1001` works in the demo without typing a whole ticket
DEMO_INBOX: dict[str, dict[str, str]] = {
    "T-1001": {
        "customer": "ada@example.com",
        "subject": "Charged twice for my March invoice",
        "body": "Hello, my card was charged twice for invoice INV-2291. Please refund one charge.",
    },
    "T-1002": {
        "customer": "grace@example.com",
        "subject": "Cannot reset my password",
        "body": "The reset link in your email says it has expired every time I click it.",
    },
    "T-1003": {
        "customer": "linus@example.com",
        "subject": "Export to CSV is missing columns",
        "body": "The CSV export of my orders has no shipping address column since last week.",
    },
}


def ticket_input(ticket_id: str, **overrides: str | None) -> dict[str, Any]:
    """The run input for an inbound ticket: the demo inbox entry, overridden by what is given."""
    base = dict(DEMO_INBOX.get(ticket_id, {}))
    base.update({k: v for k, v in overrides.items() if v})
    missing = [k for k in ("customer", "subject", "body") if not base.get(k)]
    if missing:
        raise ValueError(
            f"ticket {ticket_id!r} is not in the demo inbox; give --{', --'.join(missing)}"
        )
    if not EMAIL.match(base["customer"]):
        raise ValueError(f"customer {base['customer']!r} is not an email address")
    return {"ticket": {"id": ticket_id, **base}}


def send_email_smtp(*, to: str, subject: str, body: str, ticket_id: Any = None) -> dict[str, Any]:
    """email.send without the gateway: plain SMTP the ledger cannot see into (enforced_by nobody)."""
    import smtplib
    from email.message import EmailMessage

    message = EmailMessage()
    message["From"] = os.environ.get("DEFAULT_FROM_EMAIL", "support@agentledger.local")
    message["To"] = to
    message["Subject"] = subject
    message.set_content(body)
    host = os.environ.get("EMAIL_HOST", "127.0.0.1")
    port = int(os.environ.get("EMAIL_PORT", "25"))
    with smtplib.SMTP(host, port, timeout=10) as smtp:
        smtp.send_message(message)
    return {"email": {"id": None, "message_id": None, "via": "smtp"}}


@dataclass
class SupportAgent:
    """One run of the agent. `email_enforced_by` = "nobody" sends mail outside the gateway."""

    run: Run
    model: Model
    email_enforced_by: str = "ledger"
    steps: list[str] = field(default_factory=list)

    def _before(self, name: str) -> None:
        hooks.on_step(self.run.next_index, name, "before")

    def _inside(self, name: str, fn: Any) -> Any:
        """`fn` with the "inside" hook called after its effect, before its outcome is journalled."""
        index = self.run.next_index

        @functools.wraps(fn)  # the same signature, so the SDK passes the key only if fn takes it
        def then_hook(**args: Any) -> Any:
            result = fn(**args)
            hooks.on_step(index, name, "inside")
            return result

        return then_hook

    def think(self, task: str, prompt: str, context: list[str] | None = None) -> str:
        """A model step: the reply's text (journalled; replayed without spending tokens)."""
        step = f"model.{task.split(':', 1)[0].strip().lower().replace(' ', '_')}"
        self._before(step)
        messages = [{"role": "system", "content": task}]
        messages += [{"role": "assistant", "content": c} for c in (context or [])]
        messages.append({"role": "user", "content": prompt})
        model = self.model
        result = self.run.model(
            lambda messages, model_name: model.complete(messages).as_result(model_name),
            messages,
            name=step,
            model_name=model.name,
        )
        return str(result["content"])

    def read(self, name: str, arguments: dict[str, Any]) -> Any:
        self._before(name)
        return self.run.tool(name, arguments, effect="read")

    def write(self, name: str, arguments: dict[str, Any]) -> Any:
        self._before(name)
        if name == "email.send" and self.email_enforced_by == "nobody":
            fn = self._inside(name, send_email_smtp)
            return self.run.tool(name, arguments, enforced_by="nobody", fn=fn)
        if hooks.active():
            run = self.run

            def gateway(idempotency_key: str, **args: Any) -> Any:
                return run.gateway(name, args, idempotency_key=idempotency_key)

            # still the gateway with the step's key, so the ledger enforces it
            fn = self._inside(name, gateway)
            return self.run.tool(name, arguments, enforced_by="ledger", fn=fn)
        return self.run.tool(name, arguments)

    def resolve(self) -> dict[str, Any]:
        ticket = self.run.input["ticket"]
        customer, subject, body = ticket["customer"], ticket["subject"], ticket["body"]
        inbound = f"From {customer}. Subject: {subject}. {body}"

        triage = self.think("Triage: classify the ticket and name a search query", inbound)  # 0
        hits = self.read("kb.search", {"query": subject[:200], "limit": 3})  # 1
        titles = "; ".join(a["title"] for a in hits.get("articles", [])) or "no articles"
        ranked = self.think("Rank articles: pick the most relevant", titles, [triage])  # 2
        more = self.read("kb.search", {"query": body[:200], "limit": 3})  # 3
        history = self.read("tickets.search", {"customer": customer})  # 4
        past = len(history.get("tickets", []))
        mood = self.think("Sentiment: how upset is the customer", inbound)  # 5
        more_titles = "; ".join(a["title"] for a in more.get("articles", []))
        plan = self.think(
            "Plan: decide the resolution steps",
            f"{inbound} Known articles: {more_titles}. Past tickets: {past}.",
            [triage, ranked, mood],
        )  # 6
        summary = self.think("Draft ticket: write the tracker ticket body", inbound, [plan])  # 7
        created = self.write(
            "tickets.create",
            {"customer": customer, "subject": subject[:200], "body": summary},
        )  # 8
        ticket_id = created["ticket"]["id"]
        draft = self.think("Draft email: answer the customer", inbound, [plan, ranked])  # 9
        reviewed = self.think("Review email: make it clear and kind", draft)  # 10
        sent = self.write(
            "email.send",
            {
                "to": customer,
                "subject": f"Re: {subject}"[:200],
                "body": reviewed,
                "ticket_id": ticket_id,
            },
        )  # 11
        note = self.think("Draft comment: note what was done", f"Emailed {customer}.", [plan])  # 12
        self.write("tickets.comment", {"ticket_id": ticket_id, "body": note})  # 13
        check = self.think("Check resolution: is anything left to do", note, [reviewed])  # 14
        resolution = self.think("Draft resolution: one line for the ticket", check)  # 15
        self.write("tickets.close", {"ticket_id": ticket_id, "resolution": resolution})  # 16
        after = self.read("tickets.search", {"customer": customer})  # 17
        final = self.think("Summary: summarise the run for the supervisor", resolution)  # 18
        self.think("Final review: confirm the summary", final)  # 19
        return {
            "ticket_id": ticket_id,
            "email": sent.get("email"),
            "customer_tickets": len(after.get("tickets", [])),
            "summary": final,
        }


@dataclass
class Outcome:
    """What a worker did with one run (printed as one JSON line by the CLI)."""

    run_id: str
    status: str
    replayed: int = 0
    executed: int = 0
    recovered: bool = False
    lease_seconds: float | None = None
    error: str | None = None
    output: Any = None
    hooks: dict[str, Any] = field(default_factory=dict)  # what the step hooks report

    def as_json(self) -> str:
        fields = {k: v for k, v in self.__dict__.items() if k != "hooks"}
        return json.dumps({**fields, **self.hooks}, default=str)


def run_support(
    ledger: Ledger,
    *,
    run_id: str | None = None,
    input: dict[str, Any] | None = None,
    external_id: str | None = None,
    model: Model,
    worker: str | None = None,
    ttl_seconds: int = 30,
    email_enforced_by: str = "ledger",
    wait_lease_seconds: float = 0.0,
) -> Outcome:
    """Run (or resume) one support run to its end or to a clean stop; never raises StopRun."""
    deadline = time.monotonic() + wait_lease_seconds
    while True:
        context = (
            ledger.attach(run_id, worker=worker, ttl_seconds=ttl_seconds, on_step=_after_step)
            if run_id
            else ledger.run(
                AGENT,
                input,
                external_id=external_id,
                worker=worker,
                ttl_seconds=ttl_seconds,
                on_step=_after_step,
            )
        )
        try:
            with context as run:
                agent = SupportAgent(run=run, model=model, email_enforced_by=email_enforced_by)
                run.output = agent.resolve()
            return _outcome(context, "completed")
        except LeaseHeld as held:
            if time.monotonic() >= deadline:
                return _outcome(context, "lease_held", error=str(held))
            time.sleep(min(1.0, max(0.1, deadline - time.monotonic())))
        except NeedsReview as stop:
            return _outcome(context, "needs_review", error=str(stop))
        except BudgetExceeded as stop:
            return _outcome(context, "budget_exceeded", error=str(stop))
        except StaleLease as stop:
            return _outcome(context, "stale_lease", error=str(stop))
        except RunFinished as stop:
            return _outcome(context, "run_finished", error=str(stop))
        except (NondeterminismError, LedgerUnavailable):
            raise  # nothing was written: recovery (or the caller's retry) decides
        except Exception as exc:  # the run context recorded the failure
            return _outcome(context, "failed", error=f"{type(exc).__name__}: {exc}")


def _after_step(run: Run, info: StepInfo) -> None:
    hooks.on_step(info.index, info.name, "replayed" if info.replayed else "after")


def _outcome(run: Run, status: str, *, error: str | None = None) -> Outcome:
    return Outcome(
        run_id=run.id,
        status=status,
        replayed=run.replayed,
        executed=run.executed,
        recovered=run.recovered,
        lease_seconds=run.lease_seconds or None,
        error=error,
        output=run.output if status == "completed" else None,
        hooks=hooks.report(),
    )


EXIT_CODES = {
    "completed": 0,
    "failed": 1,
    "needs_review": 3,
    "budget_exceeded": 4,
    "stale_lease": 5,
    "run_finished": 6,
    "lease_held": 7,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m support_agent.support",
        description=(
            "Resolve one support ticket with the support agent, journalled by Agent Ledger. "
            "Running it again for the same ticket attaches to the same run and resumes it."
        ),
        epilog=(
            "Exit codes: 0 completed, 1 failed or error, 2 bad input, 3 needs_review, "
            "4 budget_exceeded, 5 stale lease (another worker took over), 6 run already "
            "finished, 7 lease held by another worker. The last line of output is a JSON summary."
        ),
    )
    parser.add_argument("--ticket", help="inbound ticket id (demo inbox: T-1001..T-1003)")
    parser.add_argument("--customer", help="customer email (overrides the inbox)")
    parser.add_argument("--subject", help="ticket subject (overrides the inbox)")
    parser.add_argument("--body", help="ticket body (overrides the inbox)")
    parser.add_argument("--run-id", help="resume this run id instead of starting from a ticket")
    parser.add_argument(
        "--model",
        default=os.environ.get("AGENT_MODEL", "scripted"),
        choices=["scripted", "openai"],
        help="scripted (deterministic, offline) or openai (AGENT_OPENAI_BASE_URL, "
        "AGENT_OPENAI_MODEL, AGENT_OPENAI_API_KEY); default $AGENT_MODEL or scripted",
    )
    parser.add_argument(
        "--ledger-url", default=os.environ.get("INTENTLEDGER_URL"), help="$INTENTLEDGER_URL"
    )
    parser.add_argument(
        "--ledger-token", default=os.environ.get("INTENTLEDGER_TOKEN"), help="$INTENTLEDGER_TOKEN"
    )
    parser.add_argument(
        "--worker",
        default=os.environ.get("INTENTLEDGER_WORKER"),
        help="stable worker name; a restart under the same name takes its lease back at once "
        "(default $INTENTLEDGER_WORKER or host:pid)",
    )
    parser.add_argument("--ttl", type=int, default=30, help="lease TTL in seconds (5-600)")
    parser.add_argument(
        "--wait-lease",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="when another worker holds the lease, wait up to this long for it to expire",
    )
    parser.add_argument(
        "--email-enforced-by",
        choices=["ledger", "nobody"],
        default=os.environ.get("AGENT_EMAIL_ENFORCED_BY", "ledger"),
        help="ledger: email.send through the gateway with its key; nobody: plain SMTP "
        "(EMAIL_HOST/EMAIL_PORT) the ledger cannot see into (default $AGENT_EMAIL_ENFORCED_BY)",
    )
    args = parser.parse_args(argv)
    if not args.ticket and not args.run_id:
        parser.error("give --ticket ID (or --run-id to resume a run)")
    if not args.ledger_url or not args.ledger_token:
        parser.error("set INTENTLEDGER_URL and INTENTLEDGER_TOKEN (or --ledger-url/--ledger-token)")
    if not 5 <= args.ttl <= 600:
        parser.error("--ttl must be between 5 and 600")
    try:
        run_input = (
            ticket_input(args.ticket, customer=args.customer, subject=args.subject, body=args.body)
            if args.ticket
            else None
        )
        model = model_from_name(args.model)
    except Exception as exc:
        parser.error(str(exc))
    with Ledger(args.ledger_url, args.ledger_token) as ledger:
        try:
            outcome = run_support(
                ledger,
                run_id=args.run_id,
                input=run_input,
                external_id=f"ticket:{args.ticket}" if args.ticket and not args.run_id else None,
                model=model,
                worker=args.worker,
                ttl_seconds=args.ttl,
                email_enforced_by=args.email_enforced_by,
                wait_lease_seconds=args.wait_lease,
            )
        except LedgerError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    if outcome.status != "completed":
        print(f"run {outcome.run_id} stopped: {outcome.status}: {outcome.error}", file=sys.stderr)
    print(outcome.as_json(), flush=True)
    return EXIT_CODES.get(outcome.status, 1)


if __name__ == "__main__":
    sys.exit(main())
