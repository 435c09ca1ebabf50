from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Run journal"

    def ready(self) -> None:
        from runs import schema  # noqa: F401  (registers the OpenAPI auth scheme)
