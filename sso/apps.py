from django.apps import AppConfig


class SsoConfig(AppConfig):
    """Sign-in through the company's identity provider (OpenID Connect) and the people page."""

    name = "sso"
    verbose_name = "Single sign-on and people"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from sso import checks  # noqa: F401  (registers the settings checks)
