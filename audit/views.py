"""Audit pages: exports (streamed or queued), checkpoints and alerts, retention. Thin views."""

from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.db import transaction
from django.db.models import Case, When
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from audit.checkpoints import alert_acknowledge, alerts_seen, checkpoint_create
from audit.evidence import evidence_job_create, evidence_scope_parse
from audit.evidence_verify import key_fingerprint
from audit.exports import (
    ExportFilters,
    export_content_type,
    export_filters_parse,
    export_job_create,
    export_stream,
)
from audit.forms import (
    AcknowledgeForm,
    EvidencePackForm,
    ExportForm,
    IncidentOpenForm,
    IncidentUpdateForm,
    RetentionForm,
)
from audit.incidents import can_manage_incidents, incident_open, incident_update
from audit.models import ChainAlert, Checkpoint, ExportJob, ExportStatus, Incident, IncidentStatus
from audit.permissions import can_export, is_admin
from audit.retention import (
    retention_candidates,
    retention_floor_days,
    retention_policy_get,
    retention_policy_update,
    retention_purge,
)
from audit.signing import public_key_text, signing_key_id, signing_public_key
from audit.verify import OFFLINE_FILES
from dashboard.audit import AuditEntry, audit_record
from dashboard.views.common import is_htmx, render_polled
from runs import clock
from runs.api_errors import ApplicationError
from runs.models import Run
from teams import scope
from teams.backends import scope_with_permission
from teams.models import Team
from teams.scope import current, home_team_id


def _require(request: HttpRequest, allowed: bool, permission: str = "review.export") -> None:
    """Refused (403) without the permission in any team in sight; with it, the request sees only
    the teams where it is held (an export holds none of a team where the person only supervises;
    the streamed body is read under the same scope: teams.middleware)."""
    if not allowed:
        raise PermissionDenied("Exports are for auditors and admins.")
    scope.set_current(scope_with_permission(request.user, permission))


def _stream(request: HttpRequest, *, filters: ExportFilters, format: str, label: str) -> Any:
    if format == "jsonl":
        try:
            signing_key_id()
        except ImproperlyConfigured as exc:  # refuse before a byte is sent, not halfway
            return HttpResponse(str(exc), status=503, content_type="text/plain")
    stamp = clock.now().strftime("%Y%m%dT%H%M%SZ")
    audit_record(
        actor=request.user,
        action="export.download",
        target=label,
        details={"format": format, "filters": filters.as_dict()},
    )
    response = StreamingHttpResponse(
        export_stream(filters=filters, format=format), content_type=export_content_type(format)
    )
    # the name is built here from a timestamp and the format, never from what the user typed
    response["Content-Disposition"] = f'attachment; filename="intentledger-{stamp}.{format}"'
    response["Cache-Control"] = "no-store"
    return response


def _open_alerts() -> list[ChainAlert]:
    return alerts_seen(ChainAlert.objects.filter(acknowledged_at__isnull=True)[:30])[:10]


@login_required
@require_http_methods(["GET", "POST"])
def exports(request: HttpRequest) -> HttpResponseBase:
    _require(request, can_export(request.user))
    form = ExportForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        filters = export_filters_parse(
            created_from=data["created_from"].isoformat() if data["created_from"] else None,
            created_to=data["created_to"].isoformat() if data["created_to"] else None,
            agent=data["agent"],
            status=data["status"],
        )
        count = filters.queryset().count()
        if count <= settings.AUDIT_EXPORT_SYNC_MAX_RUNS:
            return _stream(request, filters=filters, format=data["format"], label="runs")
        job = export_job_create(user=request.user, filters=filters, format=data["format"])
        messages.info(request, f"{count} runs: the export runs in the background.")
        return redirect("audit:export_job", job_id=job.pk)
    jobs = ExportJob.objects.filter(created_by_id=request.user.pk)[:20]
    return render(
        request,
        "audit/exports.html",
        {
            "form": form,
            "evidence_form": EvidencePackForm(),
            "evidence_teams": _visible_teams(),
            "jobs": jobs,
            "alerts": _open_alerts(),
            "sync_max": settings.AUDIT_EXPORT_SYNC_MAX_RUNS,
            "ttl_hours": settings.AUDIT_EXPORT_TTL_HOURS,
            "offline_files": OFFLINE_FILES,
            "nav": "exports",
            "is_admin": is_admin(request.user),
        },
        status=400 if request.method == "POST" else 200,
    )


def _own_job(request: HttpRequest, job_id: UUID) -> ExportJob:
    _require(request, can_export(request.user))
    job = get_object_or_404(ExportJob, pk=job_id)
    if job.created_by_id != request.user.pk and not is_admin(request.user):
        raise Http404("No such export.")
    return job


def _visible_teams() -> list[Team]:
    """The teams whose pack the person may build (the form names one when there are several)."""
    scope = current()
    teams = Team.objects.order_by("slug")
    return list(teams if scope.teams is None else teams.filter(pk__in=scope.teams))


def _home_team_slug() -> str | None:
    """The team of the current scope's new rows (a person's one team, or the one they
    switched to), if there is one."""
    home = home_team_id()
    return Team.objects.filter(pk=home).values_list("slug", flat=True).first() if home else None


