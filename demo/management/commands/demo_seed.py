"""`manage.py demo_seed`: migrate, then the demo's two teams, users, worker token and budget
policies.

The story is told in two teams: `default` (shown as "Support": the support desk's tickets, as
every demo before teams told them) and `billing`. Each has a supervisor of its own, who sees only
their team's review queue; the admin and the auditor hold their role in both."""

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
from runs.tokens import celery_agents_token_ensure, worker_token_create
from teams.models import DEFAULT_TEAM_SLUG, Role, Team, default_team
from teams.scope import every_team_scope, set_current, team_scope
from teams.services import GROUP_ROLE, grant_role, team_create, team_rename

SUPPORT_NAME = "Support"  # how the demo shows `default`, the support desk's team
BILLING = "billing"
# (username, dashboard group: its role in `default`, or None, roles in billing)
USERS: tuple[tuple[str, str | None, tuple[str, ...]], ...] = (
    ("supervisor", "supervisors", ()),
    ("admin", "admins", (Role.ADMIN,)),
    ("auditor", "auditors", (Role.AUDITOR,)),
    ("support-sup", "supervisors", ()),
    ("billing-sup", None, (Role.SUPERVISOR,)),
)

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
        "Migrate the database, then create the demo's teams (default, shown as Support, and "
        "billing) and users (supervisor, admin, auditor, support-sup, billing-sup: passwords "
        "printed once and kept in STATE/credentials.txt), register its worker token "
        "(STATE/worker-token; a new one when there is none or it was revoked) and the support "
        "and research agents' budget policies in each team. Running it again changes nothing."
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
        support = team_rename(default_team(), SUPPORT_NAME, actor=SEED_ACTOR)
        billing = Team.objects.filter(slug=BILLING).first() or team_create(
            slug=BILLING, name="Billing", actor=SEED_ACTOR
        )
        created = []
        for name, group_name, billing_roles in USERS:
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
                created.append((name, (group_name, billing_roles), password))
            if group_name is not None:
                user.groups.add(Group.objects.get(name=group_name))  # groups from a migration
                grant_role(user, support, GROUP_ROLE[group_name], actor="demo_seed")
            for role in billing_roles:
                grant_role(user, billing, role, actor="demo_seed")
        if created:
            lines = "".join(f"{n}\t{p}\t({_roles_words(w, group=True)})\n" for n, w, p in created)
            private_write(state / "credentials.txt", lines, mode="a")
            self.stdout.write(
                "Demo users (passwords shown this once; also in .demo/credentials.txt):"
            )
            for name, words, password in created:
                self.stdout.write(f"    {name:<11} {password}   ({_roles_words(words)})")
        else:
            self.stdout.write(
                "Demo users: supervisor, admin, auditor, support-sup, billing-sup (passwords in "
                ".demo/credentials.txt)"
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
        for team in (support, billing):
            with team_scope(team.pk):
                for agent, limits in POLICIES.items():
                    policy = BudgetPolicy.objects.filter(agent=agent).first()
                    if policy is None:
                        values = {"name": f"{agent} (demo)", "agent": agent, **limits}
                        # the seed made them, not the person the audit log would otherwise name
                        policy = budget_policy_save(user=SEED_ACTOR, policy=None, values=values)
                    if team == support:
                        described.append(
                            f"{agent}: {policy.max_steps} steps, {policy.max_tokens} tokens, "
                            f"{policy.max_recoveries} recoveries"
                        )
        self.stdout.write("Budget policies (in each team): " + "; ".join(described))
        # billing's agents journal with billing's own token (the story's billing pods use it)
        celery_agents_token_ensure(billing)
        self.stdout.write(
            f"Teams: {DEFAULT_TEAM_SLUG} (shown as {SUPPORT_NAME}: support-sup, supervisor) and "
            f"{BILLING} (billing-sup); admin and auditor hold their role in both"
        )


def _roles_words(roles: tuple[str | None, tuple[str, ...]], *, group: bool = False) -> str:
    """A demo user's roles as the seed names them: the dashboard group (its role in `default`)
    as before ("supervisors"; "group supervisors" in the credentials file), then billing's."""
    group_name, billing_roles = roles
    words = [f"group {group_name}" if group else group_name] if group_name else []
    words += [f"{role} in billing" for role in billing_roles]
    return ", ".join(words)
