"""A real `python -m config.serve` (granian, as the image's `web` starts it) on the test database,
for the tests of the server's own duties: signals, recycling, limits, logs."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.processes import (
    STARTUP_TIMEOUT,
    free_port,
    server_env,
    spawn,
    stop_process,
    wait_for_http,
)


class Served:
    """A running `python -m config.serve`: its URL, its main process and its log."""

    def __init__(self, url: str, proc: subprocess.Popen[bytes]) -> None:
        self.url = url
        self.proc = proc
        self.log: Path = proc.log_path  # type: ignore[attr-defined]

    def worker_pids(self) -> set[int]:
        """The pids of the main process's live children (granian's workers)."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return {int(pid) for pid in children.read_text().split()}

    def said(self, pattern: str) -> bool:
        return re.search(pattern, self.log.read_text()) is not None

    def wait_until(self, what: str, done: Callable[[], bool], timeout: float = 120) -> None:
        """Return once `done()`; fail (with the log's tail) if the server exits or `timeout`
        passes first (this only ends a hang: nothing is asserted about the time taken)."""
        deadline = time.monotonic() + timeout
        while not done():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen\n{self.log.read_text()[-4000:]}")
            time.sleep(0.1)


@contextmanager
def config_serve(
    env: dict[str, str] | None = None,
    *,
    workers: int = 1,
    threads: int = 2,
    log_name: str = "config-serve",
    keep_connections: bool = True,
) -> Iterator[Served]:
    """`python -m config.serve` on a free port of 127.0.0.1 for the block, answering."""
    port = free_port()
    args = [sys.executable, "-m", "config.serve", "--port", str(port)]
    args += ["--workers", str(workers), "--threads", str(threads)]
    proc = spawn(
        args,
        log_name=f"{log_name}-{port}",
        env=server_env(env, keep_connections=keep_connections),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/healthz", timeout=STARTUP_TIMEOUT, proc=proc)
        yield Served(url, proc)
    finally:
        stop_process(proc, timeout=30)