@login_required
@require_POST
def evidence_pack(request: HttpRequest) -> HttpResponseBase:
    """Queue an evidence pack for a period: always a background job, like a big export."""
    _require(request, can_export(request.user))
    form = EvidencePackForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            scope = evidence_scope_parse(
                period_from=data["period_from"],
                period_to=data["period_to"],
                agents=(data["agents"] or "").split(","),
                # a pack is one team's: the one named, else the team the person works in now
                team=data["team"] or _home_team_slug(),
            )
            job = evidence_job_create(user=request.user, scope=scope)
        except ImproperlyConfigured as exc:
            return HttpResponse(str(exc), status=503, content_type="text/plain")
        except ApplicationError as exc:
            form.add_error(None, exc.message)
        else:
            messages.info(request, f"Evidence pack of {job.total_runs} runs: building it now.")
            return redirect("audit:export_job", job_id=job.pk)
    return render(
        request,
        "audit/exports.html",
        {
            "form": ExportForm(),
            "evidence_form": form,
            "evidence_teams": _visible_teams(),
            "jobs": ExportJob.objects.filter(created_by_id=request.user.pk)[:20],
            "alerts": _open_alerts(),
            "sync_max": settings.AUDIT_EXPORT_SYNC_MAX_RUNS,
            "ttl_hours": settings.AUDIT_EXPORT_TTL_HOURS,
            "offline_files": OFFLINE_FILES,
            "nav": "exports",
            "is_admin": is_admin(request.user),
        },
        status=400,
    )


@login_required
def export_job(request: HttpRequest, job_id: UUID) -> HttpResponse:
    job = _own_job(request, job_id)
    if is_htmx(request):
        done = job.status not in (ExportStatus.QUEUED, ExportStatus.RUNNING)
        return render_polled(request, "audit/export_job.html#progress", {"job": job}, stop=done)
    return render(
        request,
        "audit/export_job.html",
        {"job": job, "nav": "exports", "is_admin": is_admin(request.user)},
    )


@login_required
def export_download(request: HttpRequest, job_id: UUID) -> FileResponse:
    job = _own_job(request, job_id)
    if job.status != ExportStatus.DONE or not job.path.is_file():
        raise Http404("This export is not ready, or it has expired.")
    audit_record(
        actor=request.user, action="export.download", target=f"export:{job.pk}", details={}
    )
    return FileResponse(
        job.path.open("rb"),
        as_attachment=True,
        filename=job.file_name,
        content_type=export_content_type(job.format),
    )


@login_required
def run_export(request: HttpRequest, run_id: UUID) -> HttpResponseBase:
    run = get_object_or_404(Run, pk=run_id)
    if not request.user.has_perm("review.export", run):  # seen, but not exported by them
        raise PermissionDenied("Exports of this run's team are for its auditors and admins.")
    _require(request, can_export(request.user))
    format = request.GET.get("format", "jsonl")
    if format not in ("jsonl", "csv"):
        raise Http404("Unknown format.")
    filters = export_filters_parse(run_id=str(run_id))
    return _stream(request, filters=filters, format=format, label=f"run:{run_id}")


@login_required
def checkpoints(request: HttpRequest) -> HttpResponse:
    _require(request, can_export(request.user) or is_admin(request.user))
    try:
        public_key = public_key_text(signing_public_key())
        key_id = signing_key_id()
        fingerprint = key_fingerprint(signing_public_key())
        key_error = ""
    except Exception as exc:  # an unset key is shown, not a 500
        public_key, key_id, fingerprint, key_error = "", "", "", str(exc)
    return render(
        request,
        "audit/checkpoints.html",
        {
            "checkpoints": Checkpoint.objects.all()[:30],
            "alerts": alerts_seen(ChainAlert.objects.all()[:100])[:30],
            "public_key": public_key,
            "key_id": key_id,
            "fingerprint": fingerprint,
            "key_error": key_error,
            "is_admin": is_admin(request.user),
            "ack_form": AcknowledgeForm(),
            "nav": "checkpoints",
        },
    )


@login_required
@require_POST
def checkpoint_now(request: HttpRequest) -> HttpResponse:
    _require(request, is_admin(request.user), "review.manage_audit")
    result = checkpoint_create(actor=f"user:{request.user.get_username()}")
    if result.checkpoint is not None:
        audit_record(
            actor=request.user,
            action="audit.checkpoint",
            target=f"checkpoint:{result.checkpoint.seq}",
            details={"hash": result.checkpoint.hash, "leaves": result.checkpoint.leaves},
        )
        messages.success(
            request,
            f"Checkpoint {result.checkpoint.seq} signed over {result.checkpoint.leaves} new heads.",
        )
    else:
        messages.error(request, result.refused)
    return redirect("audit:checkpoints")


@login_required
@require_POST
def alert_ack(request: HttpRequest, alert_id: int) -> HttpResponse:
    _require(request, is_admin(request.user), "review.manage_audit")
    form = AcknowledgeForm(request.POST)
    if not form.is_valid():
        messages.error(request, "A note is required to acknowledge an alert.")
        return redirect("audit:checkpoints")
    try:
        alert_acknowledge(alert_id=alert_id, user=request.user, note=form.cleaned_data["note"])
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("audit:checkpoints")


