"""Hold N PostgreSQL connections until killed: CI runs the suite beside another user of the
server (`.ci/run` holds 50 of max_connections=100 while scripts/test runs).

    python .ci/hold_connections.py 50 [postgres://root@127.0.0.1:5432/postgres]
"""

import signal
import sys
import time

import psycopg


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    url = sys.argv[2] if len(sys.argv) > 2 else "postgres://root@127.0.0.1:5432/postgres"
    held = [psycopg.connect(url, autocommit=True, application_name="ci-hold") for _ in range(count)]
    print(f"holding {len(held)} PostgreSQL connections", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(5)
            for conn in held:  # still held (a connection the server dropped would not count)
                conn.execute("SELECT 1")
    finally:
        for conn in held:
            conn.close()


if __name__ == "__main__":
    main()
