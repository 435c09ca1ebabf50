from django.apps import AppConfig


class DemoConfig(AppConfig):
    """`scripts/demo`'s home: its management commands (demo_seed, demo_story), the embedded
    services it starts before the Procfile (embedded.py) and the Procfile itself."""

    name = "demo"
    verbose_name = "Demo"
