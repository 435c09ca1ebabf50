"""The evidence pack: one signed ZIP an auditor can hand over (audit/EVIDENCE_FORMAT.md).

`evidence_pack_write` streams every file into the ZIP one after the other, hashing as it writes,
and signs the manifest last: the runs come from the JSONL export (runs read 500 at a time, each
batch from one snapshot), decisions are derived from the same run lines as they pass (so they
agree with the chains the verifier checks), the audit log and the purges are iterated, never
loaded whole. Memory stays flat at 10,000 runs.

Scope: `PackScope` decides which runs and which audit entries a pack holds. A pack is one
team's (docs/teams.md): it is written under that team's row-level-security scope, so its runs,
decisions, audit entries, policies, rules and incidents are the team's and no other's (a query
that forgot its filter would still see no other team's row); its people are those who hold a role
in the team, or whose role in it changed; the manifest names the team.
"""

import csv
import hashlib
import io
import json
import tempfile
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from importlib import metadata
from typing import IO, Any

from django.contrib.auth import get_user_model
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Q, QuerySet
from django.template.loader import render_to_string

from audit.evidence_verify import (
    DECISION_COLUMNS,
    DECISION_MARKERS,
    DECISIONS,
    MANIFEST,
    PACK_FORMAT,
    PACK_VERSION,
    PUBLIC_KEY,
    RUNS,
    csv_text,
    decision_rows,
    key_fingerprint,
)
from audit.exports import ExportFilters, export_jsonl
from audit.models import Incident, IncidentRun, RetentionPolicy
from audit.retention import retention_floor_days
from audit.signing import public_key_text, sign, signing_key_id, signing_public_key
from review.models import AuditEntry
from review.services.policies import POLICY_FIELDS
from runs import clock
from runs.models import ApprovalRule, BudgetPolicy, Run
from teams.models import DEFAULT_TEAM_SLUG, Membership, Team
from teams.scope import current, team_scope
from teams.services import GROUP_ROLE, group_names_of

GENERATOR = "agent-ledger-server"
Progress = Callable[[int, int], None]  # (runs written, bytes written)

# audit-log actions that set a person's groups (their details carry "groups")
ROLE_ACTIONS = ("people.create", "people.groups", "sso.roles", "sso.login")
# and a role granted or revoked in a team (details: "role", "team"), filed in that team
TEAM_ROLE_ACTIONS = ("team.role_grant", "team.role_revoke")
ROLE_GROUP = {role: group for group, role in GROUP_ROLE.items()}
# what the people file's history holds: grants, revocations, sign-ins and refusals
PEOPLE_ACTIONS = (
    *ROLE_ACTIONS,
    "people.deactivate",
    "people.reactivate",
    "login",
    "login.failed",
    "login.lockout",
    "login.refused_locked",
    "sso.refused",
    *TEAM_ROLE_ACTIONS,
)
SETTING_PREFIXES = ("policy.", "approval_rule.", "run.limits.")
HOLD_ACTIONS = ("run.legal_hold", "run.legal_hold_lift")
_ENCODER = DjangoJSONEncoder()


