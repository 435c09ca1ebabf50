"""Log filters for the dashboard: an expected refusal is one line, not a traceback."""

import logging


class ForbiddenWithoutTraceback(logging.Filter):
    """Django logs a PermissionDenied 403 with its exception (a traceback for every click of a
    person without the right role). Keep the line ("Forbidden (Permission denied): /path"),
    drop the traceback; real errors (5xx) keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