@login_required
@require_http_methods(["GET", "POST"])
def retention(request: HttpRequest) -> HttpResponse:
    _require(request, is_admin(request.user), "review.manage_audit")
    policy = retention_policy_get()
    form = RetentionForm(
        request.POST or None, initial={"enabled": policy.enabled, "keep_days": policy.keep_days}
    )
    if request.method == "POST" and "purge" in request.POST:
        result = retention_purge(actor=request.user, force=True)
        if result.refused:
            messages.error(request, f"Nothing purged: {result.refused}")
        else:
            messages.success(
                request,
                f"Purged {result.purged} runs after signing checkpoint {result.checkpoint_seq}.",
            )
        return redirect("audit:retention")
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                retention_policy_update(
                    user=request.user,
                    enabled=form.cleaned_data["enabled"],
                    keep_days=form.cleaned_data["keep_days"],
                )
        except ApplicationError as exc:
            form.add_error("keep_days", exc.message)
        else:
            messages.success(request, "Retention policy saved.")
            return redirect("audit:retention")
    purges = _recent_purges()
    return render(
        request,
        "audit/retention.html",
        {
            "form": form,
            "policy": policy,
            "candidates": retention_candidates(),
            "floor_days": retention_floor_days(),
            "purges": purges,
            "nav": "retention",
            "is_admin": True,
        },
        status=400 if request.method == "POST" else 200,
    )


def _recent_purges() -> list[Any]:
    from review.models import AuditEntry

    return list(
        AuditEntry.objects.filter(action="retention.purge").only(
            "at", "note", "actor_name", "target"
        )[:20]
    )


def _incidents_allowed(request: HttpRequest) -> None:
    if not can_manage_incidents(request.user):
        raise PermissionDenied("Incidents are for auditors and admins.")
    # the incidents of the teams where the person audits (admins audit too), and runs of those
    scope.set_current(scope_with_permission(request.user, "review.export"))


@login_required
@require_http_methods(["GET", "POST"])
def incidents(request: HttpRequest) -> HttpResponseBase:
    """Every incident, open ones first by deadline; a form to open one on runs."""
    _incidents_allowed(request)
    form = IncidentOpenForm(request.POST or None, initial={"runs": request.GET.get("run", "")})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            incident = incident_open(
                user=request.user,
                run_ids=form.run_ids(),
                title=data["title"],
                severity=data["severity"],
                aware_at=data["aware_at"],
                notes=data["notes"],
            )
        except ApplicationError as exc:
            for field, problems in (exc.details or {}).items():
                form.add_error(field if field in form.fields else None, " ".join(problems))
            if not exc.details:
                form.add_error(None, exc.message)
        else:
            messages.success(request, f"Incident {incident.pk} opened: its runs are held.")
            return redirect("audit:incident", incident_id=incident.pk)
    now = clock.now()
    rows = [
        (i, (i.report_due_at - now).total_seconds() / 3600)
        for i in Incident.objects.prefetch_related("runs").order_by(
            Case(When(status=IncidentStatus.OPEN, then=0), default=1), "report_due_at"
        )[:200]
    ]
    return render(
        request,
        "audit/incidents.html",
        {
            "form": form,
            "rows": rows,
            "nav": "incidents",
            "is_admin": is_admin(request.user),
        },
        status=400 if request.method == "POST" else 200,
    )


@login_required
@require_http_methods(["GET", "POST"])
def incident(request: HttpRequest, incident_id: int) -> HttpResponseBase:
    """One incident: the countdown to its reporting deadline, its runs, its history."""
    _incidents_allowed(request)
    item = get_object_or_404(Incident, pk=incident_id)
    form = IncidentUpdateForm(
        request.POST or None, initial={"status": item.status, "notes": item.notes}
    )
    if request.method == "POST" and form.is_valid():
        try:
            incident_update(
                user=request.user,
                incident_id=item.pk,
                status=form.cleaned_data["status"],
                notes=form.cleaned_data["notes"],
                note=form.cleaned_data["note"],
            )
        except ApplicationError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, "Incident updated.")
            return redirect("audit:incident", incident_id=item.pk)
    hours_left = (item.report_due_at - clock.now()).total_seconds() / 3600
    context = {
        "incident": item,
        "hours_left": hours_left,
        "days_left": int(hours_left // 24) if hours_left > 0 else 0,
        "rest_hours": int(hours_left % 24) if hours_left > 0 else 0,
        "runs": list(item.runs.order_by("run_id").values_list("run_id", flat=True)),
        "history": AuditEntry.objects.filter(target=f"incident:{item.pk}").order_by("at", "id"),
        "form": form,
        "nav": "incidents",
        "is_admin": is_admin(request.user),
    }
    if is_htmx(request):
        return render(request, "audit/incident.html#countdown", context)
    return render(
        request, "audit/incident.html", context, status=400 if request.method == "POST" else 200
    )
