"""A real `python -m config.serve` (granian, as the image's `web` starts it) on the test database,
for the tests of the server's own duties: signals, recycling, limits, logs."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.processes import web_server_process


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
    """`python -m config.serve` on a free port of 127.0.0.1 for the block, answering /healthz
    (tests.processes.web_server_process); 30 s to stop, for the tests of a graceful stop."""
    with web_server_process(
        env=env,
        workers=workers,
        threads=threads,
        log_name=log_name,
        ready_path="/healthz",
        keep_connections=keep_connections,
        stop_timeout=30,
    ) as (url, proc):
        yield Served(url, proc)
