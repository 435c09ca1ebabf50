from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "tools"
    verbose_name = "Tool side"

    def ready(self) -> None:
        """Register the built-in tools, then any named in settings.TOOLS_EXTRA_MODULES."""
        from tools import support  # noqa: F401
        from tools.registry import tools_load_extra

        tools_load_extra()
