#!/usr/bin/env python
"""Django's command-line utility for Agent Ledger."""

import os
import sys

# commands an auditor runs on a machine that is not the server: no settings, no SECRET_KEY,
# no database (the same code as `python -m audit.verify`)
OFFLINE_COMMANDS = {"verify_export"}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in OFFLINE_COMMANDS:
        from audit.verify import main as verify_export

        sys.argv[0] = "manage.py verify_export"
        sys.exit(verify_export(sys.argv[2:]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
