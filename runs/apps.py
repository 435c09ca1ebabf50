from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Run journal"

    def ready(self) -> None:
        from runs import recovery, schema  # noqa: F401  (the OpenAPI auth scheme, system checks)
