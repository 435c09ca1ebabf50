"""Stand-in for the granian branch's launcher (config/serve.py there), with its command line, so
the tests and the bench can start the web server the way production will; dropped at merge.

    python -m config.serve [--host H] [--port P] [--workers N] [--threads N]
"""

from __future__ import annotations

import argparse
import os

from granian import Granian
from granian.constants import Interfaces
from granian.log import LogLevels


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m config.serve")
    parser.add_argument("--host", default=os.environ.get("WEB_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WEB_WORKERS", "2")))
    parser.add_argument("--threads", type=int, default=int(os.environ.get("WEB_THREADS", "8")))
    args = parser.parse_args()
    level = os.environ.get("LOG_LEVEL", "INFO").lower()
    Granian(
        target="config.wsgi:application",
        interface=Interfaces.WSGI,
        address=args.host,
        port=args.port,
        workers=args.workers,
        blocking_threads=args.threads,
        websockets=False,
        log_level=LogLevels(level) if level in LogLevels._value2member_map_ else LogLevels.info,
    ).serve()


if __name__ == "__main__":
    main()
