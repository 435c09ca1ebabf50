"""The audit log in the Django admin: readable, never editable (the table is append-only)."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from review.models import AuditEntry


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
