"""Read-mostly admin views of the tool side's tables (for operators; the dashboard is review/)."""

from django.contrib import admin

from tools.models import IdempotencyKey, KnowledgeArticle, OutboundEmail, Ticket, TicketComment


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(admin.ModelAdmin):
    list_display = ["key", "tool", "state", "status_code", "attempt", "locked_at", "completed_at"]
    list_filter = ["state", "tool"]
    search_fields = ["key"]
    readonly_fields = [f.name for f in IdempotencyKey._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Ticket)
class TicketAdmin(admin.ModelAdmin):
    list_display = ["id", "customer", "subject", "status", "created_at", "closed_at"]
    list_filter = ["status"]
    search_fields = ["customer", "subject"]


@admin.register(OutboundEmail)
class OutboundEmailAdmin(admin.ModelAdmin):
    list_display = ["id", "to", "subject", "message_id", "created_at"]
    search_fields = ["to", "message_id", "idempotency_key"]
    readonly_fields = [f.name for f in OutboundEmail._meta.fields]


admin.site.register(TicketComment)
admin.site.register(KnowledgeArticle)
