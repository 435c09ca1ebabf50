from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit: checkpoints, exports, retention"
    default_auto_field = "django.db.models.BigAutoField"
