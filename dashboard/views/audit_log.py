"""The audit log page: every person's action, filtered and paged."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.forms import AuditFilterForm
from dashboard.views.common import is_htmx, require_perm
from review.models import AuditEntry

AUDIT_PAGE = 50


@require_GET
@require_perm("view_auditentry")
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET or None)
    data = form.cleaned_data if form.is_valid() else {}
    qs = AuditEntry.objects.all()
    if data.get("actor"):
        qs = qs.filter(actor_name=data["actor"].strip())
    if data.get("action"):
        qs = qs.filter(action__startswith=data["action"].strip())
    if data.get("target"):
        qs = qs.filter(target__contains=data["target"].strip())
    if data.get("date_from"):
        qs = qs.filter(at__date__gte=data["date_from"])
    if data.get("date_to"):
        qs = qs.filter(at__date__lte=data["date_to"])
    page = data.get("page") or 1
    offset = (page - 1) * AUDIT_PAGE
    rows = list(qs.order_by("-at", "-id")[offset : offset + AUDIT_PAGE + 1])
    context = {
        "nav": "audit",
        "form": form,
        "entries": rows[:AUDIT_PAGE],
        "has_next": len(rows) > AUDIT_PAGE,
        "page": page,
    }
    if is_htmx(request):
        return render(request, "dashboard/audit.html#entries", context)
    return render(request, "dashboard/audit.html", context)
