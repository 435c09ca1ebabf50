"""gunicorn's settings: read from the working directory (gunicorn's default `./gunicorn.conf.py`),
so the README's `gunicorn config.wsgi …` from a checkout and the image's `web` (in /app) both
take them. With LOG_FORMAT=json gunicorn's own lines (start, workers, signals, and one access
line per request) are one JSON object a line, like the app's (console.logs.JsonFormatter)."""

import os

if os.environ.get("LOG_FORMAT", "text").strip().lower() == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "console.logs.JsonFormatter"}},
        "handlers": {
            "json": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": "INFO", "handlers": ["json"]},
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["json"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["json"], "propagate": False},
        },
    }
