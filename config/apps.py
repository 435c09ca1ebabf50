from django.apps import AppConfig


class DeploymentConfig(AppConfig):
    """The deployment's own checks (config.deployment): `manage.py check --deploy` and the
    start-up warnings of the Celery worker and beat."""

    name = "config"
    label = "deployment"
    verbose_name = "Deployment"

    def ready(self) -> None:
        from celery.signals import beat_init, worker_init

        from config import deployment

        worker_init.connect(deployment.worker_start_check, weak=False)
        beat_init.connect(deployment.beat_start_check, weak=False)
