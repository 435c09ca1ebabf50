"""`manage.py demo_seed`: migrate, then the demo's users, worker token and budget policies."""

import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from review.services.policies import budget_policy_save
from runs.authentication import hash_token
from runs.models import BudgetPolicy, WorkerToken
from runs.tokens import worker_token_create
from teams.models import default_team
from teams.scope import every_team_scope, set_current
from teams.services import GROUP_ROLE, grant_role

USERS = (("supervisor", "supervisors"), ("admin", "admins"), ("auditor", "auditors"))

SEED_ACTOR = "system:demo_seed"
# the support agent's policy: room for an ordinary ticket (about 600 tokens with the scripted
# model), not for one with a whole log pasted in; a read-only agent would need only a budget
POLICIES: dict[str, dict[str, Any]] = {
    "support": {"max_steps": 20, "max_tokens": 5_000, "max_wall_seconds": 900, "max_recoveries": 3},
    "research": {
        "max_steps": 40,
        "max_tokens": 50_000,
        "max_wall_seconds": 1800,
        "max_recoveries": 5,
    },
}


def private_write(path: Path, text: str, mode: str = "w") -> None:
    with open(path, mode) as handle:
        path.chmod(0o600)
        handle.write(text)


class Command(BaseCommand):
    help = (
        "Migrate the database, then create the demo's users (supervisor, admin, auditor: passwords printed once and kept in "
        "STATE/credentials.txt), register its worker token (STATE/worker-token; a new one when "
        "there is none or it was revoked) and "
        "the support and research agents' budget policies. Running it again changes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--state",
            type=Path,
            default=Path(settings.BASE_DIR) / ".demo",
            help="the demo's folder (default: .demo in the checkout)",
        )

    def handle(self, *args: Any, state: Path, **options: Any) -> None:
        state.mkdir(exist_ok=True)
        with connection.cursor() as cursor:
            # this session only: a demo database lost to a power cut is seeded again; the web
            # server and the workers commit as usual
            cursor.execute("SET synchronous_commit TO off")
        call_command("migrate", interactive=False, verbosity=0)  # one Django start-up, not two
        # the demo's rows: every team seen, new ones in `default` (teams.scope)
        set_current(every_team_scope("operator command", home=default_team().pk))
        created = []
        for name, group_name in USERS:
            user = User.objects.filter(username=name).first()
            if user is None:
                password = secrets.token_urlsafe(12)
                user = User.objects.create_user(
                    username=name,
                    password=password,
                    is_staff=group_name == "admins",
                    # escalations mail the supervisors; the demo's mail catcher gets it
                    email=f"{name}@demo.agent-ledger.invalid",
                )
                created.append((name, group_name, password))
            user.groups.add(Group.objects.get(name=group_name))  # groups come from a migration
            grant_role(user, default_team(), GROUP_ROLE[group_name], actor="demo_seed")
        if created:
            lines = "".join(f"{n}\t{p}\t(group {g})\n" for n, g, p in created)
            private_write(state / "credentials.txt", lines, mode="a")
            self.stdout.write(
                "Demo users (passwords shown this once; also in .demo/credentials.txt):"
            )
            for name, group_name, password in created:
                self.stdout.write(f"    {name:<11} {password}   ({group_name})")
        else:
            self.stdout.write(
                "Demo users: supervisor, admin, auditor (passwords in .demo/credentials.txt)"
            )

        token_file = state / "worker-token"
        raw = token_file.read_text().strip() if token_file.exists() else ""
        known = WorkerToken.objects.filter(token_hash=hash_token(raw)).first() if raw else None
        if known is None or known.revoked_at is not None:
            # the token `python -m demo.embedded start` chose (the worker already has it in its
            # environment); a new one when there is none or it was revoked
            mine = raw if raw and known is None else None
            _, raw = worker_token_create(
                name="demo-workers", created_by="manage.py demo_seed", raw=mine
            )
            private_write(token_file, raw + "\n")
            if known is not None:
                self.stdout.write(
                    "The demo's worker token was revoked: a new one is in .demo/worker-token "
                    "(the Celery worker uses it from the next start)."
                )
        self.stdout.write(f"Worker token (Authorization: Bearer …): {raw}")

        described = []
        for agent, limits in POLICIES.items():
            policy = BudgetPolicy.objects.filter(agent=agent).first()
            if policy is None:
                values = {"name": f"{agent} (demo)", "agent": agent, **limits}
                # the seed made them, not the person the audit log would otherwise name
                policy = budget_policy_save(user=SEED_ACTOR, policy=None, values=values)
            described.append(
                f"{agent}: {policy.max_steps} steps, {policy.max_tokens} tokens, "
                f"{policy.max_recoveries} recoveries"
            )
        self.stdout.write("Budget policies: " + "; ".join(described))
