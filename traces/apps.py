from django.apps import AppConfig


class TracesConfig(AppConfig):
    """OpenTelemetry traces made from the committed journal (issue 49, docs/traces.md)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "traces"

    def ready(self) -> None:
        from traces.instrumentation import instrument_server

        instrument_server()