def generator_version() -> str:
    try:
        return metadata.version(GENERATOR)
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class PackScope:
    """Runs of `team` created in [period_from, period_to] (UTC dates, inclusive) of `agents`
    (all when empty), and the team's audit entries of the same period. The pack is written under
    the team's scope (`team_scope`): every query of it sees that team's rows only."""

    period_from: date
    period_to: date
    agents: tuple[str, ...] = ()
    team: Team | None = None  # None: the one team there is (evidence_scope_parse decides)

    @property
    def start(self) -> datetime:
        return datetime.combine(self.period_from, time.min, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        """The first instant after the period."""
        return datetime.combine(self.period_to + timedelta(days=1), time.min, tzinfo=UTC)

    def run_filters(self) -> ExportFilters:
        return ExportFilters(
            created_from=self.period_from, created_to=self.period_to, agents=self.agents
        )

    def runs(self) -> QuerySet[Run]:
        return self.run_filters().queryset()

    def audit_entries(self) -> QuerySet[AuditEntry]:
        return AuditEntry.objects.filter(at__gte=self.start, at__lt=self.end)

    def as_dict(self) -> dict[str, Any]:
        return {"agents": list(self.agents) or None, "team": self.team_slug}

    @property
    def team_slug(self) -> str | None:
        return self.team.slug if self.team else None

    def team_named(self) -> dict[str, Any] | None:
        if self.team is None:
            return None
        return {"id": self.team.pk, "slug": self.team.slug, "name": self.team.name}


# --- who held which role when ---------------------------------------------------------------


@dataclass
class RoleHistory:
    """Each person's dashboard groups over time, from the audit log's role changes.

    Before a person's first recorded change, their groups are what that change started from
    (its groups less what it added, plus what it removed); a person with no recorded change has
    their groups of today (`source` says so).
    """

    users: dict[str, Any] = field(default_factory=dict)  # username -> User
    by_pk: dict[int, Any] = field(default_factory=dict)
    # the team's people (a role in it now, or a role change in it); None: everyone
    members: set[int] | None = None
    team_roles_now: dict[int, frozenset[str]] = field(default_factory=dict)  # groups, by pk
    by_team_roles: bool = False  # a team other than default: roles from its grants
    changes: dict[int, list[tuple[datetime, frozenset[str], frozenset[str]]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # pk -> [(at, groups after, groups before)]

    @classmethod
    def load(cls, *, until: datetime, team: Team | None = None) -> "RoleHistory":
        """The history of everyone's groups (no team), or of one team's roles, read under that
        team's scope: `default`'s roles are the dashboard's groups (as before teams); another
        team's are its grants and revocations (team.role_grant / team.role_revoke)."""
        history = cls()
        for user in get_user_model()._default_manager.prefetch_related("groups"):
            history.users[user.get_username()] = user
            history.by_pk[user.pk] = user
        if team is not None:
            now: dict[int, set[str]] = defaultdict(set)
            for user_id, role in Membership.objects.filter(team_id=team.pk).values_list(
                "user_id", "role"
            ):
                now[user_id].add(ROLE_GROUP.get(role, role))
            history.team_roles_now = {pk: frozenset(g) for pk, g in now.items()}
            history.members = set(now) | {
                pk for pk, user in history.by_pk.items() if user.is_superuser
            }
            if team.slug != DEFAULT_TEAM_SLUG:
                history.by_team_roles = True
                history._load_team_grants()
                history.members |= set(history.changes)
                return history
        entries = AuditEntry.objects.filter(
            action__in=ROLE_ACTIONS, target__startswith="user:", at__lt=until
        ).order_by("at", "id")
        for entry in entries.iterator(chunk_size=2000):
            try:
                pk = int(entry.target.removeprefix("user:"))
            except ValueError:
                continue
            details = entry.details or {}
            if "groups" not in details:
                continue
            after = frozenset(details.get("groups") or [])
            if entry.action == "people.create":
                before: frozenset[str] = frozenset()
            else:
                before = (after - set(details.get("added") or [])) | set(
                    details.get("removed") or []
                )
            history.changes[pk].append((entry.at, after, before))
        if history.members is not None:
            history.members |= set(history.changes)
        return history

    def _load_team_grants(self) -> None:
        """A team's role changes (every one, in order), walked back from its roles now: each
        change's groups after and before it."""
        entries = AuditEntry.objects.filter(
            action__in=TEAM_ROLE_ACTIONS, target__startswith="user:"
        ).order_by("-at", "-id")
        held = {pk: set(groups) for pk, groups in self.team_roles_now.items()}
        backwards: dict[int, list[tuple[datetime, frozenset[str], frozenset[str]]]] = defaultdict(
            list
        )
        for entry in entries.iterator(chunk_size=2000):
            try:
                pk = int(entry.target.removeprefix("user:"))
            except ValueError:
                continue
            group = ROLE_GROUP.get((entry.details or {}).get("role", ""), "")
            after = frozenset(held.setdefault(pk, set()))
            if entry.action == "team.role_grant":
                held[pk].discard(group)
            else:
                held[pk].add(group)
            backwards[pk].append((entry.at, after, frozenset(held[pk])))
        for pk, changes in backwards.items():
            self.changes[pk] = list(reversed(changes))

    def people(self) -> list[Any]:
        """The pack's people, by id: the team's (or everyone, for a pack of no team)."""
        return sorted(
            (u for u in self.by_pk.values() if self.members is None or u.pk in self.members),
            key=lambda u: u.pk,
        )

    def groups_now(self, user: Any) -> frozenset[str]:
        if self.by_team_roles:
            return self.team_roles_now.get(user.pk, frozenset())
        return group_names_of(user)

    def groups_at(self, user: Any, at: datetime) -> tuple[frozenset[str], str]:
        changes = self.changes.get(user.pk, [])
        held: frozenset[str] | None = None
        for when, after, before in changes:
            if when <= at:
                held = after
            elif held is None:
                return before, "audit log"
            else:
                break
        if held is not None:
            return held, "audit log"
        return self.groups_now(user), "current (no recorded change)"

    def role_at(self, username: str, at: datetime) -> str:
        user = self.users.get(username)
        if user is None:
            return "unknown (no such user)"
        if user.is_superuser:
            return "superuser"
        groups, _ = self.groups_at(user, at)
        return "+".join(sorted(groups)) or "none"


# --- writing the ZIP -------------------------------------------------------------------------


class _HashingWriter:
    """A ZIP member's writer that hashes and counts what passes through it."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.handle.write(data)
        self.digest.update(data)
        self.bytes += len(data)


@dataclass
class PackSummary:
    runs: int = 0
    decisions: int = 0
    audit_entries: int = 0
    incidents: int = 0
    purges: int = 0
    files: list[dict[str, Any]] = field(default_factory=list)
    fingerprint: str = ""


class _Pack:
    def __init__(self, target: IO[bytes]) -> None:
        self.zip = zipfile.ZipFile(
            target, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6, allowZip64=True
        )
        self.files: list[dict[str, Any]] = []

    def member(self, name: str, chunks: Iterable[bytes]) -> None:
        info = zipfile.ZipInfo(name, date_time=clock.now().timetuple()[:6])
        info.compress_type = zipfile.ZIP_DEFLATED
        with self.zip.open(info, "w", force_zip64=True) as handle:
            writer = _HashingWriter(handle)
            for chunk in chunks:
                writer.write(chunk)
        self.files.append(
            {"path": name, "sha256": writer.digest.hexdigest(), "bytes": writer.bytes}
        )

    def close(self) -> None:
        self.zip.close()


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, indent=2, sort_keys=True, cls=DjangoJSONEncoder).encode("utf-8")


def _jsonl(rows: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for row in rows:
        yield json.dumps(row, sort_keys=True, cls=DjangoJSONEncoder).encode("utf-8") + b"\n"


def _csv(columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(list(columns))
    for count, row in enumerate(rows, start=1):
        writer.writerow([csv_text(v) for v in row])
        if count % 1000 == 0:
            yield buffer.getvalue().encode("utf-8")
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode("utf-8")


def _entry(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.pk,
        "at": entry.at.isoformat(),
        "actor": entry.actor_name,
        "action": entry.action,
        "target": entry.target,
        "note": entry.note,
        "details": entry.details,
    }


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _runs_and_decisions(
    pack: _Pack,
    scope: PackScope,
    roles: RoleHistory,
    progress: Progress | None,
    summary: PackSummary,
) -> None:
    """runs.jsonl (the JSONL export) streamed into the ZIP; each run line with a decision in it
    is read back for decisions.csv, spooled to a temporary file meanwhile."""
    rules = {str(r.pk): r for r in ApprovalRule.objects.all()}
    spool = tempfile.SpooledTemporaryFile(max_size=8 << 20, mode="w+", newline="")  # noqa: SIM115
    writer = csv.writer(spool)
    writer.writerow(DECISION_COLUMNS)

    def decisions_from(chunk: bytes) -> None:
        if not any(marker in chunk for marker in DECISION_MARKERS):
            return
        for line in chunk.split(b"\n"):
            if not line.startswith(b'{"kind":"run"'):
                continue
            if not any(marker in line for marker in DECISION_MARKERS):
                continue
            for row in decision_rows(json.loads(line)):
                rule = rules.get(row["approval_rule_id"])
                writer.writerow(
                    csv_text(cell)
                    for cell in [
                        row["at"],
                        row["by"],
                        roles.role_at(row["by"], _at(row["at"])),
                        row["run_id"],
                        row["step_index"],
                        row["tool"],
                        row["action"],
                        row["note"],
                        row["approval_rule_id"],
                        _rule_words(rule) if rule else "",
                        row["event_seq"],
                    ]
                )
                summary.decisions += 1

    def chunks() -> Iterator[bytes]:
        def seen(runs: int, written: int) -> None:
            summary.runs = runs
            if progress:
                progress(runs, written)

        for chunk in export_jsonl(filters=scope.run_filters(), progress=seen):
            decisions_from(chunk)
            yield chunk

    pack.member(RUNS, chunks())
    spool.seek(0)
    pack.member(
        DECISIONS, (block.encode("utf-8") for block in iter(lambda: spool.read(1 << 16), ""))
    )
    spool.close()


def _rule_words(rule: ApprovalRule) -> str:
    if rule.is_fork_fence:
        return "a fork's write the original already made (held for a person)"
    who = f"agent {rule.agent}" if rule.agent else "every agent"
    return f"{rule.tool_pattern} for {who}: {rule.approvals_required} approval(s)"


def _people(pack: _Pack, scope: PackScope, roles: RoleHistory) -> None:
    from sso.models import OidcIdentity

    issuers = dict(OidcIdentity.objects.values_list("user_id", "issuer"))
    last_day = scope.end - timedelta(microseconds=1)
    rows = []
    for user in roles.people():
        start, start_source = roles.groups_at(user, scope.start)
        end, _ = roles.groups_at(user, last_day)
        rows.append(
            [
                user.pk,
                user.get_username(),
                f"sso:{issuers[user.pk]}" if user.pk in issuers else "local",
                user.is_active,
                user.is_superuser,
                user.date_joined.isoformat(),
                "+".join(sorted(start)),
                "+".join(sorted(end)),
                "+".join(sorted(roles.groups_now(user))),
                start_source,
                user.last_login.isoformat() if user.last_login else "",
            ]
        )
    pack.member(
        "people.csv",
        _csv(
            [
                "user_id",
                "username",
                "source",
                "active_now",
                "superuser",
                "joined_at",
                "groups_at_period_start",
                "groups_at_period_end",
                "groups_now",
                "groups_before_first_change_from",
                "last_login",
            ],
            rows,
        ),
    )
    events = scope.audit_entries().filter(action__in=PEOPLE_ACTIONS).order_by("at", "id")
    pack.member(
        "people_events.csv",
        _csv(
            ["at", "action", "target", "actor", "groups", "added", "removed", "note", "details"],
            (
                [
                    e.at.isoformat(),
                    e.action,
                    e.target,
                    e.actor_name,
                    "+".join((e.details or {}).get("groups") or []),
                    "+".join((e.details or {}).get("added") or []),
                    "+".join((e.details or {}).get("removed") or []),
                    e.note,
                    json.dumps(e.details, sort_keys=True, cls=DjangoJSONEncoder),
                ]
                for e in events.iterator(chunk_size=2000)
            ),
        ),
    )


def _policies(pack: _Pack, scope: PackScope) -> None:
    changes = scope.audit_entries().filter(
        Q(action__startswith=SETTING_PREFIXES[0])
        | Q(action__startswith=SETTING_PREFIXES[1])
        | Q(action__startswith=SETTING_PREFIXES[2])
    )
    body = {
        "budget_policies_now": list(
            BudgetPolicy.objects.order_by("pk").values(
                "id", *POLICY_FIELDS, "created_at", "updated_at"
            )
        ),
        "approval_rules_now": [
            {
                "id": r.pk,
                "agent": r.agent,
                "tool_pattern": r.tool_pattern,
                "approvals_required": r.approvals_required,
                "expires_after_seconds": r.expires_after_seconds,
                "active": r.active,
                "is_fork_fence": r.is_fork_fence,
                "created_by": r.created_by,
                "created_at": r.created_at,
                "updated_at": r.updated_at,
                "words": _rule_words(r),
            }
            for r in ApprovalRule.objects.order_by("pk")
        ],
        "changes_in_period": [_entry(e) for e in changes.order_by("at", "id")],
    }
    pack.member("policies.json", [_json_bytes(body)])


def _retention(pack: _Pack, scope: PackScope, summary: PackSummary) -> None:
    policy = RetentionPolicy.objects.filter(pk=1).first()
    entries = scope.audit_entries()
    body = {
        "floor_days": retention_floor_days(),
        "policy_now": (
            {
                "enabled": policy.enabled,
                "keep_days": policy.keep_days,
                "updated_at": policy.updated_at,
                "updated_by": policy.updated_by,
            }
            if policy
            else {"enabled": False, "keep_days": None, "note": "never set"}
        ),
        "policy_changes_in_period": [
            _entry(e) for e in entries.filter(action="retention.update").order_by("at", "id")
        ],
        "legal_holds_now": [
            {
                "run_id": str(r["pk"]),
                "agent": r["agent"],
                "since": r["legal_hold_at"],
                "by": r["legal_hold_by"],
                "note": r["legal_hold_note"],
            }
            for r in scope.runs()
            .filter(legal_hold=True)
            .order_by("created_at", "pk")
            .values("pk", "agent", "legal_hold_at", "legal_hold_by", "legal_hold_note")
        ],
        "legal_hold_changes_in_period": [
            _entry(e) for e in entries.filter(action__in=HOLD_ACTIONS).order_by("at", "id")
        ],
    }
    pack.member("retention.json", [_json_bytes(body)])
    purges = entries.filter(action="retention.purge").order_by("at", "id")

    def purge_lines() -> Iterator[bytes]:
        for entry in purges.iterator(chunk_size=50):
            summary.purges += 1
            yield from _jsonl([_entry(entry)])

    pack.member("purges.jsonl", purge_lines())


def _incidents(pack: _Pack, scope: PackScope, summary: PackSummary) -> None:
    """Incidents that were open at some time in the period, or name a run of the pack."""
    in_pack = IncidentRun.objects.filter(run_id__in=scope.runs().values("pk")).values("incident_id")
    incidents = (
        Incident.objects.filter(
            Q(opened_at__lt=scope.end) & (Q(closed_at__isnull=True) | Q(closed_at__gte=scope.start))
        )
        | Incident.objects.filter(pk__in=in_pack)
    ).distinct()
    body = []
    for incident in incidents.order_by("opened_at", "pk"):
        history = AuditEntry.objects.filter(target=f"incident:{incident.pk}").order_by("at", "id")
        body.append(
            {
                "id": incident.pk,
                "title": incident.title,
                "severity": incident.severity,
                "severity_words": incident.get_severity_display(),
                "aware_at": incident.aware_at,
                "report_due_at": incident.report_due_at,
                "status": incident.status,
                "notes": incident.notes,
                "opened_by": incident.opened_by,
                "opened_at": incident.opened_at,
                "reported_at": incident.reported_at,
                "closed_at": incident.closed_at,
                "runs": [
                    str(r)
                    for r in incident.runs.order_by("run_id").values_list("run_id", flat=True)
                ],
                "history": [_entry(e) for e in history],
            }
        )
    summary.incidents = len(body)
    pack.member("incidents.json", [_json_bytes(body)])


def _audit_log(pack: _Pack, scope: PackScope, summary: PackSummary) -> None:
    def lines() -> Iterator[bytes]:
        for entry in scope.audit_entries().order_by("at", "id").iterator(chunk_size=2000):
            summary.audit_entries += 1
            yield from _jsonl([_entry(entry)])

    pack.member("audit_log.jsonl", lines())


def evidence_pack_write(
    *,
    scope: PackScope,
    target: IO[bytes],
    progress: Progress | None = None,
    generated_by: str = "system",
) -> PackSummary:
    """Write the pack for `scope` into `target` (a file opened for binary writing)."""
    created_at = clock.now()
    public_key = signing_public_key()
    key_id = signing_key_id()  # refuses before a byte is written when no key is set
    with team_scope(scope.team.pk) if scope.team is not None else nullcontext():
        return _pack_write(
            scope=scope,
            target=target,
            progress=progress,
            generated_by=generated_by,
            created_at=created_at,
            public_key=public_key,
            key_id=key_id,
        )


def _pack_write(
    *,
    scope: PackScope,
    target: IO[bytes],
    progress: Progress | None,
    generated_by: str,
    created_at: datetime,
    public_key: Any,
    key_id: str,
) -> PackSummary:
    summary = PackSummary(fingerprint=key_fingerprint(public_key))
    roles = RoleHistory.load(until=scope.end, team=scope.team)
    pack = _Pack(target)
    try:
        _runs_and_decisions(pack, scope, roles, progress, summary)
        _people(pack, scope, roles)
        _policies(pack, scope)
        _retention(pack, scope, summary)
        _incidents(pack, scope, summary)
        _audit_log(pack, scope, summary)
        pack.member(PUBLIC_KEY, [public_key_text(public_key).encode("ascii") + b"\n"])
        readme = render_to_string(
            "audit/evidence/README.md",
            {
                "scope": scope,
                "created_at": created_at,
                "generated_by": generated_by,
                "fingerprint": summary.fingerprint,
                "key_id": key_id,
                "summary": summary,
                "floor_days": retention_floor_days(),
                "version": generator_version(),
            },
        )
        pack.member("README.md", [readme.encode("utf-8")])
        manifest = {
            "format": PACK_FORMAT,
            "version": PACK_VERSION,
            "generator": {"name": GENERATOR, "version": generator_version()},
            "created_at": created_at.isoformat(),
            "created_by": generated_by,
            "period": {"from": scope.period_from.isoformat(), "to": scope.period_to.isoformat()},
            "team": scope.team_named(),
            "filters": scope.as_dict(),
            "key_id": key_id,
            "counts": {
                "runs": summary.runs,
                "decisions": summary.decisions,
                "audit_entries": summary.audit_entries,
                "incidents": summary.incidents,
                "purges": summary.purges,
            },
            "files": pack.files,
        }
        signed = {"manifest": manifest, "signature": sign(manifest)}
        pack.member(MANIFEST, [_json_bytes(signed)])
        summary.files = pack.files
    finally:
        pack.close()
    return summary


def evidence_scope_parse(
    *,
    period_from: str | date,
    period_to: str | date,
    agents: Iterable[str] = (),
    team: str | None = None,
) -> PackScope:
    """A period, agents and a team's slug typed by a person (command line, form); every problem
    reported. A pack is one team's: without a slug, the one team there is (an install of one
    team); with several, naming none is refused."""
    from runs.api_errors import ApplicationError

    errors: dict[str, list[str]] = {}

    def parse(name: str, value: str | date) -> date | None:
        if isinstance(value, date):
            return value
        try:
            return date.fromisoformat(str(value).strip())
        except ValueError:
            errors[name] = [f"{value!r} is not a date (YYYY-MM-DD)."]
            return None

    start = parse("period_from", period_from)
    end = parse("period_to", period_to)
    if start and end and end < start:
        errors["period_to"] = ["The end date is before the start date."]
    named = tuple(sorted({a.strip() for a in agents if a and a.strip()}))
    if any(len(a) > 100 for a in named):
        errors["agents"] = ["At most 100 characters each."]
    chosen = _pack_team(team, errors)
    if errors or start is None or end is None:
        raise ApplicationError(
            "validation_error", "Invalid evidence pack scope.", status_code=400, details=errors
        )
    return PackScope(period_from=start, period_to=end, agents=named, team=chosen)


def _pack_team(slug: str | None, errors: dict[str, list[str]]) -> Team | None:
    """The team named `slug`, or the only team; a problem in `errors` otherwise (teams_team is
    not row-secured: every slug may be named, and the pack then sees that team's rows only when
    the caller may: a command's operator, or the job of a person in it)."""
    if slug:
        team = Team.objects.filter(slug=slug.strip()).first()
        if team is None:
            errors["team"] = [f"No team {slug.strip()!r}."]
        return team
    teams = list(Team.objects.order_by("slug")[:2])
    if len(teams) == 1:
        return teams[0]
    slugs = ", ".join(Team.objects.order_by("slug").values_list("slug", flat=True))
    errors["team"] = [f"A pack is one team's: name the team (one of {slugs})."]
    return None


def evidence_scope_of_job(filters: dict[str, Any]) -> PackScope:
    return evidence_scope_parse(
        period_from=filters["period_from"],
        period_to=filters["period_to"],
        agents=filters.get("agents") or (),
        team=filters.get("team"),
    )


def evidence_job_create(*, user: Any, scope: PackScope) -> Any:
    """Queue an evidence pack as a background export job (progress and download as exports
    have); the Celery task starts after this transaction commits. Audited."""
    from django.db import transaction

    from audit.models import ExportFormat, ExportJob
    from audit.tasks import export_job_run_task
    from dashboard.audit import audit_record
    from runs.api_errors import ApplicationError

    signing_key_id()  # refuse now, not in the worker, when no key is set
    if scope.team is None or not current().sees(scope.team.pk):
        # a team the person is not in answers as one that does not exist
        raise ApplicationError(
            "validation_error", "A pack is one of your teams': name the team.", status_code=400
        )
    filters = {
        "period_from": scope.period_from.isoformat(),
        "period_to": scope.period_to.isoformat(),
        "agents": list(scope.agents),
        "team": scope.team.slug,
    }
    # the job is the team's (its task works under the job's team: audit.tasks)
    with transaction.atomic(), team_scope(scope.team.pk):
        job = ExportJob.objects.create(
            created_by=user,
            created_by_name=user.get_username(),
            format=ExportFormat.EVIDENCE,
            filters=filters,
            total_runs=scope.runs().count(),
        )
        audit_record(
            actor=user,
            action="evidence.queue",
            target=f"export:{job.pk}",
            details={"filters": filters, "runs": job.total_runs},
        )
        export_job_run_task.delay_on_commit(str(job.pk))  # type: ignore[attr-defined]
    return job
