"""The shell in Django's admin. Its user admin is audited: a person added, changed or deleted
there leaves the same audit entry the people page writes (the admin's change view is one
transaction, which the entry joins). The audit log is readable there, never editable (the table
is append-only)."""

from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from dashboard.services import people as services
from review.models import AuditEntry

admin.site.unregister(User)


@admin.register(User)
class AuditedUserAdmin(UserAdmin):
    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)  # the groups are saved by now
        services.people_admin_saved(
            actor=request.user,
            user=form.instance,
            created=not change,
            changed=list(form.changed_data),
        )

    def user_change_password(
        self, request: HttpRequest, id: str, form_url: str = ""
    ) -> HttpResponse:
        """The admin's own password form (not the change view): audited in its transaction."""
        with transaction.atomic():
            response = super().user_change_password(request, id, form_url)
            if request.method == "POST" and response.status_code == 302:
                services.people_admin_password_set(actor=request.user, user_id=int(id))
        return response

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        services.people_admin_deleted(actor=request.user, users=[obj])
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        services.people_admin_deleted(actor=request.user, users=list(queryset))
        super().delete_queryset(request, queryset)


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ("at", "actor_name", "action", "target", "note")
    list_filter = ("action",)
    search_fields = ("actor_name", "target", "note")
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
