from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The operator's console: run timeline, fleet overview, run actions, metrics."""

    name = "console"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from console import metrics

        metrics.register_collector()
